/* trace_gen: synthetic traces (see trace_gen.h for the model and its invariants). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "traces/rng.h"
#include "traces/trace.h"
#include "traces/trace_gen.h"

/* Stream numbers for rng_seed3: one per quantity, so they do not disturb each other. */
enum { STREAM_ARRIVAL = 1, STREAM_PROMPT, STREAM_OUTPUT, STREAM_RESERVOIR, STREAM_GROUP };

/* Rows of a real trace kept for resampling: parallel arrays of n lengths. */
typedef struct {
    int32_t *prompt, *output;
    int64_t n, cap;
} pool_t;

struct tgen {
    tgen_opts_t o;
    rng_t r_arrival, r_prompt, r_output, r_group;
    pool_t prompt_pool, output_pool; /* used by TRACE distributions */
    int joint;            /* prompt and output resample the same rows of one pool */
    double clock;         /* arrival time of the next request, unrounded */
    int64_t emitted;
    tgen_stats_t stats;   /* of the requests handed out */
    int done, failed;
    char errbuf[1024];
};

static int gen_fail(tgen_t *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int gen_fail(tgen_t *g, const char *fmt, ...)
{
    va_list ap;

    if (g->failed) return -1;
    va_start(ap, fmt);
    vsnprintf(g->errbuf, sizeof g->errbuf, fmt, ap);
    va_end(ap);
    g->failed = 1;
    return -1;
}

void tgen_opts_default(tgen_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->n = 1000;
    o->rate = 1.0;
    o->arrival.kind = TGEN_ARRIVAL_POISSON;
    o->arrival.cv = 1.0;
    o->prompt.kind = TGEN_DIST_LOGNORMAL;
    o->prompt.a = 1000;
    o->prompt.b = 1.0;
    o->prompt.max = TGEN_DEFAULT_MAX_LEN;
    o->output.kind = TGEN_DIST_LOGNORMAL;
    o->output.a = 200;
    o->output.b = 1.0;
    o->output.max = TGEN_DEFAULT_MAX_LEN;
}

/* Whole-string number parsers: 0 or -1. */
static int parse_real(const char *s, double *out)
{
    char *end;

    if (!*s || *s == ' ') return -1;
    errno = 0;
    *out = strtod(s, &end);
    return *end || errno || !isfinite(*out) ? -1 : 0;
}

static int parse_len(const char *s, int32_t *out)
{
    char *end;
    long long v;

    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (*end || errno || v < 1 || v > INT32_MAX) return -1;
    *out = (int32_t)v;
    return 0;
}

int tgen_dist_parse(const char *s, tgen_dist_t *out, char *err, size_t errlen)
{
    char buf[128], *f[5], *save = NULL;
    int nf = 0;
    int32_t a, b;
    double med, sigma;
    tgen_dist_t d;

    memset(&d, 0, sizeof d);
    d.max = TGEN_DEFAULT_MAX_LEN;
    if (!s || !*s) {
        snprintf(err, errlen, "empty length distribution; expected fixed:N, uniform:A:B, "
                              "lognormal:MEDIAN:SIGMA[:MAX] or trace:PATH");
        return -1;
    }
    /* trace:PATH first: a path may contain ':' and be long. */
    if (strncmp(s, "trace:", 6) == 0) {
        if (!s[6] || strlen(s + 6) >= sizeof d.path) {
            snprintf(err, errlen, "'%s': expected trace:PATH with a path under %d bytes", s,
                     TGEN_PATH_MAX);
            return -1;
        }
        d.kind = TGEN_DIST_TRACE;
        strcpy(d.path, s + 6);
        *out = d;
        return 0;
    }
    if (strlen(s) >= sizeof buf) goto bad;
    strcpy(buf, s);
    for (char *p = strtok_r(buf, ":", &save); p && nf < 5; p = strtok_r(NULL, ":", &save))
        f[nf++] = p;
    /* strtok_r merges "::", which would accept "uniform::5": count the colons too. */
    {
        int colons = 0;
        for (const char *p = s; *p; p++) colons += *p == ':';
        if (colons != nf - 1) goto bad;
    }
    if (nf == 2 && strcmp(f[0], "fixed") == 0) {
        if (parse_len(f[1], &a) < 0) {
            snprintf(err, errlen, "'%s': N must be an integer in [1, %d]", s, INT32_MAX);
            return -1;
        }
        d.kind = TGEN_DIST_FIXED;
        d.a = a;
    } else if (nf == 3 && strcmp(f[0], "uniform") == 0) {
        if (parse_len(f[1], &a) < 0 || parse_len(f[2], &b) < 0) {
            snprintf(err, errlen, "'%s': A and B must be integers in [1, %d]", s, INT32_MAX);
            return -1;
        }
        if (a > b) {
            snprintf(err, errlen, "'%s': A must not exceed B", s);
            return -1;
        }
        d.kind = TGEN_DIST_UNIFORM;
        d.a = a;
        d.b = b;
    } else if ((nf == 3 || nf == 4) && strcmp(f[0], "lognormal") == 0) {
        if (parse_real(f[1], &med) < 0 || med <= 0) {
            snprintf(err, errlen, "'%s': MEDIAN must be a positive number", s);
            return -1;
        }
        if (parse_real(f[2], &sigma) < 0 || sigma < 0) {
            snprintf(err, errlen, "'%s': SIGMA must be a non-negative number", s);
            return -1;
        }
        if (nf == 4 && parse_len(f[3], &d.max) < 0) {
            snprintf(err, errlen, "'%s': MAX must be an integer in [1, %d]", s, INT32_MAX);
            return -1;
        }
        if (med > d.max) {
            snprintf(err, errlen, "'%s': MEDIAN must not exceed MAX (%d)", s, (int)d.max);
            return -1;
        }
        d.kind = TGEN_DIST_LOGNORMAL;
        d.a = med;
        d.b = sigma;
    } else {
        goto bad;
    }
    *out = d;
    return 0;
bad:
    snprintf(err, errlen, "'%s' is not a length distribution; expected fixed:N, uniform:A:B, "
                          "lognormal:MEDIAN:SIGMA[:MAX] or trace:PATH", s);
    return -1;
}

int tgen_arrival_parse(const char *s, tgen_arrival_t *out, char *err, size_t errlen)
{
    double cv;

    if (s && strcmp(s, "poisson") == 0) {
        out->kind = TGEN_ARRIVAL_POISSON;
        out->cv = 1.0;
        return 0;
    }
    if (s && strncmp(s, "gamma:", 6) == 0) {
        if (parse_real(s + 6, &cv) < 0 || cv <= 0) {
            snprintf(err, errlen, "'%s': CV must be a positive number", s);
            return -1;
        }
        out->kind = TGEN_ARRIVAL_GAMMA;
        out->cv = cv;
        return 0;
    }
    snprintf(err, errlen, "'%s' is not an arrival process; expected poisson or gamma:CV",
             s ? s : "");
    return -1;
}

int tgen_prefix_parse(const char *s, int32_t *groups, int32_t *tokens, char *err,
                      size_t errlen)
{
    char buf[64];
    const char *colon = s ? strchr(s, ':') : NULL;

    if (colon && (size_t)(colon - s) < sizeof buf) {
        memcpy(buf, s, (size_t)(colon - s));
        buf[colon - s] = '\0';
        if (parse_len(buf, groups) == 0 && parse_len(colon + 1, tokens) == 0 && *groups >= 1 &&
            *tokens >= 1)
            return 0;
    }
    snprintf(err, errlen, "'%s' is not GROUPS:TOKENS (two positive integers, e.g. 4:2048)",
             s ? s : "");
    return -1;
}

void tgen_dist_format(const tgen_dist_t *d, char *buf, size_t len)
{
    switch (d->kind) {
    case TGEN_DIST_FIXED: snprintf(buf, len, "fixed:%.0f", d->a); break;
    case TGEN_DIST_UNIFORM: snprintf(buf, len, "uniform:%.0f:%.0f", d->a, d->b); break;
    case TGEN_DIST_LOGNORMAL:
        snprintf(buf, len, "lognormal:%.15g:%.15g:%d", d->a, d->b, (int)d->max);
        break;
    case TGEN_DIST_TRACE: snprintf(buf, len, "trace:%s", d->path); break;
    default: snprintf(buf, len, "?");
    }
}

static int pool_push(pool_t *p, int32_t prompt, int32_t output)
{
    if (p->n == p->cap) {
        int64_t cap = p->cap ? p->cap * 2 : 4096;
        int32_t *a = realloc(p->prompt, (size_t)cap * sizeof *a);
        if (!a) return -1;
        p->prompt = a;
        a = realloc(p->output, (size_t)cap * sizeof *a);
        if (!a) return -1;
        p->output = a;
        p->cap = cap;
    }
    p->prompt[p->n] = prompt;
    p->output[p->n] = output;
    p->n++;
    return 0;
}

/* Reads every row of PATH into a reservoir of at most max_pairs (Algorithm R), so the
 * memory stays bounded for traces of millions of rows while every row is equally likely. */
static int pool_load(tgen_t *g, pool_t *p, const char *path, const char *which)
{
    int64_t cap = g->o.max_pairs > 0 ? g->o.max_pairs : TGEN_DEFAULT_MAX_PAIRS, seen = 0;
    trace_t *t = trace_open(path, NULL);
    trace_req_t req;
    rng_t r;
    int rc = -1, got;

    if (!t) return gen_fail(g, "%s: out of memory", path);
    if (trace_errmsg(t)) {
        gen_fail(g, "%s trace: %s", which, trace_errmsg(t));
        goto out;
    }
    rng_seed3(&r, g->o.seed, STREAM_RESERVOIR, which[0] == 'o');
    while ((got = trace_next(t, &req)) == 1) {
        if (seen < cap) {
            if (pool_push(p, req.prompt_tokens, req.output_tokens) < 0) {
                gen_fail(g, "%s: out of memory", path);
                goto out;
            }
        } else {
            int64_t j = (int64_t)(rng_uniform(&r) * (double)(seen + 1));
            if (j < cap) {
                p->prompt[j] = req.prompt_tokens;
                p->output[j] = req.output_tokens;
            }
        }
        seen++;
    }
    if (got < 0) {
        gen_fail(g, "%s trace: %s", which, trace_errmsg(t));
        goto out;
    }
    if (p->n == 0) {
        gen_fail(g, "%s trace: %s has no requests to resample", which, path);
        goto out;
    }
    rc = 0;
out:
    trace_close(t);
    return rc;
}

static int check_dist(tgen_t *g, const tgen_dist_t *d, const char *which)
{
    int ok;

    switch (d->kind) {
    case TGEN_DIST_FIXED: ok = d->a >= 1 && d->a <= INT32_MAX; break;
    case TGEN_DIST_UNIFORM: ok = d->a >= 1 && d->a <= d->b && d->b <= INT32_MAX; break;
    case TGEN_DIST_LOGNORMAL:
        ok = isfinite(d->a) && d->a > 0 && isfinite(d->b) && d->b >= 0 && d->max >= 1;
        break;
    case TGEN_DIST_TRACE: ok = d->path[0] != '\0'; break;
    default: ok = 0;
    }
    return ok ? 0 : gen_fail(g, "%s length distribution is invalid", which);
}

tgen_t *tgen_open(const tgen_opts_t *o)
{
    tgen_t *g = calloc(1, sizeof *g);
    const tgen_opts_t *x;

    if (!g) return NULL;
    g->o = *o;
    x = &g->o;
    g->o.prompt.path[TGEN_PATH_MAX - 1] = g->o.output.path[TGEN_PATH_MAX - 1] = '\0';
    if (!isfinite(x->rate) || x->rate <= 0) {
        gen_fail(g, "rate %g must be a positive number of requests per second", x->rate);
        goto out;
    }
    if (x->n <= 0 && !(x->duration_s > 0)) {
        gen_fail(g, "set a number of requests or a duration");
        goto out;
    }
    if (isnan(x->duration_s)) {
        gen_fail(g, "duration must be a number");
        goto out;
    }
    if (x->arrival.kind == TGEN_ARRIVAL_GAMMA && !(isfinite(x->arrival.cv) && x->arrival.cv > 0)) {
        gen_fail(g, "gamma arrivals need a positive coefficient of variation, not %g",
                 x->arrival.cv);
        goto out;
    }
    if (x->arrival.kind != TGEN_ARRIVAL_POISSON && x->arrival.kind != TGEN_ARRIVAL_GAMMA) {
        gen_fail(g, "unknown arrival process");
        goto out;
    }
    if (check_dist(g, &x->prompt, "prompt") < 0 || check_dist(g, &x->output, "output") < 0)
        goto out;
    rng_seed3(&g->r_arrival, x->seed, STREAM_ARRIVAL, 0);
    rng_seed3(&g->r_prompt, x->seed, STREAM_PROMPT, 0);
    rng_seed3(&g->r_output, x->seed, STREAM_OUTPUT, 0);
    rng_seed3(&g->r_group, x->seed, STREAM_GROUP, 0);
    if ((x->prefix_groups != 0 || x->prefix_tokens != 0) &&
        !(x->prefix_groups >= 1 && x->prefix_tokens >= 1)) {
        gen_fail(g, "a shared prefix needs at least 1 group and 1 token, not %d:%d",
                 x->prefix_groups, x->prefix_tokens);
        goto out;
    }
    g->joint = x->prompt.kind == TGEN_DIST_TRACE && x->output.kind == TGEN_DIST_TRACE &&
               strcmp(x->prompt.path, x->output.path) == 0;
    if (x->prompt.kind == TGEN_DIST_TRACE &&
        pool_load(g, &g->prompt_pool, x->prompt.path, "prompt") < 0)
        goto out;
    if (x->output.kind == TGEN_DIST_TRACE && !g->joint &&
        pool_load(g, &g->output_pool, x->output.path, "output") < 0)
        goto out;
out:
    return g;
}

static int64_t draw_index(rng_t *r, int64_t n)
{
    int64_t i = (int64_t)(rng_uniform(r) * (double)n);
    return i < n ? i : n - 1;
}

static int32_t draw_len(const tgen_dist_t *d, rng_t *r)
{
    switch (d->kind) {
    case TGEN_DIST_FIXED: return (int32_t)d->a;
    case TGEN_DIST_UNIFORM: {
        double span = d->b - d->a + 1, v = d->a + floor(rng_uniform(r) * span);
        return (int32_t)(v > d->b ? d->b : v);
    }
    case TGEN_DIST_LOGNORMAL: {
        double v = d->a * exp(d->b * rng_normal(r));
        /* !(v >= 1) also catches NaN; clamping before rounding keeps the cast in range. */
        if (!(v >= 1)) v = 1;
        if (v > d->max) v = d->max;
        return (int32_t)lround(v);
    }
    default: return 1;
    }
}

int tgen_next(tgen_t *g, tgen_req_t *out)
{
    const tgen_opts_t *o = &g->o;

    if (g->failed) return -1;
    if (g->done) return 0;
    if ((o->n > 0 && g->emitted >= o->n) || (o->duration_s > 0 && g->clock >= o->duration_s)) {
        g->done = 1;
        return 0;
    }
    out->id = g->emitted;
    out->arrival_s = round(g->clock * 1e6) / 1e6;
    if (o->prompt.kind == TGEN_DIST_TRACE) {
        int64_t i = draw_index(&g->r_prompt, g->prompt_pool.n);
        out->prompt_tokens = g->prompt_pool.prompt[i];
        if (g->joint) out->output_tokens = g->prompt_pool.output[i];
    } else {
        out->prompt_tokens = draw_len(&o->prompt, &g->r_prompt);
    }
    if (o->output.kind == TGEN_DIST_TRACE) {
        if (!g->joint)
            out->output_tokens =
                g->output_pool.output[draw_index(&g->r_output, g->output_pool.n)];
    } else {
        out->output_tokens = draw_len(&o->output, &g->r_output);
    }
    out->prefix_group = -1;
    out->prefix_tokens = 0;
    if (o->prefix_groups > 0) {
        out->prefix_group = (int32_t)draw_index(&g->r_group, o->prefix_groups);
        out->prefix_tokens = o->prefix_tokens;
        int64_t p = (int64_t)out->prompt_tokens + o->prefix_tokens;
        out->prompt_tokens = p > INT32_MAX ? INT32_MAX : (int32_t)p;
    }
    g->emitted++;
    g->stats.requests = g->emitted;
    g->stats.last_arrival_s = out->arrival_s;
    g->stats.prompt_tokens += out->prompt_tokens;
    g->stats.output_tokens += out->output_tokens;
    if (o->arrival.kind == TGEN_ARRIVAL_GAMMA) {
        double cv2 = o->arrival.cv * o->arrival.cv;
        g->clock += rng_gamma(&g->r_arrival, 1.0 / cv2, cv2 / o->rate);
    } else {
        g->clock += rng_exp(&g->r_arrival, o->rate);
    }
    return 1;
}

int tgen_write_csv(tgen_t *g, FILE *f)
{
    tgen_req_t r;
    int rc;

    if (g->failed) return -1;
    int shared = g->o.prefix_groups > 0;
    fputs(shared ? "arrival_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens\n"
                 : "arrival_s,prompt_tokens,output_tokens\n", f);
    while ((rc = tgen_next(g, &r)) == 1) {
        fprintf(f, "%.6f,%d,%d", r.arrival_s, (int)r.prompt_tokens, (int)r.output_tokens);
        if (shared) fprintf(f, ",%d,%d", (int)r.prefix_group, (int)r.prefix_tokens);
        fputc('\n', f);
    }
    if (rc < 0) return -1;
    if (fflush(f) != 0 || ferror(f)) return gen_fail(g, "write error: %s", strerror(errno));
    return 0;
}

void tgen_stats(const tgen_t *g, tgen_stats_t *out) { *out = g->stats; }

const char *tgen_errmsg(const tgen_t *g) { return g && g->failed ? g->errbuf : NULL; }

void tgen_close(tgen_t *g)
{
    if (!g) return;
    free(g->prompt_pool.prompt);
    free(g->prompt_pool.output);
    free(g->output_pool.prompt);
    free(g->output_pool.output);
    free(g);
}
