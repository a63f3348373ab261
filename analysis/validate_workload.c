/* validate_workload: what a replay of an engine (or serve) run needs, read from its runs row
 * and config (validate_internal.h). */
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "analysis/validate_internal.h"
#include "sim/presets.h"
#include "traces/json.h"


void validate_workload_free(workload_t *w) {
    for (int i = 0; i < w->n_sets; i++) free(w->sets[i]);
    free(w->sets);
    w->sets = NULL;
    w->n_sets = 0;
}

void validate_copy_text(char *dst, size_t len, sqlite3_stmt *st, int col) {
    const char *s = (const char *)sqlite3_column_text(st, col);
    snprintf(dst, len, "%s", s ? s : "");
}

int validate_run_row(sqlite3 *db, const char *path, const char *sql, int64_t id,
                     sqlite3_stmt **st, char *err, size_t errlen) {
    if (sqlite3_prepare_v2(db, sql, -1, st, NULL) != SQLITE_OK)
        return errf(err, errlen, "%s: %s", path, sqlite3_errmsg(db));
    sqlite3_bind_int64(*st, 1, id);
    if (sqlite3_step(*st) != SQLITE_ROW)
        return errf(err, errlen, "%s: run %lld is gone", path, (long long)id);
    return 0;
}

static int load_sets(sqlite3 *db, int64_t id, workload_t *w, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int rc = -1;
    if (sqlite3_prepare_v2(db, "SELECT j.key, j.type, j.value FROM runs r, json_each(r.params) j "
                           "WHERE r.id = ?1", -1, &st, NULL) != SQLITE_OK)
        return errf(err, errlen, "cannot read the run's params: %s", sqlite3_errmsg(db));
    sqlite3_bind_int64(st, 1, id);
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(st, 0);
        const char *type = (const char *)sqlite3_column_text(st, 1);
        char val[512];
        if (!key || !type) continue;
        if (!strcmp(type, "true") || !strcmp(type, "false")) snprintf(val, sizeof val, "%s", type);
        else if (!strcmp(type, "integer") || !strcmp(type, "real"))
            snprintf(val, sizeof val, "%.17g", sqlite3_column_double(st, 2));
        else if (!strcmp(type, "text")) validate_copy_text(val, sizeof val, st, 2);
        else continue;   /* params are scalars; anything else is not the policy's */
        char **v = realloc(w->sets, sizeof *v * (size_t)(w->n_sets + 1));
        if (!v) goto oom;
        w->sets = v;
        size_t n = strlen(key) + strlen(val) + 2;
        if (!(v[w->n_sets] = malloc(n))) goto oom;
        snprintf(v[w->n_sets++], n, "%s=%s", key, val);
    }
    if (r != SQLITE_DONE) {
        errf(err, errlen, "cannot read the run's params: %s", sqlite3_errmsg(db));
        goto done;
    }
    rc = 0;
    goto done;
oom:
    errf(err, errlen, "out of memory");
done:
    sqlite3_finalize(st);
    return rc;
}

/* A speculative run: replayable when it ran a draft model that recorded its shape and its
 * acceptance (the n-gram proposer has no model the simulator knows). 0 or -1. */
/* A model shape the run's config records under `member` (shape, draft_shape: the integer
 * keys of preset_model_t); `what` names it in the message ("its model's"). */
static int read_shape(sqlite3 *db, int64_t id, const char *member, const char *what,
                      const char *run, preset_model_t *out, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int rc = -1;
    for (int i = 0; i < preset_model_n_keys; i++) {
        const kv_spec_t *k = &preset_model_keys[i];
        if (k->type != KV_INT) continue;
        char q[160];
        snprintf(q, sizeof q, "SELECT json_extract(config, '$.%s.%s') FROM runs WHERE id = ?1",
                 member, k->key);
        if (sqlite3_prepare_v2(db, q, -1, &st, NULL) != SQLITE_OK ||
            (sqlite3_bind_int64(st, 1, id), sqlite3_step(st)) != SQLITE_ROW) {
            errf(err, errlen, "run '%s' does not record %s shape (%s)", run, what, k->key);
            goto done;
        }
        /* a dense shape records no expert keys, nor the later ones at 0 (preset_model_json) */
        if (sqlite3_column_type(st, 0) == SQLITE_NULL && !preset_model_key_may_be_absent(i)) {
            errf(err, errlen, "run '%s' does not record %s shape (%s)", run, what, k->key);
            goto done;
        }
        int32_t v = sqlite3_column_int(st, 0);
        memcpy((char *)out + k->offset, &v, sizeof v);
        sqlite3_finalize(st);
        st = NULL;
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    return rc;
}

static int load_draft(sqlite3 *db, int64_t id, workload_t *w, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int rc = -1;
    if (sqlite3_prepare_v2(db, "SELECT json_extract(config, '$.proposer'), json_extract(config, "
                           "'$.draft_spec'), json_extract(config, '$.draft_shape') IS NOT NULL, "
                           "(SELECT 1.0 * sum(a.value) FROM json_each(config, "
                           "'$.spec_curve.accepted') a) / (SELECT sum(r.value) FROM json_each("
                           "config, '$.spec_curve.reached') r) FROM runs WHERE id = ?1", -1, &st,
                           NULL) != SQLITE_OK ||
        (sqlite3_bind_int64(st, 1, id), sqlite3_step(st)) != SQLITE_ROW) {
        errf(err, errlen, "cannot read run '%s''s draft: %s", w->name, sqlite3_errmsg(db));
        goto done;
    }
    const char *proposer = (const char *)sqlite3_column_text(st, 0);
    if (!proposer || strcmp(proposer, "draft") || !sqlite3_column_int(st, 2) ||
        sqlite3_column_type(st, 3) == SQLITE_NULL) {
        errf(err, errlen, "run '%s' is speculative with %s: the simulator models a draft "
             "model, so validate replays only runs with one that recorded its shape and "
             "acceptance (engine --draft FILE); `twinserve calibrate` prints its acceptance "
             "per draft position and the alpha it implies", w->name,
             proposer && !strcmp(proposer, "draft") ? "a draft model from an older twinserve"
                                                    : "the n-gram proposer");
        goto done;
    }
    w->draft = 1;
    validate_copy_text(w->draft_spec, sizeof w->draft_spec, st, 1);
    w->alpha = sqlite3_column_double(st, 3);
    sqlite3_finalize(st);
    st = NULL;
    if (read_shape(db, id, "draft_shape", "its draft's", w->name, &w->draft_shape, err,
                   errlen) != 0)
        goto done;
    snprintf(w->draft_shape.name, sizeof w->draft_shape.name, "%.47s",
             strrchr(w->draft_spec, '/') ? strrchr(w->draft_spec, '/') + 1 : w->draft_spec);
    rc = 0;
done:
    sqlite3_finalize(st);
    return rc;
}

int validate_load_workload(sqlite3 *db, const char *path, int64_t id, workload_t *w,
                           char *err, size_t errlen) {
    static const char *const cols[] = {
        "name", "kind", "status", "seed",
        "json_extract(config, '$.trace.path')", "json_extract(config, '$.trace.format')",
        "json_extract(config, '$.trace.rate_scale')", "json_extract(config, '$.trace.start_s')",
        "json_extract(config, '$.trace.duration_s')", "json_extract(config, '$.trace.limit')",
        "json_extract(config, '$.trace.max_prompt')", "json_extract(config, '$.trace.max_output')",
        "json_extract(config, '$.policy_file')", "json_extract(config, '$.block_size')",
        "json_extract(config, '$.max_tokens')", "json_extract(config, '$.max_seqs')",
        "json_extract(config, '$.max_model_len')", "json_extract(config, '$.num_blocks')",
        "json_extract(config, '$.watermark')",
        "EXISTS (SELECT 1 FROM tokens t WHERE t.run_id = runs.id)",
        "json_extract(config, '$.model_spec')", "json_extract(config, '$.backend')",
        "json_extract(config, '$.dtype')", "json_extract(config, '$.threads')",
        "json_extract(config, '$.batch_invariant')", "json_extract(config, '$.temperature')",
        "json_extract(config, '$.top_p')", "json_extract(config, '$.top_k')",
        "(SELECT sum(spec_proposed) FROM requests q WHERE q.run_id = runs.id)",
        "coalesce(json_extract(config, '$.oracle_lengths'), 1)",
        "json_extract(config, '$.max_output_tokens')",
        "coalesce(json_extract(config, '$.clip_to_context'), 0)",
        "coalesce(json_extract(config, '$.prefix_caching'), 0)",
        "json_extract(config, '$.weights')", "json_extract(config, '$.kv_type')",
        "json_extract(config, '$.policy_cost')",
    };
    char sql[4096] = "SELECT ";
    for (size_t i = 0; i < sizeof cols / sizeof *cols; i++) {
        strcat(sql, cols[i]);
        strcat(sql, i + 1 < sizeof cols / sizeof *cols ? ", " : " FROM runs WHERE id = ?1");
    }
    sqlite3_stmt *st = NULL;
    int rc = -1;
    memset(w, 0, sizeof *w);
    w->id = id;
    if (validate_run_row(db, path, sql, id, &st, err, errlen) != 0) goto done;
    validate_copy_text(w->name, sizeof w->name, st, 0);
    const char *kind = (const char *)sqlite3_column_text(st, 1);
    const char *status = (const char *)sqlite3_column_text(st, 2);
    if (!kind || (strcmp(kind, "engine") && strcmp(kind, "serve"))) {
        errf(err, errlen, "run '%s' in %s is a %s run: validate holds the simulator against "
             "a measured (engine or serve) run", w->name, path, kind ? kind : "?");
        goto done;
    }
    if (!status || strcmp(status, "done")) {
        errf(err, errlen, "run '%s' in %s is %s, not done: there is no complete measurement "
             "to hold the simulator against", w->name, path, status ? status : "?");
        goto done;
    }
    if (sqlite3_column_type(st, 4) == SQLITE_NULL || sqlite3_column_type(st, 12) == SQLITE_NULL ||
        sqlite3_column_type(st, 17) == SQLITE_NULL) {
        errf(err, errlen, "run '%s' in %s does not record its workload (trace options, policy "
             "file, KV blocks): it was made by an older twinserve; record it again", w->name,
             path);
        goto done;
    }
    if (sqlite3_column_int64(st, 28) > 0 && load_draft(db, id, w, err, errlen) != 0) goto done;
    w->seed = (uint64_t)sqlite3_column_int64(st, 3);
    validate_copy_text(w->trace, sizeof w->trace, st, 4);
    char fmt[32];
    validate_copy_text(fmt, sizeof fmt, st, 5);
    if (trace_format_parse(fmt, &w->topts.format) != 0) w->topts.format = TRACE_FMT_AUTO;
    w->topts.rate_scale = sqlite3_column_double(st, 6);
    w->topts.start_s = sqlite3_column_double(st, 7);
    w->topts.duration_s = sqlite3_column_double(st, 8);
    w->topts.limit = sqlite3_column_int64(st, 9);
    w->topts.max_prompt = sqlite3_column_int(st, 10);
    w->topts.max_output = sqlite3_column_int(st, 11);
    validate_copy_text(w->policy, sizeof w->policy, st, 12);
    w->block_size = sqlite3_column_int(st, 13);
    w->max_tokens = sqlite3_column_int(st, 14);
    w->max_seqs = sqlite3_column_int(st, 15);
    w->max_model_len = sqlite3_column_int(st, 16);
    w->num_blocks = sqlite3_column_int(st, 17);
    w->watermark = sqlite3_column_double(st, 18);
    w->save_tokens = sqlite3_column_int(st, 19);
    validate_copy_text(w->model_spec, sizeof w->model_spec, st, 20);
    validate_copy_text(w->backend, sizeof w->backend, st, 21);
    validate_copy_text(w->dtype, sizeof w->dtype, st, 22);
    w->threads = sqlite3_column_int(st, 23);
    w->batch_invariant = sqlite3_column_int(st, 24);
    w->temperature = sqlite3_column_double(st, 25);
    w->top_p = sqlite3_column_double(st, 26);
    w->top_k = sqlite3_column_int(st, 27);
    w->oracle_lengths = sqlite3_column_int(st, 29) != 0;
    w->max_output_tokens = sqlite3_column_int(st, 30);
    w->clip_to_context = sqlite3_column_int(st, 31) != 0; /* the same load on both sides */
    w->prefix_caching = sqlite3_column_int(st, 32) != 0;   /* the same cache on both sides */
    validate_copy_text(w->weights, sizeof w->weights, st, 33);
    validate_copy_text(w->kv_type, sizeof w->kv_type, st, 34);
    validate_copy_text(w->policy_cost, sizeof w->policy_cost, st, 35);
    struct stat sb;
    if (stat(w->trace, &sb) != 0) {
        errf(err, errlen, "run '%s' replayed the trace %s, which is gone: validate needs the "
             "same trace", w->name, w->trace);
        goto done;
    }
    if (stat(w->policy, &sb) != 0) {
        errf(err, errlen, "run '%s' ran the policy %s, which is gone: validate needs the same "
             "policy", w->name, w->policy);
        goto done;
    }
    sqlite3_finalize(st);
    st = NULL;
    /* the model's shape, as the engine recorded it */
    if (read_shape(db, id, "shape", "its model's", w->name, &w->shape, err, errlen) != 0)
        goto done;
    snprintf(w->shape.name, sizeof w->shape.name, "%.47s",
             strrchr(w->model_spec, '/') ? strrchr(w->model_spec, '/') + 1 : w->model_spec);
    if (load_sets(db, id, w, err, errlen) != 0) goto done;
    if (w->draft) {   /* the measured acceptance: a set after the run's own params wins */
        char **v = realloc(w->sets, sizeof *v * (size_t)(w->n_sets + 1));
        if (!v || !(v[w->n_sets] = malloc(64))) {
            if (v) w->sets = v;
            errf(err, errlen, "out of memory");
            goto done;
        }
        w->sets = v;
        snprintf(w->sets[w->n_sets++], 64, "alpha=%.9g", w->alpha);
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    if (rc != 0) validate_workload_free(w);
    return rc;
}

/* ------------------------------------------------------------------ the two sides */

/* A run name not yet in the database: base, base-2, base-3, ... */
