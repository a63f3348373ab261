/* cpu_pool: see cpu_pool.h. Workers sleep on a condition variable between jobs; a job is
 * identified by a generation counter so a worker never runs one twice. */
#include "engine/cpu/cpu_pool.h"

#include <pthread.h>
#include <stdlib.h>

struct cpool {
    int n_threads;
    pthread_t *threads;     /* [n_threads - 1]: thread 0 is the caller */
    int started;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;           /* bumped per job */
    int pending;            /* workers still running the current job */
    int quit;
    cpool_fn fn;
    void *ctx;
    int64_t n;
    int parts;              /* threads sharing the current job */
};

typedef struct {
    cpool_t *p;
    int tid;
} worker_arg_t;

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
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->gen == seen) pthread_cond_wait(&p->go, &p->mu);
        if (p->quit) break;
        seen = p->gen;
        int parts = p->parts;
        cpool_fn fn = p->fn;
        void *ctx = p->ctx;
        int64_t n = p->n;
        pthread_mutex_unlock(&p->mu);
        if (tid < parts) {
            int64_t lo, hi;
            part_range(n, parts, tid, &lo, &hi);
            if (hi > lo) fn(ctx, lo, hi, tid);
        }
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

cpool_t *cpool_new(int n_threads) {
    cpool_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads < 1 ? 1 : n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
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
    if (parts <= 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->parts = parts;
    p->pending = p->started;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);

    int64_t lo, hi;
    part_range(n, parts, 0, &lo, &hi);
    fn(ctx, lo, hi, 0);

    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void cpool_free(cpool_t *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int t = 0; t < p->started; t++) pthread_join(p->threads[t], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p);
}
