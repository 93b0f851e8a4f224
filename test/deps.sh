#!/usr/bin/env bash
# Installs the Debian packages that building and testing dex need, if any are missing.
# Idempotent: when everything is installed it only asks dpkg and exits.
set -euo pipefail

prog=$(basename "$0")

packages=(
  build-essential
  postgresql-15
  postgresql-server-dev-15               # PGXS, server headers
  libkrb5-dev                            # gssapi.h, which the server header libpq/libpq-be.h includes
  libprotobuf-c-dev protobuf-c-compiler  # protobuf-c runtime and protoc-c
  libprotobuf-dev                        # google/protobuf/*.proto (well-known types)
  postgresql-15-pgtap
  libtap-parser-sourcehandler-pgtap-perl # pg_prove
  libipc-run-perl                        # PostgreSQL::Test::Cluster (TAP tests)
  python3 python3-psycopg python3-pytest # reference client tests
  python3-venv python3-pip               # docs/python.md's install of the Python SDK (tests/test_run_command.py)
  python3-fastapi python3-uvicorn python3-jinja2 python3-multipart  # python3 -m dex serve (REST API, dashboard)
  python3-grpcio python3-protobuf        # the gRPC API (python3 -m dex serve --grpc-port, dex grpc)
  protobuf-compiler                      # protoc: clients/python/gen_pb.sh, checked by tests/test_grpc_codegen.py
  chromium chromium-driver python3-selenium  # the dashboard's browser test (headless)
  pgbouncer                              # reference client tests behind a transaction pool
  postgresql-15-wal2json                 # test/t/025_publish.pl: a logical decoding consumer of published events
  prometheus prometheus-postgres-exporter  # test/t/015_prometheus.pl: the metrics end to end
  clang libclang-rt-14-dev               # fuzz suite: clang, libFuzzer and sanitizer runtimes
  nodejs                                 # the TypeScript client (clients/typescript): node 20 and npm
  debhelper dh-python postgresql-server-dev-all  # deb suite: dpkg-buildpackage of debian/ (pg_buildext)
  dpkg-dev lintian                       # deb suite: dpkg-buildpackage, and lintian on the packages
)

# clients/typescript's npm packages, pinned by its package-lock.json: npm ci when node_modules is
# missing or older than the lockfile.
node_deps() {
  local dir
  dir=$(cd "$(dirname "$0")/.." && pwd)/clients/typescript
  [[ -f $dir/package-lock.json ]] || return 0
  if ! command -v npm >/dev/null 2>&1; then
    echo "$prog: no npm: the packages of clients/typescript are not installed" >&2
    return 1
  fi
  if [[ ! -f $dir/node_modules/.package-lock.json || $dir/package-lock.json -nt $dir/node_modules/.package-lock.json ]]; then
    echo "$prog: npm ci in clients/typescript" >&2
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "$prog: no dpkg-query: not a Debian system, install these yourself: ${packages[*]}" >&2
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ $status == installed ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "$prog: all ${#packages[@]} packages present" >&2
  node_deps
  exit 0
fi

if ((EUID == 0)); then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "$prog: missing ${missing[*]}, and neither root nor sudo to install them" >&2
  exit 1
fi

echo "$prog: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}"
node_deps
