/* report_by: one run's metrics per group of requests, grouped by the trace metadata the
 * requests table records (traces/schema.sql, version 5): `report --by tenant|priority`.
 *
 * Per group: requests, finished, output tokens generated and their share of the run's
 * (the service a fairness policy divides), TTFT/TPOT/E2E p50 and p99 (numpy-linear, over
 * the requests that have the value, as report does), SLO attainment under the given SLOs
 * (the same definition as report.h: requests meeting every set bound / the group's
 * requests), and deadlines met: finished with e2e_s <= deadline_s, over the group's
 * requests that carry a deadline.
 *
 * Groups come in order: tenants by name (no tenant, printed "(none)", first), priorities
 * ascending (most urgent first). Ownership: nothing is kept; the caller owns db and f. */
#ifndef TWIN_REPORT_BY_H
#define TWIN_REPORT_BY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis/report.h"

struct sqlite3;

/* "tenant" or "priority": 0 and sets *column to the SQL grouping expression; -1 with a
 * message otherwise. */
int report_by_parse(const char *key, const char **column, char *err, size_t errlen);

/* Prints the per-group table of run_id grouped by key ("tenant" or "priority"). slo may be
 * NULL (no SLO column). 0, or -1 with a message in err. */
int report_by_print(FILE *f, struct sqlite3 *db, int64_t run_id, const char *key,
                    const report_slo_t *slo, char *err, size_t errlen);

#endif
