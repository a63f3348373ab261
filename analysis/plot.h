/* plot: pictures of recorded runs through gnuplot. For a list of runs it writes, into one
 * folder, plain-text data files and one gnuplot script per figure, then runs gnuplot on
 * each script for each format (PNG via pngcairo, SVG):
 *   cdf_ttft, cdf_tpot, cdf_e2e
 *                        CDFs of TTFT, TPOT and E2E latency (ms, log x), one curve per run
 *                        (the runs of one experiment in one colour with one key entry)
 *   timeline_SLUG        run SLUG (its name as a file name) over time: step duration above,
 *                        coloured by the step's kind (decode only, mixed, prefill only);
 *                        below, each step's decode tokens (a line) and prefill tokens
 *                        (points), each from the axis, never stacked, log y
 *   kv_queue             KV blocks in use (% of the total) and waiting requests over time,
 *                        one curve per run
 *   cdf_itl, tbt_SLUG    for runs recorded with per-token times (the tokens table, sim
 *                        --save-tokens or engine --save-tokens): the CDF of inter-token
 *                        latency, one curve per run; and per run, every gap between two
 *                        tokens of a request at the time it ended, and each request's mean
 *                        and largest gap. No tokens anywhere: a note, no figure.
 *   latency_rate         p50/p99 TTFT and TPOT (and E2E with an e2e SLO) vs request rate,
 *                        one curve pair per sweep, both axes from 0 (the rate axis log
 *                        when the rates span more than 10x); a sweep's runs at one rate
 *                        (--repeat) one point, their mean, with their range as bars; only
 *                        when at least two runs carry a sweep rate ($.sweep.rate_rps).
 *                        With SLOs: each a dotted line named in its panel's title, and each
 *                        sweep's capacity a vertical line named in the key: the highest
 *                        rate whose attainment >= target (every run of it) below the
 *                        lowest rate that misses it, the rule of `sweep --capacity` (which
 *                        records the points, not the capacity or the SLO: plot recomputes
 *                        it from the points). No text is drawn inside the plot area.
 *   replicas_SLUG        a cluster run's requests held per replica over time: a curve per
 *                        replica up to 4; more, a heatmap (replica by time bin) above the
 *                        least, mean and most held across the replicas per bin.
 *
 * Invariants:
 *  - The data files are what the scripts read, with a '#' header naming the run and the
 *    columns: a user can edit and re-run `cd DIR && gnuplot -e "fmt='svg'" cdf_ttft.gp`.
 *  - Titles name runs by their names; per-run files carry the name too (SLUG: characters
 *    outside [A-Za-z0-9._-] become '_', "-K" appended when two runs would share one).
 *  - Long runs are reduced, never truncated: a CDF keeps at most PLOT_MAX_CDF points (evenly
 *    spaced order statistics, first and last included); a step series with more than
 *    PLOT_MAX_BINS steps is binned into PLOT_MAX_BINS equal time bins (per bin: mean tokens
 *    per step, mean and largest step duration, mean KV blocks in use, mean queue length),
 *    while the timeline keeps one point per step (its duration, its tokens) up to
 *    PLOT_MAX_POINTS steps;
 *    more than PLOT_MAX_POINTS token gaps are binned the same way (mean and largest gap).
 *  - A key of more than four entries goes below the plot in columns, and the image grows to
 *    hold it: 15 runs never cover the curves. A multiplot's key spans the whole figure.
 *  - Curve colours are one fixed palette of 8 (no red, the colour of SLO lines; no
 *    yellow), repeated dashed past 8.
 *  - Runs without rows (no finished request, no step, no token) are left out of a figure
 *    with a note in the result; a figure with nothing to show is not written.
 *  - gnuplot is looked up in PATH before anything runs; when it is missing, the data and
 *    scripts are still written and the call fails with a message saying so.
 *
 * Ownership: plot_opts_t and the run ids are borrowed for the call. Messages go to the
 * caller's err buffer; notes (left-out runs) to the caller's FILE. */
#ifndef TWIN_PLOT_H
#define TWIN_PLOT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis/report.h"

struct sqlite3;

#define PLOT_MAX_CDF 2000
#define PLOT_MAX_BINS 300
#define PLOT_MAX_POINTS 20000

typedef struct {
    const char *out_dir;    /* created when missing (one level) */
    int png, svg;           /* formats to render */
    const char *gnuplot;    /* program name or path; NULL: "gnuplot" */
    FILE *notes;            /* NULL: stderr */
    int has_slo;            /* slo holds bounds for latency_rate (report.h's rules) */
    report_slo_t slo;
    double target;          /* attainment a capacity keeps; <= 0: 0.9, as sweep's */
} plot_opts_t;

typedef struct {
    int figures;            /* scripts written */
    int images;             /* image files rendered */
} plot_result_t;

/* Parses "png", "svg" or "png,svg" into o->png/o->svg. 0, or -1 with a message. */
int plot_parse_formats(const char *spec, plot_opts_t *o, char *err, size_t errlen);

/* Expands one --runs item, looked up as compare does: an experiment's name (all its runs,
 * by index: analysis/experiment.h), else a run's name or id, else the name of a sweep (all
 * its runs, by rate). Appends to ids[*n] (capacity cap) the runs not listed yet. 0, or -1
 * with "no run, experiment or sweep named 'X' in DB; runs: ..." (DB: the database's path),
 * "too many runs", or a database error. */
int plot_find_runs(struct sqlite3 *db, const char *item, int64_t *ids, size_t *n, size_t cap,
                   char *err, size_t errlen);

/* 0 when every figure was rendered; -1 with a message (nothing to plot, a file that cannot
 * be written, gnuplot missing or failing: the tail of DIR/gnuplot.log is in the message). */
int plot_runs(struct sqlite3 *db, const int64_t *ids, size_t n, const plot_opts_t *o,
              plot_result_t *res, char *err, size_t errlen);

#endif
