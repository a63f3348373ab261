/* cpu_pool: see cpu_pool.h. A job is published by bumping a generation counter. Workers
 * and the caller spin briefly before sleeping on a condition variable: a decode step runs
 * a few hundred short jobs, and a futex wake-up per job (tens of microseconds in a VM)
 * would cost more than the jobs. The counters are atomics; the mutex only guards sleeping,
 * so a wake-up cannot be lost (both sides re-check the counter under it). */
#include "engine/cpu/cpu_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define SPIN_ITERS 20000   /* pause iterations before sleeping: about 200 us on the dev machine */

struct cpool {
    int n_threads;
    pthread_t *threads;     /* [n_threads - 1]: thread 0 is the caller */
    int started;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    atomic_uint_fast64_t gen;   /* bumped per job (release: the job fields are visible) */
    atomic_int pending;         /* workers still running the current job */
    atomic_int quit;
    cpool_fn fn;
    void *ctx;
    int64_t n;
    int parts;              /* threads sharing the current job */
};

typedef struct {
    cpool_t *p;
    int tid;
} worker_arg_t;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void part_range(int64_t n, int parts, int k, int64_t *lo, int64_t *hi) {
    *lo = n * k / parts;
    *hi = n * (k + 1) / parts;
}

static void *worker(void *arg) {
    worker_arg_t *w = arg;
    cpool_t *p = w->p;
    int tid = w->tid;
    free(w);
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        for (int i = 0; i < SPIN_ITERS && g == seen && !atomic_load(&p->quit); i++) {
            cpu_relax();
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while (!atomic_load(&p->quit) && (g = atomic_load(&p->gen)) == seen)
                pthread_cond_wait(&p->go, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) break;
        seen = g;
        if (tid < p->parts) {
            int64_t lo, hi;
            part_range(p->n, p->parts, tid, &lo, &hi);
            if (hi > lo) p->fn(p->ctx, lo, hi, tid);
        }
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

cpool_t *cpool_new(int n_threads) {
    cpool_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads < 1 ? 1 : n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->quit, 0);
    p->threads = calloc((size_t)p->n_threads, sizeof *p->threads);
    if (!p->threads) goto fail;
    for (int t = 1; t < p->n_threads; t++) {
        worker_arg_t *w = malloc(sizeof *w);
        if (!w) goto fail;
        w->p = p;
        w->tid = t;
        if (pthread_create(&p->threads[t - 1], NULL, worker, w) != 0) {
            free(w);
            goto fail;
        }
        p->started++;
    }
    return p;
fail:
    cpool_free(p);
    return NULL;
}

int cpool_threads(const cpool_t *p) { return p->n_threads; }

void cpool_run(cpool_t *p, int64_t n, int64_t grain, cpool_fn fn, void *ctx) {
    if (n <= 0) return;
    int parts = p->n_threads;
    if (grain < 1) grain = 1;
    if (n / grain < parts) parts = (int)(n / grain);
    if (parts <= 1 || p->started == 0) {
        fn(ctx, 0, n, 0);
        return;
    }
    if (parts > p->started + 1) parts = p->started + 1;
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->parts = parts;
    atomic_store(&p->pending, p->started);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);

    int64_t lo, hi;
    part_range(n, parts, 0, &lo, &hi);
    fn(ctx, lo, hi, 0);

    for (int i = 0; i < SPIN_ITERS && atomic_load_explicit(&p->pending, memory_order_acquire);
         i++)
        cpu_relax();
    if (atomic_load_explicit(&p->pending, memory_order_acquire)) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}

void cpool_free(cpool_t *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int t = 0; t < p->started; t++) pthread_join(p->threads[t], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p);
}
