"""Charts drawn on the server as SVG (no JavaScript library, nothing fetched from elsewhere):
a run's timeline and a queue's depth and throughput over the last hour."""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import Any, Dict, List, Optional, Sequence, Tuple

OUTCOME_CLASS = {"COMPLETED": "ok", "FAILED": "bad", "LEASE_EXPIRED": "bad", "VOIDED": "void",
                 "PENDING": "pending", "FIRED": "ok", "CANCELLED": "void", "RUNNING": "pending"}


def _ts(value: Any) -> Optional[dt.datetime]:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def subject(event: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
    for k, v in event.items():
        if k not in ("id", "timestamp"):
            return k, v if isinstance(v, dict) else {}
    return "", {}


class Bar:
    def __init__(self, lane: str, start: dt.datetime, end: Optional[dt.datetime], outcome: str,
                 title: str, href: Optional[str] = None):
        self.lane, self.start, self.end, self.outcome, self.title, self.href = \
            lane, start, end, outcome, title, href


def timeline_bars(history: Sequence[Dict[str, Any]], attempts: Sequence[Dict[str, Any]]) -> List[Bar]:
    """The bars of a run's timeline: workflow tasks, each activity attempt, timers, waits for
    external events and child runs, from the history and ``dex.run_attempts``; what has not
    ended yet (a pending activity or timer, a wait) has no end (drawn to now), or a pending
    timer its due time."""
    bars: List[Bar] = []
    created: Dict[Tuple[str, int], Tuple[dt.datetime, Dict[str, Any]]] = {}
    ended: Dict[Tuple[str, int], Tuple[dt.datetime, str]] = {}
    wft_start: Optional[dt.datetime] = None
    for row in history:
        ev = row["event"]
        kind, body = subject(ev)
        t = _ts(ev.get("timestamp"))
        if t is None:
            continue
        eid = ev.get("id", 0)
        if kind == "workflowTaskStarted":
            wft_start = t
        elif kind == "workflowTaskCompleted" and wft_start is not None:
            bars.append(Bar("workflow tasks", wft_start, t, "COMPLETED",
                            f"workflow task {wft_start:%H:%M:%S.%f}"[:-3]))
            wft_start = None
        elif kind == "activityTaskCreated":
            created[("activity", eid)] = (t, body)
        elif kind in ("activityTaskCompleted", "activityTaskFailed"):
            ended[("activity", body.get("activityTaskCreatedEventId", 0))] = (
                t, "COMPLETED" if kind == "activityTaskCompleted" else "FAILED")
        elif kind == "timerCreated":
            created[("timer", eid)] = (t, body)
        elif kind in ("timerElapsed", "timerCancelled"):
            key = ("timer", body.get("timerCreatedEventId", 0))
            if key not in created:      # a wait's timeout fires as a timer with the wait's id
                key = ("wait", body.get("timerCreatedEventId", 0))
            ended[key] = (t, "FIRED" if kind == "timerElapsed" else "CANCELLED")
        elif kind == "externalEventWaitStarted":
            created[("wait", eid)] = (t, body)
        elif kind == "externalEventReceived":
            for key in [k for k, (_, b) in created.items()
                        if k[0] == "wait" and b.get("eventId") == body.get("eventId") and k not in ended]:
                ended[key] = (t, "COMPLETED")
        elif kind == "childRunCreated":
            created[("child", eid)] = (t, body)
        elif kind in ("childRunCompleted", "childRunFailed"):
            ended[("child", body.get("childRunCreatedEventId", 0))] = (
                t, "COMPLETED" if kind == "childRunCompleted" else "FAILED")
    if wft_start is not None:
        bars.append(Bar("workflow tasks", wft_start, None, "RUNNING", "workflow task (leased)"))
    for a in attempts:
        if a["task"] == "workflow" and a["leased_at"] and a["ended_at"]:
            bars.append(Bar("workflow tasks", a["leased_at"], a["ended_at"], a["outcome"],
                            f"workflow task: {a['outcome']}"))
    by_activity: Dict[int, List[Dict[str, Any]]] = {}
    for a in attempts:
        if a["task"] == "activity":
            by_activity.setdefault(a["event_id"], []).append(a)
    for (what, eid), (t, body) in sorted(created.items(), key=lambda kv: kv[1][0]):
        end = ended.get((what, eid))
        if what == "activity":
            lane = f"activity {body.get('name', '?')} #{eid}"
            for a in by_activity.get(eid, []):
                start = a["leased_at"] or t
                bars.append(Bar(lane, start, a["ended_at"], a["outcome"],
                                f"{body.get('name')} attempt {a['attempt']}: {a['outcome']}"
                                + (f" ({(a['failure'] or {}).get('message', '')})" if a["failure"] else "")))
            if end is None:
                bars.append(Bar(lane, t, None, "PENDING", f"{body.get('name')}: waiting for an attempt"))
        elif what == "timer":
            due = _ts(body.get("elapseAt"))
            name = body.get("name") or f"#{eid}"
            if end:
                bars.append(Bar(f"timer {name}", t, end[0], end[1], f"timer {name}: {end[1].lower()}"))
            else:
                bars.append(Bar(f"timer {name}", t, due, "PENDING", f"timer {name}: due {due}"))
        elif what == "wait":
            lane = f"event {body.get('eventId', '?')}"
            bars.append(Bar(lane, t, end[0] if end else None, end[1] if end else "PENDING",
                            f"waiting for event {body.get('eventId')}"))
        elif what == "child":
            lane = f"child {body.get('workflowName', '?')}"
            bars.append(Bar(lane, t, end[0] if end else None, end[1] if end else "RUNNING",
                            f"child run {body.get('runId')}", href=f"/ui/runs/{body.get('runId')}"))
    return bars


def _ticks(t0: dt.datetime, t1: dt.datetime, n: int = 6) -> List[dt.datetime]:
    span = (t1 - t0).total_seconds()
    steps = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120,
             300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400]
    step = next((s for s in steps if span / s <= n), 86400 * max(1, round(span / n / 86400)))
    first = t0.timestamp() // step * step + step
    out, x = [], first
    while x < t1.timestamp():
        out.append(dt.datetime.fromtimestamp(x, dt.timezone.utc))
        x += step
    return out


def _fmt_tick(t: dt.datetime, span: float) -> str:
    if span < 10:
        return t.strftime("%H:%M:%S.%f")[:-3]
    return t.strftime("%H:%M:%S") if span < 7200 else t.strftime("%m-%d %H:%M")


def timeline_svg(bars: List[Bar], now: dt.datetime, start: Optional[dt.datetime] = None,
                 end: Optional[dt.datetime] = None, width: int = 960) -> str:
    if not bars:
        return '<p class="muted">No workflow task, activity or timer yet.</p>'
    label_w, row_h, top = 230, 22, 24
    lanes: List[str] = []
    for b in bars:
        if b.lane not in lanes:
            lanes.append(b.lane)
    t0 = min([b.start for b in bars] + ([start] if start else []))
    t1 = max([b.end or now for b in bars] + ([end] if end else []))
    if t1 <= t0:
        t1 = t0 + dt.timedelta(milliseconds=1)
    span = (t1 - t0).total_seconds()
    plot_w = width - label_w - 10

    def x(t: dt.datetime) -> float:
        return label_w + (t - t0).total_seconds() / span * plot_w

    height = top + row_h * len(lanes) + 8
    out = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="timeline of the run">']
    for t in _ticks(t0, t1):
        out.append(f'<line class="grid" x1="{x(t):.1f}" y1="{top - 6}" x2="{x(t):.1f}" y2="{height}"/>'
                   f'<text class="tick" x="{x(t):.1f}" y="{top - 10}">{_fmt_tick(t, span)}</text>')
    for i, lane in enumerate(lanes):
        y = top + i * row_h
        out.append(f'<text class="lane" x="4" y="{y + 15}">{escape(lane[:34])}</text>')
    for b in bars:
        y = top + lanes.index(b.lane) * row_h + 3
        x0 = x(b.start)
        x1 = max(x(b.end or now), x0 + 2)
        cls = OUTCOME_CLASS.get(b.outcome, "pending") + ("" if b.end else " open")
        rect = (f'<rect class="bar {cls}" x="{x0:.1f}" y="{y}" width="{x1 - x0:.1f}" height="{row_h - 6}" '
                f'rx="2"><title>{escape(b.title)}</title></rect>')
        out.append(f'<a href="{escape(b.href)}">{rect}</a>' if b.href else rect)
    out.append("</svg>")
    return "".join(out)


def line_chart(points: Sequence[Tuple[dt.datetime, Dict[str, float]]], series: Sequence[Tuple[str, str]],
               now: dt.datetime, title: str, window: dt.timedelta = dt.timedelta(hours=1),
               width: int = 460, height: int = 170) -> str:
    """Lines of ``series`` ((key of each point's values, legend) pairs) over the last ``window``."""
    left, bottom, top = 44, 20, 36
    t0 = now - window
    ymax = max([v.get(k, 0) or 0 for _, v in points for k, _ in series] + [1])
    pw, ph = width - left - 8, height - top - bottom

    def x(t: dt.datetime) -> float:
        return left + max(0.0, (t - t0).total_seconds()) / window.total_seconds() * pw

    def y(v: float) -> float:
        return top + ph - (v / ymax) * ph

    out = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
           f'<text class="title" x="{left}" y="12">{escape(title)}</text>',
           f'<line class="axis" x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}"/>',
           f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}"/>',
           f'<text class="tick" x="{left - 4}" y="{top + 4}" text-anchor="end">{ymax:.4g}</text>',
           f'<text class="tick" x="{left - 4}" y="{top + ph}" text-anchor="end">0</text>']
    for minutes in (60, 45, 30, 15, 0):
        t = now - dt.timedelta(minutes=minutes)
        out.append(f'<text class="tick" x="{x(t):.1f}" y="{height - 4}" text-anchor="middle">'
                   f'{"now" if minutes == 0 else f"-{minutes} min"}</text>')
    for i, (key, legend) in enumerate(series):
        pts = " ".join(f"{x(t):.1f},{y(v.get(key, 0) or 0):.1f}" for t, v in points if t >= t0)
        if pts:
            out.append(f'<polyline class="series s{i}" points="{pts}"/>')
        out.append(f'<rect class="s{i}" x="{left + i * 100}" y="20" width="10" height="3"/>'
                   f'<text class="legend" x="{left + 14 + i * 100}" y="25">{escape(legend)}</text>')
    if not points:
        out.append(f'<text class="tick" x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle">'
                   'no samples yet</text>')
    out.append("</svg>")
    return "".join(out)
