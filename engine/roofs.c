/* roofs: see roofs.h. */
#include "engine/roofs.h"

#include <cblas.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

double roofs_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The readers' start: they wait until go is set, 1 to read, -1 to return at once (a
 * thread failed to start; a barrier would wait for it forever). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;
} gate_t;

typedef struct {
    const float *p;
    size_t n;              /* floats, a multiple of 128 */
    gate_t *gate;
    double t0, t1;
    float sink;
} reader_t;

static void gate_open(gate_t *g, int go) {
    pthread_mutex_lock(&g->mu);
    g->go = go;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

#if defined(__x86_64__)
#include <immintrin.h>

/* Eight independent accumulators keep several loads in flight per core. The loop needs
 * real vector instructions: generic vector types without -march are lowered through the
 * stack and measure the loop, not the memory. */
__attribute__((target("avx512f"))) static float sum_avx512(const float *p, size_t n) {
    __m512 a[8];
    for (int j = 0; j < 8; j++) a[j] = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 128)
        for (int j = 0; j < 8; j++) a[j] = _mm512_add_ps(a[j], _mm512_load_ps(p + i + 16 * j));
    for (int j = 1; j < 8; j++) a[0] = _mm512_add_ps(a[0], a[j]);
    return _mm512_reduce_add_ps(a[0]);
}

static float sum_sse(const float *p, size_t n) {
    __m128 a[8];
    for (int j = 0; j < 8; j++) a[j] = _mm_setzero_ps();
    for (size_t i = 0; i < n; i += 32)
        for (int j = 0; j < 8; j++) a[j] = _mm_add_ps(a[j], _mm_load_ps(p + i + 4 * j));
    for (int j = 1; j < 8; j++) a[0] = _mm_add_ps(a[0], a[j]);
    float t[4];
    _mm_storeu_ps(t, a[0]);
    return t[0] + t[1] + t[2] + t[3];
}

static float sum_floats(const float *p, size_t n) {
    static int avx512 = -1;
    if (avx512 < 0) {
        __builtin_cpu_init();
        avx512 = __builtin_cpu_supports("avx512f");
    }
    return avx512 ? sum_avx512(p, n) : sum_sse(p, n);
}
#else
static float sum_floats(const float *p, size_t n) {
    float a[8] = {0};
    for (size_t i = 0; i < n; i += 8)
        for (int j = 0; j < 8; j++) a[j] += p[i + j];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}
#endif

static void read_slice(reader_t *r) {
    r->t0 = roofs_now();
    r->sink = sum_floats(r->p, r->n);
    r->t1 = roofs_now();
}

static void *reader_main(void *arg) {
    reader_t *r = arg;
    pthread_mutex_lock(&r->gate->mu);
    while (!r->gate->go) pthread_cond_wait(&r->gate->cv, &r->gate->mu);
    int go = r->gate->go;
    pthread_mutex_unlock(&r->gate->mu);
    if (go > 0) read_slice(r);
    return NULL;
}

struct roofs_probe {
    float *buf;
    size_t per;            /* floats per thread */
    int n_threads;
    reader_t *rd;
    pthread_t *th;
    gate_t gate;
};

void roofs_probe_free(roofs_probe_t *p) {
    if (!p) return;
    if (p->rd) {   /* the gate exists once rd does */
        pthread_mutex_destroy(&p->gate.mu);
        pthread_cond_destroy(&p->gate.cv);
    }
    free(p->buf);
    free(p->rd);
    free(p->th);
    free(p);
}

roofs_probe_t *roofs_probe_new(size_t bytes, int n_threads, char *err, size_t errlen) {
    /* 512 MiB: 16x a CCD's L3 here, far past any one core's caches. The first write of
     * each page is what costs (on this VM 2 GiB took about 4 s to fault in, most of a
     * short `bench` run; 512 MiB reads at the same rate) */
    if (!bytes) bytes = (size_t)512 << 20;
    if (n_threads <= 0) n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads <= 0) n_threads = 1;
    roofs_probe_t *p = calloc(1, sizeof *p);
    size_t per = bytes / sizeof(float) / (size_t)n_threads / 128 * 128;
    /* on huge pages, as the CPU backend keeps its weights: with 4 KB pages the probe
     * would measure TLB misses as much as memory (about a quarter less bandwidth here) */
    size_t huge = (size_t)2 << 20;
    size_t alloc_bytes = (per * (size_t)n_threads * sizeof(float) + huge - 1) & ~(huge - 1);
    if (p) {
        p->per = per;
        p->n_threads = n_threads;
        p->buf = per ? aligned_alloc(huge, alloc_bytes) : NULL;
        p->th = calloc((size_t)n_threads, sizeof *p->th);
        if (p->buf && p->th) p->rd = calloc((size_t)n_threads, sizeof *p->rd);
    }
    if (!p || !p->rd) {   /* per = 0 leaves rd NULL too */
        if (p && !per)
            snprintf(err, errlen, "memory bandwidth: %zu bytes is too small a buffer for %d "
                     "threads", bytes, n_threads);
        else
            snprintf(err, errlen, "memory bandwidth: cannot allocate %.2f GB", bytes / 1e9);
        roofs_probe_free(p);
        return NULL;
    }
    (void)madvise(p->buf, alloc_bytes, MADV_HUGEPAGE);   /* a hint: may fail */
    /* every page written (not just mapped), so the reads hit memory, not the zero page */
    for (size_t i = 0; i < per * (size_t)n_threads; i++) p->buf[i] = (float)(i & 7);
    pthread_mutex_init(&p->gate.mu, NULL);
    pthread_cond_init(&p->gate.cv, NULL);
    return p;
}

double roofs_probe_pass(roofs_probe_t *p, char *err, size_t errlen) {
    int started = 1, n = p->n_threads;
    p->gate.go = 0;   /* no reader is alive between passes */
    for (int t = 0; t < n; t++) {
        p->rd[t] = (reader_t){p->buf + p->per * (size_t)t, p->per, &p->gate, 0, 0, 0};
        if (t > 0 && pthread_create(&p->th[t], NULL, reader_main, &p->rd[t]) != 0) break;
        if (t > 0) started++;
    }
    gate_open(&p->gate, started == n ? 1 : -1);
    if (started == n) read_slice(&p->rd[0]);
    for (int t = 1; t < started; t++) pthread_join(p->th[t], NULL);
    if (started < n) {
        snprintf(err, errlen, "memory bandwidth: cannot start %d threads", n);
        return -1;
    }
    double t0 = p->rd[0].t0, t1 = p->rd[0].t1;
    for (int t = 1; t < n; t++) {
        t0 = p->rd[t].t0 < t0 ? p->rd[t].t0 : t0;
        t1 = p->rd[t].t1 > t1 ? p->rd[t].t1 : t1;
    }
    return (double)p->per * n * sizeof(float) / (t1 - t0);
}

double roofs_mem_read_bw(size_t bytes, int n_threads, int reps, char *err, size_t errlen) {
    roofs_probe_t *p = roofs_probe_new(bytes, n_threads, err, errlen);
    if (!p) return -1;
    if (reps <= 0) reps = 5;
    double best = -1;
    for (int rep = 0; rep < reps; rep++) {
        double bw = roofs_probe_pass(p, err, errlen);
        if (bw < 0) {
            best = -1;
            break;
        }
        best = bw > best ? bw : best;
    }
    roofs_probe_free(p);
    return best;
}

/* OpenBLAS's own (its pthreads build): stops its worker threads, which the next BLAS call
 * starts again. Weak, so that another BLAS links too (and the call is skipped). */
extern int blas_thread_shutdown_(void) __attribute__((weak));

double roofs_sgemm_flops(int n, int reps, char *err, size_t errlen) {
    if (n <= 0) n = 2048;
    if (reps <= 0) reps = 5;
    size_t nn = (size_t)n * n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
    double best = -1;
    if (!a || !b || !c) {
        snprintf(err, errlen, "sgemm rate: cannot allocate three %d x %d matrices", n, n);
        goto done;
    }
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)((i * 7) % 13) * 0.01f;
        b[i] = (float)((i * 5) % 11) * 0.01f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int r = 0; r < reps; r++) {
        double t0 = roofs_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                    n);
        double fl = 2.0 * n * (double)nn / (roofs_now() - t0);
        if (fl > best) best = fl;
    }
    /* After a call OpenBLAS's threads spin, with sched_yield, before they sleep: here
     * 0.1-0.5 s of a core (perf samples), while `bench` and `profile` time the engine's
     * steps right after the roofs. No tok/s difference was measurable (5 alternating
     * batch-1 and batch-8 pairs, Q4_0 and Q8_0: within this VM's noise), but a timed run
     * should not share its cores with a spinning thread of ours. */
    if (blas_thread_shutdown_) blas_thread_shutdown_();
done:
    free(a);
    free(b);
    free(c);
    return best;
}
