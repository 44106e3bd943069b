"""Each source's last polls, for the console's source page: a ring buffer in SQLite.

``DATA_DIR/poll_history.sqlite`` keeps the last ``keep`` (50) polls of each source:
row ``(source, slot)`` with ``slot = n % keep`` is overwritten by poll ``n``, so the
table never holds more than ``keep`` rows a source.  :meth:`PollHistory.record` is the
schedulers' result hook: it only appends to a list, on the fetch loop's thread; a
thread of its own writes what was recorded once a second in one transaction (100,000
sources polled every 15 minutes are about 110 polls a second: one write).  A
source's counter is read from the table the first time the source is recorded after
a start.  An error's message is kept (its first 300 characters), not an ok one's.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from roses_app.connectors.poller import PollResult

log = logging.getLogger(__name__)

KEEP = 50
FLUSH_EVERY = 1.0
MESSAGE_CHARS = 300

_SCHEMA = """
CREATE TABLE IF NOT EXISTS polls (
    source   TEXT    NOT NULL,
    slot     INTEGER NOT NULL,
    n        INTEGER NOT NULL,
    at       REAL    NOT NULL,
    status   TEXT    NOT NULL,
    items    INTEGER NOT NULL,
    seconds  REAL,
    lag      REAL    NOT NULL,
    interval REAL,
    message  TEXT    NOT NULL,
    PRIMARY KEY (source, slot)
) WITHOUT ROWID;
"""


@dataclass(frozen=True)
class Poll:
    """One poll as the source page shows it."""

    at: float
    status: str
    items: int
    seconds: float | None
    lag: float
    interval: float | None
    message: str


_Row = tuple[str, float, str, int, float | None, float, float | None, str]


class PollHistory:
    """The ring buffer (see the module docstring)."""

    def __init__(
        self,
        path: Path,
        keep: int = KEEP,
        clock: Callable[[], float] = time.time,
        flush_every: float = FLUSH_EVERY,
    ) -> None:
        self.keep = keep
        self.clock = clock
        self.flush_every = flush_every
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # a history: the last second may go
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()  # the connection and the counters
        self._pending: list[_Row] = []
        self._pending_lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self, result: PollResult) -> None:
        """The schedulers' hook: a poll's result, written within ``flush_every``."""
        message = result.message[:MESSAGE_CHARS] if result.status != "ok" else ""
        r = result
        row = (r.source, self.clock(), r.status, r.n_items, r.fetch_seconds, r.lag_seconds,
               r.interval_seconds, message)  # fmt: skip
        with self._pending_lock:
            self._pending.append(row)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="roses-poll-history", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.flush_every):
            try:
                self.flush()
            except sqlite3.Error as exc:  # the next second tries again with more
                log.error("poll history: cannot write: %s", exc)

    def flush(self) -> int:
        """Write what was recorded; how many polls."""
        with self._pending_lock:
            rows, self._pending = self._pending, []
        if not rows:
            return 0
        with self._lock:
            out = [self._numbered(row) for row in rows]
            self._db.execute("BEGIN")
            try:
                self._db.executemany(
                    "INSERT OR REPLACE INTO polls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", out
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return len(out)

    def _numbered(self, row: _Row) -> tuple[object, ...]:
        source = row[0]
        n = self._counts.get(source)
        if n is None:
            found = self._db.execute("SELECT MAX(n) FROM polls WHERE source = ?", (source,))
            last = found.fetchone()[0]
            n = -1 if last is None else int(last)
        n += 1
        self._counts[source] = n
        return (source, n % self.keep, n, *row[1:])

    def recent(self, source: str, limit: int = KEEP) -> list[Poll]:
        """The source's last polls, newest first (what was recorded included)."""
        self.flush()
        with self._lock:
            rows = self._db.execute(
                "SELECT at, status, items, seconds, lag, interval, message FROM polls"
                " WHERE source = ? ORDER BY n DESC LIMIT ?",
                (source, limit),
            ).fetchall()
        return [Poll(*row) for row in rows]

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
        try:
            self.flush()
        finally:
            with self._lock:
                self._db.close()
