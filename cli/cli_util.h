/* cli_util: strict number parsing for command-line options (the whole string must be a
 * number within [lo, hi]). Each returns 1 on success, 0 otherwise (nothing written), and
 * then says in cli_want what the option takes, so that a "bad value" message can name the
 * valid range (cli_bad_value, cli_opts.h). */
#ifndef TWIN_CLI_UTIL_H
#define TWIN_CLI_UTIL_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* what the last value refused should have been: cli_opts.c defines it */
extern char cli_want[128];

static inline int cli_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi) {
        snprintf(cli_want, sizeof cli_want, "a number in [%g, %g]", lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

static inline int cli_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) {
        snprintf(cli_want, sizeof cli_want, "a whole number in %lld..%lld", (long long)lo,
                 (long long)hi);
        return 0;
    }
    *out = v;
    return 1;
}

static inline int cli_int(const char *s, int32_t lo, int32_t hi, int32_t *out) {
    int64_t v;
    if (!cli_i64(s, lo, hi, &v)) return 0;
    *out = (int32_t)v;
    return 1;
}

static inline int cli_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = *s == '-' ? 0 : strtoull(s, &end, 10);
    if (*s == '-' || end == s || *end || errno) {
        snprintf(cli_want, sizeof cli_want, "a whole number >= 0");
        return 0;
    }
    *out = v;
    return 1;
}

/* --kv-type's values (bk_opts_t.kv_type): f32 or f16. */
static inline int cli_kv_type_ok(const char *s) {
    if (!strcmp(s, "f32") || !strcmp(s, "f16")) return 1;
    snprintf(cli_want, sizeof cli_want, "f32 or f16");
    return 0;
}

#endif
