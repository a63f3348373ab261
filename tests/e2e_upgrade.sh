#!/usr/bin/env bash
# e2e_upgrade: a database written by the previous schema (version 5, before the cluster
# columns) is refused by the readers with a hint, brought up to date by `twinserve upgrade`
# (every row kept: report prints exactly what it printed for the same run recorded now), and
# upgraded by a command that records into it; versions that cannot be upgraded stay refused.
# The version-5 file is made from a current one by dropping what version 6 added (the
# sqlite3 CLI's ALTER TABLE DROP COLUMN, SQLite 3.35 or later: SKIP before that).
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_upgrade

"$BIN" trace gen --n 200 --rate 4 --seed 3 --out "$T/t.csv" >/dev/null
"$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$T/v6.db" --name a >/dev/null
"$BIN" report "$T/v6.db" >"$T/report6.txt"

downgrade() {
    cp "$T/v6.db" "$1"
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
want_sql "$T/v5.db" "select value from meta where key = 'schema_version'" 6
want_sql "$T/v5.db" "select count(*) from requests where replica = 0" 200
want_sql "$T/v5.db" "select count(*) from steps where replica is null" 0
db_ok "$T/v5.db"
run r5b "$BIN" report "$T/v5.db"
want_rc 0
cmp -s "$T/r5b.out" "$T/report6.txt" || bad " report after the upgrade differs from the report of the same run recorded now"
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
cp "$T/v6.db" "$T/v4.db"
sqlite3 "$T/v4.db" "UPDATE meta SET value = '4' WHERE key = 'schema_version'"
run v4 "$BIN" upgrade "$T/v4.db"
want_rc 1
want_err "schema_version 4 is older than this twinserve"
grep -qF "twinserve upgrade DB" "$T/v4.err" && bad " a hint to upgrade a version that cannot be"
cp "$T/v6.db" "$T/v9.db"
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
