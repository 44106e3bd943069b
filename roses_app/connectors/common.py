"""Pieces every connector shares: a SQLite state file, a jittered poll schedule, one
lock per source, exponential backoff and how a failure is described."""

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

from roses_app.errors import RosesError


def describe(exc: BaseException) -> str:
    """A failure as one line: our own messages as they are, others with their type."""
    text = str(exc)
    if isinstance(exc, RosesError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def backoff_delay(base: float, failures: int, cap: float) -> float:
    """Seconds to wait after ``failures`` failures in a row: ``base`` doubled each time."""
    return float(min(base * 2.0 ** min(failures - 1, 60), cap))


class SourceLocks:
    """One lock per source name: a source is never polled by two threads at once."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def __call__(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())


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
    for job in jobs:
        add_poll_job(scheduler, job, jitter_fraction)
    scheduler.start()
    return scheduler


def add_poll_job(scheduler: BackgroundScheduler, job: PollJob, jitter_fraction: float) -> None:
    """Run ``job`` right away, then every ``every`` (jittered), in ``scheduler``."""
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
        next_run_time=datetime.now(UTC),
    )
