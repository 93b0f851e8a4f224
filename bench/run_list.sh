#!/usr/bin/env bash
# The dashboard's run list with 1,000,000 runs (issue 19: it answers in under 200 ms): builds
# and installs dex, starts a throwaway PostgreSQL 15 cluster (test/lib.sh; stopped however
# this script exits), makes the runs and times the list, the live counts and GET /ui/runs of
# python3 -m dex serve (bench/run_list.py says how). About 2 minutes on a 2-core machine.
#
# Environment:
#   BENCH_RUNS=1000000  how many runs
#   DEX_TEST_PORT       port of the throwaway cluster (default 54451)
#   DEX_SKIP_DEPS=1     do not check the Debian packages (test/deps.sh)
#   DEX_SKIP_BUILD=1    do not build nor install dex (use what is installed)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
export DEX_TEST_PORT=${DEX_TEST_PORT:-54451}
export BENCH_RUNS=${BENCH_RUNS:-1000000}

# shellcheck source=test/lib.sh
source "$root/test/lib.sh"
[[ ${DEX_SKIP_DEPS:-0} == 1 ]] || bash "$root/test/deps.sh"
dex_build
DEX_DATABASE=dex_bench DEX_EXTRA_CONF="
shared_buffers = 512MB
max_wal_size = 4GB
" dex_start_cluster
dex_run_in "$root" env PYTHONDONTWRITEBYTECODE=1 BENCH_RUNS="$BENCH_RUNS" \
  "${DEX_PYTHON:-/usr/bin/python3}" bench/run_list.py --serve
