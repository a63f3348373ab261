/* experiment: repeated runs recorded as one experiment (contract: experiment.h). */
#include "analysis/experiment.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/summary.h"

static int parse_u64(const char *s, const char *end, uint64_t *v) {
    char buf[32];
    size_t len = (size_t)(end - s);
    if (len == 0 || len >= sizeof buf) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    for (size_t i = 0; i < len; i++)
        if (buf[i] < '0' || buf[i] > '9') return 0;
    errno = 0;
    char *e = NULL;
    unsigned long long x = strtoull(buf, &e, 10);
    if (errno || *e) return 0;
    *v = (uint64_t)x;
    return 1;
}

int experiment_parse_seeds(const char *spec, uint64_t base, uint64_t **seeds, int *n, char *err,
                           size_t errlen) {
    uint64_t *out = NULL;
    int count = 0, ret = -1;
    *seeds = NULL;
    *n = 0;
    if (!spec || !*spec) {
        snprintf(err, errlen, "--repeat needs N or a list of seeds");
        goto done;
    }
    out = malloc(EXPERIMENT_MAX_RUNS * sizeof *out);
    if (!out) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    if (!strchr(spec, ',')) {
        uint64_t v;
        if (!parse_u64(spec, spec + strlen(spec), &v) || v < 1 || v > EXPERIMENT_MAX_RUNS) {
            snprintf(err, errlen, "--repeat '%s': N must be a whole number in 1..%d (or give "
                     "seeds as a list, S1,S2,...)", spec, EXPERIMENT_MAX_RUNS);
            goto done;
        }
        for (uint64_t k = 0; k < v; k++) out[count++] = base + k;
    } else {
        const char *s = spec;
        while (*s) {
            const char *e = strchr(s, ',');
            if (!e) e = s + strlen(s);
            uint64_t v;
            if (e == s && !*e) break;   /* a trailing comma: "7," is one seed */
            if (!parse_u64(s, e, &v)) {
                snprintf(err, errlen, "--repeat '%s': '%.*s' is not a seed (a whole number "
                         ">= 0)", spec, (int)(e - s), s);
                goto done;
            }
            for (int k = 0; k < count; k++) {
                if (out[k] == v) {
                    /* Two runs of one seed are the same run twice (the simulator is
                     * deterministic), which would shrink the run-to-run spread. */
                    snprintf(err, errlen, "--repeat '%s': seed %" PRIu64 " is given twice",
                             spec, v);
                    goto done;
                }
            }
            if (count == EXPERIMENT_MAX_RUNS) {
                snprintf(err, errlen, "--repeat '%s': more than %d seeds", spec,
                         EXPERIMENT_MAX_RUNS);
                goto done;
            }
            out[count++] = v;
            s = *e ? e + 1 : e;
        }
        if (count == 0) {
            snprintf(err, errlen, "--repeat '%s': no seeds", spec);
            goto done;
        }
    }
    *seeds = out;
    *n = count;
    out = NULL;
    ret = 0;
done:
    free(out);
    return ret;
}

int experiment_parse_windows(const char *spec, int *n, double *len, char *err, size_t errlen) {
    if (!spec || strncmp(spec, "windows:", 8) != 0) return 0;
    const char *p = spec + 8, *colon = strchr(p, ':');
    uint64_t v;
    if (!parse_u64(p, colon ? colon : p + strlen(p), &v) || v < 2 || v > EXPERIMENT_MAX_RUNS) {
        snprintf(err, errlen, "--repeat '%s': windows:N needs N, a whole number in 2..%d "
                 "(windows:N:LEN for windows of LEN seconds)", spec, EXPERIMENT_MAX_RUNS);
        return -1;
    }
    *n = (int)v;
    *len = NAN;
    if (colon) {
        char *end = NULL;
        double l = strtod(colon + 1, &end);
        if (end == colon + 1 || *end || !(l > 0) || l > 1e9) {
            snprintf(err, errlen, "--repeat '%s': LEN '%s' must be seconds > 0", spec,
                     colon + 1);
            return -1;
        }
        *len = l;
    }
    return 1;
}

int experiment_check_name(const char *name, char *err, size_t errlen) {
    if (!name || !*name || strlen(name) > 120) {
        snprintf(err, errlen, "an experiment name must be 1 to 120 bytes");
        return -1;
    }
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
        if (*c == '"' || *c == '\\' || *c < 0x20) {
            snprintf(err, errlen, "experiment name '%s': it cannot hold '\"', '\\' or a control "
                     "character (it is written into each run's JSON config)", name);
            return -1;
        }
    }
    return 0;
}

void experiment_run_name(char *buf, size_t len, const char *name, int index) {
    snprintf(buf, len, "%s-r%d", name, index);
}

void experiment_member(char *buf, size_t len, const char *name, int index, int of,
                       uint64_t seed) {
    snprintf(buf, len, "\"experiment\":{\"name\":\"%s\",\"index\":%d,\"of\":%d,\"seed\":%" PRIu64
             "}", name, index, of, seed);
}

void experiment_member_window(char *buf, size_t len, const char *name, int index, int of,
                              uint64_t seed, double start_s, double duration_s) {
    snprintf(buf, len, "\"experiment\":{\"name\":\"%s\",\"index\":%d,\"of\":%d,\"seed\":%" PRIu64
             ",\"window\":{\"start_s\":%.17g,\"duration_s\":%.17g}}", name, index, of, seed,
             start_s, duration_s);
}

int experiment_identical(sqlite3 *db, const int64_t *ids, size_t n, int *same, char *err,
                         size_t errlen) {
    sqlite3_stmt *st = NULL;
    *same = n >= 2;
    /* rows of run k that run 0 lacks, and the other way round, and the counts */
    static const char sql[] =
        "SELECT (SELECT count(*) FROM requests WHERE run_id = ?1) = (SELECT count(*) FROM "
        "requests WHERE run_id = ?2) AND NOT EXISTS (SELECT req_id, status, generated_tokens, "
        "ttft_s, e2e_s FROM requests WHERE run_id = ?2 EXCEPT SELECT req_id, status, "
        "generated_tokens, ttft_s, e2e_s FROM requests WHERE run_id = ?1)";
    if (*same && sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "%s", sqlite3_errmsg(db));
        return -1;
    }
    for (size_t k = 1; *same && k < n; k++) {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, ids[0]);
        sqlite3_bind_int64(st, 2, ids[k]);
        if (sqlite3_step(st) != SQLITE_ROW) {
            snprintf(err, errlen, "%s", sqlite3_errmsg(db));
            sqlite3_finalize(st);
            return -1;
        }
        *same = sqlite3_column_int(st, 0) == 1;
    }
    sqlite3_finalize(st);
    return 0;
}

static const char SQL_EXP_IDS[] =
    "SELECT id FROM runs WHERE json_valid(config) "
    "AND json_extract(config, '$.experiment.name') = ?1 "
    "ORDER BY json_extract(config, '$.experiment.index'), id";

/* 1 when name is taken in db (as an experiment, or as one of its would-be run names), 0 when
 * free, -1 on a database error other than a missing runs table (a fresh file is empty). */
static int name_taken(sqlite3 *db, const char *name, int n) {
    sqlite3_stmt *st = NULL;
    int taken = 0;
    if (sqlite3_prepare_v2(db, SQL_EXP_IDS, -1, &st, NULL) != SQLITE_OK) return 0;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    taken = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    for (int k = 0; !taken && k < n; k++) {
        char run[160];
        experiment_run_name(run, sizeof run, name, k);
        if (sqlite3_prepare_v2(db, "SELECT 1 FROM runs WHERE name = ?1", -1, &st, NULL) !=
            SQLITE_OK)
            return 0;
        sqlite3_bind_text(st, 1, run, -1, SQLITE_STATIC);
        taken = sqlite3_step(st) == SQLITE_ROW;
        sqlite3_finalize(st);
    }
    return taken;
}

int experiment_pick_name(const char *db_path, const char *requested, const char *stem, int n,
                         char *out, size_t outlen, char *err, size_t errlen) {
    sqlite3 *db = NULL;
    int ret = -1;
    if (requested && experiment_check_name(requested, err, errlen)) goto done;
    /* A missing or unreadable file is an empty database (the recorder says what is wrong
     * with it later); opened read-only, so nothing is created here. */
    char why[512];
    if (summary_open_file(db_path, &db, why, sizeof why) != 0) db = NULL;
    if (requested) {
        if (db && name_taken(db, requested, n)) {
            snprintf(err, errlen, "%s already holds an experiment or run named '%s' (or "
                     "'%s-r0'...); choose another --name", db_path, requested, requested);
            goto done;
        }
        snprintf(out, outlen, "%s", requested);
        ret = 0;
        goto done;
    }
    for (int k = 1; k < 100000; k++) {
        char cand[128];
        if (k == 1) snprintf(cand, sizeof cand, "%s", stem);
        else snprintf(cand, sizeof cand, "%s-%d", stem, k);
        if (experiment_check_name(cand, err, errlen)) goto done;
        if (!db || !name_taken(db, cand, n)) {
            snprintf(out, outlen, "%s", cand);
            ret = 0;
            goto done;
        }
    }
    snprintf(err, errlen, "no free experiment name for '%s'; give one with --name", stem);
done:
    sqlite3_close(db);
    return ret;
}

int experiment_resolve(sqlite3 *db, const char *name, int64_t **ids, size_t *n,
                       int *is_experiment, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int64_t *arr = NULL;
    size_t len = 0, cap = 0;
    int ret = -1, rc;
    *ids = NULL;
    *n = 0;
    *is_experiment = 0;
    if (name && *name) {
        if (sqlite3_prepare_v2(db, SQL_EXP_IDS, -1, &st, NULL) != SQLITE_OK) goto sql_error;
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (len == cap) {
                cap = cap ? 2 * cap : 8;
                int64_t *grown = realloc(arr, cap * sizeof *arr);
                if (!grown) {
                    snprintf(err, errlen, "out of memory");
                    goto done;
                }
                arr = grown;
            }
            arr[len++] = sqlite3_column_int64(st, 0);
        }
        if (rc != SQLITE_DONE) goto sql_error;
    }
    if (len == 0) {
        /* Not an experiment: a plain run is an experiment of one. */
        free(arr);
        arr = malloc(sizeof *arr);
        if (!arr) {
            snprintf(err, errlen, "out of memory");
            goto done;
        }
        if (summary_find_run(db, name, &arr[0], err, errlen) != 0) goto done;
        len = 1;
    } else {
        *is_experiment = 1;
    }
    *ids = arr;
    *n = len;
    arr = NULL;
    ret = 0;
    goto done;
sql_error:
    snprintf(err, errlen, "cannot look up experiment '%s': %s", name, sqlite3_errmsg(db));
done:
    sqlite3_finalize(st);
    free(arr);
    return ret;
}

int experiment_check_done(sqlite3 *db, const char *name, const int64_t *ids, size_t n,
                          int is_experiment, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int ret = -1;
    if (sqlite3_prepare_v2(db, "SELECT name, status, coalesce(error, ''), "
                           "json_extract(config, '$.experiment.of') FROM runs WHERE id = ?1",
                           -1, &st, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot read runs: %s", sqlite3_errmsg(db));
        goto done;
    }
    int64_t of = 0;
    for (size_t k = 0; k < n; k++) {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, ids[k]);
        if (sqlite3_step(st) != SQLITE_ROW) {
            snprintf(err, errlen, "cannot read run %lld: %s", (long long)ids[k],
                     sqlite3_errmsg(db));
            goto done;
        }
        const char *run = (const char *)sqlite3_column_text(st, 0);
        const char *status = (const char *)sqlite3_column_text(st, 1);
        const char *error = (const char *)sqlite3_column_text(st, 2);
        if (sqlite3_column_type(st, 3) != SQLITE_NULL) of = sqlite3_column_int64(st, 3);
        if (strcmp(status, "done") != 0) {
            snprintf(err, errlen, "run '%s'%s%s%s is %s, not done%s%.300s: a partial run "
                     "compares as better than it is (--include-failed compares it anyway)",
                     run, is_experiment ? " of experiment '" : "", is_experiment ? name : "",
                     is_experiment ? "'" : "", status, error[0] ? ": " : "", error);
            goto done;
        }
    }
    if (is_experiment && of > (int64_t)n) {
        snprintf(err, errlen, "experiment '%s' has %zu of its %lld runs (the rest were not "
                 "run: an interrupted --repeat or sweep); --include-failed compares the runs "
                 "it has", name, n, (long long)of);
        goto done;
    }
    ret = 0;
done:
    sqlite3_finalize(st);
    return ret;
}
