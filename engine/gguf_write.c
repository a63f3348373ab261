/* gguf_write: see gguf_write.h. The metadata is serialised into one growing buffer as
 * keys are added; tensors are laid out at gguf_w_write, which knows them all. */
#include "engine/gguf_write.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dequant.h"

typedef struct {
    char *name;
    uint64_t ne0, ne1, ne2, bytes;   /* ne2 0: at most 2-D */
    uint32_t type;
    const void *data;
} wtensor_t;

struct gguf_writer {
    uint8_t *kv;          /* serialised key/values */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    wtensor_t *t;
    size_t n_t, cap_t;
    char errmsg[512];
};

static void wfail(gguf_writer_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wfail(gguf_writer_t *w, const char *fmt, ...) {
    if (w->errmsg[0]) return;   /* the first error is the one to report */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->errmsg, sizeof w->errmsg, fmt, ap);
    va_end(ap);
}

gguf_writer_t *gguf_w_new(void) { return calloc(1, sizeof(gguf_writer_t)); }

void gguf_w_free(gguf_writer_t *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w->kv);
    free(w);
}

const char *gguf_w_errmsg(const gguf_writer_t *w) { return w->errmsg; }

static void put(gguf_writer_t *w, const void *p, size_t n) {
    if (w->errmsg[0]) return;
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 4096;
        while (cap < w->kv_len + n) cap *= 2;
        uint8_t *b = realloc(w->kv, cap);
        if (!b) {
            wfail(w, "out of memory for %zu bytes of metadata", cap);
            return;
        }
        w->kv = b;
        w->kv_cap = cap;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
}

static void put_le(gguf_writer_t *w, uint64_t v, int bytes) {
    uint8_t b[8];
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, (size_t)bytes);
}

static void put_str(gguf_writer_t *w, const char *s, uint64_t len) {
    put_le(w, len, 8);
    put(w, s, (size_t)len);
}

static void key(gguf_writer_t *w, const char *k, uint32_t type) {
    put_str(w, k, strlen(k));
    put_le(w, type, 4);
    w->n_kv++;
}

void gguf_w_u32(gguf_writer_t *w, const char *k, uint32_t v) {
    key(w, k, GGUF_U32);
    put_le(w, v, 4);
}

void gguf_w_f32(gguf_writer_t *w, const char *k, float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    key(w, k, GGUF_F32);
    put_le(w, b, 4);
}

void gguf_w_str(gguf_writer_t *w, const char *k, const char *s) {
    key(w, k, GGUF_STRING);
    put_str(w, s, strlen(s));
}

void gguf_w_arr_str(gguf_writer_t *w, const char *k, const char *const *p,
                    const uint32_t *len, uint64_t n) {
    key(w, k, GGUF_ARRAY);
    put_le(w, GGUF_STRING, 4);
    put_le(w, n, 8);
    for (uint64_t i = 0; i < n; i++) put_str(w, p[i], len[i]);
}

/* bytes of one element of a scalar GGUF type, 0 for strings and arrays */
static int scalar_bytes(uint32_t type) {
    static const int sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return type < 13 ? sz[type] : 0;
}

void gguf_w_arr_num(gguf_writer_t *w, const char *k, uint32_t type, const void *data,
                    uint64_t n) {
    int es = scalar_bytes(type);
    if (es == 0) {
        wfail(w, "%s: GGUF type %u is not a number type", k, (unsigned)type);
        return;
    }
    key(w, k, GGUF_ARRAY);
    put_le(w, type, 4);
    put_le(w, n, 8);
    put(w, data, (size_t)(n * (uint64_t)es));
}

void gguf_w_copy(gguf_writer_t *w, const gguf_kv_t *kv) {
    if (kv->type == GGUF_STRING) {
        key(w, kv->key, GGUF_STRING);
        put_str(w, kv->s.p, kv->s.len);
    } else if (kv->type == GGUF_ARRAY && kv->arr_type == GGUF_STRING) {
        /* the reader checked the strings: they lie one after the other from arr_data */
        const uint8_t *p = kv->arr_data;
        for (uint64_t i = 0; i < kv->arr_n; i++) {
            uint64_t len;
            memcpy(&len, p, 8);
            p += 8 + len;
        }
        key(w, kv->key, GGUF_ARRAY);
        put_le(w, GGUF_STRING, 4);
        put_le(w, kv->arr_n, 8);
        put(w, kv->arr_data, (size_t)(p - kv->arr_data));
    } else if (kv->type == GGUF_ARRAY) {
        if (scalar_bytes(kv->arr_type) == 0) {
            wfail(w, "%s: an array of arrays cannot be copied", kv->key);
            return;
        }
        gguf_w_arr_num(w, kv->key, kv->arr_type, kv->arr_data, kv->arr_n);
    } else if (scalar_bytes(kv->type) > 0) {
        key(w, kv->key, kv->type);
        put_le(w, kv->u, scalar_bytes(kv->type));
    } else {
        wfail(w, "%s: unknown value type %u", kv->key, (unsigned)kv->type);
    }
}

void gguf_w_tensor(gguf_writer_t *w, const char *name, uint64_t ne0, uint64_t ne1,
                   uint32_t type, const void *data) {
    gguf_w_tensor3(w, name, ne0, ne1, 0, type, data);
}

void gguf_w_tensor3(gguf_writer_t *w, const char *name, uint64_t ne0, uint64_t ne1,
                    uint64_t ne2, uint32_t type, const void *data) {
    if (w->errmsg[0]) return;
    uint64_t bytes;
    if (ne2 && !ne1) {
        wfail(w, "tensor %s: a third dimension without a second", name);
        return;
    }
    uint64_t n = ne0 * (ne1 ? ne1 : 1) * (ne2 ? ne2 : 1);
    int64_t be;
    if (!dq_supported(type, &be, NULL) || ne0 % (uint64_t)be != 0 ||
        dq_bytes(type, n, &bytes) != 0) {
        wfail(w, "tensor %s: %llu x %llu cannot be stored as %s (rows must be whole blocks)",
              name, (unsigned long long)ne0, (unsigned long long)ne1, dq_type_name(type));
        return;
    }
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) {
            wfail(w, "tensor %s added twice", name);
            return;
        }
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor_t *t = realloc(w->t, cap * sizeof *t);
        if (!t) {
            wfail(w, "out of memory");
            return;
        }
        w->t = t;
        w->cap_t = cap;
    }
    char *nm = strdup(name);
    if (!nm) {
        wfail(w, "out of memory");
        return;
    }
    w->t[w->n_t++] = (wtensor_t){nm, ne0, ne1, ne2, bytes, type, data};
}

static uint64_t pad_to(uint64_t off) { return (GGUF_W_ALIGN - off % GGUF_W_ALIGN) % GGUF_W_ALIGN; }

int gguf_w_write(gguf_writer_t *w, const char *path) {
    if (w->errmsg[0]) return -1;
    FILE *f = fopen(path, "wb");
    if (!f) {
        wfail(w, "%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    static const uint8_t zeros[GGUF_W_ALIGN];
    /* the header and tensor infos go through the metadata buffer, after the keys */
    size_t kv_len = w->kv_len;
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        wtensor_t *t = &w->t[i];
        put_str(w, t->name, strlen(t->name));
        put_le(w, t->ne2 ? 3 : t->ne1 ? 2 : 1, 4);
        put_le(w, t->ne0, 8);
        if (t->ne1) put_le(w, t->ne1, 8);
        if (t->ne2) put_le(w, t->ne2, 8);
        put_le(w, t->type, 4);
        put_le(w, off, 8);
        off += t->bytes + pad_to(t->bytes);
    }
    uint8_t head[24] = {'G', 'G', 'U', 'F', 3};
    uint64_t nt = w->n_t, nk = w->n_kv;
    memcpy(head + 8, &nt, 8);
    memcpy(head + 16, &nk, 8);
    int ok = !w->errmsg[0] && fwrite(head, 1, 24, f) == 24 &&
             fwrite(w->kv, 1, w->kv_len, f) == w->kv_len &&
             fwrite(zeros, 1, pad_to(24 + w->kv_len), f) == pad_to(24 + w->kv_len);
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor_t *t = &w->t[i];
        ok = fwrite(t->data, 1, t->bytes, f) == t->bytes &&
             fwrite(zeros, 1, pad_to(t->bytes), f) == pad_to(t->bytes);
    }
    w->kv_len = kv_len;   /* the infos are rebuilt by a second write */
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        wfail(w, "%s: write failed: %s", path, errno ? strerror(errno) : "short write");
        remove(path);
        return -1;
    }
    return 0;
}
