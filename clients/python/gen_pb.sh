#!/bin/sh
# Generates the Python modules of the gRPC API's messages from proto/ with protoc (Debian's
# protobuf-compiler, for Debian's python3-protobuf): dex/v1/*_pb2.py (the dex.v1 messages and
# DexService) and dex/serve/pb/*_pb2.py (gRPC's health and reflection services).  They are
# checked in, so that the server needs no protoc; tests/test_grpc_codegen.py fails when they differ
# from what this makes (run it again after changing a .proto file).
#   sh gen_pb.sh [OUTDIR]   (default: here)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=$(cd "${1:-$here}" && pwd)
proto=$here/../../proto
mkdir -p "$out/dex/v1" "$out/dex/serve/pb"
cd "$proto"
protoc -I . -I /usr/include --python_out="$out" dex/v1/*.proto
# named grpc/... in the descriptor pool, as reflection shows them; neither imports a file
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
protoc -I . --python_out="$tmp" grpc/health/v1/health.proto grpc/reflection/v1alpha/reflection.proto
mv "$tmp/grpc/health/v1/health_pb2.py" "$tmp/grpc/reflection/v1alpha/reflection_pb2.py" "$out/dex/serve/pb/"
