#!/usr/bin/env bash
# Regenerates the seed part of the fuzz corpus (test/fuzz/corpus/*/seed-*) and the JSON
# dictionary (test/fuzz/json.dict) from test/fuzz/seeds.txt, with seedgen (seedgen.c).
# Other files in the corpus (regression inputs, regress-*) are left alone.
#
#   bash test/fuzz/gen-corpus.sh      after editing seeds.txt or the protocol
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
out=${DEX_FUZZ_OUT:-$here/build}

make -s -C "$root" fuzz-build PG_CONFIG="$PG_CONFIG" FUZZ_OUT="$out"
for t in json pb commands; do
  mkdir -p "$here/corpus/$t"
  rm -f "$here/corpus/$t"/seed-*
done
"$out/seedgen" "$here/seeds.txt" "$here/corpus" "$here/json.dict"
du -sh "$here/corpus"
