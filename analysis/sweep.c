/* sweep: see sweep.h. */
#include "analysis/sweep.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "analysis/experiment.h"
#include "analysis/sweep_internal.h"
#include "traces/merge.h"
#include "traces/recorder.h"
#include "traces/trace.h"

enum { MAX_CAPACITY_POINTS = 40 };

int sweep_trace_rate(const char *path, const trace_opts_t *topts, double *rate, int64_t *n,
                     char *err, size_t errlen) {
    trace_opts_t o = *topts;
    o.rate_scale = 1.0;
    trace_t *t = trace_open(path, &o);
    int rc = -1;
    if (!t) {
        snprintf(err, errlen, "out of memory opening %s", path);
        return -1;
    }
    if (trace_errmsg(t)) {
        snprintf(err, errlen, "%s", trace_errmsg(t));
        goto done;
    }
    trace_req_t r;
    double first = 0, last = 0;
    int64_t count = 0;
    int k;
    while ((k = trace_next(t, &r)) == 1) {
        if (count++ == 0) first = r.arrival_s;
        last = r.arrival_s;
    }
    if (k < 0) {
        snprintf(err, errlen, "%s", trace_errmsg(t));
        goto done;
    }
    if (count < 2 || !(last > first)) {
        snprintf(err, errlen, "%s: a sweep needs at least two requests at different times "
                 "to know the trace's rate (it has %lld)", path, (long long)count);
        goto done;
    }
    *rate = (double)(count - 1) / (last - first);
    *n = count;
    rc = 0;
done:
    trace_close(t);
    return rc;
}

int sweep_parse_rates(const char *spec, double *rates, int max, char *err, size_t errlen) {
    int n = 0;
    const char *p = spec;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        char *end;
        if (len == 0 || len >= sizeof item) {
            snprintf(err, errlen, "--rates '%s': item %d is %s (want req/s like 1,2.5,4)", spec,
                     n + 1, len ? "too long" : "empty");
            return -1;
        }
        memcpy(item, p, len);
        item[len] = 0;
        errno = 0;
        double v = strtod(item, &end);
        if (*end || errno || !isfinite(v) || v <= 0) {
            snprintf(err, errlen, "--rates '%s': '%s' is not a positive number of requests "
                     "per second", spec, item);
            return -1;
        }
        if (n == max) {
            snprintf(err, errlen, "--rates '%s': more than %d rates", spec, max);
            return -1;
        }
        for (int i = 0; i < n; i++)
            if (rates[i] == v) {
                snprintf(err, errlen, "--rates '%s': rate %s given twice (each rate is one "
                         "run)", spec, item);
                return -1;
            }
        rates[n++] = v;
        if (!comma) return n;
        p = comma + 1;
    }
}

/* ------------------------------------------------------------------ the target database */

/* Creates the target (schema) if needed and checks it is ours, through the recorder. */
static int target_prepare(const char *path, char *err, size_t errlen) {
    rec_t *r = rec_open(path);
    int rc = 0;
    if (!r || rec_errmsg(r)) {
        snprintf(err, errlen, "%s", r ? rec_errmsg(r) : "out of memory");
        rc = -1;
    }
    rec_close(r);
    return rc;
}

static int open_rw(const char *path, sqlite3 **db, char *err, size_t errlen) {
    if (sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "%s: %s", path, *db ? sqlite3_errmsg(*db) : "out of memory");
        sqlite3_close(*db);
        *db = NULL;
        return -1;
    }
    sqlite3_busy_timeout(*db, 30000); /* another writer (a user's sim) may hold the lock */
    return 0;
}

static int prefix_used(sqlite3 *db, const char *prefix, int *used) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM runs WHERE substr(name, 1, "
                                "length(?1) + 1) = ?1 || '@'", -1, &st, NULL);
    if (rc == SQLITE_OK) sqlite3_bind_text(st, 1, prefix, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) *used = sqlite3_column_int(st, 0) > 0;
    else rc = SQLITE_ERROR;
    sqlite3_finalize(st);
    return rc == SQLITE_OK ? 0 : -1;
}

/* The sweep name goes into every point's config JSON ("sweep": {"name": "..."}) unescaped,
 * so a '"', a '\' or a control character (below 0x20) would make that JSON invalid and every
 * point fail on runs.config's CHECK. Returns 0, or -1 with the first such character named in
 * why. */
static int name_json_safe(const char *name, char *why, size_t whylen) {
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
        if (*c == '"' || *c == '\\') {
            snprintf(why, whylen, "'%c'", *c);
            return -1;
        }
        if (*c < 0x20) {
            snprintf(why, whylen, "a control character (0x%02x)", *c);
            return -1;
        }
    }
    return 0;
}

int sweep_prefix(const sweep_t *sw, char *out, size_t outlen, char *err, size_t errlen) {
    sqlite3 *db = NULL;
    int rc = -1, used = 0;
    char why[64];
    /* Checked before the database is touched: a bad name leaves no file behind. */
    if (sw->prefix && (strchr(sw->prefix, '@') || !*sw->prefix)) {
        snprintf(err, errlen, "--name '%s': a sweep name must be non-empty without '@'",
                 sw->prefix);
        return -1;
    }
    if (sw->prefix && name_json_safe(sw->prefix, why, sizeof why)) {
        snprintf(err, errlen, "--name '%s': a sweep name cannot hold %s (it is written into "
                 "each run's JSON config); choose another --name", sw->prefix, why);
        return -1;
    }
    char stem[128];
    rec_policy_stem(sw->sim.policy_path, stem, sizeof stem);
    if (!sw->prefix && name_json_safe(stem, why, sizeof why)) {
        snprintf(err, errlen, "the sweep name would come from the policy file name '%s', which "
                 "holds %s (not allowed in a sweep name); give one with --name", stem, why);
        return -1;
    }
    int no_db = sw->db_optional && access(sw->sim.db_path, F_OK) != 0;
    if (!no_db && (target_prepare(sw->sim.db_path, err, errlen) ||
                   open_rw(sw->sim.db_path, &db, err, errlen)))
        return -1;
    if (no_db) {
        snprintf(out, outlen, "%s", sw->prefix ? sw->prefix : "");
        if (!sw->prefix) snprintf(out, outlen, "sweep-%s", stem);
        return 0;
    }
    if (sw->prefix) {
        if (prefix_used(db, sw->prefix, &used)) goto dberr;
        if (used) {
            snprintf(err, errlen, "%s already holds a sweep named '%s' (runs %s@...); choose "
                     "another --name", sw->sim.db_path, sw->prefix, sw->prefix);
            goto done;
        }
        snprintf(out, outlen, "%s", sw->prefix);
        rc = 0;
        goto done;
    }
    for (int k = 1; k < 100000; k++) {
        if (k == 1) snprintf(out, outlen, "sweep-%s", stem);
        else snprintf(out, outlen, "sweep-%s-%d", stem, k);
        if (prefix_used(db, out, &used)) goto dberr;
        if (!used) {
            rc = 0;
            goto done;
        }
    }
    snprintf(err, errlen, "%s: no free sweep name", sw->sim.db_path);
    goto done;
dberr:
    snprintf(err, errlen, "%s: %s", sw->sim.db_path, sqlite3_errmsg(db));
done:
    sqlite3_close(db);
    return rc;
}

/* ------------------------------------------------------------------ the children */

void sweep_point_extra(const sweep_t *sw, const char *prefix, const sweep_point_t *p,
                       char *extra, size_t len) {
    char member[320], exp_name[160];
    snprintf(extra, len, "\"sweep\":{\"name\":\"%s\",\"rate_rps\":%.17g,\"scale\":%.17g}",
             prefix, p->rate, p->scale);
    if (sw->n_seeds > 0) {
        /* The point's experiment is its name without the "-rK" name_points appended. */
        snprintf(exp_name, sizeof exp_name, "%s", p->name);
        char *dash = strrchr(exp_name, '-');
        if (dash) *dash = '\0';
        experiment_member(member, sizeof member, exp_name, p->index, sw->n_seeds,
                          sw->seeds[p->index]);
        size_t n = strlen(extra);
        snprintf(extra + n, len - n, ",%s", member);
    }
}

uint64_t sweep_point_seed(const sweep_t *sw, const sweep_point_t *p) {
    return sw->n_seeds > 0 ? sw->seeds[p->index] : sw->sim.seed;
}

/* In the child: one simulation into its own database; never returns. */
static void child_run(const sweep_t *sw, const char *db, const sweep_point_t *p,
                      const char *prefix) {
    sim_opts_t o = sw->sim;
    char extra[768];
    sweep_point_extra(sw, prefix, p, extra, sizeof extra);
    o.seed = sweep_point_seed(sw, p);
    o.db_path = db;
    o.run_name = p->name;
    o.trace_opts.rate_scale = p->scale;
    o.config_extra = extra;
    o.progress = 0;
    sim_result_t res;
    static char err[8192];
    int rc = sim_run(&o, &res, err, sizeof err);
    if (rc != 0) fprintf(stderr, "twinserve sweep: %s (rate %g req/s): %s\n", p->name, p->rate, err);
    fflush(stderr);
    _exit(rc == 0 ? 0 : 1);
}

/* 1 when a run is already named name in db, or one of the names before it in this call. */
static int name_taken(sqlite3 *db, const sweep_point_t *pts, int i, const char *name) {
    for (int j = 0; j < i; j++)
        if (!strcmp(pts[j].name, name)) return 1;
    if (!db) return 0;
    sqlite3_stmt *st = NULL;
    int taken = 0;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM runs WHERE name = ?1", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        taken = sqlite3_step(st) == SQLITE_ROW;
    }
    sqlite3_finalize(st);
    return taken;
}

/* Names PREFIX@RATErps with six significant digits, more when that name is taken: close
 * rates (a narrow capacity bracket, two rates equal to six digits) clashed on runs.name,
 * which failed the merge. */
static int name_points(const sweep_t *sw, const char *prefix, sweep_point_t *pts, int n,
                       char *err, size_t errlen) {
    sqlite3 *db = NULL;
    int no_db = sw->db_optional && access(sw->sim.db_path, F_OK) != 0;
    if (!no_db && open_rw(sw->sim.db_path, &db, err, errlen)) return -1;
    for (int i = 0; i < n; i++)
        for (int digits = 6; digits <= 17; digits++) {
            snprintf(pts[i].name, sizeof pts[i].name, "%s@%.*grps", prefix, digits, pts[i].rate);
            if (sw->n_seeds > 0) {
                size_t len = strlen(pts[i].name);
                snprintf(pts[i].name + len, sizeof pts[i].name - len, "-r%d", pts[i].index);
            }
            if (!name_taken(db, pts, i, pts[i].name)) break;
        }
    sqlite3_close(db);
    return 0;
}

static void merge_note(void *ud, const char *msg) {
    (void)ud;
    fprintf(stderr, "twinserve sweep: %s\n", msg);
}

/* Merges the children's databases (folder d, p<i>.db) into the target in point order
 * (traces/merge.h); a point whose child left no run gets run_id -1 and ok = 0. */
static int merge_points(const sweep_t *sw, const char *d, sweep_point_t *pts, int n, char *err,
                        size_t errlen) {
    char path[1100];
    int rc = 0;
    merge_t *m = merge_open(sw->sim.db_path);
    if (!m || merge_errmsg(m)) {
        snprintf(err, errlen, "%s", m ? merge_errmsg(m) : "out of memory");
        merge_close(m);
        return -1;
    }
    merge_set_notes(m, merge_note, NULL);
    for (int i = 0; i < n && rc == 0; i++) {
        snprintf(path, sizeof path, "%s/p%d.db", d, i);
        pts[i].run_id = -1;
        if (access(path, F_OK) != 0) { /* the child died before creating it */
            pts[i].ok = 0;
            continue;
        }
        if (merge_add(m, path) != 0) {
            snprintf(err, errlen, "%s", merge_errmsg(m));
            rc = -1;
        } else if (merge_n_runs(m) > 0) {
            pts[i].run_id = merge_run_id(m, 0);
        } else {
            pts[i].ok = 0;
        }
    }
    merge_close(m);
    return rc;
}

/* p->cost_model from its run's config (sim.c writes "calibration"). 0, or -1 with a message. */
static int load_cost_model(sqlite3 *db, sweep_point_t *p, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int rc = -1;
    p->cost_model[0] = '\0';
    if (sqlite3_prepare_v2(db, "SELECT json_extract(config, '$.calibration') FROM runs "
                           "WHERE id = ?1", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, p->run_id);
        int step = sqlite3_step(st);
        const unsigned char *t = step == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
        if (t) snprintf(p->cost_model, sizeof p->cost_model, "%s", (const char *)t);
        rc = step == SQLITE_ROW || step == SQLITE_DONE ? 0 : -1;
    }
    if (rc) snprintf(err, errlen, "reading the run's cost model: %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rc;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "NAME done (3 of 8, 12 s, about 20 s left)": the points finish at roughly the rate they
 * have so far, whatever --jobs is, so elapsed / finished * left is the estimate. */
static void point_line(const sweep_point_t *pt, int finished, int n, double t0) {
    double el = mono_s() - t0, left = finished < n ? el / finished * (n - finished) : 0;
    fprintf(stderr, "twinserve sweep: %s %s (%d of %d, %.2g s", pt->name,
            pt->ok ? "done" : "failed", finished, n, el);
    if (finished < n) fprintf(stderr, ", about %.2g s left", left);
    fprintf(stderr, ")\n");
}

int sweep_init_points(const sweep_t *sw, const char *prefix, const double *rates, int nrates,
                      sweep_point_t *pts, char *err, size_t errlen) {
    int reps = sw->n_seeds > 0 ? sw->n_seeds : 1, n = nrates * reps;
    for (int i = 0; i < n; i++)
        pts[i] = (sweep_point_t){ .rate = rates[i / reps], .scale = rates[i / reps] / sw->base_rate,
                                  .run_id = -1, .index = i % reps };
    return name_points(sw, prefix, pts, n, err, errlen);
}

int sweep_run(const sweep_t *sw, const char *prefix, const double *rates, int n,
              sweep_point_t *pts, char *err, size_t errlen) {
    char dir[] = "/tmp/twinsweep-XXXXXX", path[1100];
    const char *tmp = getenv("TMPDIR");
    char dirbuf[1024];
    int reps = sw->n_seeds > 0 ? sw->n_seeds : 1, nrates = n;
    n = nrates * reps;   /* every rate once per seed */
    pid_t *pids = calloc((size_t)n + 1, sizeof *pids);
    sqlite3 *db = NULL;
    int rc = -1, next = 0, running = 0, finished = 0;
    double t0 = mono_s();
    if (!pids) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(dirbuf, sizeof dirbuf, "%s/twinsweep-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    char *d = mkdtemp(dirbuf);
    if (!d) d = mkdtemp(dir);
    if (!d) {
        snprintf(err, errlen, "cannot create a temporary folder: %s", strerror(errno));
        goto done;
    }
    if (sweep_init_points(sw, prefix, rates, nrates, pts, err, errlen)) goto cleanup;
    fflush(stdout);
    fflush(stderr);
    /* Children run at most jobs at a time; the parent only forks and waits. */
    while (next < n || running > 0) {
        if (next < n && running < (sw->jobs > 0 ? sw->jobs : 1)) {
            snprintf(path, sizeof path, "%s/p%d.db", d, next);
            pid_t pid = fork();
            if (pid == 0) child_run(sw, path, &pts[next], prefix);
            if (pid < 0) {
                snprintf(err, errlen, "fork: %s", strerror(errno));
                break;
            }
            pids[next++] = pid;
            running++;
            continue;
        }
        int status;
        pid_t pid = wait(&status);
        if (pid < 0) break;
        for (int i = 0; i < next; i++)
            if (pids[i] == pid) {
                pids[i] = 0;
                running--;
                finished++;
                pts[i].ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
                if (WIFSIGNALED(status))
                    fprintf(stderr, "twinserve sweep: %s: the simulation died (signal %d)\n",
                            pts[i].name, WTERMSIG(status));
                else if (!sw->quiet)
                    point_line(&pts[i], finished, n, t0);
            }
    }
    if (next < n) { /* a fork failed: wait for the ones started */
        while (running > 0 && wait(NULL) > 0) running--;
        goto cleanup;
    }
    if (merge_points(sw, d, pts, n, err, errlen) != 0 ||
        open_rw(sw->sim.db_path, &db, err, errlen) != 0)
        goto cleanup;
    rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!pts[i].ok) continue;
        char e[512];
        /* The summary and the SLO figures are all a point shows or the search uses: the
         * tokens and steps tables are not read. */
        if (report_load_summary(db, pts[i].run_id, sw->has_slo ? &sw->slo : NULL,
                                &pts[i].rep, e, sizeof e) != 0 ||
            load_cost_model(db, &pts[i], e, sizeof e) != 0) {
            fprintf(stderr, "twinserve sweep: %s: %s\n", pts[i].name, e);
            pts[i].ok = 0;
        }
    }
cleanup:
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/p%d.db", d, i);
        rec_remove(path);
    }
    rmdir(d);
done:
    sqlite3_close(db);
    free(pids);
    return rc;
}

/* ------------------------------------------------------------------ capacity */

static int point_cmp(const void *a, const void *b) {
    double x = ((const sweep_point_t *)a)->rate, y = ((const sweep_point_t *)b)->rate;
    return x < y ? -1 : x > y;
}

static int passes(const sweep_point_t *p, double target) {
    return p->ok && p->rep.attainment >= target;
}

/* Recomputes the bracket from every point so far (sorted by rate). */
static void bracket(sweep_capacity_t *c, double target) {
    qsort(c->points, c->n_points, sizeof *c->points, point_cmp);
    c->found_hi = c->found_lo = 0;
    c->hi = INFINITY;
    c->lo = 0;
    for (size_t i = 0; i < c->n_points; i++)
        if (!passes(&c->points[i], target)) {
            c->hi = c->points[i].rate;
            c->hi_att = c->points[i].ok ? c->points[i].rep.attainment : NAN;
            c->found_hi = 1;
            break;
        }
    for (size_t i = 0; i < c->n_points; i++)
        if (passes(&c->points[i], target) && c->points[i].rate < c->hi) {
            c->lo = c->points[i].rate;
            c->lo_att = c->points[i].rep.attainment;
            c->found_lo = 1;
        }
}

double sweep_attainment_bound(const summary_t *s) {
    if (s->requests <= 0) return NAN;
    int64_t fixed = s->rejected_by[SUMMARY_REJ_CONTEXT] + s->rejected_by[SUMMARY_REJ_KV] +
                    s->rejected_by[SUMMARY_REJ_STEP] + s->rejected_by[SUMMARY_REJ_EMPTY];
    return 1 - (double)fixed / (double)s->requests;
}

/* Sets c->infeasible when a point's load-independent rejections keep attainment below the
 * target at every rate (the lowest such ceiling, and its point); returns c->infeasible. */
static int rejections_cap(sweep_capacity_t *c, double target) {
    for (size_t i = 0; i < c->n_points; i++) {
        const sweep_point_t *p = &c->points[i];
        double b = p->ok ? sweep_attainment_bound(&p->rep.base) : NAN;
        if (b < target && (!c->infeasible || b < c->bound)) {
            c->infeasible = 1;
            c->bound = b;
            c->bound_point = i;
        }
    }
    return c->infeasible;
}

static int evaluate(const sweep_t *sw, const char *prefix, const double *rates, int n,
                    sweep_capacity_t *c, char *err, size_t errlen) {
    if (c->n_points + (size_t)n > MAX_CAPACITY_POINTS) n = MAX_CAPACITY_POINTS - (int)c->n_points;
    if (n <= 0) return 0;
    if (sweep_run(sw, prefix, rates, n, c->points + c->n_points, err, errlen) != 0) return -1;
    c->n_points += (size_t)n;
    return 0;
}

int sweep_capacity(const sweep_t *sw, const char *prefix, double lo, double hi, double tol,
                   double target, sweep_capacity_t *c, char *err, size_t errlen) {
    int j = sw->jobs > 0 ? sw->jobs : 1;
    double r[64];
    memset(c, 0, sizeof *c);
    c->points = calloc(MAX_CAPACITY_POINTS, sizeof *c->points);
    if (!c->points) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (j > 64) j = 64;
    int n = 0;
    if (lo > 0) r[n++] = lo;
    if (hi > 0) r[n++] = hi;
    if (n == 0) r[n++] = sw->base_rate;
    if (evaluate(sw, prefix, r, n, c, err, errlen)) return -1;
    /* A failure here is the configuration's (a bad --set, a policy error), not the load's:
     * searching on would only repeat it. */
    int any_ok = 0;
    for (size_t i = 0; i < c->n_points; i++) any_ok |= c->points[i].ok;
    if (!any_ok) {
        snprintf(err, errlen, "the first simulation (%s at %.4g req/s) failed: its error is "
                 "above (and in `twinserve runs` if the run had started)", c->points[0].name, c->points[0].rate);
        return -1;
    }
    bracket(c, target);
    /* Rejections no rate removes (over-long prompts...): halving the rate would only
     * repeat this point's attainment; say why now. */
    if (rejections_cap(c, target)) return 0;
    if (lo > 0 && !c->found_lo) {
        snprintf(err, errlen, "even --lo %g req/s misses the SLO (attainment %.1f%% < %.1f%%): "
                 "lower --lo", lo, c->points[0].ok ? 100 * c->points[0].rep.attainment : 0.0,
                 100 * target);
        return -1;
    }
    /* Widen geometrically (j rates a round) until a bracket exists. */
    while ((!c->found_lo || !c->found_hi) && c->n_points < MAX_CAPACITY_POINTS) {
        n = 0;
        for (int k = 1; k <= j; k++)
            r[n++] = c->found_lo ? c->lo * ldexp(1, k) : c->hi * ldexp(1, -k);
        if (evaluate(sw, prefix, r, n, c, err, errlen)) return -1;
        bracket(c, target);
        if (rejections_cap(c, target)) return 0;
        if (!c->found_lo && c->hi < sw->base_rate * 1e-6) break;
        if (!c->found_hi && c->lo > sw->base_rate * 1e6) break;
    }
    /* Narrow: j interior points split the bracket into j + 1 equal parts. */
    while (c->found_lo && c->found_hi && c->hi - c->lo > tol * c->hi &&
           c->n_points < MAX_CAPACITY_POINTS) {
        n = 0;
        for (int k = 1; k <= j; k++) r[n++] = c->lo + (c->hi - c->lo) * k / (j + 1);
        if (evaluate(sw, prefix, r, n, c, err, errlen)) return -1;
        bracket(c, target);
    }
    return 0;
}

/* ------------------------------------------------------------------ printing */

static void ms(FILE *f, double s) {
    if (isnan(s)) fprintf(f, " %9s", "-");
    else fprintf(f, " %9.1f", s * 1e3);
}

void sweep_print_header(FILE *f, int has_slo) {
    fprintf(f, "%10s %8s %8s", "rate_rps", "scale", "done_rps");
    if (has_slo) fprintf(f, " %7s %9s", "attain%", "goodput");
    fprintf(f, " %9s %9s %9s %9s  %s\n", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99",
            "run (latencies in ms)");
}

void sweep_print_point(FILE *f, const sweep_point_t *p, int has_slo) {
    fprintf(f, "%10.4g %8.4g", p->rate, p->scale);
    if (!p->ok) {
        fprintf(f, " %8s%s %9s %9s %9s %9s  %s (failed)\n", "-", has_slo ? "       -         -" : "",
                "-", "-", "-", "-", p->name);
        return;
    }
    const summary_t *s = &p->rep.base;
    fprintf(f, " %8.3f", s->req_per_s);
    if (has_slo) fprintf(f, " %7.1f %9.3f", 100 * p->rep.attainment, p->rep.goodput);
    ms(f, s->ttft.p50);
    ms(f, s->ttft.p99);
    ms(f, s->tpot.p50);
    ms(f, s->tpot.p99);
    fprintf(f, "  %s\n", p->name);
}
