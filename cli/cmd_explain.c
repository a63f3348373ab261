/* cmd_explain: `twinserve explain`, a teaching view. It runs the simulator on a small trace
 * with the step hooks of sim/sim.h and prints, step by step, what the policy scheduled:
 * each request's prefill chunk or decode token, its KV blocks, the queue, arrivals,
 * preemptions and finishes. The records go to a temporary database unless --db is given. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "traces/recorder.h"
#include "cli/cli_sim.h"
#include "cli/cli_util.h"
#include "sim/sim.h"

enum { QUEUE_SHOWN = 10 };

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve explain --trace FILE --policy FILE [--steps N] [options]\n"
        "\n"
        "Runs the simulator on the first requests of a trace and prints every step: its\n"
        "start time and duration, and for each request in the batch either a prefill chunk\n"
        "(prompt positions a..b of P; 'recompute' after a preemption) or a decode (output\n"
        "token i of N), its tokens and the KV blocks it holds; then arrivals, the queue, KV\n"
        "blocks used/total, preemptions and finishes. Watch continuous batching admit new\n"
        "requests between decodes, and chunked prefill mix a prompt chunk with decodes:\n"
        "  twinserve explain --trace T --policy policies/chunked_prefill.lua --set chunk=256\n"
        "\n"
        "  --trace FILE, --policy FILE   as for `twinserve sim`\n"
        "  --steps N             print at most N steps, then stop the run (default 40)\n"
        "  --limit N             requests replayed from the trace (default 12; 0: all)\n"
        "  --rate-scale X        multiply the request rate by X\n"
        "  --db FILE             keep the records in FILE (default: a temporary database)\n"
        "  --name RUN            run name in --db\n");
    cli_sim_usage(f);
    fprintf(f, "\nExit status: 0 done (or stopped after --steps), 1 the run failed, 2 usage "
               "error.\n");
}

typedef struct {
    int64_t max_steps, steps;
    int32_t *preempt;       /* last known preemption count per request id */
    unsigned char *seen;    /* request id already announced */
    int32_t cap;
    int64_t finished, rejected, preemptions;
    int oom;
} explain_t;

/* Grows the per-id arrays to hold id; 0, or -1 when out of memory. */
static int track(explain_t *x, int32_t id) {
    if (id < x->cap) return 0;
    int32_t cap = id + 1 > 2 * x->cap ? id + 1 : 2 * x->cap;
    int32_t *p = realloc(x->preempt, sizeof *p * (size_t)cap);
    if (p) x->preempt = p;
    unsigned char *s = realloc(x->seen, (size_t)cap);
    if (s) x->seen = s;
    if (!p || !s) return x->oom = 1, -1;
    memset(x->preempt + x->cap, 0, sizeof *p * (size_t)(cap - x->cap));
    memset(x->seen + x->cap, 0, (size_t)(cap - x->cap));
    x->cap = cap;
    return 0;
}

static void announce(explain_t *x, const sched_req_t *r, double before, int after) {
    if (track(x, r->id) || x->seen[r->id]) return;
    if (after ? r->arrival_s <= before : r->arrival_s > before) return;
    x->seen[r->id] = 1;
    printf("  t=%.4f s  r%d arrives: prompt %d tokens, wants %d output tokens%s\n",
           r->arrival_s, r->id, r->prompt_tokens, r->true_output_tokens,
           after ? " (during the step)" : "");
}

/* Arrivals not yet shown: those before the step start first, then those during it. */
static void arrivals(explain_t *x, const sched_view_t *v, double start, int after) {
    for (int32_t i = 0; i < v->n_running; i++) announce(x, v->running[i], start, after);
    for (int32_t i = 0; i < v->n_waiting; i++) announce(x, v->waiting[i], start, after);
}

static void entry_line(const sched_entry_t *e, const int32_t *accepted, int32_t i) {
    const sched_req_t *r = e->req;
    char what[160], then[96] = "";
    if (e->is_decode) {
        snprintf(what, sizeof what, "decode    output token %d of %d", r->generated + 1,
                 r->true_output_tokens);
        if (e->num_spec > 0)
            snprintf(then, sizeof then, "  +%d drafts verified, %d accepted", e->num_spec,
                     accepted ? accepted[i] : 0);
    } else {
        int32_t known = r->prompt_tokens + r->generated;
        snprintf(what, sizeof what, "%s positions %d..%d of %d", r->generated ? "recompute"
                 : "prefill  ", e->start, e->start + e->num_tokens - 1, known);
        if (e->sample)
            snprintf(then, sizeof then, "  -> %s", r->generated ? "next output token"
                     : "first output token");
        else
            snprintf(then, sizeof then, "  (%d prompt tokens left)",
                     known - e->start - e->num_tokens);
    }
    printf("    r%-4d %-38s %5d tok  %4d KV blocks%s\n", r->id, what,
           e->num_tokens + e->num_spec, e->num_blocks, then);
}

static int on_step(void *ud, const sim_step_info_t *si) {
    explain_t *x = ud;
    const sched_plan_t *p = si->plan;
    const sched_view_t *v = si->view;
    if (x->steps >= x->max_steps) return 1;
    x->steps++;
    arrivals(x, v, si->start_s, 0);
    const char *mix = p->prefill_tokens > 0 && p->decode_tokens > 0
                          ? "   <- mixed: prefill and decodes in one batch" : "";
    printf("step %lld  t=%.4f s  took %.2f ms  %d tokens = %d prefill + %d decode",
           (long long)p->step, si->start_s, si->dur_s * 1e3, p->num_tokens, p->prefill_tokens,
           p->decode_tokens);
    if (p->pad_tokens) printf(" + %d padding", p->pad_tokens);
    printf("  (%d seq%s)%s\n", p->n, p->n == 1 ? "" : "s", mix);
    /* Preemptions are decided while the policy builds the plan: the victims are back in
     * the queue with a higher count than we last saw. */
    for (int32_t i = 0; i < v->n_waiting; i++) {
        const sched_req_t *r = v->waiting[i];
        if (track(x, r->id) || r->preemptions <= x->preempt[r->id]) continue;
        x->preemptions += r->preemptions - x->preempt[r->id];
        x->preempt[r->id] = r->preemptions;
        printf("    r%-4d PREEMPTED to make room for this step: its KV blocks were freed; it "
               "waits in the queue to recompute\n", r->id);
    }
    for (int32_t i = 0; i < p->n; i++) entry_line(&p->entries[i], si->accepted, i);
    arrivals(x, v, si->start_s, 1);
    int32_t idle = 0;
    for (int32_t i = 0; i < v->n_running; i++) idle += v->running[i]->scheduled == 0;
    printf("  KV %d/%d blocks in use (%.1f%%)  running %d%s  queue %d", si->kv_used, si->kv_total,
           si->kv_total ? 100.0 * si->kv_used / si->kv_total : 0.0, v->n_running,
           idle ? " (some not in this step)" : "", v->n_waiting);
    for (int32_t i = 0; i < v->n_waiting && i < QUEUE_SHOWN; i++)
        printf("%s r%d", i ? "" : ":", v->waiting[i]->id);
    if (v->n_waiting > QUEUE_SHOWN) printf(" ... (+%d)", v->n_waiting - QUEUE_SHOWN);
    printf("\n");
    return x->oom ? 1 : 0;
}

static int on_final(void *ud, const sched_req_t *r, const char *reason) {
    explain_t *x = ud;
    if (r->state == SCHED_FINISHED) {
        x->finished++;
        printf("    r%-4d FINISHED: %d tokens, TTFT %.1f ms, end-to-end %.1f ms\n", r->id,
               r->generated, (r->first_token_s - r->arrival_s) * 1e3,
               (r->finish_s - r->arrival_s) * 1e3);
    } else if (r->state == SCHED_REJECTED) {
        x->rejected++;
        if (track(x, r->id) == 0) x->seen[r->id] = 1;
        printf("  t=%.4f s  r%d REJECTED: %s\n", r->arrival_s, r->id, reason ? reason : "");
    }
    return 0;
}

enum { O_TRACE = 256, O_POLICY, O_DB, O_NAME, O_RATE, O_STEPS, O_HELP };

int cmd_explain(int argc, char **argv) {
    static const struct option opts[] = {
        { "trace", 1, 0, O_TRACE }, { "policy", 1, 0, O_POLICY }, { "db", 1, 0, O_DB },
        { "name", 1, 0, O_NAME }, { "rate-scale", 1, 0, O_RATE }, { "steps", 1, 0, O_STEPS },
        { "help", 0, 0, O_HELP }, CLI_SIM_OPTIONS, { 0, 0, 0, 0 },
    };
    sim_opts_t o;
    sim_opts_defaults(&o);
    o.version = TWIN_VERSION;
    o.trace_opts.limit = 12;
    explain_t x = { .max_steps = 40 };
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    char tmpdb[1024] = "";
    int rc = 2, c, keep = 0;
    if (!sets) return 1;
    o.sets = sets;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int ok = 1;
        switch (c) {
        case O_TRACE: o.trace_path = optarg; break;
        case O_POLICY: o.policy_path = optarg; break;
        case O_DB: o.db_path = optarg; keep = 1; break;
        case O_NAME: o.run_name = optarg; break;
        case O_RATE: ok = cli_double(optarg, 1e-9, 1e9, &o.trace_opts.rate_scale); break;
        case O_STEPS: ok = cli_i64(optarg, 1, INT64_MAX, &x.max_steps); break;
        case O_HELP: usage(stdout); rc = 0; goto done;
        default:
            if (c < CLI_SIM_FIRST) {
                usage(stderr);
                goto done;
            }
            if (!cli_sim_apply("explain", c, optarg, &o)) goto done;
        }
        if (!ok) {
            fprintf(stderr, "twinserve explain: bad value '%s' for --%s\n", optarg,
                    opts[c - O_TRACE].name);
            goto done;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "twinserve explain: unexpected argument '%s'\n", argv[optind]);
        goto done;
    }
    if (!o.trace_path || !o.policy_path) {
        fprintf(stderr, "twinserve explain: --trace and --policy are required\n");
        goto done;
    }
    if (!keep) { /* no --db: a private temporary database, removed at the end */
        const char *t = getenv("TMPDIR");
        snprintf(tmpdb, sizeof tmpdb, "%s/twinexplain-XXXXXX", t && *t ? t : "/tmp");
        int fd = mkstemp(tmpdb);
        if (fd < 0) {
            fprintf(stderr, "twinserve explain: cannot create a temporary database in %s\n",
                    t && *t ? t : "/tmp");
            rc = 1;
            tmpdb[0] = 0;
            goto done;
        }
        close(fd);
        o.db_path = tmpdb;
    }
    o.on_step = on_step;
    o.on_final = on_final;
    o.hook_ud = &x;

    char reqs[64] = "all requests";
    if (o.trace_opts.limit > 0)
        snprintf(reqs, sizeof reqs, "up to %lld requests", (long long)o.trace_opts.limit);
    printf("explain: %s on %s (%s), %s on %s\n", o.policy_path, o.trace_path, reqs, o.model ? o.model : o.cost_path ? "(the cost file's model)" : SIM_DEFAULT_MODEL,
           o.hw);
    printf("  prefill = prompt tokens computed (a chunk when only part of the prompt);\n"
           "  decode = one new output token per request; KV blocks hold %d tokens each.\n\n",
           o.block_size);
    sim_result_t res;
    char err[8192];
    int frc = sim_run(&o, &res, err, sizeof err);
    fflush(stdout);
    if (frc != 0 && !res.stopped) {
        fprintf(stderr, "twinserve explain: %s\n", err);
        rc = 1;
        goto done;
    }
    printf("\n%s after %lld steps: %lld finished, %lld rejected, %lld preemptions; "
           "%d KV blocks of %d tokens\n", res.stopped ? "stopped (--steps)" : "done",
           (long long)x.steps, (long long)x.finished, (long long)x.rejected,
           (long long)x.preemptions, res.num_blocks, o.block_size);
    if (keep) printf("records: run %lld in %s\n", (long long)res.run_id, o.db_path);
    rc = 0;
done:
    if (tmpdb[0]) rec_remove(tmpdb);
    free(sets);
    free(x.preempt);
    free(x.seen);
    return rc;
}
