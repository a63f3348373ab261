/* backend: the registry of backends (backend.h) and the shared error helper.
 *
 * The CUDA backend is a shared object of its own (TWIN_CUDA_SO, built where nvcc and cuBLAS
 * are found: TWIN_HAVE_CUDA), opened here on the first `cuda` request, so that no command
 * links cudart or cuBLAS (issue #16: `sim` paid ~0.1 s and ~220 MB at start for them).
 * Where it is looked for, first found wins:
 *   1. $TWIN_CUDA_LIB, the object's path; when set, nothing else is tried;
 *   2. beside the executable (an installed twinserve and its object);
 *   3. the build's own object (TWIN_CUDA_SO_BUILT, the Makefile's absolute path), so test
 *      binaries under BUILD/tests find it too.
 * A candidate that exists but does not load (a CUDA library missing, another build's
 * object) stops the search: its dlerror is the reason the user needs. The outcome is
 * computed once (pthread_once) and kept for the process; the object is never closed. */
#include "engine/backend.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/cpu/backend_cpu.h"
#ifdef TWIN_HAVE_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/cuda/cuda_entry.h"
#endif

#ifndef TWIN_HAVE_CUDA
static const char *NO_CUDA = "backend 'cuda': this build has no CUDA backend (it is "
                             "compiled only where nvcc and cuBLAS are found); use --backend cpu";
#else
#ifndef TWIN_CUDA_SO_BUILT
#define TWIN_CUDA_SO_BUILT ""
#endif
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static const twin_cuda_api_t *cuda_api;
static char cuda_why[512];

/* 1: path exists and was opened into cuda_api; 0: no file there; -1: there but unusable
 * (the reason in cuda_why) */
static int cuda_try(const char *path) {
    if (access(path, F_OK)) return 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(cuda_why, sizeof cuda_why, "no CUDA backend: cannot load %s: %s", path,
                 dlerror());
        return -1;
    }
    twin_cuda_entry_fn entry;
    /* POSIX's sanctioned way to turn dlsym's object pointer into a function pointer */
    *(void **)&entry = dlsym(h, TWIN_CUDA_ENTRY);
    const twin_cuda_api_t *api = entry ? entry() : NULL;
    if (!api)
        snprintf(cuda_why, sizeof cuda_why, "no CUDA backend: %s has no %s() (not a twinserve "
                 "CUDA backend)", path, TWIN_CUDA_ENTRY);
    else if (api->abi != TWIN_CUDA_ABI || api->backend_size != sizeof(backend_t) ||
             api->opts_size != sizeof(bk_opts_t))
        snprintf(cuda_why, sizeof cuda_why, "no CUDA backend: %s was built from another "
                 "version of engine/backend.h (abi %d, backend %zu bytes, options %zu; this "
                 "binary: %d, %zu, %zu): rebuild it with this binary", path, api->abi,
                 api->backend_size, api->opts_size, TWIN_CUDA_ABI, sizeof(backend_t),
                 sizeof(bk_opts_t));
    else {
        cuda_api = api;
        return 1;
    }
    dlclose(h);
    return -1;
}

static void cuda_load(void) {
    const char *env = getenv("TWIN_CUDA_LIB");
    if (env && *env) {
        if (!cuda_try(env))
            snprintf(cuda_why, sizeof cuda_why, "no CUDA backend: TWIN_CUDA_LIB=%s: no such "
                     "file", env);
        return;
    }
    char exe[PATH_MAX], beside[PATH_MAX + sizeof TWIN_CUDA_SO] = "";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            slash[1] = 0;
            snprintf(beside, sizeof beside, "%s%s", exe, TWIN_CUDA_SO);
            int r = cuda_try(beside);
            if (r) return;
        }
    }
    if (*TWIN_CUDA_SO_BUILT && strcmp(beside, TWIN_CUDA_SO_BUILT) && cuda_try(TWIN_CUDA_SO_BUILT))
        return;
    snprintf(cuda_why, sizeof cuda_why, "no CUDA backend: %s not found (looked beside the "
             "executable%s%s; set TWIN_CUDA_LIB to its path)", TWIN_CUDA_SO,
             *TWIN_CUDA_SO_BUILT ? " and at " : "", TWIN_CUDA_SO_BUILT);
}

/* the loaded backend's entry points, or NULL with the reason in err */
static const twin_cuda_api_t *cuda_get(char *err, size_t errlen) {
    pthread_once(&cuda_once, cuda_load);
    if (!cuda_api) snprintf(err, errlen, "backend 'cuda': %s", cuda_why);
    return cuda_api;
}
#endif

backend_t *backend_new(const char *name, const bk_opts_t *opts, char *err, size_t errlen) {
    bk_opts_t def = {0};
    if (!opts) opts = &def;
    if (!name || !strcmp(name, "cpu")) return backend_cpu_new(opts, err, errlen);
    if (!strcmp(name, "cuda")) {
        if (opts->kv_type) {
            snprintf(err, errlen, "backend cuda: --kv-type is a CPU backend option (the GPU "
                     "keeps K and V in its weight type: --dtype bf16|f16|f32)");
            return NULL;
        }
#ifdef TWIN_HAVE_CUDA
        const twin_cuda_api_t *api = cuda_get(err, errlen);
        return api ? api->create(opts, err, errlen) : NULL;
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
        const twin_cuda_api_t *api = cuda_get(err, errlen);
        return api ? api->available(0, err, errlen) : 0;
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
