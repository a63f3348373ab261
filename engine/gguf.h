/* gguf: a reader for GGUF v2/v3 files (llama.cpp's model format): header, metadata
 * key/values of every value type (arrays included, nested ones too), tensor infos, the
 * aligned data section.
 *
 * Invariants (after gguf_open returns 0):
 *  - Every count, length and offset has been checked against the file: strings and arrays
 *    lie inside the file, tensor dims are 1..4 with a non-zero element count that does not
 *    overflow, tensor names are unique, and a tensor of a supported type (engine/dequant.h)
 *    lies entirely inside the data section. A tensor of any other type keeps n_bytes = 0
 *    and data = NULL; its user reports the type (the reader cannot size what it cannot
 *    decode).
 *  - Little-endian files on a little-endian host.
 *
 * Ownership: gguf_t maps the file read-only and owns the mapping, keys and names; every
 * pointer into it (gguf_str_t, array data, tensor data) lives until gguf_close. Errors go to
 * the caller's buffer and name the file and the byte offset or key. */
#ifndef TWIN_GGUF_H
#define TWIN_GGUF_H

#include <stddef.h>
#include <stdint.h>

enum {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
    GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10,
    GGUF_I64 = 11, GGUF_F64 = 12,
};

typedef struct {
    const char *p;        /* into the mapping; not NUL-terminated */
    uint64_t len;
} gguf_str_t;

typedef struct {
    char *key;            /* NUL-terminated copy */
    uint32_t type;        /* GGUF_* */
    int64_t i;            /* integer and bool values (u64 above INT64_MAX: is_big) */
    uint64_t u;           /* the same integer, unsigned */
    double f;             /* float values, and integers converted */
    gguf_str_t s;         /* GGUF_STRING */
    uint32_t arr_type;    /* GGUF_ARRAY: element type, count, first element */
    uint64_t arr_n;
    const uint8_t *arr_data;
} gguf_kv_t;

typedef struct {
    char *name;           /* NUL-terminated copy */
    uint32_t n_dims;
    uint64_t ne[4];       /* ne[0] is contiguous; unused dims are 1 */
    uint32_t type;        /* ggml type id (engine/dequant.h) */
    uint64_t offset;      /* relative to the data section */
    uint64_t n_elems;
    uint64_t n_bytes;     /* 0 for an unsupported type */
    const uint8_t *data;  /* NULL for an unsupported type */
} gguf_tensor_t;

typedef struct gguf {
    char path[512];
    uint32_t version;
    const uint8_t *map;
    uint64_t size;
    uint64_t n_kv;
    gguf_kv_t *kv;
    uint64_t n_tensors;
    gguf_tensor_t *tensors;
    gguf_tensor_t **by_name;  /* sorted, for lookup */
    uint64_t alignment;
    uint64_t data_offset;
} gguf_t;

int gguf_open(const char *path, gguf_t **out, char *err, size_t errlen);
void gguf_close(gguf_t *g);

/* NULL when absent. */
const gguf_kv_t *gguf_find(const gguf_t *g, const char *key);
const gguf_tensor_t *gguf_tensor(const gguf_t *g, const char *name);

/* Typed getters: 1 found (*out set), 0 absent, -1 present with an unusable type or value
 * (message naming the file and key). get_int accepts any integer type (and bool), get_float
 * any number, get_str a string, copied NUL-terminated (too long for cap: -1). */
int gguf_get_int(const gguf_t *g, const char *key, int64_t *out, char *err, size_t errlen);
int gguf_get_float(const gguf_t *g, const char *key, double *out, char *err, size_t errlen);
int gguf_get_str(const gguf_t *g, const char *key, char *out, size_t cap, char *err,
                 size_t errlen);

/* The elements of a string array (kv->arr_type == GGUF_STRING) into out[kv->arr_n]. */
void gguf_arr_strings(const gguf_kv_t *kv, gguf_str_t *out);
/* Element i of a numeric array as a double (bounds are the caller's). */
double gguf_arr_num(const gguf_kv_t *kv, uint64_t i);

#endif
