/* recorder: writes runs, per-request and per-step records to SQLite (schema: traces/schema.sql,
 * compiled into the binary as rec_schema_sql).
 *
 * Invariants:
 *  - One schema for the simulator and the engine; many runs per database (run ids are SQLite
 *    rowids, names are unique per database).
 *  - A run row is committed with status 'running' before any other row of that run, so a run
 *    that dies is visible; rec_run_end sets 'done' or 'failed' (with the message) and commits
 *    everything pending. Nothing already handed to the recorder is lost on a failed run.
 *  - The metric definitions live here and only here (vLLM's benchmark): ttft = first_token -
 *    arrival; e2e = finish - arrival; tpot = (e2e - ttft) / (output_tokens - 1), NULL when
 *    output_tokens <= 1 or the request did not finish. Times are seconds from the run's start.
 *    A time < 0 in the input means "never happened" and is stored as NULL.
 *  - Rows are written through prepared statements inside batched transactions (WAL mode);
 *    rec_flush commits what is pending. The last connection to close (rec_close) puts the
 *    file back in rollback-journal mode, so a finished database is one plain file that
 *    readers can use from a read-only directory without creating -wal/-shm files.
 *
 * Ownership: rec_open returns an object even on failure (NULL only when out of memory); check
 * rec_errmsg, always rec_close. Strings passed in are copied by SQLite before the call returns.
 * A rec_t is used by one thread at a time (its connection is opened without SQLite's mutex). */
#ifndef TWIN_RECORDER_H
#define TWIN_RECORDER_H

#include <stddef.h>
#include <stdint.h>

typedef struct rec rec_t;
struct sqlite3;

typedef struct {
    const char *name;     /* NULL: "<kind>-<policy stem>-<run id>" */
    const char *kind;     /* "sim" | "engine" | "measured" (imported, analysis/import.h) */
    const char *policy;   /* policy file path */
    const char *params;   /* JSON object of the policy's effective params */
    const char *trace;    /* trace path, plus replay options */
    const char *model;
    const char *hardware;
    uint64_t seed;
    const char *version;  /* twinserve version string */
    const char *config;   /* JSON object: scheduler config (blocks, budget, ...), may be NULL */
} rec_run_info_t;

#define REC_TENANT_MAX 32 /* bytes of a tenant name, NUL included (TRACE_TENANT_MAX) */

typedef struct {
    int32_t req_id;
    double arrival_s;
    int32_t prompt_tokens;
    int32_t output_tokens;     /* target (trace) output length */
    int32_t generated_tokens;  /* output tokens actually emitted */
    double first_scheduled_s;  /* < 0: never */
    double first_token_s;      /* < 0: never */
    double finish_s;           /* < 0: never */
    int32_t preemptions;
    int32_t spec_proposed;
    int32_t spec_accepted;
    int32_t cached_tokens;     /* prompt tokens served by the prefix cache */
    /* The trace's per-request metadata (traces/trace.h). A fixed array, so the asynchronous
     * writer copies a row by value. */
    int32_t priority;          /* lower = more urgent; 0 by default */
    double deadline_s;         /* seconds after arrival to finish by; <= 0: none (NULL) */
    char tenant[REC_TENANT_MAX]; /* "": none (NULL) */
    const char *status;        /* "finished" | "rejected" | "aborted" */
    const char *reason;        /* why rejected/aborted, else NULL */
    /* schema 6: the replica that served it (0 for one replica; -1: none, NULL), and in a
     * disaggregated run the one that prefilled it and the KV transfer's seconds (has_pd 0:
     * both NULL) */
    int32_t replica;
    int32_t prefill_replica;
    double kv_transfer_s;
    int has_pd;
} rec_request_t;

typedef struct {
    int64_t step;
    double start_s;
    double dur_s;
    int32_t prefill_tokens;    /* prompt (or recompute) tokens computed this step */
    int32_t decode_tokens;     /* decode tokens, counting 1 + k per speculative verification */
    int32_t pad_tokens;        /* padding slots (static batching) */
    int32_t num_seqs;
    int32_t kv_used;           /* blocks in use after the step */
    int32_t kv_total;
    int32_t num_waiting;       /* queue length after the step */
    int32_t num_preempted;     /* preemptions decided in this step */
    double sched_s;            /* wall time spent in the scheduler for this step */
    /* the forward pass's work (schema.sql; the executors fill these from cost_features) */
    int64_t tokens, pass_seqs, sampled, kv_tokens, attn_pairs;
    double host_s;             /* CPU-side time before the pass (schema.sql) */
    int32_t replica;           /* 0-based; 0 for one replica */
} rec_step_t;

/* One replica of a simulated run (schema.sql, table replicas). */
typedef struct {
    int32_t replica;
    const char *group;         /* NULL: none */
    const char *role;          /* "mixed" | "prefill" | "decode" */
    const char *model, *hardware, *policy, *params;
    int32_t tp, kv_blocks;
} rec_replica_t;

typedef struct {
    int32_t req_id;
    int32_t idx;               /* 0-based output position */
    int32_t token_id;          /* -1 when unknown (simulator) */
    double t_s;
} rec_token_t;

/* Opens (creating if needed) a database to record into. A database of an older schema
 * version whose changes since were additive (rec_upgradable) is upgraded in place first,
 * keeping every row; rec_upgraded_from then says from which version (0: none was needed). */
rec_t *rec_open(const char *path);
long long rec_upgraded_from(const rec_t *r);

/* 1 when a database of this schema_version can be brought up to this build's by
 * rec_upgrade_db (its changes since were new columns and tables only). */
int rec_upgradable(long long version);
/* Upgrades db (opened read-write) in place, in one transaction, when its version is
 * rec_upgradable; *from is the version it had, or 0 when nothing was done (already current,
 * newer, empty, not ours: rec_check_db reports those). 0, or -1 with a message (nothing
 * changed). New tables are created by the schema afterwards (rec_open applies it). */
int rec_upgrade_db(struct sqlite3 *db, long long *from, char *err, size_t errlen);
const char *rec_errmsg(const rec_t *r);   /* NULL when no error happened */

/* Each returns 0 on success, -1 on error (message on the object). */
int rec_run_begin(rec_t *r, const rec_run_info_t *info, int64_t *run_id);
int rec_request(rec_t *r, int64_t run_id, const rec_request_t *q);
int rec_step(rec_t *r, int64_t run_id, const rec_step_t *s);
int rec_token(rec_t *r, int64_t run_id, const rec_token_t *t);
/* Written synchronously (after the rows handed over before it), once per replica. */
int rec_replica(rec_t *r, int64_t run_id, const rec_replica_t *x);
int rec_flush(rec_t *r);
/* Sets member `key` of the run's config object to the JSON value `json`, in the rows'
 * transaction (so it commits with rec_run_end): for what a run learns while it runs (the
 * engine's speculative acceptance curve). */
int rec_run_config_set(rec_t *r, int64_t run_id, const char *key, const char *json);
/* ok != 0: 'done'; else 'failed' with error. Also sets wall_s and commits. */
int rec_run_end(rec_t *r, int64_t run_id, int ok, const char *error, double wall_s);
void rec_close(rec_t *r);

/* on != 0: rows go through a background writer thread (traces/rec_async.h) so the caller's
 * loop does not wait for SQLite. A write error then surfaces at the next row call or at
 * rec_flush / rec_run_end (which marks the run failed with it); status checks stay
 * synchronous. Every other call waits until the writer is idle. */
int rec_set_async(rec_t *r, int on);

/* "policies/continuous.lua" -> "continuous" (NULL or empty -> "run"): default run names
 * and compact tables. */
void rec_policy_stem(const char *policy, char *out, size_t len);

/* Deletes a database file and its WAL side files (PATH-wal, PATH-shm); missing ones are
 * fine. For temporary databases (sweep children, explain). */
void rec_remove(const char *path);

/* The underlying connection, borrowed, for readers (analysis). */
struct sqlite3 *rec_db(rec_t *r);

/* Added for readers: checks that db (any open mode; it is only read) is either empty or a
 * twinserve database this build understands: a known schema_version and, for every table of
 * schema.sql that exists, every column. Returns 0, or -1 with a message in err (e.g. "file is
 * not a database", "schema_version 3 is newer than this twinserve (2)"). */
int rec_check_db(struct sqlite3 *db, char *err, size_t errlen);

/* Deletes the runs ids[0..n) of db and every row of theirs (requests, steps, tokens,
 * replicas), all or nothing (one transaction), so their names can be used again. A run
 * still 'running' is refused (a process may be writing it) unless force. 0, or -1 with a
 * message naming the run. */
int rec_delete_runs(struct sqlite3 *db, const int64_t *ids, size_t n, int force, char *err,
                    size_t errlen);

#endif
