#!/usr/bin/env bash
# e2e_upgrade: a database written by an earlier schema (version 5, before the cluster
# columns; version 6, before runs.kind 'serve') is refused by the readers with a hint,
# brought up to date by `twinserve upgrade` (every row kept: report prints exactly what it
# printed for the same run recorded now), and upgraded by a command that records into it;
# versions that cannot be upgraded stay refused. The old files are made from a current one:
# version 6 by rebuilding runs with the old CHECK, version 5 by also dropping what version
# 6 added (the sqlite3 CLI's ALTER TABLE DROP COLUMN, SQLite 3.35 or later: SKIP before).
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_upgrade

"$BIN" trace gen --n 200 --rate 4 --seed 3 --out "$T/t.csv" >/dev/null
"$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$T/cur.db" --name a >/dev/null
"$BIN" report "$T/cur.db" >"$T/report_cur.txt"

# version 6: runs.kind without 'serve' (the table rebuilt as version 6 declared it)
downgrade6() {
    cp "$T/cur.db" "$1"
    local ddl
    ddl=$(sqlite3 "$1" "select sql from sqlite_master where type = 'table' and name = 'runs'" |
          sed "s/'serve', //")
    sqlite3 "$1" "PRAGMA legacy_alter_table = ON; ALTER TABLE runs RENAME TO runs_cur; $ddl;
        INSERT INTO runs SELECT * FROM runs_cur; DROP TABLE runs_cur;
        UPDATE meta SET value = '6' WHERE key = 'schema_version';"
}

begin "a version-6 database: refused with the hint; upgraded, it takes 'serve' runs"
downgrade6 "$T/v6.db"
sqlite3 "$T/v6.db" "INSERT INTO runs(name, kind, status) VALUES ('x', 'serve', 'done')" \
    2>/dev/null && bad " the version-6 file took kind 'serve' (not made as version 6)"
run r6 "$BIN" report "$T/v6.db"
want_rc 1
want_err "schema_version 6 is older than this twinserve" "twinserve upgrade DB"
run up6 "$BIN" upgrade "$T/v6.db"
want_rc 0
want_out "upgraded from schema_version 6"
want_sql "$T/v6.db" "select value from meta where key = 'schema_version'" 7
want_sql "$T/v6.db" "select count(*) from requests" 200
want_sql "$T/v6.db" "select count(*) from sqlite_master where name like 'runs_%'" 0
db_ok "$T/v6.db"
run r6b "$BIN" report "$T/v6.db"
want_rc 0
cmp -s "$T/r6b.out" "$T/report_cur.txt" || bad " report after the upgrade differs from the report of the same run recorded now"
sqlite3 "$T/v6.db" "PRAGMA foreign_keys = ON; INSERT INTO runs(name, kind, status)
    VALUES ('x', 'serve', 'done'); PRAGMA foreign_key_check;" >"$T/fk.out" 2>&1 ||
    bad " the upgraded file refused a 'serve' run: $(cat "$T/fk.out")"
[ -s "$T/fk.out" ] && bad " foreign keys broken after the upgrade: $(cat "$T/fk.out")"
want_sql "$T/v6.db" "select sql like '%REFERENCES runs(id)%' from sqlite_master where name = 'requests'" 1
end

downgrade() {
    downgrade6 "$1"
    sqlite3 "$1" "ALTER TABLE requests DROP COLUMN replica;
        ALTER TABLE requests DROP COLUMN prefill_replica;
        ALTER TABLE requests DROP COLUMN kv_transfer_s;
        ALTER TABLE steps DROP COLUMN replica; DROP TABLE replicas;
        UPDATE meta SET value = '5' WHERE key = 'schema_version';" 2>/dev/null
}

if ! downgrade "$T/v5.db"; then
    echo "SKIP: this sqlite3 CLI ($(sqlite3 --version | cut -d' ' -f1)) has no DROP COLUMN: upgrade not tested"
    e2e_finish e2e_upgrade
    exit $?
fi

begin "a version-5 database: readers refuse it and say how to upgrade it"
run r5 "$BIN" report "$T/v5.db"
want_rc 1
want_err "schema_version 5 is older than this twinserve" "twinserve upgrade DB"
want_sql "$T/v5.db" "select value from meta where key = 'schema_version'" 5
end

begin "twinserve upgrade: version 5 to current, every row kept, the same report"
run up "$BIN" upgrade "$T/v5.db"
want_rc 0
want_out "upgraded from schema_version 5"
want_sql "$T/v5.db" "select value from meta where key = 'schema_version'" 7
want_sql "$T/v5.db" "select count(*) from requests where replica = 0" 200
want_sql "$T/v5.db" "select count(*) from steps where replica is null" 0
db_ok "$T/v5.db"
run r5b "$BIN" report "$T/v5.db"
want_rc 0
cmp -s "$T/r5b.out" "$T/report_cur.txt" || bad " report after the upgrade differs from the report of the same run recorded now"
run again "$BIN" upgrade "$T/v5.db"
want_rc 0
want_out "already current"
end

begin "a command that records into a version-5 database upgrades it and keeps its runs"
downgrade "$T/w5.db"
run sim5 "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$T/w5.db" --name b
want_rc 0
want_sql "$T/w5.db" "select group_concat(name) from (select name from runs order by id)" "a,b"
want_sql "$T/w5.db" "select count(*) from requests" 400
db_ok "$T/w5.db"
end

begin "versions that cannot be upgraded stay refused; a missing file is not created"
cp "$T/cur.db" "$T/v4.db"
sqlite3 "$T/v4.db" "UPDATE meta SET value = '4' WHERE key = 'schema_version'"
run v4 "$BIN" upgrade "$T/v4.db"
want_rc 1
want_err "schema_version 4 is older than this twinserve"
grep -qF "twinserve upgrade DB" "$T/v4.err" && bad " a hint to upgrade a version that cannot be"
cp "$T/cur.db" "$T/v9.db"
sqlite3 "$T/v9.db" "UPDATE meta SET value = '9' WHERE key = 'schema_version'"
run v9 "$BIN" upgrade "$T/v9.db"
want_rc 1
want_err "schema_version 9 is newer"
run none "$BIN" upgrade "$T/none.db"
want_rc 1
[ -e "$T/none.db" ] && bad " upgrade created none.db"
run noarg "$BIN" upgrade
want_rc 2
end

e2e_finish e2e_upgrade
