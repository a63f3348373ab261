/* sched_finish: ending a request before its length is reached (sched.h, sched_finish_early):
 * a live server stops a request at EOS or a stop string, or when its client goes away,
 * which a trace replay never does (its true lengths end every request in sched_commit). */
#include <stdio.h>

#include "policies/sched_internal.h"

int sched_finish_early(sched_t *s, int32_t id, int32_t state, const char *reason, double now) {
    if (state != SCHED_FINISHED && state != SCHED_ABORTED) {
        sched_set_error(s, "sched_finish_early: request %d: state %s is not an ending "
                        "(finished or aborted)", id, sched_state_name(state));
        return -1;
    }
    if (s->in_step) {
        sched_set_error(s, "sched_finish_early: request %d: called while a plan is being built",
                        id);
        return -1;
    }
    slot_t *x = sched_map_get(s, id);
    if (!x || x->pub.state >= SCHED_FINISHED) return 1; /* already final (or never here) */
    sched_req_t *q = &x->pub;
    if (q->state == SCHED_TRANSFER) {
        sched_set_error(s, "sched_finish_early: request %d is in transit (end it on the "
                        "replica that owns it)", id);
        return -1;
    }
    /* The plan's entries point at the request until the commit: ending it in between would
     * leave the executor's result without its request. */
    if (x->in_plan) {
        sched_set_error(s, "sched_finish_early: request %d is in the plan of step %lld, not "
                        "yet committed", id, (long long)s->plan.step);
        return -1;
    }
    if (state == SCHED_FINISHED && q->generated < 1) {
        sched_set_error(s, "sched_finish_early: request %d has no output yet: it can only be "
                        "aborted", id);
        return -1;
    }
    s->view.now = now;
    int was_waiting = q->state == SCHED_WAITING || q->state == SCHED_PREEMPTED;
    if (state == SCHED_FINISHED) {
        /* Its true length turns out to be what it produced, as EOS there would have said:
         * the records then replay it with that length. */
        q->true_output_tokens = q->generated;
        q->finish_s = now;
    }
    sched_finalize(s, x, state, reason);
    if (was_waiting) s->wait_out++;
    int rc = 0;
    /* The policy forgets the request as it forgets a finished one (static batching pads
     * its slot from here on). */
    if (s->policy.on_finish && s->policy.on_finish(s->policy.ud, s, q) != 0) rc = -1;
    sched_compact(s);
    return rc;
}
