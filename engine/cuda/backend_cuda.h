/* backend_cuda: the engine's backend (engine/backend.h) on one NVIDIA GPU: cuBLAS for the
 * matrix products (16-bit or fp32 inputs, fp32 accumulate) and our own kernels for the rest
 * (engine/cuda/cuda_*.cu), all on one stream.
 *
 * Memory: plain cudaMalloc, no managed memory. The weights are one allocation
 * (reserve_weights; BK_WEIGHT allocs are carved from it), the KV pool another (kv_init),
 * each activation buffer its own; the step's metadata one device buffer, refilled by one
 * upload per step from a pinned host buffer. Weights, activations and the KV cache are of
 * the weight type (bf16 by default; bk_opts_t.dtype f16 or f32), the residual stream and
 * the logits fp32 (backend.h).
 *
 * Availability: without a GPU (no driver: cudaGetDeviceCount fails with
 * cudaErrorInsufficientDriver, or no device) backend_cuda_new fails with a message that
 * says so, and backend_cuda_available returns 0, so tests skip rather than fail.
 *
 * Decode steps (every sequence with at most CK_DEC_MAX_Q new tokens) run as CUDA graphs,
 * captured the second time a step of the same shape comes and replayed after
 * (backend_cuda.cu, cuda_graph.cu); TWIN_CUDA_GRAPHS=0 in the environment turns them off
 * when the backend is created; b->counters reports how steps ran.
 *
 * Ownership: the returned backend is the caller's (b->destroy frees every buffer, the
 * stream, the cuBLAS handle and its workspace, the sampler and the graphs). C linkage,
 * callable from C. */
#ifndef TWIN_BACKEND_CUDA_H
#define TWIN_BACKEND_CUDA_H

#include <stddef.h>

#include "engine/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

backend_t *backend_cuda_new(const bk_opts_t *opts, char *err, size_t errlen);

/* 1: device `device` is there; 0: no GPU or no driver (the reason in err). */
int backend_cuda_available(int device, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
