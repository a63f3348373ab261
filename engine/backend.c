/* backend: the registry of backends (backend.h) and the shared error helper. The CUDA
 * backend is linked only in builds where nvcc was found (TWIN_HAVE_CUDA, set by the
 * Makefile); elsewhere `cuda` is a known name that explains why it is missing. */
#include "engine/backend.h"

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
