"""``python3 -m dex serve``: dex's REST API (``/v1``, OpenAPI at ``/openapi.json``) and web
dashboard (``/ui``) in one FastAPI application, served by uvicorn.

Every request runs with the PostgreSQL role of its API token (``db.py``); the server's own
login role only turns tokens into roles, and samples the queues for the charts
(``sampler.py``).  Errors are ``application/problem+json`` (RFC 7807) with dex's SQLSTATE
mapped to the HTTP status (``db.http_status``).  With ``--grpc-port`` the same process serves
the gRPC API (``grpc_api.py``) with the same pools."""

from __future__ import annotations

import json
import logging
from typing import Any, Dict, Optional

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from starlette.exceptions import HTTPException

from .. import __version__
from . import jsonio, reference, ui, ui_schedules
from .api import ProblemModel, router as api_router
from .db import Database, Problem, title
from .routing import Route
from .sampler import Sampler
from .schedules import router as schedules_router

log = logging.getLogger("dex.serve")


def problem_response(p: Problem) -> Response:
    headers = dict(p.headers or {})
    if p.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return Response(jsonio.dumps(p.document()), status_code=p.status, headers=headers,
                    media_type="application/problem+json")


def create_app(conninfo: str = "", *, pool_size: int = 10, sample_interval: float = 15.0,
               secret: bytes = b"") -> FastAPI:
    """The application.  ``conninfo``: the server's login role's libpq connection string;
    ``sample_interval``: seconds between samples of the queues; ``secret``: the key of the
    dashboard's CSRF tokens (random per process by default)."""
    app = FastAPI(title="dex", version=__version__,
                  description="REST API of dex, the durable execution engine inside PostgreSQL. "
                              "Every request runs as the database role of its API token "
                              "(Authorization: Bearer <token>, made with dex.create_api_token); "
                              "errors are application/problem+json.",
                  docs_url=None, redoc_url=None)
    app.router.route_class = Route
    app.state.db = Database(conninfo, size=pool_size)
    app.state.sampler = Sampler(app.state.db, sample_interval)
    ui.setup(app, secret)

    @app.on_event("startup")
    def _start() -> None:
        app.state.sampler.start()

    @app.on_event("shutdown")
    def _stop() -> None:
        app.state.sampler.stop()
        app.state.db.close()

    @app.exception_handler(Problem)
    def _problem(request: Request, p: Problem):
        if request.url.path.startswith("/ui"):
            return ui.problem_page(request, p)
        return problem_response(p)

    @app.exception_handler(HTTPException)
    def _http(request: Request, e: HTTPException):
        # Starlette's own: an unknown path (404), a method the path has not (405, with Allow)
        return _problem(request, Problem(e.status_code, title(e.status_code), str(e.detail),
                                         headers=e.headers))

    @app.exception_handler(RequestValidationError)
    def _invalid(request: Request, e: RequestValidationError):
        p = Problem(400, "Bad Request", "the request is not valid: " +
                    "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors()),
                    errors=json.loads(json.dumps(e.errors(), default=str)))
        if request.url.path.startswith("/ui"):
            return ui.problem_page(request, p)
        return problem_response(p)

    @app.exception_handler(Exception)
    def _bug(request: Request, e: Exception):
        log.exception("%s %s failed", request.method, request.url.path)
        return problem_response(Problem(500, title(500), f"{type(e).__name__}: {e}"))

    @app.get("/healthz", tags=["server"], summary="200 when the database answers, else 503",
             responses={503: {"description": "database unavailable"}})
    def healthz() -> Dict[str, Any]:
        with app.state.db.connection(timeout=5) as conn:
            try:
                conn.execute("SELECT 1")
            except psycopg.Error as e:
                raise Problem(503, title(503), f"the database is unavailable: {e}") from e
        return {"status": "ok"}

    @app.get("/", include_in_schema=False)
    def root():
        return RedirectResponse("/ui/runs")

    app.include_router(api_router)
    app.include_router(schedules_router)
    app.include_router(ui.router)
    app.include_router(ui_schedules.router)
    app.include_router(reference.router)
    _add_problem_schema(app)
    return app


def _add_problem_schema(app: FastAPI) -> None:
    base = app.openapi

    def openapi() -> Dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = base()
        doc.setdefault("components", {}).setdefault("schemas", {})["Problem"] = ProblemModel.schema()
        doc["components"]["securitySchemes"] = {"token": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"token": []}]
        # FastAPI's own 422 is answered as a 400 problem (see _invalid)
        for path in doc.get("paths", {}).values():
            for op in path.values():
                op.get("responses", {}).pop("422", None)
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


def openapi_document() -> str:
    """The OpenAPI document, as checked in (``clients/python/openapi.json``)."""
    return json.dumps(create_app().openapi(), indent=2, sort_keys=True) + "\n"


def serve(conninfo: str, host: str, port: int, grpc_port: Optional[int] = None, **kw: Any) -> None:
    """REST and the dashboard on ``host:port``; with ``grpc_port``, the gRPC API too
    (``grpc_api.py``), on uvicorn's event loop and with the same database pools."""
    import uvicorn
    app = create_app(conninfo, **kw)
    if grpc_port is not None:
        from . import grpc_api
        address = f"[{host}]:{grpc_port}" if ":" in host else f"{host}:{grpc_port}"

        @app.on_event("startup")
        async def _grpc_start() -> None:
            app.state.grpc, _ = await grpc_api.start(app.state.db, address)

        async def _grpc_stop() -> None:
            await grpc_api.stop(app.state.grpc)
        app.router.on_shutdown.insert(0, _grpc_stop)    # before the pools close
    uvicorn.run(app, host=host, port=port, log_level="info")
