/* cpu_pool: a small fixed pthread pool for the CPU backend's element-wise and attention
 * ops and its matrix products.
 *
 * cpool_run splits [0, n) into one contiguous range per thread (the caller takes range 0)
 * and returns when every range is done. Work smaller than `grain` items per thread runs
 * inline on the caller: waking a thread costs microseconds, more than a small op.
 *
 * Ownership: cpool_new returns a pool owned by the caller (cpool_free joins the threads).
 * One cpool_run at a time per pool (the backend is single-threaded at its interface). */
#ifndef TWIN_CPU_POOL_H
#define TWIN_CPU_POOL_H

#include <stdint.h>

typedef struct cpool cpool_t;

/* Runs items [lo, hi) of the work on thread tid (0 .. n_threads-1). */
typedef void (*cpool_fn)(void *ctx, int64_t lo, int64_t hi, int tid);

cpool_t *cpool_new(int n_threads);   /* NULL when threads cannot be started */
int cpool_threads(const cpool_t *p);
void cpool_run(cpool_t *p, int64_t n, int64_t grain, cpool_fn fn, void *ctx);
void cpool_free(cpool_t *p);

#endif
