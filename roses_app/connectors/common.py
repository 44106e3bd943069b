"""Pieces every connector shares: a SQLite state file and a jittered poll schedule."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger


class SqliteStore:
    """A small SQLite file of runtime state, safe across threads (``":memory:"`` works).

    Writes are synchronous (``synchronous=FULL``): state such as an ETag or an IMAP UID
    must never be ahead of what reached the spool, nor lost once it did.
    """

    def __init__(self, path: str | Path, schema: str) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        with self._lock:
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(schema)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class PollJob:
    """One source polled every ``every`` seconds by ``run(*args)``."""

    id: str
    name: str
    every: float
    run: Callable[..., Any]
    args: Sequence[Any] = ()


def start_interval_scheduler(
    jobs: Sequence[PollJob], max_workers: int, jitter_fraction: float
) -> BackgroundScheduler:
    """Start a scheduler running each job right away, then every ``every`` (jittered).

    One run of a job at a time, and missed runs are coalesced: a slow source is never
    polled by two threads at once nor in a burst after a pause.
    """
    scheduler = BackgroundScheduler(
        executors={"default": ThreadPoolExecutor(max_workers)}, timezone=UTC
    )
    now = datetime.now(UTC)
    for job in jobs:
        scheduler.add_job(
            job.run,
            trigger=IntervalTrigger(
                seconds=job.every, jitter=job.every * jitter_fraction or None, timezone=UTC
            ),
            args=list(job.args),
            id=job.id,
            name=job.name,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, int(job.every)),
            next_run_time=now,
        )
    scheduler.start()
    return scheduler
