/* rec_async: the recorder's background writer (internal to traces/).
 *
 * With rec_set_async(r, 1), rows handed to rec_request/rec_step/rec_token are copied into a
 * bounded queue and inserted by one writer thread, so the simulator or engine loop does not
 * wait for SQLite (on two cores a replay then takes about as long as the slower of the two
 * halves, not their sum).
 *
 * Invariants:
 *  - The SQLite connection is used by one thread at a time: the writer only between a push
 *    and the next drain, the owner only after rec_async_drain returned (queue empty, writer
 *    parked). Every recorder call other than the three row calls drains first.
 *  - Rows are written in the order they were pushed.
 *  - A write error is kept (the recorder's message, first error wins) and returned by the
 *    next push or drain; rows after it are still attempted, so nothing handed over is
 *    dropped silently.
 *  - The queue is bounded (the producer waits when it is full): memory stays flat.
 *
 * Ownership: created and freed by recorder.c; strings in queued rows are copied. */
#ifndef TWIN_REC_ASYNC_H
#define TWIN_REC_ASYNC_H

#include <stdint.h>

#include "traces/recorder.h"

typedef struct rec_async rec_async_t;

typedef enum { REC_ROW_REQUEST, REC_ROW_STEP, REC_ROW_TOKEN } rec_row_kind_t;

/* The synchronous writers in recorder.c that the thread calls. */
int rec_write_request(rec_t *r, int64_t run_id, const rec_request_t *q);
int rec_write_step(rec_t *r, int64_t run_id, const rec_step_t *s);
int rec_write_token(rec_t *r, int64_t run_id, const rec_token_t *t);

rec_async_t *rec_async_new(rec_t *r);        /* NULL when the thread cannot start */
int rec_async_push(rec_async_t *a, rec_row_kind_t kind, int64_t run_id, const void *row);
int rec_async_drain(rec_async_t *a);         /* 0, or -1 if a write failed since the last drain */
const char *rec_async_errmsg(const rec_async_t *a); /* the first failure's message, after a drain */
void rec_async_free(rec_async_t *a);         /* drains, stops and joins the thread */

#endif
