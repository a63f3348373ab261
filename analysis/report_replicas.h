/* report_replicas: a cluster run's per-replica breakdown for `report` (schema 6: the
 * replica columns of requests and steps, the replicas table).
 *
 * Per replica: its role, the requests it served (requests.replica: the decode side of a
 * disaggregated run) and of those finished, its busy time (the sum of its steps' dur_s)
 * over the run's makespan, its KV use over time (kv_used / kv_total weighted by dur_s),
 * its prefix-cache hit rate (cached over prompt tokens of its requests) and mean TTFT.
 * Requests a router rejected have no replica and count for none.
 *
 * Invariants: n is the run's replicas (rows of the replicas table, else 1 + the largest
 * replica in requests and steps); rows hold the first REPORT_MAX_REPLICAS of them. A
 * run of one replica has n <= 1 and prints nothing.
 *
 * Ownership: a plain value inside report_t; nothing to free. */
#ifndef TWIN_REPORT_REPLICAS_H
#define TWIN_REPORT_REPLICAS_H

#include <stdint.h>
#include <stdio.h>

struct sqlite3;

#define REPORT_MAX_REPLICAS 128

typedef struct {
    char role[8];                   /* "mixed", "prefill", "decode" */
    int64_t requests, finished, steps;
    double busy_s;                  /* sum of its steps' durations */
    double kv_use;                  /* time-weighted KV fraction in use; NAN without steps */
    double hit_rate;                /* cached / prompt tokens; NAN without requests */
    double ttft_mean_s;             /* NAN when none got a first token */
} report_replica_t;

typedef struct {
    int32_t n;                      /* replicas of the run (see above) */
    int32_t shown;                  /* rows filled: min(n, REPORT_MAX_REPLICAS) */
    report_replica_t rows[REPORT_MAX_REPLICAS];
} report_replicas_t;

/* 0, or -1 with a message in err. */
int report_replicas_load(struct sqlite3 *db, int64_t run_id, report_replicas_t *out, char *err,
                         size_t errlen);
/* The table, when n > 1; makespan_s for the busy fraction. */
void report_replicas_print(FILE *f, const report_replicas_t *r, double makespan_s);
/* `  "replicas": [{...}, ...],` and a newline when n > 1 (report_json's member), else
 * nothing. */
void report_replicas_json(FILE *f, const report_replicas_t *r, double makespan_s);

#endif
