/* explain_view: what `twinserve explain` shows of one simulated run. A recorder is the
 * hook data of sim_run (sim/sim.h): it turns each executed step into a block of text lines
 * (arrivals, the batch's entries, preemptions, KV and queue, finishes), in the wide form of
 * a single run or the narrow form of one column of a side-by-side comparison, and either
 * prints each block as it is complete or keeps it for the side-by-side printer.
 *
 * Invariants:
 *  - A block is complete only when the next step begins (or the run ends): finishes are
 *    reported while the scheduler commits the step, after its on_step hook.
 *  - With skip_quiet, a step is shown only when something happens in it: an arrival, a
 *    rejection, prompt tokens (an admission, a chunk or a recompute), a preemption, a
 *    finish, or a batch whose set of requests differs from the previous step's. The other
 *    steps are decode-only steps of an unchanged batch; they are counted, and the next
 *    shown block (or the end) says how many were left out.
 *  - In the narrow form an arrival before a step is a block of its own (start = end = its
 *    arrival time, step -1), not counted against max_shown, so that the side-by-side view
 *    places it at its time.
 *  - max_shown counts shown blocks. When it is reached the recorder either stops the run
 *    (stop_when_full) or keeps it going without recording, so the run's summary covers
 *    every request (a comparison's closing line needs that).
 *
 * Ownership: the recorder owns its blocks and buffers (explain_rec_free). The hooks borrow
 * what sim_run passes for the duration of the call, as sim.h says. */
#ifndef TWIN_EXPLAIN_VIEW_H
#define TWIN_EXPLAIN_VIEW_H

#include <stdint.h>
#include <stdio.h>

#include "policies/sched.h"
#include "sim/sim.h"

/* Width of one column of the side-by-side view: two columns and " | " fit in 80. */
enum { EXPLAIN_COL = 38 };

typedef struct {
    double start_s, end_s;
    int64_t step;
    int64_t quiet_before;   /* decode-only steps left out just before this one */
    char *text;             /* '\n'-terminated lines, owned */
    size_t len, cap;
} explain_block_t;

typedef struct {
    /* set by the caller before sim_run */
    int narrow;             /* the narrow form, for a column of the side-by-side view */
    int cluster;            /* more than one replica: steps and arrivals name theirs */
    int skip_quiet;
    int64_t max_shown;      /* shown blocks before the recorder is full (>= 1) */
    int stop_when_full;     /* full: stop the run (else: keep it going, record nothing) */
    FILE *stream;           /* non-NULL: print each shown block there and drop it */

    /* results */
    explain_block_t *blocks; /* kept blocks (stream NULL), in step order */
    int64_t n_blocks, cap_blocks;
    int64_t steps, shown;   /* steps executed while recording, blocks shown */
    int64_t quiet;          /* steps left out since the last shown block */
    int full;
    int64_t finished, rejected, preemptions;
    int oom;

    /* private */
    explain_block_t cur, pending; /* the step in progress; text waiting for the next step */
    int cur_open, cur_event, pending_event;
    int32_t cur_replica;    /* whose step is being recorded (cluster) */
    int32_t *preempt;       /* last known preemption count per request id */
    unsigned char *seen;    /* request id already announced */
    int32_t cap;
    int32_t *batch, *prev_batch; /* sorted request ids of this step and the previous one */
    int32_t n_batch, n_prev, cap_batch;
    const sched_req_t **arr; /* requests in arrival order, for announcing them */
    int32_t cap_arr;
} explain_rec_t;

/* sim_opts_t hooks; ud is an explain_rec_t. */
int explain_on_step(void *ud, const sim_step_info_t *si);
int explain_on_final(void *ud, const sched_req_t *r, const char *reason);

/* Completes the last block after sim_run returns, and prints the closing gap line
 * ("... N decode-only steps ...") on the stream when steps were left out at the end. */
void explain_rec_finish(explain_rec_t *x);
void explain_rec_free(explain_rec_t *x);

/* Prints two recorders' kept blocks side by side in EXPLAIN_COL-wide columns, aligned by
 * time: steps whose intervals overlap share a row; a step alone in its time is printed
 * against a blank. Stops where a full recorder's blocks end, as the other run's later
 * steps have nothing to be compared with. */
void explain_print_side_by_side(FILE *f, const explain_rec_t *a, const explain_rec_t *b);

#endif
