"""Queue depth and throughput over the last hour, for the queues page.

dex keeps counters (``dex.stat_queues``) and what queues hold now (``dex.queue_depth``), not
their past: a thread of the server reads both every ``interval`` seconds, with the server's
own login role (which needs ``pg_monitor`` or ``dex_admin`` for it), and keeps an hour of
samples in memory.  Throughput is the difference of ``tasks_completed`` between samples.
Requests are answered from these samples only after the caller's own role has read
``dex.queue_depth`` (the same figures, now), so nobody sees more through the samples than
through the view.  A restart of the server starts the hour again.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import threading
from typing import Any, Deque, Dict, List, Optional

import psycopg

from .db import Database

log = logging.getLogger("dex.serve")
WINDOW = dt.timedelta(hours=1)


class Sampler:
    def __init__(self, db: Database, interval: float = 15.0):
        self.db, self.interval = db, interval
        self.samples: Dict[str, Deque[Dict[str, Any]]] = {}
        self.error: Optional[str] = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="dex-serve-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
                self.error = None
            except Exception as e:   # keep sampling: the database may come back
                msg = str(e).strip()
                if msg != self.error:
                    log.warning("queue sampling failed (grant pg_monitor to the server's login role "
                                "for the queue charts): %s", msg)
                self.error = msg
            self._stop.wait(self.interval)

    def sample(self) -> None:
        with self.db.connection() as conn:
            rows = conn.execute(
                "SELECT now() AS at, d.queue, d.ready, d.leased, d.delayed, "
                "coalesce(s.tasks_completed, 0) AS completed, coalesce(s.tasks_failed, 0) AS failed "
                "FROM dex.queue_depth d LEFT JOIN dex.stat_queues s ON s.queue = d.queue").fetchall()
        with self._lock:
            for r in rows:
                q = self.samples.setdefault(r["queue"], collections.deque())
                q.append(r)
                while q and q[0]["at"] < r["at"] - WINDOW:
                    q.popleft()

    def series(self, queue: str) -> List[Dict[str, Any]]:
        """The queue's samples of the last hour, oldest first: time, ready, leased, delayed,
        and tasks completed and failed per minute since the previous sample."""
        with self._lock:
            q = list(self.samples.get(queue, ()))
        out = []
        for prev, cur in zip(q, q[1:]):
            minutes = max((cur["at"] - prev["at"]).total_seconds() / 60, 1e-9)
            # a counter reset (dex.reset_stats, a server restart) counts from zero
            done = cur["completed"] - prev["completed"]
            failed = cur["failed"] - prev["failed"]
            out.append({"at": cur["at"], "ready": cur["ready"], "leased": cur["leased"],
                        "delayed": cur["delayed"],
                        "completed_per_minute": (done if done >= 0 else cur["completed"]) / minutes,
                        "failed_per_minute": (failed if failed >= 0 else cur["failed"]) / minutes})
        return out
