#!/usr/bin/env bash
# The dex demo on a throwaway cluster: installs what is missing, builds and installs dex,
# starts a private PostgreSQL 15 with dex preloaded, runs test/demo.sql (a workflow with one
# activity, driven by a worker loop in SQL), prints the run's history, and stops the cluster.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=test/lib.sh
source "$here/lib.sh"

[[ ${DEX_SKIP_DEPS:-0} == 1 ]] || bash "$here/deps.sh"
dex_build
DEX_DATABASE=dex_demo dex_start_cluster   # stopped again however the script exits
dex_as_user "$PG_BINDIR/psql" -X -d dex_demo <"$here/demo.sql"
