/* validate_measured: validate for a measured run (validate.h; the run comes from
 * analysis/import.h). What the import lacks, the policy and the simulator's options, comes
 * from the caller; what it has, the requests, becomes a plain trace in a temporary file
 * that the simulator replays like any other:
 *  - arrivals recorded (a CSV, or vLLM's start_times): each finished request at its
 *    arrival with its prompt and output lengths, in arrival order: the same workload;
 *  - arrivals unknown (vLLM's result without start_times): arrivals drawn as vLLM's
 *    benchmark draws them, the first request at 0 and then gamma gaps of shape burstiness
 *    and mean 1/request_rate (exponential when burstiness is 1; all at 0 for rate "inf";
 *    traces/trace_gen.h's generator, seeded by the caller's seed), one per recorded request
 *    in its order, the finished ones keeping their lengths. Only the distributions can
 *    then be compared, and the note says so.
 * Failed requests are left out of the replay either way: what they cost the server is not
 * in the measurement. */
#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "traces/summary.h"
#include "analysis/validate_internal.h"
#include "sim/cost_file.h"
#include "sim/presets.h"
#include "traces/trace_gen.h"

/* What the measured run's row and config say. */
typedef struct {
    char name[256], source[PATH_MAX], model[256], hw[256];
    int arrivals_known;
    double rate;               /* requests/s (INFINITY: "inf"); unknown arrivals only */
    double burstiness;         /* 1 when the result did not record it */
    int64_t max_concurrency;   /* the benchmark's client-side cap; 0: none */
    int32_t tp;                /* 0: not recorded */
    int has_tokens;
    int64_t requests, finished;
} measured_t;

int validate_run_kind(sqlite3 *db, int64_t id, char *kind, size_t klen, char *name,
                      size_t nlen, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int ret = -1, rc;
    kind[0] = name[0] = '\0';
    if (sqlite3_prepare_v2(db, "SELECT kind, name FROM runs WHERE id = ?1", -1, &st, NULL) ==
        SQLITE_OK) {
        sqlite3_bind_int64(st, 1, id);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            validate_copy_text(kind, klen, st, 0);
            validate_copy_text(name, nlen, st, 1);
        }
        if (rc == SQLITE_ROW || rc == SQLITE_DONE) ret = 0;
    }
    if (ret < 0) errf(err, errlen, "cannot read run %lld: %s", (long long)id, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return ret;
}

static const char SQL_MEASURED[] =
    "SELECT name, status, trace, model, hardware, json_extract(config, '$.arrivals'), "
    " json_type(config, '$.vllm.request_rate'), json_extract(config, '$.vllm.request_rate'), "
    " json_extract(config, '$.vllm.burstiness'), json_extract(config, '$.vllm.max_concurrency'), "
    " json_extract(config, '$.tp'), EXISTS (SELECT 1 FROM tokens t WHERE t.run_id = runs.id), "
    " (SELECT count(*) FROM requests q WHERE q.run_id = runs.id), "
    " (SELECT count(*) FROM requests q WHERE q.run_id = runs.id AND q.status = 'finished' "
    "  AND q.output_tokens >= 1) "
    "FROM runs WHERE id = ?1";

static int load_measured(sqlite3 *db, const char *path, int64_t id, measured_t *m, char *err,
                         size_t errlen) {
    sqlite3_stmt *st = NULL;
    char status[32], arrivals[32], rate_type[16];
    int rc = -1;
    memset(m, 0, sizeof *m);
    if (validate_run_row(db, path, SQL_MEASURED, id, &st, err, errlen) != 0) goto done;
    validate_copy_text(m->name, sizeof m->name, st, 0);
    validate_copy_text(status, sizeof status, st, 1);
    validate_copy_text(m->source, sizeof m->source, st, 2);
    validate_copy_text(m->model, sizeof m->model, st, 3);
    validate_copy_text(m->hw, sizeof m->hw, st, 4);
    validate_copy_text(arrivals, sizeof arrivals, st, 5);
    validate_copy_text(rate_type, sizeof rate_type, st, 6);
    m->burstiness = sqlite3_column_type(st, 8) == SQLITE_NULL ? 1 : sqlite3_column_double(st, 8);
    m->max_concurrency = sqlite3_column_int64(st, 9);
    m->tp = sqlite3_column_int(st, 10);
    m->has_tokens = sqlite3_column_int(st, 11);
    m->requests = sqlite3_column_int64(st, 12);
    m->finished = sqlite3_column_int64(st, 13);
    if (strcmp(status, "done") != 0) {
        errf(err, errlen, "run '%s' in %s is %s, not done: its import did not complete",
             m->name, path, status);
        goto done;
    }
    m->arrivals_known = !strcmp(arrivals, "recorded");
    if (!m->arrivals_known && strcmp(arrivals, "unknown") != 0) {
        errf(err, errlen, "run '%s' does not say whether its arrival times are known (config "
             "\"arrivals\"): import it again", m->name);
        goto done;
    }
    if (!m->arrivals_known) {
        const char *text = (const char *)sqlite3_column_text(st, 7);
        if (!strcmp(rate_type, "text") && text && !strcmp(text, "inf")) m->rate = INFINITY;
        else if (!strcmp(rate_type, "integer") || !strcmp(rate_type, "real"))
            m->rate = sqlite3_column_double(st, 7);
        if (!(m->rate > 0) || !(m->burstiness > 0)) {
            errf(err, errlen, "run '%s' has no arrival times and does not record the request "
                 "rate and burstiness to draw them from (config vllm.request_rate): import "
                 "it again", m->name);
            goto done;
        }
    }
    if (m->finished == 0) {
        errf(err, errlen, "run '%s' has no finished request to replay", m->name);
        goto done;
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    return rc;
}

/* The plain trace the simulator replays (see the top of this file). */
static int write_trace(sqlite3 *db, int64_t id, const measured_t *m, uint64_t seed, FILE *f,
                       char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    tgen_t *g = NULL;
    int rc = -1, s;
    const char *sql = m->arrivals_known
        ? "SELECT 1, arrival_s, prompt_tokens, output_tokens FROM requests WHERE run_id = ?1 "
          "AND status = 'finished' AND output_tokens >= 1 ORDER BY arrival_s, req_id"
        : "SELECT status = 'finished' AND output_tokens >= 1, 0, prompt_tokens, output_tokens "
          "FROM requests WHERE run_id = ?1 ORDER BY req_id";
    if (!m->arrivals_known && isfinite(m->rate)) {
        tgen_opts_t to;
        char e[256];
        tgen_opts_default(&to);
        to.n = m->requests;
        to.rate = m->rate;
        to.seed = seed;
        /* burstiness b: gaps gamma(shape b, scale 1/(rate b)), a coefficient of variation
         * 1/sqrt(b) in trace_gen's terms; b = 1 is vLLM's Poisson process */
        to.arrival.kind = m->burstiness == 1 ? TGEN_ARRIVAL_POISSON : TGEN_ARRIVAL_GAMMA;
        to.arrival.cv = 1 / sqrt(m->burstiness);
        if (tgen_dist_parse("fixed:1", &to.prompt, e, sizeof e) != 0 ||
            tgen_dist_parse("fixed:1", &to.output, e, sizeof e) != 0 || !(g = tgen_open(&to)) ||
            tgen_errmsg(g)) {
            errf(err, errlen, "cannot draw the arrivals: %s", g ? tgen_errmsg(g) : "out of memory");
            goto done;
        }
    }
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) goto sql_error;
    sqlite3_bind_int64(st, 1, id);
    fprintf(f, "arrival_s,prompt_tokens,output_tokens\n");
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        double arrival = sqlite3_column_double(st, 1);
        tgen_req_t q;
        if (g) {   /* every recorded request had its arrival drawn, failed ones too */
            if (tgen_next(g, &q) != 1) {
                errf(err, errlen, "cannot draw the arrivals: %s", tgen_errmsg(g));
                goto done;
            }
            arrival = q.arrival_s;
        }
        if (sqlite3_column_int(st, 0))
            fprintf(f, "%.9f,%d,%d\n", arrival, sqlite3_column_int(st, 2),
                    sqlite3_column_int(st, 3));
    }
    if (s != SQLITE_DONE) goto sql_error;
    if (fflush(f) != 0 || ferror(f)) {
        errf(err, errlen, "cannot write the replay's trace");
        goto done;
    }
    rc = 0;
    goto done;
sql_error:
    errf(err, errlen, "cannot read the requests of run '%s': %s", m->name, sqlite3_errmsg(db));
done:
    sqlite3_finalize(st);
    tgen_close(g);
    return rc;
}

/* The simulator's model, hardware and cost description: the caller's, else the run's when
 * they name presets (or preset files). */
static int choose_model(const validate_opts_t *o, const measured_t *m, sim_opts_t *so,
                        validate_result_t *r, char *err, size_t errlen) {
    char e[1024];
    preset_model_t pm;
    preset_hw_t ph;
    if (!so->model && !o->cost_path) {
        if (!m->model[0] || preset_model_get(m->model, &pm, e, sizeof e) != 0)
            return errf(err, errlen, "run '%s' %s%s%s: give the model to simulate, --model "
                        "PRESET|FILE, or a cost file (--cost FILE), which carries one", m->name,
                        m->model[0] ? "names the model '" : "names no model",
                        m->model[0] ? m->model : "", m->model[0] ? "', not a preset" : "");
        so->model = m->model;
    }
    so->hw = o->hw;
    if (!so->hw && m->hw[0] && preset_hw_get(m->hw, &ph, e, sizeof e) == 0) so->hw = m->hw;
    if (!so->hw && !o->cost_path)
        return errf(err, errlen, "run '%s' %s: give the cost model to predict it with, --cost "
                    "FILE (from twinserve calibrate), or --hw PRESET for the roofline", m->name,
                    m->hw[0] ? "names no hardware preset" : "names no hardware");
    /* without one, sim takes the cost file's hardware (its KV capacity), else a100-80g */
    if (!o->cost_path) {
        snprintf(r->cost_desc, sizeof r->cost_desc, "roofline on %.200s (default efficiencies)",
                 so->hw);
        return 0;
    }
    cost_file_t *cf = malloc(sizeof *cf);
    if (!cf) return errf(err, errlen, "out of memory");
    int rc = cost_file_read(o->cost_path, cf, e, sizeof e);
    if (rc == 0)
        snprintf(r->cost_desc, sizeof r->cost_desc, "cost file %.200s (%.80s)", o->cost_path,
                 cf->fitted_for);
    else errf(err, errlen, "--cost: %s", e);
    free(cf);
    return rc;
}

static void describe(const measured_t *m, uint64_t seed, validate_result_t *r) {
    char rate[64], extra[200] = "";
    size_t n = 0;
    if (m->requests > m->finished)
        n += (size_t)snprintf(extra + n, sizeof extra - n, "; %lld failed request%s left out",
                              (long long)(m->requests - m->finished),
                              m->requests - m->finished > 1 ? "s" : "");
    if (m->max_concurrency > 0 && n < sizeof extra)
        snprintf(extra + n, sizeof extra - n, "; the benchmark's client capped concurrency at "
                 "%lld, which the replay does not", (long long)m->max_concurrency);
    if (m->arrivals_known) {
        snprintf(r->note, sizeof r->note, "the measured requests exactly (arrival times, prompt "
                 "and output lengths)%s", extra);
        return;
    }
    if (isfinite(m->rate)) snprintf(rate, sizeof rate, "at %.6g req/s", m->rate);
    else snprintf(rate, sizeof rate, "all at once (request rate inf)");
    snprintf(r->note, sizeof r->note, "compares distributions (arrivals regenerated): %lld "
             "requests %s, burstiness %.6g, seed %llu, drawn as vLLM's benchmark draws them, "
             "with the measured lengths%s", (long long)m->requests, rate, m->burstiness,
             (unsigned long long)seed, extra);
}

/* One replay of the measured workload with arrival seed so->seed, recorded as `name` and
 * compared into r (its metrics; the cost description when a shipped calibration ran). The
 * temporary trace is written to trace[tlen] and removed after. 0, or -1 with a message. */
static int replay_seed(const validate_opts_t *o, const measured_t *m, int64_t id, sim_opts_t *so,
                       const char *name, char *extra, size_t extralen, char *trace,
                       size_t tlen, validate_result_t *r, char *err, size_t errlen) {
    sqlite3 *db = NULL;
    FILE *tf = NULL;
    int rc = -1;
    if (summary_open(o->db_path, &db, err, errlen) != 0) return -1;
    if (!(tf = validate_temp_trace(trace, tlen, err, errlen))) goto done;
    if (write_trace(db, id, m, so->seed, tf, err, errlen) != 0) goto done;
    fclose(tf);
    tf = NULL;
    sqlite3_close(db);   /* closed while the simulator writes */
    db = NULL;
    so->trace_path = trace;
    so->run_name = name;
    snprintf(extra, extralen, "\"validate\":{\"of\":%lld,\"arrivals\":\"%s\",\"seed\":%llu}",
             (long long)id, m->arrivals_known ? "recorded" : "regenerated",
             (unsigned long long)so->seed);
    so->config_extra = extra;
    if (o->progress) fprintf(stderr, "[validate] simulating %s\n", name);
    sim_result_t res;
    if (validate_simulate(o, so, r, &res, err, errlen) != 0) goto done;
    if (!strncmp(res.calibration, "builtin:", 8))   /* the simulator picked a shipped one */
        snprintf(r->cost_desc, sizeof r->cost_desc, "shipped calibration %.200s",
                 res.calibration);
    if (summary_open(o->db_path, &db, err, errlen) != 0) goto done;
    if (validate_compare_runs(db, &id, 1, r->sim_id, 1, r, err, errlen) != 0) goto done;
    rc = 0;
done:
    if (tf) fclose(tf);
    if (trace[0]) unlink(trace);
    trace[0] = '\0';
    if (db) sqlite3_close(db);
    return rc;
}

int validate_measured(const validate_opts_t *o, int64_t id, validate_result_t *r, char *err,
                      size_t errlen) {
    sqlite3 *db = NULL;
    measured_t m;
    char trace[PATH_MAX] = "", sim_name[300], base[300], extra[200];
    FILE *tf = NULL;
    int rc = -1;
    r->engine_id = id;
    r->measured = 1;
    r->n_runs = 1;
    r->measured_ids[0] = id;
    if (summary_open(o->db_path, &db, err, errlen) != 0) return -1;
    if (load_measured(db, o->db_path, id, &m, err, errlen) != 0) goto done;
    snprintf(r->engine_name, sizeof r->engine_name, "%s", m.name);
    if (o->repeat > 0 && m.arrivals_known) {
        errf(err, errlen, "run '%s' is a measured run (imported from %s): --repeat reruns our "
             "engine, and a measurement taken elsewhere cannot be rerun (its arrivals are "
             "recorded: nothing in its replay is drawn at random)", m.name, m.source);
        goto done;
    }
    if (!o->sim || !o->sim->policy_path) {
        errf(err, errlen, "run '%s' is a measured run (imported from %s): give the policy to "
             "replay its requests with, --policy FILE (with --set, --model, --tp, --kv-blocks, "
             "... as for sim)", m.name, m.source);
        goto done;
    }
    sim_opts_t so = *o->sim;
    if (isnan(so.watermark)) so.watermark = 0.01;   /* not given: sim's default */
    if (choose_model(o, &m, &so, r, err, errlen) != 0) goto done;
    so.cost_path = o->cost_path;
    if (so.tp <= 0) so.tp = m.tp > 0 ? m.tp : 1;
    snprintf(base, sizeof base, "validate-%s", m.name);
    if (o->name) snprintf(sim_name, sizeof sim_name, "%s", o->name);
    else if (summary_free_name(db, base, sim_name, sizeof sim_name) != 0) {
        errf(err, errlen, "%s: %s", o->db_path, sqlite3_errmsg(db));
        goto done;
    }
    sqlite3_close(db);   /* closed while the simulator writes */
    db = NULL;
    so.trace_opts.format = TRACE_FMT_PLAIN;
    so.db_path = o->db_path;
    so.save_tokens = so.save_tokens || m.has_tokens;
    so.progress = o->progress;
    so.version = o->version;
    /* regenerated arrivals: with --repeat N, N more arrival seeds, their predictions' range
     * beside each metric (the seed's own spread, not the model's error) */
    r->n_seeds = 1 + (o->repeat > 0 ? o->repeat : 0);
    uint64_t seed0 = so.seed;
    for (int k = 0; k < r->n_seeds; k++) {
        static validate_result_t side;
        validate_result_t *into = k ? &side : r;
        char name[320];
        so.seed = seed0 + (uint64_t)k;
        if (k == 0) snprintf(name, sizeof name, "%s", sim_name);
        else if (summary_open(o->db_path, &db, err, errlen) != 0) goto done;
        else {
            char want[340];
            snprintf(want, sizeof want, "%.300s-seed%llu", sim_name, (unsigned long long)so.seed);
            summary_free_name(db, want, name, sizeof name);
            sqlite3_close(db);
            db = NULL;
        }
        if (k) memset(&side, 0, sizeof side);
        if (replay_seed(o, &m, id, &so, name, extra, sizeof extra, trace, sizeof trace, into,
                        err, errlen) != 0)
            goto done;
        if (k == 0) {
            snprintf(r->sim_name, sizeof r->sim_name, "%.250s", sim_name);
            describe(&m, so.seed, r);
        }
        for (int q = 0; q < r->n; q++) {
            double v = k ? NAN : r->m[q].predicted;
            for (int z = 0; k && z < side.n; z++)
                if (!strcmp(side.m[z].name, r->m[q].name)) v = side.m[z].predicted;
            r->m[q].pred_lo = k ? fmin(r->m[q].pred_lo, v) : v;
            r->m[q].pred_hi = k ? fmax(r->m[q].pred_hi, v) : v;
        }
    }
    rc = 0;
done:
    if (tf) fclose(tf);
    if (trace[0]) unlink(trace);
    if (db) sqlite3_close(db);
    return rc;
}
