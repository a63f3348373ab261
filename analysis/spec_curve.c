/* spec_curve: see spec_curve.h. */
#include "analysis/spec_curve.h"

#include <math.h>
#include <sqlite3.h>
#include <string.h>

#include "traces/summary.h"

/* A JSON array of integers at `path` of the run's config into v (at most SPEC_CURVE_MAX). */
static int load_array(sqlite3 *db, int64_t id, const char *path, int64_t *v, int *n) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "SELECT j.value FROM runs r, json_each(r.config, ?2) j "
                                    "WHERE r.id = ?1 ORDER BY j.key", -1, &st, NULL);
    if (rc != SQLITE_OK) return -1;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
    *n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && *n < SPEC_CURVE_MAX)
        v[(*n)++] = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

int speccurve_load(const char *db_path, const char *run, speccurve_t *c, char *err,
                   size_t errlen) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t id;
    int rc = -1, n_acc = 0, n_prop = 0, n_reach = 0;
    spec_curve_t *cv = &c->curve;
    memset(c, 0, sizeof *c);
    if (summary_open(db_path, &db, err, errlen) != 0) goto done;
    if (summary_find_run(db, run, &id, err, errlen) != 0) goto done;
    if (sqlite3_prepare_v2(db, "SELECT json_extract(config, '$.proposer'), json_extract(config, "
                               "'$.draft_spec'), json_extract(config, '$.spec_curve') IS NOT NULL "
                               "FROM runs WHERE id = ?1", -1, &st, NULL) != SQLITE_OK)
        goto sqlerr;
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) != SQLITE_ROW) goto sqlerr;
    const char *p = (const char *)sqlite3_column_text(st, 0);
    const char *d = (const char *)sqlite3_column_text(st, 1);
    snprintf(c->proposer, sizeof c->proposer, "%s", p ? p : "");
    snprintf(c->draft, sizeof c->draft, "%s", d ? d : "");
    int has = sqlite3_column_int(st, 2);
    sqlite3_finalize(st);
    st = NULL;
    if (!has) {
        rc = 0;
        goto done;
    }
    if (load_array(db, id, "$.spec_curve.proposed", cv->proposed, &n_prop) != 0 ||
        load_array(db, id, "$.spec_curve.reached", cv->reached, &n_reach) != 0 ||
        load_array(db, id, "$.spec_curve.accepted", cv->accepted, &n_acc) != 0)
        goto sqlerr;
    if (n_acc != n_reach || n_prop != n_reach) {
        snprintf(err, errlen, "%s: the run's spec_curve has %d proposed, %d reached and %d "
                 "accepted counts", db_path, n_prop, n_reach, n_acc);
        goto done;
    }
    cv->n = n_reach;
    rc = 1;
    goto done;
sqlerr:
    snprintf(err, errlen, "%s: reading the speculative acceptance: %s", db_path,
             db ? sqlite3_errmsg(db) : "no database");
done:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc;
}

void speccurve_print(FILE *f, const speccurve_t *sc) {
    const spec_curve_t *c = &sc->curve;
    fprintf(f, "\nspeculative acceptance per draft position (proposer %s%s%s):\n",
            sc->proposer[0] ? sc->proposer : "?", sc->draft[0] ? ": " : "", sc->draft);
    fprintf(f, "  %-9s %12s %12s %12s %8s\n", "position", "proposed", "reached", "accepted",
            "rate");
    int64_t acc = 0;
    for (int j = 0; j < c->n; j++) {
        acc += c->accepted[j];
        fprintf(f, "  %-9d %12lld %12lld %12lld %8.3f\n", j + 1, (long long)c->proposed[j],
                (long long)c->reached[j], (long long)c->accepted[j],
                c->reached[j] ? (double)c->accepted[j] / (double)c->reached[j] : 0.0);
    }
    double alpha = spec_curve_alpha(c);
    if (alpha < 0 || c->n == 0 || c->proposed[0] == 0) {
        fprintf(f, "  no draft was verified\n");
        return;
    }
    /* the geometric model's tokens per verification over the k the run proposed: draft j
     * is kept with probability alpha^(j+1) when more than j were proposed */
    double model = 1;
    for (int j = 0; j < c->n; j++)
        model += pow(alpha, j + 1) * (double)c->proposed[j] / (double)c->proposed[0];
    fprintf(f, "  alpha (every position pooled) %.3f: `twinserve sim --policy "
               "policies/speculative.lua --set alpha=%.3f`\n", alpha, alpha);
    fprintf(f, "  tokens per verification: %.3f measured; %.3f at alpha %.3f over the same k "
               "(the simulator's model)\n", 1 + (double)acc / (double)c->proposed[0], model,
            alpha);
    if (!strcmp(sc->proposer, "draft"))
        fprintf(f, "  note: this run's step times include its draft model's passes, which the "
                   "fitted cost model charges to the target's work\n");
}
