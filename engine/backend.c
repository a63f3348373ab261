/* backend: the registry of backends (backend.h) and the shared error helper. The CUDA
 * backend is linked only in builds where nvcc was found (TWIN_HAVE_CUDA, set by the
 * Makefile); elsewhere `cuda` is a known name that explains why it is missing. */
#include "engine/backend.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/cpu/backend_cpu.h"
#ifdef TWIN_HAVE_CUDA
#include "engine/cuda/backend_cuda.h"
#endif

#ifndef TWIN_HAVE_CUDA
static const char *NO_CUDA = "backend 'cuda': this build has no CUDA backend (it is "
                             "compiled only where nvcc and cuBLAS are found); use --backend cpu";
#endif

backend_t *backend_new(const char *name, const bk_opts_t *opts, char *err, size_t errlen) {
    bk_opts_t def = {0};
    if (!opts) opts = &def;
    if (!name || !strcmp(name, "cpu")) return backend_cpu_new(opts, err, errlen);
    if (!strcmp(name, "cuda")) {
#ifdef TWIN_HAVE_CUDA
        return backend_cuda_new(opts, err, errlen);
#else
        snprintf(err, errlen, "%s", NO_CUDA);
        return NULL;
#endif
    }
    snprintf(err, errlen, "unknown backend '%s' (expected cpu or cuda)", name);
    return NULL;
}

int backend_available(const char *name, char *err, size_t errlen) {
    if (!name || !strcmp(name, "cpu")) return 1;
    if (!strcmp(name, "cuda")) {
#ifdef TWIN_HAVE_CUDA
        return backend_cuda_available(0, err, errlen);
#else
        snprintf(err, errlen, "%s", NO_CUDA);
        return 0;
#endif
    }
    snprintf(err, errlen, "unknown backend '%s' (expected cpu or cuda)", name);
    return -1;
}

int bk_fail(backend_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->errmsg, sizeof b->errmsg, fmt, ap);
    va_end(ap);
    return -1;
}

int bk_check_kv_shape(backend_t *b, const bk_kv_shape_t *s) {
    if (s->n_layers <= 0 || s->n_blocks <= 0 || s->block_size <= 0 || s->n_kv_heads <= 0 ||
        s->head_dim <= 0)
        return bk_fail(b, "%s: kv_init: every size must be positive (layers %d, blocks %d, "
                       "block size %d, kv heads %d, head dim %d)", b->name, s->n_layers,
                       s->n_blocks, s->block_size, s->n_kv_heads, s->head_dim);
    return 0;
}

int bk_check_kv_use(backend_t *b, const bk_kv_shape_t *pool, const char *op, int32_t layer,
                    int32_t n_heads, int32_t n_kv_heads, int32_t head_dim) {
    if (!pool) return bk_fail(b, "%s: %s before kv_init", b->name, op);
    if (layer < 0 || layer >= pool->n_layers || n_kv_heads != pool->n_kv_heads ||
        head_dim != pool->head_dim || n_heads <= 0 || n_heads % n_kv_heads)
        return bk_fail(b, "%s: %s: layer %d, %d heads / %d kv heads of %d do not match the "
                       "KV pool (%d layers, %d kv heads of %d)", b->name, op, layer, n_heads,
                       n_kv_heads, head_dim, pool->n_layers, pool->n_kv_heads,
                       pool->head_dim);
    return 0;
}

void bk_rope_inv_freq(float *f, int32_t head_dim, float theta) {
    for (int32_t i = 0; i < head_dim / 2; i++) f[i] = (float)pow(theta, -2.0 * i / head_dim);
}
