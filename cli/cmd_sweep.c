/* cmd_sweep: `twinserve sweep`, the simulator over request rates (analysis/sweep.h), and
 * --capacity, the highest rate that keeps SLO attainment at a target. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis/experiment.h"
#include "analysis/sweep.h"
#include "analysis/sweep_band.h"
#include "policies/replay.h"
#include "cli/cli.h"
#include "cli/cli_signal.h"
#include "cli/cli_sim.h"
#include "cli/cli_opts.h"
#include "cli/cli_util.h"

enum { MAX_RATES = 256 };

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve sweep --trace FILE --policy FILE --rates R1,R2,... [options]\n"
        "       twinserve sweep --trace FILE --policy FILE --capacity --slo ttft=S,tpot=S\n"
        "                       [--lo R] [--hi R] [--tol T] [--target F] [options]\n"
        "\n"
        "Simulates the trace at each request rate, in parallel processes, into one database,\n"
        "and prints the curve: rate, completed req/s, SLO attainment and goodput (with --slo),\n"
        "p50/p99 TTFT and TPOT. Rates are requests per second: each point replays the trace\n"
        "with --rate-scale = rate / the trace's mean rate (printed first).\n"
        "Runs are named NAME@RATErps; their config holds $.sweep.rate_rps for `twinserve plot`.\n"
        "\n"
        "  --trace FILE, --policy FILE   as for `twinserve sim`\n"
        "  --rates LIST          request rates in req/s, comma-separated\n"
        "  -j, --jobs N          simulations in parallel (default 1); the records do not\n"
        "                        depend on N\n"
        "  --db FILE             SQLite database (default twinserve.db)\n"
        "  --name NAME           sweep name, the run-name prefix (default sweep-<policy>,\n"
        "                        with -2, -3... when the database already holds one)\n"
        "  --slo ttft=S,tpot=S,e2e=S   SLOs in seconds (suffix ms accepted; any subset):\n"
        "                        attainment = the fraction of ALL requests that finished\n"
        "                        meeting every limit given (a rejected or aborted request\n"
        "                        counts as missing); goodput = those requests / makespan\n"
        "  --capacity            find the highest rate whose attainment >= --target by\n"
        "                        bisection (-j N: N points per round), and print the bracket;\n"
        "                        stops at once (exit 1) when requests rejected at any rate\n"
        "                        (over the context, past the step budget, empty) already\n"
        "                        keep attainment below the target, saying which and why\n"
        "  --target F            attainment to keep, a fraction in (0, 1] (default 0.9: 90%%\n"
        "                        of all requests meet every --slo limit)\n"
        "  --lo R, --hi R        initial bracket in req/s (default: found by doubling or\n"
        "                        halving from the trace's own rate)\n"
        "  --tol T               stop when hi - lo <= T * hi (default 0.05)\n"
        "  --repeat N|S1,S2,...  run every rate N times with seeds --seed .. --seed + N - 1\n"
        "                        (or the seeds listed): rate R is the experiment NAME@Rrps\n"
        "                        of runs NAME@Rrps-rK, for `twinserve compare` (not with\n"
        "                        --capacity)\n"
        "  --emit-jobs DIR       run nothing: write DIR/jobs.txt, one self-contained\n"
        "                        `twinserve sim` command per point (per rate, and per seed\n"
        "                        with --repeat) writing DIR/out/pK.db, for GNU parallel\n"
        "                        (locally or --sshloginfile), DIR/slurm.sh (a Slurm job\n"
        "                        array) and DIR/run.txt (how to run them, then `twinserve\n"
        "                        merge DB DIR/out/*.db`: the merged runs are this sweep's,\n"
        "                        names and tags included); not with --capacity\n"
        "  -q, --quiet           no per-run progress lines\n");
    cli_sim_usage(f);
    fprintf(f, "\nThe curve is followed by the cost model the points ran (as `sim` prints it), with a\n"
               "note when it is the uncalibrated roofline.\n");
    fprintf(f, "\nExit status: 0 done, 1 a run or the search failed (no rate met --target), 2\n"
               "usage error, 130/143 interrupted by SIGINT/SIGTERM: the simulations running\n"
               "stop at their next step (recorded as failed, \"interrupted by SIGINT at\n"
               "t=...\"; a signal sent to the sweep's process alone lets them finish), the\n"
               "points not yet started are not run and not recorded.\n");
}

enum { O_TRACE = 256, O_POLICY, O_DB, O_NAME, O_RATES, O_SLO, O_CAP, O_TARGET, O_LO, O_HI,
       O_TOL, O_REPEAT, O_EMIT, O_HELP };

/* --emit-jobs: the shared sim options as the words each job repeats. A relative argument
 * that names an existing file (--cost, --model FILE, --hw FILE...) is made absolute, so a
 * job runs from any folder; --seed is left out (each job gets its point's). Returns 0, or
 * -1 when out of memory. */
static int keep_sim_arg(const struct option *opts, int code, const char *arg, char **words,
                        int *n) {
    if (code == CLI_SIM_SEED) return 0;
    const struct option *o = opts;
    while (o->name && o->val != code) o++;
    if (!o->name || asprintf(&words[*n], "--%s", o->name) < 0) return -1;
    (*n)++;
    if (!o->has_arg || !arg) return 0;   /* an optional argument not given */
    char *abs = arg[0] != '/' && access(arg, F_OK) == 0 ? realpath(arg, NULL) : NULL;
    words[*n] = abs ? abs : strdup(arg);
    return words[(*n)++] ? 0 : -1;
}

/* The sweep as jobs (analysis/sweep.h, sweep_emit_jobs); the exit status. */
static int emit_jobs(sweep_t *sw, const char *dir, char **words, int nwords, const double *rates,
                     int n) {
    char err[8192], prefix[160], bin[4096];
    char *trace = realpath(sw->sim.trace_path, NULL), *policy = realpath(sw->sim.policy_path, NULL);
    char *db = NULL;
    int rc = 1;
    int64_t nreq;
    ssize_t len = readlink("/proc/self/exe", bin, sizeof bin - 1);
    if (len <= 0) {
        fprintf(stderr, "twinserve sweep: --emit-jobs: cannot find this binary's path\n");
        goto done;
    }
    bin[len] = 0;
    if (!trace || !policy) {
        fprintf(stderr, "twinserve sweep: %s: %s\n", trace ? sw->sim.policy_path :
                sw->sim.trace_path, strerror(errno));
        rc = 2;
        goto done;
    }
    sw->sim.trace_path = trace;
    sw->sim.policy_path = policy;
    /* run.txt's merge command works from any folder. */
    if (sw->sim.db_path[0] != '/') {
        char cwd[4096];
        if (!getcwd(cwd, sizeof cwd) || asprintf(&db, "%s/%s", cwd, sw->sim.db_path) < 0) {
            db = NULL;
            fprintf(stderr, "twinserve sweep: --emit-jobs: cannot make %s absolute\n",
                    sw->sim.db_path);
            goto done;
        }
        sw->sim.db_path = db;
    }
    sw->db_optional = 1;
    if (sweep_trace_rate(trace, &sw->sim.trace_opts, &sw->base_rate, &nreq, err, sizeof err) != 0 ||
        sweep_prefix(sw, prefix, sizeof prefix, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve sweep: %s\n", err);
        goto done;
    }
    sweep_jobs_t jobs = { .dir = dir, .bin = bin, .args = (const char *const *)words,
                          .n_args = nwords };
    printf("sweep %s: %s, %lld requests at %.4g req/s (scale 1); jobs into %s, none run here\n",
           prefix, trace, (long long)nreq, sw->base_rate, dir);
    fflush(stdout);
    if (sweep_emit_jobs(sw, &jobs, prefix, rates, n, stdout, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve sweep: %s\n", err);
        goto done;
    }
    rc = 0;
done:
    free(trace);
    free(policy);
    free(db);
    return rc;
}

/* The search's answer; returns the exit status: 0 with a capacity (or a lower bound on
 * it), 1 when no rate met the target. */
static int print_capacity(const sweep_capacity_t *c, double target, double tol) {
    printf("\n");
    if (c->infeasible) {
        const sweep_point_t *p = &c->points[c->bound_point];
        const summary_t *s = &p->rep.base;
        printf("capacity: none: %.1f%% of the requests are rejected at any rate, so "
               "attainment can be at most %.1f%% < the %.0f%% target (stopped after %zu "
               "point%s; a lower rate would only repeat it):\n", 100 * (1 - c->bound),
               100 * c->bound, 100 * target, c->n_points, c->n_points == 1 ? "" : "s");
        summary_print_dropped(stdout, s);
        return 1;
    }
    if (!c->found_lo) {
        printf("capacity: below %.4g req/s: no rate tried met %.0f%% attainment (lowest "
               "tried %.4g req/s)\n", c->hi, 100 * target, c->points[0].rate);
        /* Rejections do not go away at low load: say when they alone cap the attainment. */
        const sweep_point_t *p0 = &c->points[0];
        if (p0->ok && p0->rep.base.requests > 0) {
            double rej = (double)p0->rep.base.rejected / (double)p0->rep.base.requests;
            if (1 - rej < target)
                printf("          %.1f%% of the requests are rejected even at the lowest rate "
                       "(see `twinserve report`: e.g. a router's or the policy's own "
                       "reasons), so attainment can never reach %.0f%%\n", 100 * rej,
                       100 * target);
        }
        return 1;
    }
    if (!c->found_hi) {
        printf("capacity: at least %.4g req/s: every rate tried met %.0f%% attainment\n",
               c->lo, 100 * target);
        return 0;
    }
    printf("capacity: %.4g req/s  (bracket [%.4g, %.4g] req/s: attainment %.1f%% at %.4g, "
           "%.1f%% at %.4g; target %.0f%%, tol %g)\n", c->lo, c->lo, c->hi,
           100 * c->lo_att, c->lo, isnan(c->hi_att) ? 0.0 : 100 * c->hi_att, c->hi,
           100 * target, tol);
    return 0;
}

/* "cost model: ..." as `sim` prints it, from the first point that ran: the roofline with a
 * note, since its efficiencies are guesses and every latency and capacity above rests on
 * them. */
static void print_cost_model(const sweep_point_t *pts, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!pts[i].ok || !pts[i].cost_model[0]) continue;
        const char *m = pts[i].cost_model;
        if (strncmp(m, "none", 4) != 0) {
            printf("cost model: %s\n", m);
            return;
        }
        printf("cost model: the roofline (%s)\n"
               "NOTE       the roofline is uncalibrated: its efficiencies are guesses, so the "
               "latencies and any capacity above are rough; fit a cost model (`twinserve "
               "calibrate`) and give it with --cost FILE\n", m);
        return;
    }
}

/* --band: the same sweep or search twice more, its step times moved by the band's width. */
static int run_band(const sweep_t *sw, const char *prefix, int capacity, const double *rates,
                    int n, const sweep_point_t *pts, const sweep_capacity_t *cap, double lo,
                    double hi, double tol, double target) {
    sweep_band_t b;
    sweep_capacity_t sc[2];
    memset(sc, 0, sizeof sc);
    sweep_point_t *sp[2] = { NULL, NULL };
    char err[8192];
    int rc = 1;
    const sweep_point_t *nom = capacity ? cap->points : pts;
    size_t nn = capacity ? cap->n_points : (size_t)n;
    if (sweep_band_width(sw, nom, nn, &b, err, sizeof err) != 0) goto fail;
    if (capacity) {
        if (sweep_band_capacity(sw, prefix, lo, hi, tol, target, &b, sc, err, sizeof err) != 0)
            goto fail;
        sweep_band_print_capacity(stdout, cap, sc, &b);
    } else {
        for (int k = 0; k < 2; k++)
            if (!(sp[k] = calloc((size_t)n, sizeof *sp[k]))) {
                snprintf(err, sizeof err, "out of memory");
                goto fail;
            }
        if (sweep_band_rates(sw, prefix, rates, n, &b, sp, err, sizeof err) != 0) goto fail;
        sweep_band_print_rates(stdout, pts, sp, (size_t)n, sw->has_slo, &b);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "twinserve sweep: --band: %s\n", err);
done:
    for (int k = 0; k < 2; k++) free(sc[k].points), free(sp[k]);
    return rc;
}

int cmd_sweep(int argc, char **argv) {
    static const struct option opts[] = {
        { "trace", 1, 0, O_TRACE }, { "policy", 1, 0, O_POLICY }, { "db", 1, 0, O_DB },
        { "name", 1, 0, O_NAME }, { "rates", 1, 0, O_RATES }, { "slo", 1, 0, O_SLO },
        { "capacity", 0, 0, O_CAP }, { "target", 1, 0, O_TARGET }, { "lo", 1, 0, O_LO },
        { "hi", 1, 0, O_HI }, { "tol", 1, 0, O_TOL }, { "repeat", 1, 0, O_REPEAT },
        { "emit-jobs", 1, 0, O_EMIT },
        { "jobs", 1, 0, 'j' },
        { "quiet", 0, 0, 'q' }, { "help", 0, 0, O_HELP }, CLI_SIM_OPTIONS, { 0, 0, 0, 0 },
    };
    sweep_t sw;
    memset(&sw, 0, sizeof sw);
    sim_opts_defaults(&sw.sim);
    sw.sim.version = TWIN_VERSION;
    sw.jobs = 1;
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    double *rates = calloc(MAX_RATES, sizeof *rates);
    sweep_point_t *pts = NULL;
    sweep_capacity_t cap = { 0 };
    const char *rates_spec = NULL, *slo_spec = NULL, *repeat = NULL, *emit_dir = NULL;
    char **words = calloc(2 * (size_t)argc + 1, sizeof *words);
    int nwords = 0;
    uint64_t *seeds = NULL;
    double target = 0.9, lo = 0, hi = 0, tol = 0.05;
    int capacity = 0, rc = 2, c, n = 0;
    char err[8192], prefix[160];
    if (!sets || !rates || !words) {
        fprintf(stderr, "twinserve sweep: out of memory\n");
        rc = 1;
        goto done;
    }
    sw.sim.sets = sets;
    optind = 1;
    opterr = 0;   /* cli_bad_option says it, in one line */
    while ((c = getopt_long(argc, argv, "j:q", opts, NULL)) != -1) {
        int ok = 1;
        switch (c) {
        case O_TRACE: sw.sim.trace_path = optarg; break;
        case O_POLICY: sw.sim.policy_path = optarg; break;
        case O_DB: sw.sim.db_path = optarg; break;
        case O_NAME: sw.prefix = optarg; break;
        case O_RATES: rates_spec = optarg; break;
        case O_SLO: slo_spec = optarg; break;
        case O_CAP: capacity = 1; break;
        case O_TARGET: ok = cli_double(optarg, 1e-6, 1, &target); break;
        case O_LO: ok = cli_double(optarg, 1e-9, 1e12, &lo); break;
        case O_HI: ok = cli_double(optarg, 1e-9, 1e12, &hi); break;
        case O_TOL: ok = cli_double(optarg, 1e-6, 1, &tol); break;
        case O_REPEAT: repeat = optarg; break;
        case O_EMIT: emit_dir = optarg; break;
        case 'j': ok = cli_int(optarg, 1, 64, &sw.jobs); break;
        case 'q': sw.quiet = 1; break;
        case O_HELP: usage(stdout); rc = 0; goto done;
        default:
            if (c < CLI_SIM_FIRST) {
                rc = cli_bad_option("sweep", argv, opts);
                goto done;
            }
            if (!cli_sim_apply("sweep", c, optarg, &sw.sim)) goto done;
            if (keep_sim_arg(opts, c, optarg, words, &nwords) != 0) {
                fprintf(stderr, "twinserve sweep: out of memory\n");
                rc = 1;
                goto done;
            }
        }
        if (!ok) {
            char opt[64];
            snprintf(opt, sizeof opt, "%s%s", c == 'j' ? "-" : "--",
                     c == 'j' ? "j" : opts[c - O_TRACE].name);
            cli_bad_value("sweep", opt, optarg);
            goto done;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "twinserve sweep: unexpected argument '%s'\n", argv[optind]);
        goto done;
    }
    if (!sw.sim.trace_path || !sw.sim.policy_path) {
        fprintf(stderr, "twinserve sweep: --trace and --policy are required\n");
        goto done;
    }
    if (capacity == !!rates_spec) {
        fprintf(stderr, "twinserve sweep: give either --rates LIST or --capacity\n");
        goto done;
    }
    if (emit_dir && capacity) {
        /* A search needs each round's results to choose the next rates: no fixed list of
         * jobs exists before it runs. */
        fprintf(stderr, "twinserve sweep: --capacity cannot be emitted as jobs (each round of "
                "the search needs the previous round's results); emit a --rates sweep around "
                "the capacity instead, or run the search here\n");
        goto done;
    }
    if (capacity && !slo_spec) {
        fprintf(stderr, "twinserve sweep: --capacity needs --slo (e.g. --slo ttft=2,tpot=0.1)\n");
        goto done;
    }
    if (repeat && capacity) {
        /* A search over repeated points would need a rule for a rate that passes on some
         * seeds only; not decided yet, so refused rather than guessed. */
        fprintf(stderr, "twinserve sweep: --repeat works with --rates, not --capacity\n");
        goto done;
    }
    if (sw.sim.band && (repeat || emit_dir)) {
        fprintf(stderr, "twinserve sweep: --band runs here, without --repeat or --emit-jobs "
                "(the band's two sides are sweeps of their own)\n");
        goto done;
    }
    if (repeat && experiment_parse_seeds(repeat, sw.sim.seed, &seeds, &sw.n_seeds, err,
                                         sizeof err) != 0) {
        fprintf(stderr, "twinserve sweep: %s\n", err);
        goto done;
    }
    sw.seeds = seeds;
    if (lo > 0 && hi > 0 && lo >= hi) {
        fprintf(stderr, "twinserve sweep: --lo %g must be below --hi %g\n", lo, hi);
        goto done;
    }
    if (slo_spec) {
        if (report_parse_slo(slo_spec, &sw.slo, err, sizeof err) != 0) {
            fprintf(stderr, "twinserve sweep: --slo: %s\n", err);
            goto done;
        }
        sw.has_slo = 1;
    }
    if (rates_spec && (n = sweep_parse_rates(rates_spec, rates, MAX_RATES, err, sizeof err)) < 0) {
        fprintf(stderr, "twinserve sweep: %s\n", err);
        goto done;
    }

    if (emit_dir) {
        rc = emit_jobs(&sw, emit_dir, words, nwords, rates, n);
        goto done;
    }
    rc = 1;
    sw.sim.interrupt = &cli_signal_caught;
    cli_signal_watch();
    int64_t nreq;
    if (sweep_trace_rate(sw.sim.trace_path, &sw.sim.trace_opts, &sw.base_rate, &nreq, err,
                         sizeof err) != 0 ||
        sweep_prefix(&sw, prefix, sizeof prefix, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve sweep: %s\n", err);
        goto done;
    }
    printf("sweep %s: %s, %lld requests at %.4g req/s (scale 1); database %s\n", prefix,
           sw.sim.trace_path, (long long)nreq, sw.base_rate, sw.sim.db_path);
    fflush(stdout);
    const sweep_point_t *show;
    size_t nshow;
    if (capacity) {
        if (sweep_capacity(&sw, prefix, lo, hi, tol, target, &cap, err, sizeof err) != 0) {
            fprintf(stderr, "twinserve sweep: %s\n", err);
            show = cap.points, nshow = cap.n_points;
        } else {
            rc = 0;
            show = cap.points, nshow = cap.n_points;
        }
    } else {
        size_t npts = (size_t)n * (size_t)(sw.n_seeds > 0 ? sw.n_seeds : 1);
        pts = calloc(npts, sizeof *pts);
        if (!pts || sweep_run(&sw, prefix, rates, n, pts, err, sizeof err) != 0) {
            fprintf(stderr, "twinserve sweep: %s\n", pts ? err : "out of memory");
            goto done;
        }
        show = pts, nshow = npts;
        rc = 0;
    }
    sweep_print_header(stdout, sw.has_slo);
    for (size_t i = 0; i < nshow; i++) {
        sweep_print_point(stdout, &show[i], sw.has_slo);
        if (!show[i].ok && !capacity) rc = 1;
    }
    print_cost_model(show, nshow);
    if (capacity && rc == 0) rc = print_capacity(&cap, target, tol);
    if (sw.sim.band && rc == 0 && !cli_signal_caught)
        rc = run_band(&sw, prefix, capacity, rates, n, pts, &cap, lo, hi, tol, target);
    if (cli_signal_caught) {
        fprintf(stderr, "twinserve sweep: interrupted by %s: the points shown failed were "
                "stopped or not run\n", replay_signal_name(cli_signal_caught));
        rc = cli_signal_exit_code(cli_signal_caught);
    }
    if (sw.n_seeds > 0 && !cli_signal_caught)
        printf("each rate is an experiment of %d runs (seeds %llu..., named as the runs less "
               "'-rK'): `twinserve compare %s --runs EXP_A,EXP_B`\n", sw.n_seeds,
               (unsigned long long)seeds[0], sw.sim.db_path);
done:
    cli_signal_unwatch();
    free(seeds);
    for (int i = 0; words && i < nwords; i++) free(words[i]);
    free(words);
    free(sets);
    free(rates);
    free(pts);
    free(cap.points);
    return rc;
}
