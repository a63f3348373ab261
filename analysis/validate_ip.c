/* validate_ip: validate for a measured run with load stages, as `import --inference-perf`
 * records one (validate.h has the per-stage metrics; docs/fidelity.md, "vLLM on H100").
 *
 * The replay is the measured server's, as far as its record says:
 *  - every request, failed ones too (a client that timed out still cost the server its
 *    work until then), at its arrival, with its prompt (imputed where the client never got
 *    one) and the workload's output length (ignore_eos);
 *  - the server's flags: max_num_batched_tokens (the step budget), max_num_seqs,
 *    max_model_len, block size, tensor parallelism; its prefix cache on (vLLM's default
 *    since V1), each request's prompt being prompt (i mod N) of the workload's N cycled
 *    prompts (inference-perf's shared_prefix generator: the import checked it), so that
 *    repeats hit the cache exactly as far as the cache holds them;
 *  - the client's timeout (aiohttp's 300 s): the simulator gives up the same requests;
 *  - the metrics client-side, with the serving profile the simulator picks (vllm on a GPU).
 * The comparison is per stage, with the client's own TPOT and ITL definitions, and
 * overloaded stages (failures on either side) apart. */
#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "traces/stats.h"
#include "traces/summary.h"
#include "analysis/validate_internal.h"

typedef struct {
    int32_t max_tokens, max_seqs, max_model_len, block_size, tp;
    int64_t prompt_cycle;
    double timeout_s;
    int n_stages;
    validate_stage_t st[VALIDATE_MAX_STAGES];
    /* the client's own figures per stage: TPOT mean, ITL p75, p90, p99 (NAN: absent) */
    double tpot[VALIDATE_MAX_STAGES], itl[VALIDATE_MAX_STAGES][3];
} ip_run_t;

static double col_num(sqlite3_stmt *st, int c) {
    return sqlite3_column_type(st, c) == SQLITE_NULL ? NAN : sqlite3_column_double(st, c);
}

int validate_ip_is(sqlite3 *db, int64_t id) {
    sqlite3_stmt *st = NULL;
    int is = 0;
    if (sqlite3_prepare_v2(db, "SELECT json_extract(config, '$.source.format') = "
                           "'inference-perf' AND json_type(config, '$.stages') = 'array' "
                           "FROM runs WHERE id = ?1", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, id);
        if (sqlite3_step(st) == SQLITE_ROW) is = sqlite3_column_int(st, 0);
    }
    sqlite3_finalize(st);
    return is;
}

static int load(sqlite3 *db, int64_t id, const char *name, ip_run_t *x, char *err,
                size_t errlen) {
    sqlite3_stmt *st = NULL;
    int rc = -1;
    memset(x, 0, sizeof *x);
    if (sqlite3_prepare_v2(db, "SELECT json_extract(config, '$.server.max_num_batched_tokens'), "
                           "json_extract(config, '$.server.max_num_seqs'), "
                           "json_extract(config, '$.server.max_model_len'), "
                           "json_extract(config, '$.server.block_size'), "
                           "json_extract(config, '$.server.tp'), "
                           "json_extract(config, '$.workload.prompt_cycle'), "
                           "json_extract(config, '$.client.timeout_s') FROM runs WHERE id = ?1",
                           -1, &st, NULL) != SQLITE_OK)
        goto sqlerr;
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) != SQLITE_ROW) goto sqlerr;
    for (int c = 0; c < 5; c++)
        if (sqlite3_column_type(st, c) == SQLITE_NULL) {
            errf(err, errlen, "run '%s' does not record its server's flags (config \"server\": "
                 "max_num_batched_tokens, max_num_seqs, max_model_len, block_size, tp): import "
                 "it again", name);
            goto done;
        }
    x->max_tokens = sqlite3_column_int(st, 0);
    x->max_seqs = sqlite3_column_int(st, 1);
    x->max_model_len = sqlite3_column_int(st, 2);
    x->block_size = sqlite3_column_int(st, 3);
    x->tp = sqlite3_column_int(st, 4);
    x->prompt_cycle = sqlite3_column_int64(st, 5);
    x->timeout_s = col_num(st, 6);
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT json_extract(s.value, '$.stage'), "
                           "json_extract(s.value, '$.rate'), json_extract(s.value, '$.duration_s'), "
                           "json_extract(s.value, '$.first'), json_extract(s.value, '$.count'), "
                           "json_extract(s.value, '$.summary.tpot.mean'), "
                           "json_extract(s.value, '$.summary.itl.p75'), "
                           "json_extract(s.value, '$.summary.itl.p90'), "
                           "json_extract(s.value, '$.summary.itl.p99') "
                           "FROM runs, json_each(runs.config, '$.stages') s WHERE runs.id = ?1 "
                           "ORDER BY s.key", -1, &st, NULL) != SQLITE_OK)
        goto sqlerr;
    sqlite3_bind_int64(st, 1, id);
    int s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (x->n_stages == VALIDATE_MAX_STAGES) {
            errf(err, errlen, "run '%s' has more than %d stages", name, VALIDATE_MAX_STAGES);
            goto done;
        }
        validate_stage_t *g = &x->st[x->n_stages];
        g->stage = sqlite3_column_int(st, 0);
        g->rate = col_num(st, 1);
        g->duration_s = col_num(st, 2);
        g->first = sqlite3_column_int64(st, 3);
        g->count = sqlite3_column_int64(st, 4);
        x->tpot[x->n_stages] = col_num(st, 5);
        for (int k = 0; k < 3; k++) x->itl[x->n_stages][k] = col_num(st, 6 + k);
        if (g->count < 1 || g->first < 0) {
            errf(err, errlen, "run '%s': stage %d covers no requests", name, g->stage);
            goto done;
        }
        x->n_stages++;
    }
    if (s != SQLITE_DONE) goto sqlerr;
    rc = 0;
    goto done;
sqlerr:
    errf(err, errlen, "cannot read run '%s': %s", name, sqlite3_errmsg(db));
done:
    sqlite3_finalize(st);
    return rc;
}

/* The replay's plain trace: every request by arrival, each prompt named by its place in the
 * workload's cycle (and its length: a prompt of another length is another text). */
static int write_trace(sqlite3 *db, int64_t id, const ip_run_t *x, FILE *f, char *err,
                       size_t errlen) {
    sqlite3_stmt *st = NULL;
    int rc = -1, s;
    if (sqlite3_prepare_v2(db, "SELECT req_id, arrival_s, prompt_tokens, output_tokens FROM "
                           "requests WHERE run_id = ?1 ORDER BY arrival_s, req_id", -1, &st,
                           NULL) != SQLITE_OK)
        goto sqlerr;
    sqlite3_bind_int64(st, 1, id);
    fprintf(f, x->prompt_cycle > 0 ? "arrival_s,prompt_tokens,output_tokens,prefix_group,"
                                     "prefix_tokens\n"
                                   : "arrival_s,prompt_tokens,output_tokens\n");
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t rid = sqlite3_column_int64(st, 0);
        int prompt = sqlite3_column_int(st, 2), out = sqlite3_column_int(st, 3);
        if (out < 1 || prompt < 1) {
            errf(err, errlen, "request %lld has %d prompt and %d output tokens: nothing to "
                 "replay (import the experiment again)", (long long)rid, prompt, out);
            goto done;
        }
        if (x->prompt_cycle > 0)
            fprintf(f, "%.9f,%d,%d,c%lld-%d,%d\n", sqlite3_column_double(st, 1), prompt, out,
                    (long long)(rid % x->prompt_cycle), prompt, prompt);
        else
            fprintf(f, "%.9f,%d,%d\n", sqlite3_column_double(st, 1), prompt, out);
    }
    if (s != SQLITE_DONE) goto sqlerr;
    if (fflush(f) != 0 || ferror(f)) {
        errf(err, errlen, "cannot write the replay's trace");
        goto done;
    }
    rc = 0;
    goto done;
sqlerr:
    errf(err, errlen, "cannot read the requests: %s", sqlite3_errmsg(db));
done:
    sqlite3_finalize(st);
    return rc;
}

/* One side's requests in [first, first + count), arriving after skip_s. */
typedef struct {
    double *ttft, *e2e, *tpot;
    size_t n;
    int64_t failed, skipped;
} side_t;

static void side_free(side_t *s) {
    free(s->ttft);
    free(s->e2e);
    free(s->tpot);
    memset(s, 0, sizeof *s);
}

/* Request ids are the trace's: the replay numbers its requests in arrival order, as the
 * import does, so a stage's id range is the same on both sides. */
static int load_side(sqlite3 *db, int64_t run, const validate_stage_t *g, double skip_s,
                     side_t *s, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int rc = -1, q;
    memset(s, 0, sizeof *s);
    size_t cap = (size_t)g->count + 1;
    s->ttft = malloc(sizeof *s->ttft * cap);
    s->e2e = malloc(sizeof *s->e2e * cap);
    s->tpot = malloc(sizeof *s->tpot * cap);
    if (!s->ttft || !s->e2e || !s->tpot) {
        errf(err, errlen, "out of memory");
        goto done;
    }
    if (sqlite3_prepare_v2(db, "SELECT status, ttft_s, e2e_s, output_tokens, arrival_s FROM "
                           "requests WHERE run_id = ?1 AND req_id >= ?2 AND req_id < ?3", -1,
                           &st, NULL) != SQLITE_OK) {
        errf(err, errlen, "cannot read the requests: %s", sqlite3_errmsg(db));
        goto done;
    }
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int64(st, 2, g->first);
    sqlite3_bind_int64(st, 3, g->first + g->count);
    while ((q = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_double(st, 4) < skip_s) {
            s->skipped++;
            continue;
        }
        const char *status = (const char *)sqlite3_column_text(st, 0);
        double ttft = col_num(st, 1), e2e = col_num(st, 2);
        if (!status || strcmp(status, "finished") != 0 || !isfinite(ttft) || !isfinite(e2e)) {
            s->failed++;
            continue;
        }
        s->ttft[s->n] = ttft;
        s->e2e[s->n] = e2e;
        s->tpot[s->n] = (e2e - ttft) / (2.0 * sqlite3_column_int(st, 3) + 1.0);
        s->n++;
    }
    if (q != SQLITE_DONE) {
        errf(err, errlen, "cannot read the requests: %s", sqlite3_errmsg(db));
        goto done;
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    return rc;
}

/* The client's ITL percentiles over a stage's simulated token times: each finished
 * request's n - 1 token gaps plus n + 2 gaps of ~0 (its message pairs and the closing
 * usage and [DONE] messages). */
static int sim_itl(sqlite3 *db, int64_t run, const validate_stage_t *g, double skip_s,
                   double out[3], char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    double *gap = NULL;
    size_t n = 0, cap = 0, zeros = 0;
    int rc = -1, q;
    int64_t cur = -1;
    double last = 0;
    int64_t ntok = 0;
    out[0] = out[1] = out[2] = NAN;
    if (sqlite3_prepare_v2(db, "SELECT t.req_id, t.t_s FROM tokens t JOIN requests r ON "
                           "r.run_id = t.run_id AND r.req_id = t.req_id WHERE t.run_id = ?1 "
                           "AND t.req_id >= ?2 AND t.req_id < ?3 AND r.status = 'finished' "
                           "AND r.arrival_s >= ?4 ORDER BY t.req_id, t.idx", -1, &st,
                           NULL) != SQLITE_OK) {
        errf(err, errlen, "cannot read the tokens: %s", sqlite3_errmsg(db));
        goto done;
    }
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int64(st, 2, g->first);
    sqlite3_bind_int64(st, 3, g->first + g->count);
    sqlite3_bind_double(st, 4, skip_s);
    while ((q = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t rid = sqlite3_column_int64(st, 0);
        double t = sqlite3_column_double(st, 1);
        if (rid != cur) {
            if (cur >= 0) zeros += (size_t)ntok + 2;
            cur = rid;
            ntok = 0;
        } else {
            if (n == cap) {
                cap = cap ? 2 * cap : 65536;
                double *v = realloc(gap, sizeof *v * cap);
                if (!v) {
                    errf(err, errlen, "out of memory");
                    goto done;
                }
                gap = v;
            }
            gap[n++] = t - last;
        }
        last = t;
        ntok++;
    }
    if (q != SQLITE_DONE) {
        errf(err, errlen, "cannot read the tokens: %s", sqlite3_errmsg(db));
        goto done;
    }
    if (cur >= 0) zeros += (size_t)ntok + 2;
    if (n > 0) {
        stats_sort(gap, n);
        const double p[3] = {75, 90, 99};
        const double total = (double)(n + zeros);
        for (int k = 0; k < 3; k++) {
            /* numpy's linear rule over zeros followed by the sorted gaps */
            double pos = p[k] / 100.0 * (total - 1), lo = floor(pos), f = pos - lo;
            double a = lo < (double)zeros ? 0 : gap[(size_t)lo - zeros];
            double b = lo + 1 < (double)zeros ? 0
                       : gap[(size_t)fmin(lo + 1 - (double)zeros, (double)n - 1)];
            out[k] = a + f * (b - a);
        }
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    free(gap);
    return rc;
}

static void metric(validate_stage_t *g, const char *name, double meas, double pred) {
    validate_metric_t *m = &g->m[g->n++];
    snprintf(m->name, sizeof m->name, "%s", name);
    m->is_time = 1;
    m->headline = 1;
    m->measured = meas;
    m->predicted = pred;
    m->err = isfinite(meas) && meas > 0 && isfinite(pred) ? (pred - meas) / meas : NAN;
    m->lo = m->hi = m->spread = NAN;
}

static void dist(validate_stage_t *g, const char *label, double *a, size_t na, double *b,
                 size_t nb) {
    static const char *const q[4] = {"mean", "p50", "p90", "p99"};
    stats_sort(a, na);
    stats_sort(b, nb);
    for (int k = 0; k < 4; k++) {
        char name[32];
        snprintf(name, sizeof name, "%s %s", label, q[k]);
        double ma = NAN, mb = NAN;
        if (na) ma = k == 0 ? stats_mean(a, na) : stats_percentile_sorted(a, na, k == 1 ? 50 : k == 2 ? 90 : 99);
        if (nb) mb = k == 0 ? stats_mean(b, nb) : stats_percentile_sorted(b, nb, k == 1 ? 50 : k == 2 ? 90 : 99);
        metric(g, name, ma, mb);
    }
}

static int compare(sqlite3 *db, int64_t mid, int64_t sid, const ip_run_t *x,
                   const validate_opts_t *o, validate_result_t *r, char *err, size_t errlen) {
    double sum = 0;
    int n = 0;
    r->n_stages = x->n_stages;
    for (int i = 0; i < x->n_stages; i++) {
        validate_stage_t *g = &r->stages[i];
        *g = x->st[i];
        g->n = 0;
        side_t a, b;
        if (load_side(db, mid, g, o->skip_warmup_s, &a, err, errlen)) return -1;
        if (load_side(db, sid, g, o->skip_warmup_s, &b, err, errlen)) {
            side_free(&a);
            return -1;
        }
        g->finished_meas = (int64_t)a.n, g->finished_pred = (int64_t)b.n;
        g->failed_meas = a.failed, g->failed_pred = b.failed, g->skipped = a.skipped;
        g->overloaded = a.failed > 0 || b.failed > 0;
        dist(g, "TTFT", a.ttft, a.n, b.ttft, b.n);
        dist(g, "E2E", a.e2e, a.n, b.e2e, b.n);
        double tpot_meas = isfinite(x->tpot[i]) && o->skip_warmup_s <= 0 ? x->tpot[i]
                           : a.n ? stats_mean(a.tpot, a.n) : NAN;
        metric(g, "TPOT mean (ip)", tpot_meas, b.n ? stats_mean(b.tpot, b.n) : NAN);
        double itl[3] = {NAN, NAN, NAN};
        if (!o->no_itl && sim_itl(db, sid, g, o->skip_warmup_s, itl, err, errlen)) {
            side_free(&a);
            side_free(&b);
            return -1;
        }
        static const char *const iq[3] = {"ITL p75 (ip)", "ITL p90 (ip)", "ITL p99 (ip)"};
        for (int k = 0; k < 3 && !o->no_itl; k++) metric(g, iq[k], x->itl[i][k], itl[k]);
        side_free(&a);
        side_free(&b);
        double s = 0;
        g->mape_n = 0;
        for (int k = 0; k < g->n; k++)
            if (isfinite(g->m[k].err)) s += fabs(g->m[k].err), g->mape_n++;
        g->mape = g->mape_n ? s / g->mape_n : NAN;
        if (!g->overloaded && g->mape_n) sum += s, n += g->mape_n;
    }
    r->stage_mape = n ? sum / n : NAN;
    r->stage_mape_n = n;
    return 0;
}

int validate_ip(const validate_opts_t *o, int64_t id, validate_result_t *r, char *err,
                size_t errlen) {
    sqlite3 *db = NULL;
    ip_run_t *x = calloc(1, sizeof *x);
    char trace[PATH_MAX] = "", name[256] = "", kind[16], sim_name[300], base[300];
    char extra[600], model[256] = "", hw[256] = "";
    FILE *tf = NULL;
    int rc = -1;
    if (!x) return errf(err, errlen, "out of memory");
    r->engine_id = id;
    r->measured = 1;
    r->n_runs = 1;
    r->measured_ids[0] = id;
    if (summary_open(o->db_path, &db, err, errlen) != 0) goto done;
    if (validate_run_kind(db, id, kind, sizeof kind, name, sizeof name, err, errlen)) goto done;
    snprintf(r->engine_name, sizeof r->engine_name, "%s", name);
    if (o->repeat > 0) {
        errf(err, errlen, "run '%s' is a measured run: a measurement taken elsewhere cannot be "
             "rerun (--repeat)", name);
        goto done;
    }
    if (load(db, id, name, x, err, errlen)) goto done;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT coalesce(model, ''), coalesce(hardware, '') FROM runs "
                           "WHERE id = ?1", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, id);
        if (sqlite3_step(st) == SQLITE_ROW) {
            validate_copy_text(model, sizeof model, st, 0);
            validate_copy_text(hw, sizeof hw, st, 1);
        }
    }
    sqlite3_finalize(st);
    sim_opts_t so;
    if (o->sim) so = *o->sim;
    else {
        sim_opts_defaults(&so);
        so.watermark = NAN;
    }
    if (!so.policy_path) {
        if (access("policies/vllm.lua", R_OK) != 0) {
            errf(err, errlen, "run '%s' was measured on vLLM: give the policy to replay it "
                 "with, --policy policies/vllm.lua (vLLM's scheduler; not found from here)", name);
            goto done;
        }
        so.policy_path = "policies/vllm.lua";
    }
    if (!so.model && !o->cost_path) {
        preset_model_t pm;
        char e[512];
        if (!model[0] || preset_model_get(model, &pm, e, sizeof e) != 0) {
            errf(err, errlen, "run '%s' names %s%s%s: give --model PRESET|config.json", name,
                 model[0] ? "the model '" : "no model", model, model[0] ? "', not a preset" : "");
            goto done;
        }
        so.model = model;
    }
    if (o->hw) so.hw = o->hw;
    else if (!so.hw && hw[0]) so.hw = hw;
    if (!so.hw && !o->cost_path) {
        errf(err, errlen, "run '%s' names no hardware: give --hw PRESET (the GPU it ran on)",
             name);
        goto done;
    }
    so.cost_path = o->cost_path;
    /* the measured server's flags: what ran, not the simulator's defaults */
    so.max_tokens = x->max_tokens;
    so.max_seqs = x->max_seqs;
    so.max_model_len = x->max_model_len;
    so.block_size = x->block_size;
    so.tp = x->tp > 0 ? x->tp : 1;
    so.prefix_caching = 1;
    /* vLLM v1 admits without a free-block watermark (policies/vllm.lua's header) */
    if (isnan(so.watermark)) so.watermark = 0;
    if (isfinite(x->timeout_s) && x->timeout_s > 0) so.client_timeout_s = x->timeout_s;
    snprintf(base, sizeof base, "validate-%s", name);
    if (o->name) snprintf(sim_name, sizeof sim_name, "%s", o->name);
    else if (summary_free_name(db, base, sim_name, sizeof sim_name) != 0) {
        errf(err, errlen, "%s: %s", o->db_path, sqlite3_errmsg(db));
        goto done;
    }
    if (!(tf = validate_temp_trace(trace, sizeof trace, err, errlen))) goto done;
    if (write_trace(db, id, x, tf, err, errlen) != 0) goto done;
    fclose(tf);
    tf = NULL;
    /* the stages, for report --by stage on the replay (the same request ids) */
    char *stages = NULL;
    if (sqlite3_prepare_v2(db, "SELECT json_group_array(json_object('stage', json_extract(s.value, "
                           "'$.stage'), 'rate', json_extract(s.value, '$.rate'), 'duration_s', "
                           "json_extract(s.value, '$.duration_s'), 'first', json_extract(s.value, "
                           "'$.first'), 'count', json_extract(s.value, '$.count'))) FROM runs, "
                           "json_each(runs.config, '$.stages') s WHERE runs.id = ?1", -1, &st,
                           NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, id);
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
            stages = strdup((const char *)sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    db = NULL;
    snprintf(extra, sizeof extra, "\"validate\":{\"of\":%lld,\"arrivals\":\"recorded\"},"
             "\"stages\":%.400s", (long long)id, stages ? stages : "[]");
    free(stages);
    so.trace_path = trace;
    so.trace_opts.format = TRACE_FMT_PLAIN;
    so.db_path = o->db_path;
    so.run_name = sim_name;
    so.save_tokens = !o->no_itl;
    so.progress = o->progress;
    so.version = o->version;
    so.config_extra = extra;
    if (o->progress) fprintf(stderr, "[validate] simulating %s\n", sim_name);
    sim_result_t res;
    if (validate_simulate(o, &so, r, &res, err, errlen) != 0) goto done;
    snprintf(r->sim_name, sizeof r->sim_name, "%.250s", sim_name);
    snprintf(r->cost_desc, sizeof r->cost_desc, "%.200s; serving %.60s", res.calibration,
             res.serving);
    snprintf(r->note, sizeof r->note, "every request at its arrival (failed ones too), the "
             "server's flags (budget %d, max_num_seqs %d, max_model_len %d, block %d, tp %d), "
             "prefix caching on with prompt i mod %lld of the workload's cycle, the client's "
             "%.0f s timeout%s", (int)x->max_tokens, (int)x->max_seqs, (int)x->max_model_len,
             (int)x->block_size, (int)x->tp, (long long)x->prompt_cycle,
             isfinite(x->timeout_s) ? x->timeout_s : 0,
             o->skip_warmup_s > 0 ? "; stage metrics leave out the first seconds (warm-up)" : "");
    if (summary_open(o->db_path, &db, err, errlen) != 0) goto done;
    if (validate_compare_runs(db, &id, 1, r->sim_id, 1, r, err, errlen) != 0) goto done;
    if (compare(db, id, r->sim_id, x, o, r, err, errlen) != 0) goto done;
    rc = 0;
done:
    if (tf) fclose(tf);
    if (trace[0]) unlink(trace);
    if (db) sqlite3_close(db);
    free(x);
    return rc;
}
