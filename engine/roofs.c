/* roofs: see roofs.h. */
#include "engine/roofs.h"

#include <cblas.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef float v16f __attribute__((vector_size(64)));

double roofs_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    const float *p;
    size_t n;              /* floats, a multiple of 64 */
    pthread_barrier_t *bar;
    double t0, t1;
    float sink;
} reader_t;

/* Four independent accumulators keep several loads in flight per core. */
static void *read_slice(void *arg) {
    reader_t *r = arg;
    v16f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    pthread_barrier_wait(r->bar);
    r->t0 = roofs_now();
    for (size_t i = 0; i < r->n; i += 64) {
        v16f x0, x1, x2, x3;
        memcpy(&x0, r->p + i, 64);
        memcpy(&x1, r->p + i + 16, 64);
        memcpy(&x2, r->p + i + 32, 64);
        memcpy(&x3, r->p + i + 48, 64);
        a0 += x0;
        a1 += x1;
        a2 += x2;
        a3 += x3;
    }
    r->t1 = roofs_now();
    v16f s = a0 + a1 + a2 + a3;
    r->sink = s[0] + s[15];
    return NULL;
}

double roofs_mem_read_bw(size_t bytes, int n_threads, int reps, char *err, size_t errlen) {
    if (!bytes) bytes = (size_t)2 << 30;
    if (n_threads <= 0) n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads <= 0) n_threads = 1;
    if (reps <= 0) reps = 5;
    size_t per = bytes / sizeof(float) / (size_t)n_threads / 64 * 64;
    double best = -1;
    float *buf = aligned_alloc(64, per * (size_t)n_threads * sizeof(float));
    reader_t *rd = calloc((size_t)n_threads, sizeof *rd);
    pthread_t *th = calloc((size_t)n_threads, sizeof *th);
    pthread_barrier_t bar;
    int have_bar = 0;
    if (!buf || !rd || !th || per == 0) {
        snprintf(err, errlen, "memory bandwidth: cannot allocate %.2f GB", bytes / 1e9);
        goto done;
    }
    /* every page written (not just mapped), so the reads hit memory, not the zero page */
    for (size_t i = 0; i < per * (size_t)n_threads; i++) buf[i] = (float)(i & 7);
    pthread_barrier_init(&bar, NULL, (unsigned)n_threads);
    have_bar = 1;
    for (int rep = 0; rep < reps; rep++) {
        int started = 0;
        for (int t = 0; t < n_threads; t++) {
            rd[t] = (reader_t){buf + per * (size_t)t, per, &bar, 0, 0, 0};
            if (t > 0 && pthread_create(&th[t], NULL, read_slice, &rd[t]) != 0) {
                snprintf(err, errlen, "memory bandwidth: cannot start %d threads", n_threads);
                /* the barrier would wait forever for the missing thread */
                for (int u = 1; u < t; u++) pthread_cancel(th[u]);
                goto done;
            }
            started++;
        }
        read_slice(&rd[0]);
        for (int t = 1; t < started; t++) pthread_join(th[t], NULL);
        double t0 = rd[0].t0, t1 = rd[0].t1;
        for (int t = 1; t < n_threads; t++) {
            t0 = rd[t].t0 < t0 ? rd[t].t0 : t0;
            t1 = rd[t].t1 > t1 ? rd[t].t1 : t1;
        }
        double bw = (double)per * n_threads * sizeof(float) / (t1 - t0);
        if (bw > best) best = bw;
    }
done:
    if (have_bar) pthread_barrier_destroy(&bar);
    free(buf);
    free(rd);
    free(th);
    return best;
}

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
done:
    free(a);
    free(b);
    free(c);
    return best;
}
