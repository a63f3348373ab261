/* cuda_entry: the exported entry point of libtwinserve_cuda.so (cuda_entry.h). Host code
 * only; kept apart from backend_cuda.cu so the loader's side of the contract is in one
 * small file. */
#include "engine/cuda/backend_cuda.h"
#include "engine/cuda/cuda_entry.h"

extern "C" __attribute__((visibility("default"))) const twin_cuda_api_t *twin_cuda_api(void) {
    static const twin_cuda_api_t api = {TWIN_CUDA_ABI, sizeof(backend_t), sizeof(bk_opts_t),
                                        backend_cuda_new, backend_cuda_available};
    return &api;
}
