/* backend_cpu: the fp32 CPU backend (backend.h). Weight matrices are packed into panels
 * at upload and multiplied by our own kernels (cpu_gemm.h); every op runs on a small
 * pthread pool (cpu_pool.h). Buffers are plain 64-byte aligned host memory; the KV pool is
 * one allocation laid out [layer][block][K|V][kv_head][slot][head_dim], of fp32 elements or
 * (opts->kv_type "f16") IEEE halves.
 *
 * Ownership: the returned backend is the caller's (b->destroy); it frees every buffer still
 * allocated through it. */
#ifndef TWIN_BACKEND_CPU_H
#define TWIN_BACKEND_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"

/* opts->n_threads 0 = every online core; opts->kv_type NULL, "f32" or "f16". NULL + message
 * in err on failure. */
backend_t *backend_cpu_new(const bk_opts_t *opts, char *err, size_t errlen);

/* Copies the K (which 0) or V (which 1) vector of one KV head in one slot of one block into
 * out [head_dim] as floats (halves widened exactly), for tests that check where and what
 * rope_kv wrote. 0, or -1 before kv_init or out of range. */
int backend_cpu_kv_read(backend_t *b, int32_t layer, int32_t block, int32_t which,
                        int32_t head, int32_t slot, float *out);

#endif
