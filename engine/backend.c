/* backend: the registry of backends (backend.h) and the shared error helper. */
#include "engine/backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/cpu/backend_cpu.h"

backend_t *backend_new(const char *name, const bk_opts_t *opts, char *err, size_t errlen) {
    bk_opts_t def = {0};
    if (!opts) opts = &def;
    if (!name || !strcmp(name, "cpu")) return backend_cpu_new(opts, err, errlen);
    if (!strcmp(name, "cuda")) {
        snprintf(err, errlen, "backend 'cuda': this build has no CUDA backend "
                 "(it is compiled only where nvcc is found); use --backend cpu");
        return NULL;
    }
    snprintf(err, errlen, "unknown backend '%s' (expected cpu or cuda)", name);
    return NULL;
}

int bk_fail(backend_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->errmsg, sizeof b->errmsg, fmt, ap);
    va_end(ap);
    return -1;
}
