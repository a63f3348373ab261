/* cuda_entry: the one symbol through which the engine reaches the CUDA backend, which is
 * built as a shared object of its own (libtwinserve_cuda.so, issue #16) and opened with
 * dlopen only when `--backend cuda` asks for it (engine/backend.c). So no command links
 * cudart or cuBLAS, and a machine without them runs everything else.
 *
 * Invariants: the object exports TWIN_CUDA_ENTRY, a function returning a pointer to a
 * static twin_cuda_api_t that lives as long as the process (the object is never closed).
 * The loader refuses an object whose abi, backend_size or opts_size differ from its own:
 * such an object was built against another engine/backend.h and would read the backend's
 * struct at the wrong offsets. The object takes backend.c's bk_* helpers from the
 * executable (linked with -rdynamic), so it holds no copy of them.
 *
 * Plain C, included by backend.c (C) and cuda_entry.cu (C++). */
#ifndef TWIN_CUDA_ENTRY_H
#define TWIN_CUDA_ENTRY_H

#include <stddef.h>

#include "engine/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* bumped when this struct changes */
#define TWIN_CUDA_ABI 1
#define TWIN_CUDA_ENTRY "twin_cuda_api"
#define TWIN_CUDA_SO "libtwinserve_cuda.so"

typedef struct {
    int abi;              /* TWIN_CUDA_ABI */
    size_t backend_size;  /* sizeof(backend_t) as the object was built */
    size_t opts_size;     /* sizeof(bk_opts_t) */
    backend_t *(*create)(const bk_opts_t *opts, char *err, size_t errlen);
    int (*available)(int device, char *err, size_t errlen);
} twin_cuda_api_t;

typedef const twin_cuda_api_t *(*twin_cuda_entry_fn)(void);

const twin_cuda_api_t *twin_cuda_api(void);

#ifdef __cplusplus
}
#endif

#endif
