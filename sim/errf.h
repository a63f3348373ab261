/* errf: the one way the simulator's and analysis modules' plain functions fail with a
 * message in a caller's buffer (char *err, size_t errlen), so that each file does not
 * carry its own copy of the helper.
 *
 * Ownership: writes into the caller's buffer only. */
#ifndef TWIN_ERRF_H
#define TWIN_ERRF_H

#include <stddef.h>

/* printf into err[errlen] (nothing when err is NULL or errlen 0); returns -1, so that
 * `return errf(err, errlen, ...)` fails a function in one line. */
int errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
