/* merge: see merge.h. */
#include "traces/merge.h"

#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "traces/recorder.h"

enum { KIND_RUN, KIND_SWEEP, KIND_EXP };

typedef struct {
    int64_t old_id, new_id;
    char *name;        /* in the input */
    char *group;       /* the sweep, experiment or run name the run is renamed with */
    char *exp;         /* $.experiment.name, or NULL */
    int kind;
    int decided;
    char *new_name;    /* in the output */
    char *new_sweep;   /* NULL: $.sweep.name unchanged */
    char *new_exp;     /* NULL: $.experiment.name unchanged */
} mrun_t;

/* A sweep or experiment renamed by an earlier input of this merge. */
typedef struct {
    int kind;
    char *from, *to;
} rename_t;

struct merge {
    sqlite3 *db;
    char *out_path;
    char err[2048];
    int failed;               /* the last call failed: err says why */
    int unusable;             /* merge_open failed: every merge_add fails with its message */
    merge_note_fn note;
    void *ud;
    mrun_t *runs;
    size_t n, cap;
    rename_t *renames;        /* [0, n_renames); the first kept_renames are committed */
    size_t n_renames, cap_renames, kept_renames;
};

static void set_err(merge_t *m, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof m->err, fmt, ap);
    va_end(ap);
    m->failed = 1;
}

static void note(merge_t *m, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    if (!m->note) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    m->note(m->ud, msg);
}

static void runs_clear(merge_t *m) {
    for (size_t i = 0; i < m->n; i++) {
        mrun_t *r = &m->runs[i];
        free(r->name);
        free(r->group);
        free(r->exp);
        free(r->new_name);
        free(r->new_sweep);
        free(r->new_exp);
    }
    m->n = 0;
}

merge_t *merge_open(const char *out_path) {
    merge_t *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->out_path = strdup(out_path);
    if (!m->out_path) {
        set_err(m, "out of memory");
        m->unusable = 1;
        return m;
    }
    /* The recorder creates the schema, or checks an existing file is ours. */
    rec_t *r = rec_open(out_path);
    if (!r || rec_errmsg(r)) {
        set_err(m, "%s", r ? rec_errmsg(r) : "out of memory");
        rec_close(r);
        m->unusable = 1;
        return m;
    }
    rec_close(r);
    if (sqlite3_open_v2(out_path, &m->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        set_err(m, "%s: %s", out_path, m->db ? sqlite3_errmsg(m->db) : "out of memory");
        m->unusable = 1;
        return m;
    }
    sqlite3_busy_timeout(m->db, 30000); /* another writer (a user's sim) may hold the lock */
    if (sqlite3_exec(m->db, "CREATE TEMP TABLE merge_map(merge_old INTEGER PRIMARY KEY, "
                     "merge_new INTEGER NOT NULL)", NULL, NULL, NULL) != SQLITE_OK)
        set_err(m, "%s: %s", out_path, sqlite3_errmsg(m->db));
    m->unusable = m->failed;
    return m;
}

const char *merge_errmsg(const merge_t *m) { return m->failed ? m->err : NULL; }

void merge_set_notes(merge_t *m, merge_note_fn fn, void *ud) {
    m->note = fn;
    m->ud = ud;
}

size_t merge_n_runs(const merge_t *m) { return m->n; }
int64_t merge_run_id(const merge_t *m, size_t i) { return m->runs[i].new_id; }
int64_t merge_run_old_id(const merge_t *m, size_t i) { return m->runs[i].old_id; }
const char *merge_run_name(const merge_t *m, size_t i) { return m->runs[i].new_name; }

/* Forgets the renames after the first keep (those of an input rolled back). */
static void renames_truncate(merge_t *m, size_t keep) {
    for (size_t k = keep; k < m->n_renames; k++) {
        free(m->renames[k].from);
        free(m->renames[k].to);
    }
    m->n_renames = keep;
}

void merge_close(merge_t *m) {
    if (!m) return;
    runs_clear(m);
    free(m->runs);
    renames_truncate(m, 0);
    free(m->renames);
    sqlite3_close(m->db);
    free(m->out_path);
    free(m);
}

/* ------------------------------------------------------------------ checks */

/* The input passes the checks the recorder applies to a database it reads, and holds runs. */
static int check_input(merge_t *m, const char *path) {
    struct stat si, so;
    sqlite3 *in = NULL;
    sqlite3_stmt *st = NULL;
    char why[1024];
    int rc = -1;
    if (stat(path, &si) != 0) {
        set_err(m, "%s: no such database file", path);
        return -1;
    }
    if (stat(m->out_path, &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
        set_err(m, "%s is the output database itself", path);
        return -1;
    }
    if (sqlite3_open_v2(path, &in, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        set_err(m, "%s: %s", path, in ? sqlite3_errmsg(in) : "out of memory");
        goto done;
    }
    if (rec_check_db(in, why, sizeof why) != 0) {
        set_err(m, "%s: %s; not merged", path, why);
        goto done;
    }
    /* rec_check_db accepts an empty file (a database to fill); an input must have runs. */
    if (sqlite3_prepare_v2(in, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                           "name = 'runs'", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        set_err(m, "%s: %s", path, sqlite3_errmsg(in));
        goto done;
    }
    if (sqlite3_column_int(st, 0) == 0) {
        set_err(m, "%s: an empty database (no runs table), not a twinserve one", path);
        goto done;
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    sqlite3_close(in);
    return rc;
}

/* ------------------------------------------------------------------ names */

static int starts_with(const char *s, const char *prefix) {
    return !strncmp(s, prefix, strlen(prefix));
}

/* name == exp "-r" digits: a member of experiment exp (experiment.h). */
static int is_member_name(const char *name, const char *exp) {
    size_t n = strlen(exp);
    if (strncmp(name, exp, n) || name[n] != '-' || name[n + 1] != 'r' || !name[n + 2]) return 0;
    for (const char *c = name + n + 2; *c; c++)
        if (*c < '0' || *c > '9') return 0;
    return 1;
}

static char *dup_col(sqlite3_stmt *st, int col) {
    if (sqlite3_column_type(st, col) != SQLITE_TEXT) return NULL;
    return strdup((const char *)sqlite3_column_text(st, col));
}

/* The input's runs with their groups, into m->runs. */
static int load_runs(merge_t *m, const char *path) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(m->db, "SELECT id, name, json_extract(config, '$.sweep.name'), "
                                "json_extract(config, '$.experiment.name'), status FROM "
                                "merge_in.runs ORDER BY id", -1, &st, NULL);
    int oom = 0;
    while (rc == SQLITE_OK && !oom && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        oom = 1; /* until the row is complete */
        if (m->n == m->cap) {
            size_t cap = m->cap ? 2 * m->cap : 16;
            mrun_t *p = realloc(m->runs, cap * sizeof *p);
            if (!p) break;
            m->runs = p;
            m->cap = cap;
        }
        mrun_t *r = &m->runs[m->n++];
        memset(r, 0, sizeof *r);
        r->old_id = sqlite3_column_int64(st, 0);
        r->name = dup_col(st, 1);
        char *sweep = dup_col(st, 2);
        r->exp = dup_col(st, 3);
        const char *status = (const char *)sqlite3_column_text(st, 4);
        if (!r->name) {
            free(sweep);
            break;
        }
        if (sweep && starts_with(r->name, sweep) && r->name[strlen(sweep)] == '@') {
            r->kind = KIND_SWEEP;
            r->group = sweep;
            sweep = NULL;
        } else if (r->exp && is_member_name(r->name, r->exp)) {
            r->kind = KIND_EXP;
            r->group = strdup(r->exp);
        } else {
            r->kind = KIND_RUN;
            r->group = strdup(r->name);
        }
        free(sweep);
        if (!r->group) break;
        oom = 0;
        if (status && !strcmp(status, "running"))
            note(m, "%s: run '%s' is still 'running' there (a job not finished, or one that "
                 "died): merged as it is", path, r->name);
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE) return 0;
    if (oom) set_err(m, "out of memory");
    else set_err(m, "%s: reading its runs: %s", path, sqlite3_errmsg(m->db));
    return -1;
}

/* 1 when name is a run of the output or a new name already given in this input. */
static int name_taken(merge_t *m, const char *name, int *err) {
    for (size_t i = 0; i < m->n; i++)
        if (m->runs[i].decided && !strcmp(m->runs[i].new_name, name)) return 1;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(m->db, "SELECT 1 FROM main.runs WHERE name = ?1", -1, &st, NULL);
    if (rc == SQLITE_OK) sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) *err = 1;
    return rc == SQLITE_ROW;
}

/* 1 when the output already holds a sweep (kind KIND_SWEEP) or an experiment named g. */
static int group_taken(merge_t *m, int kind, const char *g, int *err) {
    sqlite3_stmt *st = NULL;
    const char *sql = kind == KIND_SWEEP
        ? "SELECT 1 FROM main.runs WHERE json_extract(config, '$.sweep.name') = ?1"
        : "SELECT 1 FROM main.runs WHERE json_extract(config, '$.experiment.name') = ?1";
    int rc = sqlite3_prepare_v2(m->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) sqlite3_bind_text(st, 1, g, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) *err = 1;
    return rc == SQLITE_ROW;
}

static int same_group(const mrun_t *a, const mrun_t *b) {
    return a->kind == b->kind && a->kind != KIND_RUN && !strcmp(a->group, b->group);
}

/* 1 when cand can replace run i's group: no name it gives clashes and, for a new sweep or
 * experiment name (fresh), the output holds no sweep or experiment of that name. */
static int group_fits(merge_t *m, size_t i, const char *cand, int fresh, int *err) {
    mrun_t *g = &m->runs[i];
    if (fresh && g->kind != KIND_RUN && group_taken(m, g->kind, cand, err)) return 0;
    for (size_t j = i; j < m->n && !*err; j++) {
        mrun_t *r = &m->runs[j];
        if (j != i && (r->decided || !same_group(g, r))) continue;
        char name[2048];
        snprintf(name, sizeof name, "%s%s", cand, r->name + strlen(r->group));
        if (name_taken(m, name, err)) return 0;
    }
    return !*err;
}

/* Names run i's group cand: new names, and the config tags when cand is not the group's
 * own. The count of runs renamed, or -1 when out of memory. */
static int group_assign(merge_t *m, size_t i, const char *cand) {
    mrun_t *g = &m->runs[i];
    int renamed = 0, same = !strcmp(cand, g->group);
    for (size_t j = i; j < m->n; j++) {
        mrun_t *r = &m->runs[j];
        if (j != i && (r->decided || !same_group(g, r))) continue;
        size_t glen = strlen(r->group);
        if (asprintf(&r->new_name, "%s%s", cand, r->name + glen) < 0) r->new_name = NULL;
        if (!r->new_name) return -1;
        r->decided = 1;
        if (same) continue;
        renamed++;
        if (r->kind == KIND_SWEEP && !(r->new_sweep = strdup(cand))) return -1;
        /* A repeated sweep's point is experiment "S@Rrps": it follows the sweep. */
        const char *e = r->exp;
        if (e && (r->kind == KIND_EXP ||
                  (r->kind == KIND_SWEEP && starts_with(e, r->group) && e[glen] == '@')) &&
            asprintf(&r->new_exp, "%s%s", cand, e + glen) < 0)
            return -1;
    }
    return renamed;
}

/* The name an earlier input's group of this kind and name was given, or NULL. */
static const char *renamed_before(const merge_t *m, int kind, const char *group) {
    for (size_t k = 0; k < m->n_renames; k++)
        if (m->renames[k].kind == kind && !strcmp(m->renames[k].from, group))
            return m->renames[k].to;
    return NULL;
}

static int remember(merge_t *m, int kind, const char *from, const char *to) {
    if (kind == KIND_RUN) return 0;
    if (m->n_renames == m->cap_renames) {
        size_t cap = m->cap_renames ? 2 * m->cap_renames : 8;
        rename_t *p = realloc(m->renames, cap * sizeof *p);
        if (!p) return -1;
        m->renames = p;
        m->cap_renames = cap;
    }
    rename_t *r = &m->renames[m->n_renames];
    r->kind = kind;
    r->from = strdup(from);
    r->to = strdup(to);
    if (!r->from || !r->to) {
        free(r->from);
        free(r->to);
        return -1;
    }
    m->n_renames++;
    return 0;
}

/* Gives run i's group (the undecided runs of the input sharing it) its output names: the
 * group's own when none clashes; else the name an earlier input's same group got, so the
 * databases of one sweep merged twice rejoin as one renamed sweep; else the first free
 * GROUP-k. */
static int name_group(merge_t *m, size_t i, const char *path) {
    mrun_t *g = &m->runs[i];
    char cand[1024];
    const char *prev = renamed_before(m, g->kind, g->group);
    int err = 0, found = 0;
    if (group_fits(m, i, g->group, 0, &err)) {
        snprintf(cand, sizeof cand, "%s", g->group);
        found = 1;
    } else if (!err && prev && group_fits(m, i, prev, 0, &err)) {
        snprintf(cand, sizeof cand, "%s", prev);
        found = 1;
    }
    for (int k = 2; k < 100000 && !found && !err; k++) {
        snprintf(cand, sizeof cand, "%s-%d", g->group, k);
        found = group_fits(m, i, cand, 1, &err);
    }
    if (!found) {
        if (err) set_err(m, "%s: %s", m->out_path, sqlite3_errmsg(m->db));
        else set_err(m, "%s: no free name for '%s'", path, g->group);
        return -1;
    }
    int renamed = group_assign(m, i, cand);
    if (renamed < 0 || (renamed > 0 && !(prev && !strcmp(prev, cand)) &&
                        remember(m, g->kind, g->group, cand) != 0)) {
        set_err(m, "out of memory");
        return -1;
    }
    if (renamed)
        note(m, "%s: %s '%s' renamed '%s' (%d run%s, e.g. '%s' -> '%s'): its name is taken "
             "in %s", path, g->kind == KIND_SWEEP ? "sweep" : g->kind == KIND_EXP
             ? "experiment" : "run", g->group, cand, renamed, renamed == 1 ? "" : "s",
             g->name, g->new_name, m->out_path);
    return 0;
}

/* ------------------------------------------------------------------ copying */

/* Appends "name", quoted as an SQL identifier. */
static void put_id(FILE *f, const char *name) {
    fputc('"', f);
    for (const char *c = name; *c; c++) {
        if (*c == '"') fputc('"', f);
        fputc(*c, f);
    }
    fputc('"', f);
}

/* "INSERT INTO main.T(cols) SELECT s.cols FROM merge_in.T AS s TAIL": the columns come
 * from the output's table; repl holds pairs (column, expression selected instead) ending in
 * NULL, and skip (or NULL) is left out. The result is malloc'ed; NULL on error. */
static char *copy_sql(merge_t *m, const char *table, const char *skip,
                      const char *const *repl, const char *tail) {
    char *cols = NULL, *sel = NULL, *sql = NULL;
    size_t lc = 0, ls = 0, lq = 0;
    FILE *fc = open_memstream(&cols, &lc), *fs = open_memstream(&sel, &ls);
    sqlite3_stmt *st = NULL;
    int n = 0, rc = SQLITE_ERROR;
    if (fc && fs)
        rc = sqlite3_prepare_v2(m->db, "SELECT name FROM main.pragma_table_info(?1) ORDER BY cid",
                                -1, &st, NULL);
    if (rc == SQLITE_OK) sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    while (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        const char *c = (const char *)sqlite3_column_text(st, 0), *expr = NULL;
        if (skip && !strcmp(c, skip)) continue;
        for (const char *const *p = repl; *p && !expr; p += 2)
            if (!strcmp(c, p[0])) expr = p[1];
        if (n++) {
            fputc(',', fc);
            fputc(',', fs);
        }
        put_id(fc, c);
        if (expr) {
            fputs(expr, fs);
        } else {
            fputs("s.", fs);
            put_id(fs, c);
        }
    }
    sqlite3_finalize(st);
    if (fc) fclose(fc);
    if (fs) fclose(fs);
    FILE *fq = rc == SQLITE_OK && n > 0 ? open_memstream(&sql, &lq) : NULL;
    if (fq) {
        fputs("INSERT INTO main.", fq);
        put_id(fq, table);
        fprintf(fq, "(%s) SELECT %s FROM merge_in.", cols, sel);
        put_id(fq, table);
        fprintf(fq, " AS s %s", tail);
        fclose(fq);
    }
    free(cols);
    free(sel);
    return sql;
}

/* A bound NULL keeps the tag. */
static const char *const CONFIG_EXPR =
    "CASE WHEN ?3 IS NULL AND ?4 IS NULL THEN s.config "
    "WHEN ?4 IS NULL THEN json_set(s.config, '$.sweep.name', ?3) "
    "WHEN ?3 IS NULL THEN json_set(s.config, '$.experiment.name', ?4) "
    "ELSE json_set(s.config, '$.sweep.name', ?3, '$.experiment.name', ?4) END";

static int copy_runs(merge_t *m) {
    const char *const repl[] = { "name", "?2", "config", CONFIG_EXPR, NULL };
    char *sql = copy_sql(m, "runs", "id", repl, "WHERE s.id = ?1");
    sqlite3_stmt *st = NULL, *map = NULL;
    int rc = sql ? sqlite3_prepare_v2(m->db, sql, -1, &st, NULL) : SQLITE_NOMEM;
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(m->db, "INSERT INTO temp.merge_map(merge_old, merge_new) "
                                "VALUES (?1, ?2)", -1, &map, NULL);
    for (size_t i = 0; i < m->n && rc == SQLITE_OK; i++) {
        mrun_t *r = &m->runs[i];
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, r->old_id);
        sqlite3_bind_text(st, 2, r->new_name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, r->new_sweep, -1, SQLITE_STATIC); /* NULL binds NULL */
        sqlite3_bind_text(st, 4, r->new_exp, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        if (rc != SQLITE_DONE) break;
        r->new_id = sqlite3_last_insert_rowid(m->db);
        sqlite3_reset(map);
        sqlite3_bind_int64(map, 1, r->old_id);
        sqlite3_bind_int64(map, 2, r->new_id);
        rc = sqlite3_step(map);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    if (rc == SQLITE_DONE) rc = SQLITE_OK;
    if (rc != SQLITE_OK) set_err(m, "table runs: %s", sql ? sqlite3_errmsg(m->db) : "out of memory");
    sqlite3_finalize(st);
    sqlite3_finalize(map);
    free(sql);
    return rc == SQLITE_OK ? 0 : -1;
}

/* The column of table that refers to runs: its foreign key to runs, else a column named
 * run_id. *col is malloc'ed, NULL when the table has neither. */
static int run_column(merge_t *m, const char *table, char **col) {
    static const char *const q[] = {
        "SELECT \"from\" FROM main.pragma_foreign_key_list(?1) WHERE \"table\" = 'runs'",
        "SELECT name FROM main.pragma_table_info(?1) WHERE name = 'run_id'",
    };
    *col = NULL;
    for (int k = 0; k < 2 && !*col; k++) {
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(m->db, q[k], -1, &st, NULL);
        if (rc == SQLITE_OK) sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK) rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) *col = dup_col(st, 0);
        sqlite3_finalize(st);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE) return -1;
    }
    return 0;
}

/* Every table of the output that refers to runs (other than runs), copied for the mapped
 * runs. Tables are read from the database: schema.sql's list is not repeated here. */
static int copy_tables(merge_t *m) {
    sqlite3_stmt *tabs = NULL;
    int rc = sqlite3_prepare_v2(m->db, "SELECT t.name FROM main.sqlite_master AS t WHERE "
                                "t.type = 'table' AND t.name NOT IN ('runs', 'meta') AND "
                                "t.name NOT LIKE 'sqlite_%' AND EXISTS (SELECT 1 FROM "
                                "merge_in.sqlite_master AS i WHERE i.type = 'table' AND "
                                "i.name = t.name) ORDER BY t.name", -1, &tabs, NULL);
    while (rc == SQLITE_OK && sqlite3_step(tabs) == SQLITE_ROW) {
        const char *table = (const char *)sqlite3_column_text(tabs, 0);
        char *col = NULL, *tail = NULL, *sql = NULL;
        if (run_column(m, table, &col) != 0) rc = SQLITE_ERROR;
        if (col && rc == SQLITE_OK) {
            size_t len = 0;
            FILE *f = open_memstream(&tail, &len);
            if (f) {
                fputs("JOIN temp.merge_map AS mm ON mm.merge_old = s.", f);
                put_id(f, col);
                fclose(f);
            }
            const char *const repl[] = { col, "mm.merge_new", NULL };
            sql = tail ? copy_sql(m, table, NULL, repl, tail) : NULL;
            rc = sql ? sqlite3_exec(m->db, sql, NULL, NULL, NULL) : SQLITE_NOMEM;
            /* Kept now: finalizing the table query below clears the connection's error. */
            if (rc != SQLITE_OK)
                set_err(m, "table %s: %s", table, sql ? sqlite3_errmsg(m->db) : "out of memory");
        }
        free(col);
        free(tail);
        free(sql);
    }
    sqlite3_finalize(tabs);
    if (rc != SQLITE_OK && !m->failed) set_err(m, "%s", sqlite3_errmsg(m->db));
    return rc == SQLITE_OK ? 0 : -1;
}

int merge_add(merge_t *m, const char *in_path) {
    if (m->unusable) return -1; /* merge_open failed: its message stays */
    m->failed = 0;
    runs_clear(m);
    if (check_input(m, in_path) != 0) return -1;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(m->db, "ATTACH DATABASE ?1 AS merge_in", -1, &st, NULL);
    if (rc == SQLITE_OK) sqlite3_bind_text(st, 1, in_path, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        set_err(m, "%s: %s", in_path, sqlite3_errmsg(m->db));
        return -1;
    }
    int ret = -1;
    if (sqlite3_exec(m->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        set_err(m, "%s: %s", m->out_path, sqlite3_errmsg(m->db));
        goto detach;
    }
    if (sqlite3_exec(m->db, "DELETE FROM temp.merge_map", NULL, NULL, NULL) != SQLITE_OK) {
        set_err(m, "%s: %s", m->out_path, sqlite3_errmsg(m->db));
        goto rollback;
    }
    if (load_runs(m, in_path) != 0) goto rollback;
    for (size_t i = 0; i < m->n; i++)
        if (!m->runs[i].decided && name_group(m, i, in_path) != 0) goto rollback;
    if (copy_runs(m) != 0 || copy_tables(m) != 0) {
        char why[sizeof m->err];
        snprintf(why, sizeof why, "%s", m->err);
        set_err(m, "merging %s into %s: %s", in_path, m->out_path, why);
        goto rollback;
    }
    if (sqlite3_exec(m->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        set_err(m, "merging %s into %s: %s", in_path, m->out_path, sqlite3_errmsg(m->db));
        goto rollback;
    }
    m->kept_renames = m->n_renames;
    ret = 0;
    goto detach;
rollback:
    sqlite3_exec(m->db, "ROLLBACK", NULL, NULL, NULL);
    renames_truncate(m, m->kept_renames);
    runs_clear(m);
detach:
    sqlite3_exec(m->db, "DETACH DATABASE merge_in", NULL, NULL, NULL);
    return ret;
}
