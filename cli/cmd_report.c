/* twinserve report DB [--run NAME|ID] [--slo ttft=S,tpot=S,e2e=S] [--json]
 * [--by tenant|priority|stage]: one run's full metrics (analysis/report.h), then per group
 * of requests or per load stage (analysis/report_by.h). */
#include <getopt.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "analysis/report.h"
#include "analysis/report_by.h"
#include "cli/cli.h"
#include "cli/cli_opts.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: twinserve report DB [--run NAME|ID] [--slo ttft=S,tpot=S,e2e=S] [--json]\n"
            "                           [--by tenant|priority|stage]\n"
            "\n"
            "Prints one run's metrics (default: the latest run in DB): requests completed,\n"
            "rejected, aborted and preempted; makespan (last finish - first arrival);\n"
            "throughput (requests/s, output tokens/s, total tokens/s); mean, p50, p90, p95\n"
            "and p99 of TTFT, TPOT, E2E latency, queueing delay (first scheduled - arrival)\n"
            "and, when the run recorded per-token times (--save-tokens), inter-token\n"
            "latency (gaps between a request's successive token emissions: the tokens of one\n"
            "speculative step arrive together, as one streamed chunk in vLLM's benchmark);\n"
            "KV-cache utilisation (blocks used / total) and batch size (sequences per step)\n"
            "over time; with --slo, SLO attainment and goodput; for a run that verified\n"
            "speculative drafts, the acceptance rate (accepted / proposed drafts) and the\n"
            "mean tokens per decoding request-step. A run that is not done (failed,\n"
            "interrupted, still running) is shown under a WARNING line with its error.\n"
            "\n"
            "Latency percentiles interpolate linearly between closest ranks (numpy's default\n"
            "method). KV utilisation and batch size are time-weighted: each step counts by its\n"
            "duration; their mean is the time average and their p50/p99 the smallest value\n"
            "held for at least 50%%/99%% of the time (no interpolation); max over all steps.\n"
            "\n"
            "  --run NAME|ID    the run (a name, else a numeric id; default the latest)\n"
            "  --slo SPEC       upper bounds, e.g. ttft=0.5,tpot=50ms,e2e=10 (seconds unless\n"
            "                   suffixed ms; any subset). A request meets them when it finished\n"
            "                   and every given bound holds (a one-token request has no TPOT\n"
            "                   and meets a TPOT bound). attainment = requests meeting them /\n"
            "                   all requests of the run; goodput = requests meeting them /\n"
            "                   makespan (req/s), as vLLM's benchmark and DistServe define it.\n"
            "  --json           one JSON object instead of the table: {\"ttft_s\": {\"mean\",\n"
            "                   \"p50\", \"p90\", \"p95\", \"p99\", ...}, \"tpot_s\", \"e2e_s\",\n"
            "                   \"queue_s\", \"itl_s\", \"throughput\", \"slo\", ...}; seconds;\n"
            "                   null where a value is undefined\n"
            "  --by KEY         after the run's metrics, one row per tenant or per priority\n"
            "                   (the trace's optional columns, lower priority = more urgent):\n"
            "                   requests, finished, output tokens and their share of the\n"
            "                   run's, TTFT/TPOT/E2E p50 and p99 (ms), SLO attainment with\n"
            "                   --slo, and requests finished within their deadline_s;\n"
            "                   stage: one row per load stage of a run that records them\n"
            "                   (import --inference-perf): rate, duration, requests,\n"
            "                   finished, failed, TTFT and E2E mean/p50/p90/p99, TPOT p50,\n"
            "                   and inference-perf's own TPOT mean and ITL p75/p90/p99\n"
            "  -h, --help       this help\n"
            "\n"
            "Exit status: 0 ok, 1 the database or run cannot be read, 2 usage error.\n");
}

int cmd_report(int argc, char **argv) {
    const char *path = NULL, *run = NULL, *slo_spec = NULL, *by = NULL, *by_col;
    int json = 0;
    sqlite3 *db = NULL;
    char err[1024];
    report_slo_t slo = {0, 0, 0};
    report_t rep;
    int64_t id;
    int status = 1;

    static const struct option opts[] = {
        {"run", 1, 0, 'r'}, {"slo", 1, 0, 's'}, {"json", 0, 0, 'j'}, {"by", 1, 0, 'b'},
        {"help", 0, 0, 'h'},
        {0, 0, 0, 0},
    };
    int c;
    optind = 1;
    opterr = 0;   /* cli_bad_option says it, in one line */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'r':
            if (!*optarg) {
                fprintf(stderr, "twinserve report: --run needs a value\n");
                return 2;
            }
            run = optarg;
            break;
        case 's': slo_spec = optarg; break;
        case 'j': json = 1; break;
        case 'b':
            if (report_by_parse(optarg, &by_col, err, sizeof err) != 0) {
                fprintf(stderr, "twinserve report: --by: %s\n", err);
                return 2;
            }
            by = optarg;
            break;
        case 'h': usage(stdout); return 0;
        default: return cli_bad_option("report", argv, opts);
        }
    }
    if (optind < argc) path = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "twinserve report: unexpected argument '%s'%s\n", argv[optind],
                " (twinserve report --help shows the usage)");
        return 2;
    }
    if (!path) {
        fprintf(stderr, "twinserve report: missing DB\n");
        usage(stderr);
        return 2;
    }
    if (by && json) {
        fprintf(stderr, "twinserve report: --by prints a table; it has no --json form yet\n");
        return 2;
    }
    if (slo_spec && report_parse_slo(slo_spec, &slo, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve report: --slo: %s\n", err);
        return 2;
    }
    if (summary_open(path, &db, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        goto done;
    }
    /* its message names the database already */
    if (summary_find_run(db, run, &id, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve report: %s\n", err);
        goto done;
    }
    if (report_by_ready(db, id, by, err, sizeof err) != 0 ||
        report_load(db, id, slo_spec ? &slo : NULL, &rep, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", path, err);
        goto done;
    }
    /* An empty run has nothing to report: say so rather than print a table of dashes. */
    if (rep.base.requests == 0) {
        fprintf(stderr, "%s: run '%s' has no requests (status %s%s%s)\n", path, rep.base.name,
                rep.base.status, rep.base.error[0] ? ": " : "", rep.base.error);
        goto done;
    }
    if (json) report_json(stdout, &rep);
    else report_print(stdout, &rep);
    if (by) {
        fputc('\n', stdout);
        if (report_by_print(stdout, db, id, by, slo_spec ? &slo : NULL, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", path, err);
            goto done;
        }
    }
    status = 0;
done:
    sqlite3_close(db);
    return status;
}
