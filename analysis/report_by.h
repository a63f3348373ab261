/* report_by: one run's metrics per group of requests, grouped by the trace metadata the
 * requests table records (traces/schema.sql, version 5): `report --by tenant|priority`;
 * or per load stage, the request ranges a run's config "stages" names (an imported
 * inference-perf experiment, and validate's replays of one): `report --by stage`
 * (report_by_stage.c).
 *
 * Per group: requests, finished, output tokens generated and their share of the run's
 * (the service a fairness policy divides), TTFT/TPOT/E2E p50 and p99 (numpy-linear, over
 * the requests that have the value, as report does), SLO attainment under the given SLOs
 * (the same definition as report.h: requests meeting every set bound / the group's
 * requests), and deadlines met: finished with e2e_s <= deadline_s, over the group's
 * requests that carry a deadline.
 *
 * Groups come in order: tenants by name (no tenant, printed "(none)", first), priorities
 * ascending (most urgent first).
 *
 * Per stage (in the config's order): rate, duration, requests, finished, failed (rejected
 * or aborted), TTFT and E2E mean/p50/p90/p99 and TPOT p50 (twinserve's definitions, as
 * above), and, when the stage's entry has a "summary" (a measured import), the client's
 * own TPOT mean and ITL p75/p90/p99 from it, labelled as inference-perf's (they count SSE
 * messages, not tokens). --slo adds nothing to this table.
 *
 * Ownership: nothing is kept; the caller owns db and f. */
#ifndef TWIN_REPORT_BY_H
#define TWIN_REPORT_BY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis/report.h"

struct sqlite3;

/* "tenant", "priority" or "stage": 0 and sets *column to the SQL grouping expression
 * (for stage, the column the stage ranges cut: req_id); -1 with a message otherwise. */
int report_by_parse(const char *key, const char **column, char *err, size_t errlen);

/* Prints the per-group table of run_id grouped by key ("tenant", "priority" or "stage").
 * slo may be NULL (no SLO column). 0, or -1 with a message in err (for stage, also when
 * the run records no stages: "run 'x' records no load stages: ..."). */
int report_by_print(FILE *f, struct sqlite3 *db, int64_t run_id, const char *key,
                    const report_slo_t *slo, char *err, size_t errlen);

/* 0 when run_id can be grouped by key, so that a caller can refuse before printing
 * anything; -1 with report_by_print's message otherwise (stage: a run without stages). */
int report_by_ready(struct sqlite3 *db, int64_t run_id, const char *key, char *err,
                    size_t errlen);

/* The per-stage table alone (report_by_print's "stage"). 0, or -1 with a message. */
int report_by_stage(FILE *f, struct sqlite3 *db, int64_t run_id, char *err, size_t errlen);

#endif
