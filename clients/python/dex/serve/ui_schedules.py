"""The dashboard's schedules page (``/ui/schedules``): every schedule with its timing, next
fire time, last run (linked to the run's page) and skipped ticks, refreshed by short polling
as the other pages are; pause, unpause and trigger, each behind a confirmation page with a CSRF
token and shown only when the caller's role may call them (dex_admin's, as the schedules
are).  Reads go through ``schedules.list_schedules``, the REST API's own listing."""

from __future__ import annotations

from typing import Any, Dict
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from . import schedules as S
from .db import Problem
from .routing import Route
from .ui import Caller, _check_csrf, _page

router = APIRouter(prefix="/ui", include_in_schema=False, route_class=Route)

# action -> (dex function, applies to a paused schedule, to an unpaused one)
ACTIONS = {
    "pause": ("pause_schedule", False, True),
    "unpause": ("unpause_schedule", True, False),
    "trigger": ("trigger_schedule", True, True),
}


def _actions(may: Dict[str, bool], s: Dict[str, Any]):
    return [a for a, (fn, paused, unpaused) in ACTIONS.items()
            if may.get(fn) and (paused if s["paused"] else unpaused)]


def _context(c: Caller, cursor: str) -> Dict[str, Any]:
    rows, next_cursor = S.list_schedules(c.conn, cursor=cursor or None, limit=100)
    for s in rows:
        s["actions"] = _actions(c.may, s)
    return {"schedules": rows, "next_cursor": next_cursor}


@router.get("/schedules", response_class=HTMLResponse)
def schedules_page(request: Request, done: str = "", run: str = "", cursor: str = ""):
    with Caller(request) as c:
        ctx = _context(c, cursor)
    return _page(request, "schedules.html", done=done, run=run, cursor=cursor, **ctx)


@router.get("/schedules-live", response_class=HTMLResponse)
def schedules_live(request: Request, cursor: str = ""):
    with Caller(request) as c:
        ctx = _context(c, cursor)
    return _page(request, "_schedules_live.html", **ctx)


@router.get("/schedules/{name}/confirm/{action}", response_class=HTMLResponse)
def confirm(request: Request, name: str, action: str):
    if action not in ACTIONS:
        raise Problem(404, "Not Found", f"no action {action!r}")
    with Caller(request) as c:
        s = S.get_schedule(c.conn, name)
        if action not in _actions(c.may, s):
            raise Problem(403, "Forbidden", f"{action} is not possible for this schedule with role "
                          f"{request.state.role}")
    return _page(request, "schedule_confirm.html", action=action, s=s)


@router.post("/schedules/{name}/{action}")
def act(request: Request, name: str, action: str, csrf: str = Form(""), note: str = Form("")):
    _check_csrf(request, csrf)
    if action not in ACTIONS:
        raise Problem(404, "Not Found", f"no action {action!r}")
    run = ""
    with Caller(request) as c:
        if action == "pause":
            c.conn.execute("SELECT dex.pause_schedule(%s, %s)", (name, note or None))
        elif action == "unpause":
            c.conn.execute("SELECT dex.unpause_schedule(%s)", (name,))
        else:
            rid = c.conn.execute("SELECT dex.trigger_schedule(%s) AS id", (name,)).fetchone()["id"]
            run = str(rid) if rid else "none"
    return RedirectResponse(f"/ui/schedules?done={quote(action)}+{quote(name)}&run={run}", status_code=303)
