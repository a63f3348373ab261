/* model_gguf: GGUF loader (in progress). */
#include <stdio.h>

#include "engine/model.h"

int model_load_gguf(const char *path, model_t **out, char *err, size_t errlen) {
    *out = NULL;
    snprintf(err, errlen, "%s: GGUF loading is not implemented yet", path);
    return -1;
}
