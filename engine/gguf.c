/* gguf: parsing with a bounds-checked cursor; every read names the offset it failed at. */
#include "engine/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/dequant.h"

#define MAX_KEY_LEN 65535     /* the GGUF spec's limit */
#define MAX_NAME_LEN 4096
#define MAX_ARRAY_DEPTH 8
#define MAX_ALIGNMENT (1u << 30)
/* Counts above this are called absurd rather than truncated (vocabularies and merge lists,
 * the largest arrays, are under 2^20) */
#define MAX_PLAUSIBLE ((uint64_t)1 << 28)

typedef struct {
    const uint8_t *p;
    uint64_t size, off;
    const char *path;
    char *err;
    size_t errlen;
    int failed;           /* the first failure's message is kept */
} cur_t;

static int fail(cur_t *c, const char *what) {
    if (!c->failed)
        snprintf(c->err, c->errlen,
                 "%s: truncated or damaged GGUF: %s at byte %llu (file has %llu)", c->path, what, (unsigned long long)c->off, (unsigned long long)c->size);
    c->failed = 1;
    return -1;
}

static int need(cur_t *c, uint64_t n, const char *what) {
    if (c->failed) return -1;
    if (n > c->size - c->off) return fail(c, what);
    return 0;
}

static uint64_t rd_le(cur_t *c, int bytes, const char *what) {
    if (need(c, (uint64_t)bytes, what) != 0) return 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)c->p[c->off + i] << (8 * i);
    c->off += (uint64_t)bytes;
    return v;
}

static int rd_str(cur_t *c, uint64_t max, gguf_str_t *s, const char *what) {
    uint64_t len = rd_le(c, 8, what);
    if (c->failed) return -1;
    if (len > max) {
        char m[160];
        snprintf(m, sizeof m, "%s of absurd length %llu", what, (unsigned long long)len);
        return fail(c, m);
    }
    if (need(c, len, what) != 0) return -1;
    s->p = (const char *)c->p + c->off;
    s->len = len;
    c->off += len;
    return 0;
}

static int scalar_size(uint32_t t) {
    static const int sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < 13 ? sz[t] : -1;
}

static int rd_value(cur_t *c, uint32_t type, gguf_kv_t *kv, int depth);

/* An array: element type, count, then the elements (walked to check them and find the
 * end; fixed-size elements are checked with one multiplication). */
static int rd_array(cur_t *c, gguf_kv_t *kv, int depth) {
    uint32_t et = (uint32_t)rd_le(c, 4, "array element type");
    uint64_t n = rd_le(c, 8, "array count");
    if (c->failed) return -1;
    if (depth >= MAX_ARRAY_DEPTH) return fail(c, "arrays nested too deeply");
    int es = scalar_size(et);
    if (es < 0) {
        char m[80];
        snprintf(m, sizeof m, "unknown array element type %u", (unsigned)et);
        return fail(c, m);
    }
    /* Every element takes at least one byte (strings and arrays: 8), so a count beyond the
     * remaining bytes cannot be read: absurd past MAX_PLAUSIBLE (no real array comes
     * near), otherwise a truncated file, and said as such. */
    uint64_t min = es > 0 ? (uint64_t)es : 8;
    if (n > (c->size - c->off) / min) {
        char m[160];
        if (n > MAX_PLAUSIBLE)
            snprintf(m, sizeof m, "array of absurd count %llu", (unsigned long long)n);
        else
            snprintf(m, sizeof m, "array of %llu elements (%llu bytes or more) runs past the "
                     "end of the file", (unsigned long long)n, (unsigned long long)(n * min));
        return fail(c, m);
    }
    if (kv) {
        kv->arr_type = et;
        kv->arr_n = n;
        kv->arr_data = c->p + c->off;
    }
    if (es > 0) {
        c->off += n * (uint64_t)es;
        return 0;
    }
    for (uint64_t i = 0; i < n; i++)
        if (rd_value(c, et, NULL, depth + 1) != 0) return -1;
    return 0;
}

static int rd_value(cur_t *c, uint32_t type, gguf_kv_t *kv, int depth) {
    gguf_kv_t dummy;
    if (!kv) kv = &dummy;
    if (type == GGUF_STRING) return rd_str(c, c->size, &kv->s, "string value");
    if (type == GGUF_ARRAY) return rd_array(c, kv == &dummy ? NULL : kv, depth);
    int es = scalar_size(type);
    if (es <= 0) {
        char m[80];
        snprintf(m, sizeof m, "unknown value type %u", (unsigned)type);
        return fail(c, m);
    }
    uint64_t u = rd_le(c, es, "value");
    if (c->failed) return -1;
    kv->u = u;
    switch (type) {
    case GGUF_I8: kv->i = (int8_t)u; break;
    case GGUF_I16: kv->i = (int16_t)u; break;
    case GGUF_I32: kv->i = (int32_t)u; break;
    default: kv->i = (int64_t)u; break;
    }
    if (type == GGUF_F32) {
        float f;
        uint32_t b = (uint32_t)u;
        memcpy(&f, &b, 4);
        kv->f = f;
    } else if (type == GGUF_F64) {
        memcpy(&kv->f, &u, 8);
    } else {
        kv->f = (type == GGUF_U64) ? (double)u : (double)kv->i;
    }
    return 0;
}

static char *dup_str(gguf_str_t s) {
    char *d = malloc(s.len + 1);
    if (d) {
        memcpy(d, s.p, s.len);
        d[s.len] = '\0';
    }
    return d;
}

static int cmp_tensor(const void *a, const void *b) {
    return strcmp((*(gguf_tensor_t *const *)a)->name, (*(gguf_tensor_t *const *)b)->name);
}

static int rd_tensor_info(cur_t *c, gguf_tensor_t *t) {
    gguf_str_t name;
    if (rd_str(c, MAX_NAME_LEN, &name, "tensor name") != 0) return -1;
    if (!(t->name = dup_str(name))) return fail(c, "out of memory");
    t->n_dims = (uint32_t)rd_le(c, 4, "tensor n_dims");
    if (c->failed) return -1;
    if (t->n_dims < 1 || t->n_dims > 4) {
        char m[600];
        snprintf(m, sizeof m, "tensor %s has %u dims (1..4)", t->name, (unsigned)t->n_dims);
        return fail(c, m);
    }
    t->n_elems = 1;
    for (int d = 0; d < 4; d++) {
        t->ne[d] = d < (int)t->n_dims ? rd_le(c, 8, "tensor dim") : 1;
        if (c->failed) return -1;
        /* 2^62 elements bounds the byte count of every type well below 2^64. */
        if (t->ne[d] == 0 || t->ne[d] > ((uint64_t)1 << 62) / t->n_elems) {
            char m[600];
            snprintf(m, sizeof m, "tensor %s has an absurd shape (dim %d = %llu)", t->name, d,
                     (unsigned long long)t->ne[d]);
            return fail(c, m);
        }
        t->n_elems *= t->ne[d];
    }
    t->type = (uint32_t)rd_le(c, 4, "tensor type");
    t->offset = rd_le(c, 8, "tensor offset");
    return c->failed ? -1 : 0;
}

/* Places the tensors in the data section: supported types are sized and bounds-checked. */
static int place_tensors(cur_t *c, gguf_t *g) {
    uint64_t data_len = g->size - g->data_offset;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor_t *t = &g->tensors[i];
        int64_t be;
        if (!dq_supported(t->type, &be, NULL)) continue;
        if (t->ne[0] % (uint64_t)be != 0 || dq_bytes(t->type, t->n_elems, &t->n_bytes) != 0) {
            snprintf(c->err, c->errlen, "%s: tensor %s: row of %llu elements is not a whole "
                     "number of %s blocks (%lld)", g->path, t->name,
                     (unsigned long long)t->ne[0], dq_type_name(t->type), (long long)be);
            return -1;
        }
        if (t->offset > data_len || t->n_bytes > data_len - t->offset) {
            snprintf(c->err, c->errlen,
                     "%s: tensor %s (%s, %llu bytes at data offset %llu) extends past the end "
                     "of the file (data section of %llu bytes)", g->path, t->name,
                     dq_type_name(t->type), (unsigned long long)t->n_bytes,
                     (unsigned long long)t->offset, (unsigned long long)data_len);
            return -1;
        }
        t->data = g->map + g->data_offset + t->offset;
    }
    return 0;
}

static int parse(cur_t *c, gguf_t *g) {
    if (c->size < 4 || memcmp(c->p, "GGUF", 4) != 0) {
        snprintf(c->err, c->errlen, "%s: not a GGUF file (bad magic)", c->path);
        return -1;
    }
    c->off = 4;
    g->version = (uint32_t)rd_le(c, 4, "version");
    if (c->failed) return -1;
    if (g->version != 2 && g->version != 3) {
        snprintf(c->err, c->errlen, "%s: GGUF version %u is not supported (2 or 3)", c->path,
                 (unsigned)g->version);
        return -1;
    }
    g->n_tensors = rd_le(c, 8, "tensor count");
    g->n_kv = rd_le(c, 8, "metadata count");
    if (c->failed) return -1;
    /* A key/value takes at least 13 bytes, a tensor info at least 29. */
    if (g->n_kv > (c->size - c->off) / 13 || g->n_tensors > (c->size - c->off) / 29) {
        int absurd = g->n_kv > MAX_PLAUSIBLE || g->n_tensors > MAX_PLAUSIBLE;
        snprintf(c->err, c->errlen, "%s: %s: %llu tensors, %llu metadata keys in a file of "
                 "%llu bytes", c->path, absurd ? "absurd counts" : "truncated GGUF: the "
                 "header's counts need more bytes than the file has",
                 (unsigned long long)g->n_tensors, (unsigned long long)g->n_kv,
                 (unsigned long long)c->size);
        return -1;
    }
    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    g->by_name = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->by_name);
    if (!g->kv || !g->tensors || !g->by_name) return fail(c, "out of memory");
    g->alignment = 32;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        gguf_kv_t *kv = &g->kv[i];
        gguf_str_t key;
        if (rd_str(c, MAX_KEY_LEN, &key, "metadata key") != 0) return -1;
        if (!(kv->key = dup_str(key))) return fail(c, "out of memory");
        kv->type = (uint32_t)rd_le(c, 4, "value type");
        if (c->failed || rd_value(c, kv->type, kv, 0) != 0) return -1;
        if (strcmp(kv->key, "general.alignment") == 0) {
            if (kv->type != GGUF_U32 || kv->u == 0 || kv->u > MAX_ALIGNMENT ||
                (kv->u & (kv->u - 1)) != 0) {
                snprintf(c->err, c->errlen, "%s: general.alignment must be a u32 power of two "
                         "up to 2^30 (got type %u value %llu)", c->path, (unsigned)kv->type,
                         (unsigned long long)kv->u);
                return -1;
            }
            g->alignment = kv->u;
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if (rd_tensor_info(c, &g->tensors[i]) != 0) return -1;
        g->by_name[i] = &g->tensors[i];
    }
    uint64_t pad = (g->alignment - c->off % g->alignment) % g->alignment;
    if (g->n_tensors > 0 && need(c, pad, "padding before tensor data") != 0) return -1;
    g->data_offset = c->off + (pad <= c->size - c->off ? pad : c->size - c->off);
    qsort(g->by_name, g->n_tensors, sizeof *g->by_name, cmp_tensor);
    for (uint64_t i = 1; i < g->n_tensors; i++)
        if (strcmp(g->by_name[i - 1]->name, g->by_name[i]->name) == 0) {
            snprintf(c->err, c->errlen, "%s: tensor %s appears twice", c->path,
                     g->by_name[i]->name);
            return -1;
        }
    return place_tensors(c, g);
}

int gguf_open(const char *path, gguf_t **out, char *err, size_t errlen) {
    *out = NULL;
    gguf_t *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    snprintf(g->path, sizeof g->path, "%s", path);
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    g->size = (uint64_t)st.st_size;
    if (g->size > 0) {
        void *map = mmap(NULL, (size_t)g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            snprintf(err, errlen, "%s: cannot map: %s", path, strerror(errno));
            goto fail;
        }
        g->map = map;
    }
    close(fd);
    fd = -1;
    cur_t c = {.p = g->map, .size = g->size, .path = path, .err = err, .errlen = errlen};
    if (parse(&c, g) != 0) goto fail;
    *out = g;
    return 0;
fail:
    if (fd >= 0) close(fd);
    gguf_close(g);
    return -1;
}

void gguf_close(gguf_t *g) {
    if (!g) return;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++) free(g->kv[i].key);
    if (g->tensors)
        for (uint64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->by_name);
    if (g->map) munmap((void *)g->map, (size_t)g->size);
    free(g);
}

const gguf_kv_t *gguf_find(const gguf_t *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0) return &g->kv[i];
    return NULL;
}

const gguf_tensor_t *gguf_tensor(const gguf_t *g, const char *name) {
    gguf_tensor_t key = {.name = (char *)name}, *kp = &key;
    gguf_tensor_t **hit = bsearch(&kp, g->by_name, g->n_tensors, sizeof *g->by_name, cmp_tensor);
    return hit ? *hit : NULL;
}

static const char *type_name(uint32_t t) {
    static const char *n[13] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
    return t < 13 ? n[t] : "unknown";
}

int gguf_get_int(const gguf_t *g, const char *key, int64_t *out, char *err, size_t errlen) {
    const gguf_kv_t *kv = gguf_find(g, key);
    if (!kv) return 0;
    int ok = kv->type <= GGUF_I32 || kv->type == GGUF_BOOL || kv->type == GGUF_U64 ||
             kv->type == GGUF_I64;
    if (!ok || (kv->type == GGUF_U64 && kv->u > INT64_MAX)) {
        snprintf(err, errlen, "%s: %s is a %s, not a usable integer", g->path, key,
                 type_name(kv->type));
        return -1;
    }
    *out = kv->i;
    return 1;
}

int gguf_get_float(const gguf_t *g, const char *key, double *out, char *err, size_t errlen) {
    const gguf_kv_t *kv = gguf_find(g, key);
    if (!kv) return 0;
    if (kv->type == GGUF_STRING || kv->type == GGUF_ARRAY || kv->type == GGUF_BOOL) {
        snprintf(err, errlen, "%s: %s is a %s, not a number", g->path, key, type_name(kv->type));
        return -1;
    }
    *out = kv->f;
    return 1;
}

int gguf_get_str(const gguf_t *g, const char *key, char *out, size_t cap, char *err,
                 size_t errlen) {
    const gguf_kv_t *kv = gguf_find(g, key);
    if (!kv) return 0;
    if (kv->type != GGUF_STRING || kv->s.len >= cap) {
        snprintf(err, errlen, "%s: %s is %s", g->path, key,
                 kv->type != GGUF_STRING ? "not a string" : "too long a string");
        return -1;
    }
    memcpy(out, kv->s.p, kv->s.len);
    out[kv->s.len] = '\0';
    return 1;
}

void gguf_arr_strings(const gguf_kv_t *kv, gguf_str_t *out) {
    const uint8_t *p = kv->arr_data;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        uint64_t len;
        memcpy(&len, p, 8);
        out[i].p = (const char *)p + 8;
        out[i].len = len;
        p += 8 + len;
    }
}

double gguf_arr_num(const gguf_kv_t *kv, uint64_t i) {
    int es = scalar_size(kv->arr_type);
    if (es <= 0) return 0;
    const uint8_t *p = kv->arr_data + i * (uint64_t)es;
    uint8_t b[8] = {0};
    memcpy(b, p, (size_t)es);
    uint64_t u = 0;
    for (int k = 0; k < es; k++) u |= (uint64_t)b[k] << (8 * k);
    switch (kv->arr_type) {
    case GGUF_I8: return (int8_t)u;
    case GGUF_I16: return (int16_t)u;
    case GGUF_I32: return (int32_t)u;
    case GGUF_I64: return (double)(int64_t)u;
    case GGUF_F32: { uint32_t w = (uint32_t)u; float f; memcpy(&f, &w, 4); return f; }
    case GGUF_F64: { double d; memcpy(&d, &u, 8); return d; }
    default: return (double)u;
    }
}
