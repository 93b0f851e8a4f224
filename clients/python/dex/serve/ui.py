"""The web dashboard (``/ui``): runs, a run with its timeline and the actions its caller's
role allows, and queues with their charts.  Pages are rendered on the server (Jinja2) and
refresh their live parts by short polling of HTML fragments (``static/dex.js``); charts are
SVG drawn on the server (``svg.py``): nothing is fetched from elsewhere.

Signing in stores the API token in an HttpOnly, SameSite=Strict cookie; every request then
runs as the token's role, exactly as the API does.  Actions are forms that POST, each behind
a confirmation page and carrying a CSRF token (an HMAC of the API token)."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import os
import uuid
from urllib.parse import quote
from typing import Any, Dict, List, Optional

from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from psycopg.types.json import Jsonb

from . import jsonio, runs as R, svg
from .api import privileges
from .db import Problem
from .routing import Route

HERE = os.path.dirname(os.path.abspath(__file__))
templates = Jinja2Templates(directory=os.path.join(HERE, "templates"))
router = APIRouter(prefix="/ui", include_in_schema=False, route_class=Route)
COOKIE = "dex_token"

# action -> (dex function, states it applies to, needs a reason field)
ACTIONS = {
    "cancel": ("cancel_run", R.ACTIVE, True),
    "suspend": ("suspend_run", ("RUNNING",), True),
    "resume": ("resume_run", ("SUSPENDED", "BLOCKED"), True),
    "terminate": ("terminate_run", R.ACTIVE, True),
    "restart": ("restart_run", R.STATUSES, False),
    "reset": ("reset_run", R.STATUSES, True),
    "event": ("send_external_event", R.ACTIVE, False),
}


templates.env.filters["json"] = lambda value: jsonio.dumps(value, indent=True)
templates.env.filters["compact_json"] = jsonio.dumps
templates.env.filters["ts"] = lambda t: "" if t is None else t.strftime("%Y-%m-%d %H:%M:%S")


def setup(app: FastAPI, secret: bytes) -> None:
    app.state.ui_secret = secret or os.urandom(32)
    app.mount("/ui/static", StaticFiles(directory=os.path.join(HERE, "static")), name="static")


def _token(request: Request) -> Optional[str]:
    return request.cookies.get(COOKIE)


def _csrf(request: Request) -> str:
    return hmac.new(request.app.state.ui_secret, (_token(request) or "").encode(),
                    hashlib.sha256).hexdigest()[:32]


def _check_csrf(request: Request, csrf: str) -> None:
    if not _token(request) or not hmac.compare_digest(csrf, _csrf(request)):
        raise Problem(403, "Forbidden", "the form is stale or from elsewhere: reload the page and try again")


def _page(request: Request, template: str, **ctx: Any) -> HTMLResponse:
    ctx.update(request=request, csrf=_csrf(request), role=getattr(request.state, "role", None))
    return templates.TemplateResponse(template, ctx)


def problem_page(request: Request, p: Problem) -> HTMLResponse:
    if p.status == 401:
        return RedirectResponse(f"/ui/login?error={p.status}", status_code=303)  # type: ignore[return-value]
    return templates.TemplateResponse("error.html", {"request": request, "problem": p, "role": None,
                                                     "csrf": ""}, status_code=p.status)


class Caller:
    """The dashboard's caller: a transaction as the role of the cookie's token."""

    def __init__(self, request: Request):
        self.request = request

    def __enter__(self) -> "Caller":
        self._cm = self.request.app.state.db.as_caller(_token(self.request))
        self.conn = self._cm.__enter__()
        self.may: Dict[str, bool] = privileges(self.conn)
        self.request.state.role = self.may.pop("role")
        return self

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, error: Optional[int] = None):
    return templates.TemplateResponse("login.html", {"request": request, "error": error,
                                                     "role": None, "csrf": ""})


@router.post("/login")
def login(request: Request, token: str = Form(...)):
    with request.app.state.db.as_caller(token.strip()):
        pass    # 401 (back to the form) unless the token maps to a role the server may act as
    resp = RedirectResponse("/ui/runs", status_code=303)
    resp.set_cookie(COOKIE, token.strip(), httponly=True, samesite="strict", path="/ui")
    return resp


@router.post("/logout")
def logout():
    resp = RedirectResponse("/ui/login", status_code=303)
    resp.delete_cookie(COOKIE, path="/ui")
    return resp


def run_filter(status: str = "", queue: str = "", workflow: str = "", instance_id: str = "",
               label: List[str] = Query([]), created_after: str = "",
               created_before: str = "") -> R.RunFilter:
    """The filters of the runs page (its form sends empty fields for no filter)."""
    def t(v: Optional[str], name: str) -> Optional[dt.datetime]:
        if not v:
            return None
        try:
            parsed = dt.datetime.fromisoformat(v)
        except ValueError:
            raise Problem(400, "Bad Request", f"{name}: not a time ({v!r})") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)
    return R.RunFilter(status or None, queue or None, workflow or None, instance_id or None,
                       [x for x in label if x] or None, None,
                       t(created_after, "created after"), t(created_before, "created before"))


def _runs_context(request: Request, conn, flt: R.RunFilter, cursor: Optional[str]) -> Dict[str, Any]:
    rows, next_cursor = R.list_runs(conn, flt, 50, cursor or None)
    counts, since, since_completed_only = R.count_runs(conn, R.RunFilter(
        None, flt.queue, flt.workflow, flt.instance_id,
        [f"{k}={v}" for k, v in (flt.labels or {}).items()] or None, None,
        flt.created_after, flt.created_before))
    params = [(k, v) for k, v in request.query_params.multi_items() if k != "cursor"]
    return {"runs": rows, "next_cursor": next_cursor, "counts": counts, "since": since,
            "since_completed_only": since_completed_only,
            "statuses": R.STATUSES, "params": params, "flt": flt}


@router.get("/runs", response_class=HTMLResponse)
def runs_page(request: Request, flt: R.RunFilter = Depends(run_filter), cursor: str = ""):
    with Caller(request) as c:
        ctx = _runs_context(request, c.conn, flt, cursor)
    # relative (path and query only): behind a proxy that terminates TLS, the URL the server
    # sees is http://, and an https:// page must not fetch from it
    live_url = "/ui/runs-live" + (f"?{request.url.query}" if request.url.query else "")
    return _page(request, "runs.html", live_url=live_url,
                 q=request.query_params, labels=request.query_params.getlist("label"), **ctx)


@router.get("/runs-live", response_class=HTMLResponse)
def runs_live(request: Request, flt: R.RunFilter = Depends(run_filter), cursor: str = ""):
    with Caller(request) as c:
        ctx = _runs_context(request, c.conn, flt, cursor)
    return _page(request, "_runs_live.html", q=request.query_params, **ctx)


def _run_context(conn, may: Dict[str, bool], run_id: uuid.UUID) -> Dict[str, Any]:
    run = R.get_run(conn, run_id)
    hist = R.history(conn, run_id)
    atts = R.attempts(conn, run_id)
    now = conn.execute("SELECT now() AS now").fetchone()["now"]
    bars = svg.timeline_bars(hist, atts)
    children, _ = R.list_runs(conn, R.RunFilter(parent_id=run_id), R.MAX_PAGE)
    actions = [a for a, (fn, states, _) in ACTIONS.items()
               if may.get(fn) and run["status"] in states]
    if "reset" in actions and not any("workflowTaskCompleted" in h["event"] for h in hist):
        actions.remove("reset")
    return {"run": run, "history": hist, "attempts": atts, "children": children,
            "timeline": svg.timeline_svg(bars, now, run["created_at"], run["completed_at"]),
            "actions": actions, "kinds": [svg.subject(h["event"])[0] for h in hist],
            "pending": [b for b in bars if b.outcome in ("PENDING", "RUNNING")]
                       if run["status"] in R.ACTIVE else []}


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: uuid.UUID, done: str = ""):
    with Caller(request) as c:
        ctx = _run_context(c.conn, c.may, run_id)
    return _page(request, "run.html", done=done, **ctx)


@router.get("/runs/{run_id}/live", response_class=HTMLResponse)
def run_live(request: Request, run_id: uuid.UUID):
    with Caller(request) as c:
        ctx = _run_context(c.conn, c.may, run_id)
    return _page(request, "_run_live.html", **ctx)


@router.get("/runs/{run_id}/confirm/{action}", response_class=HTMLResponse)
def confirm(request: Request, run_id: uuid.UUID, action: str):
    if action not in ACTIONS:
        raise Problem(404, "Not Found", f"no action {action!r}")
    with Caller(request) as c:
        ctx = _run_context(c.conn, c.may, run_id)
    if action not in ctx["actions"]:
        raise Problem(403, "Forbidden", f"{action} is not possible for this run with role "
                      f"{request.state.role}")
    points = [h for h in ctx["history"] if "workflowTaskCompleted" in h["event"]]
    return _page(request, "confirm.html", action=action, needs_reason=ACTIONS[action][2],
                 reset_points=points, **ctx)


@router.post("/runs/{run_id}/{action}")
def act(request: Request, run_id: uuid.UUID, action: str, csrf: str = Form(""),
        reason: str = Form(""), event_id: str = Form(""), payload: str = Form("")):
    _check_csrf(request, csrf)
    if action not in ACTIONS:
        raise Problem(404, "Not Found", f"no action {action!r}")
    fn = ACTIONS[action][0]
    with Caller(request) as c:
        conn = c.conn
        if action == "restart":
            target = conn.execute("SELECT dex.restart_run(%s) AS id", (run_id,)).fetchone()["id"]
        elif action == "reset":
            try:
                seq = int(event_id)
            except ValueError:
                raise Problem(400, "Bad Request", "choose the event to reset to") from None
            target = conn.execute("SELECT dex.reset_run(%s, %s, %s) AS id",
                                  (run_id, seq, reason or None)).fetchone()["id"]
        elif action == "event":
            if not event_id:
                raise Problem(400, "Bad Request", "an event needs an id")
            try:
                value = jsonio.parse_body(payload.encode()) if payload.strip() else None
            except jsonio.BadJSON as e:
                raise Problem(400, "Bad Request", f"the payload: {e}") from None
            conn.execute("SELECT dex.send_external_event(%s, %s, %s)",
                         (run_id, event_id, None if value is None else Jsonb(value)))
            target = run_id
        else:
            conn.execute(f"SELECT dex.{fn}(%s, %s)", (run_id, reason or None))
            target = run_id
    return RedirectResponse(f"/ui/runs/{target}?done={action}", status_code=303)


DEPTH_SERIES = (("ready", "ready"), ("leased", "leased"), ("delayed", "delayed"))
RATE_SERIES = (("completed_per_minute", "completed"), ("failed_per_minute", "failed"))


def _queues_context(request: Request, conn, may: Dict[str, bool], name: str) -> Dict[str, Any]:
    qs = [q for q in R.queues(conn) if name in q["name"]]
    now = conn.execute("SELECT now() AS now").fetchone()["now"]
    since = now - dt.timedelta(hours=1)
    sampler = request.app.state.sampler
    for q in qs:
        series = sampler.series(q["name"])
        points = [(s["at"], s) for s in series]
        q["depth_chart"] = svg.line_chart(points, DEPTH_SERIES, now, "depth (tasks)")
        q["rate_chart"] = svg.line_chart(points, RATE_SERIES, now, "throughput (tasks per minute)")
        q["latency"] = R.latency(conn, q["name"], since) if q["kind"] == "workflow" else None
    return {"queues": qs, "may_alter": may.get("alter_queue"), "sampler_error": sampler.error, "name": name}


@router.get("/queues", response_class=HTMLResponse)
def queues_page(request: Request, done: str = "", name: str = ""):
    with Caller(request) as c:
        ctx = _queues_context(request, c.conn, c.may, name)
    return _page(request, "queues.html", done=done, **ctx)


@router.get("/queues-live", response_class=HTMLResponse)
def queues_live(request: Request, name: str = ""):
    with Caller(request) as c:
        ctx = _queues_context(request, c.conn, c.may, name)
    return _page(request, "_queues_live.html", **ctx)


@router.post("/queues/{name}")
def alter_queue(request: Request, name: str, csrf: str = Form(""), paused: str = Form(""),
                capacity: str = Form("")):
    _check_csrf(request, csrf)
    cap: Optional[int] = None
    if capacity.strip():
        try:
            cap = int(capacity)
        except ValueError:
            raise Problem(400, "Bad Request", f"capacity must be a whole number, not {capacity!r}") from None
    pause = {"true": True, "false": False}.get(paused)
    with Caller(request) as c:
        c.conn.execute("SELECT dex.alter_queue(%s, %s, %s)", (name, cap, pause))
    return RedirectResponse(f"/ui/queues?done={quote(name)}&name={quote(name)}", status_code=303)
