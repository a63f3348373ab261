/* dequant: ggml tensor types, their conversion to fp32 and back (dq_quantize: the
 * round-to-nearest quantisers that ggml's reference functions define, for our writer).
 *
 * Type ids are ggml's (the numbers stored in GGUF tensor infos). Supported: F32, F16, BF16,
 * Q8_0 (blocks of 32: fp16 scale d, 32 int8 q; x = d * q) and Q4_0 (blocks of 32: fp16
 * scale d, 16 bytes; byte j holds element j in its low nibble and element j + 16 in its
 * high nibble; x = d * (q - 8)). Every other type has a name for messages but no
 * conversion. Little-endian data, as GGUF specifies; the host is assumed little-endian.
 *
 * Ownership: pure functions over caller buffers. */
#ifndef TWIN_DEQUANT_H
#define TWIN_DEQUANT_H

#include <stddef.h>
#include <stdint.h>

enum {
    DQ_F32 = 0,
    DQ_F16 = 1,
    DQ_Q4_0 = 2,
    DQ_Q8_0 = 8,
    DQ_BF16 = 30,
};

/* ggml's name for a type id ("Q4_K", ...), or "unknown". */
const char *dq_type_name(uint32_t type);
/* 1 when dq_convert handles the type, with its block size in elements and bytes. */
int dq_supported(uint32_t type, int64_t *block_elems, int64_t *block_bytes);
/* Bytes that n elements of the type occupy: 0 with *bytes set, -1 when the type is
 * unsupported, n is not a whole number of blocks, or the size overflows. */
int dq_bytes(uint32_t type, uint64_t n, uint64_t *bytes);

float dq_f16_to_f32(uint16_t h);
float dq_bf16_to_f32(uint16_t h);
uint16_t dq_f32_to_f16(float f);   /* round to nearest even (tests, writers) */
uint16_t dq_f32_to_bf16(float f);  /* round to nearest even */

/* Converts n elements (a whole number of blocks) of `type` at src to fp32 at dst.
 * 0, or -1 for an unsupported type. */
int dq_convert(uint32_t type, const void *src, float *dst, uint64_t n);

/* Stores n fp32 values (a whole number of blocks) as `type` at dst (dq_bytes(type, n)
 * bytes), rounding to nearest: F16/BF16 ties to even; Q8_0 d = max|x| / 127, q =
 * round(x / d); Q4_0 d = m / -8 with m the element of largest magnitude (its sign kept),
 * q = min(15, trunc(x / d + 8.5)), as ggml's quantize_row_*_ref. 0, or -1 for an
 * unsupported type. */
int dq_quantize(uint32_t type, const float *src, void *dst, uint64_t n);

#endif
