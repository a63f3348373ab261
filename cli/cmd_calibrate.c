/* cmd_calibrate: `twinserve calibrate`, a cost model fitted to measurements (a profile, or
 * an engine run's steps) and written as a cost file for `sim --cost`. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis/calibrate.h"
#include "analysis/calibrate_sim.h"
#include "analysis/spec_curve.h"
#include "cli/cli_sim.h"
#include "analysis/vidur.h"
#include "cli/cli.h"
#include "cli/cli_util.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve calibrate --profile FILE --out COST [options]\n"
        "       twinserve calibrate --db DB --run ENGINE_RUN --out COST [options]\n"
        "       twinserve calibrate --vidur DIR --model M --hw GPU [--tp N] --out COST\n"
        "       twinserve calibrate --db DB --run MEASURED --policy P [--cost BASE |\n"
        "                           --model M --hw GPU --tp N] [--fit TERMS] --out COST\n"
        "\n"
        "Fits the simulator's linear cost model to measured forward passes: a profile\n"
        "(`twinserve profile`, or one written from another engine in the same format) or\n"
        "the steps an engine run recorded. Prints the coefficients with what they mean, the\n"
        "cross-validated error (held-out points: median and p90 of |predicted - measured| /\n"
        "measured) and how the model extrapolates, and writes COST for `sim --cost COST`.\n"
        "An engine run that speculated (policies/speculative.lua) also gets its acceptance\n"
        "per draft position and the alpha it implies for the simulator.\n"
        "\n"
        "  --profile FILE        a profile CSV (its kind=host rows fit the host-time terms);\n"
        "                        repeat it to pool profiles of one model, e.g. taken before\n"
        "                        and after a session on a machine whose speed drifts\n"
        "  --db DB --run RUN     an engine run (name or id; the latest when RUN is omitted)\n"
        "  --vidur DIR           Vidur's published A100/H100 operator and network profiles\n"
        "                        (../shared/data/profiles/vidur): a GPU's calibration for\n"
        "                        --model on --hw a100-80g|h100 at --tp 1|2|4|8 (attention,\n"
        "                        not profiled, stays on the roofline); --network SETUP picks\n"
        "                        network/SETUP/all_reduce.csv (default GPU_dgx)\n"
        "  --out COST            the cost file to write\n"
        "  --model NAME|FILE     the model's shape, when the input does not say it\n"
        "\n"
        "A measured run (twinserve import: your own benchmark) is fitted by simulation: its\n"
        "requests are replayed (as validate replays them) with the base cost model, and the\n"
        "terms profiles cannot give are searched to bring the replay closest to the\n"
        "measurement (validate's MAPE); the forward pass stays the base model's.\n"
        "  --policy FILE         the policy to replay it with (with --set, --seed, --kv-blocks,\n"
        "                        --gpu-util, --block-size, --max-tokens, --max-seqs,\n"
        "                        --max-model-len as for sim)\n"
        "  --cost BASE           the base: a linear cost file or builtin:NAME (default: the\n"
        "                        calibration shipped for --model on --hw at --tp)\n"
        "  --fit TERMS           comma-separated, of host_step_s, host_seq_s, client_request_s,\n"
        "                        client_token_s (default: the host terms, and the client terms\n"
        "                        for a run measured at the client, a vLLM benchmark)\n"
        "  --folds K             cross-validation folds (5)\n"
        "  --seed N              the folds' shuffle (1)\n"
        "  --json                the report as one JSON object\n"
        "  -q, --quiet           no report\n");
}

#define CALIB_MAX_PROFILES 16

enum { O_PROFILE = 256, O_DB, O_RUN, O_OUT, O_MODEL, O_FOLDS, O_SEED, O_JSON, O_HELP,
       O_VIDUR, O_HW, O_TP, O_NETWORK, O_POLICY, O_COST, O_FIT };

/* --db --run MEASURED --policy: the free terms fitted by simulation (calibrate_sim.h). */
static int calibrate_measured(const calsim_opts_t *o, const char *out, int quiet) {
    static calsim_result_t r;
    char err[8192];
    if (calsim_fit(o, &r, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve calibrate: %s\n", err);
        return 1;
    }
    char src[KV_TEXT_CAP + 64];
    snprintf(src, sizeof src, "%.100s; host/client terms fitted by simulation to measured "
             "run %.40s (MAPE %.1f%% -> %.1f%%)", r.cf.source, r.run_name,
             100 * r.mape_before, 100 * r.mape_after);
    snprintf(r.cf.source, sizeof r.cf.source, "%.*s", KV_TEXT_CAP - 1, src);
    snprintf(r.cf.version, sizeof r.cf.version, "%s", TWIN_VERSION);
    char comment[512];
    snprintf(comment, sizeof comment,
             "twinserve cost model: %.200s\nwith the terms below fitted by `twinserve calibrate "
             "--db DB --run %.60s` (twinserve %s)", r.base_desc, r.run_name, TWIN_VERSION);
    if (cost_file_write(out, &r.cf, comment, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve calibrate: %s\n", err);
        return 1;
    }
    if (!quiet) {
        calsim_print(stdout, &r);
        printf("\nwrote %s\n", out);
    }
    return 0;
}

/* --vidur: the GPU calibration from Vidur's profiles (analysis/vidur.h). */
static int calibrate_vidur(const vidur_opts_t *o, const char *out, int json, int quiet) {
    static vidur_result_t r;
    char err[2048];
    if (vidur_calibrate(o, &r, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve calibrate: %s\n", err);
        return 1;
    }
    char comment[768];
    snprintf(comment, sizeof comment,
             "twinserve cost model of a GPU, from `twinserve calibrate --vidur` (twinserve %s)\n"
             "token-parallel operators and all-reduces: Vidur's measured profiles (Agrawal et\n"
             "al., MLSys 2024; MIT licence; github.com/microsoft/vidur data/profiling);\n"
             "attention: the roofline (KV reads at the GEMMs' measured 1-token read rate, FLOPs\n"
             "at %.0f%% of peak: FlashAttention-2, Dao 2023; FlashAttention-3, Shah et al. 2024)\n"
             "see docs/fidelity.md, GPU calibrations",
             TWIN_VERSION, 100 * VIDUR_ATTN_EFF);
    snprintf(r.cf.version, sizeof r.cf.version, "%s", TWIN_VERSION);
    if (cost_file_write(out, &r.cf, comment, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve calibrate: %s\n", err);
        return 1;
    }
    if (json) vidur_report_json(stdout, &r);
    else if (!quiet) {
        vidur_report(stdout, &r);
        printf("\nwrote %s: `twinserve sim --cost %s --tp %d ...`\n", out, out, (int)o->tp);
    }
    return 0;
}

int cmd_calibrate(int argc, char **argv) {
    static const struct option opts[] = {
        { "profile", 1, 0, O_PROFILE }, { "db", 1, 0, O_DB }, { "run", 1, 0, O_RUN },
        { "out", 1, 0, O_OUT }, { "model", 1, 0, O_MODEL }, { "folds", 1, 0, O_FOLDS },
        { "seed", 1, 0, O_SEED }, { "json", 0, 0, O_JSON }, { "quiet", 0, 0, 'q' },
        { "help", 0, 0, O_HELP }, { "vidur", 1, 0, O_VIDUR }, { "hw", 1, 0, O_HW },
        { "tp", 1, 0, O_TP }, { "network", 1, 0, O_NETWORK }, { "policy", 1, 0, O_POLICY },
        { "cost", 1, 0, O_COST }, { "fit", 1, 0, O_FIT }, { "set", 1, 0, CLI_SIM_SET },
        { "kv-blocks", 1, 0, CLI_SIM_KVB }, { "gpu-util", 1, 0, CLI_SIM_UTIL },
        { "block-size", 1, 0, CLI_SIM_BLOCK }, { "max-tokens", 1, 0, CLI_SIM_MAXTOK },
        { "max-seqs", 1, 0, CLI_SIM_MAXSEQ }, { "max-model-len", 1, 0, CLI_SIM_MAXLEN },
        { 0, 0, 0, 0 },
    };
    vidur_opts_t vo = {.tp = 1};
    /* a measured run's replay (sets static: nothing to free on the early returns) */
    static const char *sets[256];
    sim_opts_t so;
    sim_opts_defaults(&so);
    so.sets = sets;
    calsim_opts_t co = {.sim = &so};
    int replay_opts = 0;
    const char *profiles[CALIB_MAX_PROFILES], *db = NULL, *run = NULL, *out = NULL,
               *model = NULL;
    int n_prof = 0;
    int json = 0, quiet = 0, c, rc = 2, have_in = 0;
    fit_opts_t fo;
    fit_opts_defaults(&fo);
    calib_input_t in;
    cost_file_t cf;
    fit_report_t pr = {0}, hr = {0};
    char err[2048];
    optind = 1;
    while ((c = getopt_long(argc, argv, "q", opts, NULL)) != -1) {
        int ok = 1;
        switch (c) {
        case O_PROFILE:
            if (n_prof == CALIB_MAX_PROFILES) {
                fprintf(stderr, "twinserve calibrate: at most %d profiles\n", CALIB_MAX_PROFILES);
                return 2;
            }
            profiles[n_prof++] = optarg;
            break;
        case O_DB: db = optarg; break;
        case O_RUN: run = optarg; break;
        case O_OUT: out = optarg; break;
        case O_MODEL: model = optarg; break;
        case O_FOLDS: ok = cli_int(optarg, 2, 1000, &fo.folds); break;
        case O_SEED: ok = cli_u64(optarg, &fo.seed); break;
        case O_JSON: json = 1; break;
        case O_VIDUR: vo.dir = optarg; break;
        case O_HW: vo.hw = optarg; break;
        case O_TP: ok = cli_int(optarg, 1, 1024, &vo.tp); break;
        case O_NETWORK: vo.network = optarg; break;
        case O_POLICY: so.policy_path = optarg; break;
        case O_COST: co.base_cost = optarg; break;
        case O_FIT: co.terms = optarg; break;
        case CLI_SIM_SET: case CLI_SIM_KVB: case CLI_SIM_UTIL: case CLI_SIM_BLOCK:
        case CLI_SIM_MAXTOK: case CLI_SIM_MAXSEQ: case CLI_SIM_MAXLEN:
            if (c == CLI_SIM_SET && so.n_sets == 256) {
                fprintf(stderr, "twinserve calibrate: more than 256 --set\n");
                return 2;
            }
            if (!cli_sim_apply("calibrate", c, optarg, &so)) return 2;
            replay_opts = 1;
            break;
        case 'q': quiet = 1; break;
        case O_HELP: usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (!ok) {
            const char *name = "?";
            for (const struct option *op = opts; op->name; op++)
                if (op->val == c) name = op->name;
            fprintf(stderr, "twinserve calibrate: bad value '%s' for --%s\n", optarg, name);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "twinserve calibrate: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if ((n_prof > 0) + (db != NULL) + (vo.dir != NULL) != 1) {
        fprintf(stderr, "twinserve calibrate: give one input: --profile FILE, --db DB --run RUN "
                "or --vidur DIR\n");
        return 2;
    }
    if (so.policy_path) {   /* a measured run, fitted by simulation */
        if (!db || !out) {
            fprintf(stderr, "twinserve calibrate: --policy fits a measured run: give --db DB "
                    "[--run RUN] and --out COST\n");
            return 2;
        }
        co.db_path = db;
        co.run = run;
        co.hw = vo.hw;
        so.model = model;
        so.tp = vo.tp;
        co.progress = !quiet && isatty(2);
        return calibrate_measured(&co, out, quiet || json);
    }
    if (replay_opts || co.base_cost || co.terms) {
        fprintf(stderr, "twinserve calibrate: --cost, --fit, --set and the replay's limits go "
                "with --policy (fitting a measured run by simulation)\n");
        return 2;
    }
    if (!vo.dir && (vo.hw || vo.tp != 1 || vo.network)) {
        fprintf(stderr, "twinserve calibrate: --hw, --tp and --network go with --vidur or "
                "--policy\n");
        return 2;
    }
    if (run && !db) {
        fprintf(stderr, "twinserve calibrate: --run needs --db\n");
        return 2;
    }
    if (!out) {
        fprintf(stderr, "twinserve calibrate: --out COST is required\n");
        return 2;
    }
    if (vo.dir) {
        if (!model || !vo.hw) {
            fprintf(stderr, "twinserve calibrate: --vidur needs --model and --hw\n");
            return 2;
        }
        vo.model = model;
        vo.folds = fo.folds;
        vo.seed = fo.seed;
        return calibrate_vidur(&vo, out, json, quiet);
    }
    rc = 1;
    if ((n_prof ? calib_from_profiles(profiles, n_prof, &in, err, sizeof err)
                 : calib_from_run(db, run, &in, err, sizeof err)) != 0) {
        fprintf(stderr, "twinserve calibrate: %s\n", err);
        goto done;
    }
    have_in = 1;
    if (model) {
        preset_model_t m;
        if (preset_model_get(model, &m, err, sizeof err) != 0) {
            fprintf(stderr, "twinserve calibrate: --model: %s\n", err);
            goto done;
        }
        if (in.has_shape && cost_file_same_shape(&m, &in.shape, err, sizeof err) != 0) {
            fprintf(stderr, "twinserve calibrate: --model %s is not the shape %s records (%s)\n",
                    model, in.source, err);
            goto done;
        }
        in.shape = m;
        in.has_shape = 1;
    }
    if (calib_fit(&in, &fo, &cf, &pr, &hr, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve calibrate: %s\n", err);
        goto done;
    }
    char comment[512];
    snprintf(comment, sizeof comment,
             "twinserve cost model, fitted by `twinserve calibrate` (twinserve %s)\n"
             "forward pass and host time as sim/cost.h describes; see docs/fidelity.md",
             TWIN_VERSION);
    snprintf(cf.version, sizeof cf.version, "%s", TWIN_VERSION);
    if (cost_file_write(out, &cf, comment, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve calibrate: %s\n", err);
        goto done;
    }
    if (json) calib_json(stdout, &in, &cf, &pr, &hr);
    else if (!quiet) {
        calib_print(stdout, &in, &cf, &pr, &hr, fo.folds);
        speccurve_t sc;
        /* a speculative engine run: the acceptance the simulator's alpha stands for */
        int got = db ? speccurve_load(db, run, &sc, err, sizeof err) : 0;
        if (got > 0) speccurve_print(stdout, &sc);
        else if (got < 0) fprintf(stderr, "twinserve calibrate: note: %s\n", err);
        printf("\nwrote %s: `twinserve sim --cost %s --kv-blocks N ...`\n", out, out);
    }
    rc = 0;
done:
    fit_report_free(&pr);
    fit_report_free(&hr);
    if (have_in) calib_input_free(&in);
    return rc;
}
