/* calibrate: `twinserve calibrate`'s work between the inputs and the fit (sim/fit.h): the
 * measured points of a profile (sim/profile.h) or of an engine run's recorded steps, the
 * model shape they belong to, the fitted cost file (sim/cost_file.h), and the report that
 * says what the coefficients mean physically, how well they predict held-out points, and
 * how the model extrapolates.
 *
 * Invariants: only measurements go in (a profile's medians, or an engine run's steps);
 * nothing is tuned toward an end-to-end result. An engine run must be finished ('done'),
 * of kind engine, and carry the schema-3 step features; otherwise it is refused with the
 * reason. Host points come from kind=host rows (profile) or every step but the first
 * (run); without any, the host terms are 0 and the report says so.
 *
 * Ownership: calib_input_t owns its arrays (calib_input_free). */
#ifndef TWIN_CALIBRATE_H
#define TWIN_CALIBRATE_H

#include <stddef.h>
#include <stdio.h>

#include "sim/cost_file.h"
#include "sim/fit.h"
#include "sim/presets.h"

typedef struct {
    char source[KV_TEXT_CAP];       /* "profile PATH" or "engine run NAME (id N) in DB" */
    char fitted_for[KV_TEXT_CAP];   /* "MODEL on BACKEND (TYPE weights), N threads" */
    preset_model_t shape;
    int has_shape;
    double mem_bw, gemm_flops;      /* the device's measured roofs (NAN: unknown) */
    fit_point_t *pass, *host;
    size_t n_pass, n_host;
    char **kinds;                   /* [n_kinds] labels; pass_kind[i] indexes them */
    int n_kinds;
    int *pass_kind;
    char host_note[256];            /* why there are no host points, when there are none */
} calib_input_t;

/* The points of n profiles of one model (kind=host rows to host, the rest to pass),
 * pooled: profiles taken before and after a session, say, so that the machine's drift
 * between them is in the fit (and in its error) rather than in whichever came last. The
 * first says what the input is; the others must profile the same shape. 0 or -1 with a
 * message. */
int calib_from_profiles(const char *const *paths, int n, calib_input_t *in, char *err,
                        size_t errlen);

/* An engine run's steps (run: a name or id; NULL the latest). The shape comes from the
 * run's model, opened shape-only, unless the caller sets one afterwards. 0 or -1. */
int calib_from_run(const char *db_path, const char *run, calib_input_t *in, char *err,
                   size_t errlen);

/* Fits the pass (and host, when there are points) into cf, a linear cost file ready to
 * write. The reports belong to the caller (fit_report_free; hr is zeroed when no host
 * points). 0 or -1. */
int calib_fit(const calib_input_t *in, const fit_opts_t *o, cost_file_t *cf, fit_report_t *pr,
              fit_report_t *hr, char *err, size_t errlen);

/* The report for humans, and as one JSON object. */
void calib_print(FILE *f, const calib_input_t *in, const cost_file_t *cf,
                 const fit_report_t *pr, const fit_report_t *hr, int folds);
void calib_json(FILE *f, const calib_input_t *in, const cost_file_t *cf,
                const fit_report_t *pr, const fit_report_t *hr);

void calib_input_free(calib_input_t *in);

#endif
