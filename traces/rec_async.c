/* rec_async: see rec_async.h. A ring buffer guarded by one mutex; the writer takes rows out
 * in batches so the lock is held briefly and rarely. */
#include "traces/rec_async.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The writer sleeps until WAKE_AT rows are queued (or a drain, or WAKE_AFTER_MS): waking
 * it for every row would cost a context switch per row, more than the insert itself. */
enum { QUEUE_CAP = 8192, TAKE_MAX = 512, WAKE_AT = 256, WAKE_AFTER_MS = 50 };

typedef struct {
    rec_row_kind_t kind;
    int64_t run_id;
    union {
        rec_request_t q;
        rec_step_t s;
        rec_token_t t;
    } u;
    char *reason; /* owned copy of u.q.reason */
} row_t;

struct rec_async {
    rec_t *rec;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t has_rows, has_room, idle;
    row_t *ring;
    int head, count;
    int busy;   /* the writer holds rows outside the lock */
    int stop;
    int draining; /* an owner waits in rec_async_drain */
    int failed; /* a write failed since the last drain */
    char first_err[4096]; /* its message; written by the writer, read after a drain */
};

static void *writer(void *arg) {
    rec_async_t *a = arg;
    row_t *batch = malloc(sizeof *batch * TAKE_MAX);
    pthread_mutex_lock(&a->mu);
    for (;;) {
        /* Sleep until a batch is worth it, an owner waits for the rows, or the timer runs
         * out with rows pending (so a slow producer's rows still land within WAKE_AFTER_MS). */
        while (!a->stop && a->count < WAKE_AT && !(a->draining && a->count > 0)) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += WAKE_AFTER_MS * 1000000L;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            if (pthread_cond_timedwait(&a->has_rows, &a->mu, &until) == ETIMEDOUT && a->count > 0)
                break;
        }
        if (a->count == 0) {
            if (a->stop) break;
            continue;
        }
        int n = a->count < TAKE_MAX ? a->count : TAKE_MAX;
        if (!batch) n = 1; /* out of memory for the batch: one row at a time, in place */
        row_t single;
        row_t *take = batch ? batch : &single;
        for (int i = 0; i < n; i++) {
            take[i] = a->ring[a->head];
            a->head = (a->head + 1) % QUEUE_CAP;
        }
        a->count -= n;
        a->busy = 1;
        pthread_cond_signal(&a->has_room);
        pthread_mutex_unlock(&a->mu);

        int failed = 0;
        for (int i = 0; i < n; i++) {
            row_t *w = &take[i];
            int rc = w->kind == REC_ROW_REQUEST ? rec_write_request(a->rec, w->run_id, &w->u.q)
                   : w->kind == REC_ROW_STEP    ? rec_write_step(a->rec, w->run_id, &w->u.s)
                                                : rec_write_token(a->rec, w->run_id, &w->u.t);
            /* Keep the first message: later failures overwrite the recorder's. The failed
             * flag is only cleared by a drain, which happens on the owner's thread. */
            if (rc != 0 && !failed && !a->failed) {
                const char *m = rec_errmsg(a->rec);
                strncpy(a->first_err, m ? m : "write failed", sizeof a->first_err - 1);
            }
            failed |= rc != 0;
            free(w->reason);
        }
        pthread_mutex_lock(&a->mu);
        a->failed |= failed;
        a->busy = 0;
        if (a->count == 0) pthread_cond_broadcast(&a->idle);
    }
    pthread_cond_broadcast(&a->idle);
    pthread_mutex_unlock(&a->mu);
    free(batch);
    return NULL;
}

rec_async_t *rec_async_new(rec_t *r) {
    rec_async_t *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->rec = r;
    a->ring = malloc(sizeof *a->ring * QUEUE_CAP);
    if (!a->ring) goto fail;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->has_rows, NULL);
    pthread_cond_init(&a->has_room, NULL);
    pthread_cond_init(&a->idle, NULL);
    if (pthread_create(&a->thread, NULL, writer, a) != 0) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->has_rows);
        pthread_cond_destroy(&a->has_room);
        pthread_cond_destroy(&a->idle);
        goto fail;
    }
    return a;
fail:
    free(a->ring);
    free(a);
    return NULL;
}

int rec_async_push(rec_async_t *a, rec_row_kind_t kind, int64_t run_id, const void *row) {
    row_t w = { .kind = kind, .run_id = run_id };
    switch (kind) {
    case REC_ROW_REQUEST:
        w.u.q = *(const rec_request_t *)row;
        if (w.u.q.reason) {
            w.reason = strdup(w.u.q.reason);
            if (!w.reason) return -1;
            w.u.q.reason = w.reason;
        }
        break;
    case REC_ROW_STEP: w.u.s = *(const rec_step_t *)row; break;
    case REC_ROW_TOKEN: w.u.t = *(const rec_token_t *)row; break;
    }
    pthread_mutex_lock(&a->mu);
    while (a->count == QUEUE_CAP) pthread_cond_wait(&a->has_room, &a->mu);
    a->ring[(a->head + a->count) % QUEUE_CAP] = w;
    if (++a->count == WAKE_AT) pthread_cond_signal(&a->has_rows);
    int failed = a->failed;
    pthread_mutex_unlock(&a->mu);
    return failed ? -1 : 0;
}

int rec_async_drain(rec_async_t *a) {
    pthread_mutex_lock(&a->mu);
    a->draining++;
    pthread_cond_signal(&a->has_rows);
    while (a->count > 0 || a->busy) pthread_cond_wait(&a->idle, &a->mu);
    a->draining--;
    int failed = a->failed;
    a->failed = 0;
    pthread_mutex_unlock(&a->mu);
    return failed ? -1 : 0;
}

const char *rec_async_errmsg(const rec_async_t *a) { return a->first_err; }

void rec_async_free(rec_async_t *a) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_signal(&a->has_rows);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->has_rows);
    pthread_cond_destroy(&a->has_room);
    pthread_cond_destroy(&a->idle);
    free(a->ring);
    free(a);
}
