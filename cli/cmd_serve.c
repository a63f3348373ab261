/* cmd_serve: `twinserve serve`, an OpenAI-compatible HTTP server on the engine (issue #15
 * item 3). The main thread runs the engine (engine_run with a live arrival source,
 * engine/live.h): the scheduler core and the Lua policy plan every step, as in a trace
 * replay, and the run is recorded like one (runs.kind 'serve', config "serve"; arrival =
 * when the request was received). HTTP threads (cli/serve_http.c) only hand requests over.
 * Signals drain the server (cli/serve_drain.h, issue #28 item 5): the first stops new
 * requests and lets those in flight finish within --grace seconds. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_engine.h"
#include "cli/cli_experiment.h"
#include "cli/cli_signal.h"
#include "cli/cli_opts.h"
#include "cli/cli_util.h"
#include "cli/serve_drain.h"
#include "cli/serve_http.h"
#include "engine/engine.h"
#include "engine/live.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "traces/json.h"

#define SERVE_GRACE_S 30.0        /* --grace's default */
#define SERVE_FLUSH_S 5.0         /* how long the answers' last events may take to go out */

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve serve --model FILE [options]\n"
        "\n"
        "Serves the model over an OpenAI-compatible HTTP API: POST /v1/completions (prompt:\n"
        "text or token ids) and /v1/chat/completions (stream: true as server-sent events,\n"
        "one per token; max_tokens, temperature, top_p, seed, stop, n, logprobs; usage\n"
        "counts), GET /v1/models, /health and /metrics (Prometheus text). The shared\n"
        "scheduler core and the Lua policy plan every step, as in `twinserve engine`, and the\n"
        "requests are recorded as a run of kind serve (arrival = when a request was\n"
        "received), so report, compare and validate read it.\n"
        "SIGTERM, SIGINT (Ctrl-C) or SIGHUP drains the server: new connections are refused,\n"
        "the requests in flight finish (within --grace), then it exits and the run is\n"
        "recorded as done. Requests still unfinished when the grace period ends, or at a\n"
        "second signal, are aborted and the run is marked failed; a third signal kills.\n"
        "\n"
        "  --model FILE          llama2.c .bin (with tok<V>.bin or tokenizer.bin next to it)\n"
        "                        or GGUF (its own tokenizer)\n"
        "  --tokenizer FILE      a llama2.c tokenizer instead\n"
        "  --served-model-name S the model's id in the API (default: the file's name)\n"
        "  --policy FILE         the scheduling policy (default policies/continuous.lua)\n"
        "  --host ADDR           IPv4 address to listen on (default 127.0.0.1: this machine\n"
        "                        only; 0.0.0.0 opens it to the network)\n"
        "  --port N              TCP port (default 8000; 0: any free one, printed)\n"
        "  --grace S             seconds the requests in flight get to finish after SIGTERM\n"
        "                        or SIGINT (default 30; 0: abort them at once)\n"
        "  --seed N              sampling of requests without a seed, policy randomness (0)\n"
        "  --prefix-caching      reuse the KV of prompts that open alike (the core's prefix\n"
        "                        cache over each prompt's full blocks of tokens)\n"
        "  --trace-out FILE      where the served requests are written as a plain trace when\n"
        "                        the server stops (arrival, prompt, output, max_tokens), for\n"
        "                        `twinserve validate` (default: DB-serve-TIME.csv beside DB)\n");
    cli_engine_usage(f);
    fprintf(f,
        "  -q, --quiet           no start line or summary\n"
        "\n"
        "Exit status: 0 stopped with nothing left in flight (drained), 1 the run failed, 2\n"
        "usage error or the address cannot be bound (nothing recorded), 129/130/143 stopped\n"
        "by SIGHUP/SIGINT/SIGTERM with requests still in flight (the grace period ended, or\n"
        "a second signal: aborted, the run marked failed).\n");
}

/* serve's own options; the shared ones are cli_engine.h's */
enum { O_TOK = 256, O_SERVED, O_HOST, O_PORT, O_TRACEOUT, O_GRACE, O_HELP };

static const struct option opts[] = {
    { "tokenizer", 1, 0, O_TOK }, { "served-model-name", 1, 0, O_SERVED },
    { "host", 1, 0, O_HOST }, { "port", 1, 0, O_PORT }, { "trace-out", 1, 0, O_TRACEOUT },
    { "grace", 1, 0, O_GRACE },
    CLI_ENGINE_OPTIONS,
    { "quiet", 0, 0, 'q' }, { "help", 0, 0, O_HELP }, { 0, 0, 0, 0 },
};

typedef struct {
    const char *tokenizer, *served, *host, *trace_out;
    int32_t port;
    double grace;
} serve_opts_t;

/* One of serve's own options; 1 applied, 0 a bad value. */
static int apply(int c, const char *a, serve_opts_t *so) {
    switch (c) {
    case O_TOK: so->tokenizer = a; return 1;
    case O_SERVED: so->served = a; return *a != '\0';
    case O_HOST: so->host = a; return 1;
    case O_PORT: return cli_int(a, 0, 65535, &so->port);
    case O_TRACEOUT: so->trace_out = a; return *a != '\0';
    case O_GRACE: return cli_double(a, 0, 86400, &so->grace);
    }
    return 0;
}

/* The trace file's absolute path (the run's config records it, and validate may run from
 * elsewhere): --trace-out, else DB-serve-YYYYmmdd-HHMMSS.csv beside the database. */
static int served_trace_path(const char *given, const char *db, char *out, size_t len) {
    char name[1200], cwd[1024];
    if (given) {
        snprintf(name, sizeof name, "%s", given);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        char stamp[32];
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
        const char *dot = strrchr(db, '.'), *slash = strrchr(db, '/');
        int stem = dot && (!slash || dot > slash) ? (int)(dot - db) : (int)strlen(db);
        snprintf(name, sizeof name, "%.*s-serve-%s.csv", stem, db, stamp);
    }
    if (name[0] == '/') return snprintf(out, len, "%s", name) < (int)len;
    if (!getcwd(cwd, sizeof cwd)) return 0;
    return snprintf(out, len, "%s/%s", cwd, name) < (int)len;
}

/* The model's tokenizer: --tokenizer, the GGUF's own, or tok<V>.bin / tokenizer.bin next to a
 * llama2.c checkpoint (as generate finds it). 0, or -1 with a message. */
static int open_tokenizer(const char *model, const char *given, tok_t **out, int32_t *vocab,
                          char *err, size_t errlen) {
    model_t *m = NULL;
    *out = NULL;
    if (model_open(model, 0, MODEL_SHAPE_ONLY | MODEL_LAZY, &m, err, errlen) != 0) return -1;
    int rc = -1;
    if (strcmp(m->format, "gguf") && strcmp(m->format, "llama2c") && !given)
        snprintf(err, errlen, "%s has no tokenizer: serving needs text (give a .bin with its "
                 "tokenizer, or a GGUF file)", model);
    else
        rc = tok_load_for_model(model, m->format, m->cfg.vocab, given, out, err, errlen);
    *vocab = m->cfg.vocab;   /* a placeholder tokenizer (ids only) leaves *out NULL */
    model_free(m);
    return rc;
}

int cmd_serve(int argc, char **argv) {
    engine_opts_t o;
    engine_opts_defaults(&o);
    o.version = TWIN_VERSION;
    o.policy_path = "policies/continuous.lua";
    o.idle_sleep = 1; /* a server waits for clients without holding the cores */
    serve_opts_t so = { .host = "127.0.0.1", .port = 8000, .grace = SERVE_GRACE_S };
    int quiet = 0, rc = 2, c;
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    tok_t *tok = NULL;
    live_t *live = NULL;
    serve_http_t *http = NULL;
    serve_drain_t *drain = NULL;
    serve_drain_result_t dr = { 0 };
    char err[8192] = "", extra[600];
    if (!sets) return 1;
    o.sets = sets;
    optind = 1;
    opterr = 0;   /* cli_bad_option says it, in one line */
    while ((c = getopt_long(argc, argv, "q", opts, NULL)) != -1) {
        if (c == 'q') {
            quiet = 1;
        } else if (c == O_HELP) {
            usage(stdout);
            rc = 0;
            goto done;
        } else if (c == '?' || c == ':') {
            rc = cli_bad_option("serve", argv, opts);
            goto done;
        } else if (c >= CLI_ENG_FIRST && c < CLI_ENG_END) {
            if (!cli_engine_apply("serve", c, optarg, &o)) goto done;
        } else if (!apply(c, optarg, &so)) {
            char opt[64];
            snprintf(opt, sizeof opt, "--%s", opts[c - O_TOK].name);
            if (c == O_GRACE) snprintf(cli_want, sizeof cli_want, "seconds, 0 to 86400");
            cli_bad_value("serve", opt, optarg);
            goto done;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "twinserve serve: unexpected argument '%s'\n", argv[optind]);
        goto done;
    }
    if (!o.model) {
        fprintf(stderr, "twinserve serve: --model is required\n");
        usage(stderr);
        goto done;
    }
    int32_t vocab = 0;
    if (open_tokenizer(o.model, so.tokenizer, &tok, &vocab, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve serve: %s\n", err);
        goto done;
    }
    if (!(live = live_new(tok, vocab))) {
        fprintf(stderr, "twinserve serve: out of memory\n");
        rc = 1;
        goto done;
    }
    const char *base = strrchr(o.model, '/');
    serve_ctx_t ctx = { .live = live, .model = so.served ? so.served : base ? base + 1 : o.model,
                        .policy = o.policy_path, .created = (long long)time(NULL) };
    int port = 0;
    if (serve_http_start(&ctx, so.host, so.port, &http, &port, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve serve: %s\n", err);
        goto done;
    }
    /* a client gone mid-write must not kill the server */
    signal(SIGPIPE, SIG_IGN);
    char trace[2400];
    if (!served_trace_path(so.trace_out, o.db_path, trace, sizeof trace)) {
        fprintf(stderr, "twinserve serve: cannot make the --trace-out path absolute\n");
        goto done;
    }
    o.trace_path = trace;
    o.trace_opts.format = TRACE_FMT_PLAIN;
    /* the run's config JSON: names escaped (a served name may hold any character) */
    FILE *xf = fmemopen(extra, sizeof extra, "w");
    if (!xf) {
        fprintf(stderr, "twinserve serve: out of memory\n");
        rc = 1;
        goto done;
    }
    fputs("\"serve\":{\"host\":", xf);
    json_write_str(xf, so.host);
    fprintf(xf, ",\"port\":%d,\"model_id\":", port);
    json_write_str(xf, ctx.model);
    fputc('}', xf);
    if (fclose(xf) != 0 || !memchr(extra, '\0', sizeof extra) || extra[strlen(extra) - 1] != '}') {
        fprintf(stderr, "twinserve serve: --served-model-name is too long\n");
        goto done;
    }
    o.config_extra = extra;
    o.live = live;
    o.interrupt = serve_drain_flag();
    if (serve_drain_start(live, http, so.grace, quiet, &drain) != 0) {
        fprintf(stderr, "twinserve serve: cannot start the signal watcher\n");
        rc = 1;
        goto done;
    }
    if (!quiet)
        fprintf(stderr, "twinserve serve: listening on http://%s:%d (model %s, policy %s); "
                        "Ctrl-C drains and stops\n", so.host, port, ctx.model, o.policy_path);
    engine_result_t res;
    int failed = engine_run(&o, &res, err, sizeof err) != 0;
    serve_drain_stop(drain, &dr);
    drain = NULL;
    live_engine_close(live, "the server stopped");
    /* the last events of every answer go out before the connections close */
    serve_http_wait_idle(http, SERVE_FLUSH_S);
    serve_http_stop(http); /* waits for the connection threads, whose channels are ended */
    http = NULL;
    if (dr.drained && !quiet && res.run_id >= 0)
        fprintf(stderr, "twinserve serve: drained: %lld requests in flight finished in %.3f "
                "s\n", (long long)dr.in_flight_at_signal, dr.drain_s);
    if (res.run_id >= 0) {
        char terr[512];
        if (live_write_trace(live, trace, terr, sizeof terr) != 0)
            fprintf(stderr, "twinserve serve: writing the served requests' trace: %s\n", terr);
        else if (!quiet)
            fprintf(stderr, "twinserve serve: the served requests are in %s\n", trace);
    }
    if (failed) {
        rc = cli_run_failed("serve", o.db_path, res.run_id, res.setup_failed, err);
        goto done;
    }
    if (res.run_id < 0) { /* a signal while the model loaded */
        fprintf(stderr, "twinserve serve: stopped before the engine started: nothing recorded\n");
        rc = dr.sig ? cli_signal_exit_code(dr.sig) : 1;
        goto done;
    }
    if (!quiet) {
        printf("run %lld in %s: %lld requests, %lld steps, %d KV blocks; %.3f s wall\n",
               (long long)res.run_id, o.db_path, (long long)res.requests, (long long)res.steps,
               res.num_blocks, res.wall_s);
        if (res.have_summary && res.requests > 0) summary_print(stdout, &res.summary);
    }
    rc = 0;
done:
    serve_drain_stop(drain, NULL);
    serve_http_stop(http);
    live_free(live);
    tok_free(tok);
    free(sets);
    return rc;
}
