/* summary: a run's headline numbers from the database (contract: summary.h). */
#include "traces/summary.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "traces/recorder.h"

/* ---------------------------------------------------------------- helpers */

static void copy_col(char *dst, size_t len, sqlite3_stmt *st, int col) {
    const unsigned char *t = sqlite3_column_text(st, col);
    snprintf(dst, len, "%s", t ? (const char *)t : "");
}

double summary_column_or_nan(sqlite3_stmt *st, int col) {
    return sqlite3_column_type(st, col) == SQLITE_NULL ? NAN : sqlite3_column_double(st, col);
}

/* 1 yes, 0 no, -1 unreadable (e.g. not an SQLite file). */
static int has_table(sqlite3 *db, const char *name) {
    sqlite3_stmt *st = NULL;
    int found = -1;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        int rc = sqlite3_step(st);
        found = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
    }
    sqlite3_finalize(st);
    return found;
}

/* Looks up one run id by a query with at most one text or integer parameter; 1 found,
 * 0 not found, -1 error. */
static int lookup_id(sqlite3 *db, const char *sql, const char *text, int64_t num, int64_t *id,
                     char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int ret = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) goto done;
    if (text) sqlite3_bind_text(st, 1, text, -1, SQLITE_STATIC);
    else if (sqlite3_bind_parameter_count(st) > 0) sqlite3_bind_int64(st, 1, num);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *id = sqlite3_column_int64(st, 0);
        ret = 1;
    } else if (rc == SQLITE_DONE) {
        ret = 0;
    }
done:
    if (ret < 0) snprintf(err, errlen, "cannot read runs: %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return ret;
}

const char *summary_db_name(sqlite3 *db, char *buf, size_t len) {
    const char *f = sqlite3_db_filename(db, "main");
    char cwd[4096];
    if (!f || !*f) {
        snprintf(buf, len, "the database");
        return buf;
    }
    size_t n = getcwd(cwd, sizeof cwd) ? strlen(cwd) : 0;
    if (n > 0 && !strncmp(f, cwd, n) && f[n] == '/' && f[n + 1]) f += n + 1;
    snprintf(buf, len, "%s", f);
    return buf;
}

/* "no run named 'X' in DB; runs: a, b, c" (DB: summary_db_name), with the list cut to fit
 * err. */
static void unknown_run(sqlite3 *db, const char *what, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    char name[4096];
    size_t used = (size_t)snprintf(err, errlen, "no run named '%s' in %s", what,
                                   summary_db_name(db, name, sizeof name));
    if (used >= errlen) return;
    if (sqlite3_prepare_v2(db, "SELECT name FROM runs ORDER BY id", -1, &st, NULL) != SQLITE_OK)
        goto done;
    int k = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        size_t need = strlen(name) + 8;   /* separator and a possible ", ..." */
        if (used + need >= errlen) {
            snprintf(err + used, errlen - used, ", ...");
            goto done;
        }
        used += (size_t)snprintf(err + used, errlen - used, "%s%s", k++ ? ", " : "; runs: ", name);
    }
    if (k == 0) snprintf(err + used, errlen - used, "; it has no runs");
done:
    sqlite3_finalize(st);
}

/* ---------------------------------------------------------------- open / find / list */

/* 1 when the file's header says WAL (bytes 18 and 19, the read and write versions, are 2),
 * 0 otherwise or when it cannot be read. */
static int file_is_wal(const char *path) {
    unsigned char h[20];
    FILE *f = fopen(path, "rb");
    int wal = f && fread(h, 1, sizeof h, f) == sizeof h && h[18] == 2 && h[19] == 2;
    if (f) fclose(f);
    return wal;
}

/* The bytes of PATH-wal, 0 when there is none. */
static long long wal_bytes(const char *path) {
    char side[4096];
    struct stat sb;
    snprintf(side, sizeof side, "%s-wal", path);
    return stat(side, &sb) == 0 ? (long long)sb.st_size : 0;
}

/* "file:PATH?immutable=1", PATH percent-encoded but for unreserved characters and '/':
 * URI paths give '?', '#' and '%' meaning. 0, or -1 when it does not fit. */
static int immutable_uri(const char *path, char *uri, size_t len) {
    static const char hex[] = "0123456789ABCDEF";
    size_t n = (size_t)snprintf(uri, len, "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (n + 4 >= len) return -1;
        if (isalnum(*p) || strchr("/-._~", *p)) {
            uri[n++] = (char)*p;
        } else {
            uri[n++] = '%';
            uri[n++] = hex[*p >> 4];
            uri[n++] = hex[*p & 15];
        }
    }
    return snprintf(uri + n, len - n, "?immutable=1") < (int)(len - n) ? 0 : -1;
}

/* Can this connection read the file? Reading the schema is the first access that needs the
 * WAL index, so it is where a WAL file in a read-only directory fails. */
static int can_read(sqlite3 *db) {
    return sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL) == SQLITE_OK;
}

int summary_open_file(const char *path, sqlite3 **db, char *err, size_t errlen) {
    struct stat sb;
    *db = NULL;
    if (!path || !*path) {
        snprintf(err, errlen, "no database given");
        return -1;
    }
    /* Checked before SQLite sees the path: a reader must never create an empty database. */
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT) snprintf(err, errlen, "%s: no such database", path);
        else snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "%s: is a directory, not a database", path);
        return -1;
    }
    if (sqlite3_open_v2(path, db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "%s: cannot open: %s", path,
                 *db ? sqlite3_errmsg(*db) : "out of memory");
        goto fail;
    }
    /* A recorder may be committing into the same file right now. */
    sqlite3_busy_timeout(*db, 5000);
    if (can_read(*db)) return 0;
    int code = sqlite3_errcode(*db);
    if ((code != SQLITE_READONLY && code != SQLITE_CANTOPEN) || !file_is_wal(path)) return 0;
    /* A file still in WAL mode (its writer is running, crashed, or predates the recorder's
     * switch back at close) needs PATH-shm, which a read-only directory cannot hold. Read the
     * main file alone: exact unless a writer left rows in PATH-wal, which is then said. */
    char uri[4200];
    if (immutable_uri(path, uri, sizeof uri) != 0) return 0;
    sqlite3_close(*db);
    *db = NULL;
    if (sqlite3_open_v2(uri, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) != SQLITE_OK ||
        !can_read(*db)) {
        snprintf(err, errlen, "%s: cannot open: %s", path,
                 *db ? sqlite3_errmsg(*db) : "out of memory");
        goto fail;
    }
    long long pending = wal_bytes(path);
    if (pending > 0)
        fprintf(stderr, "note: %s is in WAL mode in a directory this user cannot write: read "
                "without %s-wal (%lld bytes), so rows of a running or crashed writer may be "
                "missing\n", path, path, pending);
    return 0;
fail:
    sqlite3_close(*db);
    *db = NULL;
    return -1;
}

int summary_open(const char *path, sqlite3 **db, char *err, size_t errlen) {
    char why[512];
    if (summary_open_file(path, db, err, errlen) != 0) return -1;
    /* For a reader, "no runs table" says all there is about another program's database, so
     * it wins over rec_check_db's finer diagnosis; a file that is not SQLite fails both. */
    int checked = rec_check_db(*db, why, sizeof why);
    int runs = has_table(*db, "runs");
    if (runs == 0) {
        snprintf(err, errlen, "%s: not a twinserve database (no runs table)", path);
        goto fail;
    }
    if (checked != 0 || runs < 0) {
        snprintf(err, errlen, "%s: %s", path, checked != 0 ? why : sqlite3_errmsg(*db));
        goto fail;
    }
    return 0;
fail:
    sqlite3_close(*db);
    *db = NULL;
    return -1;
}

int summary_copy_temp(const char *from, const char *what, char *to, size_t tolen, char *err,
                      size_t errlen) {
    const char *tmpdir = getenv("TMPDIR");
    sqlite3 *src = NULL, *dst = NULL;
    int rc = -1;
    snprintf(to, tolen, "%s/twinserve-%s-XXXXXX.db", tmpdir && *tmpdir ? tmpdir : "/tmp", what);
    int fd = mkstemps(to, 3);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create a temporary database %s: %s", to, strerror(errno));
        to[0] = '\0';
        return -1;
    }
    close(fd);
    if (summary_open_file(from, &src, err, errlen) != 0) goto done;
    if (sqlite3_open(to, &dst) != SQLITE_OK) {
        snprintf(err, errlen, "cannot copy %s: %s", from, sqlite3_errmsg(dst));
        goto done;
    }
    sqlite3_backup *b = sqlite3_backup_init(dst, "main", src, "main");
    int stepped = b ? sqlite3_backup_step(b, -1) : SQLITE_ERROR;
    if (sqlite3_backup_finish(b) != SQLITE_OK || stepped != SQLITE_DONE) {
        snprintf(err, errlen, "cannot copy %s to %s: %s", from, to, sqlite3_errmsg(dst));
        goto done;
    }
    rc = 0;
done:
    sqlite3_close(src);
    sqlite3_close(dst);
    if (rc != 0) {
        rec_remove(to);
        to[0] = '\0';
    }
    return rc;
}

int summary_free_name(sqlite3 *db, const char *base, char *out, size_t len) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM runs WHERE name = ?1", -1, &st, NULL))
        return -1;
    for (int k = 1; k < 100000; k++) {
        if (k == 1) snprintf(out, len, "%s", base);
        else snprintf(out, len, "%s-%d", base, k);
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, out, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 0) break;
    }
    sqlite3_finalize(st);
    return 0;
}

int summary_find_run(sqlite3 *db, const char *name_or_id, int64_t *run_id, char *err,
                     size_t errlen) {
    int64_t id = 0;
    int found;
    if (!name_or_id || !*name_or_id) {
        found = lookup_id(db, "SELECT id FROM runs ORDER BY id DESC LIMIT 1", NULL, 0, &id, err,
                          errlen);
        char name[4096];
        if (found == 0)
            snprintf(err, errlen, "no runs in %s", summary_db_name(db, name, sizeof name));
        goto done;
    }
    /* A name wins over an id, so a run named "7" stays reachable by its name. */
    found = lookup_id(db, "SELECT id FROM runs WHERE name = ?1", name_or_id, 0, &id, err, errlen);
    if (found == 0) {
        char *end = NULL;
        errno = 0;
        long long num = strtoll(name_or_id, &end, 10);
        if (errno == 0 && end != name_or_id && *end == '\0')
            found = lookup_id(db, "SELECT id FROM runs WHERE id = ?1", NULL, num, &id, err,
                              errlen);
    }
    if (found == 0) unknown_run(db, name_or_id, err, errlen);
done:
    if (found == 1) *run_id = id;
    return found == 1 ? 0 : -1;
}

int summary_list(sqlite3 *db, int64_t **ids, size_t *n, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int64_t *arr = NULL;
    size_t len = 0, cap = 0;
    int ret = -1, rc;
    *ids = NULL;
    *n = 0;
    if (sqlite3_prepare_v2(db, "SELECT id FROM runs ORDER BY id", -1, &st, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot read runs: %s", sqlite3_errmsg(db));
        goto done;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (len == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            int64_t *grown = realloc(arr, ncap * sizeof *grown);
            if (!grown) {
                snprintf(err, errlen, "out of memory listing runs");
                goto done;
            }
            arr = grown;
            cap = ncap;
        }
        arr[len++] = sqlite3_column_int64(st, 0);
    }
    if (rc != SQLITE_DONE) {
        snprintf(err, errlen, "cannot read runs: %s", sqlite3_errmsg(db));
        goto done;
    }
    *ids = arr;
    *n = len;
    arr = NULL;
    ret = 0;
done:
    free(arr);
    sqlite3_finalize(st);
    return ret;
}

/* ---------------------------------------------------------------- load */

int summary_load_column(sqlite3 *db, int64_t run_id, const char *col, double **v, size_t *n,
                        char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    double *x = NULL;
    size_t len = 0, cap = 0;
    int ret = -1, rc;
    char sql[256];
    *v = NULL;
    *n = 0;
    snprintf(sql, sizeof sql, "SELECT %s FROM requests WHERE run_id = ?1 AND %s IS NOT NULL "
             "ORDER BY %s", col, col, col);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot read requests.%s: %s", col, sqlite3_errmsg(db));
        goto done;
    }
    sqlite3_bind_int64(st, 1, run_id);
    /* The values arrive sorted, so the array is only grown, never counted or sorted first. */
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (len == cap) {
            size_t ncap = cap ? 2 * cap : 1024;
            double *grown = realloc(x, ncap * sizeof *grown);
            if (!grown) {
                snprintf(err, errlen, "out of memory reading requests.%s", col);
                goto done;
            }
            x = grown;
            cap = ncap;
        }
        x[len++] = sqlite3_column_double(st, 0);
    }
    if (rc != SQLITE_DONE) {
        snprintf(err, errlen, "cannot read requests.%s: %s", col, sqlite3_errmsg(db));
        goto done;
    }
    *v = x;
    *n = len;
    x = NULL;
    ret = 0;
done:
    free(x);
    sqlite3_finalize(st);
    return ret;
}

static int load_dist(sqlite3 *db, int64_t run_id, const char *col, stats_dist_t *out, char *err,
                     size_t errlen) {
    double *x;
    size_t n;
    if (summary_load_column(db, run_id, col, &x, &n, err, errlen) != 0) return -1;
    stats_describe_sorted(x, n, out);
    free(x);
    return 0;
}

static const char SQL_RUN[] =
    "SELECT name, kind, policy, status, error, trace, model, hardware, started_at, wall_s, "
    /* the side: the config's word, else what the kind implies (summary.h) */
    " coalesce(json_extract(config, '$.metrics'), CASE WHEN kind != 'measured' THEN 'server'"
    "  WHEN json_extract(config, '$.source.format') = 'vllm' THEN 'client' ELSE '' END),"
    " json_extract(config, '$.client_request_s'),"
    " json_extract(config, '$.client_prompt_token_s'), json_extract(config, '$.client_token_s'),"
    " json_extract(config, '$.oracle_lengths'), json_extract(config, '$.max_output_tokens'),"
    " json_extract(config, '$.clip_to_context'), json_extract(config, '$.max_model_len'),"
    " json_extract(config, '$.serving.name'), json_extract(config, '$.serving.engine'),"
    " json_extract(config, '$.cost_scale'),"
    " json_extract(config, '$.replicas'), json_extract(config, '$.router') "
    "FROM runs WHERE id = ?1";
/* Rejections by reason class (SUMMARY_REJ_*), from the messages' fixed wording. */
static const char SQL_REJECTED[] =
    "SELECT CASE WHEN reason LIKE '%exceeds the context length%' THEN 0"
    " WHEN reason LIKE '%KV blocks but one request can have at most%' THEN 1"
    " WHEN reason LIKE '%exceeds the step budget%' THEN 2"
    " WHEN reason LIKE 'empty prompt%' OR reason LIKE 'no output tokens%' THEN 3"
    " WHEN replica IS NULL THEN 4"
    " ELSE 5 END AS cls, count(*) "
    "FROM requests WHERE run_id = ?1 AND status = 'rejected' GROUP BY cls";
/* The reasons of the "other" class, commonest first (the CASE above, in the same order). */
/* The reasons of the "other" class (the CASE above, in the same order), grouped by kind: a
 * policy's reason up to its first ':' ("rejected by policy: shed"), any other whole; the
 * commonest first, each with one whole reason as its example. */
static const char SQL_REJECTED_OTHER[] =
    "WITH o AS (SELECT reason, CASE WHEN reason LIKE 'rejected by policy: %' AND "
    "instr(substr(reason, 21), ':') > 0 THEN substr(reason, 1, 19 + instr(substr(reason, 21), "
    "':')) ELSE reason END AS kind FROM requests WHERE run_id = ?1 AND status = 'rejected' AND "
    "replica IS NOT NULL AND NOT (reason LIKE '%exceeds the context length%' OR reason LIKE "
    "'%KV blocks but one request can have at most%' OR reason LIKE '%exceeds the step "
    "budget%' OR reason LIKE 'empty prompt%' OR reason LIKE 'no output tokens%')) "
    "SELECT kind, count(*) AS c, count(*) OVER (), min(reason) FROM o GROUP BY kind "
    "ORDER BY c DESC, kind LIMIT 3";
/* Aborts by reason class (SUMMARY_ABT_*), from replay.h's and sim.h's fixed wording. */
static const char SQL_ABORTED[] =
    "SELECT CASE WHEN reason LIKE 'interrupted by %' THEN 0"
    " WHEN reason LIKE 'stopped by the caller%' THEN 1"
    " WHEN reason = 'client disconnected' THEN 3 ELSE 2 END AS cls, count(*) "
    "FROM requests WHERE run_id = ?1 AND status = 'aborted' GROUP BY cls";
static const char SQL_COUNTS[] =
    "SELECT count(*), "
    " coalesce(sum(status = 'finished'), 0), coalesce(sum(status = 'rejected'), 0),"
    " coalesce(sum(status = 'aborted'), 0),"
    " coalesce(sum(preemptions > 0), 0), coalesce(sum(preemptions), 0),"
    " coalesce(sum(CASE WHEN status = 'finished' THEN prompt_tokens END), 0),"
    " coalesce(sum(CASE WHEN status = 'finished' THEN generated_tokens END), 0),"
    " min(arrival_s), max(CASE WHEN status = 'finished' THEN finish_s END),"
    " (SELECT count(*) FROM steps WHERE run_id = ?1),"
    " coalesce(sum(CASE WHEN status = 'finished' THEN cached_tokens END), 0),"
    /* prefix caching: the config's word; an engine run has none (engine/engine.c) */
    " (SELECT coalesce(json_extract(config, '$.prefix_caching'),"
    "   CASE WHEN kind IN ('engine', 'serve') THEN 0 END) FROM runs WHERE id = ?1) "
    "FROM requests WHERE run_id = ?1";

/* A measured run without arrival times has every arrival at 0 (analysis/import.h), so its
 * requests cannot say how long the measurement took: the benchmark's duration, which its
 * own throughput figures divide by, stands in. 1 and *dur set; 0 not such a run; -1 error. */
static int measured_duration(sqlite3 *db, int64_t run_id, double *dur) {
    sqlite3_stmt *st = NULL;
    int ret = -1;
    if (sqlite3_prepare_v2(db, "SELECT json_extract(config, '$.duration_s') FROM runs WHERE "
                           "id = ?1 AND json_extract(config, '$.arrivals') = 'unknown'", -1,
                           &st, NULL) != SQLITE_OK)
        goto done;
    sqlite3_bind_int64(st, 1, run_id);
    int rc = sqlite3_step(st);
    ret = rc == SQLITE_DONE ? 0 : rc != SQLITE_ROW ? -1 : sqlite3_column_type(st, 0) != SQLITE_NULL;
    if (ret == 1) *dur = sqlite3_column_double(st, 0);
done:
    sqlite3_finalize(st);
    return ret;
}

int summary_load(sqlite3 *db, int64_t run_id, summary_t *out, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int ret = -1;
    memset(out, 0, sizeof *out);
    out->run_id = run_id;
    if (sqlite3_prepare_v2(db, SQL_RUN, -1, &st, NULL) != SQLITE_OK) goto sql_error;
    sqlite3_bind_int64(st, 1, run_id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        char name[4096];
        snprintf(err, errlen, "no run with id %lld in %s", (long long)run_id,
                 summary_db_name(db, name, sizeof name));
        goto done;
    }
    if (rc != SQLITE_ROW) goto sql_error;
    copy_col(out->name, sizeof out->name, st, 0);
    copy_col(out->kind, sizeof out->kind, st, 1);
    copy_col(out->policy, sizeof out->policy, st, 2);
    copy_col(out->status, sizeof out->status, st, 3);
    copy_col(out->error, sizeof out->error, st, 4);
    copy_col(out->trace, sizeof out->trace, st, 5);
    copy_col(out->model, sizeof out->model, st, 6);
    copy_col(out->hardware, sizeof out->hardware, st, 7);
    copy_col(out->started_at, sizeof out->started_at, st, 8);
    out->wall_s = summary_column_or_nan(st, 9);
    copy_col(out->metrics, sizeof out->metrics, st, 10);
    out->client_request_s = summary_column_or_nan(st, 11);
    out->client_prompt_token_s = summary_column_or_nan(st, 12);
    out->client_token_s = summary_column_or_nan(st, 13);
    out->oracle_lengths = sqlite3_column_type(st, 14) == SQLITE_NULL ? -1
                        : sqlite3_column_int(st, 14) != 0;
    out->max_output_tokens = sqlite3_column_int(st, 15);
    out->clip_to_context = sqlite3_column_type(st, 16) == SQLITE_NULL ? -1
                         : sqlite3_column_int(st, 16) != 0;
    out->max_model_len = sqlite3_column_int(st, 17);
    copy_col(out->serving, sizeof out->serving, st, 18);
    copy_col(out->serving_engine, sizeof out->serving_engine, st, 19);
    out->cost_scale = sqlite3_column_type(st, 20) == SQLITE_NULL ? 1
                    : sqlite3_column_double(st, 20);
    out->replicas = sqlite3_column_int(st, 21);
    copy_col(out->router, sizeof out->router, st, 22);
    sqlite3_finalize(st);
    st = NULL;

    if (sqlite3_prepare_v2(db, SQL_ABORTED, -1, &st, NULL) != SQLITE_OK) goto sql_error;
    sqlite3_bind_int64(st, 1, run_id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int cls = sqlite3_column_int(st, 0);
        if (cls >= 0 && cls < SUMMARY_ABT_CLASSES) out->aborted_by[cls] = sqlite3_column_int64(st, 1);
    }
    if (rc != SQLITE_DONE) goto sql_error;
    sqlite3_finalize(st);
    st = NULL;

    if (sqlite3_prepare_v2(db, SQL_REJECTED, -1, &st, NULL) != SQLITE_OK) goto sql_error;
    sqlite3_bind_int64(st, 1, run_id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int cls = sqlite3_column_int(st, 0);
        if (cls >= 0 && cls < SUMMARY_REJ_CLASSES) out->rejected_by[cls] = sqlite3_column_int64(st, 1);
    }
    if (rc != SQLITE_DONE) goto sql_error;
    sqlite3_finalize(st);
    st = NULL;

    if (out->rejected_by[SUMMARY_REJ_OTHER] > 0) {
        if (sqlite3_prepare_v2(db, SQL_REJECTED_OTHER, -1, &st, NULL) != SQLITE_OK)
            goto sql_error;
        sqlite3_bind_int64(st, 1, run_id);
        for (int k = 0; k < 3 && (rc = sqlite3_step(st)) == SQLITE_ROW; k++) {
            copy_col(out->other_reason[k], sizeof out->other_reason[k], st, 0);
            out->other_count[k] = sqlite3_column_int64(st, 1);
            out->other_kinds = sqlite3_column_int(st, 2);
            copy_col(out->other_example[k], sizeof out->other_example[k], st, 3);
        }
        sqlite3_finalize(st);
        st = NULL;
    }

    if (sqlite3_prepare_v2(db, SQL_COUNTS, -1, &st, NULL) != SQLITE_OK) goto sql_error;
    sqlite3_bind_int64(st, 1, run_id);
    if (sqlite3_step(st) != SQLITE_ROW) goto sql_error;
    out->requests = sqlite3_column_int64(st, 0);
    out->finished = sqlite3_column_int64(st, 1);
    out->rejected = sqlite3_column_int64(st, 2);
    out->aborted = sqlite3_column_int64(st, 3);
    out->preempted_requests = sqlite3_column_int64(st, 4);
    out->preemptions = sqlite3_column_int64(st, 5);
    out->prompt_tokens = sqlite3_column_int64(st, 6);
    out->output_tokens = sqlite3_column_int64(st, 7);
    double first_arrival = summary_column_or_nan(st, 8);
    double last_finish = summary_column_or_nan(st, 9);
    out->steps = sqlite3_column_int64(st, 10);
    out->cached_tokens = sqlite3_column_int64(st, 11);
    out->prefix_caching = sqlite3_column_type(st, 12) == SQLITE_NULL ? -1
                        : sqlite3_column_int(st, 12) != 0;
    sqlite3_finalize(st);
    st = NULL;

    /* NAN propagates: no finished request means no makespan and no throughput. */
    out->makespan_s = last_finish - first_arrival;
    if (!strcmp(out->kind, "measured")) {
        int known = measured_duration(db, run_id, &out->makespan_s);
        if (known < 0) goto sql_error;
        out->makespan_is_duration = known;
    }
    int has_span = out->makespan_s > 0;
    out->req_per_s = has_span ? (double)out->finished / out->makespan_s : NAN;
    out->out_tok_per_s = has_span ? (double)out->output_tokens / out->makespan_s : NAN;
    out->tok_per_s = has_span
        ? (double)(out->prompt_tokens + out->output_tokens) / out->makespan_s : NAN;

    if (load_dist(db, run_id, "ttft_s", &out->ttft, err, errlen) != 0 ||
        load_dist(db, run_id, "tpot_s", &out->tpot, err, errlen) != 0 ||
        load_dist(db, run_id, "e2e_s", &out->e2e, err, errlen) != 0 ||
        load_dist(db, run_id, "queue_s", &out->queue, err, errlen) != 0)
        goto done;
    ret = 0;
    goto done;
sql_error:
    snprintf(err, errlen, "cannot read run %lld: %s", (long long)run_id, sqlite3_errmsg(db));
done:
    sqlite3_finalize(st);
    return ret;
}

/* ---------------------------------------------------------------- printing */

const char *summary_fmt_time(char *buf, size_t len, double s) {
    if (isnan(s)) snprintf(buf, len, "-");
    else if (fabs(s) < 10) snprintf(buf, len, "%.2f ms", s * 1e3);
    else snprintf(buf, len, "%.2f s", s);
    return buf;
}

static const char *fmt_num(char *buf, size_t len, double v, int decimals) {
    if (isnan(v)) snprintf(buf, len, "-");
    else snprintf(buf, len, "%.*f", decimals, v);
    return buf;
}

/* A latency in ms below 10 s and in s above, with its unit: an overloaded run's TTFT of
 * hours must stay readable next to a healthy run's tens of milliseconds. */
static const char *fmt_latency(char *buf, size_t len, double sec) {
    char n[24];
    if (isnan(sec)) snprintf(buf, len, "-");
    else if (fabs(sec) < 10)
        snprintf(buf, len, "%sms", fmt_num(n, sizeof n, sec * 1e3, fabs(sec) < 0.1 ? 1 : 0));
    else snprintf(buf, len, "%ss", fmt_num(n, sizeof n, sec, fabs(sec) < 100 ? 1 : 0));
    return buf;
}

static const char *fmt_ms_pair(char *buf, size_t len, const stats_dist_t *d) {
    char a[40], b[40];
    snprintf(buf, len, "%s/%s", fmt_latency(a, sizeof a, d->p50), fmt_latency(b, sizeof b, d->p99));
    return buf;
}
void summary_print_dist(FILE *f, const char *label, const stats_dist_t *d) {
    char m[32], p50[32], p90[32], p95[32], p99[32];
    fprintf(f, "  %-6s %8zu %11s %11s %11s %11s %11s\n", label, d->n,
            summary_fmt_time(m, sizeof m, d->mean), summary_fmt_time(p50, sizeof p50, d->p50),
            summary_fmt_time(p90, sizeof p90, d->p90), summary_fmt_time(p95, sizeof p95, d->p95),
            summary_fmt_time(p99, sizeof p99, d->p99));
}

/* A small time (a client-side term) with the unit that keeps it readable. */
static const char *fmt_small(char *buf, size_t len, double s) {
    if (isnan(s)) snprintf(buf, len, "?");
    else if (s == 0 || s >= 1) snprintf(buf, len, "%.3g s", s);
    else if (s >= 1e-3) snprintf(buf, len, "%.3g ms", s * 1e3);
    else if (s >= 1e-6) snprintf(buf, len, "%.3g us", s * 1e6);
    else snprintf(buf, len, "%.3g ns", s * 1e9);
    return buf;
}

/* The share of the run's requests n is, in percent. */
static double share_pct(const summary_t *s, int64_t n) {
    return s->requests > 0 ? 100.0 * (double)n / (double)s->requests : 0.0;
}

/* The commonest reasons of the "other" rejections (a policy's own words), after their count. */
static void print_other_reasons(FILE *f, const summary_t *s) {
    fputs(":", f);
    for (int k = 0; k < 3 && s->other_reason[k][0]; k++) {
        fprintf(f, "%s %lld '%s'", k ? "," : "", (long long)s->other_count[k],
                s->other_reason[k]);
        if (strcmp(s->other_example[k], s->other_reason[k]) != 0)
            fprintf(f, " (e.g. '%s')", s->other_example[k]);
    }
    if (s->other_kinds > 3) fprintf(f, " and %d more kinds (the requests table's reason column)",
                                    s->other_kinds - 3);
}

/* One line per reason a run rejected or aborted requests, with its share of the trace and
 * the option that would keep them; a share above SUMMARY_LARGE_SHARE gets a WARNING line
 * of its own: a run that silently ran less load than its trace would mislead a comparison. */
void summary_print_dropped(FILE *f, const summary_t *s) {
    static const struct { const char *what, *hint, *large; } rej[] = {
        [SUMMARY_REJ_CONTEXT] = { "prompt + output longer than the context",
                                  "--max-model-len N, or --clip-to-context to run them clipped",
                                  "--max-model-len, --clip-to-context or another model" },
        [SUMMARY_REJ_KV] = { "more KV blocks than one request may hold",
                             "more KV: --gpu-util, --kv-blocks, --tp",
                             "more KV with --gpu-util, --kv-blocks or --tp" },
        [SUMMARY_REJ_STEP] = { "prompt past the step budget of a non-chunked policy",
                               "--set max_tokens=N, or chunked_prefill.lua",
                               "--set max_tokens=N or chunked_prefill.lua" },
        [SUMMARY_REJ_EMPTY] = { "empty prompt or no output in the trace", NULL,
                                "the trace's rows with an empty prompt or no output" },
        [SUMMARY_REJ_ROUTER] = { "refused by the router", "its reasons are in the requests "
                                 "table's reason column", "the router's reasons, in the "
                                 "requests table's reason column" },
        [SUMMARY_REJ_OTHER] = { "other reasons", "the requests table's reason column",
                                "the requests table's reason column says why" },
    };
    static const char *const abt[] = {
        [SUMMARY_ABT_INTERRUPTED] = "unfinished when the run was interrupted",
        [SUMMARY_ABT_STOPPED] = "unfinished when the run was stopped (explain --steps)",
        [SUMMARY_ABT_FAILED] = "unfinished when the run failed (the error above)",
        [SUMMARY_ABT_CLIENT] = "by their clients, who went away (twinserve serve)",
    };
    const char *head = "rejected ";
    for (int i = 0; i < SUMMARY_REJ_CLASSES; i++) {
        int64_t n = s->rejected_by[i];
        if (n == 0) continue;
        double pct = share_pct(s, n);
        int large = pct > 100 * SUMMARY_LARGE_SHARE;
        fprintf(f, "%s %lld (%.1f%%) %s", head, (long long)n, pct, rej[i].what);
        if (i == SUMMARY_REJ_OTHER && s->other_kinds > 0)
            print_other_reasons(f, s);
        else if (rej[i].hint && !large)
            fprintf(f, " (%s)", rej[i].hint);
        fputc('\n', f);
        head = "         ";
        if (!large) continue;
        if (i == SUMMARY_REJ_CONTEXT && s->model[0] && s->max_model_len > 0)
            fprintf(f, "WARNING   %.1f%% of the trace is over %s's %d-token context: %s\n", pct,
                    s->model, (int)s->max_model_len, rej[i].large);
        else
            fprintf(f, "WARNING   %.1f%% of the trace was rejected (%s): %s\n", pct,
                    rej[i].what, rej[i].large);
    }
    head = "aborted  ";
    for (int i = 0; i < SUMMARY_ABT_CLASSES; i++) {
        int64_t n = s->aborted_by[i];
        if (n == 0) continue;
        double pct = share_pct(s, n);
        fprintf(f, "%s %lld (%.1f%%) %s\n", head, (long long)n, pct, abt[i]);
        head = "         ";
        /* a client that leaves is part of a served workload, not a run cut short */
        if (i != SUMMARY_ABT_CLIENT && pct > 100 * SUMMARY_LARGE_SHARE)
            fprintf(f, "WARNING   %.1f%% of the requests read never finished: this run's numbers "
                       "describe part of its trace only\n", pct);
    }
    if (s->clip_to_context == 1)
        fprintf(f, "clipped   requests longer than the context ran clipped to it "
                   "(--clip-to-context)\n");
}

void summary_print(FILE *f, const summary_t *s) {
    char a[32], b[32], c[32], d[32];
    /* First, so that nobody reads a partial run's numbers as a whole run's. */
    if (strcmp(s->status, "done") != 0)
        fprintf(f, "WARNING   run '%s' is %s, not done%s%s: its numbers cover only the requests "
                   "it got to%s\n", s->name, s->status, s->error[0] ? ": " : "", s->error,
                strcmp(s->status, "running") == 0
                    ? " (still running, or its process was killed)" : "");
    fprintf(f, "run       %s (id %lld): %s, %s", s->name, (long long)s->run_id, s->kind,
            s->status);
    if (!isnan(s->wall_s)) fprintf(f, ", wall %s", summary_fmt_time(a, sizeof a, s->wall_s));
    if (s->started_at[0]) fprintf(f, ", started %s", s->started_at);
    fputc('\n', f);
    if (s->error[0]) fprintf(f, "error     %s\n", s->error);
    if (s->policy[0]) fprintf(f, "policy    %s\n", s->policy);
    if (s->trace[0]) fprintf(f, "trace     %s\n", s->trace);
    if (s->model[0] || s->hardware[0])
        fprintf(f, "model     %s%s%s\n", s->model[0] ? s->model : "?",
                s->hardware[0] ? " on " : "", s->hardware);
    if (!strcmp(s->serving, "none"))
        fprintf(f, "serving   none: the bare GPU's passes (--serving none)\n");
    else if (s->serving[0])
        fprintf(f, "serving   %s%s%s\n", s->serving, s->serving_engine[0] ? ": " : "",
                s->serving_engine);
    if (s->replicas > 0)
        fprintf(f, "cluster   %d replica%s, router %s%s\n", (int)s->replicas,
                s->replicas == 1 ? "" : "s", s->router[0] ? s->router : "?",
                s->replicas > 1 ? ": the figures below are the whole cluster's" : "");
    if (s->cost_scale != 1)
        fprintf(f, "cost      every step's time x %.4g (a prediction band's side)\n",
                s->cost_scale);
    if (!strcmp(s->metrics, "client") && !isnan(s->client_token_s))
        fprintf(f, "metrics   client-side: front end %s per request + %s per prompt token "
                   "before the scheduler, %s per streamed token\n",
                fmt_small(a, sizeof a, s->client_request_s),
                fmt_small(b, sizeof b, s->client_prompt_token_s),
                fmt_small(c, sizeof c, s->client_token_s));
    else if (!strcmp(s->metrics, "client"))
        fprintf(f, "metrics   client-side (measured at the client)\n");
    else if (!strcmp(s->metrics, "server"))
        fprintf(f, "metrics   server-side\n");
    else
        fprintf(f, "metrics   as measured (the run does not say which side)\n");
    if (s->oracle_lengths == 1)
        fprintf(f, "lengths   oracle: the policy saw true output lengths (--oracle-lengths)\n");
    else if (s->oracle_lengths == 0 && s->max_output_tokens > 0)
        fprintf(f, "lengths   the policy saw limits, not true lengths: the trace's max_tokens, "
                   "else %d\n", s->max_output_tokens);
    else if (s->oracle_lengths == 0)
        fprintf(f, "lengths   the policy saw limits, not true lengths: the trace's max_tokens, "
                   "else the context left\n");
    fprintf(f, "requests  %lld: %lld finished, %lld rejected, %lld aborted; "
            "%lld preempted (%lld preemptions); %lld steps\n",
            (long long)s->requests, (long long)s->finished, (long long)s->rejected,
            (long long)s->aborted, (long long)s->preempted_requests, (long long)s->preemptions,
            (long long)s->steps);
    summary_print_dropped(f, s);
    /* Whether caching was on changes what a step costs, so every run says it. */
    if (s->prefix_caching == 0)
        fprintf(f, "prefix    caching off\n");
    else if (s->cached_tokens > 0 || s->prefix_caching == 1)
        fprintf(f, "prefix    caching on: %lld of %lld prompt tokens served by the cache (%.1f%%)\n",
                (long long)s->cached_tokens, (long long)s->prompt_tokens,
                s->prompt_tokens > 0 ? 100.0 * (double)s->cached_tokens / (double)s->prompt_tokens
                                     : 0.0);
    fprintf(f, "makespan  %s: %s req/s, %s output tok/s, %s total tok/s\n",
            summary_fmt_time(a, sizeof a, s->makespan_s), fmt_num(b, sizeof b, s->req_per_s, 2),
            fmt_num(c, sizeof c, s->out_tok_per_s, 1), fmt_num(d, sizeof d, s->tok_per_s, 1));
    if (s->makespan_is_duration)
        fprintf(f, "          (the benchmark's duration: the measurement has no arrival times)\n");
    fprintf(f, "  %-6s %8s %11s %11s %11s %11s %11s\n", "", "n", "mean", "p50", "p90", "p95",
            "p99");
    summary_print_dist(f, "TTFT", &s->ttft);
    summary_print_dist(f, "TPOT", &s->tpot);
    summary_print_dist(f, "E2E", &s->e2e);
    summary_print_dist(f, "queue", &s->queue);
}

void summary_table_header(FILE *f) {
    fprintf(f, "%-24s %-16s %-7s %13s %10s %8s %10s %16s %16s\n", "name", "policy", "status",
            "done/rejected", "makespan_s", "req/s", "out tok/s", "TTFT p50/p99",
            "TPOT p50/p99");
}

/* The run's error after a row, cut to fit: its start says what happened. */
#define SUMMARY_TABLE_ERROR 60

void summary_table_row(FILE *f, const summary_t *s) {
    char pol[64], done[48], span[32], rps[32], tps[32], ttft[64], tpot[64];
    /* a measured run has no policy: its kind says what it is */
    rec_policy_stem(s->policy[0] ? s->policy : s->kind, pol, sizeof pol);
    snprintf(done, sizeof done, "%lld/%lld", (long long)s->finished, (long long)s->rejected);
    fprintf(f, "%-24s %-16s %-7s %13s %10s %8s %10s %16s %16s", s->name, pol, s->status, done,
            fmt_num(span, sizeof span, s->makespan_s, 2), fmt_num(rps, sizeof rps, s->req_per_s, 2),
            fmt_num(tps, sizeof tps, s->out_tok_per_s, 1), fmt_ms_pair(ttft, sizeof ttft, &s->ttft),
            fmt_ms_pair(tpot, sizeof tpot, &s->tpot));
    /* one line a run: an error's own line breaks and tabs are shown as spaces */
    char e[SUMMARY_TABLE_ERROR + 1];
    size_t n = strlen(s->error), k = 0;
    for (; k < n && k < SUMMARY_TABLE_ERROR; k++)
        e[k] = (unsigned char)s->error[k] < 0x20 ? ' ' : s->error[k];
    e[k] = '\0';
    if (n > SUMMARY_TABLE_ERROR) fprintf(f, "  %.*s...", SUMMARY_TABLE_ERROR - 3, e);
    else if (n) fprintf(f, "  %s", e);
    fputc('\n', f);
}
