/* calibrate_serving: see calibrate_serving.h. */
#include "analysis/calibrate_serving.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "traces/stats.h"
#include "traces/summary.h"
#include "sim/errf.h"
#include "traces/recorder.h"

/* A term the search may move: where it lives in a profile, its physical range and scale,
 * and whether only mixtures of experts feel it. */
typedef struct {
    const char *name;
    size_t offset;
    double lo, hi;
    int log, moe_only;
    const char *what;
} term_t;

#define SV(f) offsetof(serving_t, f)
static const term_t known[] = {
    /* FlashAttention-class decode kernels stream K/V at 60-95% of HBM bandwidth */
    {"attn_kv_bw_eff", SV(attn_kv_bw_eff), 0.5, 1.0, 0, 0,
     "attention's K/V read rate, a fraction of the HBM bandwidth"},
    {"moe_gemm_eff", SV(moe_gemm_eff), 0.3, 1.0, 0, 1,
     "the fused MoE kernel's products against a dense product of the same rows"},
    /* an API server's request handling: 0.1 ms (C) to 50 ms (a busy Python loop) */
    {"request_s", SV(request_s), 1e-4, 0.05, 1, 0,
     "the API server per request: HTTP, tokeniser call, hand-off to the engine and back"},
    /* Rust tokenisers do 0.1-1 us a token; Python around them up to ~20 us */
    {"prompt_token_s", SV(prompt_token_s), 1e-8, 2e-5, 1, 0, "the API server per prompt token"},
    {"token_s", SV(token_s), 1e-6, 2e-3, 1, 0,
     "the API server per streamed token: detokenise, serialise, send"},
    {"cpu_step_s", SV(cpu_step_s), 1e-5, 5e-3, 1, 0, "the engine core's CPU time per step"},
    {"cpu_seq_s", SV(cpu_seq_s), 1e-7, 1e-4, 1, 0, "its CPU time per scheduled sequence"},
    {"cpu_token_s", SV(cpu_token_s), 1e-9, 1e-5, 1, 0, "its CPU time per scheduled token"},
};
#define N_KNOWN ((int)(sizeof known / sizeof known[0]))
#define DEFAULT_TERMS "attn_kv_bw_eff,moe_gemm_eff,request_s,token_s"
#define GRID 7
#define REFINE 6

typedef struct {
    const calserv_opts_t *o;
    calserv_result_t *r;
    char db[CALSERV_MAX_RUNS][512];          /* each run alone, in a temporary database */
    const term_t *t[CALSERV_MAX_TERMS];
    int n;
    int fit[CALSERV_MAX_RUNS];               /* 1: in the fitted set of this search */
    double cached[CALSERV_MAX_RUNS];         /* each run's objective at the current terms */
    serving_t cur;
    int evals;
} search_t;

static double *at(serving_t *s, const term_t *t) { return (double *)((char *)s + t->offset); }

/* validate's stage errors, each |error| capped at 1, averaged over the stages that did
 * not overload. */
static double objective(const validate_result_t *vr) {
    double sum = 0;
    int n = 0;
    for (int i = 0; i < vr->n_stages; i++) {
        const validate_stage_t *g = &vr->stages[i];
        if (g->overloaded) continue;
        for (int k = 0; k < g->n; k++)
            if (isfinite(g->m[k].err)) sum += fmin(fabs(g->m[k].err), 1.0), n++;
    }
    return n ? sum / n : 1.0;
}

/* ------------------------------------------------------------------ replays */

/* Run k with profile s, into vr: a private copy of its database, removed after. */
static int replay(const search_t *x, int k, const serving_t *s, int itl, validate_result_t *vr,
                  char *err, size_t errlen) {
    char tmp[512];
    if (summary_copy_temp(x->db[k], "calserv", tmp, sizeof tmp, err, errlen) != 0) return -1;
    sim_opts_t so;
    if (x->o->sim) so = *x->o->sim;
    else sim_opts_defaults(&so);
    so.serving_profile = s;
    so.no_steps = 1;
    validate_opts_t vo = {.db_path = tmp, .run = x->r->run[k].name, .hw = x->o->hw,
                          .name = "calibrate-serving", .sim = &so, .version = "calibrate",
                          .skip_warmup_s = x->o->skip_warmup_s, .no_itl = !itl};
    int rc = validate_run(&vo, vr, err, errlen);
    rec_remove(tmp);
    return rc;
}

typedef struct {
    int rc;
    char err[1024];
    validate_result_t vr;
} reply_t;

static int full_read(int fd, void *buf, size_t n) {
    char *p = buf;
    while (n > 0) {
        ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

static int full_write(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t put = write(fd, p, n);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) return -1;
        p += put;
        n -= (size_t)put;
    }
    return 0;
}

/* The runs listed in which[0..n-1] replayed with s, o->jobs at a time in child processes;
 * out[i] gets run which[i]'s comparison. 0, or -1 with the first failure's message. */
static int replay_many(search_t *x, const int *which, int n, const serving_t *s, int itl,
                       validate_result_t *out, char *err, size_t errlen) {
    static reply_t rep;
    int jobs = x->o->jobs > 0 ? x->o->jobs : 1, rc = 0;
    for (int base = 0; base < n; base += jobs) {
        int m = n - base < jobs ? n - base : jobs, fds[CALSERV_MAX_RUNS];
        pid_t pids[CALSERV_MAX_RUNS];
        for (int j = 0; j < m; j++) {
            int p[2];
            fflush(NULL);
            if (pipe(p) != 0 || (pids[j] = fork()) < 0)
                return errf(err, errlen, "cannot start a replay: %s", strerror(errno));
            if (pids[j] == 0) {
                close(p[0]);
                memset(&rep, 0, sizeof rep);
                rep.rc = replay(x, which[base + j], s, itl, &rep.vr, rep.err, sizeof rep.err);
                _exit(full_write(p[1], &rep, sizeof rep) ? 3 : 0);
            }
            close(p[1]);
            fds[j] = p[0];
        }
        for (int j = 0; j < m; j++) {
            int got = full_read(fds[j], &rep, sizeof rep);
            close(fds[j]);
            int status;
            waitpid(pids[j], &status, 0);
            if (got != 0 || rep.rc != 0) {
                if (rc == 0)
                    errf(err, errlen, "replaying %s: %s", x->r->run[which[base + j]].name,
                         got ? "the replay died" : rep.err);
                rc = -1;
                continue;
            }
            out[base + j] = rep.vr;
        }
    }
    x->evals++;
    return rc;
}

/* The objective at profile s over the fitted runs that term t (NULL: any) can change;
 * the others keep their cached value. */
static double evaluate(search_t *x, const serving_t *s, const term_t *t, char *err,
                       size_t errlen) {
    static validate_result_t vr[CALSERV_MAX_RUNS];
    int which[CALSERV_MAX_RUNS] = {0}, n = 0;
    for (int k = 0; k < x->r->n_runs; k++)
        if (x->fit[k] && (!t || !t->moe_only || x->r->run[k].moe)) which[n++] = k;
    if (n && replay_many(x, which, n, s, 0, vr, err, errlen) != 0) return -1;
    double sum = 0;
    int m = 0;
    static double fresh[CALSERV_MAX_RUNS];
    for (int i = 0; i < n; i++) fresh[which[i]] = objective(&vr[i]);
    for (int k = 0; k < x->r->n_runs; k++) {
        if (!x->fit[k]) continue;
        int replayed = 0;
        for (int i = 0; i < n; i++) replayed |= which[i] == k;
        sum += replayed ? fresh[k] : x->cached[k];
        m++;
    }
    if (x->o->progress) {
        fprintf(stderr, "\r[calibrate] replays %d: objective %.2f%%   ", x->evals,
                100 * sum / (m ? m : 1));
        fflush(stderr);
    }
    return m ? sum / m : 1.0;
}

/* Keeps the cached per-run values of the current profile (after a term settles). */
static int refresh(search_t *x, double *best, char *err, size_t errlen) {
    static validate_result_t vr[CALSERV_MAX_RUNS];
    int which[CALSERV_MAX_RUNS] = {0}, n = 0;
    for (int k = 0; k < x->r->n_runs; k++)
        if (x->fit[k]) which[n++] = k;
    if (replay_many(x, which, n, &x->cur, 0, vr, err, errlen) != 0) return -1;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += x->cached[which[i]] = objective(&vr[i]);
    *best = n ? sum / n : 1.0;
    return 0;
}

static double pos(const term_t *t, double u) {   /* u in [0, 1] over the range */
    return t->log ? exp(log(t->lo) + u * (log(t->hi) - log(t->lo))) : t->lo + u * (t->hi - t->lo);
}

static double unpos(const term_t *t, double v) {   /* pos's inverse, clamped to [0, 1] */
    double u = t->log ? (log(fmax(v, t->lo)) - log(t->lo)) / (log(t->hi) - log(t->lo))
                      : (v - t->lo) / (t->hi - t->lo);
    return fmin(1, fmax(0, u));
}

/* A grid over the term's range, then golden-section steps between the neighbours of the
 * best point found (the current value counts as one). */
static int search_term(search_t *x, int k, double *best, char *err, size_t errlen) {
    const term_t *t = x->t[k];
    serving_t s = x->cur;
    double *v = at(&s, t), best_v = *at(&x->cur, t), f;
    const double h = 1.0 / (GRID - 1);
    double best_u = unpos(t, best_v);
    for (int i = 0; i < GRID; i++) {
        *v = pos(t, i * h);
        if ((f = evaluate(x, &s, t, err, errlen)) < 0) return -1;
        if (f < *best) *best = f, best_v = *v, best_u = i * h;
    }
    {
        const double g = 0.6180339887498949;
        double a = fmax(0, best_u - h), b = fmin(1, best_u + h);
        for (int it = 0; it < REFINE; it++) {
            double c = b - g * (b - a), d = a + g * (b - a);
            *v = pos(t, c);
            double fc = evaluate(x, &s, t, err, errlen);
            *v = pos(t, d);
            double fd = evaluate(x, &s, t, err, errlen);
            if (fc < 0 || fd < 0) return -1;
            if (fc < *best) *best = fc, best_v = pos(t, c);
            if (fd < *best) *best = fd, best_v = pos(t, d);
            if (fc < fd) b = d;
            else a = c;
        }
    }
    *at(&x->cur, t) = best_v;
    return refresh(x, best, err, errlen);
}

/* The whole search from the base profile over the runs in x->fit. */
static int search(search_t *x, const serving_t *base, double *best, char *err, size_t errlen) {
    x->cur = *base;
    if (refresh(x, best, err, errlen) != 0) return -1;
    for (int sweep = 0; sweep < CALSERV_SWEEPS; sweep++)
        for (int k = 0; k < x->n; k++)
            if (search_term(x, k, best, err, errlen) != 0) return -1;
    return 0;
}

/* ------------------------------------------------------------------ setup */

static int pick_terms(const calserv_opts_t *o, search_t *x, char *err, size_t errlen) {
    char list[512];
    snprintf(list, sizeof list, "%s", o->terms ? o->terms : DEFAULT_TERMS);
    x->n = 0;
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        int found = -1;
        for (int i = 0; i < N_KNOWN; i++)
            if (!strcmp(tok, known[i].name)) found = i;
        if (found < 0) {
            char names[512] = "";
            for (int i = 0; i < N_KNOWN; i++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         i ? ", " : "", known[i].name);
            return errf(err, errlen, "--fit: unknown term '%s' (%s)", tok, names);
        }
        for (int i = 0; i < x->n; i++)
            if (x->t[i] == &known[found]) return errf(err, errlen, "--fit: '%s' twice", tok);
        if (x->n == CALSERV_MAX_TERMS) return errf(err, errlen, "--fit: too many terms");
        x->t[x->n++] = &known[found];
    }
    return x->n ? 0 : errf(err, errlen, "--fit: no terms");
}

/* The runs: each measured run with load stages (or the named ones), its database alone in
 * a temporary copy. */
static int find_runs(const calserv_opts_t *o, search_t *x, char *err, size_t errlen) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    calserv_result_t *r = x->r;
    int rc = -1;
    if (summary_open(o->db_path, &db, err, errlen) != 0) return -1;
    if (sqlite3_prepare_v2(db, "SELECT name, coalesce(model, ''), EXISTS (SELECT 1 FROM "
                           "requests q WHERE q.run_id = runs.id AND q.status <> 'finished') "
                           "FROM runs WHERE kind = 'measured' AND json_extract(config, "
                           "'$.source.format') = 'inference-perf' ORDER BY id", -1, &st,
                           NULL) != SQLITE_OK) {
        errf(err, errlen, "%s: %s", o->db_path, sqlite3_errmsg(db));
        goto done;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        if (o->runs) {
            char list[2048];
            int want = 0;
            snprintf(list, sizeof list, "%s", o->runs);
            for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && !want;
                 tok = strtok_r(NULL, ",", &save))
                want = !strcmp(tok, name);
            if (!want) continue;
        }
        if (r->n_runs == CALSERV_MAX_RUNS) {
            errf(err, errlen, "more than %d runs", CALSERV_MAX_RUNS);
            goto done;
        }
        calserv_run_t *c = &r->run[r->n_runs++];
        snprintf(c->name, sizeof c->name, "%s", name);
        preset_model_t m;
        char e[256];
        c->moe = preset_model_get((const char *)sqlite3_column_text(st, 1), &m, e, sizeof e) == 0 &&
                 preset_model_is_moe(&m);
        c->overloaded = sqlite3_column_int(st, 2);
        c->mape_before = c->mape_after = c->loo_mape = NAN;
    }
    if (r->n_runs == 0) {
        errf(err, errlen, "%s has no measured run with load stages%s (twinserve import "
             "--inference-perf DIR)", o->db_path, o->runs ? " of those named" : "");
        goto done;
    }
    sqlite3_finalize(st);
    st = NULL;
    sqlite3_close(db);
    db = NULL;
    for (int k = 0; k < r->n_runs; k++) {
        if (summary_copy_temp(o->db_path, "calserv-run", x->db[k], sizeof x->db[k], err,
                              errlen) != 0)
            goto done;
        char sql[512];
        snprintf(sql, sizeof sql, "CREATE TEMP TABLE keep AS SELECT id FROM runs WHERE name = "
                 "'%s'; DELETE FROM requests WHERE run_id NOT IN keep; DELETE FROM steps "
                 "WHERE run_id NOT IN keep; DELETE FROM tokens WHERE run_id NOT IN keep; "
                 "DELETE FROM replicas WHERE run_id NOT IN keep; DELETE FROM runs WHERE id NOT "
                 "IN keep; DROP TABLE keep; VACUUM;", r->run[k].name);
        if (strchr(r->run[k].name, '\'')) {
            errf(err, errlen, "run name %s: a quote in a name is not supported here",
                 r->run[k].name);
            goto done;
        }
        char *msg = NULL;
        if (sqlite3_open(x->db[k], &db) != SQLITE_OK ||
            sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
            errf(err, errlen, "cannot prepare the replays of %s: %s", r->run[k].name,
                 msg ? msg : sqlite3_errmsg(db));
            sqlite3_free(msg);
            goto done;
        }
        sqlite3_close(db);
        db = NULL;
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc;
}

/* The |error| of mean TPOT (the client's) of each stage of a held-out run that did not
 * overload, into out; their count. */
static int held_out_tpot(const validate_result_t *vr, double *out) {
    int n = 0;
    for (int i = 0; i < vr->n_stages; i++) {
        const validate_stage_t *g = &vr->stages[i];
        if (g->overloaded) continue;
        for (int k = 0; k < g->n; k++)
            if (!strncmp(g->m[k].name, "TPOT mean", 9) && isfinite(g->m[k].err))
                out[n++] = fabs(g->m[k].err);
    }
    return n;
}

/* The profile of the fold that held run `name` out, as DIR/NAME.serving. */
static int write_fold(const calserv_opts_t *o, const search_t *x, const char *name, char *err,
                      size_t errlen) {
    char path[1200], comment[512];
    serving_t s = x->cur;
    snprintf(path, sizeof path, "%s/%s.serving", o->loo_dir, name);
    snprintf(s.source, sizeof s.source, "calibrate --serving --loo: fitted without %.200s",
             name);
    snprintf(comment, sizeof comment, "the fold of calibrate --serving --loo that held %.200s "
             "out: its terms fitted on the other runs only", name);
    return serving_write(path, &s, comment, err, errlen);
}

int calserv_fit(const calserv_opts_t *o, calserv_result_t *r, char *err, size_t errlen) {
    static search_t x;
    static validate_result_t vr[CALSERV_MAX_RUNS];
    serving_t base;
    int rc = -1, all[CALSERV_MAX_RUNS];
    memset(r, 0, sizeof *r);
    memset(&x, 0, sizeof x);
    x.o = o;
    x.r = r;
    char e[1024];
    if (serving_get(o->base ? o->base : "vllm", &base, e, sizeof e) != 0)
        return errf(err, errlen, "--serving: %s", e);
    if (!base.active)
        return errf(err, errlen, "the base profile '%s' is the bare GPU: nothing to fit",
                    base.name);
    if (pick_terms(o, &x, err, errlen) != 0 || find_runs(o, &x, err, errlen) != 0) goto done;
    r->n_terms = x.n;
    for (int k = 0; k < x.n; k++) {
        snprintf(r->term[k], sizeof r->term[k], "%s", x.t[k]->name);
        r->before[k] = *at(&base, x.t[k]);
    }
    int n_fit = 0;
    for (int k = 0; k < r->n_runs; k++) x.fit[k] = !r->run[k].overloaded, n_fit += x.fit[k];
    if (n_fit == 0) {
        errf(err, errlen, "every run overloaded (client timeouts): their latencies are "
             "censored, there is nothing to fit to");
        goto done;
    }
    /* before: the base profile on every run */
    for (int k = 0; k < r->n_runs; k++) all[k] = k;
    if (replay_many(&x, all, r->n_runs, &base, 1, vr, err, errlen) != 0) goto done;
    for (int k = 0; k < r->n_runs; k++) r->run[k].mape_before = vr[k].stage_mape;
    double best;
    if (search(&x, &base, &best, err, errlen) != 0) goto done;
    r->fitted = x.cur;
    for (int k = 0; k < x.n; k++) r->value[k] = r->lo[k] = r->hi[k] = *at(&r->fitted, x.t[k]);
    /* held out: the whole search on the others, this one predicted */
    r->loo = o->loo && n_fit > 1;
    double cv = 0, tpot_err[CALSERV_MAX_RUNS * VALIDATE_MAX_STAGES];
    int n_tpot = 0;
    if (r->loo && o->loo_dir && mkdir(o->loo_dir, 0777) != 0 && errno != EEXIST) {
        errf(err, errlen, "--loo-dir %s: %s", o->loo_dir, strerror(errno));
        goto done;
    }
    for (int j = 0; r->loo && j < r->n_runs; j++) {
        if (r->run[j].overloaded) continue;
        x.fit[j] = 0;
        int rc2 = search(&x, &base, &best, err, errlen);
        x.fit[j] = 1;
        if (rc2 != 0) goto done;
        if (replay_many(&x, &j, 1, &x.cur, 1, vr, err, errlen) != 0) goto done;
        r->run[j].loo_mape = vr[0].stage_mape;
        cv += vr[0].stage_mape;
        n_tpot += held_out_tpot(&vr[0], tpot_err + n_tpot);
        if (o->loo_dir && write_fold(o, &x, r->run[j].name, err, errlen) != 0) goto done;
        for (int k = 0; k < x.n; k++) {
            double v = *at(&x.cur, x.t[k]);
            r->run[j].loo_value[k] = v;
            r->lo[k] = fmin(r->lo[k], v);
            r->hi[k] = fmax(r->hi[k], v);
        }
    }
    r->cv_mape = r->loo ? cv / n_fit : NAN;
    r->step_cv_err = n_tpot ? stats_percentile(tpot_err, (size_t)n_tpot, 50) : NAN;
    r->step_cv_n = n_tpot;
    /* the final comparison, tokens and ITL included, on every run */
    if (replay_many(&x, all, r->n_runs, &r->fitted, 1, r->final, err, errlen) != 0) goto done;
    double fit = 0;
    for (int k = 0; k < r->n_runs; k++) {
        r->run[k].mape_after = r->final[k].stage_mape;
        if (x.fit[k]) fit += r->final[k].stage_mape;
    }
    r->fit_mape = fit / n_fit;
    r->evals = x.evals;
    r->fitted.fit_runs = n_fit;
    r->fitted.fit_mape = r->fit_mape;
    r->fitted.cv_mape = r->cv_mape;
    r->fitted.step_cv_err = r->step_cv_err;
    rc = 0;
done:
    if (o->progress) fputc('\n', stderr);
    for (int k = 0; k < r->n_runs; k++)
        if (x.db[k][0]) rec_remove(x.db[k]);
    return rc;
}

void calserv_print(FILE *f, const calserv_result_t *r) {
    fprintf(f, "serving profile fitted by simulation to %d measured runs (%d replays)\n",
            r->n_runs, r->evals);
    fprintf(f, "\n  %-16s %11s %11s %23s   %s\n", "term", "before", "fitted",
            r->loo ? "over the held-out folds" : "", "what it stands for");
    for (int k = 0; k < r->n_terms; k++) {
        const char *what = "";
        for (int i = 0; i < N_KNOWN; i++)
            if (!strcmp(known[i].name, r->term[k])) what = known[i].what;
        char range[64] = "";
        if (r->loo) snprintf(range, sizeof range, "%.4g .. %.4g", r->lo[k], r->hi[k]);
        fprintf(f, "  %-16s %11.4g %11.4g %23s   %s\n", r->term[k], r->before[k], r->value[k],
                range, what);
    }
    fprintf(f, "\nstage MAPE per run (the client's metrics of the stages that did not "
               "overload):\n  %-36s %10s %10s %10s\n", "run", "before", "fitted",
            r->loo ? "held out" : "");
    for (int k = 0; k < r->n_runs; k++) {
        const calserv_run_t *c = &r->run[k];
        if (c->overloaded) {
            const validate_result_t *v = &r->final[k];
            int64_t fm = 0, fp = 0, n = 0;
            for (int i = 0; i < v->n_stages; i++)
                fm += v->stages[i].failed_meas, fp += v->stages[i].failed_pred,
                    n += v->stages[i].count;
            fprintf(f, "  %-36s overloaded: %lld of %lld requests timed out, predicted %lld "
                       "(not fitted to)\n", c->name, (long long)fm, (long long)n, (long long)fp);
            continue;
        }
        fprintf(f, "  %-36s %9.2f%% %9.2f%% ", c->name, 100 * c->mape_before, 100 * c->mape_after);
        if (r->loo) fprintf(f, "%9.2f%%", 100 * c->loo_mape);
        fputc('\n', f);
    }
    fprintf(f, "  %-36s %10s %9.2f%% ", "mean of the fitted runs", "", 100 * r->fit_mape);
    if (r->loo) fprintf(f, "%9.2f%%", 100 * r->cv_mape);
    fputc('\n', f);
    if (r->loo)
        fprintf(f, "\nheld out, a step's time (mean TPOT of %d stages): median |error| %.2f%%, "
                   "the profile's step_cv_err (--band's default width)\n", r->step_cv_n,
                100 * r->step_cv_err);
}
