/* plot_internal: what plot.c (runs, styles, keys, gnuplot), plot_steps.c (steps over time)
 * and plot_latency.c (latency CDFs, per-token gaps, latency vs rate) share. Nothing else
 * includes this header.
 *
 * Invariants:
 *  - Every figure a writer finishes is registered with plot_add_fig, and plot_runs renders
 *    exactly the registered ones; a writer that has nothing to show registers nothing and
 *    says why on p->notes.
 *  - A key with more than PLOT_KEY_INSIDE entries goes below the plot, in as many columns
 *    as the figure's width holds, and the figure grows by its height (plot_key_fit), so 15
 *    runs never cover the curves.
 *
 * Ownership: plot_t and its runs belong to plot_runs for one call; writers borrow them. */
#ifndef TWIN_PLOT_INTERNAL_H
#define TWIN_PLOT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis/plot.h"

struct sqlite3;

#define PLOT_KEY_INSIDE 4
#define PLOT_FIG_LEN 128

typedef struct {
    int64_t id;
    char name[256];
    char slug[80];          /* the name as a file-name part ([A-Za-z0-9._-]), unique */
    char status[16];        /* runs.status */
    double rate;            /* $.sweep.rate_rps, NAN when not part of a sweep */
    char sweep[160];
    int has_steps, has_tokens;
    double max_waiting;     /* the longest queue after a step (plot_steps.c sets it) */
    /* Runs of one experiment ($.experiment.name, analysis/experiment.h) are one curve
     * family: one colour and one key entry, "NAME (N runs)". A run of no experiment, or
     * the only run of its experiment in the list, is its own group, titled by its name. */
    char group[256];        /* the experiment's name, or the run's */
    size_t style;           /* colour: its group's place among the list's groups */
    char label[288];        /* the group's key text */
} plot_run_t;

typedef struct {
    struct sqlite3 *db;
    const plot_opts_t *o;
    plot_run_t *runs;
    size_t n;
    char *err;
    size_t errlen;
    FILE *notes;
    char (*figs)[PLOT_FIG_LEN];  /* registered figures, to render */
    size_t nfig, figcap;
} plot_t;

/* A key's place: inside the plot (below == 0), or below it in cols columns and rows rows
 * taking px pixels at the bottom of the image. */
typedef struct {
    int below, cols, rows, px;
} plot_key_t;

__attribute__((format(printf, 2, 3))) int plot_fail(plot_t *p, const char *fmt, ...);
/* DIR/file for writing; NULL with a message. */
FILE *plot_open(plot_t *p, const char *file);
/* Closes f; -1 with a message when anything written to it was lost. */
int plot_close(plot_t *p, FILE *f, const char *file);
/* Records figure fig (its script is fig.gp) for rendering. 0, or -1 (out of memory). */
int plot_add_fig(plot_t *p, const char *fig);

/* s inside a gnuplot double-quoted string, quotes included. */
void plot_gp_str(FILE *f, const char *s);
/* Curve i of many: gnuplot's 8 default colours, then the same with dashes. */
void plot_gp_style(FILE *f, size_t i);
/* Run i's curve in a figure of one curve per run: its group's style, and ` title "LABEL"`
 * for the first run of its group drawn in this figure, else ` notitle`. seen[p->n] starts
 * zeroed for each figure. */
void plot_gp_run_curve(FILE *f, const plot_t *p, size_t i, unsigned char *seen);
/* The key entries of a figure drawing the runs with draw[i] set (distinct groups), and the
 * longest label among them in *maxlen. */
size_t plot_key_entries(const plot_t *p, const int *draw, size_t *maxlen);
/* `SERIES with points`, small (a run has thousands), with a key sample large enough to
 * see: series is `"FILE" index I using ...`, colour `rgb "#hex"` or `variable` (the key then
 * shows colour 1). */
void plot_gp_points(FILE *f, const char *series, int pt, double ps, const char *colour,
                    const char *title);
/* A log y axis of milliseconds, ranged to the data, labelled 1-2-5 (a range within one
 * decade would otherwise carry a single label); `set ytics autofreq` undoes the labels. */
void plot_gp_log_ms(FILE *f);
/* The terminal (fmt='png' or 'svg', w x h pixels) and the output file fig.FMT. */
void plot_gp_header(FILE *f, const char *fig, int w, int h);

/* Where a key of n entries, the longest maxlen characters, goes in a plot w pixels wide
 * (a multiplot's panel: gnuplot fits the columns to the panel): inside when n <=
 * inside_max, else below. */
plot_key_t plot_key_fit(size_t n, size_t maxlen, int w, size_t inside_max);
/* The key of a figure h pixels high (h includes k->px): inside at `where` (e.g. "right
 * bottom"), or below the plot area, whose bottom edge it sets (a single plot; a multiplot
 * sets its own margins and calls this for its last panel only). */
void plot_gp_key(FILE *f, const plot_key_t *k, const char *where, int h);
/* The height of a key below, as a fraction of h, plus room for the x tics and label. */
double plot_key_bottom(const plot_key_t *k, int h);
/* A multiplot's key across the whole figure (gnuplot fits a key's columns to the panel it
 * belongs to, so a key under two or three panels would be one column): after the panels,
 * an empty plot along the bottom of a figure h pixels high holding key k (plot_key_fit of
 * the figure's width, below). Writes "plot 1/0 notitle"; the caller goes on with
 * ", keyentry ... title ..." entries and the newline, then "unset multiplot". */
void plot_gp_key_panel(FILE *f, const plot_key_t *k, int h);

/* plot_steps.c: for each run with steps, steps_SLUG.dat and timeline_SLUG (step duration
 * above, tokens per step by kind below); then kv_queue over all of them. */
int plot_steps(plot_t *p);

/* plot_latency.c */
int plot_cdfs(plot_t *p);          /* cdf_ttft, cdf_tpot, cdf_e2e */
int plot_tokens(plot_t *p);        /* cdf_itl and tbt_SLUG, for runs with a tokens table */

/* plot_rate.c: latency_rate, for runs of sweeps. A sweep's runs at one rate (its --repeat
 * seeds) are one row: each figure the mean over them, with their range. */
enum { PLOT_RATE_METRICS = 6 };   /* TTFT, TPOT, E2E: p50 and p99 each */
typedef struct {
    double rate;
    int runs;                     /* runs averaged */
    int passes;                   /* every one of them is done with attainment >= target */
    double mean[PLOT_RATE_METRICS], min[PLOT_RATE_METRICS], max[PLOT_RATE_METRICS];
    double attainment;            /* mean over the runs; NAN without an SLO */
} plot_rate_row_t;
/* The capacity of one sweep's rows v[0..m) (ascending rate), as `sweep --capacity`
 * brackets it: the highest passing rate below the lowest failing one. NAN when no rate
 * passes; *open set when none fails (the capacity is at least the highest rate). Pure. */
double plot_rate_capacity(const plot_rate_row_t *v, size_t m, int *open);
/* Whether a rate axis from lo to hi (> 0) is drawn on a log scale: when it spans more than
 * PLOT_RATE_LOG_SPAN (10x), so that the low rates do not crowd into the first tic. Pure. */
#define PLOT_RATE_LOG_SPAN 10.0
int plot_rate_logx(double lo, double hi);
int plot_latency_rate(plot_t *p);

/* plot_replicas.c: replicas_SLUG, each cluster run's per-replica load over time */
int plot_replicas(plot_t *p);

#endif
