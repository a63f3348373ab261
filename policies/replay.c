/* replay: see replay.h. */
#include "policies/replay.h"

#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "traces/json.h"

double replay_wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int replay_fail(replay_t *r, const char *fmt, ...) {
    if (r->failed) return -1; /* keep the first, root-cause message */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    r->failed = 1;
    return -1;
}

/* ------------------------------------------------------------------ ledger */

static void ledger_add(replay_ledger_t *l, const trace_req_t *q) {
    pthread_mutex_lock(&l->mu);
    if (l->n == 0) l->base = q->id;
    if (q->id == l->base + l->n) { /* always, for trace ids; otherwise simply untracked */
        if (l->n == l->cap) {
            int64_t cap = l->cap ? l->cap * 2 : 1024;
            replay_live_t *v = malloc(sizeof *v * (size_t)cap);
            if (v) {
                for (int64_t i = 0; i < l->n; i++) v[i] = l->v[(l->head + i) % l->cap];
                free(l->v);
                l->v = v;
                l->cap = cap;
                l->head = 0;
            }
        }
        if (l->n < l->cap)
            l->v[(l->head + l->n++) % l->cap] = (replay_live_t){ q->arrival_s, q->prompt_tokens,
                                                                 q->output_tokens, 0 };
    }
    pthread_mutex_unlock(&l->mu);
}

static void ledger_done(replay_ledger_t *l, int32_t id) {
    pthread_mutex_lock(&l->mu);
    if (id >= l->base && id < l->base + l->n) {
        l->v[(l->head + (id - l->base)) % l->cap].done = 1;
        while (l->n > 0 && l->v[l->head].done) {
            l->head = (l->head + 1) % l->cap;
            l->base++;
            l->n--;
        }
    }
    pthread_mutex_unlock(&l->mu);
}

/* ------------------------------------------------------------------ rows */

/* A tenant name travels from the trace through the core into the records unchanged. */
_Static_assert(TRACE_TENANT_MAX == SCHED_TENANT_MAX && SCHED_TENANT_MAX == REC_TENANT_MAX,
               "tenant name sizes differ between trace, sched and recorder");

static void sink(void *ud, const sched_req_t *q, const char *reason) {
    replay_rep_t *rep = ud;
    replay_t *r = rep->rp;
    const char *status = q->state == SCHED_FINISHED ? "finished"
                       : q->state == SCHED_REJECTED ? "rejected" : "aborted";
    rec_request_t row = {
        .req_id = q->id, .arrival_s = q->arrival_s, .prompt_tokens = q->prompt_tokens,
        .output_tokens = q->true_output_tokens, .generated_tokens = q->generated,
        .first_scheduled_s = q->first_scheduled_s, .first_token_s = q->first_token_s,
        .finish_s = q->finish_s, .preemptions = q->preemptions,
        .spec_proposed = q->spec_proposed, .spec_accepted = q->spec_accepted,
        .cached_tokens = q->cached_tokens, .priority = q->priority,
        .deadline_s = q->deadline, .status = status, .reason = reason,
    };
    memcpy(row.tenant, q->tenant_name, sizeof row.tenant);
    row.replica = rep->index;
    if (r->on_row) r->on_row(r->final_ud, q, &row);
    ledger_done(&r->live, q->id); /* locks out the watchdog while the row is handed over */
    if (rec_request(r->rec, r->run_id, &row) != 0 && !r->sink_failed) {
        r->sink_failed = 1;
        replay_fail(r, "recording request %d: %s", q->id, rec_errmsg(r->rec));
    }
    if (r->on_final) r->on_final(r->final_ud, q, reason);
}

/* Called by the policy watchdog from its own thread while the main thread is stuck in
 * JIT-compiled policy code (so nothing else touches the recorder). */
static void on_abort(void *ud, const char *msg) {
    replay_t *r = ud;
    /* Held until the process ends: the main thread can no longer hand rows over. */
    pthread_mutex_lock(&r->live.mu);
    /* A policy can loop at load time, before the run row exists: write it now. */
    if (r->run_id < 0 && r->early_info) rec_run_begin(r->rec, r->early_info, &r->run_id);
    if (r->run_id < 0) return;
    replay_ledger_t *l = &r->live;
    for (int64_t i = 0; i < l->n; i++) {
        const replay_live_t *x = &l->v[(l->head + i) % l->cap];
        if (x->done) continue;
        rec_request_t q = {
            .req_id = (int32_t)(l->base + i), .arrival_s = x->arrival_s,
            .prompt_tokens = x->prompt, .output_tokens = x->output, .first_scheduled_s = -1,
            .first_token_s = -1, .finish_s = -1, .status = "aborted", .reason = msg,
        };
        rec_request(r->rec, r->run_id, &q);
    }
    rec_run_end(r->rec, r->run_id, 0, msg, replay_wall() - r->wall0);
}

/* ------------------------------------------------------------------ setup */

int replay_init(replay_t *r, const char *db_path) {
    memset(r, 0, sizeof *r);
    r->run_id = -1;
    pthread_mutex_init(&r->live.mu, NULL);
    if (replay_set_replicas(r, 1) != 0) return -1;
    r->wall0 = replay_wall();
    struct stat sb;
    if (db_path && *db_path && strcmp(db_path, ":memory:") != 0 && stat(db_path, &sb) != 0)
        r->created_db = strdup(db_path); /* NULL when out of memory: the file is then kept */
    r->rec = rec_open(db_path);
    /* Rows are written by a background thread: the replay does not wait for SQLite. */
    if (!r->rec || rec_errmsg(r->rec) || rec_set_async(r->rec, 1) != 0)
        return replay_fail(r, "%s", r->rec ? rec_errmsg(r->rec) : "out of memory opening the database");
    return 0;
}

int replay_set_replicas(replay_t *r, int32_t n) {
    for (int32_t i = 0; i < r->n_reps; i++)
        if (r->reps[i].host) return replay_fail(r, "internal: replicas set after a policy load");
    replay_rep_t *v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    if (!v) return replay_fail(r, "out of memory (%d replicas)", (int)n);
    for (int32_t i = 0; i < n; i++) v[i] = (replay_rep_t){ .rp = r, .index = i };
    free(r->reps);
    r->reps = v;
    r->n_reps = n;
    return 0;
}

void replay_limits(replay_t *r, const lhost_limits_t *in, lhost_limits_t *out) {
    *out = *in;
    out->abort_fn = on_abort;
    out->abort_ud = r;
}

int replay_load_policy_at(replay_t *r, int32_t i, const char *path, const char *const *sets,
                          int n_sets, const lhost_limits_t *limits) {
    lhost_limits_t lim;
    replay_limits(r, limits, &lim);
    replay_rep_t *rep = &r->reps[i];
    if (!r->policy_path) r->policy_path = path;
    rep->host = lhost_open(path, &lim);
    if (i == 0) r->host = rep->host;
    if (!rep->host) return replay_fail(r, "out of memory loading the policy");
    if (lhost_errmsg(rep->host)) return replay_fail(r, "%s", lhost_errmsg(rep->host));
    for (int k = 0; k < n_sets; k++)
        if (lhost_set(rep->host, sets[k]) != 0)
            return replay_fail(r, "%s", lhost_errmsg(rep->host));
    return 0;
}

int replay_load_policy(replay_t *r, const char *path, const char *const *sets, int n_sets,
                       const lhost_limits_t *limits) {
    return replay_load_policy_at(r, 0, path, sets, n_sets, limits);
}

int replay_param_str(replay_t *r, const char *key, char *out, size_t len) {
    return r->host ? lhost_param_str(r->host, key, out, len) : 0;
}

int replay_start_sched_at(replay_t *r, int32_t i, const sched_config_t *cfg) {
    replay_rep_t *rep = &r->reps[i];
    sched_policy_t pol;
    lhost_policy(rep->host, &pol);
    const char *why = NULL;
    rep->sched = sched_new(cfg, &pol, &why);
    if (i == 0) r->sched = rep->sched;
    if (!rep->sched) return replay_fail(r, "scheduler: %s", why);
    sched_set_sink(rep->sched, sink, rep);
    if (lhost_attach(rep->host, rep->sched) != 0)
        return replay_fail(r, "%s", lhost_errmsg(rep->host));
    return 0;
}

int replay_start_sched(replay_t *r, const sched_config_t *cfg) {
    return replay_start_sched_at(r, 0, cfg);
}

int32_t replay_unfinished(const replay_t *r) {
    int32_t n = 0;
    for (int32_t i = 0; i < r->n_reps; i++)
        if (r->reps[i].sched) n += sched_num_unfinished(r->reps[i].sched);
    return n;
}

int replay_open_trace(replay_t *r, const char *path, const trace_opts_t *opts) {
    r->trace = trace_open(path, opts);
    if (!r->trace) return replay_fail(r, "out of memory opening the trace");
    if (trace_errmsg(r->trace)) return replay_fail(r, "%s", trace_errmsg(r->trace));
    int got = trace_next(r->trace, &r->ahead);
    if (got < 0) return replay_fail(r, "%s", trace_errmsg(r->trace));
    if (got > 0) {
        r->have_ahead = 1;
        return 0;
    }
    /* A run of 0 requests would be recorded as done and compare as a perfect run. */
    if (opts && (opts->start_s > 0 || opts->duration_s > 0)) {
        char dur[64] = "";
        if (opts->duration_s > 0) snprintf(dur, sizeof dur, ", --duration %g s", opts->duration_s);
        return replay_fail(r, "%s: no request to replay in the window --start %g s%s: it "
                           "begins after the trace's last request, or holds none", path,
                           opts->start_s, dur);
    }
    return replay_fail(r, "%s: the trace holds no request", path);
}

int replay_next(replay_t *r, trace_req_t *q) {
    if (r->have_ahead) {
        *q = r->ahead;
        r->have_ahead = 0;
        return 1;
    }
    int got = trace_next(r->trace, q);
    if (got < 0) return replay_fail(r, "%s", trace_errmsg(r->trace));
    return got;
}

void replay_count_trace(replay_t *r, const char *path, const trace_opts_t *opts) {
    if (!path || !strcmp(path, "-")) return;
    trace_t *t = trace_open(path, opts);
    trace_req_t q;
    int64_t n = 0;
    while (t && !trace_errmsg(t) && trace_next(t, &q) == 1) n++;
    /* a bad row is the replay's to report, where it is reached */
    r->total = t && !trace_errmsg(t) ? n : 0;
    trace_close(t);
}

void replay_progress(replay_t *r, const char *who, double t, int64_t steps, int final) {
    double w = replay_wall();
    if (!final && w - r->last_progress < 0.2) return;
    r->last_progress = w;
    int32_t waiting = 0, running = 0;
    for (int32_t i = 0; i < r->n_reps; i++) {
        if (!r->reps[i].sched) continue;
        const sched_view_t *v = sched_view(r->reps[i].sched);
        waiting += v->n_waiting;
        running += v->n_running;
    }
    char total[96] = "", eta[48] = "";
    if (r->total > 0) {
        double frac = (double)r->requests / (double)r->total;
        snprintf(total, sizeof total, "/%lld (%.0f%%)", (long long)r->total, 100 * frac);
        /* arrivals are what the replay walks through: their rate so far predicts the rest */
        if (!final && frac > 0.01)
            snprintf(eta, sizeof eta, "  ETA %.0f s", (w - r->wall0) * (1 - frac) / frac);
    }
    fprintf(stderr, "\r[%s] t=%.1fs  requests %lld%s  waiting %d  running %d  steps %lld%s   %s",
            who, t, (long long)r->requests, total, waiting, running,
            (long long)steps, eta, final ? "\n" : "");
}

void replay_describe_trace(const char *path, const trace_opts_t *t, char *buf, size_t len) {
    /* only the options that narrow the replay: "duration 0 s, limit 0" read as limits */
    int n = snprintf(buf, len, "%s (rate_scale %g", path, t->rate_scale > 0 ? t->rate_scale : 1.0);
    if (n >= 0 && (size_t)n < len && t->start_s > 0)
        n += snprintf(buf + n, len - (size_t)n, ", start %g s", t->start_s);
    if (n >= 0 && (size_t)n < len && t->duration_s > 0)
        n += snprintf(buf + n, len - (size_t)n, ", duration %g s", t->duration_s);
    if (n >= 0 && (size_t)n < len && t->limit > 0)
        n += snprintf(buf + n, len - (size_t)n, ", limit %lld", (long long)t->limit);
    if (n >= 0 && (size_t)n < len && (t->max_prompt > 0 || t->max_output > 0))
        n += snprintf(buf + n, len - (size_t)n, ", max_prompt %d, max_output %d",
                      t->max_prompt, t->max_output);
    if (n >= 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, ")");
}

void replay_json_path(FILE *f, const char *key, const char *path) {
    char *abs = path && strcmp(path, "-") ? realpath(path, NULL) : NULL;
    fprintf(f, "\"%s\":", key);
    json_write_str(f, abs ? abs : path ? path : "");
    free(abs);
}

void replay_trace_json(FILE *f, const char *path, const trace_opts_t *t) {
    fputs("\"trace\":{", f);
    replay_json_path(f, "path", path);
    fprintf(f, ",\"format\":\"%s\",\"rate_scale\":%.17g,\"start_s\":%.17g,"
               "\"duration_s\":%.17g,\"limit\":%lld,\"max_prompt\":%d,\"max_output\":%d}",
            trace_format_name(t->format), t->rate_scale > 0 ? t->rate_scale : 1.0, t->start_s,
            t->duration_s, (long long)t->limit, t->max_prompt, t->max_output);
}

int replay_begin(replay_t *r, const rec_run_info_t *info) {
    if (rec_run_begin(r->rec, info, &r->run_id) != 0) {
        r->failed = 0; /* the database problem is the one to report */
        return replay_fail(r, "%s", rec_errmsg(r->rec));
    }
    return 0;
}

/* ------------------------------------------------------------------ the run */

int replay_add(replay_t *r, const trace_req_t *q, int32_t hash_block, double now) {
    return replay_add_at(r, 0, q, hash_block, now);
}

int replay_reject_unrouted(replay_t *r, const trace_req_t *q, const char *reason) {
    rec_request_t row = {
        .req_id = q->id, .arrival_s = q->arrival_s, .prompt_tokens = q->prompt_tokens,
        .output_tokens = q->output_tokens, .first_scheduled_s = -1, .first_token_s = -1,
        .finish_s = -1, .priority = q->priority, .deadline_s = q->deadline_s,
        .status = "rejected", .reason = reason, .replica = -1,
    };
    snprintf(row.tenant, sizeof row.tenant, "%s", q->tenant);
    r->requests++;
    r->idle_calls = 0;
    if (rec_request(r->rec, r->run_id, &row) != 0)
        return replay_fail(r, "recording request %d: %s", q->id, rec_errmsg(r->rec));
    return 0;
}

static int add(replay_t *r, int32_t i, const trace_req_t *q, int32_t hash_block, int handoff,
               double now) {
    sched_t *s = r->reps[i].sched;
    sched_new_req_t n = {
        .id = q->id, .arrival_s = q->arrival_s, .prompt_tokens = q->prompt_tokens,
        .output_tokens = q->output_tokens, .max_output_tokens = q->max_output_tokens,
        .predicted_output_tokens = q->predicted_output_tokens,
        .priority = q->priority, .deadline_s = q->deadline_s,
        .tenant = q->tenant[0] ? q->tenant : NULL,
        .hash_ids = q->hash_ids, .n_hash = q->n_hash,
        .hash_block = hash_block, .handoff = handoff,
    };
    r->requests++;
    r->idle_calls = 0;   /* the idle bound is on calls without any new input */
    ledger_add(&r->live, q);
    if (sched_add(s, &n, now) != 0) return replay_fail(r, "%s", sched_errmsg(s));
    return r->failed ? -1 : 0;
}

int replay_add_at(replay_t *r, int32_t i, const trace_req_t *q, int32_t hash_block,
                  double now) {
    return add(r, i, q, hash_block, 0, now);
}

int replay_add_prefill(replay_t *r, int32_t i, const trace_req_t *q, int32_t hash_block,
                       double now) {
    return add(r, i, q, hash_block, 1, now);
}

int replay_after_step(replay_t *r, const sched_plan_t *p) {
    int sampled = 0;
    for (int32_t i = 0; i < p->n && !sampled; i++) sampled = p->entries[i].sample;
    r->idle_calls = 0;
    r->steps_without_token = sampled ? 0 : r->steps_without_token + 1;
    if (r->steps_without_token > REPLAY_MAX_STEPS_WITHOUT_TOKEN)
        return replay_fail(r, "policy %s ran %d steps in a row in which no request got a "
                           "token (a livelock: e.g. preempting and re-admitting the same "
                           "requests)", r->policy_path, REPLAY_MAX_STEPS_WITHOUT_TOKEN);
    return 0;
}

int replay_after_idle(replay_t *r) {
    if (++r->idle_calls > REPLAY_MAX_IDLE_WAKES)
        return replay_fail(r, "policy %s was called %d times in a row without scheduling "
                           "anything (a policy bug)", r->policy_path, REPLAY_MAX_IDLE_WAKES);
    return 0;
}

int replay_stalled(replay_t *r, double now) {
    int32_t waiting = 0, running = 0;
    for (int32_t i = 0; i < r->n_reps; i++) {
        const sched_view_t *v = sched_view(r->reps[i].sched);
        waiting += v->n_waiting;
        running += v->n_running;
    }
    return replay_fail(r, "policy %s stalled at t=%.3f s: %d requests unfinished (%d waiting, "
                       "%d running) with nothing scheduled, no wake-up requested and no "
                       "arrival left (a policy bug: schedule() must make progress or call "
                       "s:wake_at)", r->policy_path, now, replay_unfinished(r), waiting,
                       running);
}

const char *replay_signal_name(int sig) {
    static char buf[32];
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: snprintf(buf, sizeof buf, "signal %d", sig); return buf;
    }
}

int replay_interrupted(replay_t *r, double now) {
    int sig = r->interrupt ? *r->interrupt : 0;
    if (!sig) return 0;
    r->interrupted = 1;
    return replay_fail(r, "interrupted by %s at t=%.3f s", replay_signal_name(sig), now);
}

int replay_not_started(replay_t *r) {
    int sig = r->interrupt ? *r->interrupt : 0;
    if (!sig) return 0;
    r->interrupted = 1;
    return replay_fail(r, "not run: interrupted by %s before it started",
                       replay_signal_name(sig));
}

int replay_record_step(replay_t *r, rec_step_t *st) { return replay_record_step_at(r, 0, st); }

int replay_record_step_at(replay_t *r, int32_t i, rec_step_t *st) {
    sched_t *s = r->reps[i].sched;
    st->kv_used = sched_kv_used(s);
    st->kv_total = sched_kv_total(s);
    st->num_waiting = sched_view(s)->n_waiting;
    st->replica = i;
    if (rec_step(r->rec, r->run_id, st) != 0)
        return replay_fail(r, "recording step %lld: %s", (long long)st->step, rec_errmsg(r->rec));
    return 0;
}

int replay_finish(replay_t *r) {
    if (r->run_id < 0) return -1;
    for (int32_t i = 0; r->failed && i < r->n_reps; i++)
        if (r->reps[i].sched) sched_abort_all(r->reps[i].sched, r->err);
    double wall = replay_wall() - r->wall0;
    if (rec_run_end(r->rec, r->run_id, !r->failed, r->failed ? r->err : NULL, wall) != 0 &&
        !r->failed)
        replay_fail(r, "%s", rec_errmsg(r->rec));
    return r->failed ? -1 : 0;
}

/* 1 when the database holds no run: nobody's records would go with the file. Another process
 * could begin a run between this check and the removal; a database that two commands create
 * at the same instant, one of them failing, is not worth a lock. */
static int db_holds_no_run(rec_t *rec) {
    sqlite3_stmt *st = NULL;
    sqlite3 *db = rec ? rec_db(rec) : NULL;
    int empty = db && sqlite3_prepare_v2(db, "SELECT count(*) FROM runs", -1, &st, NULL) ==
                          SQLITE_OK &&
                sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int64(st, 0) == 0;
    sqlite3_finalize(st);
    return empty;
}

void replay_close(replay_t *r) {
    trace_close(r->trace);
    for (int32_t i = 0; i < r->n_reps; i++) {
        sched_free(r->reps[i].sched);
        lhost_close(r->reps[i].host);
    }
    free(r->reps);
    r->reps = NULL;
    r->n_reps = 0;
    free(r->live.v);
    int remove_db = r->created_db && r->run_id < 0 && db_holds_no_run(r->rec);
    rec_close(r->rec);
    if (remove_db) rec_remove(r->created_db);
    free(r->created_db);
    r->created_db = NULL;
    r->trace = NULL;
    r->sched = NULL;
    r->host = NULL;
    r->live.v = NULL;
    r->rec = NULL;
}
