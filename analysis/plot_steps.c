/* plot_steps: the figures drawn from the steps table (plot.h): timeline_SLUG per run and
 * kv_queue over all runs. Both read steps_SLUG.dat, written once per run. */
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/plot_internal.h"

/* What write_steps tells the timeline's script. */
typedef struct {
    double bin_s;           /* bin width; 0 when every step is a row */
    double t0, t1;          /* first start, last end */
    int64_t kinds[3];       /* block 1's steps that are decode only, mixed, prefill only;
                             * all 0 when there is no block 1 */
    int pads;               /* some step holds padding */
} steps_info_t;

/* The kind of a step: 0 decode only, 1 prefill and decode, 2 prefill only. */
static int step_kind(double prefill, double decode) {
    return prefill > 0 ? (decode > 0 ? 1 : 2) : 0;
}

/* steps_SLUG.dat, block 0: one row per step, or per time bin when the run has more than
 * PLOT_MAX_BINS steps. Columns: start (or bin start), prefill, decode, pad tokens, KV % and
 * blocks, KV total, waiting, width (the step's duration, or the bin's), duration in ms and
 * the largest one in ms (equal unless binned), kind (step_kind; binned: the share of the
 * bin's steps that carried prefill). Block 1, when the run has at most PLOT_MAX_POINTS
 * steps: each step's start, duration in ms, kind, and prefill, decode and pad tokens: the
 * points of the timeline's panels (points stay readable where boxes would not). */
static int write_steps(plot_t *p, size_t k, steps_info_t *in) {
    plot_run_t *r = &p->runs[k];
    char dat[PLOT_FIG_LEN];
    sqlite3_stmt *st = NULL;
    int64_t n = 0;
    memset(in, 0, sizeof *in);
    if (sqlite3_prepare_v2(p->db, "SELECT count(*), min(start_s), max(start_s + dur_s), "
                           "max(pad_tokens) > 0 FROM steps WHERE run_id = ?", -1, &st,
                           NULL) != SQLITE_OK)
        return plot_fail(p, "reading steps: %s", sqlite3_errmsg(p->db));
    sqlite3_bind_int64(st, 1, r->id);
    if (sqlite3_step(st) == SQLITE_ROW) {
        n = sqlite3_column_int64(st, 0);
        in->t0 = sqlite3_column_double(st, 1);
        in->t1 = sqlite3_column_double(st, 2);
        in->pads = sqlite3_column_int(st, 3);
    }
    sqlite3_finalize(st);
    double t0 = in->t0, t1 = in->t1;
    int nb = n > PLOT_MAX_BINS && t1 > t0 ? PLOT_MAX_BINS : 0;
    double w = nb ? (t1 - t0) / nb : 0;
    /* per bin: steps, sums of prefill, decode, pad, kv%, kv_used, waiting, dur; kv_total,
     * the largest dur, steps with prefill */
    double (*acc)[11] = nb ? calloc((size_t)nb, sizeof *acc) : NULL;
    /* block 1: start, duration, kind, prefill, decode, pad */
    double (*pts)[6] = n <= PLOT_MAX_POINTS ? calloc((size_t)n + 1, sizeof *pts) : NULL;
    if ((nb && !acc) || (n <= PLOT_MAX_POINTS && !pts)) {
        free(acc);
        free(pts);
        return plot_fail(p, "out of memory");
    }
    snprintf(dat, sizeof dat, "steps_%s.dat", r->slug);
    FILE *f = plot_open(p, dat);
    if (!f) {
        free(acc);
        free(pts);
        return -1;
    }
    fprintf(f, "# run %s: %lld steps%s\n", r->name, (long long)n,
            nb ? "; binned: means over equal time bins (dur_max_ms: the bin's largest)" : "");
    fprintf(f, "# %s prefill decode pad kv_used_pct kv_used kv_total waiting width_s dur_ms "
               "dur_max_ms %s\n", nb ? "bin_start_s" : "start_s",
            nb ? "prefill_share" : "kind(0_decode_1_mixed_2_prefill)");
    if (sqlite3_prepare_v2(p->db, "SELECT start_s, dur_s, prefill_tokens, decode_tokens, "
                           "pad_tokens, kv_used, kv_total, num_waiting FROM steps WHERE "
                           "run_id = ? ORDER BY step", -1, &st, NULL) != SQLITE_OK) {
        fclose(f);
        free(acc);
        free(pts);
        return plot_fail(p, "reading steps: %s", sqlite3_errmsg(p->db));
    }
    sqlite3_bind_int64(st, 1, r->id);
    int64_t npts = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        double t = sqlite3_column_double(st, 0), d = sqlite3_column_double(st, 1);
        double pf = sqlite3_column_double(st, 2), dc = sqlite3_column_double(st, 3);
        double pad = sqlite3_column_double(st, 4), used = sqlite3_column_double(st, 5);
        double total = sqlite3_column_double(st, 6), wait = sqlite3_column_double(st, 7);
        double pct = total > 0 ? 100 * used / total : 0;
        int kind = step_kind(pf, dc);
        if (wait > r->max_waiting) r->max_waiting = wait;
        if (pts && npts < n) {
            pts[npts][0] = t, pts[npts][1] = d, pts[npts][2] = kind;
            pts[npts][3] = pf, pts[npts][4] = dc, pts[npts][5] = pad;
            npts++;
            in->kinds[kind]++;
        }
        if (!nb) {
            fprintf(f, "%.9g %g %g %g %.4f %g %g %g %.9g %.6g %.6g %d\n", t, pf, dc, pad, pct,
                    used, total, wait, d, d * 1e3, d * 1e3, kind);
            continue;
        }
        int b = (int)((t - t0) / w);
        if (b >= nb) b = nb - 1;
        if (b < 0) b = 0;
        double *a = acc[b];
        a[0] += 1, a[1] += pf, a[2] += dc, a[3] += pad, a[4] += pct, a[5] += used;
        a[6] += wait, a[7] += d, a[8] = total, a[10] += pf > 0;
        if (d > a[9]) a[9] = d;
    }
    sqlite3_finalize(st);
    for (int b = 0; b < nb; b++) {
        double *a = acc[b];
        if (a[0] == 0) continue; /* an idle bin: no step started in it */
        fprintf(f, "%.9g %g %g %g %.4f %g %g %g %.9g %.6g %.6g %.4f\n", t0 + b * w, a[1] / a[0],
                a[2] / a[0], a[3] / a[0], a[4] / a[0], a[5] / a[0], a[8], a[6] / a[0], w,
                a[7] / a[0] * 1e3, a[9] * 1e3, a[10] / a[0]);
    }
    if (pts) {
        fprintf(f, "\n\n# each step\n# start_s dur_ms kind(0_decode_1_mixed_2_prefill) "
                   "prefill decode pad\n");
        for (int64_t j = 0; j < npts; j++)
            fprintf(f, "%.9g %.6g %d %g %g %g\n", pts[j][0], pts[j][1] * 1e3, (int)pts[j][2],
                    pts[j][3], pts[j][4], pts[j][5]);
    }
    free(acc);
    free(pts);
    in->bin_s = w;
    return plot_close(p, f, dat);
}

/* timeline_SLUG.gp: two panels on one time axis. Above, each step's duration as a point
 * coloured by its kind, so a long step lines up with the prompt tokens that made it long;
 * below, the tokens of each step by kind, each from the axis (never stacked): the decode
 * tokens a line through the steps, the prompt tokens a point per step that had any (per
 * time bin when the run is too long for points: each kind's mean a line). */
static int plot_timeline(plot_t *p, size_t k, const steps_info_t *in) {
    const plot_run_t *r = &p->runs[k];
    char fig[PLOT_FIG_LEN], gp[PLOT_FIG_LEN + 8], dat[PLOT_FIG_LEN];
    snprintf(fig, sizeof fig, "timeline_%s", r->slug);
    snprintf(gp, sizeof gp, "%s.gp", fig);
    snprintf(dat, sizeof dat, "steps_%s.dat", r->slug);
    FILE *f = plot_open(p, gp);
    if (!f) return -1;
    plot_gp_header(f, fig, 1000, 720);
    double x0 = in->t0 < 0 ? in->t0 : 0, x1 = in->t1 > x0 ? in->t1 : x0 + 1;
    fprintf(f, "set multiplot layout 2,1 margins 0.1,0.8,0.08,0.92 spacing 0,0.04 title ");
    plot_gp_str(f, r->name);
    fprintf(f, " . \": steps over time\"\n");
    /* One time axis for both panels: the same range, labels only under the lower one. */
    fprintf(f, "set xrange [%.9g:%.9g]\nset format x \"\"\n"
               "set key at screen 0.81, graph 1 left top Left reverse box opaque\n", x0, x1);
    plot_gp_log_ms(f);
    if (in->kinds[0] + in->kinds[1] + in->kinds[2] == 0) {
        /* too many steps for points: each bin's mean and longest */
        char series[PLOT_FIG_LEN + 64];
        fprintf(f, "set ylabel \"step duration (ms, log scale)\\nper %.3g s bin\"\nplot ",
                in->bin_s);
        snprintf(series, sizeof series, "\"%s\" index 0 using 1:11", dat);
        plot_gp_points(f, series, 7, 0.5, "rgb \"#ff7f0e\"", "longest step");
        fprintf(f, ", \\\n    \"%s\" index 0 using 1:10 with lines lw 2 lc rgb \"#1f77b4\" "
                   "title \"mean step\"\n", dat);
    } else {
        static const char *const kind_title[3] = { "decode only", "prefill + decode",
                                                   "prefill only" };
        static const char *const kind_colour[3] = { "#1f77b4", "#9467bd", "#ff7f0e" };
        fprintf(f, "set ylabel \"step duration (ms, log scale)\"\nplot \\\n");
        int first = 1;
        for (int kind = 0; kind < 3; kind++) {
            if (in->kinds[kind] == 0) continue; /* gnuplot refuses a series with no point */
            char series[PLOT_FIG_LEN + 64], colour[32];
            snprintf(series, sizeof series, "\"%s\" index 1 using 1:($3 == %d ? $2 : 1/0)",
                     dat, kind);
            snprintf(colour, sizeof colour, "rgb \"%s\"", kind_colour[kind]);
            fprintf(f, "%s", first ? "    " : ", \\\n    ");
            plot_gp_points(f, series, 7, 0.4, colour, kind_title[kind]);
            first = 0;
        }
        fprintf(f, "\n");
    }
    fprintf(f, "set format x \"%% h\"\nset xlabel \"time since the run's start (s)\"\n");
    /* Log y, since a prompt step holds thousands of tokens and a decode step a handful;
     * and so each kind is drawn from the axis on its own, never stacked (a stack on a log
     * axis shows the upper series shorter than it is). */
    fprintf(f, "set autoscale yfix\nset offsets 0, 0, graph 0.06, graph 0.04\n"
               "set ytics (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, "
               "50000, 100000)\n");
    if (in->kinds[0] + in->kinds[1] + in->kinds[2] > 0) {
        /* every step: its decode tokens (the running batch) as a line through the steps,
         * its prompt tokens as a point where it had any */
        char series[PLOT_FIG_LEN + 64];
        fprintf(f, "set ylabel \"tokens in the step (log scale)\"\nplot \\\n"
                   "    \"%s\" index 1 using 1:($5 > 0 ? $5 : 1/0) with steps lw 1.5 "
                   "lc rgb \"#1f77b4\" title \"decode tokens\", \\\n    ", dat);
        snprintf(series, sizeof series, "\"%s\" index 1 using 1:($4 > 0 ? $4 : 1/0)", dat);
        plot_gp_points(f, series, 7, 0.5, "rgb \"#ff7f0e\"", "prefill tokens");
        if (in->pads) {
            fprintf(f, ", \\\n    ");
            snprintf(series, sizeof series, "\"%s\" index 1 using 1:($6 > 0 ? $6 : 1/0)",
                     dat);
            plot_gp_points(f, series, 5, 0.4, "rgb \"#999999\"", "padding");
        }
        fprintf(f, "\nunset multiplot\n");
    } else {
        /* binned: each kind's mean tokens per step in the bin, a line apiece */
        fprintf(f, "set ylabel \"tokens per step (log scale)\\nmean per %.3g s bin\"\nplot \\\n"
                   "    \"%s\" index 0 using 1:($3 > 0 ? $3 : 1/0) with steps lw 1.5 "
                   "lc rgb \"#1f77b4\" title \"decode tokens\", \\\n"
                   "    \"%s\" index 0 using 1:($2 > 0 ? $2 : 1/0) with steps lw 1.5 "
                   "lc rgb \"#ff7f0e\" title \"prefill tokens\"", in->bin_s, dat, dat);
        if (in->pads)
            fprintf(f, ", \\\n    \"%s\" index 0 using 1:($4 > 0 ? $4 : 1/0) with steps "
                       "lw 1 lc rgb \"#999999\" title \"padding\"", dat);
        fprintf(f, "\nunset multiplot\n");
    }
    if (plot_close(p, f, gp)) return -1;
    return plot_add_fig(p, fig);
}

static int plot_kv_queue(plot_t *p) {
    size_t maxlen = 0;
    int queued = 0, rc = -1;
    int *drawn = calloc(p->n, sizeof *drawn);
    unsigned char *seen = calloc(p->n, 1);
    FILE *f = NULL;
    if (!drawn || !seen) {
        plot_fail(p, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < p->n; i++) {
        drawn[i] = p->runs[i].has_steps;
        queued |= drawn[i] && p->runs[i].max_waiting > 0;
    }
    size_t entries = plot_key_entries(p, drawn, &maxlen);
    plot_key_t key = plot_key_fit(entries, maxlen, 1000, PLOT_KEY_INSIDE);
    int h = 750 + key.px;
    if (!(f = plot_open(p, "kv_queue.gp"))) goto done;
    plot_gp_header(f, "kv_queue", 1000, h);
    fprintf(f, "set multiplot layout 2,1 margins 0.08,0.97,%.4f,%.4f spacing 0,0.1 "
               "title \"KV cache and queue over time\"\n"
               "set xlabel \"time since the run's start (s)\"\n"
               "set ylabel \"KV blocks in use (%% of total)\"\nset yrange [0:105]\n",
            key.below ? plot_key_bottom(&key, h) : 60.0 / h, 1 - 45.0 / h);
    /* Both panels show the same runs in the same styles: one key, with the lower panel. */
    fprintf(f, "unset key\nplot \\\n");
    for (int pass = 0; pass < 2; pass++) {
        int first = 1;
        memset(seen, 0, p->n);
        if (pass == 1) {
            /* runs that never queued have only zeros: an empty range to gnuplot, which
             * warns (a [0:1<*] constraint does not stop it inside a multiplot) */
            fprintf(f, "set ylabel \"requests waiting in the queue\"\n%s",
                    queued ? "set yrange [0:*]\nset offsets 0, 0, graph 0.05, 0\n"
                           : "set yrange [0:1]\n");
            plot_gp_key(f, &key, "right top", h);
            fprintf(f, "plot \\\n");
        }
        for (size_t i = 0; i < p->n; i++) {
            if (!p->runs[i].has_steps) continue;
            fprintf(f, "%s    \"steps_%s.dat\" index 0 using 1:%d with steps lw 2",
                    first ? "" : ", \\\n", p->runs[i].slug, pass ? 8 : 5);
            plot_gp_run_curve(f, p, i, seen);
            first = 0;
        }
        fprintf(f, "\n");
    }
    fprintf(f, "unset multiplot\n");
    rc = plot_close(p, f, "kv_queue.gp");
    f = NULL;
    if (rc == 0) rc = plot_add_fig(p, "kv_queue");
done:
    if (f) fclose(f);
    free(drawn);
    free(seen);
    return rc;
}

int plot_steps(plot_t *p) {
    int any = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (!p->runs[i].has_steps) {
            fprintf(p->notes, "plot: run %s has no steps: no timeline, not in kv_queue\n",
                    p->runs[i].name);
            continue;
        }
        steps_info_t in;
        if (write_steps(p, i, &in) || plot_timeline(p, i, &in)) return -1;
        any = 1;
    }
    return any ? plot_kv_queue(p) : 0;
}
