/* plot_latency: the latency figures (plot.h): the CDFs of the requests' TTFT, TPOT and E2E
 * and the per-token figures from the tokens table (cdf_itl, tbt_SLUG); latency vs rate is
 * plot_rate.c's. */
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/plot_internal.h"
#include "analysis/report.h"
#include "traces/stats.h"
#include "traces/summary.h"

/* ------------------------------------------------------------------ CDFs */

/* Run i's values for a CDF, ascending, in seconds, into *v (malloc'd or NULL) and *n. */
typedef int (*cdf_load_fn)(plot_t *p, size_t i, void *ctx, double **v, size_t *n);

static int load_request_column(plot_t *p, size_t i, void *col, double **v, size_t *n) {
    return summary_load_column(p->db, p->runs[i].id, (const char *)col, v, n, p->err,
                               p->errlen);
}

/* cdf_<metric>.dat (one block per run with data, gnuplot `index`) and cdf_<metric>.gp. A
 * run without values is left out with the note "run NAME <none>". */
static int plot_cdf(plot_t *p, const char *metric, const char *label, const char *none,
                    cdf_load_fn load, void *ctx) {
    char dat[80], gp[80], fig[64];
    snprintf(fig, sizeof fig, "cdf_%s", metric);
    snprintf(dat, sizeof dat, "%s.dat", fig);
    snprintf(gp, sizeof gp, "%s.gp", fig);
    FILE *f = plot_open(p, dat);
    if (!f) return -1;
    int *block = calloc(p->n, sizeof *block), *drawn = calloc(p->n, sizeof *drawn);
    int nblocks = 0, logx = 1, rc = -1;
    unsigned char *seen = calloc(p->n, 1);
    double lo = INFINITY, hi = -INFINITY;   /* over every run, ms */
    size_t maxlen = 0;
    if (!block || !drawn || !seen) {
        fclose(f);
        plot_fail(p, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < p->n; i++) {
        double *v = NULL;
        size_t n = 0;
        block[i] = -1;
        if (load(p, i, ctx, &v, &n)) {
            fclose(f);
            goto done;
        }
        if (n == 0) {
            fprintf(p->notes, "plot: %s: run %s %s; left out of %s\n", fig, p->runs[i].name,
                    none, fig);
            free(v);
            continue;
        }
        if (v[0] <= 0) logx = 0;
        if (v[0] * 1e3 < lo) lo = v[0] * 1e3;
        if (v[n - 1] * 1e3 > hi) hi = v[n - 1] * 1e3;
        fprintf(f, "%s# run %s: %zu values%s\n# %s_ms cdf\n", nblocks ? "\n\n" : "",
                p->runs[i].name, n, n > PLOT_MAX_CDF ? " (evenly spaced order statistics)" : "",
                metric);
        size_t m = n > PLOT_MAX_CDF ? PLOT_MAX_CDF : n;
        for (size_t j = 0; j < m; j++) {
            size_t k = m == n ? j : (size_t)llround((double)j * (double)(n - 1) / (double)(m - 1));
            fprintf(f, "%.9g %.9g\n", v[k] * 1e3, (double)(k + 1) / (double)n);
        }
        block[i] = nblocks++;
        drawn[i] = 1;
        free(v);
    }
    if (plot_close(p, f, dat)) goto done;
    if (nblocks == 0) {
        fprintf(p->notes, "plot: no run has %s values: %s not drawn\n", metric, fig);
        rc = 0;
        goto done;
    }
    if (!(f = plot_open(p, gp))) goto done;
    size_t entries = plot_key_entries(p, drawn, &maxlen);
    plot_key_t key = plot_key_fit(entries, maxlen, 900, PLOT_KEY_INSIDE);
    int h = 560 + key.px;
    plot_gp_header(f, fig, 900, h);
    fprintf(f, "set title \"CDF of %s\"\nset xlabel \"%s (ms%s)\"\n"
               "set ylabel \"fraction of %s\"\nset yrange [0:1.02]\n%s",
            label, label, logx ? ", log scale" : "",
            strcmp(metric, "itl") ? "requests" : "gaps between tokens",
            logx ? "set logscale x\n" : "");
    /* one value in all (a run of one request): gnuplot would warn of an empty x range */
    if (lo == hi)
        fprintf(f, "set xrange [%.9g:%.9g]\n", lo > 0 ? lo / 2 : lo - 1,
                lo > 0 ? hi * 2 : hi + 1);
    plot_gp_key(f, &key, "right bottom", h);
    fprintf(f, "plot \\\n");
    int first = 1;
    for (size_t i = 0; i < p->n; i++) {
        if (block[i] < 0) continue;
        fprintf(f, "%s    \"%s\" index %d using 1:2 with steps lw 2", first ? "" : ", \\\n",
                dat, block[i]);
        plot_gp_run_curve(f, p, i, seen);
        first = 0;
    }
    fprintf(f, "\n");
    if (plot_close(p, f, gp) == 0) rc = plot_add_fig(p, fig);
done:
    free(block);
    free(drawn);
    free(seen);
    return rc;
}

int plot_cdfs(plot_t *p) {
    if (plot_cdf(p, "ttft", "TTFT", "has no ttft values", load_request_column, "ttft_s") ||
        plot_cdf(p, "tpot", "TPOT", "has no tpot values", load_request_column, "tpot_s") ||
        plot_cdf(p, "e2e", "E2E", "has no e2e values", load_request_column, "e2e_s"))
        return -1;
    return 0;
}

/* ------------------------------------------------------------------ tokens */

typedef report_gap_t gap_t;

/* The gaps of run i, by request then index, counted as report's ITL is. */
static int read_gaps(plot_t *p, size_t i, gap_t **out, size_t *n) {
    char err[256];
    if (report_read_gaps(p->db, p->runs[i].id, out, n, err, sizeof err) == 0) return 0;
    return plot_fail(p, "%s", err);
}

static int gap_time_cmp(const void *a, const void *b) {
    double x = ((const gap_t *)a)->t, y = ((const gap_t *)b)->t;
    return x < y ? -1 : x > y;
}

/* One request's gaps: its first emission, mean and largest gap. */
typedef struct {
    double first_t, mean, max;
    int64_t req;
    size_t gaps;
} req_gaps_t;

/* tokens_SLUG.dat, block 0: each gap (t_s gap_ms req_id), or with more than PLOT_MAX_POINTS
 * gaps, per equal time bin (bin_start_s mean_gap_ms max_gap_ms); block 1: per request
 * (first_token_s mean_gap_ms max_gap_ms req_id gaps). g comes ordered by request and is
 * left ordered by time. *bin_s gets the bin width, 0 when not binned; *t1 the last time. */
static int write_gaps(plot_t *p, size_t k, gap_t *g, size_t n, double *t1, double *bin_s) {
    const plot_run_t *r = &p->runs[k];
    char dat[PLOT_FIG_LEN];
    size_t nreq = 0;
    req_gaps_t *rq = malloc((n ? n : 1) * sizeof *rq);
    if (!rq) return plot_fail(p, "out of memory");
    for (size_t a = 0, b; a < n; a = b) {
        req_gaps_t *q = &rq[nreq++];
        *q = (req_gaps_t){ g[a].t - g[a].gap, 0, 0, g[a].req, 0 };
        for (b = a; b < n && g[b].req == g[a].req; b++) {
            q->mean += g[b].gap;
            if (g[b].gap > q->max) q->max = g[b].gap;
        }
        q->gaps = b - a;
        q->mean /= (double)q->gaps;
    }
    qsort(g, n, sizeof *g, gap_time_cmp);
    *t1 = n ? g[n - 1].t : 1;
    *bin_s = 0;
    snprintf(dat, sizeof dat, "tokens_%s.dat", r->slug);
    FILE *f = plot_open(p, dat);
    if (!f) {
        free(rq);
        return -1;
    }
    fprintf(f, "# run %s: %zu gaps between token emissions of %zu requests\n", r->name, n, nreq);
    int nb = n > PLOT_MAX_POINTS && g[n - 1].t > g[0].t ? PLOT_MAX_BINS : 0;
    if (!nb) {
        fprintf(f, "# t_s gap_ms req_id\n");
        for (size_t j = 0; j < n; j++)
            fprintf(f, "%.9g %.6g %lld\n", g[j].t, g[j].gap * 1e3, (long long)g[j].req);
    } else {
        double t0 = g[0].t, w = (g[n - 1].t - t0) / nb;
        *bin_s = w;
        fprintf(f, "# binned: %d equal time bins of %.3g s\n# bin_start_s mean_gap_ms "
                   "max_gap_ms\n", nb, w);
        for (size_t a = 0, b; a < n; a = b) {
            int bin = (int)((g[a].t - t0) / w);
            if (bin >= nb) bin = nb - 1;
            double sum = 0, max = 0;
            for (b = a; b < n && (g[b].t < t0 + (bin + 1) * w || bin == nb - 1); b++) {
                sum += g[b].gap;
                if (g[b].gap > max) max = g[b].gap;
            }
            if (b == a) b++; /* rounding put g[a] past its bin's end: it is the bin alone */
            fprintf(f, "%.9g %.6g %.6g\n", t0 + bin * w, sum / (double)(b - a) * 1e3, max * 1e3);
        }
    }
    fprintf(f, "\n\n# per request\n# first_token_s mean_gap_ms max_gap_ms req_id gaps\n");
    for (size_t j = 0; j < nreq; j++)
        fprintf(f, "%.9g %.6g %.6g %lld %zu\n", rq[j].first_t, rq[j].mean * 1e3,
                rq[j].max * 1e3, (long long)rq[j].req, rq[j].gaps);
    free(rq);
    return plot_close(p, f, dat);
}

/* tbt_SLUG.gp: above, every gap at the time it ended, coloured by request (gnuplot's 8
 * colours in turn), so a stall shared by every running request shows as a column; below,
 * each request's mean and largest gap at its first token. Laid out as the timeline, so the
 * two figures line up. */
static int plot_tbt(plot_t *p, size_t k, double t1, double bin_s) {
    const plot_run_t *r = &p->runs[k];
    char fig[PLOT_FIG_LEN], gp[PLOT_FIG_LEN + 8], dat[PLOT_FIG_LEN];
    snprintf(fig, sizeof fig, "tbt_%s", r->slug);
    snprintf(gp, sizeof gp, "%s.gp", fig);
    snprintf(dat, sizeof dat, "tokens_%s.dat", r->slug);
    FILE *f = plot_open(p, gp);
    if (!f) return -1;
    plot_gp_header(f, fig, 1000, 720);
    fprintf(f, "set multiplot layout 2,1 margins 0.1,0.8,0.08,0.92 spacing 0,0.04 title ");
    plot_gp_str(f, r->name);
    fprintf(f, " . \": time between tokens%s\"\n"
               "set xrange [0:%.9g]\nset format x \"\"\n"
               "set key at screen 0.81, graph 1 left top Left reverse box opaque\n",
            bin_s > 0 ? " (binned)" : "", t1);
    plot_gp_log_ms(f);
    char series[PLOT_FIG_LEN + 64];
    if (bin_s > 0) {
        fprintf(f, "set ylabel \"gap between tokens (ms, log scale)\\nper %.3g s bin\"\nplot ",
                bin_s);
        snprintf(series, sizeof series, "\"%s\" index 0 using 1:3", dat);
        plot_gp_points(f, series, 7, 0.5, "rgb \"#ff7f0e\"", "largest gap");
        fprintf(f, ", \\\n    \"%s\" index 0 using 1:2 with lines lw 2 lc rgb \"#1f77b4\" "
                   "title \"mean gap\"\n", dat);
    } else {
        fprintf(f, "set ylabel \"gap before each token (ms, log scale)\\n"
                   "colour: its request\"\nplot ");
        snprintf(series, sizeof series, "\"%s\" index 0 using 1:2:(int($3) %% 8 + 1)", dat);
        plot_gp_points(f, series, 7, 0.4, "variable", "each gap");
        fprintf(f, "\n");
    }
    fprintf(f, "set format x \"%% h\"\nset xlabel \"time since the run's start (s)\"\n"
               "set ylabel \"per request (ms, log scale)\\nat its first token\"\nplot ");
    snprintf(series, sizeof series, "\"%s\" index 1 using 1:3", dat);
    plot_gp_points(f, series, 6, 0.6, "rgb \"#ff7f0e\"", "largest gap");
    fprintf(f, ", \\\n    ");
    snprintf(series, sizeof series, "\"%s\" index 1 using 1:2", dat);
    plot_gp_points(f, series, 7, 0.5, "rgb \"#1f77b4\"", "mean gap");
    fprintf(f, "\nunset multiplot\n");
    if (plot_close(p, f, gp)) return -1;
    return plot_add_fig(p, fig);
}

/* The sorted gaps of each run (seconds), kept for cdf_itl; NULL for runs without. */
typedef struct {
    double **v;
    size_t *n;
} itl_sets_t;

static int load_itl(plot_t *p, size_t i, void *ctx, double **v, size_t *n) {
    itl_sets_t *s = ctx;
    (void)p;
    *v = s->v[i]; /* handed over: plot_cdf frees it */
    *n = s->n[i];
    s->v[i] = NULL;
    return 0;
}

int plot_tokens(plot_t *p) {
    itl_sets_t s = { calloc(p->n, sizeof *s.v), calloc(p->n, sizeof *s.n) };
    int rc = -1, any = 0;
    if (!s.v || !s.n) {
        plot_fail(p, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < p->n; i++) {
        if (!p->runs[i].has_tokens) continue;
        gap_t *g = NULL;
        size_t n;
        double t1 = 1, bin_s = 0;
        if (read_gaps(p, i, &g, &n)) goto done;
        if (n == 0) {
            fprintf(p->notes, "plot: run %s has per-token times but no request with two "
                              "emissions: no tbt figure\n", p->runs[i].name);
            free(g);
            continue;
        }
        int failed = write_gaps(p, i, g, n, &t1, &bin_s) || plot_tbt(p, i, t1, bin_s);
        if (!failed && !(s.v[i] = malloc(n * sizeof *s.v[i]))) failed = plot_fail(p, "out of memory");
        if (!failed) {
            for (size_t j = 0; j < n; j++) s.v[i][j] = g[j].gap;
            stats_sort(s.v[i], n);
            s.n[i] = n;
            any = 1;
        }
        free(g);
        if (failed) goto done;
    }
    if (!any) {
        fprintf(p->notes, "plot: no run saved per-token times (record with sim or engine "
                          "--save-tokens): no cdf_itl, no tbt figures\n");
        rc = 0;
        goto done;
    }
    rc = plot_cdf(p, "itl", "ITL", "saved no per-token times (--save-tokens)", load_itl, &s);
done:
    for (size_t i = 0; s.v && i < p->n; i++) free(s.v[i]);
    free(s.v);
    free(s.n);
    return rc;
}
