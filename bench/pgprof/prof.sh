#!/bin/bash
# Profile the PostgreSQL backends of one bench/peers row with perf.
#
#   prof.sh <peers binary> <out dir> <row> [tasks]
#
# Runs the row alone on database $DB (default peers_prof; create it first:
# createdb -h 127.0.0.1 -U postgres peers_prof), waits 4 s for its
# connections, then records its backends (every backend of $DB: the
# ledger's pool and its LISTEN connections) for $PERFSEC seconds
# (default 8) at 999 Hz with DWARF call chains (postgres is built without
# frame pointers; its exported symbols name most functions). Needs root
# or perf_event_paranoid <= 1 for other users' processes, and the server
# on this machine. Then:
#
#   perf script -i <out>/perf.data -F pid,ip,sym > <out>/script.txt
#   python3 buckets.py <out>/pids.txt < <out>/script.txt     # % by phase, writers and LISTEN apart
#   python3 incl.py ExecInitModifyTable <out>/pids.txt < <out>/script.txt   # what lies under one function
BIN=$1; OUT=$2; ROW=$3; TASKS=${4:-20000}
DB=${DB:-peers_prof}
mkdir -p "$OUT"
"$BIN" --pg "postgres://postgres@127.0.0.1:5432/$DB?sslmode=disable" --runs 1 --tasks "$TASKS" --only "$ROW" > "$OUT/bench.txt" 2>&1 &
BP=$!
sleep 4
PIDS=$(psql -h 127.0.0.1 -U postgres -d postgres -Atc "select string_agg(pid::text, ',') from pg_stat_activity where datname='$DB'")
psql -h 127.0.0.1 -U postgres -d postgres -Atc "select pid, application_name, left(query,60) from pg_stat_activity where datname='$DB'" > "$OUT/pids.txt"
echo "pids $PIDS"
perf record -F 999 --call-graph dwarf,16384 -p "$PIDS" -o "$OUT/perf.data" -- sleep "${PERFSEC:-8}" > "$OUT/perf.log" 2>&1
wait $BP
cat "$OUT/bench.txt"
