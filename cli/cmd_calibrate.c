/* cmd_calibrate: `twinserve calibrate`, a cost model fitted to measurements (a profile, or
 * an engine run's steps) and written as a cost file for `sim --cost`. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "analysis/calibrate.h"
#include "analysis/calibrate_serving.h"
#include "analysis/calibrate_sim.h"
#include "analysis/spec_curve.h"
#include "engine/model.h"
#include "cli/cli_sim.h"
#include "analysis/vidur.h"
#include "analysis/vidur_ops.h"
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_util.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve calibrate --profile FILE --out COST [options]\n"
        "       twinserve calibrate --db DB --run ENGINE_RUN --out COST [options]\n"
        "       twinserve calibrate --vidur DIR --model M --hw GPU [--tp N] --out COST\n"
        "       twinserve calibrate --vidur DIR --ops --hw GPU --out RATES\n"
        "       twinserve calibrate --serving [BASE] --db DB [--runs R1,R2,...] [--fit TERMS]\n"
        "                           [--loo] [-j N] --out PROFILE\n"
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
        "  --ops                 with --vidur and --hw: the GPU's operator rates by shape\n"
        "                        from all its profiles (sim/gpu_ops.h; sim/costs/GPU.ops),\n"
        "                        which cost models without a profile of their own\n"
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
        "\n"
        "--serving fits a serving profile (sim/serving.h; BASE, default vllm) to every\n"
        "measured run with load stages in DB (import --inference-perf: real vLLM runs), or\n"
        "those --runs names, at once, by simulation: each replayed as validate replays it,\n"
        "the objective their mean stage MAPE (runs that overloaded are replayed, not fitted).\n"
        "  --fit TERMS           of attn_kv_bw_eff, moe_gemm_eff, request_s, prompt_token_s,\n"
        "                        token_s, cpu_step_s, cpu_seq_s, cpu_token_s (default: the\n"
        "                        first, second, third and fifth)\n"
        "  --loo                 leave-one-experiment-out: each run predicted by the fit on\n"
        "                        the others (the whole search again per run); the median\n"
        "                        held-out |error| of the stages' mean TPOT is written as\n"
        "                        step_cv_err, --band's default width\n"
        "  --loo-dir DIR         --loo, and each fold's profile written as DIR/RUN.serving\n"
        "                        (to replay the held-out predictions with validate)\n"
        "  -j N                  replays in parallel (default 2)\n"
        "  --skip-warmup S       the first S seconds of each run out of the stage metrics\n"
        "  --policy FILE, --watermark F   the replays' policy (default policies/vllm.lua)\n"
        "                        and KV watermark (default 0: vLLM v1 has none)\n"
        "  --folds K             cross-validation folds (5)\n"
        "  --seed N              the folds' shuffle (1)\n"
        "  --json                the report as one JSON object\n"
        "  -q, --quiet           no report\n");
}

#define CALIB_MAX_PROFILES 16

enum { O_PROFILE = 256, O_DB, O_RUN, O_OUT, O_MODEL, O_FOLDS, O_SEED, O_JSON, O_HELP,
       O_VIDUR, O_HW, O_TP, O_NETWORK, O_POLICY, O_COST, O_FIT, O_OPS, O_SERVING, O_RUNS, O_LOODIR,
       O_LOO, O_WARMUP };

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

/* --serving: a serving profile fitted to measured runs (analysis/calibrate_serving.h). */
static int calibrate_serving(calserv_opts_t *o, const char *db, const char *terms,
                             sim_opts_t *so, const char *hw, const char *out, int quiet) {
    static calserv_result_t r;
    char err[8192];
    o->db_path = db;
    o->terms = terms;
    o->hw = hw;
    if (!so->policy_path) so->policy_path = "policies/vllm.lua";
    if (isnan(so->watermark)) so->watermark = 0;   /* vLLM v1 keeps no free-block watermark */
    o->sim = so;
    o->progress = !quiet && isatty(2);
    if (calserv_fit(o, &r, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve calibrate: %s\n", err);
        return 1;
    }
    char comment[1024];
    int n = snprintf(comment, sizeof comment, "%s serving profile, its terms fitted by "
                     "`twinserve calibrate --serving` (twinserve %s) to %d measured runs:",
                     r.fitted.name, TWIN_VERSION, r.n_runs);
    for (int k = 0; k < r.n_runs && n < (int)sizeof comment - 80; k++)
        n += snprintf(comment + n, sizeof comment - (size_t)n, "%s %s", k ? "," : "",
                      r.run[k].name);
    snprintf(comment + n, sizeof comment - (size_t)n, "\nsim/serving.h has the model; "
             "docs/fidelity.md the sources and the fit");
    snprintf(r.fitted.source, sizeof r.fitted.source, "calibrate --serving on %d runs: stage "
             "MAPE %.2f%% in sample%s", (int)r.fitted.fit_runs, 100 * r.fit_mape,
             r.loo ? ", see cv_mape held out" : "");
    const char *sde = getenv("SOURCE_DATE_EPOCH");
    time_t now = sde && *sde ? (time_t)strtoll(sde, NULL, 10) : time(NULL);
    strftime(r.fitted.fitted_at, sizeof r.fitted.fitted_at, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    if (serving_write(out, &r.fitted, comment, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve calibrate: %s\n", err);
        return 1;
    }
    if (!quiet) {
        calserv_print(stdout, &r);
        for (int k = 0; k < r.n_runs; k++) {
            printf("\n--- %s (fitted profile)\n", r.run[k].name);
            validate_print_stages(stdout, &r.final[k]);
        }
        printf("\nwrote %s\n", out);
    }
    return 0;
}

/* --vidur --ops: a GPU's operator rates by shape (analysis/vidur_ops.h). */
static int calibrate_ops(const char *dir, const char *hw, const char *out, int quiet) {
    static vidur_ops_result_t r;
    char err[2048];
    if (vidur_ops_fit(dir, hw, &r, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve calibrate: %s\n", err);
        return 1;
    }
    char comment[768];
    snprintf(comment, sizeof comment,
             "a GPU's operator rates by shape, from `twinserve calibrate --vidur DIR --ops` "
             "(twinserve %s)\nfitted to every operator Vidur profiled on this GPU (Agrawal et "
             "al., MLSys 2024; MIT licence;\ngithub.com/microsoft/vidur data/profiling): "
             "sim/gpu_ops.h has the model, docs/fidelity.md the fit", TWIN_VERSION);
    if (gpu_ops_write(out, &r.ops, comment, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve calibrate: %s\n", err);
        return 1;
    }
    if (!quiet) {
        vidur_ops_report(stdout, &r);
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
        { "ops", 0, 0, O_OPS }, { "serving", 2, 0, O_SERVING }, { "runs", 1, 0, O_RUNS },
        { "loo", 0, 0, O_LOO }, { "skip-warmup", 1, 0, O_WARMUP },
        { "loo-dir", 1, 0, O_LOODIR },
        { "watermark", 1, 0, CLI_SIM_WATERMARK },
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
    int json = 0, quiet = 0, ops = 0, serving = 0, c, rc = 2, have_in = 0;
    calserv_opts_t svo = {.jobs = 2};
    so.watermark = NAN;   /* not given (each path's default below) */
    fit_opts_t fo;
    fit_opts_defaults(&fo);
    calib_input_t in;
    cost_file_t cf;
    fit_report_t pr = {0}, hr = {0};
    char err[2048];
    optind = 1;
    opterr = 0;   /* cli_bad_option says it, in one line */
    while ((c = getopt_long(argc, argv, "qj:", opts, NULL)) != -1) {
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
        case O_OPS: ops = 1; break;
        case O_SERVING: serving = 1; svo.base = optarg; break;
        case O_RUNS: svo.runs = optarg; break;
        case O_LOO: svo.loo = 1; break;
        case O_LOODIR: svo.loo = 1, svo.loo_dir = optarg; break;
        case O_WARMUP: ok = cli_double(optarg, 0, 1e9, &svo.skip_warmup_s); break;
        case 'j': ok = cli_int(optarg, 1, 64, &svo.jobs); break;
        case CLI_SIM_WATERMARK: ok = cli_sim_apply("calibrate", c, optarg, &so); break;
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
        default: return cli_bad_option("calibrate", argv, opts);
        }
        if (!ok) {
            const char *name = "?";
            for (const struct option *op = opts; op->name; op++)
                if (op->val == c) name = op->name;
            char opt[64];
            snprintf(opt, sizeof opt, "--%s", name);
            cli_bad_value("calibrate", opt, optarg);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "twinserve calibrate: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (serving) {
        if (!db || !out || n_prof || vo.dir || run || co.base_cost) {
            fprintf(stderr, "twinserve calibrate: --serving fits a serving profile to measured "
                    "runs: give --db DB and --out PROFILE (and --runs, not --run)\n");
            return 2;
        }
        return calibrate_serving(&svo, db, co.terms, &so, vo.hw, out, quiet || json);
    }
    if (isnan(so.watermark)) so.watermark = 0.01;
    if (svo.runs || svo.loo || svo.skip_warmup_s > 0) {
        fprintf(stderr, "twinserve calibrate: --runs, --loo, --loo-dir and --skip-warmup go "
                "with --serving\n");
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
    if (ops && (!vo.dir || !vo.hw || model || vo.tp != 1)) {
        fprintf(stderr, "twinserve calibrate: --ops goes with --vidur DIR and --hw GPU (all of "
                "the GPU's profiles: no --model, no --tp)\n");
        return 2;
    }
    if (ops) return calibrate_ops(vo.dir, vo.hw, out, quiet || json);
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
        if (model_shape_resolve(model, &m, NULL, 0, err, sizeof err) != 0) {
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
