/* rec_upgrade: brings a database written by an older twinserve up to this build's schema, in
 * place, for the versions whose changes keep every row meaning the same thing: new nullable
 * columns, new tables, a CHECK constraint that admits more values.
 *
 * Versions 1-4 changed what a column holds; they stay refused. Each step below takes
 * version `from` to `from + 1`; steps chain, all in one transaction. A table the schema adds
 * (e.g. replicas) is created by schema.sql itself, whose statements are idempotent.
 *
 * SQLite cannot change a CHECK constraint in place, so a step that widens one renames the
 * table aside (`sql`), has schema.sql create it anew (`schema`), copies the rows and drops
 * the old table (`then`). legacy_alter_table keeps the rename from rewriting the other
 * tables' REFERENCES and the views to the old name, so they name the new table. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

#include "traces/recorder.h"

extern const char rec_schema_sql[];

typedef struct {
    long long from;
    const char *sql;
    int schema;        /* then apply schema.sql */
    const char *then;  /* then this, or NULL */
} upgrade_step_t;

static const upgrade_step_t STEPS[] = {
    /* 5 -> 6 (issue #14): every run before clusters had one replica, replica 0, which is
     * what a single-replica run records now. Runs get no replicas rows: a run recorded
     * before the table existed has no description of its replica to copy. */
    { 5, "ALTER TABLE requests ADD COLUMN replica INTEGER;"
         "ALTER TABLE requests ADD COLUMN prefill_replica INTEGER;"
         "ALTER TABLE requests ADD COLUMN kv_transfer_s REAL;"
         "ALTER TABLE steps ADD COLUMN replica INTEGER;"
         "UPDATE requests SET replica = 0;"
         "UPDATE steps SET replica = 0;"
         "UPDATE meta SET value = '6' WHERE key = 'schema_version';", 0, NULL },
    /* 6 -> 7 (issue #15): runs.kind may be 'serve'; the rows stay as they are. */
    { 6, "PRAGMA legacy_alter_table = ON;"
         "ALTER TABLE runs RENAME TO runs_v6;", 1,
         "INSERT INTO runs SELECT * FROM runs_v6;"
         "DROP TABLE runs_v6;"
         "PRAGMA legacy_alter_table = OFF;"
         "UPDATE meta SET value = '7' WHERE key = 'schema_version';" },
};

enum { N_STEPS = sizeof STEPS / sizeof STEPS[0] };

/* The schema_version db records; 0 when it has none or it cannot be read (empty, not ours,
 * not a database: rec_check_db, which runs next, says which). */
static long long db_version(sqlite3 *db) {
    sqlite3_stmt *st = NULL;
    long long v = 0;
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &st,
                           NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        const char *s = (const char *)sqlite3_column_text(st, 0);
        char *end = NULL;
        v = s ? strtoll(s, &end, 10) : 0;
        if (!s || end == s || *end) v = 0;
    }
    sqlite3_finalize(st);
    return v;
}

int rec_upgradable(long long version) {
    for (int i = 0; i < N_STEPS; i++)
        if (STEPS[i].from == version) return 1;
    return 0;
}

int rec_upgrade_db(sqlite3 *db, long long *from, char *err, size_t errlen) {
    char *msg = NULL;
    long long v = db_version(db);
    *from = 0;
    if (!rec_upgradable(v)) return 0; /* current, newer, unknown or empty: rec_check_db decides */
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, &msg) != SQLITE_OK) goto fail;
    for (long long at = v; rec_upgradable(at); at++)
        for (int i = 0; i < N_STEPS; i++) {
            const upgrade_step_t *u = &STEPS[i];
            if (u->from == at &&
                (sqlite3_exec(db, u->sql, NULL, NULL, &msg) != SQLITE_OK ||
                 (u->schema && sqlite3_exec(db, rec_schema_sql, NULL, NULL, &msg) != SQLITE_OK) ||
                 (u->then && sqlite3_exec(db, u->then, NULL, NULL, &msg) != SQLITE_OK)))
                goto rollback;
        }
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) goto rollback;
    *from = v;
    return 0;
rollback:
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_exec(db, "PRAGMA legacy_alter_table = OFF", NULL, NULL, NULL);
fail:
    snprintf(err, errlen, "cannot upgrade the database from schema_version %lld: %s", v,
             msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    return -1;
}
