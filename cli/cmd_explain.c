/* cmd_explain: `twinserve explain`, a teaching view. It runs the simulator on a small slice of
 * a trace with the step hooks of sim/sim.h and prints, step by step, what the policy
 * scheduled (cli/explain_view.h formats the steps): each request's prefill chunk or decode
 * token, its KV blocks, the queue, arrivals, preemptions and finishes. With --compare it
 * runs two policies on the same requests and prints their steps side by side.
 *
 * By default the slice is the busiest one near the start of the trace (the --limit
 * requests that arrive closest together in its first WINDOW_SCAN_S seconds), since the
 * first requests of a production trace are often spread out enough that every step
 * holds one request and nothing is batched. The records go to a temporary database unless
 * --db is given. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_signal.h"
#include "cli/cli_sim.h"
#include "cli/cli_util.h"
#include "cli/explain_view.h"
#include "sim/sim.h"
#include "traces/recorder.h"

enum { WINDOW_SCAN_S = 600, DEFAULT_LIMIT = 12, DEFAULT_STEPS = 40 };

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve explain --trace FILE --policy FILE [--compare FILE] [--steps N]\n"
        "                         [--skip-quiet] [options]\n"
        "\n"
        "Runs the simulator on a few requests of a trace and prints every step: its start\n"
        "time and duration, and for each request in the batch either a prefill chunk\n"
        "(prompt positions a..b of P; 'recompute' after a preemption) or a decode (output\n"
        "token i of N), its tokens and the KV blocks it holds; then arrivals, the queue, KV\n"
        "blocks used/total, preemptions and finishes. Watch continuous batching admit new\n"
        "requests between decodes, and chunked prefill mix a prompt chunk with decodes:\n"
        "  twinserve explain --trace T --policy policies/chunked_prefill.lua --set chunk=256\n"
        "\n"
        "The requests are, by default, the busiest --limit of the trace's first %d s: the\n"
        "ones that arrive closest together, so that several are in flight at once; the\n"
        "header says which. --start or --duration chooses the slice instead (--start 0:\n"
        "the trace's first requests).\n"
        "\n"
        "  --trace FILE, --policy FILE   as for `twinserve sim`\n"
        "  --steps N             print at most N steps, then stop the run (default %d)\n"
        "  --limit N             requests replayed from the trace (default %d; 0: all,\n"
        "                        from the trace's start)\n"
        "  --skip-quiet          show only steps where something happens (an arrival, an\n"
        "                        admission or prompt chunk, a preemption, a finish, a change\n"
        "                        of the batch); a line counts the decode-only steps left\n"
        "                        out. Alias: --events-only\n"
        "  --compare FILE        a second policy, run on the same requests; both runs' steps\n"
        "                        are printed side by side (A: --policy, B: FILE), aligned by\n"
        "                        time, in 80 columns, and both run to the end for a closing\n"
        "                        comparison of TTFT and TPOT over all the requests.\n"
        "                        --set KEY=V sets a param of both policies; --set a.KEY=V\n"
        "                        only of A, --set b.KEY=V only of B\n"
        "  --rate-scale X        multiply the request rate by X\n"
        "  --db FILE             keep the records in FILE (default: a temporary database)\n"
        "  --name RUN            run name in --db (with --compare: RUN-a and RUN-b)\n",
        WINDOW_SCAN_S, DEFAULT_STEPS, DEFAULT_LIMIT);
    cli_sim_usage(f);
    fprintf(f, "\nExit status: 0 done (or stopped after --steps), 1 the run failed, 2 usage "
               "error: bad\noptions, a missing or unreadable file, an unknown preset or policy "
               "param (nothing\nis recorded).\n");
}

/* The busiest slice of the trace's first WINDOW_SCAN_S seconds. */
typedef struct {
    int found;             /* 0: the trace holds fewer than limit requests there */
    int64_t first;         /* index of its first request in the trace */
    double start_s, span_s; /* its first arrival (from the trace's first), its width */
} window_t;

/* Finds the limit requests of the first WINDOW_SCAN_S seconds with the smallest span
 * between the first and the last arrival. The arrivals are kept (as many as arrive in
 * WINDOW_SCAN_S seconds, whatever limit is). 0; or with a message in err, 2 when the
 * trace cannot be opened (a usage error, as sim says), 1 on a bad row. */
static int busiest_window(const sim_opts_t *o, int64_t limit, window_t *w, char *err,
                          size_t errlen) {
    trace_opts_t to = o->trace_opts;
    to.start_s = 0;
    to.duration_s = WINDOW_SCAN_S;
    to.limit = 0;
    to.rate_scale = 1;
    memset(w, 0, sizeof *w);
    double *at = NULL;
    int64_t n = 0, cap = 0;
    trace_t *t = trace_open(o->trace_path, &to);
    int rc = 1, got;
    trace_req_t r;
    if (!t) goto oom;
    if (trace_errmsg(t)) {
        snprintf(err, errlen, "%s", trace_errmsg(t));
        rc = 2;
        goto done;
    }
    while ((got = trace_next(t, &r)) == 1) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            double *a = realloc(at, sizeof *a * (size_t)cap);
            if (!a) goto oom;
            at = a;
        }
        at[n++] = r.arrival_s;
    }
    if (got < 0) {
        snprintf(err, errlen, "%s", trace_errmsg(t));
        goto done;
    }
    for (int64_t i = 0; i + limit <= n; i++)
        if (!w->found || at[i + limit - 1] - at[i] < w->span_s) {
            w->found = 1;
            w->first = i;
            w->start_s = at[i];
            w->span_s = at[i + limit - 1] - at[i];
        }
    rc = 0;
    goto done;
oom:
    snprintf(err, errlen, "out of memory");
done:
    if (t) trace_close(t);
    free(at);
    return rc;
}

/* Sorts the --set arguments: "a.K=V" to A only, "b.K=V" to B only, others to both. */
static void split_sets(const sim_opts_t *o, sim_opts_t *a, sim_opts_t *b, const char **sa,
                       const char **sb, int *plain) {
    a->sets = sa, b->sets = sb;
    a->n_sets = b->n_sets = 0;
    *plain = 0;
    for (int i = 0; i < o->n_sets; i++) {
        const char *s = o->sets[i];
        if (!strncmp(s, "a.", 2)) sa[a->n_sets++] = s + 2;
        else if (!strncmp(s, "b.", 2)) sb[b->n_sets++] = s + 2;
        else sa[a->n_sets++] = sb[b->n_sets++] = s, (*plain)++;
    }
}

static void sets_text(const sim_opts_t *o, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < o->n_sets && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, " %s", o->sets[i]);
}

static const char *base(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* "  TTFT mean: A 3113.1 ms, B 110.2 ms (B/A 0.04);  max: A 5555.0 ms, B 276.6 ms" */
static void closing_line(const char *what, const stats_dist_t *a, const stats_dist_t *b) {
    printf("  %s mean: A %.1f ms, B %.1f ms (B/A %.2f);  max: A %.1f ms, B %.1f ms\n", what,
           a->mean * 1e3, b->mean * 1e3, a->mean > 0 ? b->mean / a->mean : NAN, a->max * 1e3,
           b->max * 1e3);
}

enum { O_TRACE = 256, O_POLICY, O_DB, O_NAME, O_RATE, O_STEPS, O_QUIET, O_COMPARE, O_HELP };

/* Runs one simulation with the recorder as its hooks; 0, or after printing the error 2
 * when the run could not start (a usage error: nothing was recorded), else 1. */
static int run_one(sim_opts_t *o, explain_rec_t *x, const char *label, int plain_sets,
                   sim_result_t *res) {
    char err[8192];
    o->on_step = explain_on_step;
    o->on_final = explain_on_final;
    o->hook_ud = x;
    int frc = sim_run(o, res, err, sizeof err);
    explain_rec_finish(x);
    fflush(stdout);
    if (x->oom) {
        fprintf(stderr, "twinserve explain: out of memory\n");
        return 1;
    }
    if (frc != 0 && !res->stopped) {
        fprintf(stderr, "twinserve explain: %s%s\n", label, err);
        if (plain_sets && strstr(err, "unknown param"))
            fprintf(stderr, "twinserve explain: with --compare, --set KEY=V sets both "
                            "policies; --set a.KEY=V or b.KEY=V sets one\n");
        return res->setup_failed ? 2 : 1;
    }
    return 0;
}

int cmd_explain(int argc, char **argv) {
    static const struct option opts[] = {
        { "trace", 1, 0, O_TRACE }, { "policy", 1, 0, O_POLICY }, { "db", 1, 0, O_DB },
        { "name", 1, 0, O_NAME }, { "rate-scale", 1, 0, O_RATE }, { "steps", 1, 0, O_STEPS },
        { "skip-quiet", 0, 0, O_QUIET }, { "compare", 1, 0, O_COMPARE },
        { "help", 0, 0, O_HELP }, { "events-only", 0, 0, O_QUIET }, CLI_SIM_OPTIONS,
        { 0, 0, 0, 0 },
    };
    sim_opts_t o;
    sim_opts_defaults(&o);
    o.version = TWIN_VERSION;
    o.trace_opts.limit = DEFAULT_LIMIT;
    explain_rec_t xa = { .max_shown = DEFAULT_STEPS }, xb = { 0 };
    const char *compare = NULL;
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    const char **sets_a = calloc((size_t)argc + 1, sizeof *sets_a);
    const char **sets_b = calloc((size_t)argc + 1, sizeof *sets_b);
    char tmpdb[1024] = "", name_a[300], name_b[300], err[1024];
    int rc = 2, c, keep = 0, slice_given = 0;
    if (!sets || !sets_a || !sets_b) {
        rc = 1;
        goto done;
    }
    o.sets = sets;
    optind = 1;
    opterr = 0;   /* cli_bad_option says it, in one line */
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int ok = 1;
        switch (c) {
        case O_TRACE: o.trace_path = optarg; break;
        case O_POLICY: o.policy_path = optarg; break;
        case O_DB: o.db_path = optarg; keep = 1; break;
        case O_NAME: o.run_name = optarg; break;
        case O_RATE: ok = cli_double(optarg, 1e-9, 1e9, &o.trace_opts.rate_scale); break;
        case O_STEPS: ok = cli_i64(optarg, 1, INT64_MAX, &xa.max_shown); break;
        case O_QUIET: xa.skip_quiet = 1; break;
        case O_COMPARE: compare = optarg; break;
        case O_HELP: usage(stdout); rc = 0; goto done;
        default:
            if (c < CLI_SIM_FIRST) {
                rc = cli_bad_option("explain", argv, opts);
                goto done;
            }
            slice_given |= c == CLI_SIM_START || c == CLI_SIM_DURATION;
            if (!cli_sim_apply("explain", c, optarg, &o)) goto done;
        }
        if (!ok) {
            char opt[64];
            snprintf(opt, sizeof opt, "--%s", opts[c - O_TRACE].name);
            cli_bad_value("explain", opt, optarg);
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
    if (compare && (o.replicas > 1 || o.cluster_path)) {
        fprintf(stderr, "twinserve explain: --compare shows one replica per policy; "
                        "explain a cluster (--replicas, --cluster) without it\n");
        goto done;
    }
    xa.cluster = o.replicas > 1 || o.cluster_path;
    rc = 1;
    window_t w = { 0 };
    if (!slice_given && o.trace_opts.limit > 0) {
        if ((rc = busiest_window(&o, o.trace_opts.limit, &w, err, sizeof err)) != 0) {
            fprintf(stderr, "twinserve explain: %s\n", err);
            goto done;
        }
        rc = 1;
        if (w.found) o.trace_opts.start_s = w.start_s;
    }
    if (!keep) { /* no --db: a private temporary database, removed at the end */
        const char *t = getenv("TMPDIR");
        snprintf(tmpdb, sizeof tmpdb, "%s/twinexplain-XXXXXX", t && *t ? t : "/tmp");
        int fd = mkstemp(tmpdb);
        if (fd < 0) {
            fprintf(stderr, "twinserve explain: cannot create a temporary database in %s\n",
                    t && *t ? t : "/tmp");
            tmpdb[0] = 0;
            goto done;
        }
        close(fd);
        o.db_path = tmpdb;
    }
    /* --db keeps the records: Ctrl-C ends the run recorded as failed (cli/cli_signal.h) */
    if (keep) {
        o.interrupt = &cli_signal_caught;
        cli_signal_watch();
    }

    char reqs[64] = "all requests";
    if (o.trace_opts.limit > 0)
        snprintf(reqs, sizeof reqs, "up to %lld requests", (long long)o.trace_opts.limit);
    if (compare) printf("explain: A = %s, B = %s\n  on %s (%s), %s on %s\n", o.policy_path,
                        compare, o.trace_path, reqs,
           o.model ? o.model : o.cost_path ? "(the cost file's model)" : SIM_DEFAULT_MODEL,
           o.hw ? o.hw : o.cost_path ? "(the cost file's hw)" : SIM_DEFAULT_HW);
    else printf("explain: %s on %s (%s), %s on %s\n", o.policy_path, o.trace_path, reqs,
           o.model ? o.model : o.cost_path ? "(the cost file's model)" : SIM_DEFAULT_MODEL,
           o.hw ? o.hw : o.cost_path ? "(the cost file's hw)" : SIM_DEFAULT_HW);
    if (w.found)
        printf("  window: the busiest %lld requests of the trace's first %d s (its requests "
               "%lld..%lld,\n  shown as r0..r%lld), arriving within %.3f s from t=%.3f s "
               "(--start S for another)\n", (long long)o.trace_opts.limit, WINDOW_SCAN_S,
               (long long)w.first, (long long)(w.first + o.trace_opts.limit - 1),
               (long long)(o.trace_opts.limit - 1), w.span_s, w.start_s);
    else if (!slice_given && o.trace_opts.limit > 0)
        printf("  window: the trace's first requests (fewer than %lld in its first %d s)\n",
               (long long)o.trace_opts.limit, WINDOW_SCAN_S);
    sim_result_t ra, rb;
    if (!compare) {
        printf("  prefill = prompt tokens computed (a chunk when only part of the prompt);\n"
               "  decode = one new output token per request; KV blocks hold %d tokens each."
               "\n", o.block_size);
        if (xa.cluster)
            printf("  a cluster: each step names its replica (step numbers count per replica)\n"
                   "  and is listed when it ends; an arrival names the replica it was routed to.\n");
        printf("\n");
        xa.stream = stdout;
        xa.stop_when_full = 1;
        if ((rc = run_one(&o, &xa, "", 0, &ra)) != 0) goto done;
        char shown[64] = "";
        if (xa.skip_quiet) snprintf(shown, sizeof shown, " (%lld shown)", (long long)xa.shown);
        printf("\n%s after %lld steps%s: %lld finished, %lld rejected, %lld preemptions; "
               "%d KV blocks of %d tokens\n", ra.stopped ? "stopped (--steps)" : "done",
               (long long)xa.steps, shown, (long long)xa.finished, (long long)xa.rejected,
               (long long)xa.preemptions, ra.num_blocks, o.block_size);
        if (keep) printf("records: run %lld in %s\n", (long long)ra.run_id, o.db_path);
        rc = 0;
        goto done;
    }

    /* --compare: two runs on the same requests, kept, then printed side by side */
    sim_opts_t oa = o, ob = o;
    int plain;
    split_sets(&o, &oa, &ob, sets_a, sets_b, &plain);
    ob.policy_path = compare;
    if (o.run_name) {
        snprintf(name_a, sizeof name_a, "%s-a", o.run_name);
        snprintf(name_b, sizeof name_b, "%s-b", o.run_name);
        oa.run_name = name_a, ob.run_name = name_b;
    }
    xa.narrow = xb.narrow = 1;
    xb.skip_quiet = xa.skip_quiet;
    xb.max_shown = xa.max_shown;
    char sa[300], sb[300];
    if ((rc = run_one(&oa, &xa, "A: ", plain, &ra)) != 0 ||
        (rc = run_one(&ob, &xb, "B: ", plain, &rb)) != 0)
        goto done;
    sets_text(&oa, sa, sizeof sa);
    sets_text(&ob, sb, sizeof sb);
    printf("  #step start duration Np+Md: prompt + decode tokens of the step; rN prefill\n"
           "  a..b/P: prompt positions; decode i/N: output token i; + arrival, ! preempted,\n"
           "  = finished\n\n");
    if (oa.n_sets || ob.n_sets)
        printf("  params: A%s;  B%s\n\n", oa.n_sets ? sa : " (defaults)",
               ob.n_sets ? sb : " (defaults)");
    char ta[400], tb[400];
    snprintf(ta, sizeof ta, "A: %s", base(oa.policy_path));
    snprintf(tb, sizeof tb, "B: %s", base(ob.policy_path));
    printf("%-*.*s | %.*s\n", EXPLAIN_COL, EXPLAIN_COL, ta, EXPLAIN_COL, tb);
    for (int i = 0; i < 2 * EXPLAIN_COL + 3; i++) putchar(i == EXPLAIN_COL + 1 ? '+' : '-');
    putchar('\n');
    explain_print_side_by_side(stdout, &xa, &xb);
    if (xa.full || xb.full)
        printf("(--steps: %lld steps shown per run; both runs went on to the end)\n",
               (long long)xa.max_shown);
    if (!ra.have_summary || !rb.have_summary) {
        fprintf(stderr, "twinserve explain: the runs' summaries could not be read back\n");
        rc = 1;
        goto done;
    }
    printf("\nall %lld requests, each run to its end: finished A %lld, B %lld; "
           "preemptions A %lld, B %lld\n", (long long)ra.summary.requests,
           (long long)ra.summary.finished, (long long)rb.summary.finished,
           (long long)ra.summary.preemptions, (long long)rb.summary.preemptions);
    closing_line("TTFT", &ra.summary.ttft, &rb.summary.ttft);
    closing_line("TPOT", &ra.summary.tpot, &rb.summary.tpot);
    if (keep)
        printf("records: runs %lld (A) and %lld (B) in %s\n", (long long)ra.run_id,
               (long long)rb.run_id, o.db_path);
    rc = 0;
done:
    if (keep) cli_signal_unwatch();
    if (keep && rc != 0 && cli_signal_caught) rc = cli_signal_exit_code(cli_signal_caught);
    if (tmpdb[0]) rec_remove(tmpdb);
    free(sets);
    free(sets_a);
    free(sets_b);
    explain_rec_free(&xa);
    explain_rec_free(&xb);
    return rc;
}
