#!/usr/bin/env bash
# Builds the fuzz targets of the codec and of command validation (make fuzz-build) and runs
# each for a bounded time, starting from the corpus kept in test/fuzz/corpus/<target>. What the
# targets check is in fuzz_codec.c. Used by "make fuzz" and by the fuzz suite of test/run-tests.sh.
#
#   bash test/fuzz/run.sh [TARGET...]        default: pb json commands
#
# Environment:
#   DEX_FUZZ_SECONDS  seconds of fuzzing in all, shared equally by the targets (default 75)
#   DEX_FUZZ_OUT      build and work directory (default test/fuzz/build). New inputs a target
#                     finds go to $DEX_FUZZ_OUT/work/<target>/corpus (kept between runs, so a
#                     longer run builds on the last), crashes to $DEX_FUZZ_OUT/work/<target>/
#   DEX_FUZZ_ARGS     more libFuzzer options, e.g. "-jobs=2 -workers=2"
#   PG_CONFIG         pg_config of PostgreSQL 15
#
# Prints one line per target, "fuzz target T: passed (...)" or "fuzz target T: FAILED (...)"
# followed by the reproducer's path and how to replay it; the exit status is non-zero if any
# target failed or could not be built.
set -uo pipefail
shopt -s nullglob

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
out=${DEX_FUZZ_OUT:-$here/build}
seconds=${DEX_FUZZ_SECONDS:-75}
targets=("$@")
((${#targets[@]})) || targets=(pb json commands)

if ! command -v "${CLANG:-clang}" >/dev/null 2>&1; then
  echo "fuzz: no clang (test/deps.sh installs it)" >&2
  exit 1
fi
echo "fuzz: building the targets in $out"
if ! make -s -C "$root" fuzz-build PG_CONFIG="$PG_CONFIG" FUZZ_OUT="$out"; then
  echo "fuzz: the build failed" >&2
  exit 1
fi

per=$((seconds / ${#targets[@]}))
((per > 0)) || per=1
status=0
for t in "${targets[@]}"; do
  bin=$out/dex_fuzz_$t
  work=$out/work/$t
  log=$work/fuzz.log
  [[ -x $bin ]] || { echo "fuzz target $t: FAILED (no $bin)"; status=1; continue; }
  mkdir -p "$work/corpus" "$work/crashes"
  dict=()
  [[ $t == pb ]] || dict=(-dict="$here/json.dict")
  rm -f "$work/crashes"/*
  echo "fuzz: $t for ${per}s: $bin $work/corpus $here/corpus/$t"
  rc=0
  # shellcheck disable=SC2086 # DEX_FUZZ_ARGS is a word list
  "$bin" -max_total_time="$per" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/crashes/" "${dict[@]}" ${DEX_FUZZ_ARGS:-} \
    "$work/corpus" "$here/corpus/$t" >"$log" 2>&1 || rc=$?

  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  corpus=$(grep -oE 'corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" | tail -n 1 | cut -d' ' -f2)
  figures="${runs:-?} runs, ${speed:-?} exec/s, corpus ${corpus:-?}"
  # (slow-unit-* files are only a warning)
  crashes=("$work"/crashes/{crash,leak,timeout,oom}-*)
  if ((rc == 0 && ${#crashes[@]} == 0)); then
    echo "fuzz target $t: passed ($figures)"
    continue
  fi
  status=1
  echo "fuzz target $t: FAILED (exit status $rc; $figures)"
  echo "----- last 40 lines of $log -----"
  tail -n 40 "$log"
  echo "-----"
  for c in "${crashes[@]}"; do
    echo "fuzz target $t: reproducer $c"
    echo "  replay: DEX_FUZZ_VERBOSE=1 $bin $c"
  done
done
exit "$status"
