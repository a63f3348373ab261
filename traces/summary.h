/* summary: one run's headline numbers, read back from a twinserve database.
 *
 * Invariants:
 *  - Everything is computed from the requests table as written by the recorder (ttft_s,
 *    tpot_s, e2e_s, queue_s: the metric definitions live in traces/recorder.c only). NULL
 *    values are excluded from a distribution, so n may differ between metrics.
 *  - Counts cover all requests of the run; token counts, makespan and throughput cover the
 *    finished ones: makespan = last finish of a finished request - first arrival of any;
 *    for a measured run whose arrivals are unknown (every arrival_s 0; its config says
 *    "arrivals":"unknown"), the benchmark's duration from its config instead.
 *  - A value that cannot be computed (no finished request, zero makespan) is NAN, printed "-".
 *  - Readers never write: summary_open opens read-only and never creates a file, nor -wal or
 *    -shm files beside a database a recorder has closed.
 *
 * Ownership: summary_t is a plain value (fixed buffers, long strings truncated); nothing to
 * free. summary_open's connection belongs to the caller (sqlite3_close). summary_list's
 * and summary_load_column's arrays belong to the caller (free). Errors go to the caller's buffer err[errlen]. */
#ifndef TWIN_SUMMARY_H
#define TWIN_SUMMARY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "traces/stats.h"

struct sqlite3;
struct sqlite3_stmt;

/* The reasons rejections are counted by: sched_add's and the shipped policies' messages. */
enum {
    SUMMARY_REJ_CONTEXT,   /* prompt + output past the context length */
    SUMMARY_REJ_KV,        /* more KV blocks than one request may hold */
    SUMMARY_REJ_STEP,      /* a whole prompt past a non-chunked policy's step budget */
    SUMMARY_REJ_EMPTY,     /* an empty prompt or no output */
    SUMMARY_REJ_ROUTER,    /* refused by a cluster's router, before any replica saw it */
    SUMMARY_REJ_OTHER,     /* anything else (a policy's own reason) */
    SUMMARY_REJ_CLASSES
};

typedef struct {
    int64_t run_id;
    char name[256];
    char kind[16];          /* "sim" | "engine" */
    char policy[256];       /* policy path as recorded */
    char status[16];        /* "running" | "done" | "failed" */
    char error[256];        /* empty unless failed */
    char trace[256], model[128], hardware[128];
    char started_at[32];    /* UTC ISO-8601 */
    double wall_s;          /* NAN while running */

    int64_t requests, finished, rejected, aborted;
    int64_t preempted_requests;  /* requests preempted at least once */
    int64_t preemptions;         /* total preemptions */
    int64_t steps;               /* rows in steps */
    int64_t prompt_tokens, output_tokens;  /* summed over finished requests */
    int64_t cached_tokens;                 /* of prompt_tokens, served by the prefix cache */
    int prefix_caching;     /* 1 on, 0 off (the config's, or an engine run), -1 unsaid */

    double makespan_s;
    int makespan_is_duration; /* a measured run without arrival times (analysis/import.h):
                               * makespan_s is the benchmark's own duration */
    double req_per_s;       /* finished requests / makespan */
    double out_tok_per_s;   /* output tokens / makespan */
    double tok_per_s;       /* (prompt + output tokens) / makespan */

    stats_dist_t ttft, tpot, e2e, queue;  /* seconds */

    /* The side the latencies describe: its config's "metrics" when it says (a simulated
     * run: "client" with client-side terms, sim/sim.h, else "server"); else "server" for
     * engine runs and older simulated runs, "client" for an import of vLLM's serving
     * benchmark (timed at its HTTP client), "" for other measured runs. The terms are NAN
     * but for a simulated client-side run. */
    char metrics[8];
    double client_request_s, client_prompt_token_s, client_token_s;
    /* What the policy saw of output lengths (the config's "oracle_lengths"): 1 the true
     * lengths (--oracle-lengths), 0 each request's limit, -1 the run does not say (older
     * and measured runs). max_output_tokens: the run's --max-output-tokens, 0 when none. */
    int oracle_lengths;
    int32_t max_output_tokens;
    /* Rejections by reason (SUMMARY_REJ_*, counts indexed by it), so a run that lost
     * requests says why and what option would keep them; clip_to_context: the config's
     * "clip_to_context" (1 over-long requests were clipped, 0 rejected, -1 unsaid). */
    int64_t rejected_by[SUMMARY_REJ_CLASSES];
    /* The commonest kinds of the SUMMARY_REJ_OTHER rejections, most frequent first: a
     * policy's reason (s:reject(r, reason)) up to its first ':', so that "shed: figures"
     * group as "rejected by policy: shed"; other reasons whole. other_example: one whole
     * reason of each kind; other_kinds: how many kinds there are. */
    char other_reason[3][128], other_example[3][256];
    int64_t other_count[3];
    int other_kinds;
    int clip_to_context;
    /* Aborts by reason (SUMMARY_ABT_*): requests a run left unfinished when it ended early;
     * max_model_len: the config's context length (0 when unsaid), for the hints. */
    int64_t aborted_by[4];
    int32_t max_model_len;
    /* A simulated run's serving profile (its config's "serving": name and what it models;
     * "" when the run does not say) and its step-time factor (a band's side; 1 otherwise). */
    char serving[64], serving_engine[128];
    double cost_scale;
    /* A simulated cluster's size and router (its config's "replicas" and "router"; set for
     * --replicas N, even 1, and --cluster); 0 and "" for a single-replica run. */
    int32_t replicas;
    char router[256];
} summary_t;

/* Why requests were aborted: the run's end, as its error says (policies/replay.h). */
enum {
    SUMMARY_ABT_INTERRUPTED, /* a signal (Ctrl-C, kill): "interrupted by SIGINT at t=..." */
    SUMMARY_ABT_STOPPED,     /* a caller stopped the run (explain --steps) */
    SUMMARY_ABT_FAILED,      /* the run failed (its error) */
    SUMMARY_ABT_CLIENT,      /* its client went away (twinserve serve): "client disconnected" */
    SUMMARY_ABT_CLASSES
};

/* A share of the trace rejected or aborted above this gets a warning line with its hint:
 * a comparison of runs that each dropped this much compares different workloads. */
#define SUMMARY_LARGE_SHARE 0.05


/* Opens any existing SQLite file read-only: the one open of every reader, so that readers
 * work on a read-only file or in a read-only directory and create nothing (a recorder leaves
 * its databases in rollback-journal mode, traces/recorder.h). A file still in WAL mode in a
 * directory this user cannot write is read without its -wal (SQLite's immutable=1), with a
 * note on stderr when that file holds rows. Never creates path. Returns 0 with *db set (a
 * file that is not a database fails at its first query), or -1 with *db NULL and a message
 * starting with the path: "PATH: no such database". */
int summary_open_file(const char *path, struct sqlite3 **db, char *err, size_t errlen);

/* summary_open_file, then checks it is a twinserve database with a runs table: "PATH: not a
 * twinserve database (no runs table)". Returns 0 with *db set, or -1 with *db NULL. */
int summary_open(const char *path, struct sqlite3 **db, char *err, size_t errlen);

/* Copies the database at from (summary_open_file) into a new file
 * $TMPDIR/twinserve-WHAT-XXXXXX.db (TMPDIR unset: /tmp), its path in to[tolen]: a private
 * copy a command may write when from cannot be, or must not be. The caller removes it
 * (rec_remove). Returns 0, or -1 with a message, to "" and nothing left behind. */
int summary_copy_temp(const char *from, const char *what, char *to, size_t tolen, char *err,
                      size_t errlen);

/* A run name not yet in the database: base, base-2, base-3, ... 0, or -1 (SQLite's message
 * on db). */
int summary_free_name(struct sqlite3 *db, const char *base, char *out, size_t len);

/* The database's path for messages (buf[len], returned): as SQLite resolved it, relative
 * to the working directory when it lies below it; "the database" for one in memory. */
const char *summary_db_name(struct sqlite3 *db, char *buf, size_t len);

/* name_or_id: a run name, else a numeric id; NULL or "" means the latest run (highest id).
 * Unknown: "no run named 'X' in DB; runs: a, b, c", DB being summary_db_name's. */
int summary_find_run(struct sqlite3 *db, const char *name_or_id, int64_t *run_id, char *err,
                     size_t errlen);

/* All run ids, ascending, in a malloc'd array (*ids NULL when *n == 0). */
int summary_list(struct sqlite3 *db, int64_t **ids, size_t *n, char *err, size_t errlen);

int summary_load(struct sqlite3 *db, int64_t run_id, summary_t *out, char *err, size_t errlen);

/* The non-NULL values of requests.col for one run, ascending, in a malloc'd array that
 * belongs to the caller (free; *v NULL when *n == 0). col is a column name pasted into the
 * SQL: pass only fixed names (ttft_s, tpot_s, ...), never user input. On error returns -1
 * with *v NULL, *n 0, nothing left allocated, and "cannot read requests.COL: ..." in err. */
int summary_load_column(struct sqlite3 *db, int64_t run_id, const char *col, double **v,
                        size_t *n, char *err, size_t errlen);

/* Column col of st's current row as a double; NAN when it is NULL. */
double summary_column_or_nan(struct sqlite3_stmt *st, int col);

/* One screen for humans: times in ms below 10 s, else in s. */
void summary_print(FILE *f, const summary_t *s);

/* summary_print's lines on the requests a run rejected or aborted: one per reason, with its
 * share and the option that would keep them, and a WARNING line for a large share (sweep
 * --capacity prints them when rejections alone make its target impossible). */
void summary_print_dropped(FILE *f, const summary_t *s);

/* Seconds for humans, as summary_print writes them: "12.34 ms" below 10 s, "12.34 s" above,
 * "-" for NAN. Writes buf[len] and returns buf. */
const char *summary_fmt_time(char *buf, size_t len, double s);

/* One distribution row of summary_print ("  LABEL  n  mean p50 p90 p95 p99", times as
 * summary_fmt_time), for printers whose rows line up under summary_print's. */
void summary_print_dist(FILE *f, const char *label, const stats_dist_t *d);

/* A compact aligned table, one row per run. */
void summary_table_header(FILE *f);
void summary_table_row(FILE *f, const summary_t *s);

#endif
