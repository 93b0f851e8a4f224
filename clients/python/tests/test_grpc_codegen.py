"""The gRPC API's generated modules (dex/v1/*_pb2.py, dex/serve/pb/*_pb2.py) are what gen_pb.sh
makes from proto/ now, and its status table covers every SQLSTATE the REST API maps.  The API
itself is tested from node with @grpc/grpc-js (clients/typescript/test/grpc.test.ts)."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
PROTO = os.path.join(PKG, "..", "..", "proto")

grpc = pytest.importorskip("grpc")


@pytest.mark.skipif(not shutil.which("protoc") or not os.path.isdir(PROTO), reason="no protoc, or no proto/ next to the SDK")
def test_the_generated_modules_are_those_of_the_proto_files(tmp_path):
    subprocess.run(["sh", os.path.join(PKG, "gen_pb.sh"), str(tmp_path)], check=True)
    made = sorted(os.path.relpath(os.path.join(d, f), tmp_path)
                  for d, _, files in os.walk(tmp_path) for f in files if f.endswith("_pb2.py"))
    ours = sorted(os.path.relpath(os.path.join(d, f), PKG)
                  for sub in ("dex/v1", "dex/serve/pb")
                  for d, _, files in os.walk(os.path.join(PKG, sub)) for f in files if f.endswith("_pb2.py"))
    assert made == ours
    for f in made:
        assert filecmp.cmp(os.path.join(tmp_path, f), os.path.join(PKG, f), shallow=False), \
            f"{f} is stale: run sh clients/python/gen_pb.sh"


def test_every_sqlstate_of_rest_has_a_grpc_status():
    from dex.serve import db, grpc_api
    assert set(db._STATUS_BY_CODE) == set(grpc_api._CODE_BY_SQLSTATE)
    assert set(db._STATUS_BY_CLASS) == set(grpc_api._CODE_BY_CLASS)
    p = db.Problem(409, "Conflict", "lost", "WD001")
    assert grpc_api.grpc_code(p) == grpc.StatusCode.ABORTED
    assert grpc_api.grpc_code(db.Problem(503, "x", "busy")) == grpc.StatusCode.UNAVAILABLE
    assert grpc_api.grpc_code(db.Problem(500, "x", "?", "XX000")) == grpc.StatusCode.INTERNAL
