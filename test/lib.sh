# shellcheck shell=bash
# Shared helpers for test/run-tests.sh and test/demo.sh: build and install dex, and run a
# throwaway PostgreSQL 15 cluster in a fresh scratch directory. Source it, do not run it.
#
# Settings (environment):
#   DEX_TEST_PORT    port of the throwaway cluster (default 54329; Unix socket only, in a
#                    private directory, so it cannot clash with other servers)
#   DEX_DATABASE     database the cluster serves and the tests use (default dex_regress)
#   DEX_PRELOAD      shared_preload_libraries (default dex; '' for a cluster without dex)
#   DEX_EXTRA_CONF   extra lines appended to postgresql.conf
#   DEX_SKIP_BUILD   1: do not build nor install dex (use what is installed)
#   DEX_TEST_USER    OS user that runs the cluster when we are root (default postgres,
#                    else a "dex" user created on demand); PostgreSQL refuses to run as root
#   DEX_KEEP_SCRATCH 1: keep the scratch directory even on success
#   PG_CONFIG        pg_config of the PostgreSQL to use (default the PostgreSQL 15 one)
#
# After dex_start_cluster: DEX_SCRATCH, DEX_PGDATA, DEX_SOCKDIR, DEX_LOG are set and
# PGHOST, PGPORT, PGDATABASE, PGUSER are exported for clients.

# Not exported by us: a nested script (the demo run from run-tests.sh) must get its own.
export -n DEX_SCRATCH DEX_PGDATA DEX_SOCKDIR DEX_LOG DEX_SRC DEX_CLUSTER_UP DEX_CLEANED 2>/dev/null || true
DEX_SCRATCH='' DEX_PGDATA='' DEX_SOCKDIR='' DEX_LOG='' DEX_SRC='' DEX_CLUSTER_UP=0 DEX_CLEANED=0

DEX_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEX_PROG=$(basename "$0")
DEX_TEST_PORT=${DEX_TEST_PORT:-54329}
DEX_DATABASE=${DEX_DATABASE:-dex_regress}
DEX_PRELOAD=${DEX_PRELOAD-dex}
DEX_EXTRA_CONF=${DEX_EXTRA_CONF:-}
DEX_SKIP_BUILD=${DEX_SKIP_BUILD:-0}
DEX_KEEP_SCRATCH=${DEX_KEEP_SCRATCH:-0}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}

dex_log() { echo "$DEX_PROG: $*" >&2; }
dex_die() { dex_log "$*"; exit 1; }

# Where PostgreSQL lives. Absolute paths throughout: a pg_ctl or psql earlier in PATH may
# belong to another installation.
# shellcheck disable=SC2034 # the variables are for the scripts that source this file
dex_pg_paths() {
  [[ -x $PG_CONFIG ]] || { dex_log "no pg_config at $PG_CONFIG (run test/deps.sh)"; return 1; }
  PG_BINDIR=$("$PG_CONFIG" --bindir) || return 1
  local pgxs_src
  pgxs_src=$(dirname "$(dirname "$("$PG_CONFIG" --pgxs)")") || return 1   # .../lib/pgxs/src
  PG_REGRESS=$pgxs_src/test/regress/pg_regress
  PG_ISOLATION_REGRESS=$pgxs_src/test/isolation/pg_isolation_regress
  PG_PERL_LIB=$pgxs_src/test/perl
}

# The unprivileged user that runs every cluster operation: PostgreSQL refuses root, and CI
# runs as root. A non-root caller simply runs everything as itself.
dex_test_user() {
  if ((EUID != 0)); then
    DEX_TEST_USER=$(id -un)
    return 0
  fi
  if [[ -z ${DEX_TEST_USER:-} ]]; then
    if id postgres >/dev/null 2>&1; then DEX_TEST_USER=postgres; else DEX_TEST_USER=dex; fi
  fi
  if ! id "$DEX_TEST_USER" >/dev/null 2>&1; then
    dex_log "creating OS user $DEX_TEST_USER"
    useradd --create-home --shell /bin/bash "$DEX_TEST_USER" || return 1
  fi
}

# dex_run_in DIR CMD...: run CMD in DIR as the test user, with the PostgreSQL 15 binaries first
# in PATH. As root, PATH is reset to system directories: root's own (e.g. ~/.pyenv) are
# unreadable for the test user anyway.
dex_run_in() {
  local dir=$1; shift
  if ((EUID == 0)); then
    (cd "$dir" && runuser -u "$DEX_TEST_USER" -- \
      env PATH="$PG_BINDIR:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" "$@")
  else
    (cd "$dir" && env PATH="$PG_BINDIR:$PATH" "$@")
  fi
}

# dex_as_user CMD...: the same, from the scratch directory.
dex_as_user() { dex_run_in "$DEX_SCRATCH" "$@"; }

# psql on the throwaway cluster, quiet and stopping at the first error.
dex_psql() { dex_as_user "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }

# Build and install dex into the PostgreSQL of PG_CONFIG (installing needs root or sudo).
dex_build() {
  dex_pg_paths || return 1
  if [[ $DEX_SKIP_BUILD == 1 ]]; then
    dex_log "DEX_SKIP_BUILD=1: not building dex, using what is installed"
    return 0
  fi
  dex_log "building dex"
  make -C "$DEX_ROOT" -j2 PG_CONFIG="$PG_CONFIG" || return 1
  dex_log "installing dex"
  if ((EUID != 0)) && command -v sudo >/dev/null 2>&1; then
    sudo make -C "$DEX_ROOT" install PG_CONFIG="$PG_CONFIG" || return 1
  else
    make -C "$DEX_ROOT" install PG_CONFIG="$PG_CONFIG" || return 1
  fi
}

# A fresh scratch directory owned by the test user, so that nothing from an earlier run is
# reused. Kept on failure for inspection, removed on success by dex_cleanup.
dex_scratch_init() {
  [[ -n $DEX_SCRATCH ]] && return 0
  dex_pg_paths && dex_test_user || return 1
  DEX_SCRATCH=$(mktemp -d /tmp/dex-test.XXXXXX) || return 1
  chmod 755 "$DEX_SCRATCH" && chown "$DEX_TEST_USER": "$DEX_SCRATCH" || return 1
  DEX_PGDATA=$DEX_SCRATCH/data
  DEX_SOCKDIR=$DEX_SCRATCH/sock
  DEX_LOG=$DEX_SCRATCH/server.log
  # Stop the cluster and settle the scratch directory however we leave, Ctrl-C included.
  trap 'dex_cleanup $?' EXIT
  trap 'dex_cleanup 130; trap - EXIT; exit 130' INT
  trap 'dex_cleanup 143; trap - EXIT; exit 143' TERM
  dex_log "scratch directory $DEX_SCRATCH"
}

# A copy of the work tree (without .git and build output) the test user can read and write:
# the suites write results, diffs and tmp_check next to their inputs.
dex_copy_tree() {
  dex_scratch_init || return 1
  local dst=$DEX_SCRATCH/src
  mkdir "$dst" || return 1
  tar -C "$DEX_ROOT" --exclude=./.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
    --exclude=./results --exclude=./tmp_check -cf - . | tar -C "$dst" -xf - || return 1
  chown -R "$DEX_TEST_USER": "$dst" || return 1
  DEX_SRC=$dst
}

dex_start_cluster() {
  dex_scratch_init || return 1
  dex_log "initdb in $DEX_PGDATA"
  dex_as_user mkdir -p "$DEX_SOCKDIR" || return 1
  # C locale and UTF8: expected outputs must not depend on the machine's locale.
  dex_as_user "$PG_BINDIR/initdb" -D "$DEX_PGDATA" -A trust -E UTF8 --locale=C --no-sync \
    >"$DEX_SCRATCH/initdb.log" 2>&1 || { cat "$DEX_SCRATCH/initdb.log" >&2; return 1; }
  dex_as_user tee -a "$DEX_PGDATA/postgresql.conf" >/dev/null <<EOF || return 1

# throwaway test cluster (test/lib.sh)
listen_addresses = ''
port = $DEX_TEST_PORT
unix_socket_directories = '$DEX_SOCKDIR'
shared_preload_libraries = '$DEX_PRELOAD'
dex.database = '$DEX_DATABASE'
max_worker_processes = 16
log_line_prefix = '%m [%p] %q%a '
$DEX_EXTRA_CONF
EOF
  dex_log "starting the cluster (port $DEX_TEST_PORT, socket in $DEX_SOCKDIR, log $DEX_LOG)"
  DEX_CLUSTER_UP=1   # before start: a start that times out may still leave a server running
  dex_as_user "$PG_BINDIR/pg_ctl" -D "$DEX_PGDATA" -l "$DEX_LOG" -w -t 60 start >/dev/null ||
    { dex_log "the cluster did not start"; return 1; }
  export PGHOST=$DEX_SOCKDIR PGPORT=$DEX_TEST_PORT PGDATABASE=$DEX_DATABASE PGUSER=$DEX_TEST_USER
  # The dex scheduler serves dex.database and retries until it exists.
  dex_psql -d postgres -c "CREATE DATABASE \"$DEX_DATABASE\"" || return 1
}

dex_stop_cluster() {
  [[ $DEX_CLUSTER_UP == 1 ]] || return 0
  DEX_CLUSTER_UP=0
  dex_as_user "$PG_BINDIR/pg_ctl" -D "$DEX_PGDATA" status >/dev/null 2>&1 || return 0
  dex_as_user "$PG_BINDIR/pg_ctl" -D "$DEX_PGDATA" -m fast -w -t 60 stop >/dev/null 2>>"$DEX_LOG" ||
    dex_as_user "$PG_BINDIR/pg_ctl" -D "$DEX_PGDATA" -m immediate -w stop >/dev/null 2>>"$DEX_LOG" ||
    dex_log "could not stop the cluster in $DEX_PGDATA"
}

# dex_show_log LINES: the tail of the server log.
dex_show_log() {
  [[ -s $DEX_LOG ]] || return 0
  echo "----- last $1 lines of $DEX_LOG -----"
  tail -n "$1" "$DEX_LOG"
  echo "-----"
}

# dex_cleanup STATUS: stop the cluster; remove the scratch directory when STATUS is 0, else
# show the end of the server log and keep the directory (and say where). Runs once; the EXIT
# trap calls it too.
dex_cleanup() {
  [[ -n $DEX_SCRATCH && $DEX_CLEANED == 0 ]] || return 0
  DEX_CLEANED=1
  [[ $1 == 0 ]] || dex_show_log 60
  dex_stop_cluster
  # Servers that an interrupted TAP test left behind live under the scratch directory too.
  local pidfile
  while IFS= read -r pidfile; do
    dex_as_user "$PG_BINDIR/pg_ctl" -D "$(dirname "$pidfile")" -m immediate -w stop >/dev/null 2>&1 || true
  done < <(find "$DEX_SCRATCH" -name postmaster.pid 2>/dev/null)
  if [[ $1 == 0 && $DEX_KEEP_SCRATCH != 1 ]]; then
    rm -rf "$DEX_SCRATCH"
  else
    dex_log "kept scratch directory $DEX_SCRATCH"
  fi
}
