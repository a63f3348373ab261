/* plot: pictures of recorded runs through gnuplot. For a list of runs it writes, into one
 * folder, plain-text data files and one gnuplot script per figure, then runs gnuplot on
 * each script for each format (PNG via pngcairo, SVG):
 *   cdf_ttft, cdf_tpot, cdf_e2e
 *                        CDFs of TTFT, TPOT and E2E latency (ms, log x), one curve per run
 *   timeline_K           tokens per step over time for run K (1-based position in the list):
 *                        decode, prefill and padding stacked from the bottom, log y
 *   kv_queue             KV blocks in use (% of the total) and waiting requests over time,
 *                        one curve per run
 *   latency_rate         p50/p99 TTFT and TPOT vs request rate, one curve per sweep; only
 *                        when at least two runs carry a sweep rate ($.sweep.rate_rps)
 *
 * Invariants:
 *  - The data files are what the scripts read, with a '#' header naming the run and the
 *    columns: a user can edit and re-run `cd DIR && gnuplot -e "fmt='svg'" cdf_ttft.gp`.
 *  - Long runs are reduced, never truncated: a CDF keeps at most PLOT_MAX_CDF points (evenly
 *    spaced order statistics, first and last included); a step series with more than
 *    PLOT_MAX_BINS steps is binned into PLOT_MAX_BINS equal time bins (per bin: mean tokens
 *    per step, mean KV blocks in use, mean queue length).
 *  - Runs without rows (no finished request, no step) are left out of a figure with a note
 *    in the result; a figure with nothing to show is not written.
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

struct sqlite3;

#define PLOT_MAX_CDF 2000
#define PLOT_MAX_BINS 300

typedef struct {
    const char *out_dir;    /* created when missing (one level) */
    int png, svg;           /* formats to render */
    const char *gnuplot;    /* program name or path; NULL: "gnuplot" */
    FILE *notes;            /* NULL: stderr */
} plot_opts_t;

typedef struct {
    int figures;            /* scripts written */
    int images;             /* image files rendered */
} plot_result_t;

/* Parses "png", "svg" or "png,svg" into o->png/o->svg. 0, or -1 with a message. */
int plot_parse_formats(const char *spec, plot_opts_t *o, char *err, size_t errlen);

/* Expands one --runs item: a run name or id, else the name of a sweep (all its runs, by
 * rate). Appends to ids[*n] (capacity cap). 0, or -1 with summary_find_run's message. */
int plot_find_runs(struct sqlite3 *db, const char *item, int64_t *ids, size_t *n, size_t cap,
                   char *err, size_t errlen);

/* 0 when every figure was rendered; -1 with a message (nothing to plot, a file that cannot
 * be written, gnuplot missing or failing: the tail of DIR/gnuplot.log is in the message). */
int plot_runs(struct sqlite3 *db, const int64_t *ids, size_t n, const plot_opts_t *o,
              plot_result_t *res, char *err, size_t errlen);

#endif
