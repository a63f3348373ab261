/* validate_internal: what validate.c (engine runs) and validate_measured.c (measured runs,
 * traces/import.h) share. Nothing else includes this header.
 *
 * Ownership: as validate.h; db connections are the caller's. */
#ifndef TWIN_VALIDATE_INTERNAL_H
#define TWIN_VALIDATE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "analysis/validate.h"

struct sqlite3;

/* A run name not yet in the database: base, base-2, base-3, ... 0, or -1 (SQLite's message
 * on db). */
int validate_free_name(struct sqlite3 *db, const char *base, char *out, size_t len);

/* Fills r's metrics (and MAPE) from the measured runs against the simulated one.
 * requests_only leaves out what only our engine measures (queueing delay, preemptions,
 * steps). 0, or -1 with a message. */
int validate_compare_runs(struct sqlite3 *db, const int64_t *meas_ids, int n_meas,
                          int64_t sim_id, int requests_only, validate_result_t *r, char *err,
                          size_t errlen);

/* Run id's kind ("sim", "engine", "measured"; "" when there is no such run) and name.
 * 0, or -1 with a message. */
int validate_run_kind(struct sqlite3 *db, int64_t id, char *kind, size_t klen, char *name,
                      size_t nlen, char *err, size_t errlen);

/* The whole of validate_run for a measured run (validate_measured.c). */
int validate_measured(const validate_opts_t *o, int64_t id, validate_result_t *r, char *err,
                      size_t errlen);

#endif
