/* experiment: one configuration run N times with different seeds, recorded as N runs, so a
 * comparison can see run-to-run noise (compare.h's hierarchical bootstrap).
 *
 * Invariants:
 *  - An experiment NAME of N runs is the runs NAME-r0 .. NAME-r(N-1); run k's config carries
 *    "experiment":{"name":NAME,"index":k,"of":N,"seed":s}, s = the seed run k used. The seeds
 *    are `--repeat N` (the base seed .. base + N - 1; the base is --seed, 0 by default) or
 *    `--repeat S1,S2,...` (that list, in order; distinct).
 *  - A window experiment (--repeat windows:N[:LEN]) is N runs of the same seed over N
 *    consecutive windows of the trace; each member also says its "window" (start_s and
 *    duration_s, trace time). Its runs differ in their requests, not in chance.
 *  - A run without that member is an experiment of one: experiment_resolve finds an
 *    experiment by its name first, then a plain run by name or id (summary_find_run).
 *  - Experiment names go into the config JSON unescaped, so experiment_check_name refuses
 *    '"', '\' and control characters (runs.config is CHECKed to be valid JSON).
 *
 * Ownership: arrays returned through pointers belong to the caller (free). Errors go to the
 * caller's err[errlen]. */
#ifndef TWIN_EXPERIMENT_H
#define TWIN_EXPERIMENT_H

#include <stddef.h>
#include <stdint.h>

struct sqlite3;

#define EXPERIMENT_MAX_RUNS 1000

/* "N" (1..EXPERIMENT_MAX_RUNS): base .. base + N - 1; "S1,S2,..." (a comma anywhere makes a
 * list, so "7," is the one seed 7): those seeds. *seeds is malloc'ed. 0, or -1 with a
 * message naming the bad item. */
int experiment_parse_seeds(const char *spec, uint64_t base, uint64_t **seeds, int *n, char *err,
                           size_t errlen);

/* "windows:N[:LEN]" (a --repeat that replays N windows of the trace, run k the LEN seconds
 * of trace time from --start + k LEN, every run with the base seed): 1 with *n and *len
 * (NAN when LEN is not given: the caller splits the trace's span), 0 when spec is no window
 * spec (seeds), -1 with a message for a malformed one. */
int experiment_parse_windows(const char *spec, int *n, double *len, char *err, size_t errlen);

/* 0 when name is non-empty, at most 120 bytes and JSON-safe unescaped; -1 with a message. */
int experiment_check_name(const char *name, char *err, size_t errlen);

/* The experiment's name into out: requested (refused when the database already holds an
 * experiment of that name or a run named requested-rK for a k < n), or, when requested is
 * NULL, the first free one of stem, stem-2, stem-3... A missing database is empty. */
int experiment_pick_name(const char *db_path, const char *requested, const char *stem, int n,
                         char *out, size_t outlen, char *err, size_t errlen);

/* Run k's name (NAME-rK) and its config member ("experiment":{...}, no braces around). */
void experiment_run_name(char *buf, size_t len, const char *name, int index);
void experiment_member(char *buf, size_t len, const char *name, int index, int of,
                       uint64_t seed);
/* The same for a window experiment: "window":{"start_s":S,"duration_s":L} added. */
void experiment_member_window(char *buf, size_t len, const char *name, int index, int of,
                              uint64_t seed, double start_s, double duration_s);

/* Whether the runs ids[0..n) are copies of one another: every request of every run with the
 * first run's status, generated tokens, TTFT and E2E (nothing the seed changed). *same 1 or
 * 0 (always 0 for n < 2). 0, or -1 with SQLite's message. A trace replay's runs are: the
 * seed only moves a policy's or a draft's random draws. */
int experiment_identical(struct sqlite3 *db, const int64_t *ids, size_t n, int *same,
                         char *err, size_t errlen);

/* The run ids of experiment `name` in index order, or the one run `name` names (a run name
 * or id; "" = the latest run). *ids is malloc'ed; *is_experiment says which. 0, or -1 with
 * a message (an unknown name lists the runs, as summary_find_run). */
int experiment_resolve(struct sqlite3 *db, const char *name, int64_t **ids, size_t *n,
                       int *is_experiment, char *err, size_t errlen);

/* 0 when every run of ids[n] (an experiment `name` when is_experiment, else one run) is
 * done and an experiment has all the runs its config's "of" says; else -1 and a message
 * naming the first run that is not done, its status and its error, or the runs missing
 * (an interrupted --repeat or sweep): a partial run compares as better than it is. */
int experiment_check_done(struct sqlite3 *db, const char *name, const int64_t *ids, size_t n,
                          int is_experiment, char *err, size_t errlen);

#endif
