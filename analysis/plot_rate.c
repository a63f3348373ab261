/* plot_rate: latency against request rate (plot.h's latency_rate): p50 and p99 TTFT and
 * TPOT (and E2E with an e2e SLO) per sweep, one row per rate (a repeated sweep's seeds
 * averaged, their range drawn as bars), the SLO of each panel as a dotted line named in the
 * panel's title and each sweep's capacity as a vertical line named in the key: no text is
 * drawn inside the plot area, so no label can sit on a curve or an SLO line. The rate axis
 * is logarithmic when it spans more than PLOT_RATE_LOG_SPAN. */
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/plot_internal.h"
#include "analysis/report.h"
#include "traces/summary.h"

/* A run of a sweep. */
typedef struct {
    const plot_run_t *run;
    report_t rep;           /* report_load_summary's: the summary and the SLO figures */
    int passes;             /* done, and attainment >= target */
} rate_point_t;

static int rate_cmp(const void *a, const void *b) {
    const plot_run_t *x = ((const rate_point_t *)a)->run, *y = ((const rate_point_t *)b)->run;
    int c = strcmp(x->sweep, y->sweep);
    if (c) return c;
    if (x->rate != y->rate) return x->rate < y->rate ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

double plot_rate_capacity(const plot_rate_row_t *v, size_t m, int *open) {
    size_t hi = m;
    for (size_t i = 0; i < m && hi == m; i++)
        if (!v[i].passes) hi = i;
    *open = hi == m;
    for (size_t i = hi; i-- > 0;)
        if (v[i].passes) return v[i].rate;
    return NAN;
}

int plot_rate_logx(double lo, double hi) {
    return lo > 0 && hi > PLOT_RATE_LOG_SPAN * lo;
}

/* Metric k of a run's summary (PLOT_RATE_METRICS order), in seconds. */
static double metric(const summary_t *s, int k) {
    const stats_dist_t *d = k < 2 ? &s->ttft : k < 4 ? &s->tpot : &s->e2e;
    return k % 2 ? d->p99 : d->p50;
}

/* The runs v[a..e) (one sweep, one rate) as one row: means over the values that exist. */
static void fold(const rate_point_t *v, size_t a, size_t e, int has_slo, plot_rate_row_t *row) {
    *row = (plot_rate_row_t){ .rate = v[a].run->rate, .runs = (int)(e - a), .passes = 1,
                              .attainment = has_slo ? 0 : NAN };
    for (int k = 0; k < PLOT_RATE_METRICS; k++) {
        double sum = 0, lo = INFINITY, hi = -INFINITY;
        int n = 0;
        for (size_t i = a; i < e; i++) {
            double x = metric(&v[i].rep.base, k);
            if (isnan(x)) continue;
            sum += x, n++;
            lo = fmin(lo, x), hi = fmax(hi, x);
        }
        row->mean[k] = n ? sum / n : NAN;
        row->min[k] = n ? lo : NAN;
        row->max[k] = n ? hi : NAN;
    }
    for (size_t i = a; i < e; i++) {
        row->passes &= v[i].passes;
        if (has_slo) row->attainment += v[i].rep.attainment / (double)(e - a);
    }
}

/* The panels: metric, its p50 column in latency_rate.dat (its p99 three further) and SLO. */
typedef struct {
    const char *label;
    int col;
    double slo_s;
} rate_panel_t;

/* A sweep's first row, its name and its rows' count, for the script writers. */
typedef struct {
    const char *name;
    size_t first, n;
    double capacity;        /* NAN: none */
    int open;
    char cap_title[200];    /* its key entry: "NAME: capacity [>= ]R req/s" */
} rate_sweep_t;

/* latency_rate.dat: one block per sweep, one row per rate (columns in the header). */
static int write_dat(plot_t *p, const rate_point_t *v, const plot_rate_row_t *rows,
                     const size_t *row_first, const rate_sweep_t *sw, size_t nsw) {
    FILE *f = plot_open(p, "latency_rate.dat");
    if (!f) return -1;
    for (size_t b = 0; b < nsw; b++) {
        fprintf(f, "%s# sweep %s\n# rate_rps runs", b ? "\n\n" : "", sw[b].name);
        static const char *const m[PLOT_RATE_METRICS] = { "ttft_p50", "ttft_p99", "tpot_p50",
                                                          "tpot_p99", "e2e_p50", "e2e_p99" };
        for (int k = 0; k < PLOT_RATE_METRICS; k++)
            fprintf(f, " %s_ms %s_min_ms %s_max_ms", m[k], m[k], m[k]);
        fprintf(f, " attainment run\n");
        for (size_t r = sw[b].first; r < sw[b].first + sw[b].n; r++) {
            /* NAN (no finished request, no SLO) is written as "NaN", which gnuplot skips */
            fprintf(f, "%.9g %d", rows[r].rate, rows[r].runs);
            for (int k = 0; k < PLOT_RATE_METRICS; k++)
                fprintf(f, " %.9g %.9g %.9g", rows[r].mean[k] * 1e3, rows[r].min[k] * 1e3,
                        rows[r].max[k] * 1e3);
            fprintf(f, " %.6g %s\n", rows[r].attainment, v[row_first[r]].run->name);
        }
    }
    return plot_close(p, f, "latency_rate.dat");
}

/* The rate axis: from 0, or on a log scale labelled 1-2-5 within [lo, hi]. */
static void write_x_axis(FILE *f, double lo, double hi) {
    if (!plot_rate_logx(lo, hi)) {
        fprintf(f, "set xlabel \"request rate (req/s)\"\n"
                   "# from 0 on both axes, so that the knee looks as steep as it is\n"
                   "set xrange [0:*]\nset offsets 0, graph 0.04, graph 0.05, 0\n");
        return;
    }
    static const double steps[] = { 1, 2, 5 };
    double x0 = lo / 1.25, x1 = hi * 1.25;
    int first = 1;
    fprintf(f, "set xlabel \"request rate (req/s, log scale: the rates span %.0fx)\"\n"
               "set logscale x\nset xrange [%.9g:%.9g]\nset offsets 0, 0, graph 0.05, 0\n"
               "set xtics (", hi / lo, x0, x1);
    for (double d = pow(10, floor(log10(x0))); d <= x1; d *= 10)
        for (int i = 0; i < 3; i++)
            if (d * steps[i] >= x0 && d * steps[i] <= x1) {
                fprintf(f, "%s%g", first ? "" : ", ", d * steps[i]);
                first = 0;
            }
    fprintf(f, ")\n");
}

/* One panel: its title names the SLO the dotted line stands for. */
static void write_panel(FILE *f, const rate_panel_t *pn, size_t nsw, int bars) {
    if (pn->slo_s > 0)
        fprintf(f, "set title \"%s, SLO %g ms (red dotted line)\"\n", pn->label,
                pn->slo_s * 1e3);
    else
        fprintf(f, "set title \"%s\"\n", pn->label);
    fprintf(f, "set ylabel \"%s (ms)\"\nplot \\\n", pn->label);
    for (size_t b = 0; b < nsw; b++)
        for (int q = 0; q < 2; q++) {
            int col = pn->col + 3 * q;
            if (bars)
                fprintf(f, "%s    \"latency_rate.dat\" index %zu using 1:%d:%d:%d with "
                           "yerrorlines", b || q ? ", \\\n" : "", b, col, col + 1, col + 2);
            else
                fprintf(f, "%s    \"latency_rate.dat\" index %zu using 1:%d with linespoints",
                        b || q ? ", \\\n" : "", b, col);
            fprintf(f, " lw 2 %s lc %zu notitle", q ? "dt 2 pt 6" : "pt 7", b % 8 + 1);
        }
    /* A constant, so that autoscaling keeps the SLO in view. */
    if (pn->slo_s > 0)
        fprintf(f, ", \\\n    %.9g with lines dt 3 lw 2 lc rgb \"#d62728\" notitle",
                pn->slo_s * 1e3);
    fprintf(f, "\n");
}

/* The key's entries, for plot_gp_key_panel: each sweep's p50 and p99, then its capacity. */
static void write_key(FILE *f, const rate_sweep_t *sw, size_t nsw) {
    for (size_t b = 0; b < nsw; b++)
        for (int q = 0; q < 2; q++) {
            fprintf(f, ", \\\n    keyentry with linespoints lw 2 %s lc %zu title ",
                    q ? "dt 2 pt 6" : "pt 7", b % 8 + 1);
            plot_gp_str(f, sw[b].name);
            fprintf(f, " . \" %s\"", q ? "p99" : "p50");
        }
    for (size_t b = 0; b < nsw; b++) {
        if (isnan(sw[b].capacity)) continue;
        fprintf(f, ", \\\n    keyentry with lines dt 4 lw 1.5 lc %zu title ", b % 8 + 1);
        plot_gp_str(f, sw[b].cap_title);
    }
    fprintf(f, "\n");
}

/* latency_rate.gp. */
static int write_gp(plot_t *p, const rate_sweep_t *sw, size_t nsw, int bars, double lo,
                    double hi, double target) {
    const report_slo_t *slo = p->o->has_slo ? &p->o->slo : NULL;
    rate_panel_t panels[3] = { { "TTFT", 3, slo ? slo->ttft_s : 0 },
                               { "TPOT", 9, slo ? slo->tpot_s : 0 },
                               { "E2E", 15, slo ? slo->e2e_s : 0 } };
    int npanels = panels[2].slo_s > 0 ? 3 : 2; /* E2E only to show its SLO */
    int w = 550 * npanels;
    size_t entries = 2 * nsw, maxlen = 0;
    for (size_t b = 0; b < nsw; b++) {
        size_t len = isnan(sw[b].capacity) ? strlen(sw[b].name) + 4 : strlen(sw[b].cap_title);
        entries += !isnan(sw[b].capacity);
        if (len > maxlen) maxlen = len;
    }
    plot_key_t key = plot_key_fit(entries, maxlen, w, 0); /* across the figure */
    int h = 540 + key.px;
    FILE *f = plot_open(p, "latency_rate.gp");
    if (!f) return -1;
    plot_gp_header(f, "latency_rate", w, h);
    fprintf(f, "set multiplot layout 1,%d margins %.4f,0.98,%.4f,%.4f spacing %.4f,0 "
               "title \"Latency vs request rate (solid p50, dashed p99%s)\"\n",
            npanels, 70.0 / w, plot_key_bottom(&key, h), 1 - 70.0 / h, 80.0 / w,
            bars ? "; bars: the range over the seeds of a rate" : "");
    write_x_axis(f, lo, hi);
    fprintf(f, "set yrange [0:*]\nset datafile missing \"NaN\"\nunset key\n");
    /* Each sweep's capacity: a vertical line in its colour in every panel, named in the key. */
    for (size_t b = 0; b < nsw; b++)
        if (!isnan(sw[b].capacity))
            fprintf(f, "# sweep %s: capacity %s%.6g req/s (attainment >= %.0f%%)\n"
                       "set arrow %zu from first %.9g, graph 0 to first %.9g, graph 1 nohead "
                       "dt 4 lw 1.5 lc %zu\n", sw[b].name, sw[b].open ? ">= " : "",
                    sw[b].capacity, 100 * target, 10 + b, sw[b].capacity, sw[b].capacity,
                    b % 8 + 1);
    for (int i = 0; i < npanels; i++) write_panel(f, &panels[i], nsw, bars);
    plot_gp_key_panel(f, &key, h);
    write_key(f, sw, nsw);
    fprintf(f, "unset multiplot\n");
    return plot_close(p, f, "latency_rate.gp");
}

int plot_latency_rate(plot_t *p) {
    rate_point_t *v = calloc(p->n, sizeof *v);
    plot_rate_row_t *rows = calloc(p->n, sizeof *rows);
    size_t *row_first = calloc(p->n, sizeof *row_first);
    rate_sweep_t *sw = calloc(p->n, sizeof *sw);
    size_t m = 0, nrows = 0, nsw = 0;
    int rc = -1, bars = 0;
    const report_slo_t *slo = p->o->has_slo ? &p->o->slo : NULL;
    double target = p->o->target > 0 ? p->o->target : 0.9, lo = INFINITY, hi = 0;
    if (!v || !rows || !row_first || !sw) {
        plot_fail(p, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < p->n; i++)
        if (!isnan(p->runs[i].rate)) v[m++].run = &p->runs[i];
    if (m < 2) {
        if (m == 1)
            fprintf(p->notes, "plot: latency_rate needs at least two runs of a sweep "
                              "(twinserve sweep); not drawn\n");
        rc = 0;
        goto done;
    }
    qsort(v, m, sizeof *v, rate_cmp);
    for (size_t i = 0; i < m; i++) {
        char e[512];
        if (report_load_summary(p->db, v[i].run->id, slo, &v[i].rep, e, sizeof e) != 0) {
            plot_fail(p, "%s", e);
            goto done;
        }
        v[i].passes = slo && !strcmp(v[i].run->status, "done") && v[i].rep.attainment >= target;
    }
    /* rows: one per sweep and rate; sweeps: consecutive rows of one name */
    for (size_t a = 0, e; a < m; a = e) {
        for (e = a + 1; e < m && !strcmp(v[e].run->sweep, v[a].run->sweep) &&
                        v[e].run->rate == v[a].run->rate; e++) {}
        if (nsw == 0 || strcmp(sw[nsw - 1].name, v[a].run->sweep))
            sw[nsw++] = (rate_sweep_t){ .name = v[a].run->sweep, .first = nrows };
        sw[nsw - 1].n++;
        row_first[nrows] = a;
        fold(v, a, e, slo != NULL, &rows[nrows++]);
        bars |= e - a > 1;
        lo = fmin(lo, v[a].run->rate), hi = fmax(hi, v[a].run->rate);
    }
    if (!slo)
        fprintf(p->notes, "plot: latency_rate: no --slo given: no SLO line, no capacity\n");
    for (size_t b = 0; b < nsw; b++) {
        sw[b].capacity = slo ? plot_rate_capacity(rows + sw[b].first, sw[b].n, &sw[b].open)
                             : NAN;
        snprintf(sw[b].cap_title, sizeof sw[b].cap_title, "%.150s: capacity %s%.4g req/s",
                 sw[b].name, sw[b].open ? ">= " : "", sw[b].capacity);
        if (slo && isnan(sw[b].capacity))
            fprintf(p->notes, "plot: latency_rate: sweep %s: no rate met %.0f%% attainment: "
                              "no capacity\n", sw[b].name, 100 * target);
    }
    if (write_dat(p, v, rows, row_first, sw, nsw) ||
        write_gp(p, sw, nsw, bars, lo, hi, target))
        goto done;
    rc = plot_add_fig(p, "latency_rate");
done:
    free(v);
    free(rows);
    free(row_first);
    free(sw);
    return rc;
}
