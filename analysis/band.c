/* band: prediction bands (contract: band.h). */
#include "analysis/band.h"

#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int errf(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

int band_parse(const char *s, double *err) {
    char *end;
    if (!s || !*s) return 0;
    double v = strtod(s, &end);
    if (end == s) return 0;
    if (*end == '%') v /= 100, end++;
    if (*end || !(v > 0) || v > 0.9) return 0;
    *err = v;
    return 1;
}

int band_pick(double given, double stated, const char *stated_src, double *err, char *src,
              size_t srclen, char *e, size_t elen) {
    if (given > 0) {
        *err = given;
        snprintf(src, srclen, "given (--band=%.4g)", given);
        return 0;
    }
    if (!(isfinite(stated) && stated > 0))
        return errf(e, elen, "--band: this run's cost model states no cross-validated error "
                    "(the roofline's efficiencies are guesses, not fits): give the width, "
                    "--band=0.1 for +-10%% step time");
    *err = stated;
    snprintf(src, srclen, "%s", stated_src && *stated_src ? stated_src : "the cost model's");
    return 0;
}

int band_side_name(const char *db_path, const char *name, int side, char *run, size_t runlen,
                   char *e, size_t elen) {
    sqlite3 *db = NULL;
    char base[400];
    snprintf(base, sizeof base, "%.380s-band-%s", name, side < 0 ? "lo" : "hi");
    if (summary_open(db_path, &db, e, elen) != 0) return -1;
    int rc = summary_free_name(db, base, run, runlen);
    if (rc != 0) errf(e, elen, "%s: %s", db_path, sqlite3_errmsg(db));
    sqlite3_close(db);
    return rc;
}

void band_side_opts(const sim_opts_t *nominal, const char *name, int side, double err,
                    const char *run, char *extra, size_t extralen, sim_opts_t *out) {
    *out = *nominal;
    out->cost_scale = nominal->cost_scale * (side < 0 ? 1 - err : 1 + err);
    out->run_name = run;
    out->progress = 0;
    out->band = 0;
    /* the nominal run's tags (a sweep's curve, an experiment) are not the band's */
    int n = snprintf(extra, extralen, "\"band\":{\"of\":\"");
    for (const char *p = name; *p && n + 8 < (int)extralen; p++)
        if (*p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) extra[n++] = *p;
    snprintf(extra + n, extralen - (size_t)n, "\",\"side\":\"%s\",\"err\":%.6g}",
             side < 0 ? "low" : "high", err);
    out->config_extra = extra;
}

double band_elasticity(double lo, double hi, double err) {
    if (!(lo > 0 && hi > 0 && isfinite(lo) && isfinite(hi) && err > 0 && err < 1)) return NAN;
    return log(hi / lo) / log((1 + err) / (1 - err));
}

int band_sim(const sim_opts_t *o, const sim_result_t *nom, double err, sim_result_t *lo,
             sim_result_t *hi, char *e, size_t elen) {
    const char *name = nom->have_summary ? nom->summary.name : o->run_name;
    sim_result_t *res[2] = { lo, hi };
    for (int k = 0; k < 2; k++) {
        int side = k ? 1 : -1;
        char run[420], extra[600], why[4096];
        sim_opts_t so;
        memset(res[k], 0, sizeof *res[k]);
        if (band_side_name(o->db_path, name, side, run, sizeof run, e, elen) != 0) return -1;
        band_side_opts(o, name, side, err, run, extra, sizeof extra, &so);
        if (sim_run(&so, res[k], why, sizeof why) != 0)
            return errf(e, elen, "the band's %s side (%s, step time x %.4g) failed: %s",
                        side < 0 ? "low" : "high", run, so.cost_scale, why);
        if (!res[k]->have_summary)
            return errf(e, elen, "the band's run %s recorded no summary", run);
    }
    return 0;
}

/* ------------------------------------------------------------------ printing */

static void row(FILE *f, const char *label, double nom, double lo, double hi, int time) {
    char a[32], b[32], c[32];
    double mn = fmin(nom, fmin(lo, hi)), mx = fmax(nom, fmax(lo, hi));
    if (time)
        fprintf(f, "  %-10s %11s   %11s .. %-11s\n", label, summary_fmt_time(a, sizeof a, nom),
                summary_fmt_time(b, sizeof b, mn), summary_fmt_time(c, sizeof c, mx));
    else
        fprintf(f, "  %-10s %11.4g   %11.4g .. %-11.4g\n", label, nom, mn, mx);
}

static void dist_rows(FILE *f, const char *what, const stats_dist_t *n, const stats_dist_t *l,
                      const stats_dist_t *h) {
    char lab[32];
    const char *stat[4] = { "mean", "p50", "p90", "p99" };
    const double nv[4] = { n->mean, n->p50, n->p90, n->p99 };
    const double lv[4] = { l->mean, l->p50, l->p90, l->p99 };
    const double hv[4] = { h->mean, h->p50, h->p90, h->p99 };
    for (int i = 0; i < 4; i++) {
        snprintf(lab, sizeof lab, "%s %s", what, stat[i]);
        row(f, lab, nv[i], lv[i], hv[i], 1);
    }
}

int band_at_knee(const summary_t *lo, const summary_t *hi, double err, double *el) {
    *el = band_elasticity(lo->e2e.mean, hi->e2e.mean, err);
    /* requests a slower server loses (timeouts, rejections) are the knee too */
    int lost = hi->finished < lo->finished;
    return lost || (isfinite(*el) && *el > BAND_KNEE_ELASTICITY);
}

void band_print(FILE *f, const summary_t *nom, const summary_t *lo, const summary_t *hi,
                double err, const char *src) {
    fprintf(f, "band      step time -%.1f%% .. +%.1f%%: %s; runs %s, %s\n", 100 * err,
            100 * err, src, lo->name, hi->name);
    fprintf(f, "  %-10s %11s   %-26s\n", "metric", "nominal", "band");
    dist_rows(f, "TTFT", &nom->ttft, &lo->ttft, &hi->ttft);
    dist_rows(f, "TPOT", &nom->tpot, &lo->tpot, &hi->tpot);
    dist_rows(f, "E2E", &nom->e2e, &lo->e2e, &hi->e2e);
    row(f, "out tok/s", nom->out_tok_per_s, lo->out_tok_per_s, hi->out_tok_per_s, 0);
    row(f, "finished", (double)nom->finished, (double)lo->finished, (double)hi->finished, 0);
    double el;
    char line[256];
    band_at_knee(lo, hi, err, &el);
    band_verdict(el, hi->finished < lo->finished, line, sizeof line);
    if (line[0]) fprintf(f, "%s\n", line);
}

int band_verdict(double el, int lost, char *buf, size_t len) {
    buf[0] = '\0';
    if (lost || (isfinite(el) && el > BAND_KNEE_ELASTICITY)) {
        int n = snprintf(buf, len, "WARNING   at a knee: ");
        if (isfinite(el) && n > 0 && (size_t)n < len)
            n += snprintf(buf + n, len - (size_t)n, "mean E2E moves %.1fx as much as the step "
                          "time across the band%s; ", el, lost ? ", and" : "");
        if (lost && n > 0 && (size_t)n < len)
            n += snprintf(buf + n, len - (size_t)n, "the slower side loses requests; ");
        if (n > 0 && (size_t)n < len)
            snprintf(buf + n, len - (size_t)n, "the point prediction is fragile, read the band");
        return 2;
    }
    if (!isfinite(el)) return 0;
    if (el >= BAND_NEAR_KNEE_ELASTICITY) {
        snprintf(buf, len, "NOTE      near a knee: mean E2E moves %.1fx as much as the step "
                 "time across the band (a cost error of E is a latency error of %.1fE)", el, el);
        return 1;
    }
    snprintf(buf, len, "          not at a knee: mean E2E moves %.2fx the step time across "
             "the band", el);
    return 0;
}

int band_width_of_run(const char *db_path, int64_t run_id, double *err, char *src,
                      size_t srclen, char *e, size_t elen) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc = -1;
    *err = NAN;
    src[0] = '\0';
    if (summary_open(db_path, &db, e, elen) != 0) return -1;
    if (sqlite3_prepare_v2(db, "SELECT json_extract(config, '$.band_width.err'), "
                           "json_extract(config, '$.band_width.source') FROM runs WHERE id = ?1",
                           -1, &st, NULL) != SQLITE_OK) {
        errf(e, elen, "%s: %s", db_path, sqlite3_errmsg(db));
        goto done;
    }
    sqlite3_bind_int64(st, 1, run_id);
    if (sqlite3_step(st) != SQLITE_ROW) {
        errf(e, elen, "%s: no run %lld", db_path, (long long)run_id);
        goto done;
    }
    if (sqlite3_column_type(st, 0) != SQLITE_NULL) *err = sqlite3_column_double(st, 0);
    const unsigned char *t = sqlite3_column_text(st, 1);
    snprintf(src, srclen, "%s", t ? (const char *)t : "");
    rc = 0;
done:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc;
}
