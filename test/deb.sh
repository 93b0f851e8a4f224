#!/usr/bin/env bash
# The Debian package (debian/) as a user meets it: test/run-tests.sh's deb suite, last. Six
# tests, each printed as "deb test NAME: passed" or "deb test NAME: FAILED (why)":
#   build    dpkg-buildpackage -us -uc -b of a copy of the tree (the files git would commit), and
#            of the previous release (the last commit whose dex.control has the version before
#            this one, from git archive, with this tree's debian/ and a changelog entry for that
#            version); postgresql-15-dex depends on postgresql-15 and libprotobuf-c1 and on
#            nothing of the build toolchain
#   lintian  no error on the packages (their warnings are printed; docs/installing.md says which
#            are expected)
#   install  after saving and removing what "make install" put into the system PostgreSQL,
#            apt-get install ./postgresql-15-dex_*.deb ./dex-tools_*.deb; dpkg -L puts the files
#            where pg_config says PostgreSQL looks, and the SDK imports from the system
#   autopkgtest  debian/tests/installcheck with the packages installed, as autopkgtest runs it:
#            make installcheck's regression suite on a throwaway server (pg_virtualenv)
#   demo     a cluster with shared_preload_libraries = 'dex', CREATE EXTENSION dex at this
#            version, and examples/demo.py with the packaged SDK (a copy of examples/ alone)
#   upgrade  the previous release's packages installed, the extension created at that version,
#            runs left in flight (an activity and a workflow task leased, a timer pending, a wait
#            for an event, a run not yet polled); apt-get install of this release's packages over
#            them, a restart, ALTER EXTENSION dex UPDATE; every run then completes
# However it exits, it purges the packages and puts back the files it saved, leaving the system
# PostgreSQL as it found it.
#
# Needs root (apt-get, dpkg) and the packages test/deps.sh installs (debhelper, dh-python,
# postgresql-server-dev-all, lintian). It installs into the system PostgreSQL 15, like
# "make install": where several people run tests on one machine, serialise whole runs (for
# instance flock /tmp/dex-system.lock bash test/run-tests.sh). Builds use
# DEB_BUILD_OPTIONS="parallel=2 nocheck". Settings of test/lib.sh apply (DEX_TEST_PORT,
# DEX_KEEP_SCRATCH, PG_CONFIG: the server version whose package is tested, 15 by default).
set -uo pipefail
shopt -s nullglob

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=test/lib.sh disable=SC2034 # DEX_* are lib.sh's settings
source "$here/lib.sh"

pg_major=$("$PG_CONFIG" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
PACKAGE=postgresql-$pg_major-dex
TOOLS=dex-tools
failures=0
saved=0              # 1 once the files of make install are saved (and then removed)
built=0 built_old=0  # 1 once the packages of this release (of the previous one) are built
installed=0          # 1 once this release's packages are installed and checked

# result NAME STATUS [WHY]: one test's line, which test/run-tests.sh counts.
result() {
  if [[ $2 == 0 ]]; then
    echo "deb test $1: passed"
  else
    echo "deb test $1: FAILED${3:+ ($3)}"
    failures=$((failures + 1))
  fi
}

say() { echo "$DEX_PROG: $*"; }

# apt-get, waiting a while for the package database's lock if another run holds it
apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=300 --no-install-recommends "$@"
}
purge() {
  local p present=()
  for p in "$@"; do
    case $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) in
      '' | not-installed) ;;
      *) present+=("$p") ;;
    esac
  done
  ((${#present[@]} == 0)) || apt_get purge "${present[@]}" >/dev/null
}

git_root() { git -c safe.directory='*' -C "$DEX_ROOT" "$@"; }

version_of() { sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" "$1"; }

# ---- the files of make install: saved before the packages go in, put back however we leave ----

pkglibdir=$("$PG_CONFIG" --pkglibdir)
extdir=$("$PG_CONFIG" --sharedir)/extension

# The files "make install" leaves (as paths relative to /), whichever release they came from.
installed_by_make() {
  local f
  for f in "$pkglibdir"/dex.so "$pkglibdir"/bitcode/dex.index.bc "$pkglibdir"/bitcode/dex \
           "$extdir"/dex.control "$extdir"/dex--*.sql; do
    [[ -e $f ]] && echo "${f#/}"
  done
}

save_make_install() {
  local list=$DEX_SCRATCH/saved.list
  installed_by_make >"$list"
  tar -C / -cpf "$DEX_SCRATCH/saved.tar" -T "$list" || return 1
  saved=1
  say "saved $(wc -l <"$list") files of make install in $DEX_SCRATCH/saved.tar"
  # shellcheck disable=SC2046 # one path a line, none with spaces
  (cd / && rm -rf $(cat "$list"))
}

restore_make_install() {
  ((saved)) || return 0
  saved=0
  purge "$PACKAGE" "$TOOLS" || say "could not purge $PACKAGE and $TOOLS"
  # anything left of a package or a half-done step, then what was there before
  # shellcheck disable=SC2046
  (cd / && rm -rf $(installed_by_make))
  if tar -C / -xpf "$DEX_SCRATCH/saved.tar"; then
    say "put back the $(wc -l <"$DEX_SCRATCH/saved.list") files of make install"
  else
    say "could not put back the files of make install: they are in $DEX_SCRATCH/saved.tar"
    DEX_KEEP_SCRATCH=1
  fi
}

leave() {
  local status=$1
  dex_stop_cluster
  restore_make_install
  ((failures == 0)) || status=1
  dex_cleanup "$status"
  exit "$status"
}

# ---- build ----

# copy_tree DST: the files git would commit (tracked and new, not ignored), as they are now.
# shellcheck disable=SC2016 # $1 is for sh
copy_tree() {
  mkdir -p "$1" &&
    git_root ls-files -z -co --exclude-standard |
    (cd "$DEX_ROOT" && xargs -0 -I{} sh -c '[ -e "$1" ] && printf "%s\0" "$1"' _ {}) |
    tar -C "$DEX_ROOT" --null -T - -cf - | tar -C "$1" -xf -
}

# dpkg_build DIR LOG: the binary packages of the source tree DIR, into DIR/..
dpkg_build() {
  say "dpkg-buildpackage in $1 (log $2)"
  (cd "$1" && DEB_BUILD_OPTIONS="parallel=2 nocheck" DEB_BUILD_PROFILES=nocheck \
    timeout 900 dpkg-buildpackage -us -uc -b) >"$2" 2>&1 && return 0
  tail -n 40 "$2"
  return 1
}

check_depends() {
  local deb depends
  deb=$(echo "$DEX_SCRATCH"/deb/new/"$PACKAGE"_*_amd64.deb)
  depends=$(dpkg-deb -f "$deb" Depends) || return 1
  say "$PACKAGE depends on: $depends"
  [[ $depends == *libprotobuf-c1* && $depends == *postgresql-$pg_major* ]] ||
    { say "$PACKAGE should depend on libprotobuf-c1 and postgresql-$pg_major"; return 1; }
  if grep -qE -- '-dev\b|gcc|protobuf-c-compiler|build-essential|\bmake\b' <<<"$depends"; then
    say "$PACKAGE depends on the build toolchain"; return 1
  fi
}

test_build() {
  local cur prev intro commit new=$DEX_SCRATCH/deb/new old=$DEX_SCRATCH/deb/old
  cur=$(version_of "$DEX_ROOT/dex.control")
  copy_tree "$new/postgresql-dex-$cur" || { result build 1 "could not copy the tree"; return; }
  dpkg_build "$new/postgresql-dex-$cur" "$DEX_SCRATCH/build-new.log" ||
    { result build 1 "dpkg-buildpackage failed"; return; }
  built=1
  ls -l "$new"/*.deb
  check_depends || { result build 1 "wrong dependencies"; return; }

  # The previous release: the commit before the one that made default_version this version
  # (HEAD, when the new version is not committed yet).
  if [[ $(git_root rev-parse --is-shallow-repository 2>/dev/null) == true ]]; then
    result build 1 "a shallow clone has not the previous release (git fetch --unshallow)"; return
  fi
  intro=$(git_root log --format=%H --reverse -S"default_version = '$cur'" -- dex.control | head -n 1)
  if [[ -n $intro ]]; then
    commit=$(git_root rev-parse "$intro^") || { result build 1 "no commit before $intro"; return; }
  else
    commit=$(git_root rev-parse HEAD) || { result build 1 "no git history in $DEX_ROOT"; return; }
  fi
  prev=$(git_root show "$commit:dex.control" | version_of /dev/stdin)
  [[ -n $prev && $prev != "$cur" ]] || { result build 1 "no release before $cur at $commit"; return; }
  say "previous release: $prev, commit $(git_root log -1 --format='%h %s' "$commit")"
  if ! { mkdir -p "$old" && git_root archive --prefix="postgresql-dex-$prev/" "$commit" | tar -C "$old" -xf -; }; then
    result build 1 "git archive of $commit failed"; return
  fi
  # this release's packaging, with a changelog entry for that version
  if ! { rm -rf "$old/postgresql-dex-$prev/debian" && cp -r "$new/postgresql-dex-$cur/debian" "$old/postgresql-dex-$prev/"; }; then
    result build 1 "could not copy debian/"; return
  fi
  cat >"$old/postgresql-dex-$prev/debian/changelog" <<EOF
postgresql-dex ($prev-1) unstable; urgency=medium

  * dex $prev (commit $commit), packaged by test/deb.sh with the packaging
    of $cur to test the upgrade.

 -- $(dpkg-parsechangelog -l "$new/postgresql-dex-$cur/debian/changelog" -S Maintainer)  $(date -R)
EOF
  dpkg_build "$old/postgresql-dex-$prev" "$DEX_SCRATCH/build-old.log" ||
    { result build 1 "dpkg-buildpackage of $prev failed"; return; }
  built_old=1
  PREV=$prev CUR=$cur
  result build 0
}

# ---- lintian ----

test_lintian() {
  ((built)) || { result lintian 1 "not run: no package"; return; }
  local changes log=$DEX_SCRATCH/lintian.out rc=0
  changes=$(echo "$DEX_SCRATCH"/deb/new/*.changes)
  # as the test user: lintian warns when it runs as root
  dex_as_user lintian --fail-on error "$changes" >"$log" 2>&1 || rc=$?
  say "lintian: $(grep -c '^E:' "$log") errors, $(grep -c '^W:' "$log") warnings"
  cat "$log"
  result lintian "$rc" "lintian exited with $rc"
}

# ---- install ----

# make_var VAR: a variable of the Makefile, as make sees it
make_var() {
  # shellcheck disable=SC2016 # $($*) is for make
  printf 'dex-print-%%:\n\t@echo $($*)\n' |
    make -s --no-print-directory -C "$DEX_ROOT" -f Makefile -f - PG_CONFIG="$PG_CONFIG" "dex-print-$1"
}

check_installed_files() {
  local want have f missing=0 data
  data=$(make_var DATA) || return 1
  want=$( { echo "$pkglibdir/dex.so"; echo "$extdir/dex.control"
            for f in $data; do echo "$extdir/$(basename "$f")"; done; } | sort)
  have=$(dpkg -L "$PACKAGE" | grep -E "^($pkglibdir|$extdir)/[^/]+\$" | sort)
  if [[ $want != "$have" ]]; then
    say "dpkg -L $PACKAGE differs from what PostgreSQL should find (-want +have):"
    diff <(echo "$want") <(echo "$have")
    return 1
  fi
  for f in $want; do [[ -f $f ]] || { say "missing $f"; missing=1; }; done
  # nothing outside the server's directories and the package's documentation
  if dpkg -L "$PACKAGE" | grep -vE "^(/\.|/usr|/usr/lib|/usr/lib/postgresql|/usr/lib/postgresql/$pg_major|$pkglibdir(/.*)?|/usr/share|/usr/share/postgresql|/usr/share/postgresql/$pg_major|$extdir(/.*)?|/usr/share/doc(/$PACKAGE(/.*)?)?)\$"; then
    say "$PACKAGE installs the files above elsewhere"; missing=1
  fi
  for f in /usr/lib/python3/dist-packages/dex/__init__.py /usr/share/dex/prometheus/dex-queries.yaml; do
    dpkg -L "$TOOLS" | grep -qx "$f" || { say "$TOOLS does not install $f"; missing=1; }
  done
  return "$missing"
}

test_install() {
  ((built)) || { result install 1 "not run: no package"; return; }
  local st
  for st in "$PACKAGE" "$TOOLS"; do
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$st" 2>/dev/null) != installed ]] ||
      { result install 1 "$st is already installed: not touching it"; return; }
  done
  save_make_install || { result install 1 "could not save the files of make install"; return; }
  [[ -z $(installed_by_make) ]] || { result install 1 "could not remove the files of make install"; return; }
  say "apt-get install ./$PACKAGE ./$TOOLS"
  (cd "$DEX_SCRATCH/deb/new" && apt_get install ./"$PACKAGE"_*_amd64.deb ./"$TOOLS"_*_all.deb) ||
    { result install 1 "apt-get install failed"; return; }
  check_installed_files || { result install 1 "files not where PostgreSQL looks"; return; }
  local version
  version=$(dex_run_in / /usr/bin/python3 -c 'import dex; print(dex.__file__, dex.__version__)') ||
    { result install 1 "the packaged SDK does not import"; return; }
  say "python3: dex is $version"
  [[ $version == "/usr/lib/python3/dist-packages/dex/__init__.py $CUR" ]] ||
    { result install 1 "python3 imports dex from elsewhere or at another version"; return; }
  dex_run_in / /usr/bin/python3 -m dex --help >/dev/null || { result install 1 "python3 -m dex --help failed"; return; }
  installed=1
  result install 0
}

# ---- autopkgtest ----

# debian/tests/installcheck, as autopkgtest runs it: from the top of the source tree, with the
# packages installed (make installcheck's regression suite under pg_virtualenv).
test_autopkgtest() {
  ((installed)) || { result autopkgtest 1 "not run: the package is not installed"; return; }
  local tree log=$DEX_SCRATCH/autopkgtest.out rc=0
  tree=$(echo "$DEX_SCRATCH"/deb/new/postgresql-dex-*/)
  say "debian/tests/installcheck in $tree (log $log)"
  (cd "$tree" && timeout 900 debian/tests/installcheck) >"$log" 2>&1 || rc=$?
  grep -E '^(### |.*All [0-9]+ tests passed|.*[0-9]+ of [0-9]+ tests? failed)' "$log" || true
  ((rc == 0)) || tail -n 60 "$log"
  result autopkgtest "$rc" "debian/tests/installcheck exited with $rc"
}

# ---- demo ----

test_demo() {
  ((installed)) || { result demo 1 "not run: the package is not installed"; return; }
  DEX_DATABASE=dex_demo
  dex_start_cluster || { result demo 1 "the cluster did not start"; return; }
  local v
  v=$(dex_psql -At -c 'CREATE EXTENSION dex' -c "SELECT extversion FROM pg_extension WHERE extname = 'dex'") ||
    { result demo 1 "CREATE EXTENSION dex failed"; return; }
  [[ $v == "$CUR" ]] || { result demo 1 "CREATE EXTENSION dex made $v, not $CUR"; return; }
  # examples/ alone: demo.py's path to clients/python leads nowhere, and dex is the package's
  if ! { mkdir -p "$DEX_SCRATCH/user" && cp -r "$DEX_ROOT/examples" "$DEX_SCRATCH/user/" &&
          rm -rf "$DEX_SCRATCH/user/examples/typescript" && chown -R "$DEX_TEST_USER": "$DEX_SCRATCH/user"; }; then
    result demo 1 "could not copy examples/"; return
  fi
  say "examples/demo.py with the packaged SDK"
  dex_run_in "$DEX_SCRATCH/user/examples" env PYTHONDONTWRITEBYTECODE=1 TMPDIR="$DEX_SCRATCH" \
    timeout 600 /usr/bin/python3 -u demo.py || { result demo 1 "demo.py failed"; return; }
  dex_stop_cluster
  result demo 0
}

# ---- upgrade ----

# runs the five runs the upgrade leaves in flight are in
IN_FLIGHT="SELECT string_agg(instance_id || ':' || status, ' ' ORDER BY instance_id)
             FROM dex.workflow_run WHERE workflow_name = 'deb-upgrade'"

start_work() {
  dex_psql -c "CREATE EXTENSION dex VERSION '$PREV'" -c "
    SELECT dex.create_queue('wf', 'workflow');
    SELECT dex.create_queue('act', 'activity');
    CREATE TABLE lease (instance_id text, run_id uuid, task_id int, lock_version bigint);
    -- A: its activity is leased; B: a timer is pending; C: waits for an event
    SELECT dex.create_run('deb-upgrade', 'wf', instance_id => 'A');
    SELECT dex.create_run('deb-upgrade', 'wf', instance_id => 'B');
    SELECT dex.create_run('deb-upgrade', 'wf', instance_id => 'C');
    SELECT dex.complete_task(t.run_id, 0, t.lock_version,
             CASE r.instance_id
               WHEN 'A' THEN '[{\"id\": 1, \"scheduleActivity\": {\"name\": \"charge\", \"queue\": \"act\"}}]'::jsonb
               WHEN 'B' THEN '[{\"id\": 1, \"startTimer\": {\"delay\": \"5s\"}}]'::jsonb
               ELSE '[{\"id\": 1, \"waitExternalEvent\": {\"eventId\": \"go\", \"timeout\": \"3600s\"}}]'::jsonb END)
      FROM dex.poll_tasks('wf', 'w', 10) t JOIN dex.workflow_run r ON r.id = t.run_id;
    INSERT INTO lease SELECT 'A', run_id, task_id, lock_version FROM dex.poll_tasks('act', 'w');
    -- D: its workflow task is leased; E: not polled yet
    SELECT dex.create_run('deb-upgrade', 'wf', instance_id => 'D');
    INSERT INTO lease SELECT 'D', run_id, task_id, lock_version FROM dex.poll_tasks('wf', 'w', 10);
    SELECT dex.create_run('deb-upgrade', 'wf', instance_id => 'E');" >/dev/null
}

finish_work() {
  dex_psql -c "
    SELECT dex.complete_task(run_id, task_id, lock_version, '\"charged\"') FROM lease WHERE instance_id = 'A';
    SELECT dex.complete_task(run_id, 0, lock_version, '[{\"completeRun\": {}}]') FROM lease WHERE instance_id = 'D';
    SELECT dex.send_external_event_to_instance('C', 'go', '\"now\"');" >/dev/null || return 1
  # A (its activity done), B (its timer fired), C (its event came) and E: a workflow task each
  local i n
  for ((i = 0; i < 120; i++)); do
    n=$(dex_psql -At -c "SELECT count(*) FROM dex.workflow_task t JOIN dex.workflow_run r ON r.id = t.run_id
                          WHERE r.workflow_name = 'deb-upgrade'") || return 1
    [[ $n == 4 ]] && break
    sleep 0.5
  done
  [[ $n == 4 ]] || { say "$n runs of 4 have a workflow task"; return 1; }
  dex_psql -c "SELECT dex.complete_task(run_id, 0, lock_version, '[{\"completeRun\": {}}]')
                 FROM dex.poll_tasks('wf', 'w', 10)" >/dev/null
}

test_upgrade() {
  ((built_old && installed)) || { result upgrade 1 "not run: no packages"; return; }
  local v runs
  dex_stop_cluster   # the demo's, if it stopped half-way
  say "apt-get install ./$PACKAGE ./$TOOLS of $PREV"
  if ! { purge "$PACKAGE" "$TOOLS" &&
          (cd "$DEX_SCRATCH/deb/old" && apt_get install ./"$PACKAGE"_*_amd64.deb ./"$TOOLS"_*_all.deb); }; then
    result upgrade 1 "could not install the packages of $PREV"; return
  fi
  DEX_DATABASE=dex_upgrade DEX_PGDATA=$DEX_SCRATCH/data-upgrade DEX_LOG=$DEX_SCRATCH/server-upgrade.log
  dex_start_cluster || { result upgrade 1 "the cluster did not start"; return; }
  start_work || { result upgrade 1 "could not leave work in flight under $PREV"; return; }
  v=$(dex_psql -At -c "SELECT extversion FROM pg_extension WHERE extname = 'dex'")
  say "under $v: $(dex_psql -At -c "$IN_FLIGHT"), $(dex_psql -At -c 'SELECT count(*) FROM lease') tasks leased"
  say "apt-get install ./$PACKAGE ./$TOOLS of $CUR over them"
  (cd "$DEX_SCRATCH/deb/new" && apt_get install ./"$PACKAGE"_*_amd64.deb ./"$TOOLS"_*_all.deb) ||
    { result upgrade 1 "apt-get install over $PREV failed"; return; }
  [[ $(dpkg-query -W -f='${Version}' "$PACKAGE") == "$CUR"-* ]] || { result upgrade 1 "$PACKAGE is not at $CUR"; return; }
  dex_as_user "$PG_BINDIR/pg_ctl" -D "$DEX_PGDATA" -l "$DEX_LOG" -m fast -w -t 60 restart >/dev/null ||
    { result upgrade 1 "the server did not restart"; return; }
  v=$(dex_psql -At -c 'ALTER EXTENSION dex UPDATE' -c "SELECT extversion FROM pg_extension WHERE extname = 'dex'") ||
    { result upgrade 1 "ALTER EXTENSION dex UPDATE failed"; return; }
  [[ $v == "$CUR" ]] || { result upgrade 1 "ALTER EXTENSION dex UPDATE made $v, not $CUR"; return; }
  finish_work || { result upgrade 1 "the work in flight did not finish"; return; }
  runs=$(dex_psql -At -c "$IN_FLIGHT")
  say "after the update to $v: $runs"
  [[ $runs == "A:COMPLETED B:COMPLETED C:COMPLETED D:COMPLETED E:COMPLETED" ]] ||
    { result upgrade 1 "not every run completed"; return; }
  dex_stop_cluster
  result upgrade 0
}

# ---- main ----

started=$SECONDS
((EUID == 0)) || dex_die "the deb suite installs packages: run it as root"
for tool in dpkg-buildpackage lintian pg_buildext dh git; do
  command -v "$tool" >/dev/null || dex_die "no $tool (test/deps.sh installs it)"
done
dex_scratch_init || dex_die "no scratch directory"
trap 'leave $?' EXIT
trap 'leave 130' INT
trap 'leave 143' TERM
PREV='' CUR=''

test_build
test_lintian
test_install
test_autopkgtest
test_demo
test_upgrade
say "$((SECONDS - started))s, $failures failed"
