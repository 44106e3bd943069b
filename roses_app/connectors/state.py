"""Durable per-source runtime state of the feed connector, in SQLite.

Settings say what the user asked for (``feeds.yaml``); this file remembers what
happened: the URL to fetch now (a permanent redirect replaces the configured
one), the HTTP validators (ETag, Last-Modified), consecutive failures and the
earliest time of the next attempt (backoff), whether the source is gone (410),
and counters for health and metrics.

When the URL configured for a source changes, its state starts over (new URL,
no validators, no backoff, not gone); the counters are kept.

The store is safe to use from several threads (one connection, one lock); each
:meth:`StateStore.put` and :meth:`StateStore.put_many` is one committed transaction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

from roses_app.connectors.common import SqliteStore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS feed_state (
    name            TEXT PRIMARY KEY,
    configured_url  TEXT NOT NULL,
    url             TEXT NOT NULL,
    etag            TEXT,
    last_modified   TEXT,
    failures        INTEGER NOT NULL DEFAULT 0,
    next_allowed_at REAL NOT NULL DEFAULT 0,
    strict_retry    INTEGER NOT NULL DEFAULT 0,
    gone            INTEGER NOT NULL DEFAULT 0,
    last_status     TEXT NOT NULL DEFAULT '',
    last_error      TEXT NOT NULL DEFAULT '',
    last_attempt_at REAL,
    last_success_at REAL,
    n_polls         INTEGER NOT NULL DEFAULT 0,
    n_ok            INTEGER NOT NULL DEFAULT 0,
    n_not_modified  INTEGER NOT NULL DEFAULT 0,
    n_errors        INTEGER NOT NULL DEFAULT 0,
    n_items         INTEGER NOT NULL DEFAULT 0
)
"""
# Columns added since the table was first made: (name, declaration), added to an
# older file when it is opened.
_ADDED = (
    ("rate_items", "REAL NOT NULL DEFAULT 0"),
    ("rate_seconds", "REAL NOT NULL DEFAULT 0"),
    ("rate_saturated", "INTEGER NOT NULL DEFAULT 0"),
    ("document_items", "INTEGER NOT NULL DEFAULT 0"),
    ("doc_keys", "TEXT NOT NULL DEFAULT ''"),
    ("hints", "TEXT NOT NULL DEFAULT ''"),
)


@dataclass(frozen=True)
class SourceState:
    """Everything the connector remembers about one source."""

    name: str
    configured_url: str
    url: str  # what to fetch now; differs after a permanent redirect
    etag: str | None = None
    last_modified: str | None = None
    failures: int = 0  # consecutive
    next_allowed_at: float = 0.0  # clock seconds; 0 = no backoff
    strict_retry: bool = False  # next_allowed_at came from a server's Retry-After
    gone: bool = False  # 410: not polled any more
    last_status: str = ""
    last_error: str = ""
    last_attempt_at: float | None = None
    last_success_at: float | None = None
    n_polls: int = 0
    n_ok: int = 0
    n_not_modified: int = 0
    n_errors: int = 0
    n_items: int = 0
    # the feed's rhythm (roses_app.connectors.freshness): its decayed rate estimate,
    # its last document's size and items' short hashes, the publisher's hints (JSON)
    rate_items: float = 0.0
    rate_seconds: float = 0.0
    rate_saturated: bool = False
    document_items: int = 0
    doc_keys: str = ""
    hints: str = ""

    def restarted(self, configured_url: str) -> SourceState:
        """The state of a source whose configured URL changed: counters only."""
        return SourceState(
            name=self.name,
            configured_url=configured_url,
            url=configured_url,
            n_polls=self.n_polls,
            n_ok=self.n_ok,
            n_not_modified=self.n_not_modified,
            n_errors=self.n_errors,
            n_items=self.n_items,
        )


_COLUMNS = [f.name for f in fields(SourceState)]
_BOOLS = {"strict_retry", "gone", "rate_saturated"}


class StateStore(SqliteStore):
    """SQLite-backed :class:`SourceState` per source name (``":memory:"`` works)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, _SCHEMA)
        with self._lock:
            have = {row[1] for row in self._db.execute("PRAGMA table_info(feed_state)")}
            for name, declaration in _ADDED:
                if name not in have:
                    self._db.execute(f"ALTER TABLE feed_state ADD COLUMN {name} {declaration}")

    def load(self, name: str, configured_url: str) -> SourceState:
        """The state of ``name``; fresh when unknown or when its configured URL changed."""
        state = self.get(name)
        if state is None:
            return SourceState(name=name, configured_url=configured_url, url=configured_url)
        if state.configured_url != configured_url:
            return state.restarted(configured_url)
        return state

    def get(self, name: str) -> SourceState | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM feed_state WHERE name = ?", (name,)
            ).fetchone()
        return None if row is None else _from_row(row)

    def all(self) -> list[SourceState]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM feed_state ORDER BY name"
            ).fetchall()
        return [_from_row(row) for row in rows]

    def rows(self, columns: str) -> list[tuple[object, ...]]:
        """Some columns of every source (a listing reads only what it shows)."""
        with self._lock:
            return self._db.execute(f"SELECT {columns} FROM feed_state").fetchall()

    def put(self, state: SourceState) -> None:
        self.put_many([state])

    def put_many(self, states: list[SourceState]) -> None:
        """Record several sources' states in one transaction (one fsync)."""
        placeholders = ", ".join("?" for _ in _COLUMNS)
        rows = []
        for state in states:
            values = asdict(state)
            for key in _BOOLS:
                values[key] = int(values[key])
            rows.append([values[c] for c in _COLUMNS])
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany(
                    f"INSERT OR REPLACE INTO feed_state ({', '.join(_COLUMNS)}) "
                    f"VALUES ({placeholders})",
                    rows,
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def reset(self, name: str) -> None:
        """Forget backoff, validators and the gone flag of ``name`` (counters stay)."""
        state = self.get(name)
        if state is not None:
            self.put(state.restarted(state.configured_url))

    def delete(self, name: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM feed_state WHERE name = ?", (name,))


def _from_row(row: tuple[object, ...]) -> SourceState:
    values = dict(zip(_COLUMNS, row, strict=True))
    for key in _BOOLS:
        values[key] = bool(values[key])
    return SourceState(**values)  # type: ignore[arg-type]
