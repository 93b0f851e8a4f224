#!/usr/bin/env bash
# The dex benchmark (`make bench`): builds and installs dex, builds bench/dexbench, starts a
# throwaway PostgreSQL 15 cluster (test/lib.sh; stopped however this script exits), runs the
# workloads W1..W10, S1, Q1, F1 and F2 and prints one markdown table. What each workload does and
# how each figure is computed: bench/README.md. Takes about 11 minutes on a 2-core machine (S1
# alone: 2.5).
#
# Server settings (on top of test/lib.sh's: Unix socket only, max_worker_processes = 16):
#   fsync = on, synchronous_commit = on    durable commits: every transaction waits for its WAL
#                                          flush, as in production
#   shared_buffers = 1GB                   the whole working set (1M backlog included) fits
#   max_wal_size = 8GB, checkpoint_timeout = 30min
#                                          no checkpoint during the run, so WAL per item is not
#                                          inflated by full-page images at random moments
#   wal_level = replica                    the usual production level
#   track_io_timing = off                  no clock calls on every I/O
#   shared_preload_libraries = 'dex,pg_stat_statements', dex.database = dex_bench
#   pg_stat_statements.track = all         nested statements too (the SPI statements inside
#                                          dex's functions), to see where the time goes;
#                                          toplevel separates what clients send (W6)
#   pg_stat_statements.max = 10000
#
# Environment:
#   BENCH_ONLY=W1,W3   run only these workloads (W1..W10, S1, Q1, F1, F2, SDK, GRPC, DEF; default all). SDK: W1 through
#                      the Python and the TypeScript SDKs' workers (bench/sdk_w1.py,
#                      clients/typescript/bench/w1.ts), on the same cluster, after the others;
#                      DEF: a 3-step definition of SQL steps against the same flow as a Python
#                      SDK workflow with three activities (bench/definitions.py); GRPC: W1 through
#                      workers over the gRPC API (bench/grpc_w1.py, `python3 -m dex grpc`), with
#                      unary long polls and with a stream; bench/dexbench is built only when a
#                      workload of its own is asked for
#   BENCH_SCALE=0.1    multiply every N and duration (quick check; default 1)
#   BENCH_K=2          workers per kind of queue (default 2)
#   BENCH_BATCH=100    tasks per poll and per complete_tasks_pb call (default 100)
#   BENCH_W5_MAX=N     largest W5 backlog (default 1000000: 1k, 100k and 1M are run)
#   BENCH_LOW_K=1,4    W3 and W4 are run with BENCH_K workers per queue, then again with each of
#                      these (rows "W3 k=1", ...; empty: none)
#   BENCH_POLL_WAIT=2  what workers do: 2 (default) CALL dex.poll_tasks_wait_pb, passing it
#                      their last completions (workflow workers always, activity workers
#                      when their batch took all their slots: as the SDKs); 1 the same with
#                      completions apart; 0 poll, CALL dex.wait_for_tasks and poll again
#                      (dex < 1.4's way)
#   DEX_TEST_PORT      port of the throwaway cluster (default 54450)
#   DEX_SKIP_DEPS=1    do not check the Debian packages (test/deps.sh)
#   DEX_SKIP_BUILD=1   do not build nor install dex (use what is installed)
#
# Why BENCH_K=2 by default: on 2 cores the server does nearly all the work (the driver's
# protobuf work is a few percent of a core), and each worker's statement is a batch of up to
# 100 tasks, so 2 workers per kind (4 busy backends, plus the scheduler) already keep both
# cores busy while one backend waits for its WAL flush. More workers only add lock and
# buffer contention between backends competing for the same 2 cores and, with batches that
# fill up anyway, do not merge more commits per fsync. Measured on this machine (W1/W2,
# items/s): see bench/README.md, "Choosing K".
#
# Output: progress and per-workload details (top statements of pg_stat_statements, worker
# counters, checks) on stdout, the table at the end; all of it is also written to
# bench/results/last.log and the table to bench/results/last.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

export DEX_TEST_PORT=${DEX_TEST_PORT:-54450}
BENCH_ONLY=${BENCH_ONLY:-W1,W2,W3,W4,W5,W6,W7,W8,W9,W10,S1,Q1,F1,F2,SDK,GRPC,DEF}
export BENCH_SCALE=${BENCH_SCALE:-1} BENCH_K=${BENCH_K:-2} BENCH_BATCH=${BENCH_BATCH:-100}
export BENCH_W5_MAX=${BENCH_W5_MAX:-1000000}

mkdir -p "$here/results"
exec > >(tee "$here/results/last.log") 2>&1
started=$(date +%s)

# shellcheck source=test/lib.sh
source "$root/test/lib.sh"

[[ ${DEX_SKIP_DEPS:-0} == 1 ]] || bash "$root/test/deps.sh"
dex_build

# test/lib.sh's dex_scratch_init with a name of our own: a clean-up of /tmp/dex-test.* by a
# test run must not pull the cluster from under a benchmark.
dex_test_user
DEX_SCRATCH=$(mktemp -d /tmp/dex-bench.XXXXXX)
chmod 755 "$DEX_SCRATCH" && chown "$DEX_TEST_USER": "$DEX_SCRATCH"
DEX_PGDATA=$DEX_SCRATCH/data DEX_SOCKDIR=$DEX_SCRATCH/sock DEX_LOG=$DEX_SCRATCH/server.log
trap 'dex_cleanup $?' EXIT
trap 'dex_cleanup 130; trap - EXIT; exit 130' INT
trap 'dex_cleanup 143; trap - EXIT; exit 143' TERM

DEX_PRELOAD='dex,pg_stat_statements' DEX_DATABASE=dex_bench DEX_EXTRA_CONF="
# dex benchmark (bench/run.sh)
fsync = on
synchronous_commit = on
shared_buffers = 1GB
max_wal_size = 8GB
checkpoint_timeout = 30min
wal_level = replica
track_io_timing = off
pg_stat_statements.track = all
pg_stat_statements.max = 10000
" dex_start_cluster

dex_psql -c 'CREATE EXTENSION dex' -c 'CREATE EXTENSION pg_stat_statements'

real_api=$(dex_psql -At -c "SELECT count(*) FROM pg_proc WHERE proname IN ('create_runs', 'complete_tasks_pb', 'wait_for_tasks')")
[[ $real_api == 3 ]] ||
  dex_die "this dex lacks dex.create_runs, dex.complete_tasks_pb or dex.wait_for_tasks"
dex_psql -At -c "SELECT 'run.sh: dex ' || extversion FROM pg_extension WHERE extname = 'dex'" \
  -c "SELECT 'run.sh: ' || version()"

# W6 first: idle figures are cleanest before the other workloads leave work for autovacuum; W5
# last: it leaves its 1M-run backlog in the tables.
order=()
for w in W6 F1 W1 W2 W3 W4 W7 W8 F2 W9 W10 S1 Q1 W5; do
  [[ ,$BENCH_ONLY, == *,$w,* ]] && order+=("$w")
done
((${#order[@]} > 0)) || [[ ,$BENCH_ONLY, == *,SDK,* || ,$BENCH_ONLY, == *,DEF,* || ,$BENCH_ONLY, == *,GRPC,* ]] ||
  dex_die "BENCH_ONLY=$BENCH_ONLY names no workload (W1..W10, S1, Q1, F1, F2, SDK, GRPC, DEF)"
# the load driver, for the workloads of its own only (SDK, GRPC and DEF need no C)
((${#order[@]} == 0)) || make -C "$here" PG_CONFIG="$PG_CONFIG" >/dev/null
echo "run.sh: workloads ${order[*]}; BENCH_SCALE=$BENCH_SCALE BENCH_K=$BENCH_K BENCH_BATCH=$BENCH_BATCH"

rows=$(mktemp)
((${#order[@]} == 0)) || "$here/dexbench" "${order[@]}" | tee >(grep '^ROW|' >"$rows")
sleep 0.5   # the tee's grep

# W1 through the SDKs' own workers (BENCH_K workers each, every worker one workflow and one
# activity loop): rows "ROW|sdk|runs|s|runs/s|xact/run|client CPU ms/run|server CPU ms/run|create runs/s|process runs/s|check".
sdk_rows=$(mktemp)
if [[ ,$BENCH_ONLY, == *,SDK,* ]]; then
  n=$(awk -v s="$BENCH_SCALE" 'BEGIN { printf "%d", 10000 * s }')
  echo "run.sh: SDK: W1 ($n runs) through the Python and the TypeScript workers (TypeScript: both wire forms)"
  "${DEX_PYTHON:-/usr/bin/python3}" "$here/sdk_w1.py" "$n" "$BENCH_K" | tee -a "$sdk_rows"
  "$root/clients/typescript/node_modules/.bin/tsc" -p "$root/clients/typescript"
  for wire in protobuf json; do
    node "$root/clients/typescript/dist/bench/w1.js" "$n" "$BENCH_K" "$wire" | tee -a "$sdk_rows"
  done
fi

# W1 through workers over the gRPC API (python3 -m dex grpc between them and the database), each
# round one unary PollTasks call, then one stream per worker loop: rows as the SDK's, and the
# gRPC server process's CPU per run.
grpc_rows=$(mktemp)
if [[ ,$BENCH_ONLY, == *,GRPC,* ]]; then
  n=$(awk -v s="$BENCH_SCALE" 'BEGIN { printf "%d", 10000 * s }')
  echo "run.sh: GRPC: W1 ($n runs) through gRPC workers, unary long polls and a stream"
  for mode in unary stream; do
    "${DEX_PYTHON:-/usr/bin/python3}" "$here/grpc_w1.py" "$n" "$BENCH_K" "$mode" | tee -a "$grpc_rows"
  done
fi

# A definition of three SQL steps against the same flow as a Python SDK workflow calling three
# activities: rows "ROW|definition or sdk|runs|s|runs/s|xact/run|check".
def_rows=$(mktemp)
if [[ ,$BENCH_ONLY, == *,DEF,* ]]; then
  n=$(awk -v s="$BENCH_SCALE" 'BEGIN { printf "%d", 10000 * s }')
  echo "run.sh: DEF: $n runs of a 3-step SQL definition, then of the same flow as an SDK workflow"
  "${DEX_PYTHON:-/usr/bin/python3}" "$here/definitions.py" "$n" "$BENCH_K" | tee -a "$def_rows"
fi

{
  echo
  echo "dex benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores," \
    "BENCH_SCALE=$BENCH_SCALE BENCH_K=$BENCH_K BENCH_BATCH=$BENCH_BATCH"
  echo
  if [[ -s $rows ]]; then
    echo "| workload | items | s | items/s | xact/item | WAL B/item | CPU ms/item | ins/item | upd/item | del/item | notes |"
    echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"
    for w in W1 W2 W3 W4 W5 W6 W7 W8 W9 W10 S1 Q1 F1 F2; do
      awk -F'|' -v w="$w" '$2 == w || substr($2, 1, length(w) + 1) == w " " {
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 }' "$rows"
    done
    echo
    echo "W6: items are seconds of idling (per item = per second)."
  fi
  # W8 and W4 against their floors: F2 is W8's work by hand; a W4 workflow's four durable
  # commits cost at least four F1 logged INSERTs
  awk -F'|' '$2 == "W8" { w8 = $8 } $2 == "F2 hand-written W8" { f2 = $8 }
    $2 ~ /^W4( |$)/ { w4[$2] = $8 } $2 == "F1 logged INSERT" { f1 = $8 }
    END {
      if (w8 != "" && f2 > 0) printf "W8 server CPU per workflow: %.2f x F2 (%s / %s ms)\n", w8 / f2, w8, f2
      if (f1 > 0) for (k in w4) printf "%s server CPU per workflow: %.2f x four F1 logged INSERTs (%s / %.2f ms)\n", k, w4[k] / (4 * f1), w4[k], 4 * f1
    }' "$rows"
  if [[ -s $sdk_rows ]]; then
    echo
    echo "| W1 through the SDK's worker | runs | s | runs/s | xact/run | client CPU ms/run | server CPU ms/run | create runs/s | process runs/s | check |"
    echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|"
    awk -F'|' '$1 == "ROW" { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 }' "$sdk_rows"
  fi
  if [[ -s $grpc_rows ]]; then
    echo
    echo "| W1 through a gRPC worker | runs | s | runs/s | xact/run | client CPU ms/run | database CPU ms/run | gRPC server CPU ms/run | create runs/s | process runs/s | check |"
    echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"
    awk -F'|' '$1 == "ROW" { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $2, $3, $4, $5, $6, $7, $8, $12, $9, $10, $11 }' "$grpc_rows"
    echo
    awk -F'|' '$1 == "EMPTY" { printf "gRPC (%s): %s\n", $2, $3 }' "$grpc_rows"
  fi
  if [[ -s $def_rows ]]; then
    echo
    echo "| 3 steps adding 1 | runs | s | runs/s | xact/run | check |"
    echo "|---|--:|--:|--:|--:|---|"
    awk -F'|' '$1 == "ROW" { printf "| %s | %s | %s | %s | %s | %s |\n", $2, $3, $4, $5, $6, $7 }' "$def_rows"
  fi
} | tee "$here/results/last.md"
rm -f "$rows" "$sdk_rows" "$grpc_rows" "$def_rows"
echo "run.sh: done in $(($(date +%s) - started)) s"
