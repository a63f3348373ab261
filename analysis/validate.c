/* validate: see validate.h. */
#include "analysis/validate.h"

#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "traces/stats.h"
#include "traces/summary.h"
#include "analysis/validate_internal.h"
#include "engine/engine.h"
#include "sim/cost_file.h"
#include "sim/sim.h"

int validate_simulate(const validate_opts_t *o, sim_opts_t *so, validate_result_t *r,
                      sim_result_t *res, char *err, size_t errlen) {
    char e[4096];
    so->cost_scale = o->cost_scale > 0 ? o->cost_scale : 1;
    int rc = sim_run(so, res, e, sizeof e);
    r->sim_id = res->run_id;
    r->band_stated = res->band_err;
    snprintf(r->band_stated_src, sizeof r->band_stated_src, "%s", res->band_src);
    return rc ? errf(err, errlen, "the simulated replay failed: %s", e) : 0;
}

FILE *validate_temp_trace(char *path, size_t len, char *err, size_t errlen) {
    const char *tmpdir = getenv("TMPDIR");
    snprintf(path, len, "%s/twinserve-replay-XXXXXX.csv", tmpdir && *tmpdir ? tmpdir : "/tmp");
    int fd = mkstemps(path, 4);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        errf(err, errlen, "cannot create a temporary trace %s", path);
        if (fd >= 0) close(fd);
        else path[0] = '\0';
    }
    return f;
}

static int simulate(const validate_opts_t *o, const workload_t *w, const char *name,
                    validate_result_t *r, char *err, size_t errlen) {
    sim_opts_t so;
    sim_opts_defaults(&so);
    so.trace_path = w->trace;
    so.trace_opts = w->topts;
    so.policy_path = w->policy;
    so.sets = (const char *const *)w->sets;
    so.n_sets = w->n_sets;
    so.model_shape = &w->shape;
    so.draft_shape = w->draft ? &w->draft_shape : NULL;
    if (o->hw) so.hw = o->hw;
    so.cost_path = o->cost_path;
    so.db_path = o->db_path;
    so.run_name = name;
    so.seed = w->seed;
    so.block_size = w->block_size;
    so.max_tokens = w->max_tokens;
    so.max_seqs = w->max_seqs;
    so.max_model_len = w->max_model_len;
    so.kv_blocks = w->num_blocks;
    so.watermark = w->watermark;
    so.save_tokens = w->save_tokens;
    so.oracle_lengths = w->oracle_lengths;
    so.max_output_tokens = w->max_output_tokens;
    so.clip_to_context = w->clip_to_context;
    so.prefix_caching = w->prefix_caching;
    /* The engine records server-side times: a cost file's client-side terms (sim.h) would
     * predict something it never measured, so they do not apply here. */
    so.client = (sim_client_t){ 0, 0, 0 };
    /* our engine has no vLLM around it: its replay prices the bare passes, whatever the
     * hardware preset named for the roofline */
    so.serving = "none";
    /* --hw means the roofline here, the model the per-step comparison uses; a shipped GPU
     * calibration is named with --cost builtin:NAME */
    so.roofline = !o->cost_path;
    so.version = o->version;
    char extra[128];
    snprintf(extra, sizeof extra, "\"validate\":{\"of\":%lld}", (long long)w->id);
    so.config_extra = extra;
    sim_result_t res;
    return validate_simulate(o, &so, r, &res, err, errlen);
}

static int rerun_engine(const validate_opts_t *o, const workload_t *w, const char *name,
                        int64_t *id, char *err, size_t errlen) {
    engine_opts_t eo;
    engine_opts_defaults(&eo);
    eo.trace_path = w->trace;
    eo.trace_opts = w->topts;
    eo.policy_path = w->policy;
    eo.sets = (const char *const *)w->sets;
    eo.n_sets = w->n_sets;
    eo.model = w->model_spec;
    eo.draft = w->draft ? w->draft_spec : NULL;
    eo.backend = w->backend[0] ? w->backend : "cpu";
    eo.n_threads = w->threads;
    eo.dtype = w->dtype[0] ? w->dtype : NULL;
    /* the products and the KV cache as the run had them (absent: the defaults then) */
    eo.weights = w->weights[0] ? w->weights : NULL;
    eo.kv_type = w->kv_type[0] ? w->kv_type : NULL;
    eo.policy_cost = w->policy_cost[0] ? w->policy_cost : NULL; /* the policy's estimates too */
    eo.batch_invariant = w->batch_invariant;
    eo.db_path = o->db_path;
    eo.run_name = name;
    eo.seed = w->seed;
    eo.temperature = (float)w->temperature;
    eo.top_k = w->top_k;
    eo.top_p = (float)w->top_p;
    eo.save_tokens = w->save_tokens;
    eo.block_size = w->block_size;
    eo.max_tokens = w->max_tokens;
    eo.max_seqs = w->max_seqs;
    eo.max_model_len = w->max_model_len;
    eo.kv_blocks = w->num_blocks;
    eo.watermark = w->watermark;
    eo.oracle_lengths = w->oracle_lengths;
    eo.max_output_tokens = w->max_output_tokens;
    eo.clip_to_context = w->clip_to_context;
    eo.prefix_caching = w->prefix_caching;
    eo.version = o->version;
    engine_result_t res;
    char e[4096];
    int rc = engine_run(&eo, &res, e, sizeof e);
    *id = res.run_id;
    if (rc != 0) return errf(err, errlen, "the engine repeat %s failed: %s", name, e);
    return 0;
}

/* ------------------------------------------------------------------ comparing */

static void add_metric(validate_result_t *r, const char *name, int is_time, int headline,
                       const double *measured, int n_meas, double predicted) {
    if (r->n >= VALIDATE_MAX_METRICS) return;
    validate_metric_t *m = &r->m[r->n++];
    snprintf(m->name, sizeof m->name, "%s", name);
    m->is_time = is_time;
    m->headline = headline;
    m->measured = measured[0];
    m->predicted = predicted;
    m->err = isfinite(measured[0]) && measured[0] != 0 && isfinite(predicted)
                 ? (predicted - measured[0]) / measured[0] : NAN;
    m->lo = m->hi = m->spread = NAN;
    if (n_meas > 1) {
        double v[1 + VALIDATE_MAX_REPEAT];
        int k = 0;
        for (int i = 0; i < n_meas; i++)
            if (isfinite(measured[i])) v[k++] = measured[i];
        if (k > 1) {
            stats_sort(v, (size_t)k);
            m->lo = v[0];
            m->hi = v[k - 1];
            double med = stats_percentile_sorted(v, (size_t)k, 50);
            m->spread = med != 0 ? (m->hi - m->lo) / med : NAN;
        }
    }
}

/* One distribution's rows: mean, p50, p90, p99 (the percentiles are headline metrics for
 * the headline distributions). */
static void add_dist(validate_result_t *r, const char *label, int headline,
                     const stats_dist_t *const *meas, int n_meas, const stats_dist_t *pred) {
    const char *q[4] = {"mean", "p50", "p90", "p99"};
    for (int k = 0; k < 4; k++) {
        double v[1 + VALIDATE_MAX_REPEAT], p;
        for (int i = 0; i < n_meas; i++) {
            const stats_dist_t *d = meas[i];
            v[i] = k == 0 ? d->mean : k == 1 ? d->p50 : k == 2 ? d->p90 : d->p99;
        }
        p = k == 0 ? pred->mean : k == 1 ? pred->p50 : k == 2 ? pred->p90 : pred->p99;
        char name[32];
        snprintf(name, sizeof name, "%s %s", label, q[k]);
        add_metric(r, name, 1, headline && k > 0, v, n_meas, p);
    }
}

static void step_summary(double *e, size_t n, validate_steps_t *out) {
    out->n = n;
    out->median = out->p90 = out->bias = NAN;
    if (!n) return;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += e[i];
        e[i] = fabs(e[i]);
    }
    out->bias = sum / (double)n;
    stats_sort(e, n);
    out->median = stats_percentile_sorted(e, n, 50);
    out->p90 = stats_percentile_sorted(e, n, 90);
}

/* Each engine step's pass (and host time) against the cost model's prediction for its
 * recorded features. */
static int compare_steps(sqlite3 *db, int64_t id, const cost_model_t *cm,
                         validate_result_t *r, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    double *all = NULL, *dec = NULL, *pro = NULL, *host = NULL;
    size_t na = 0, nd = 0, np = 0, nh = 0, cap = 0;
    int rc = -1;
    if (sqlite3_prepare_v2(db, "SELECT step, dur_s, host_s, tokens, pass_seqs, sampled, "
                           "kv_tokens, attn_pairs FROM steps WHERE run_id = ?1 ORDER BY step",
                           -1, &st, NULL) != SQLITE_OK) {
        errf(err, errlen, "cannot read the run's steps: %s", sqlite3_errmsg(db));
        goto done;
    }
    sqlite3_bind_int64(st, 1, id);
    int s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (na == cap) {
            cap = cap ? 2 * cap : 1024;
            double *a = realloc(all, sizeof *a * cap), *b = realloc(dec, sizeof *b * cap);
            double *c = realloc(pro, sizeof *c * cap), *d = realloc(host, sizeof *d * cap);
            if (a) all = a;
            if (b) dec = b;
            if (c) pro = c;
            if (d) host = d;
            if (!a || !b || !c || !d) {
                errf(err, errlen, "out of memory");
                goto done;
            }
        }
        cost_features_t f = {.tokens = sqlite3_column_int64(st, 3),
                             .seqs = sqlite3_column_int64(st, 4),
                             .sampled = sqlite3_column_int64(st, 5),
                             .kv_tokens = sqlite3_column_int64(st, 6),
                             .attn_pairs = sqlite3_column_int64(st, 7)};
        double dur = sqlite3_column_double(st, 1);
        if (f.tokens < 1 || !(dur > 0)) continue;
        double e = (cost_pass_time(cm, &f) - dur) / dur;
        all[na++] = e;
        if (f.tokens == f.seqs) dec[nd++] = e;
        else pro[np++] = e;
        double h = sqlite3_column_double(st, 2);
        if (sqlite3_column_int64(st, 0) > 0 && h > 0 && cm->host_time)
            host[nh++] = (cost_host_time(cm, &f) - h) / h;
    }
    if (s != SQLITE_DONE) {
        errf(err, errlen, "cannot read the run's steps: %s", sqlite3_errmsg(db));
        goto done;
    }
    step_summary(all, na, &r->pass);
    step_summary(dec, nd, &r->pass_decode);
    step_summary(pro, np, &r->pass_prompt);
    step_summary(host, nh, &r->host);
    rc = 0;
done:
    sqlite3_finalize(st);
    free(all);
    free(dec);
    free(pro);
    free(host);
    return rc;
}

int validate_compare_runs(sqlite3 *db, const int64_t *meas_ids, int n_meas, int64_t sim_id,
                          int requests_only, validate_result_t *r, char *err, size_t errlen) {
    report_t *mr = calloc((size_t)n_meas, sizeof *mr), pr;
    const stats_dist_t *d[1 + VALIDATE_MAX_REPEAT] = {0};
    double v[1 + VALIDATE_MAX_REPEAT] = {0};
    int rc = -1;
    if (!mr) return errf(err, errlen, "out of memory");
    for (int i = 0; i < n_meas; i++)
        if (report_load(db, meas_ids[i], NULL, &mr[i], err, errlen) != 0) goto done;
    if (report_load(db, sim_id, NULL, &pr, err, errlen) != 0) goto done;
#define DISTS(field) for (int i = 0; i < n_meas; i++) d[i] = &mr[i].field
    DISTS(base.ttft);
    add_dist(r, "TTFT", 1, d, n_meas, &pr.base.ttft);
    DISTS(base.tpot);
    add_dist(r, "TPOT", 1, d, n_meas, &pr.base.tpot);
    if (mr[0].itl.n > 0 && pr.itl.n > 0) {
        DISTS(itl);
        add_dist(r, "ITL", 0, d, n_meas, &pr.itl);
    }
    DISTS(base.e2e);
    add_dist(r, "E2E", 1, d, n_meas, &pr.base.e2e);
    if (!requests_only) {
        DISTS(base.queue);
        add_dist(r, "queue", 0, d, n_meas, &pr.base.queue);
    }
#undef DISTS
    for (int i = 0; i < n_meas; i++) v[i] = mr[i].base.out_tok_per_s;
    add_metric(r, "output tok/s", 0, 1, v, n_meas, pr.base.out_tok_per_s);
    for (int i = 0; i < n_meas; i++) v[i] = mr[i].base.req_per_s;
    add_metric(r, "requests/s", 0, 0, v, n_meas, pr.base.req_per_s);
    for (int i = 0; i < n_meas; i++) v[i] = mr[i].base.makespan_s;
    add_metric(r, "makespan", 1, 0, v, n_meas, pr.base.makespan_s);
    if (!requests_only) {   /* only our engine measures these */
        for (int i = 0; i < n_meas; i++) v[i] = (double)mr[i].base.preemptions;
        add_metric(r, "preemptions", 0, 0, v, n_meas, (double)pr.base.preemptions);
        for (int i = 0; i < n_meas; i++) v[i] = (double)mr[i].base.steps;
        add_metric(r, "steps", 0, 0, v, n_meas, (double)pr.base.steps);
    }
    double sum = 0;
    r->mape_n = 0;
    for (int i = 0; i < r->n; i++)
        if (r->m[i].headline && isfinite(r->m[i].err)) {
            sum += fabs(r->m[i].err);
            r->mape_n++;
        }
    r->mape = r->mape_n ? sum / r->mape_n : NAN;
    rc = 0;
done:
    free(mr);
    return rc;
}

/* ------------------------------------------------------------------ the entry point */

int validate_run(const validate_opts_t *o, validate_result_t *r, char *err, size_t errlen) {
    sqlite3 *db = NULL;
    workload_t w;
    int have_w = 0, rc = -1;
    cost_model_t *cm = NULL;
    cost_file_t *cf = NULL;
    int64_t id;
    memset(r, 0, sizeof *r);
    r->engine_id = r->sim_id = -1;
    if (o->repeat < 0 || o->repeat > VALIDATE_MAX_REPEAT)
        return errf(err, errlen, "--repeat must be 0 to %d", VALIDATE_MAX_REPEAT);
    if (summary_open(o->db_path, &db, err, errlen) != 0) return -1;
    if (o->run) {
        if (summary_find_run(db, o->run, &id, err, errlen) != 0) goto done;
    } else {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db, "SELECT max(id) FROM runs WHERE kind IN ('engine', "
                               "'serve', 'measured')", -1, &st, NULL) != SQLITE_OK ||
            sqlite3_step(st) != SQLITE_ROW || sqlite3_column_type(st, 0) == SQLITE_NULL) {
            sqlite3_finalize(st);
            errf(err, errlen, "%s has no engine, serve or measured run to validate", o->db_path);
            goto done;
        }
        id = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    /* A measured run has no workload record to replay: it takes its own path; the
     * replay options it needs are refused for any other run, whose record has them. */
    char kind[16], name[256];
    if (validate_run_kind(db, id, kind, sizeof kind, name, sizeof name, err, errlen) != 0)
        goto done;
    if (!strcmp(kind, "measured")) {
        int staged = validate_ip_is(db, id);
        sqlite3_close(db);
        db = NULL;
        rc = staged ? validate_ip(o, id, r, err, errlen) : validate_measured(o, id, r, err, errlen);
        goto done;
    }
    if (o->sim && kind[0]) {
        errf(err, errlen, "run '%s' is a%s %s run: --policy, --set, --model, --tp, --seed and "
             "the limits are for measured runs (twinserve import), whose record lacks them; "
             "an engine run's come from its own record", name, kind[0] == 'e' ? "n" : "", kind);
        goto done;
    }
    if (validate_load_workload(db, o->db_path, id, &w, err, errlen) != 0) goto done;
    have_w = 1;
    r->engine_id = id;
    snprintf(r->engine_name, sizeof r->engine_name, "%s", w.name);

    /* the cost model, for the per-step comparison (the simulator builds its own the same
     * way from the same options) */
    char e[1024];
    if (o->cost_path) {
        if (!(cf = malloc(sizeof *cf))) {
            errf(err, errlen, "out of memory");
            goto done;
        }
        if (cost_file_read(o->cost_path, cf, e, sizeof e) != 0) {
            errf(err, errlen, "--cost: %s", e);
            goto done;
        }
        if (cost_file_same_shape(&w.shape, &cf->model, e, sizeof e) != 0) {
            errf(err, errlen, "run '%s' ran a model of another shape than the cost file %s "
                 "was fitted for (%s)", w.name, o->cost_path, e);
            goto done;
        }
        if (!(cm = cost_file_model(cf, 1, e, sizeof e))) {
            errf(err, errlen, "%s", e);
            goto done;
        }
        snprintf(r->cost_desc, sizeof r->cost_desc, "cost file %.200s (%.80s)", o->cost_path,
                 cf->fitted_for);
    } else {
        if (!o->hw) {
            errf(err, errlen, "run '%s' ran on %s: give the cost model to predict it with, "
                 "--cost FILE (from twinserve calibrate), or --hw PRESET for the roofline",
                 w.name, w.backend);
            goto done;
        }
        preset_hw_t hw;
        if (preset_hw_get(o->hw, &hw, e, sizeof e) != 0) {
            errf(err, errlen, "--hw: %s", e);
            goto done;
        }
        cost_roofline_params_t p;
        cost_roofline_defaults(&p);
        if (cost_roofline_check(&w.shape, &hw, &p, e, sizeof e) != 0 ||
            !(cm = cost_roofline_new(&w.shape, &hw, &p))) {
            errf(err, errlen, "roofline: %s", e);
            goto done;
        }
        snprintf(r->cost_desc, sizeof r->cost_desc, "roofline on %s (default efficiencies)",
                 hw.name);
    }

    /* names and runs: the summary connection is closed while others write */
    char base[300], sim_name[300];
    snprintf(base, sizeof base, "validate-%s", w.name);
    if (o->name) snprintf(sim_name, sizeof sim_name, "%s", o->name);
    else if (summary_free_name(db, base, sim_name, sizeof sim_name) != 0) {
        errf(err, errlen, "%s: %s", o->db_path, sqlite3_errmsg(db));
        goto done;
    }
    sqlite3_close(db);
    db = NULL;
    r->measured_ids[0] = id;
    r->n_runs = 1;
    for (int k = 1; k <= o->repeat; k++) {
        char rep[300], want[300];
        snprintf(want, sizeof want, "%s-rep%d", w.name, k);
        sqlite3 *tmp;
        if (summary_open(o->db_path, &tmp, err, errlen) != 0) goto done;
        summary_free_name(tmp, want, rep, sizeof rep);
        sqlite3_close(tmp);
        if (o->progress) fprintf(stderr, "[validate] engine repeat %d/%d: %s\n", k, o->repeat, rep);
        if (rerun_engine(o, &w, rep, &r->measured_ids[k], err, errlen) != 0) goto done;
        r->n_runs++;
    }
    if (o->progress) fprintf(stderr, "[validate] simulating %s\n", sim_name);
    if (simulate(o, &w, sim_name, r, err, errlen) != 0) goto done;
    snprintf(r->sim_name, sizeof r->sim_name, "%.250s", sim_name);
    if (summary_open(o->db_path, &db, err, errlen) != 0) goto done;
    if (validate_compare_runs(db, r->measured_ids, r->n_runs, r->sim_id, 0, r, err, errlen))
        goto done;
    /* a draft run's steps hold the draft's passes too, which their recorded features (the
     * target's pass) do not describe: no per-step comparison */
    if (w.draft)
        snprintf(r->note, sizeof r->note, "speculative with draft model %.200s: simulated with "
                 "its shape and the measured alpha %.3f; no per-step comparison (a step's time "
                 "holds the draft's passes, its recorded work the target's)", w.draft_spec,
                 w.alpha);
    else if (compare_steps(db, id, cm, r, err, errlen) != 0) goto done;
    rc = 0;
done:
    if (db) sqlite3_close(db);
    if (have_w) validate_workload_free(&w);
    cost_free(cm);
    free(cf);
    return rc;
}
