/* cmd_validate: `twinserve validate`, the simulator held against a measured engine run, or
 * against a measured run imported from elsewhere (`twinserve import`). */
#include <getopt.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis/band.h"
#include "analysis/plot.h"
#include "traces/summary.h"
#include "analysis/validate.h"
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_sim.h"
#include "cli/cli_util.h"
#include "traces/recorder.h"

/* Can this user write the database and create its journal beside it? */
static int db_writable(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    return euidaccess(path, W_OK) == 0 && euidaccess(dir, W_OK) == 0;
}

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve validate --db DB [--run ENGINE_RUN] (--cost COST | --hw PRESET)\n"
        "                          [--repeat N] [--json] [--plot DIR] [--name NAME]\n"
        "\n"
        "Replays an engine run's exact workload in the simulator (the same trace slice,\n"
        "rate scale, clipping, seed, policy and params, token and sequence budgets, KV\n"
        "blocks and block size) and prints measured and predicted side by side: mean, p50,\n"
        "p90 and p99 of TTFT, TPOT, ITL (when the run saved tokens), E2E and queueing;\n"
        "throughput; preemptions; and each engine step's pass and host time against the\n"
        "cost model's prediction for that step's recorded work. One MAPE line at the end.\n"
        "The simulated run is recorded in DB (validate-RUN), so report and compare work on it.\n"
        "\n"
        "  --db DB               the database holding the engine run (the runs are added to it)\n"
        "  --run RUN             the engine run, a name or id (default: the latest engine run)\n"
        "  --cost COST           the cost model (twinserve calibrate; a roofline cost file too)\n"
        "  --hw PRESET           without --cost: the roofline on this hardware\n"
        "  --repeat N            first run the engine N more times on the same workload and\n"
        "                        show its spread beside each error (noise vs model error); for\n"
        "                        a measured run whose arrivals are regenerated (a vLLM\n"
        "                        benchmark JSON), replay N more arrival seeds and show the\n"
        "                        predictions' range beside each error (the seed's spread)\n"
        "  --plot DIR            measured and predicted CDFs of TTFT, TPOT and E2E, and both\n"
        "                        runs' timelines (gnuplot)\n"
        "  --name NAME           the simulated run's name\n"
        "  --json                the comparison as one JSON object\n"
        "  -q, --quiet           no progress lines\n"
        "\n"
        "\n"
        "A measured run (twinserve import) has no workload record: give its replay's policy\n"
        "and options. Its requests are replayed exactly when the import has their arrival\n"
        "times (a CSV); a vLLM result has none, so arrivals are drawn from its request rate\n"
        "and burstiness as vLLM's benchmark draws them, seeded by --seed, and only the\n"
        "distributions compare. Per-request metrics only (no steps); no --repeat.\n"
        "  --policy FILE         the policy to replay the measured requests with (required)\n"
        "  --set KEY=VALUE       a policy param (repeatable)\n"
        "  --model NAME|FILE     the model to simulate (default: the run's, when a preset)\n"
        "  --tp N                tensor-parallel degree (default: the run's, else 1)\n"
        "  --seed N              the policy's seed, and the regenerated arrivals' (0)\n"
        "  --kv-blocks N, --gpu-util F, --block-size N, --max-tokens N, --max-seqs N,\n"
        "  --max-model-len N     the simulated server's limits, as for sim\n"
        "  --serving NAME|FILE, --metrics client|server, --watermark F\n"
        "                        the serving profile and side, the KV watermark, as for sim\n"
        "  --roofline            the roofline, not the GPU calibration shipped for the model\n"
        "\n"
        "A measured run with load stages (import --inference-perf: real vLLM runs) is\n"
        "replayed with its server's own flags (step budget, max_num_seqs, max_model_len,\n"
        "block size, tp; the prefix cache on, the workload's prompt cycle; the client's\n"
        "timeout): every request, failed ones too. The comparison ends with a table per\n"
        "stage, with the client's own TPOT and ITL definitions and overloaded stages apart.\n"
        "  --skip-warmup S       leave the requests of the first S seconds out of the stage\n"
        "                        metrics (a cold server's first requests)\n"
        "  --no-itl              no per-token comparison (the replay records no tokens)\n"
        "  (--hw defaults to the run's hardware when it names a preset; the replay then uses\n"
        "  the GPU calibration shipped for its model, hardware and tp when there is one, as\n"
        "  sim does; for an engine run, --hw means the roofline and --cost builtin:NAME\n"
        "  names a shipped calibration)\n"
        "\n"
        "\n"
        "  --band[=E]            a prediction band: the replay again with every step's time\n"
        "                        x (1 - E) and x (1 + E); each metric's band is the range of\n"
        "                        the three predictions, marked in or OUT by where the\n"
        "                        measured value fell, with the coverage counted; E (0.05 or\n"
        "                        5%%) defaults to the cost model's own cross-validated error\n"
        "                        (the serving profile's step_cv_err, else the cost file's\n"
        "                        cv_median_err)\n"
        "\n"
        "Exit status: 0 compared, 1 a run failed or the input is refused, 2 usage error.\n");
}

/* --policy, beside sim's codes (cli_sim.h) for the other options of a measured replay */
enum { O_POLICY = CLI_SIM_FIRST - 1 };
#define VALIDATE_MAX_SETS 256

enum { O_DB = 256, O_RUN, O_COST, O_HW, O_REPEAT, O_PLOT, O_NAME, O_JSON, O_HELP, O_WARMUP,
       O_NOITL, O_BAND };

int cmd_validate(int argc, char **argv) {
    static const struct option opts[] = {
        { "db", 1, 0, O_DB }, { "run", 1, 0, O_RUN }, { "cost", 1, 0, O_COST },
        { "policy", 1, 0, O_POLICY }, { "set", 1, 0, CLI_SIM_SET },
        { "model", 1, 0, CLI_SIM_MODEL }, { "tp", 1, 0, CLI_SIM_TP },
        { "seed", 1, 0, CLI_SIM_SEED }, { "kv-blocks", 1, 0, CLI_SIM_KVB },
        { "gpu-util", 1, 0, CLI_SIM_UTIL }, { "block-size", 1, 0, CLI_SIM_BLOCK },
        { "max-tokens", 1, 0, CLI_SIM_MAXTOK }, { "max-seqs", 1, 0, CLI_SIM_MAXSEQ },
        { "max-model-len", 1, 0, CLI_SIM_MAXLEN }, { "serving", 1, 0, CLI_SIM_SERVING },
        { "metrics", 1, 0, CLI_SIM_METRICS }, { "watermark", 1, 0, CLI_SIM_WATERMARK },
        { "roofline", 0, 0, CLI_SIM_ROOFLINE },
        { "skip-warmup", 1, 0, O_WARMUP }, { "no-itl", 0, 0, O_NOITL },
        { "band", 2, 0, O_BAND },
        { "hw", 1, 0, O_HW }, { "repeat", 1, 0, O_REPEAT }, { "plot", 1, 0, O_PLOT },
        { "name", 1, 0, O_NAME }, { "json", 0, 0, O_JSON }, { "quiet", 0, 0, 'q' },
        { "help", 0, 0, O_HELP }, { 0, 0, 0, 0 },
    };
    validate_opts_t o = { .version = TWIN_VERSION };
    /* a measured run's replay options (sets static: nothing to free on the early returns) */
    static const char *sets[VALIDATE_MAX_SETS];
    sim_opts_t so;
    int measured_opts = 0;
    sim_opts_defaults(&so);
    so.sets = sets;
    so.tp = 0;   /* not given: the measured run's */
    so.watermark = NAN;   /* not given: the replay's own default (validate_ip.c, validate_measured.c) */
    const char *plot_dir = NULL;
    int json = 0, quiet = 0, c;
    optind = 1;
    opterr = 0;   /* cli_bad_option says it, in one line */
    while ((c = getopt_long(argc, argv, "q", opts, NULL)) != -1) {
        switch (c) {
        case O_DB: o.db_path = optarg; break;
        case O_RUN: o.run = optarg; break;
        case O_COST: o.cost_path = optarg; break;
        case O_HW: o.hw = optarg; break;
        case O_REPEAT:
            if (!cli_int(optarg, 0, VALIDATE_MAX_REPEAT, &o.repeat)) {
                fprintf(stderr, "twinserve validate: bad value '%s' for --repeat (0 to %d)\n",
                        optarg, VALIDATE_MAX_REPEAT);
                return 2;
            }
            break;
        case O_PLOT: plot_dir = optarg; break;
        case O_NAME: o.name = optarg; break;
        case O_POLICY: so.policy_path = optarg; measured_opts = 1; break;
        case CLI_SIM_SET: case CLI_SIM_MODEL: case CLI_SIM_TP: case CLI_SIM_SEED:
        case CLI_SIM_KVB: case CLI_SIM_UTIL: case CLI_SIM_BLOCK: case CLI_SIM_MAXTOK:
        case CLI_SIM_MAXSEQ: case CLI_SIM_MAXLEN: case CLI_SIM_SERVING: case CLI_SIM_METRICS:
        case CLI_SIM_WATERMARK: case CLI_SIM_ROOFLINE:
            if (c == CLI_SIM_SET && so.n_sets == VALIDATE_MAX_SETS) {
                fprintf(stderr, "twinserve validate: more than %d --set\n", VALIDATE_MAX_SETS);
                return 2;
            }
            if (!cli_sim_apply("validate", c, optarg, &so)) return 2;
            measured_opts = 1;
            break;
        case O_WARMUP:
            if (!cli_double(optarg, 0, 1e9, &o.skip_warmup_s)) {
                fprintf(stderr, "twinserve validate: bad value '%s' for --skip-warmup (seconds "
                        ">= 0)\n", optarg);
                return 2;
            }
            break;
        case O_NOITL: o.no_itl = 1; break;
        case O_BAND:
            o.band = 1;
            if (optarg && !band_parse(optarg, &o.band_err)) {
                fprintf(stderr, "twinserve validate: bad value '%s' for --band (a fraction "
                        "in (0, 0.9], e.g. 0.1 or 10%%)\n", optarg);
                return 2;
            }
            break;
        case O_JSON: json = 1; break;
        case 'q': quiet = 1; break;
        case O_HELP: usage(stdout); return 0;
        default: return cli_bad_option("validate", argv, opts);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "twinserve validate: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o.db_path) {
        fprintf(stderr, "twinserve validate: --db DB is required\n");
        return 2;
    }
    if (o.cost_path && o.hw) {
        fprintf(stderr, "twinserve validate: give --cost or --hw, not both (a cost file "
                        "carries its own model of the hardware)\n");
        return 2;
    }
    if (measured_opts) o.sim = &so;
    o.progress = !quiet && isatty(2);
    validate_result_t r;
    char err[8192], copy[1024] = "";
    const char *db_path = o.db_path;
    int rc = 1;
    /* validate records its replay beside the measured run; a database this user cannot write
     * (SQLite also needs its directory, for the journal) is validated in a private copy. */
    if (!db_writable(db_path)) {
        if (summary_copy_temp(db_path, "validate", copy, sizeof copy, err, sizeof err) != 0) {
            fprintf(stderr, "twinserve validate: %s is read-only, and %s\n", db_path, err);
            goto done;
        }
        fprintf(stderr, "note: %s is read-only: the replay is recorded in a temporary copy, "
                "deleted at exit (validate a writable copy to keep it)\n", db_path);
        o.db_path = copy;
    }
    if (validate_band(&o, &r, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve validate: %s\n", err);
        goto done;
    }
    if (json) validate_json(stdout, &r);
    else validate_print(stdout, &r);
    if (plot_dir) {
        sqlite3 *db = NULL;
        plot_opts_t po = { .out_dir = plot_dir, .png = 1, .svg = 1 };
        plot_result_t pr = {0};
        int64_t ids[2] = { r.engine_id, r.sim_id };
        int failed = summary_open(o.db_path, &db, err, sizeof err) != 0 ||
                     plot_runs(db, ids, 2, &po, &pr, err, sizeof err) != 0;
        sqlite3_close(db);
        if (failed) {
            fprintf(stderr, "twinserve validate: --plot: %s\n", err);
            goto done;
        }
        if (!json) printf("plots: %d figures in %s (cdf_ttft, cdf_tpot, cdf_e2e, timelines)\n",
                          pr.figures, plot_dir);
    }
    rc = 0;
done:
    if (copy[0]) rec_remove(copy);
    return rc;
}
