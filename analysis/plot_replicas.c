/* plot_replicas: a cluster run's per-replica load over time (replicas_SLUG): for each
 * replica, the requests it holds (arrived, not yet finished or rejected) as a step
 * function of time, from the requests table's replica column (schema 6). A balanced
 * router keeps the curves together; a skewed one shows one replica's queue growing.
 * Runs of one replica draw nothing. */
#include <sqlite3.h>
#include <string.h>

#include "analysis/plot_internal.h"

/* Each replica's arrivals (+1) and departures (-1) in time order; a request that never
 * ended (aborted without a finish) stays until the run's last event. A disaggregated
 * request (prefill_replica set) is held by its prefill replica from arrival until its KV
 * lands on the decode replica (first token + kv_transfer_s: its blocks stay on the prefill
 * side until then), and by the decode replica from then until it finishes. */
static const char SQL_EVENTS[] =
    "SELECT r, t, d FROM ("
    "  SELECT coalesce(prefill_replica, replica) AS r, arrival_s AS t, 1 AS d FROM requests"
    "    WHERE run_id = ?1 AND replica IS NOT NULL AND arrival_s IS NOT NULL"
    "  UNION ALL SELECT coalesce(prefill_replica, replica),"
    "    CASE WHEN prefill_replica IS NOT NULL AND kv_transfer_s IS NOT NULL"
    "      THEN first_token_s + kv_transfer_s"
    "      ELSE coalesce(finish_s, CASE WHEN status = 'rejected' THEN arrival_s END) END, -1"
    "    FROM requests WHERE run_id = ?1 AND replica IS NOT NULL AND arrival_s IS NOT NULL"
    "  UNION ALL SELECT replica, first_token_s + kv_transfer_s, 1 FROM requests"
    "    WHERE run_id = ?1 AND prefill_replica IS NOT NULL AND kv_transfer_s IS NOT NULL"
    "  UNION ALL SELECT replica, finish_s, -1 FROM requests WHERE run_id = ?1"
    "    AND prefill_replica IS NOT NULL AND kv_transfer_s IS NOT NULL) "
    "WHERE t IS NOT NULL ORDER BY r, t, d";
static const char SQL_N[] =
    "SELECT max(ifnull(max(replica), -1), ifnull(max(prefill_replica), -1)) + 1 FROM requests "
    "WHERE run_id = ?1";

/* replicas_SLUG.dat: one gnuplot index (block) per replica, "t held" rows. Sets *n. */
static int write_dat(plot_t *p, size_t k, const char *file, int *n) {
    sqlite3_stmt *st = NULL;
    FILE *f = NULL;
    int rc = -1;
    *n = 0;
    if (sqlite3_prepare_v2(p->db, SQL_N, -1, &st, NULL) != SQLITE_OK) goto sqlerr;
    sqlite3_bind_int64(st, 1, p->runs[k].id);
    if (sqlite3_step(st) == SQLITE_ROW) *n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    st = NULL;
    if (*n <= 1) return 0;
    if (!(f = plot_open(p, file))) return -1;
    if (sqlite3_prepare_v2(p->db, SQL_EVENTS, -1, &st, NULL) != SQLITE_OK) goto sqlerr;
    sqlite3_bind_int64(st, 1, p->runs[k].id);
    int cur = -1, step;
    long held = 0;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int r = sqlite3_column_int(st, 0);
        for (; cur < r; cur++, held = 0) /* blocks for replicas without requests too */
            fprintf(f, "%s# replica %d\n0 0\n", cur >= 0 ? "\n\n" : "", cur + 1);
        held += sqlite3_column_int(st, 2);
        fprintf(f, "%.9g %ld\n", sqlite3_column_double(st, 1), held);
    }
    if (step != SQLITE_DONE) goto sqlerr;
    for (; cur < *n - 1; cur++) fprintf(f, "%s# replica %d\n0 0\n", cur >= 0 ? "\n\n" : "", cur + 1);
    rc = 0;
    goto done;
sqlerr:
    plot_fail(p, "per-replica load of run %s: %s", p->runs[k].name, sqlite3_errmsg(p->db));
done:
    sqlite3_finalize(st);
    if (f && plot_close(p, f, file)) rc = -1;
    return rc;
}

/* "replica I", with its role when it is not mixed (the replicas table; a run recorded
 * without one, e.g. upgraded from schema 5, has none). */
static void replica_title(plot_t *p, size_t k, int i, char *out, size_t len) {
    sqlite3_stmt *st = NULL;
    const char *role = NULL;
    if (sqlite3_prepare_v2(p->db, "SELECT role FROM replicas WHERE run_id = ?1 AND replica = ?2",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, p->runs[k].id);
        sqlite3_bind_int(st, 2, i);
        if (sqlite3_step(st) == SQLITE_ROW) role = (const char *)sqlite3_column_text(st, 0);
    }
    if (role && strcmp(role, "mixed") != 0) snprintf(out, len, "replica %d (%s)", i, role);
    else snprintf(out, len, "replica %d", i);
    sqlite3_finalize(st);
}

static int plot_one(plot_t *p, size_t k) {
    char dat[PLOT_FIG_LEN + 8], fig[PLOT_FIG_LEN], gp[PLOT_FIG_LEN + 8], title[48];
    int n;
    snprintf(fig, sizeof fig, "replicas_%s", p->runs[k].slug);
    snprintf(dat, sizeof dat, "%s.dat", fig);
    snprintf(gp, sizeof gp, "%s.gp", fig);
    if (write_dat(p, k, dat, &n)) return -1;
    if (n <= 1) return 0;
    plot_key_t key = plot_key_fit((size_t)n, 11, 1000, 8);
    int h = 520 + key.px;
    FILE *f = plot_open(p, gp);
    if (!f) return -1;
    plot_gp_header(f, fig, 1000, h);
    fprintf(f, "set title \"%d replicas: requests each holds (arrived, not finished) over "
               "time\\n\" . ", n);
    plot_gp_str(f, p->runs[k].name);
    fprintf(f, " noenhanced\n");
    fprintf(f, "set xlabel \"time since the run's start (s)\"\n"
               "set ylabel \"requests held by the replica\"\nset yrange [0:*]\n"
               "set offsets 0, 0, graph 0.05, 0\n");
    plot_gp_key(f, &key, "left top", h);
    fprintf(f, "plot \\\n");
    for (int i = 0; i < n; i++) {
        replica_title(p, k, i, title, sizeof title);
        fprintf(f, "%s    \"%s\" index %d using 1:2 with steps lw 1.5", i ? ", \\\n" : "", dat, i);
        plot_gp_style(f, (size_t)i);
        fprintf(f, " title ");
        plot_gp_str(f, title);
    }
    fprintf(f, "\n");
    if (plot_close(p, f, gp)) return -1;
    return plot_add_fig(p, fig);
}

int plot_replicas(plot_t *p) {
    for (size_t i = 0; i < p->n; i++)
        if (plot_one(p, i)) return -1;
    return 0;
}
