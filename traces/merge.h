/* merge: copies the runs of twinserve databases into one (`twinserve merge`, and `sweep`
 * gathering its children's databases into its target).
 *
 * Invariants:
 *  - The output is created with the recorder's schema when absent (rec_open), and must be a
 *    database this build writes. An input must pass rec_check_db too (same schema_version,
 *    every column), or it is refused whole before anything is copied.
 *  - Copied: runs, and every table of the output with a foreign key to runs (read from the
 *    database, not listed here, so a table schema.sql adds is merged without a change
 *    here), its referencing column rewritten to the run's new id. meta is not copied.
 *  - New run ids are the output's next free ones, given in the input's id order, so merging
 *    a sweep's point databases in point order gives the ids a sweep in one process gives.
 *  - Names stay unique, and a sweep or experiment keeps its identity: a run belongs to a
 *    group, its sweep (name "S@..." with config $.sweep.name = S), else its experiment (name
 *    "E-rK" with $.experiment.name = E), else itself. When any run of a group would clash
 *    with a name in the output (or one given earlier in the same input), the whole group is
 *    renamed G -> G-2 (-3, ...: the first that clashes with nothing and, for a sweep or an
 *    experiment, names no sweep or experiment already in the output), in the run names and
 *    in the config's $.sweep.name / $.experiment.name; each rename is one note. A group an
 *    earlier input of the same merge_t renamed tries that name first, so a sweep's point
 *    databases merged a second time rejoin as one renamed sweep. Without a
 *    clash runs keep their names and tags, so the points of one sweep merged from separate
 *    databases form that one sweep again (two different sweeps of the same name whose
 *    points do not clash are merged as one: nothing in the records tells them apart).
 *  - A run that is still 'running' in an input is merged as it is, with a note: it may be a
 *    crashed job worth seeing, and report and compare already flag a run that is not done.
 *  - One transaction per input: merge_add either copies every run of the input or leaves
 *    the output as it was before the call.
 *
 * Ownership: merge_open's object owns its connection; merge_close frees it (NULL is fine).
 * merge_run_name's string lives until the next merge_add or merge_close. Notes go to the
 * callback as they happen; its msg is valid during the call only. */
#ifndef TWIN_MERGE_H
#define TWIN_MERGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct merge merge_t;

typedef void (*merge_note_fn)(void *ud, const char *msg);

/* Opens (creating when absent) the output database. NULL only when out of memory; check
 * merge_errmsg. */
merge_t *merge_open(const char *out_path);

/* The last error (of merge_open or the last merge_add), NULL when it succeeded. */
const char *merge_errmsg(const merge_t *m);

/* Where renames and running-run warnings go (default: nowhere). */
void merge_set_notes(merge_t *m, merge_note_fn fn, void *ud);

/* Merges every run of the database at in_path. 0, or -1 with merge_errmsg (the output is
 * as it was before the call). */
int merge_add(merge_t *m, const char *in_path);

/* The runs the last successful merge_add copied, in the input's id order. */
size_t merge_n_runs(const merge_t *m);
int64_t merge_run_id(const merge_t *m, size_t i);       /* in the output */
int64_t merge_run_old_id(const merge_t *m, size_t i);   /* in the input */
const char *merge_run_name(const merge_t *m, size_t i); /* in the output */

void merge_close(merge_t *m);

#endif
