#!/usr/bin/env bash
# The dex demo on a throwaway cluster: installs what is missing, builds and installs dex,
# starts a private PostgreSQL 15 with dex preloaded, and runs examples/demo.py with the Python
# SDK (clients/python): an order workflow whose worker is killed with SIGKILL in the middle of
# an activity; a new worker finishes the run without repeating completed activities; the
# run's history is printed as a table. Stops the cluster at the end.
#
# DEX_PYTHON is the interpreter (default /usr/bin/python3, which has Debian's psycopg).
# "bash test/demo.sh ts" runs the TypeScript demo instead (examples/typescript/demo.ts).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=test/lib.sh
source "$here/lib.sh"

[[ ${DEX_SKIP_DEPS:-0} == 1 ]] || bash "$here/deps.sh"
dex_build
DEX_DATABASE=dex_demo dex_start_cluster   # stopped again however the script exits
dex_copy_tree                             # a copy the cluster's OS user can read
if [[ ${1:-} == ts ]]; then   # bash test/demo.sh ts: the TypeScript demo (examples/typescript)
  dex_run_in "$DEX_SRC/examples/typescript" env TMPDIR="$DEX_SCRATCH" sh -c \
    '../../clients/typescript/node_modules/.bin/tsc -p ../../clients/typescript &&
     ../../clients/typescript/node_modules/.bin/tsc -p . && node demo.js'
  exit
fi
dex_run_in "$DEX_SRC/examples" env PYTHONDONTWRITEBYTECODE=1 TMPDIR="$DEX_SCRATCH" \
  "${DEX_PYTHON:-/usr/bin/python3}" -u demo.py
