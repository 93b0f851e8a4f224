#!/usr/bin/env bash
# The one test command. Installs missing Debian packages, builds and installs dex, starts a
# throwaway cluster (test/lib.sh) and runs every suite that has tests:
#   layers     test/layers.py: dependencies between src/'s files run one way, without cycles;
#              test/docs.py: the manual's links and paths lead somewhere;
#              test/packaging.py: debian/changelog and META.json are at dex.control's version
#   regress    pg_regress over the Makefile's REGRESS (test/regress/sql/*.sql, test/regress/expected/*.out)
#   isolation  pg_isolation_regress over the Makefile's ISOLATION (test/isolation/specs/*.spec)
#   pgtap      pg_prove over test/pgtap/*.sql
#   tap        prove over test/t/*.pl (PostgreSQL::Test::Cluster; they make their own clusters)
#   pytest     clients/python/tests
#   node       clients/typescript/test (node --test; the packages test/deps.sh installs)
#   demo       test/demo.sh as a smoke test (its own cluster)
#   fuzz       test/fuzz/run.sh: the libFuzzer targets of the codec, DEX_FUZZ_SECONDS in all
#   deb        test/deb.sh: the Debian package built, linted, installed into the system
#              PostgreSQL (instead of make install's files, put back at the end), its autopkgtest
#              (the regress suite) and the demo on it, and the upgrade from the previous
#              release's package with work in flight
# The last line of output is "N passed, M failed"; the exit status is non-zero if anything
# failed or could not run.
#
# What is counted: one test is one test file for regress, isolation, pgtap and tap (a script
# passes only if every assertion in it does), one test case for pytest and node, one run for the demo.
# A step or suite that cannot run at all (or whose runner fails with no failed test to show
# for it) counts as one failure.
#
# Environment: DEX_SKIP_DEPS=1 skips test/deps.sh; DEX_PYTHON is the interpreter for pytest
# (default /usr/bin/python3, which has the Debian psycopg and pytest), DEX_PYTEST_FILES the files it
# runs (default all of tests/, e.g. "tests/test_flow.py tests/test_cache.py"), DEX_NODE_TESTS those
# of node (e.g. "dist/test/worker.test.js"); DEX_SUITES=regress,tap runs
# only those suites and DEX_TAP_TESTS="t/009_upgrade.pl t/021_many_queues.pl" only those TAP tests
# (while working on them; the suites left out count as skipped); see test/lib.sh for the rest.
# shellcheck disable=SC2317 # suite_* are called through run_suite
set -euo pipefail
shopt -s nullglob

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh
source "$here/lib.sh"

passed=0 failed=0
summary=()

# record SUITE PASSED FAILED [NOTE]
record() {
  passed=$((passed + $2)) failed=$((failed + $3))
  summary+=("$(printf '%-10s %4d passed, %4d failed%s' "$1" "$2" "$3" "${4:+  ($4)}")")
  echo "$DEX_PROG: $1: $2 passed, $3 failed${4:+ ($4)}"
}

skip() { echo "$DEX_PROG: $1: skipped ($2)"; summary+=("$(printf '%-10s skipped (%s)' "$1" "$2")"); }

finish() {
  local status=0 line
  ((failed == 0)) || status=1
  echo "$DEX_PROG: summary"
  for line in "${summary[@]}"; do echo "  $line"; done
  dex_cleanup "$status"   # on failure: the server log's tail, and where the scratch dir is
  echo "$passed passed, $failed failed"
  exit "$status"
}

# step NAME CMD...: a prerequisite; if it fails nothing else can run.
step() {
  local name=$1; shift
  "$@" && return 0
  record "$name" 0 1 "could not run"
  finish
}

# run_logged SUITE DIR CMD...: run CMD in DIR as the test user, showing its output and keeping
# it in $out for counting. Sets rc.
run_logged() {
  local suite=$1 dir=$2; shift 2
  out=$DEX_SCRATCH/$suite.out
  echo "$DEX_PROG: $suite: $*"
  rc=0
  dex_run_in "$dir" "$@" 2>&1 | tee "$out" || rc=$?
}

# settle SUITE PASSED FAILED: record, counting a failed runner with no failed test as one failure.
settle() {
  if ((rc != 0 && $3 == 0)); then
    record "$1" "$2" 1 "runner exited with status $rc"
  else
    record "$1" "$2" "$3"
  fi
}

# pg_regress and pg_isolation_regress print one line per test: "test NAME ... ok|FAILED".
count_regress() {
  settle "$1" "$(grep -cE '\.\.\. +ok( |$)' "$out" || true)" \
    "$(grep -cE '\.\.\. +(FAILED|failed)' "$out" || true)"
}

# prove and pg_prove print "FILE .. ok" per passing file, and list each failing file once in
# the summary report as "FILE (Wstat: ...)".
count_prove() {
  settle "$1" "$(grep -cE '^[^ #]+ \.+ ok( |$)' "$out" || true)" "$(prove_failed | wc -l)"
}

prove_failed() { grep -E '^[^ #]+ +\(Wstat: ' "$out" | awk '{print $1}' | sort -u; }

show_diffs() {
  [[ -s $1 ]] || return 0
  echo "----- $1 (first 1000 lines) -----"
  head -n 1000 "$1"
  echo "-----"
}

# The value of a variable of the Makefile, as make sees it (continuation lines, +=, ...).
make_var() {
  # shellcheck disable=SC2016 # $($*) is for make
  printf 'dex-print-%%:\n\t@echo $($*)\n' |
    make -s --no-print-directory -C "$DEX_ROOT" -f Makefile -f - PG_CONFIG="$PG_CONFIG" "dex-print-$1"
}

# The layering of src/ (test/layers.py): one test, over the object files the build left in
# the source tree (the test copy leaves them out).
suite_layers() {
  # not "passed" and "failed": record adds to those, and locals of that name would hide them
  local ok=0 bad=0
  run_logged layers "$DEX_SRC" python3 test/layers.py "$DEX_ROOT/src"
  if ((rc == 0)); then ((ok += 1)); else ((bad += 1)); fi
  # the manual's links and paths (test/docs.py)
  run_logged docs "$DEX_SRC" python3 test/docs.py "$DEX_ROOT"
  if ((rc == 0)); then ((ok += 1)); else ((bad += 1)); fi
  # the packaging's versions are dex.control's (test/packaging.py)
  run_logged packaging "$DEX_SRC" python3 test/packaging.py "$DEX_ROOT"
  if ((rc == 0)); then ((ok += 1)); else ((bad += 1)); fi
  record layers "$ok" "$bad"
}

# pg_regress_suite SUITE RUNNER VAR: RUNNER (pg_regress, pg_isolation_regress) over the tests
# the Makefile declares for PGXS in VAR with the options in VAR_OPTS (REGRESS, ISOLATION), as
# "make installcheck" runs them, but in the database of the throwaway cluster.
pg_regress_suite() {
  local suite=$1 runner=$2 var=$3 tests all_opts opts=() o outdir=$DEX_SCRATCH/$1
  if ! tests=$(make_var "$var") || ! all_opts=$(make_var "${var}_OPTS"); then
    record "$suite" 0 1 "could not read $var from the Makefile"; return
  fi
  [[ -n $tests ]] || { skip "$suite" "$var is empty"; return; }
  # PGXS adds --dbname=<its test database>; the tests run in the database dex serves.
  for o in $all_opts; do [[ $o == --dbname=* ]] || opts+=("$o"); done
  dex_as_user mkdir -p "$outdir"
  # --use-existing: the database dex_start_cluster made, which dex has served from the start;
  # the setup test creates the extension, and the isolation specs run after it. VAR_OPTS may
  # name another --inputdir, relative to the tree as for make.
  # shellcheck disable=SC2086 # a word list from the Makefile
  run_logged "$suite" "$DEX_SRC" "$runner" --bindir="$PG_BINDIR" --inputdir="$DEX_SRC" \
    --outputdir="$outdir" --use-existing --dbname="$DEX_DATABASE" \
    --host="$DEX_SOCKDIR" --port="$DEX_TEST_PORT" "${opts[@]}" $tests
  show_diffs "$outdir/regression.diffs"
  count_regress "$suite"
}

suite_regress() { pg_regress_suite regress "$PG_REGRESS" REGRESS; }

# Later suites need the extension in the test database even if the regress suite did not
# leave it there.
ensure_extension() {
  local avail
  avail=$(dex_psql -At -c "SELECT count(*) FROM pg_available_extensions WHERE name = 'dex'") || return 0
  if [[ $avail != 1 ]]; then
    echo "$DEX_PROG: extension dex is not installed; the other suites run without it"
    return 0
  fi
  dex_psql -c 'SET client_min_messages = warning' -c 'CREATE EXTENSION IF NOT EXISTS dex' ||
    echo "$DEX_PROG: CREATE EXTENSION dex failed in $DEX_DATABASE"
}

suite_isolation() { pg_regress_suite isolation "$PG_ISOLATION_REGRESS" ISOLATION; }

suite_pgtap() {
  local files=("$DEX_SRC"/test/pgtap/*.sql) avail
  ((${#files[@]})) || { skip pgtap "no test/pgtap/*.sql"; return; }
  avail=$(dex_psql -At -c "SELECT count(*) FROM pg_available_extensions WHERE name = 'pgtap'") || avail=0
  [[ $avail == 1 ]] || { record pgtap 0 1 "extension pgtap is not installed"; return; }
  run_logged pgtap "$DEX_SRC" pg_prove --psql-bin "$PG_BINDIR/psql" --host "$DEX_SOCKDIR" \
    --port "$DEX_TEST_PORT" --dbname "$DEX_DATABASE" --username "$DEX_TEST_USER" \
    "${files[@]#"$DEX_SRC"/}"
  count_prove pgtap
}

suite_tap() {
  local files=("$DEX_SRC"/test/t/*.pl) f logdir=$DEX_SCRATCH/tap/tmp_check/log
  [[ -z ${DEX_TAP_TESTS:-} ]] || read -r -a files <<<"${DEX_TAP_TESTS//t\//$DEX_SRC/test/t/}"
  ((${#files[@]})) || { skip tap "no test/t/*.pl"; return; }
  dex_as_user mkdir -p "$DEX_SCRATCH/tap"
  # What PGXS's prove_installcheck sets: TESTDIR (tmp_check goes there), PG_REGRESS (used for
  # --config-auth), PATH with the PostgreSQL bindir first (dex_run_in does that). The
  # clusters the tests make load dex from where it is installed.
  run_logged tap "$DEX_SRC/test" env TESTDIR="$DEX_SCRATCH/tap" PG_REGRESS="$PG_REGRESS" \
    PERL5LIB="$PG_PERL_LIB${PERL5LIB:+:$PERL5LIB}" \
    prove -I "$PG_PERL_LIB" -I . "${files[@]#"$DEX_SRC"/test/}"
  # Each test's own log holds what its clusters and commands said.
  while read -r f; do
    f=$logdir/regress_log_$(basename "$f" .pl)
    if [[ -s $f ]]; then echo "----- last 60 lines of $f -----"; tail -n 60 "$f"; echo "-----"; fi
  done < <(prove_failed)
  count_prove tap
}

suite_pytest() {
  local dir=$DEX_SRC/clients/python py=${DEX_PYTHON:-/usr/bin/python3} line
  [[ -d $dir/tests ]] || { skip pytest "no clients/python/tests"; return; }
  # From clients/python, so the client package there is importable; PG* point at our cluster.
  run_logged pytest "$dir" env PYTHONDONTWRITEBYTECODE=1 \
    "$py" -m pytest -q -p no:cacheprovider ${DEX_PYTEST_FILES:-tests}
  ((rc != 5)) || { skip pytest "no tests collected"; return; }
  # Summary line: "2 failed, 5 passed, 1 skipped in 1.2s"; errors count as failures.
  line=$(grep -E '[0-9]+ (passed|failed|errors?)([ ,]|$)' "$out" | tail -n 1 || true)
  settle pytest "$(pytest_count passed)" "$(($(pytest_count failed) + $(pytest_count 'errors?')))"
}

pytest_count() {
  grep -oE "[0-9]+ $1([ ,]|\$)" <<<"$line" | grep -oE '^[0-9]+' || echo 0
}

# The TypeScript client's tests: built with its tsc, run by node's test runner (TAP), which
# ends with "# pass N" and "# fail M". DEX_PGDATA, DEX_LOG and PG_BINDIR let a test restart the
# cluster; DEX_PYTHON runs the Python client in the interoperability tests.
suite_node() {
  local dir=$DEX_SRC/clients/typescript
  [[ -f $dir/package.json ]] || { skip node "no clients/typescript"; return; }
  [[ -d $dir/node_modules ]] || { record node 0 1 "no clients/typescript/node_modules (test/deps.sh installs it)"; return; }
  run_logged node "$dir" env TMPDIR="$DEX_SCRATCH" DEX_PGDATA="$DEX_PGDATA" DEX_LOG="$DEX_LOG" PG_BINDIR="$PG_BINDIR" \
    DEX_PYTHON="${DEX_PYTHON:-/usr/bin/python3}" sh -c 'node_modules/.bin/tsc -p . &&
      node_modules/.bin/tsc -p ../../examples/typescript && node --test --test-concurrency=1 --test-reporter=tap ${DEX_NODE_TESTS:-dist/test/*.test.js}'
  settle node "$(tap_count pass)" "$(tap_count fail)"
}

tap_count() {
  grep -E "^# $1 [0-9]+\$" "$out" | tail -n 1 | grep -oE '[0-9]+' || echo 0
}

suite_demo() {
  [[ -f $DEX_ROOT/test/demo.sh ]] || { skip demo "no test/demo.sh"; return; }
  out=$DEX_SCRATCH/demo.out
  echo "$DEX_PROG: demo: bash test/demo.sh"
  rc=0
  # Already installed and built; the demo makes its own cluster and scratch directory.
  (cd "$DEX_ROOT" && env -u PGHOST -u PGPORT -u PGDATABASE -u PGUSER DEX_SKIP_DEPS=1 \
    DEX_SKIP_BUILD=1 timeout 900 bash test/demo.sh) 2>&1 | tee "$out" || rc=$?
  if ((rc == 0)); then record demo 1 0; else record demo 0 1 "exit status $rc"; fi
}

# One test per fuzz target, passed when it found nothing in its time (no cluster needed; built
# and run in the scratch directory, where a reproducer stays when one is found).
suite_fuzz() {
  out=$DEX_SCRATCH/fuzz.out
  echo "$DEX_PROG: fuzz: bash test/fuzz/run.sh"
  rc=0
  (cd "$DEX_ROOT" && env DEX_FUZZ_OUT="$DEX_SCRATCH/fuzz" PG_CONFIG="$PG_CONFIG" \
    bash test/fuzz/run.sh) 2>&1 | tee "$out" || rc=$?
  settle fuzz "$(grep -cE '^fuzz target [a-z]+: passed' "$out" || true)" \
    "$(grep -cE '^fuzz target [a-z]+: FAILED' "$out" || true)"
}

# The Debian package (test/deb.sh, its own clusters and scratch directory): one test per line
# "deb test NAME: passed|FAILED". It needs root, as installing the package does.
suite_deb() {
  ((EUID == 0)) || { record deb 0 1 "needs root to install the package"; return; }
  out=$DEX_SCRATCH/deb.out
  echo "$DEX_PROG: deb: bash test/deb.sh"
  rc=0
  (cd "$DEX_ROOT" && env -u PGHOST -u PGPORT -u PGDATABASE -u PGUSER PG_CONFIG="$PG_CONFIG" \
    timeout 1800 bash test/deb.sh) 2>&1 | tee "$out" || rc=$?
  settle deb "$(grep -cE '^deb test [a-z]+: passed' "$out" || true)" \
    "$(grep -cE '^deb test [a-z]+: FAILED' "$out" || true)"
}

if [[ ${DEX_SKIP_DEPS:-0} != 1 ]]; then
  step deps bash "$here/deps.sh"
fi
step build dex_build
step cluster dex_copy_tree
step cluster dex_start_cluster

# run_suite NAME: a suite never stops the others; a bug in its own plumbing counts as a failure.
run_suite() {
  if [[ -n ${DEX_SUITES:-} && ,$DEX_SUITES, != *,$1,* ]]; then
    skip "$1" "not in DEX_SUITES"
    return
  fi
  "suite_$1" || record "$1" 0 1 "harness error, status $?"
}

run_suite layers
run_suite regress
ensure_extension || true
run_suite isolation
run_suite pgtap
run_suite tap
run_suite pytest
run_suite node
dex_stop_cluster   # the demo runs its own
run_suite demo
run_suite fuzz
run_suite deb
finish
