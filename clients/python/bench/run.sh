#!/usr/bin/env bash
# The Python SDK's wire-form benchmark (wire.py) on a throwaway cluster:
#
#   bash clients/python/bench/run.sh                       # the per-call table, steps 50 and 5
#   bash clients/python/bench/run.sh --worker              # the real worker instead
#   bash clients/python/bench/run.sh --steps 10 --repeat 1 # any wire.py options
#
# Like bench/run.sh: builds and installs dex (DEX_SKIP_BUILD=1: use what is installed), starts a
# PostgreSQL 15 cluster with test/lib.sh in /tmp/dex-test.* (stopped however this ends),
# with a TCP listener on 127.0.0.1: wire.py counts bytes with the kernel's TCP counters. The
# server and the benchmark share the machine: wire.py reads the server backends' CPU time in
# /proc. About 2 minutes on 2 cores with the defaults (--worker: 1 minute).
#
# Environment: DEX_TEST_PORT (default 54460), DEX_SKIP_DEPS, DEX_SKIP_BUILD (test/lib.sh),
# DEX_PYTHON (default /usr/bin/python3, which has Debian's psycopg).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)

export DEX_TEST_PORT=${DEX_TEST_PORT:-54460}
export DEX_DATABASE=dex_pybench
# shellcheck source=test/lib.sh
source "$root/test/lib.sh"

[[ ${DEX_SKIP_DEPS:-0} == 1 ]] || bash "$root/test/deps.sh"
dex_build

DEX_EXTRA_CONF="
# the Python SDK's wire benchmark (clients/python/bench/run.sh)
listen_addresses = '127.0.0.1'
" dex_start_cluster
dex_psql -c 'CREATE EXTENSION dex'

py=${DEX_PYTHON:-/usr/bin/python3}
conninfo="host=127.0.0.1 port=$DEX_TEST_PORT dbname=$DEX_DATABASE user=$DEX_TEST_USER"
if (($# > 0)); then
  "$py" "$here/wire.py" --conninfo "$conninfo" "$@" | grep -v '^RESULT '
else
  "$py" "$here/wire.py" --conninfo "$conninfo" --steps 50 | grep -v '^RESULT '
  "$py" "$here/wire.py" --conninfo "$conninfo" --steps 5 | grep -v '^RESULT '
fi
