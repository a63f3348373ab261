/* cmd_trace: `twinserve trace gen` (synthetic trace to CSV) and `twinserve trace info`
 * (summary of a real or generated trace, after the replay options). Options are parsed by
 * hand rather than getopt_long so that no global parser state outlives the call. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "traces/trace.h"
#include "traces/trace_gen.h"
#include "traces/trace_reuse.h"

static const char usage_text[] =
    "usage: twinserve trace gen [--n N | --duration S] [--rate R] [--arrival poisson|gamma:CV]\n"
    "                           [--prompt DIST] [--output DIST] [--seed S] [--out FILE]\n"
    "                           [--shared-prefix GROUPS:TOKENS]\n"
    "       twinserve trace info FILE [--format F] [--rate-scale X] [--start S]\n"
    "                                 [--duration S] [--limit N]\n"
    "\n"
    "gen writes a synthetic trace as CSV (arrival_s,prompt_tokens,output_tokens) to FILE\n"
    "(then says on stdout how many requests over what span) or stdout. Defaults: --n 1000 --rate 1 --arrival poisson --prompt lognormal:1000:1.0\n"
    "--output lognormal:200:1.0 --seed 0.\n"
    "  DIST: fixed:N | uniform:A:B | lognormal:MEDIAN:SIGMA[:MAX] (clamped to [1, MAX],\n"
    "        MAX 32768 by default) | trace:PATH (resample rows of a real trace; when --prompt\n"
    "        and --output name the same trace, (prompt, output) pairs are kept together)\n"
    "  gamma:CV: gamma inter-arrival gaps with coefficient of variation CV (1 = poisson)\n"
    "  --shared-prefix GROUPS:TOKENS: every prompt opens with a TOKENS-token system prompt\n"
    "        of one of GROUPS groups (drawn uniformly), before its drawn length; adds the\n"
    "        columns prefix_group,prefix_tokens, which sim --prefix-caching reuses\n"
    "\n"
    "info prints format, request count, skipped failures, duration, mean rate and the mean,\n"
    "p50, p99 and max of prompt and output lengths; for a trace with prefix hash ids\n"
    "(Mooncake) or prefix groups (plain), its own prefix reuse: the share of prompt blocks\n"
    "(and tokens) a request could take from an earlier request's KV given an unlimited\n"
    "cache, the leading blocks it shares with one (the bound of --prefix-caching's hits).\n"
    "  F: auto (default; from the header) | azure | burstgpt | mooncake | plain\n"
    "  --rate-scale X divides arrival gaps by X; --start/--duration select a time window\n"
    "  (seconds from the first request); --limit keeps the first N requests.\n";

static int usage_error(const char *sub, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int usage_error(const char *sub, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "twinserve trace%s%s: ", sub ? " " : "", sub ? sub : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see twinserve trace --help)\n");
    return 2;
}

static int missing(const char *sub, const char *opt)
{
    return usage_error(sub, "option '%s' needs a value", opt);
}

/* If argv[*i] is --NAME or --NAME=VALUE: 1, with *val set (the first form consumes the next
 * argument); 0 when it is something else; -1 when the value is missing. */
static int take(int argc, char **argv, int *i, const char *name, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);

    if (strncmp(a, "--", 2) != 0 || strncmp(a + 2, name, n) != 0) return 0;
    if (a[2 + n] == '=') {
        *val = a + 3 + n;
        return 1;
    }
    if (a[2 + n] != '\0') return 0;
    if (*i + 1 >= argc) return -1;
    *val = argv[++*i];
    return 1;
}

static int num_real(const char *s, double *out)
{
    char *end;

    if (!*s) return -1;
    errno = 0;
    *out = strtod(s, &end);
    return *end || errno || !isfinite(*out) ? -1 : 0;
}

static int num_int(const char *s, int64_t *out)
{
    char *end;

    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    *out = strtoll(s, &end, 10);
    return *end || errno ? -1 : 0;
}

static int is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 || strcmp(a, "help") == 0;
}

static int cmd_gen(int argc, char **argv)
{
    tgen_opts_t o;
    tgen_t *g = NULL;
    FILE *f = stdout;
    const char *out = NULL, *v;
    char err[1200];
    int have_n = 0, have_dur = 0, rc = 2, i, k;

    tgen_opts_default(&o);
    for (i = 1; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs(usage_text, stdout);
            return 0;
        }
        if ((k = take(argc, argv, &i, "n", &v)) != 0) {
            if (k < 0) return missing("gen", argv[i]);
            if (num_int(v, &o.n) < 0 || o.n < 1)
                return usage_error("gen", "--n needs a positive integer, not '%s'", v);
            have_n = 1;
        } else if ((k = take(argc, argv, &i, "duration", &v)) != 0) {
            if (k < 0) return missing("gen", argv[i]);
            if (num_real(v, &o.duration_s) < 0 || o.duration_s <= 0)
                return usage_error("gen", "--duration needs a positive number of "
                                   "seconds, not '%s'", v);
            have_dur = 1;
        } else if ((k = take(argc, argv, &i, "rate", &v)) != 0) {
            if (k < 0) return missing("gen", argv[i]);
            if (num_real(v, &o.rate) < 0 || o.rate <= 0)
                return usage_error("gen", "--rate needs a positive number of "
                                   "requests/s, not '%s'", v);
        } else if ((k = take(argc, argv, &i, "arrival", &v)) != 0) {
            if (k < 0) return missing("gen", argv[i]);
            if (tgen_arrival_parse(v, &o.arrival, err, sizeof err) < 0)
                return usage_error("gen", "--arrival %s", err);
        } else if ((k = take(argc, argv, &i, "prompt", &v)) != 0) {
            if (k < 0) return missing("gen", argv[i]);
            if (tgen_dist_parse(v, &o.prompt, err, sizeof err) < 0)
                return usage_error("gen", "--prompt %s", err);
        } else if ((k = take(argc, argv, &i, "shared-prefix", &v)) != 0) {
            if (k < 0) return missing("gen", argv[i]);
            if (tgen_prefix_parse(v, &o.prefix_groups, &o.prefix_tokens, err, sizeof err) < 0)
                return usage_error("gen", "--shared-prefix %s", err);
        } else if ((k = take(argc, argv, &i, "output", &v)) != 0) {
            if (k < 0) return missing("gen", argv[i]);
            if (tgen_dist_parse(v, &o.output, err, sizeof err) < 0)
                return usage_error("gen", "--output %s", err);
        } else if ((k = take(argc, argv, &i, "seed", &v)) != 0) {
            char *end;
            if (k < 0) return missing("gen", argv[i]);
            if (*v < '0' || *v > '9')
                return usage_error("gen", "--seed needs a non-negative integer, not '%s'", v);
            errno = 0;
            o.seed = strtoull(v, &end, 10);
            if (*end || errno)
                return usage_error("gen", "--seed needs a non-negative integer, not '%s'", v);
        } else if ((k = take(argc, argv, &i, "out", &v)) != 0) {
            if (k < 0) return missing("gen", argv[i]);
            if (!*v) return usage_error("gen", "--out needs a file name");
            out = v;
        } else {
            return usage_error("gen", "unknown option '%s'", argv[i]);
        }
    }
    if (have_n && have_dur) return usage_error("gen", "give --n or --duration, not both");
    if (have_dur) o.n = 0;

    rc = 1;
    g = tgen_open(&o);
    if (!g) {
        fprintf(stderr, "twinserve trace gen: out of memory\n");
        goto out;
    }
    if (tgen_errmsg(g)) {
        fprintf(stderr, "twinserve trace gen: %s\n", tgen_errmsg(g));
        goto out;
    }
    if (out && !(f = fopen(out, "w"))) {
        fprintf(stderr, "twinserve trace gen: %s: %s\n", out, strerror(errno));
        f = stdout;
        goto out;
    }
    if (tgen_write_csv(g, f) < 0) {
        fprintf(stderr, "twinserve trace gen: %s%s%s\n", out ? out : "", out ? ": " : "",
                tgen_errmsg(g));
        goto out;
    }
    rc = 0;
out:
    if (f != stdout && fclose(f) != 0 && rc == 0) {
        fprintf(stderr, "twinserve trace gen: %s: %s\n", out, strerror(errno));
        rc = 1;
    }
    if (rc == 0 && out) { /* as calibrate's "wrote FILE"; without --out stdout is the trace */
        tgen_stats_t st;
        tgen_stats(g, &st);
        double n = (double)st.requests;
        printf("[trace gen] wrote %lld request%s to %s: arrivals 0 to %.3f s",
               (long long)st.requests, st.requests == 1 ? "" : "s", out, st.last_arrival_s);
        if (st.last_arrival_s > 0) printf(" (%.3g req/s)", (n - 1) / st.last_arrival_s);
        printf(", mean prompt %.0f and output %.0f tokens\n", (double)st.prompt_tokens / n,
               (double)st.output_tokens / n);
    }
    if (rc != 0 && f != stdout && out) remove(out);
    tgen_close(g);
    return rc;
}

/* Length statistics with exact percentiles in bounded memory for the usual lengths: a
 * count per value below LEN_HIST, the (rare) longer ones kept individually. */
#define LEN_HIST 65536
typedef struct {
    int64_t *count;  /* [LEN_HIST] */
    int32_t *big;    /* values >= LEN_HIST, nbig of them */
    size_t nbig, capbig;
    int64_t n;
    double sum;
    int32_t max;
} lenstat_t;

static int lenstat_add(lenstat_t *s, int32_t v)
{
    s->n++;
    s->sum += v;
    if (v > s->max) s->max = v;
    if (v < LEN_HIST) {
        s->count[v]++;
        return 0;
    }
    if (s->nbig == s->capbig) {
        size_t cap = s->capbig ? s->capbig * 2 : 256;
        int32_t *b = realloc(s->big, cap * sizeof *b);
        if (!b) return -1;
        s->big = b;
        s->capbig = cap;
    }
    s->big[s->nbig++] = v;
    return 0;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile (p in (0, 1]); big must be sorted. */
static int32_t lenstat_pct(const lenstat_t *s, double p)
{
    int64_t rank = (int64_t)ceil(p * (double)s->n), seen = 0;
    int32_t v;

    if (rank < 1) rank = 1;
    for (v = 0; v < LEN_HIST; v++) {
        seen += s->count[v];
        if (seen >= rank) return v;
    }
    return s->big[rank - seen - 1];
}

static void lenstat_print(const char *label, lenstat_t *s)
{
    if (s->n == 0) {
        printf("%-10s -\n", label);
        return;
    }
    if (s->nbig > 0) qsort(s->big, s->nbig, sizeof *s->big, cmp_i32);
    printf("%-10s mean %.1f  p50 %d  p99 %d  max %d\n", label, s->sum / (double)s->n,
           (int)lenstat_pct(s, 0.5), (int)lenstat_pct(s, 0.99), (int)s->max);
}

static int cmd_info(int argc, char **argv)
{
    trace_opts_t o;
    trace_t *t = NULL;
    trace_reuse_t *reuse = NULL;
    trace_req_t r;
    lenstat_t ps, os;
    const char *path = NULL, *v;
    double first = 0, last = 0;
    int64_t hash_refs = 0;
    int rc = 2, i, k, got;

    memset(&o, 0, sizeof o);
    memset(&ps, 0, sizeof ps);
    memset(&os, 0, sizeof os);
    for (i = 1; i < argc; i++) {
        if (is_help(argv[i])) {
            fputs(usage_text, stdout);
            return 0;
        }
        if ((k = take(argc, argv, &i, "format", &v)) != 0) {
            if (k < 0) return missing("info", argv[i]);
            if (trace_format_parse(v, &o.format) < 0)
                return usage_error("info", "--format needs auto, azure, burstgpt, mooncake or "
                                   "plain, not '%s'", v);
        } else if ((k = take(argc, argv, &i, "rate-scale", &v)) != 0) {
            if (k < 0) return missing("info", argv[i]);
            if (num_real(v, &o.rate_scale) < 0 || o.rate_scale <= 0)
                return usage_error("info", "--rate-scale needs a positive number, not '%s'", v);
        } else if ((k = take(argc, argv, &i, "start", &v)) != 0) {
            if (k < 0) return missing("info", argv[i]);
            if (num_real(v, &o.start_s) < 0 || o.start_s < 0)
                return usage_error("info", "--start needs a non-negative number of seconds, "
                                   "not '%s'", v);
        } else if ((k = take(argc, argv, &i, "duration", &v)) != 0) {
            if (k < 0) return missing("info", argv[i]);
            if (num_real(v, &o.duration_s) < 0 || o.duration_s <= 0)
                return usage_error("info", "--duration needs a positive number of seconds, "
                                   "not '%s'", v);
        } else if ((k = take(argc, argv, &i, "limit", &v)) != 0) {
            if (k < 0) return missing("info", argv[i]);
            if (num_int(v, &o.limit) < 0 || o.limit < 1)
                return usage_error("info", "--limit needs a positive integer, not '%s'", v);
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return usage_error("info", "unknown option '%s'", argv[i]);
        } else if (path) {
            return usage_error("info", "one trace file at a time ('%s' is extra)", argv[i]);
        } else {
            path = argv[i];
        }
    }
    if (!path) return usage_error("info", "no trace FILE given");

    rc = 1;
    ps.count = calloc(LEN_HIST, sizeof *ps.count);
    os.count = calloc(LEN_HIST, sizeof *os.count);
    t = trace_open(path, &o);
    reuse = trace_reuse_new();
    if (!ps.count || !os.count || !t || !reuse) {
        fprintf(stderr, "twinserve trace info: out of memory\n");
        goto out;
    }
    while ((got = trace_next(t, &r)) == 1) {
        if (ps.n == 0) first = r.arrival_s;
        last = r.arrival_s;
        hash_refs += r.n_hash;
        if (lenstat_add(&ps, r.prompt_tokens) < 0 || lenstat_add(&os, r.output_tokens) < 0 ||
            trace_reuse_add(reuse, &r) < 0) {
            fprintf(stderr, "twinserve trace info: out of memory\n");
            goto out;
        }
    }
    if (got < 0) {
        fprintf(stderr, "twinserve trace info: %s\n", trace_errmsg(t));
        goto out;
    }
    printf("%-10s %s\n", "file", path);
    printf("%-10s %s\n", "format", trace_format_name(trace_format(t)));
    printf("%-10s %lld\n", "requests", (long long)ps.n);
    printf("%-10s %lld (failed requests in the source)\n", "skipped",
           (long long)trace_skipped(t));
    printf("%-10s %.3f s (first to last arrival)\n", "duration", last - first);
    if (ps.n > 1 && last > first)
        printf("%-10s %.4f req/s\n", "mean rate", (double)(ps.n - 1) / (last - first));
    else
        printf("%-10s -\n", "mean rate");
    lenstat_print("prompt", &ps);
    lenstat_print("output", &os);
    if (trace_format(t) == TRACE_FMT_MOONCAKE && ps.n > 0)
        printf("%-10s %lld hash ids (%.1f per request)\n", "prefix", (long long)hash_refs,
               (double)hash_refs / (double)ps.n);
    trace_reuse_stats_t ru;
    trace_reuse_stats(reuse, &ru);
    if (ru.blocks > 0)
        printf("%-10s %.1f%% of the %lld prompt blocks (%.1f%% of the prompt tokens) repeat an "
               "earlier request's prefix: an unlimited prefix cache's hit rate\n", "reuse",
               100.0 * (double)ru.reused_blocks / (double)ru.blocks, (long long)ru.blocks,
               ru.prompt_tokens > 0 ? 100.0 * (double)ru.reused_tokens / (double)ru.prompt_tokens
                                    : 0.0);
    else
        printf("%-10s - (the trace names no shared prefixes: no hash ids, no prefix groups)\n",
               "reuse");
    rc = 0;
out:
    trace_reuse_free(reuse);
    trace_close(t);
    free(ps.count);
    free(ps.big);
    free(os.count);
    free(os.big);
    return rc;
}

int cmd_trace(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_text, stderr);
        return 2;
    }
    if (is_help(argv[1])) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(argv[1], "gen") == 0) return cmd_gen(argc - 1, argv + 1);
    if (strcmp(argv[1], "info") == 0) return cmd_info(argc - 1, argv + 1);
    return usage_error(NULL, "unknown subcommand '%s' (expected gen or info)", argv[1]);
}
