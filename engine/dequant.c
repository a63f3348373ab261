/* dequant: ggml block formats to fp32 and back. */
#include "engine/dequant.h"

#include <math.h>
#include <string.h>

const char *dq_type_name(uint32_t type) {
    static const char *names[] = {
        "F32",  "F16",    "Q4_0",    "Q4_1",   "Q4_2", "Q4_3", "Q5_0",  "Q5_1",
        "Q8_0", "Q8_1",   "Q2_K",    "Q3_K",   "Q4_K", "Q5_K", "Q6_K",  "Q8_K",
        "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
        "I8",   "I16",    "I32",     "I64",    "F64",  "IQ1_M", "BF16",
    };
    return type < sizeof names / sizeof names[0] ? names[type] : "unknown";
}

int dq_supported(uint32_t type, int64_t *block_elems, int64_t *block_bytes) {
    int64_t e, b;
    switch (type) {
    case DQ_F32: e = 1, b = 4; break;
    case DQ_F16:
    case DQ_BF16: e = 1, b = 2; break;
    case DQ_Q8_0: e = 32, b = 34; break;
    case DQ_Q4_0: e = 32, b = 18; break;
    default: return 0;
    }
    if (block_elems) *block_elems = e;
    if (block_bytes) *block_bytes = b;
    return 1;
}

int dq_bytes(uint32_t type, uint64_t n, uint64_t *bytes) {
    int64_t e, b;
    if (!dq_supported(type, &e, &b) || n % (uint64_t)e != 0) return -1;
    uint64_t blocks = n / (uint64_t)e;
    if (blocks > UINT64_MAX / (uint64_t)b) return -1;
    *bytes = blocks * (uint64_t)b;
    return 0;
}

float dq_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
    if (e == 0) {
        float v = ldexpf((float)m, -24); /* zero or subnormal */
        return sign ? -v : v;
    }
    if (e == 31) x = sign | 0x7f800000u | (m << 13);
    else x = sign | ((e - 15 + 127) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

float dq_bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t dq_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00;     /* NaN */
    if (ax >= 0x477ff000u) return sign | 0x7c00;    /* >= 65520 rounds to infinity */
    if (ax < 0x38800000u) {                         /* below 2^-14: subnormal or zero */
        float v;
        memcpy(&v, &ax, 4);
        return sign | (uint16_t)lrintf(v * 16777216.0f); /* units of 2^-24, ties to even */
    }
    uint32_t h = ((((ax >> 23) - 127 + 15)) << 10) | ((ax >> 13) & 0x3ff);
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* a carry moves into the exponent */
    return sign | (uint16_t)h;
}

uint16_t dq_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

static uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

int dq_convert(uint32_t type, const void *src, float *dst, uint64_t n) {
    const uint8_t *s = src;
    switch (type) {
    case DQ_F32:
        memcpy(dst, s, n * 4);
        return 0;
    case DQ_F16:
        for (uint64_t i = 0; i < n; i++) dst[i] = dq_f16_to_f32(rd16(s + 2 * i));
        return 0;
    case DQ_BF16:
        for (uint64_t i = 0; i < n; i++) dst[i] = dq_bf16_to_f32(rd16(s + 2 * i));
        return 0;
    case DQ_Q8_0:
        for (uint64_t b = 0; b < n / 32; b++, s += 34, dst += 32) {
            float d = dq_f16_to_f32(rd16(s));
            for (int j = 0; j < 32; j++) dst[j] = d * (float)(int8_t)s[2 + j];
        }
        return 0;
    case DQ_Q4_0:
        for (uint64_t b = 0; b < n / 32; b++, s += 18, dst += 32) {
            float d = dq_f16_to_f32(rd16(s));
            for (int j = 0; j < 16; j++) {
                dst[j] = d * (float)((s[2 + j] & 0x0f) - 8);
                dst[j + 16] = d * (float)((s[2 + j] >> 4) - 8);
            }
        }
        return 0;
    default:
        return -1;
    }
}

static void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

int dq_quantize(uint32_t type, const float *src, void *dst, uint64_t n) {
    uint8_t *d = dst;
    switch (type) {
    case DQ_F32:
        memcpy(d, src, n * 4);
        return 0;
    case DQ_F16:
    case DQ_BF16:
        for (uint64_t i = 0; i < n; i++)
            wr16(d + 2 * i, type == DQ_F16 ? dq_f32_to_f16(src[i]) : dq_f32_to_bf16(src[i]));
        return 0;
    case DQ_Q8_0:
        for (uint64_t b = 0; b < n / 32; b++, src += 32, d += 34) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(src[j]));
            float s = amax / 127, id = s ? 1.0f / s : 0.0f;
            wr16(d, dq_f32_to_f16(s));
            for (int j = 0; j < 32; j++) d[2 + j] = (uint8_t)(int8_t)roundf(src[j] * id);
        }
        return 0;
    case DQ_Q4_0:
        for (uint64_t b = 0; b < n / 32; b++, src += 32, d += 18) {
            float amax = 0, mx = 0;
            for (int j = 0; j < 32; j++)
                if (fabsf(src[j]) > amax) {
                    amax = fabsf(src[j]);
                    mx = src[j];
                }
            float s = mx / -8, id = s ? 1.0f / s : 0.0f;
            wr16(d, dq_f32_to_f16(s));
            for (int j = 0; j < 16; j++) {
                int lo = (int)(src[j] * id + 8.5f), hi = (int)(src[j + 16] * id + 8.5f);
                lo = lo > 15 ? 15 : lo;
                hi = hi > 15 ? 15 : hi;
                d[2 + j] = (uint8_t)(lo | (hi << 4));
            }
        }
        return 0;
    default:
        return -1;
    }
}
