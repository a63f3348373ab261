/* calibrate: see calibrate.h. */
#include "analysis/calibrate.h"

#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "analysis/report.h"
#include "traces/stats.h"
#include "traces/summary.h"
#include "sim/errf.h"
#include "sim/profile.h"

void calib_input_free(calib_input_t *in) {
    free(in->pass);
    free(in->host);
    free(in->pass_kind);
    for (int i = 0; i < in->n_kinds; i++) free(in->kinds[i]);
    free(in->kinds);
    memset(in, 0, sizeof *in);
}

static void input_init(calib_input_t *in) {
    memset(in, 0, sizeof *in);
    in->mem_bw = in->gemm_flops = NAN;
}

/* The shape named after the model: a path's file name, or the dummy:PRESET spec. */
static void name_shape(preset_model_t *m, const char *model) {
    const char *base = strrchr(model, '/');
    snprintf(m->name, sizeof m->name, "%.47s", base ? base + 1 : model);
}

static int kind_index(calib_input_t *in, const char *kind) {
    for (int i = 0; i < in->n_kinds; i++)
        if (!strcmp(in->kinds[i], kind)) return i;
    char **k = realloc(in->kinds, sizeof *k * (size_t)(in->n_kinds + 1));
    if (!k) return -1;
    in->kinds = k;
    if (!(k[in->n_kinds] = strdup(kind))) return -1;
    return in->n_kinds++;
}

static int grow(fit_point_t **v, size_t n, int **kinds) {
    fit_point_t *p = realloc(*v, sizeof *p * (n + 1));
    if (!p) return -1;
    *v = p;
    if (kinds) {
        int *k = realloc(*kinds, sizeof *k * (n + 1));
        if (!k) return -1;
        *kinds = k;
    }
    return 0;
}

/* What measured the input: "MODEL on BACKEND (WTYPE weights[, f16 KV])[, N threads]". The KV
 * type shows only when it is f16 (the CPU's --kv-type): f32 is the default everywhere. */
static void describe(calib_input_t *in, const char *model, const char *backend,
                     const char *wtype, const char *kv_type, int threads) {
    char tdesc[32] = "";
    if (threads > 0) snprintf(tdesc, sizeof tdesc, ", %d threads", threads);
    snprintf(in->fitted_for, sizeof in->fitted_for, "%.120s on %.30s (%.15s weights%s)%s",
             model, backend ? backend : "?", wtype ? wtype : "?",
             kv_type && !strcmp(kv_type, "f16") ? ", f16 KV" : "", tdesc);
}

/* Appends one profile's rows to in (the first also sets what the input is). */
static int add_profile(const char *path, int first, calib_input_t *in, char *err,
                       size_t errlen) {
    profile_t p;
    int rc = -1;
    profile_init(&p);
    if (profile_read(path, &p, err, errlen) != 0) goto done;
    if (first) {
        describe(in, p.model[0] ? p.model : "(model not named)", p.backend[0] ? p.backend : NULL,
                 p.weight_type[0] ? p.weight_type : NULL, profile_header_get(&p, "kv_type"),
                 p.threads);
        in->shape = p.shape;
        in->has_shape = p.has_shape;
        if (p.model[0]) name_shape(&in->shape, p.model);
        in->mem_bw = p.mem_bw;
        in->gemm_flops = p.gemm_flops;
        snprintf(in->host_note, sizeof in->host_note, "%s", p.host_note);
    } else if (p.has_shape != in->has_shape ||
               (p.has_shape && cost_file_same_shape(&p.shape, &in->shape, err, errlen) != 0)) {
        char why[128];
        snprintf(why, sizeof why, "%s", p.has_shape && in->has_shape ? err : "a shape given "
                 "in one profile only");
        errf(err, errlen, "%s profiles another model than the first profile (%s): a cost "
             "model describes one model", path, why);
        goto done;
    }
    for (size_t i = 0; i < p.n; i++) {
        const profile_point_t *pt = &p.pts[i];
        /* a host row stands for its group's steps; a pass row is one point's median */
        fit_point_t fp = {pt->f, pt->median_s, 1};
        if (!strcmp(pt->kind, "host") && pt->reps > 0) fp.w = pt->reps;
        if (!strcmp(pt->kind, "host")) {
            if (grow(&in->host, in->n_host, NULL)) goto oom;
            in->host[in->n_host++] = fp;
        } else {
            int k = kind_index(in, pt->kind);
            if (k < 0 || grow(&in->pass, in->n_pass, &in->pass_kind)) goto oom;
            in->pass_kind[in->n_pass] = k;
            in->pass[in->n_pass++] = fp;
        }
    }
    rc = 0;
    goto done;
oom:
    errf(err, errlen, "out of memory reading %s", path);
done:
    profile_free(&p);
    return rc;
}

int calib_from_profiles(const char *const *paths, int n, calib_input_t *in, char *err,
                        size_t errlen) {
    input_init(in);
    size_t used = (size_t)snprintf(in->source, sizeof in->source, "profile%s", n > 1 ? "s" : "");
    for (int i = 0; i < n; i++) {
        if (add_profile(paths[i], i == 0, in, err, errlen) != 0) {
            calib_input_free(in);
            return -1;
        }
        if (used < sizeof in->source)
            used += (size_t)snprintf(in->source + used, sizeof in->source - used, "%s %.120s",
                                     i ? "," : "", paths[i]);
    }
    if (in->n_host == 0 && !in->host_note[0])
        snprintf(in->host_note, sizeof in->host_note, "the profile has no host rows");
    return 0;
}

/* A run's step, classified for the report by what its features say. */
static const char *step_kind(const cost_features_t *f) {
    if (f->tokens == f->seqs) return "decode-only";
    if (f->kv_tokens == f->tokens && f->seqs == 1) return "one prompt";
    return "with prompt tokens";
}

int calib_from_run(const char *db_path, const char *run, calib_input_t *in, char *err,
                   size_t errlen) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t id;
    int rc = -1;
    input_init(in);
    if (summary_open(db_path, &db, err, errlen) != 0) goto done;
    if (summary_find_run(db, run, &id, err, errlen) != 0) goto done;
    if (sqlite3_prepare_v2(db,
            "SELECT name, kind, status, model, json_extract(config, '$.backend'), "
            "json_extract(config, '$.weight_type'), json_extract(config, '$.threads'), "
            "json_extract(config, '$.shape') IS NOT NULL, json_extract(config, '$.kv_type') "
            "FROM runs WHERE id = ?1",
            -1, &st, NULL) != SQLITE_OK)
        goto sqlerr;
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) != SQLITE_ROW) goto sqlerr;
    /* copies: the statement's text dies with it, and the names are used after */
    char name[256], model[512];
    snprintf(name, sizeof name, "%s", (const char *)sqlite3_column_text(st, 0));
    const char *kind = (const char *)sqlite3_column_text(st, 1);
    const char *status = (const char *)sqlite3_column_text(st, 2);
    if (!kind || (strcmp(kind, "engine") != 0 && strcmp(kind, "serve") != 0)) {
        errf(err, errlen, "run '%s' in %s is a %s run: calibrate fits measurements, from an "
             "engine or serve run or a profile", name, db_path, kind ? kind : "?");
        goto done;
    }
    if (!status || strcmp(status, "done") != 0) {
        errf(err, errlen, "run '%s' in %s is %s, not done: its steps are incomplete", name,
             db_path, status ? status : "?");
        goto done;
    }
    snprintf(in->source, sizeof in->source, "engine run %.100s (id %lld) in %.120s", name,
             (long long)id, db_path);
    snprintf(model, sizeof model, "%s",
             sqlite3_column_text(st, 3) ? (const char *)sqlite3_column_text(st, 3) : "?");
    const char *backend = (const char *)sqlite3_column_text(st, 4);
    const char *wtype = (const char *)sqlite3_column_text(st, 5);
    int threads = sqlite3_column_int(st, 6), has_shape = sqlite3_column_int(st, 7);
    describe(in, model, backend, wtype, (const char *)sqlite3_column_text(st, 8), threads);
    sqlite3_finalize(st);
    st = NULL;
    if (has_shape) {
        /* the shape the engine recorded: a preset file's keys */
        const kv_spec_t *k = preset_model_keys;
        for (int i = 0; i < preset_model_n_keys; i++) {
            if (k[i].type != KV_INT) continue;
            char sql[160];
            snprintf(sql, sizeof sql, "SELECT json_extract(config, '$.shape.%s') FROM runs "
                     "WHERE id = ?1", k[i].key);
            if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) goto sqlerr;
            sqlite3_bind_int64(st, 1, id);
            if (sqlite3_step(st) != SQLITE_ROW) goto sqlerr;
            int32_t v = sqlite3_column_int(st, 0);
            memcpy((char *)&in->shape + k[i].offset, &v, sizeof v);
            sqlite3_finalize(st);
            st = NULL;
        }
        name_shape(&in->shape, model);
        char m[256];
        in->has_shape = preset_model_validate(&in->shape, m, sizeof m) == 0;
    }
    if (sqlite3_prepare_v2(db,
            "SELECT step, dur_s, host_s, tokens, pass_seqs, sampled, kv_tokens, attn_pairs "
            "FROM steps WHERE run_id = ?1 ORDER BY step", -1, &st, NULL) != SQLITE_OK)
        goto sqlerr;
    sqlite3_bind_int64(st, 1, id);
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 3) == SQLITE_NULL) {
            errf(err, errlen, "run '%s' has steps without features (recorded by an older "
                 "twinserve?)", name);
            goto done;
        }
        fit_point_t fp = {
            .f = {sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 4),
                  sqlite3_column_int64(st, 5), sqlite3_column_int64(st, 6),
                  sqlite3_column_int64(st, 7)},
            .t = sqlite3_column_double(st, 1),
        };
        if (fp.f.tokens < 1) continue;
        int k = kind_index(in, step_kind(&fp.f));
        if (k < 0 || grow(&in->pass, in->n_pass, &in->pass_kind)) goto oom;
        in->pass_kind[in->n_pass] = k;
        in->pass[in->n_pass++] = fp;
        /* step 0 pays the process's first-touch costs: not a host sample */
        if (sqlite3_column_int64(st, 0) > 0 && sqlite3_column_type(st, 2) != SQLITE_NULL &&
            sqlite3_column_double(st, 2) > 0) {
            fp.t = sqlite3_column_double(st, 2);
            if (grow(&in->host, in->n_host, NULL)) goto oom;
            in->host[in->n_host++] = fp;
        }
    }
    if (r != SQLITE_DONE) goto sqlerr;
    if (in->n_host == 0)
        snprintf(in->host_note, sizeof in->host_note, "the run's steps record no host time");
    rc = 0;
    goto done;
oom:
    errf(err, errlen, "out of memory reading %s", db_path);
    goto done;
sqlerr:
    errf(err, errlen, "%s: %s", db_path, sqlite3_errmsg(db));
done:
    sqlite3_finalize(st);
    if (db) sqlite3_close(db);
    if (rc != 0) calib_input_free(in);
    return rc;
}

int calib_fit(const calib_input_t *in, const fit_opts_t *o, cost_file_t *cf, fit_report_t *pr,
              fit_report_t *hr, char *err, size_t errlen) {
    memset(cf, 0, sizeof *cf);
    memset(hr, 0, sizeof *hr);
    if (!in->has_shape)
        return errf(err, errlen, "%s does not say the model's shape: give it with --model "
                    "(a preset name or file)", in->source);
    cf->kind = COST_FILE_LINEAR;
    cf->model = in->shape;
    cf->lin.layer_params = preset_model_layer_matrix_params(&in->shape);
    cf->lin.lm_params = preset_model_lm_params(&in->shape);
    cf->lin.tp = 1;   /* measured on one device */
    /* a mixture of experts: its experts' term on the fitted gemm curve (sim/cost.h: moe) */
    cost_file_moe_shape(&in->shape, &cf->lin);
    char e[512];
    if (fit_pass(in->pass, in->n_pass, o, &cf->lin, pr, e, sizeof e) != 0)
        return errf(err, errlen, "%s: %s", in->source, e);
    if (in->n_host > 0 && fit_host(in->host, in->n_host, o, &cf->lin, hr, e, sizeof e) != 0) {
        fit_report_free(pr);
        return errf(err, errlen, "%s: host time: %s", in->source, e);
    }
    snprintf(cf->fitted_for, sizeof cf->fitted_for, "%s", in->fitted_for);
    snprintf(cf->source, sizeof cf->source, "%.200s (%zu points)", in->source, in->n_pass);
    time_t now = time(NULL);
    strftime(cf->fitted_at, sizeof cf->fitted_at, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    cf->fit_points = (double)(pr->n - pr->dropped);
    cf->fit_median_err = pr->fit_median;
    cf->cv_median_err = pr->cv_median;
    cf->cv_p90_err = pr->cv_p90;
    cf->range_tokens = pr->max_tokens;
    cf->range_seqs = pr->max_seqs;
    cf->range_kv_tokens = pr->max_kv_tokens;
    cf->range_attn_pairs = pr->max_attn_pairs;
    return 0;
}

/* ------------------------------------------------------------------ the report */

static const char *fmt_s(char *buf, size_t len, double s) {
    if (s == 0) snprintf(buf, len, "0");
    else if (s >= 1e-3) snprintf(buf, len, "%.3f ms", s * 1e3);
    else if (s >= 1e-6) snprintf(buf, len, "%.3f us", s * 1e6);
    else snprintf(buf, len, "%.3f ns", s * 1e9);
    return buf;
}

static const char *const term_meaning[FIT_TERMS] = {
    "fixed per pass (launches, thread wake-ups)",
    "per sequence (block tables, per-sequence work)",
    "per sampled row (the sampler; the LM head is in gemm)",
    "per KV position read (attention over cached K/V), below the first kv knot",
    "per (query, key) pair (attention's scores and sums)",
};
static const char *const term_hint[FIT_TERMS] = {
    "every point reads the LM head, so the fixed time is the GEMM curve's floor",
    "the points' sequences follow their tokens (profile prompt chunks beside decodes)",
    "every sequence samples (profile chunks that sample nothing, e.g. middle chunks)",
    "no point reads cached context (profile decodes at several contexts)",
    "no prompt chunk of more than one token (profile prompt chunks)",
};

static double term_value(const cost_linear_params_t *p, int t) {
    const double v[FIT_TERMS] = {p->step_s, p->seq_s, p->sampled_s, p->kv_token_s,
                                 p->attn_pair_s};
    return v[t];
}

/* median and p90 of |e| over one kind's points */
static void kind_errors(const fit_report_t *r, const int *kinds, int k, double *med,
                        double *p90, size_t *n) {
    double *a = malloc(sizeof *a * (r->n ? r->n : 1));
    *n = 0;
    *med = *p90 = NAN;
    if (!a) return;
    for (size_t i = 0; i < r->n; i++)
        if (kinds[i] == k && !isnan(r->cv_err[i])) a[(*n)++] = fabs(r->cv_err[i]);
    stats_sort(a, *n);
    *med = stats_percentile_sorted(a, *n, 50);
    *p90 = stats_percentile_sorted(a, *n, 90);
    free(a);
}

void calib_print(FILE *f, const calib_input_t *in, const cost_file_t *cf,
                 const fit_report_t *pr, const fit_report_t *hr, int folds) {
    const cost_linear_params_t *p = &cf->lin;
    char a[32], b[32], c[32];
    fprintf(f, "calibrate: %zu forward-pass points from %s\n", in->n_pass, in->source);
    fprintf(f, "  fitted for %s\n", cf->fitted_for);
    if (isfinite(in->mem_bw) || isfinite(in->gemm_flops))
        fprintf(f, "  the device's measured roofs: %.1f GB/s read, %.1f GFLOP/s GEMM\n",
                in->mem_bw / 1e9, in->gemm_flops / 1e9);
    fprintf(f, "\nforward pass = step + seq x seqs + %.4g x gemm(tokens) + %.4g x gemm(sampled)\n"
               "               + sampled x rows + kv(KV positions) + pair x pairs\n",
            p->layer_params, p->lm_params);
    for (int t = 0; t < FIT_TERMS; t++) {
        fprintf(f, "  %-12s %12s  %s\n", fit_term_names[t], fmt_s(a, sizeof a, term_value(p, t)),
                term_meaning[t]);
        if (pr->folded[t])
            fprintf(f, "  %12s %12s  (not separable from the terms above on these points: "
                       "%s; held at 0)\n", "", "", term_hint[t]);
    }
    if (p->n_kv_knots > 0) {
        fprintf(f, "  kv(positions): %s per KV position", fmt_s(a, sizeof a, p->kv_token_s));
        double rate = p->kv_token_s;
        for (int32_t k = 0; k < p->n_kv_knots; k++) {
            rate += p->kv_extra_s[k];
            fprintf(f, ", %s beyond %.0f", fmt_s(a, sizeof a, rate), p->kv_knots[k]);
        }
        fprintf(f, "\n  %12s %12s  (a position costs more once a step's K/V outgrow a cache)\n",
                "", "");
    }
    fprintf(f, "  gemm(rows): time per matrix parameter of a product of that many rows, and "
               "what it implies\n");
    fprintf(f, "  %8s %12s %14s %14s\n", "rows", "s/param", "weights GB/s", "GFLOP/s");
    for (int32_t k = 0; k < p->n_knots; k++) {
        double tau = p->knot_s[k];
        double bw = tau > 0 ? cf->model.dtype_bytes / tau : NAN;
        double fl = tau > 0 ? 2 * p->knot_rows[k] / tau : NAN;
        char bws[32], fls[32];
        if (isfinite(in->mem_bw) && isfinite(bw))
            snprintf(bws, sizeof bws, "%.1f (%3.0f%%)", bw / 1e9, 100 * bw / in->mem_bw);
        else snprintf(bws, sizeof bws, "%.1f", bw / 1e9);
        if (isfinite(in->gemm_flops) && isfinite(fl))
            snprintf(fls, sizeof fls, "%.1f (%3.0f%%)", fl / 1e9, 100 * fl / in->gemm_flops);
        else snprintf(fls, sizeof fls, "%.1f", fl / 1e9);
        fprintf(f, "  %8.0f %12.4g %14s %14s\n", p->knot_rows[k], tau, bws, fls);
    }
    fprintf(f, "  (the weights' read rate counts every parameter read once per product; the "
               "percentages are of the measured roofs)\n");
    if (in->n_host > 0)
        fprintf(f, "\nhost (CPU-side time before each pass) = %s + %s x seqs + %s x tokens, "
                   "from %zu samples; cross-validated median error %.1f%%, p90 %.1f%%\n",
                fmt_s(a, sizeof a, p->host_step_s), fmt_s(b, sizeof b, p->host_seq_s),
                fmt_s(c, sizeof c, p->host_token_s), in->n_host, 100 * hr->cv_median,
                100 * hr->cv_p90);
    else
        fprintf(f, "\nhost: not modelled (0): %s\n", in->host_note[0] ? in->host_note : "no samples");
    fprintf(f, "\nfit: %zu points", pr->n);
    if (pr->dropped) fprintf(f, ", %zu dropped as outliers (more than 8x the median error off)",
                             pr->dropped);
    fprintf(f, "; |predicted - measured| / measured: in sample median %.2f%%, p90 %.2f%%; "
               "%d-fold cross-validated median %.2f%%, p90 %.2f%%\n",
            100 * pr->fit_median, 100 * pr->fit_p90, folds, 100 * pr->cv_median,
            100 * pr->cv_p90);
    for (int k = 0; k < in->n_kinds; k++) {
        double med, p90;
        size_t n;
        kind_errors(pr, in->pass_kind, k, &med, &p90, &n);
        if (n) fprintf(f, "  %-20s %5zu points  cross-validated median %.2f%%, p90 %.2f%%\n",
                       in->kinds[k], n, 100 * med, 100 * p90);
    }
    fprintf(f, "\nextrapolation: fitted up to %.0f tokens, %.0f sequences, %.0f KV positions "
               "and %.0f pairs per pass. Beyond %.0f rows gemm grows in proportion to the rows "
               "(compute-bound, at the last knot's rate); attention and the per-sequence terms "
               "are linear, so longer contexts and larger batches follow their measured rates; "
               "nothing beyond the range was measured.\n",
            pr->max_tokens, pr->max_seqs, pr->max_kv_tokens, pr->max_attn_pairs,
            p->n_knots ? p->knot_rows[p->n_knots - 1] : 0.0);
}

void calib_json(FILE *f, const calib_input_t *in, const cost_file_t *cf,
                const fit_report_t *pr, const fit_report_t *hr) {
    fputs("{\"source\": ", f);
    report_json_str(f, in->source);
    fputs(", \"fitted_for\": ", f);
    report_json_str(f, cf->fitted_for);
    fputs(", \"cost\": ", f);
    cost_file_json(f, cf);
    fprintf(f, ", \"points\": %zu, \"dropped\": %zu, ", pr->n, pr->dropped);
    report_json_key_num(f, "fit_median_err", pr->fit_median, ", ");
    report_json_key_num(f, "fit_p90_err", pr->fit_p90, ", ");
    report_json_key_num(f, "cv_median_err", pr->cv_median, ", ");
    report_json_key_num(f, "cv_p90_err", pr->cv_p90, ", ");
    fputs("\"folded\": [", f);
    for (int t = 0, first = 1; t < FIT_TERMS; t++)
        if (pr->folded[t]) {
            fprintf(f, "%s\"%s\"", first ? "" : ", ", fit_term_names[t]);
            first = 0;
        }
    fprintf(f, "], \"host_points\": %zu, ", in->n_host);
    report_json_key_num(f, "host_cv_median_err", in->n_host ? hr->cv_median : NAN, ", ");
    fputs("\"by_kind\": {", f);
    for (int k = 0; k < in->n_kinds; k++) {
        double med, p90;
        size_t n;
        kind_errors(pr, in->pass_kind, k, &med, &p90, &n);
        report_json_str(f, in->kinds[k]);
        fprintf(f, ": {\"points\": %zu, ", n);
        report_json_key_num(f, "cv_median_err", med, ", ");
        report_json_key_num(f, "cv_p90_err", p90, "}");
        if (k + 1 < in->n_kinds) fputs(", ", f);
    }
    fputs("}}\n", f);
}
