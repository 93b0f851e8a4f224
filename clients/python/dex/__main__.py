"""python3 -m dex worker|history|serve ... (or the `dex` command that pip installs): run a worker,
print a run's history, or serve the REST API and the dashboard."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from . import Client, DexError, DuplicateDefinition, Worker, __version__


def main(argv=None) -> int:
    # "dex" when run as the console script that pip installs, "python3 -m dex" otherwise.
    script = os.path.splitext(os.path.basename(sys.argv[0]))[0] if sys.argv else ""
    p = argparse.ArgumentParser(prog="dex" if script == "dex" else "python3 -m dex")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--conninfo", default="", help="libpq connection string (default: PG* variables)")
    pooled_help = ("the connections go through a pooler in transaction mode (PgBouncer): no "
                   "prepared statements; --no-pooled: a direct connection (default: turn them "
                   "off when a pooler is detected)")
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker", help="run a worker until SIGTERM / Ctrl-C")
    w.add_argument("modules", nargs="+", help="modules that define the workflows and activities")
    w.add_argument("-w", "--workflow-queue", action="append", default=[])
    w.add_argument("-a", "--activity-queue", action="append", default=[])
    w.add_argument("-c", "--concurrency", type=int, default=10)
    w.add_argument("--activity-lease", type=float, default=30.0)
    w.add_argument("--workflow-lease", type=float, default=10.0)
    w.add_argument("--shutdown-timeout", type=float, default=30.0)
    w.add_argument("--worker-id")
    w.add_argument("--wire", choices=["json", "protobuf"], default=None,
                   help="wire form of the task calls (default: the Worker's)")
    w.add_argument("--workflow-cache-size", type=int, default=1000,
                   help="runs whose workflow state is kept between tasks (0: replay every task)")
    w.add_argument("--pooled", action=argparse.BooleanOptionalAction, default=None,
                   help=pooled_help)
    h = sub.add_parser("history", help="print a run's history as a table")
    h.add_argument("run_id")
    h.add_argument("--pooled", action=argparse.BooleanOptionalAction, default=None,
                   help=pooled_help)
    s = sub.add_parser("serve", help="serve the REST API and the dashboard (needs python3-fastapi, "
                                     "python3-uvicorn, python3-jinja2)")
    s.add_argument("--listen", default="127.0.0.1:8080", help="address:port (default 127.0.0.1:8080)")
    s.add_argument("--pool-size", type=int, default=10, help="database connections at most")
    s.add_argument("--sample-interval", type=float, default=15.0,
                   help="seconds between samples of the queues for the charts")
    s.add_argument("--openapi", action="store_true", help="print the OpenAPI document and exit")
    s.add_argument("--grpc-port", type=int, default=None,
                   help="also serve the gRPC API (dex.v1.DexService, docs/grpc.md) on this port of "
                        "--listen's address (needs python3-grpcio, python3-protobuf)")
    g = sub.add_parser("grpc", help="serve the gRPC API alone (dex.v1.DexService, docs/grpc.md; needs "
                                    "python3-grpcio, python3-protobuf, python3-fastapi)")
    g.add_argument("--listen", default="127.0.0.1:50051", help="address:port (default 127.0.0.1:50051)")
    g.add_argument("--pool-size", type=int, default=10,
                   help="database connections for calls, and as many for long polls' waits")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.cmd == "serve":
        from . import serve
        if args.openapi:
            sys.stdout.write(serve.openapi_document())
            return 0
        host, _, port = args.listen.rpartition(":")
        serve.serve(args.conninfo, host.strip("[]") or "127.0.0.1", int(port),
                    pool_size=args.pool_size, sample_interval=args.sample_interval,
                    grpc_port=args.grpc_port)
    elif args.cmd == "grpc":
        from .serve import grpc_api
        host, _, port = args.listen.rpartition(":")
        grpc_api.serve(args.conninfo, host or "127.0.0.1", int(port), pool_size=args.pool_size)
    elif args.cmd == "worker":
        sys.path.insert(0, ".")
        try:
            for m in args.modules:
                importlib.import_module(m)
        except DuplicateDefinition as e:    # which two: all there is to say
            print(f"{p.prog} worker: {e}", file=sys.stderr)
            return 1
        worker = Worker(args.conninfo, args.workflow_queue, args.activity_queue,
                        args.concurrency, activity_lease=args.activity_lease,
                        workflow_lease=args.workflow_lease,
                        shutdown_timeout=args.shutdown_timeout, worker_id=args.worker_id,
                        wire=args.wire, workflow_cache_size=args.workflow_cache_size,
                        pooled=args.pooled)
        status = 0
        try:
            worker.run()
        except DexError as e:
            if e is not worker.error:
                raise
            status = 1          # it stopped by itself, and said why in its log
        if worker.stats["activities_abandoned"]:
            # their threads would keep the process until their code returns, for a result that
            # is discarded: their attempts are failed as retryable already
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        return status
    else:
        with Client(args.conninfo, pooled=args.pooled) as c:
            print(c.format_history(args.run_id))
    return 0


if __name__ == "__main__":
    sys.exit(main())
