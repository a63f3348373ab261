/* cpu_pool: a small fixed pthread pool for the CPU backend's element-wise and attention
 * ops and its matrix products.
 *
 * cpool_run cuts [0, n) into pieces and returns when every piece is done. Each thread
 * taking part owns a contiguous run of pieces (the caller the first run) and takes them
 * in order, so a thread streams one contiguous range as with a static split; a thread
 * that runs out takes pieces from the back of another's run. So a thread that the OS has
 * descheduled holds up the job by at most the piece it has started, not by its whole
 * share: on a shared machine the caller finishes what a sleeping worker has not begun
 * (cpu_pool.c says how many pieces a run has, and why). Work smaller than `grain` items
 * per thread runs inline on the caller: waking a thread costs microseconds, more than a
 * small op.
 *
 * Pieces are fixed by (n, the number of threads taking part) alone, never by which thread
 * runs them, and fn must give each item the same result whichever range it is called
 * with: then results do not depend on timing (the backend's batch invariance).
 *
 * Ownership: cpool_new returns a pool owned by the caller (cpool_free joins the threads).
 * One cpool_run at a time per pool (the backend is single-threaded at its interface); fn
 * and ctx are borrowed until cpool_run returns. */
#ifndef TWIN_CPU_POOL_H
#define TWIN_CPU_POOL_H

#include <stdint.h>

typedef struct cpool cpool_t;

/* Runs items [lo, hi) of the work on thread tid (0 .. n_threads-1; 0 is the caller). A
 * thread may be called several times per job, with disjoint ranges. */
typedef void (*cpool_fn)(void *ctx, int64_t lo, int64_t hi, int tid);

cpool_t *cpool_new(int n_threads);   /* NULL when threads cannot be started */
int cpool_threads(const cpool_t *p);
void cpool_run(cpool_t *p, int64_t n, int64_t grain, cpool_fn fn, void *ctx);
void cpool_free(cpool_t *p);

/* on != 0: idle workers spin (with pause) for the next job instead of sleeping after
 * IDLE_SPIN_NS, until it is turned off. For an engine that keeps its cores awake through
 * idle waits: a VM's vCPU that halts comes back slow (see engine.h, idle_spin). */
void cpool_set_spin(cpool_t *p, int on);

/* The pieces cpool_run cuts n items into when `parts` threads take part, and piece k's
 * items [*lo, *hi): exposed so tests can check the split covers [0, n) once. */
int cpool_pieces(int64_t n, int parts);
void cpool_piece_range(int64_t n, int pieces, int k, int64_t *lo, int64_t *hi);

#endif
