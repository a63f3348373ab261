/* calibrate_sim: see calibrate_sim.h. */
#include "analysis/calibrate_sim.h"

#include <math.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "traces/summary.h"
#include "sim/errf.h"
#include "traces/recorder.h"

/* A term the search may move: where it lives in a cost file and its physical range (the
 * grid's ends; 0 is always tried too). */
typedef struct {
    const char *name;
    size_t offset;
    double lo, hi;
    const char *what;
} calsim_term_t;

static const calsim_term_t known[] = {
    {"host_step_s", offsetof(cost_file_t, lin.host_step_s), 1e-6, 0.1,
     "the engine's CPU time per step (scheduling, input preparation, output processing)"},
    {"host_seq_s", offsetof(cost_file_t, lin.host_seq_s), 1e-8, 1e-2,
     "its CPU time per sequence in a step"},
    {"client_request_s", offsetof(cost_file_t, client_request_s), 1e-5, 1.0,
     "the API front end per request, before the scheduler"},
    {"client_token_s", offsetof(cost_file_t, client_token_s), 1e-7, 0.05,
     "each streamed token at the client"},
};
#define N_KNOWN ((int)(sizeof known / sizeof known[0]))
#define GRID 9          /* log-spaced points per term, besides 0 */
#define REFINE 8        /* golden-section steps around the best grid point */

typedef struct {
    const calsim_opts_t *o;
    const char *db;              /* the temporary copy */
    char cost[600];              /* the temporary cost file of each evaluation */
    cost_file_t cf;              /* the base, with the terms being tried */
    const calsim_term_t *t[CALSIM_MAX_TERMS];
    int n;
    int evals;
    validate_result_t vr;
} search_t;

static double *term_at(cost_file_t *cf, const calsim_term_t *t) {
    return (double *)((char *)cf + t->offset);
}

/* The MAPE of a replay with the current terms; -1 with err when the replay fails. */
static double evaluate(search_t *s, char *err, size_t errlen) {
    char e[1024], name[64];
    if (cost_file_write(s->cost, &s->cf, NULL, e, sizeof e) != 0) {
        errf(err, errlen, "%s", e);
        return -1;
    }
    snprintf(name, sizeof name, "calibrate-sim-%d", ++s->evals);
    /* the cost file's own host and client terms are what is fitted: a serving profile
     * (sim/serving.h) would replace them, so the replays run without one unless asked */
    sim_opts_t so = *s->o->sim;
    if (!so.serving && !so.serving_profile) so.serving = "none";
    validate_opts_t vo = {.db_path = s->db, .run = s->o->run, .cost_path = s->cost,
                          .name = name, .sim = &so, .version = "calibrate"};
    if (validate_run(&vo, &s->vr, err, errlen) != 0) return -1;
    if (s->o->progress) {
        fprintf(stderr, "\r[calibrate] replay %d: MAPE %.2f%%   ", s->evals, 100 * s->vr.mape);
        fflush(stderr);
    }
    return s->vr.mape;
}

/* Moves term k to its best value, the others held; returns the best MAPE or -1. */
static double search_term(search_t *s, int k, double best, char *err, size_t errlen) {
    const calsim_term_t *t = s->t[k];
    double *x = term_at(&s->cf, t), best_x = *x;
    double llo = log(t->lo), lhi = log(t->hi), step = (lhi - llo) / (GRID - 1);
    int best_i = -2;   /* -2: the current value, -1: zero, 0..GRID-1: the grid */
    for (int i = -1; i < GRID; i++) {
        *x = i < 0 ? 0 : exp(llo + i * step);
        double f = evaluate(s, err, errlen);
        if (f < 0) return -1;
        if (f < best) best = f, best_x = *x, best_i = i;
    }
    if (best_i >= 0) {   /* golden section in log space between the best's neighbours */
        double a = llo + (best_i - 1) * step, b = llo + (best_i + 1) * step;
        const double g = 0.6180339887498949;
        for (int it = 0; it < REFINE; it++) {
            double c = b - g * (b - a), d = a + g * (b - a);
            *x = exp(c);
            double fc = evaluate(s, err, errlen);
            *x = exp(d);
            double fd = evaluate(s, err, errlen);
            if (fc < 0 || fd < 0) return -1;
            if (fc < best) best = fc, best_x = exp(c);
            if (fd < best) best = fd, best_x = exp(d);
            if (fc < fd) b = d;
            else a = c;
        }
    }
    *x = best_x;
    return best;
}

/* The base model: the file given, else the calibration shipped for the replay's model on
 * hw at its tp. */
static int load_base(const calsim_opts_t *o, cost_file_t *cf, char *desc, size_t dlen,
                     char *err, size_t errlen) {
    char path[320], e[1024];
    const char *p = o->base_cost;
    if (!p) {
        const char *model = o->sim ? o->sim->model : NULL;
        int tp = o->sim && o->sim->tp > 0 ? o->sim->tp : 1;
        if (!model || !o->hw)
            return errf(err, errlen, "give the base cost model: --cost FILE (a linear cost "
                        "file, or builtin:NAME), or --model and --hw for the calibration "
                        "shipped for them");
        if (cost_file_builtin(model, o->hw, tp, path, sizeof path) != 0)
            return errf(err, errlen, "no calibration is shipped for %s on %s at tp %d "
                        "(`twinserve presets` lists them): give --cost FILE", model, o->hw, tp);
        p = path;
    }
    if (cost_file_read(p, cf, e, sizeof e) != 0) return errf(err, errlen, "--cost: %s", e);
    if (cf->kind != COST_FILE_LINEAR)
        return errf(err, errlen, "%s is a roofline cost file: the terms fitted here (the "
                    "engine's CPU time) belong to the linear model", p);
    snprintf(cf->path, sizeof cf->path, "%s", p);
    snprintf(desc, dlen, "%.90s (%.200s)", p, cf->fitted_for);
    return 0;
}

/* The terms: the caller's list, or the default for the run's side. */
static int pick_terms(const calsim_opts_t *o, int client_side, search_t *s, char *err,
                      size_t errlen) {
    char list[256];
    snprintf(list, sizeof list, "%s", o->terms ? o->terms
             : client_side ? "host_step_s,host_seq_s,client_request_s,client_token_s"
                           : "host_step_s,host_seq_s");
    s->n = 0;
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        int found = -1;
        for (int i = 0; i < N_KNOWN; i++)
            if (!strcmp(tok, known[i].name)) found = i;
        if (found < 0)
            return errf(err, errlen, "--fit: unknown term '%s' (host_step_s, host_seq_s, "
                        "client_request_s, client_token_s)", tok);
        for (int i = 0; i < s->n; i++)
            if (s->t[i] == &known[found])
                return errf(err, errlen, "--fit: '%s' twice", tok);
        if (s->n == CALSIM_MAX_TERMS) return errf(err, errlen, "--fit: too many terms");
        s->t[s->n++] = &known[found];
    }
    if (s->n == 0) return errf(err, errlen, "--fit: no terms");
    return 0;
}

/* The measured run's id, name and side (client-side: a vLLM benchmark result); refuses
 * other kinds. */
static int find_run(const calsim_opts_t *o, char *name, size_t nlen, int *client_side,
                    char *err, size_t errlen) {
    sqlite3 *db;
    sqlite3_stmt *st = NULL;
    int64_t id;
    int rc = -1;
    if (summary_open(o->db_path, &db, err, errlen) != 0) return -1;
    if (o->run) {
        if (summary_find_run(db, o->run, &id, err, errlen) != 0) goto done;
    } else if (sqlite3_prepare_v2(db, "SELECT max(id) FROM runs WHERE kind = 'measured'", -1,
                                  &st, NULL) != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW ||
               sqlite3_column_type(st, 0) == SQLITE_NULL) {
        errf(err, errlen, "%s has no measured run (twinserve import)", o->db_path);
        goto done;
    } else {
        id = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT kind, name, coalesce(json_extract(config, "
                           "'$.source.format') = 'vllm', 0) FROM runs WHERE id = ?1", -1, &st,
                           NULL) != SQLITE_OK) {
        errf(err, errlen, "%s: %s", o->db_path, sqlite3_errmsg(db));
        goto done;
    }
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) != SQLITE_ROW) {
        errf(err, errlen, "%s: no run %lld", o->db_path, (long long)id);
        goto done;
    }
    const char *kind = (const char *)sqlite3_column_text(st, 0);
    snprintf(name, nlen, "%s", (const char *)sqlite3_column_text(st, 1));
    *client_side = sqlite3_column_int(st, 2);
    if (!kind || strcmp(kind, "measured") != 0) {
        errf(err, errlen, "run '%s' is a%s %s run: fitting by simulation is for measured runs "
             "(twinserve import); an engine run's steps are fitted directly (calibrate --db "
             "DB --run RUN without --policy)", name, kind && kind[0] == 'e' ? "n" : "",
             kind ? kind : "?");
        goto done;
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc;
}

int calsim_fit(const calsim_opts_t *o, calsim_result_t *r, char *err, size_t errlen) {
    static search_t s;   /* large (validate_result_t, cost_file_t): off the stack */
    char db[512] = "";
    int client_side = 0, rc = -1;
    memset(r, 0, sizeof *r);
    memset(&s, 0, sizeof s);
    s.o = o;
    if (!o->sim || !o->sim->policy_path)
        return errf(err, errlen, "fitting by simulation replays the measured run: give the "
                    "policy to replay it with, --policy FILE (and the options of sim)");
    if (find_run(o, r->run_name, sizeof r->run_name, &client_side, err, errlen) != 0 ||
        load_base(o, &s.cf, r->base_desc, sizeof r->base_desc, err, errlen) != 0 ||
        pick_terms(o, client_side, &s, err, errlen) != 0)
        return -1;
    /* A private copy for the search's replays. */
    if (summary_copy_temp(o->db_path, "calibrate", db, sizeof db, err, errlen) != 0) return -1;
    s.db = db;
    snprintf(s.cost, sizeof s.cost, "%s.cost", db);
    r->n_terms = s.n;
    for (int k = 0; k < s.n; k++) {
        snprintf(r->term[k], sizeof r->term[k], "%s", s.t[k]->name);
        r->before[k] = *term_at(&s.cf, s.t[k]);
    }
    double best = evaluate(&s, err, errlen);
    if (best < 0) goto done;
    r->mape_before = best;
    for (int sweep = 0; sweep < CALSIM_SWEEPS; sweep++)
        for (int k = 0; k < s.n; k++)
            if ((best = search_term(&s, k, best, err, errlen)) < 0) goto done;
    if (evaluate(&s, err, errlen) < 0) goto done;   /* the comparison at the fitted terms */
    r->fitted = s.vr;
    snprintf(r->fitted.cost_desc, sizeof r->fitted.cost_desc, "%.200s, with the fitted terms",
             r->base_desc);
    r->mape_after = s.vr.mape;
    r->evals = s.evals;
    for (int k = 0; k < s.n; k++) r->value[k] = *term_at(&s.cf, s.t[k]);
    r->cf = s.cf;
    snprintf(r->note, sizeof r->note, "%.300s", s.vr.note);
    rc = 0;
done:
    if (o->progress) fputc('\n', stderr);
    unlink(s.cost);
    if (db[0]) rec_remove(db);
    return rc;
}

void calsim_print(FILE *f, const calsim_result_t *r) {
    fprintf(f, "fitted by simulation to the measured run '%s' (%d replays)\n", r->run_name,
            r->evals);
    fprintf(f, "base model: %s\n", r->base_desc);
    if (r->note[0]) fprintf(f, "replay: %s\n", r->note);
    fprintf(f, "\n  %-18s %12s %12s   %s\n", "term", "before", "fitted", "what it stands for");
    for (int k = 0; k < r->n_terms; k++) {
        const char *what = "";
        for (int i = 0; i < N_KNOWN; i++)
            if (!strcmp(known[i].name, r->term[k])) what = known[i].what;
        fprintf(f, "  %-18s %12.4g %12.4g   %s\n", r->term[k], r->before[k], r->value[k], what);
    }
    fprintf(f, "\nMAPE (p50/p90/p99 of TTFT, TPOT, E2E and output throughput): %.1f%% before, "
               "%.1f%% fitted\n", 100 * r->mape_before, 100 * r->mape_after);
    fprintf(f, "in-sample: these terms were chosen on this run; hold the file against another "
               "measured run (another rate) with `twinserve validate` to see how they "
               "generalise\n");
    validate_print(f, &r->fitted);
}
