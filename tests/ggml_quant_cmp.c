/* ggml_quant_cmp: are the Q8_0 / Q4_0 tensors `twinserve quantize` writes the bytes ggml's
 * own reference quantiser makes of the same fp32 weights? (issue #30: llama.cpp's
 * quantisation and ours both round to nearest per block of 32.)
 *
 *     ggml_quant_cmp LIBGGML_BASE.so F32.gguf QUANT.gguf
 *
 * For every Q8_0 or Q4_0 tensor of QUANT.gguf, quantises the same-named F32 tensor of
 * F32.gguf with ggml_quantize_chunk (dlopen'd from llama.cpp's libggml-base) and compares the
 * bytes. Prints "compared N tensors (B bytes): D differ" and the first differing tensor; exit
 * 0 when none differ, 1 when some do, 2 on a usage or load error. Built by
 * tests/e2e_quantize.sh against the project's library (engine/gguf.c reads the files). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"

enum { GGML_TYPE_F32 = 0, GGML_TYPE_Q4_0 = 2, GGML_TYPE_Q8_0 = 8 };
typedef size_t (*quantize_chunk_fn)(int type, const float *src, void *dst, int64_t start,
                                    int64_t nrows, int64_t n_per_row, const float *imatrix);
typedef void (*quantize_init_fn)(int type);

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: ggml_quant_cmp LIBGGML_BASE.so F32.gguf QUANT.gguf\n");
        return 2;
    }
    int rc = 2;
    gguf_t *f = NULL, *q = NULL;
    void *dst = NULL;
    char err[512];
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    quantize_chunk_fn chunk = lib ? (quantize_chunk_fn)dlsym(lib, "ggml_quantize_chunk") : NULL;
    quantize_init_fn init = lib ? (quantize_init_fn)dlsym(lib, "ggml_quantize_init") : NULL;
    if (!chunk) {
        fprintf(stderr, "ggml_quant_cmp: %s: %s\n", argv[1], lib ? "no ggml_quantize_chunk" : dlerror());
        goto done;
    }
    if (gguf_open(argv[2], &f, err, sizeof err) != 0 || gguf_open(argv[3], &q, err, sizeof err) != 0) {
        fprintf(stderr, "ggml_quant_cmp: %s\n", err);
        goto done;
    }
    uint64_t n = 0, bytes = 0, differ = 0;
    for (uint64_t i = 0; i < q->n_tensors; i++) {
        const gguf_tensor_t *t = &q->tensors[i];
        if (t->type != GGML_TYPE_Q8_0 && t->type != GGML_TYPE_Q4_0) continue;
        const gguf_tensor_t *s = gguf_tensor(f, t->name);
        if (!s || s->type != GGML_TYPE_F32 || s->n_elems != t->n_elems || !s->data || !t->data) {
            fprintf(stderr, "ggml_quant_cmp: %s: no F32 tensor of %llu elements in %s\n",
                    t->name, (unsigned long long)t->n_elems, argv[2]);
            goto done;
        }
        if (init) init((int)t->type);
        free(dst);
        if (!(dst = calloc(1, t->n_bytes + 64))) goto done;
        int64_t per_row = (int64_t)t->ne[0], rows = (int64_t)(t->n_elems / t->ne[0]);
        size_t made = chunk((int)t->type, (const float *)s->data, dst, 0, rows, per_row, NULL);
        n++;
        bytes += t->n_bytes;
        if (made != t->n_bytes || memcmp(dst, t->data, t->n_bytes) != 0) {
            if (!differ)
                printf("first difference: %s (%s, %llu bytes; ggml made %zu)\n", t->name,
                       t->type == GGML_TYPE_Q8_0 ? "Q8_0" : "Q4_0",
                       (unsigned long long)t->n_bytes, made);
            differ++;
        }
    }
    printf("compared %llu tensors (%llu bytes): %llu differ\n", (unsigned long long)n,
           (unsigned long long)bytes, (unsigned long long)differ);
    rc = n > 0 && differ == 0 ? 0 : 1;
done:
    free(dst);
    gguf_close(f);
    gguf_close(q);
    if (lib) dlclose(lib);
    return rc;
}
