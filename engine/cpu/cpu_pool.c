/* cpu_pool: see cpu_pool.h.
 *
 * A job is cut into pieces; slot t holds the pieces thread t has not yet started, as one
 * 64-bit word [lo, hi) that its owner advances from the front and thieves shrink from the
 * back, each by compare-and-swap. A claim is only possible while the job is live (the
 * caller returns after every piece is done, and sets the slots of the next job only then),
 * so a thread reads the job's fields after a successful claim, never before: a worker
 * that wakes late cannot run a finished job, and one that claims in the next job's slots
 * runs the next job, correctly. Slot stores are releases, so a claim sees the fields.
 *
 * Workers spin briefly for the next job before sleeping on a condition variable (a decode
 * step runs a few hundred short jobs, and a futex wake-up per job, tens of microseconds in
 * a VM, would cost more than the jobs). Past YIELD_SPIN_NS a spinning thread (worker or
 * caller) yields between polls: on a machine with more runnable threads than cores, a
 * pure spin burnt the time slice that the thread it waits for needed (SmolLM2-shaped Q4_0
 * batch-1 decode, 2 threads, a sanitizer build busy on the other core: 81-103 tok/s
 * spinning, 127-185 yielding; the worker had spun 19% of the samples and run 4% of the
 * products). With a core free, sched_yield returns at once, but it is a system call: past
 * 5 us it made every hand-off's wait coarser, and the simulator's per-step error against
 * the engine (bench/fidelity.sh, stories260K) rose from 4.7-7.0% to 8.2-20.5%; past 50 us
 * (a hand-off that long means the awaited thread is off its core) it is 3.2-6.9%.
 * The caller, when it has no piece left, spins while the others finish theirs, but only
 * about as long as its own share took: past that the thread it waits for is most likely
 * descheduled, and spinning on would keep it off this core, so the caller sleeps and lets
 * the scheduler move it here. The counters are atomics; the mutex only guards sleeping,
 * and a flag raised before each sleep (seq_cst, read after the other side's update) means
 * a wake-up cannot be lost and the mutex is not taken at all while nobody sleeps. */
#include "engine/cpu/cpu_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Pieces per thread: one. What rescues a job from a descheduled worker is that its
 * unstarted range can be taken, and that the caller stops spinning for it; more pieces
 * bought nothing more against a competing process (stories260K batch-32 decode: 24 ms per
 * step with the old static split, 5.5 ms with 1 piece per thread, 5.7 with 2, 5.8 with 4)
 * and cost up to 18% on a quiet machine (smollm2 128-token prefill), since every piece of
 * a product repacks its rows of x (cpu_gemm.h). */
#define PIECES_PER_THREAD 1
#define IDLE_SPIN_NS 200000      /* a worker's spin for the next job before it sleeps */
#define YIELD_SPIN_NS 50000      /* past this, a spinning thread yields between polls */
#define WAIT_SPIN_MIN_NS 20000   /* the caller's spin for the others' pieces: at least, */
#define WAIT_SPIN_MAX_NS 200000  /* at most (past it a sleep's wake-up is small change) */

typedef struct {
    alignas(64) atomic_uint_fast64_t w;   /* lo << 32 | hi: the pieces not yet claimed */
} slot_t;

struct cpool {
    int n_threads;
    pthread_t *threads;     /* [n_threads - 1]: thread 0 is the caller */
    int started;
    slot_t *slots;          /* [n_threads] */
    pthread_mutex_t mu;
    pthread_cond_t go, done_cv;
    alignas(64) atomic_uint serial;   /* bumped per job: what sleeping workers wait for */
    atomic_int sleepers;              /* workers sleeping, or about to, on go */
    atomic_int waiting;               /* the caller sleeps, or is about to, on done_cv */
    atomic_int quit;
    atomic_int keep_spinning;         /* cpool_set_spin: workers never sleep */
    alignas(64) atomic_int done;      /* pieces of the current job finished */
    /* the current job: written by the caller while no piece can be claimed */
    alignas(64) cpool_fn fn;
    void *ctx;
    int64_t n;
    int pieces;
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

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int cpool_pieces(int64_t n, int parts) {
    int64_t k = (int64_t)parts * PIECES_PER_THREAD;
    return (int)(n < k ? n : k);
}

void cpool_piece_range(int64_t n, int pieces, int k, int64_t *lo, int64_t *hi) {
    *lo = n * k / pieces;
    *hi = n * (k + 1) / pieces;
}

/* A piece for thread tid: the front of its own run, else the back of another's. The
 * index, or -1 when every run is empty. */
static int claim(cpool_t *p, int tid) {
    for (int i = 0; i < p->n_threads; i++) {
        atomic_uint_fast64_t *w = &p->slots[(tid + i) % p->n_threads].w;
        uint64_t v = atomic_load_explicit(w, memory_order_acquire);
        for (;;) {
            uint32_t lo = (uint32_t)(v >> 32), hi = (uint32_t)v;
            if (lo >= hi) break;
            uint64_t nv = i == 0 ? (uint64_t)(lo + 1) << 32 | hi : (uint64_t)lo << 32 | (hi - 1);
            if (atomic_compare_exchange_weak_explicit(w, &v, nv, memory_order_acq_rel,
                                                      memory_order_acquire))
                return (int)(i == 0 ? lo : hi - 1);
        }
    }
    return -1;
}

/* Runs every piece thread tid can claim. The job's fields are read only under a claim. */
static void run_pieces(cpool_t *p, int tid) {
    int k;
    while ((k = claim(p, tid)) >= 0) {
        int pieces = p->pieces;
        int64_t lo, hi;
        cpool_piece_range(p->n, pieces, k, &lo, &hi);
        if (hi > lo) p->fn(p->ctx, lo, hi, tid);
        /* after this the job may be over: nothing of it is touched again */
        if (atomic_fetch_add(&p->done, 1) + 1 == pieces && tid != 0 &&
            atomic_load(&p->waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

/* A worker's wait for a job serial other than `seen` (or quit); returns the serial. */
static unsigned wait_job(cpool_t *p, unsigned seen) {
    int64_t t0 = now_ns();
    unsigned s;
    for (int i = 1;; i++) {
        s = atomic_load_explicit(&p->serial, memory_order_acquire);
        if (s != seen || atomic_load_explicit(&p->quit, memory_order_relaxed)) return s;
        cpu_relax();
        if (i % 64 == 0) {
            int64_t t = now_ns() - t0;
            if (t > IDLE_SPIN_NS && !atomic_load_explicit(&p->keep_spinning, memory_order_relaxed))
                break;
            if (t > YIELD_SPIN_NS) sched_yield();
        }
    }
    atomic_fetch_add(&p->sleepers, 1);
    pthread_mutex_lock(&p->mu);
    while (!atomic_load(&p->quit) && (s = atomic_load(&p->serial)) == seen)
        pthread_cond_wait(&p->go, &p->mu);
    pthread_mutex_unlock(&p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    return s;
}

static void *worker(void *arg) {
    worker_arg_t *w = arg;
    cpool_t *p = w->p;
    int tid = w->tid;
    free(w);
    unsigned seen = 0;
    for (;;) {
        seen = wait_job(p, seen);
        if (atomic_load(&p->quit)) break;
        run_pieces(p, tid);
    }
    return NULL;
}

cpool_t *cpool_new(int n_threads) {
    cpool_t *p = aligned_alloc(64, (sizeof(cpool_t) + 63) & ~(size_t)63);
    if (!p) return NULL;
    memset(p, 0, sizeof *p);
    p->n_threads = n_threads < 1 ? 1 : n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->serial, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->waiting, 0);
    atomic_init(&p->quit, 0);
    atomic_init(&p->keep_spinning, 0);
    atomic_init(&p->done, 0);
    p->threads = calloc((size_t)p->n_threads, sizeof *p->threads);
    p->slots = aligned_alloc(64, sizeof *p->slots * (size_t)p->n_threads);
    if (!p->threads || !p->slots) goto fail;
    for (int t = 0; t < p->n_threads; t++) atomic_init(&p->slots[t].w, 0);
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

/* The caller's wait for the pieces others hold: a spin about as long as its own share
 * took (within bounds), then sleep. */
static void wait_done(cpool_t *p, int pieces, int64_t own_ns) {
    int64_t t0 = now_ns();
    int64_t spin = own_ns < WAIT_SPIN_MIN_NS ? WAIT_SPIN_MIN_NS
                 : own_ns > WAIT_SPIN_MAX_NS ? WAIT_SPIN_MAX_NS : own_ns;
    for (int i = 1; atomic_load_explicit(&p->done, memory_order_acquire) < pieces; i++) {
        cpu_relax();
        if (i % 64 != 0) continue;
        int64_t t = now_ns() - t0;
        if (t > YIELD_SPIN_NS) sched_yield();
        if (t > spin) {
            atomic_store(&p->waiting, 1);
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->done) < pieces) pthread_cond_wait(&p->done_cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
            atomic_store(&p->waiting, 0);
            return;
        }
    }
}

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
    int pieces = cpool_pieces(n, parts);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->pieces = pieces;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    for (int t = 0; t < p->n_threads; t++) {
        uint64_t lo = t < parts ? (uint64_t)pieces * t / parts : 0;
        uint64_t hi = t < parts ? (uint64_t)pieces * (t + 1) / parts : 0;
        atomic_store_explicit(&p->slots[t].w, lo << 32 | hi, memory_order_release);
    }
    atomic_fetch_add(&p->serial, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->mu);
    }
    int64_t t0 = now_ns();
    run_pieces(p, 0);
    wait_done(p, pieces, now_ns() - t0);
}

void cpool_free(cpool_t *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int t = 0; t < p->started; t++) pthread_join(p->threads[t], NULL);
    free(p->threads);
    free(p->slots);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done_cv);
    free(p);
}

void cpool_set_spin(cpool_t *p, int on) { atomic_store(&p->keep_spinning, on != 0); }
