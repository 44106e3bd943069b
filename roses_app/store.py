"""The output store: what the continuous queries produced, ready to publish.

The Spark ``foreachBatch`` sink calls :meth:`Store.write_batch` with the rows of one
micro-batch; the HTTP server reads feed documents with :meth:`Store.latest`.  SQLite in
WAL mode lets one writer and many readers work at the same time; every thread gets its
own connection and writes are serialized by a lock.

Idempotence: a micro-batch is identified by ``(query_id, batch_id)``.  The rows of a batch
and the record that the batch was applied are committed in one transaction, so a batch
that Spark replays after a crash changes nothing.

Identity: within one output feed ``(stream, part)`` an item is keyed by its guid (the
``<guid>`` text, else its ``<link>``, else a sha256 of the serialized item).  An item that
comes again with the same guid replaces the stored one: feed readers see an update, not
a duplicate.  Only a newer event (by ``(ts, seq)``) replaces: an older one written later,
such as an outer join's lonely row decided after its enriched pair, is ignored.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from lxml import etree

from roses_app.errors import StoreError
from roses_app.items import parse_item
from roses_app.store_rows import OutRow, RowBatch, RowLike, StoredEntry, entry_guid, out_row
from roses_app.store_schema import KEEP_BATCHES, SCHEMA, SCHEMA_VERSION, UPSERT

log = logging.getLogger(__name__)


class Store:
    """SQLite output store; safe to share between the sink thread and HTTP threads."""

    def __init__(
        self,
        path: Path,
        *,
        clock: Callable[[], float] = time.time,
        timeout: float = 30.0,
    ) -> None:
        self.path = Path(path)
        self._clock = clock
        self._timeout = timeout
        self._local = threading.local()
        self._write_lock = threading.Lock()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._closed = False
        # batches and rows this process has applied (a replayed batch counts nothing)
        self.written = {"batches": 0, "rows": 0}
        self.published: dict[str, int] = {}  # stream -> rows written by this process
        # the streams with a feed, read once, then kept by this instance's writes (the
        # daemon's one Store writes them all): a DISTINCT over 100,000 streams' feeds
        # costs each /healthz
        self._stream_names: set[str] | None = None
        self._names_lock = threading.Lock()
        # called after each committed write with the (stream, part) feeds it changed
        self._listeners: list[Callable[[set[tuple[str, str]]], None]] = []
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = self._conn()
            with self._write_lock:
                conn.executescript(SCHEMA)
                conn.execute(
                    "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the output store {self.path}: {exc}") from exc

    # -- connections ---------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"the output store {self.path} is closed")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                str(self.path),
                timeout=self._timeout,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # so that close() can close it
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        try:
            yield self._conn()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the output store {self.path}: {exc}") from exc

    def close(self) -> None:
        """Close every connection; the store cannot be used afterwards."""
        with self._conns_lock:
            self._closed = True
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------

    @contextmanager
    def _transaction(self, failure: str) -> Iterator[sqlite3.Connection]:
        """One serialized write transaction; rolled back on any error."""
        try:
            with self._write_lock:
                conn = self._conn()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            raise StoreError(f"{failure} in {self.path}: {exc}") from exc

    def write_batch(
        self,
        query_id: str,
        batch_id: int,
        rows: Sequence[RowLike],
        position: int | None = None,
    ) -> bool:
        """Apply one micro-batch atomically; False (and no change) if already applied.

        ``position``: the latest spool seq the batch read, kept per query in the same
        transaction.  Only the last batches of a query are remembered: Spark replays
        at most the batch after its last commit, so older ids can never come again.
        """
        prepared = self._prepare([out_row(r) for r in rows])
        now = self._clock()
        with self._transaction(f"cannot write batch {batch_id} of {query_id}") as conn:
            applied = conn.execute(
                "SELECT 1 FROM batches WHERE query_id = ? AND batch_id = ?",
                (query_id, int(batch_id)),
            ).fetchone()
            if applied:
                return False  # nothing was written: the commit is empty
            changed = self._upsert_all(conn, prepared, now)
            conn.execute(
                "INSERT INTO batches(query_id, batch_id, applied_at, rows) VALUES (?, ?, ?, ?)",
                (query_id, int(batch_id), now, len(prepared)),
            )
            conn.execute(
                "DELETE FROM batches WHERE query_id = ? AND batch_id < ?",
                (query_id, int(batch_id) - KEEP_BATCHES),
            )
            if position is not None:
                conn.execute(
                    "INSERT INTO positions(query_id, seq) VALUES (?, ?) ON CONFLICT(query_id)"
                    " DO UPDATE SET seq = max(seq, excluded.seq)",
                    (query_id, int(position)),
                )
            self.written["batches"] += 1  # under the write lock
            self.written["rows"] += len(prepared)
            for row, _ in prepared:
                self.published[row.stream] = self.published.get(row.stream, 0) + 1
        log.debug("%s batch %d: %d row(s)", query_id, batch_id, len(prepared))
        if changed:
            self._names_changed(added={stream for stream, _ in changed})
            self._notify(changed)
        return True

    def write_fused(
        self, query_id: str, batch_id: int, rows: RowBatch, position: int | None = None
    ) -> bool:
        """:meth:`write_batch` of a fused batch's rows: a row per stream and item."""
        return self.write_batch(query_id, batch_id, rows.rows(), position)

    def add_listener(self, listener: Callable[[set[tuple[str, str]]], None]) -> None:
        """Call ``listener(feeds)`` after each committed write that changed feeds, on
        the writer's thread (so it must be quick: e.g. hand the work to a queue)."""
        with self._conns_lock:
            self._listeners = [*self._listeners, listener]

    def remove_listener(self, listener: Callable[[set[tuple[str, str]]], None]) -> None:
        with self._conns_lock:
            self._listeners = [f for f in self._listeners if f is not listener]

    def _notify(self, changed: set[tuple[str, str]]) -> None:
        for listener in self._listeners:  # a copy-on-write list: no lock needed to read
            try:
                listener(set(changed))
            except Exception:  # a listener's bug must not fail the batch, now committed
                log.exception("a store listener failed on %s", sorted(changed))

    def forget_query(self, query_id: str, *, keep_position: bool = False) -> None:
        """A query starts without a checkpoint: Spark numbers its batches from 0 again,
        so the batch ids recorded for it are stale, and so is its position unless it
        goes on from where it was (``keep_position``: a rebased stateless query)."""
        with self._transaction(f"cannot reset query {query_id}") as conn:
            conn.execute("DELETE FROM batches WHERE query_id = ?", (query_id,))
            if not keep_position:
                conn.execute("DELETE FROM positions WHERE query_id = ?", (query_id,))

    def position(self, query_id: str) -> int:
        """The latest spool seq whose output ``query_id`` has written (0: none)."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT seq FROM positions WHERE query_id = ?", (query_id,)
            ).fetchone()
        return 0 if row is None else int(row[0])

    def versions(self) -> dict[str, str]:
        """stream -> the fingerprint of the plan its published output comes from."""
        with self._read() as conn:
            return dict(conn.execute("SELECT stream, fingerprint FROM versions").fetchall())

    def set_versions(self, versions: dict[str, str]) -> None:
        with self._transaction("cannot record stream versions") as conn:
            conn.executemany(
                "INSERT INTO versions(stream, fingerprint) VALUES (?, ?) ON CONFLICT(stream)"
                " DO UPDATE SET fingerprint = excluded.fingerprint",
                sorted(versions.items()),
            )

    def restart_stream(self, stream: str) -> int:
        """Forget a stream's output when it is computed afresh (new or changed plan).

        Returns the rows removed.
        """
        return self.restart_streams([stream])

    def restart_streams(self, streams: Sequence[str]) -> int:
        """:meth:`restart_stream` of each, in one transaction (a transaction per
        stream: 100,000 new subscriptions took 2.4 s to start on an empty store)."""
        keys = [(stream,) for stream in streams]
        with self._transaction(f"cannot reset {len(keys)} stream(s)") as conn:
            before = conn.total_changes
            conn.executemany("DELETE FROM entries WHERE stream = ?", keys)
            removed = conn.total_changes - before
            conn.executemany("DELETE FROM feeds WHERE stream = ?", keys)
            conn.executemany("DELETE FROM versions WHERE stream = ?", keys)
        self._names_changed(removed=streams)
        return int(removed)

    def batch_count(self) -> int:
        with self._read() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0])

    @staticmethod
    def _prepare(rows: Sequence[OutRow]) -> list[tuple[OutRow, str]]:
        """Compute guids outside the lock; oldest first so the newest version wins."""
        out: list[tuple[OutRow, str]] = []
        for row in sorted(rows, key=lambda r: (r.ts, r.seq)):
            if row.guid:
                out.append((row, row.guid))
                continue
            try:
                element = parse_item(row.item)
            except etree.XMLSyntaxError as exc:
                log.warning(
                    "dropping a malformed output item of stream %r (part %r): %s",
                    row.stream,
                    row.part,
                    exc,
                )
                continue
            out.append((row, entry_guid(row.item, element)))
        return out

    @staticmethod
    def _upsert_all(
        conn: sqlite3.Connection, prepared: list[tuple[OutRow, str]], now: float
    ) -> set[tuple[str, str]]:
        """Insert or update the rows, feed by feed; a feed's ``updated_at`` moves only
        when one of its items changed.  An older event of an item (an outer join's
        lonely row, decided after its enriched pair was published) never replaces a
        newer one.  Returns the feeds that changed."""
        changed: set[tuple[str, str]] = set()
        by_feed: dict[tuple[str, str], list[tuple[str, str, str, int, int, str, float, float]]] = {}
        for row, guid in prepared:
            entry = (row.stream, row.part, guid, row.ts, row.seq, row.item, now, now)
            by_feed.setdefault((row.stream, row.part), []).append(entry)
        for (stream, part), entries in by_feed.items():
            before = conn.total_changes
            conn.executemany(UPSERT, entries)
            if conn.total_changes != before:
                conn.execute(
                    "INSERT INTO feeds(stream, part, created_at, updated_at) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT(stream, part) DO UPDATE SET updated_at = excluded.updated_at",
                    (stream, part, now, now),
                )
                changed.add((stream, part))
        return changed

    # -- reading -------------------------------------------------------------------

    def latest(self, stream: str, part: str = "", limit: int = 50) -> list[StoredEntry]:
        """The newest ``limit`` entries of one feed, newest first by (ts, seq)."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT stream, part, guid, ts, seq, item, created_at, updated_at FROM entries"
                " WHERE stream = ? AND part = ? ORDER BY ts DESC, seq DESC, guid LIMIT ?",
                (stream, part, max(0, int(limit))),
            ).fetchall()
        return [StoredEntry(*r) for r in rows]

    def between(
        self, stream: str, part: str, since: int | None, until: int | None
    ) -> list[StoredEntry]:
        """Entries with ``since <= ts < until`` (either bound optional), oldest first.

        A pull query: the content of a time window of the stream's output.
        """
        lo = -(2**63) if since is None else int(since)
        hi = 2**63 - 1 if until is None else int(until)
        with self._read() as conn:
            rows = conn.execute(
                "SELECT stream, part, guid, ts, seq, item, created_at, updated_at FROM entries"
                " WHERE stream = ? AND part = ? AND ts >= ? AND ts < ?"
                " ORDER BY ts, seq, guid",
                (stream, part, lo, hi),
            ).fetchall()
        return [StoredEntry(*r) for r in rows]

    def parts(self, stream: str) -> list[str]:
        """The parts (split values) seen so far for a stream, sorted."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT part FROM feeds WHERE stream = ? ORDER BY part", (stream,)
            ).fetchall()
        return [r[0] for r in rows]

    def streams(self) -> list[str]:
        """Every stream that has at least one entry, sorted."""
        with self._names_lock:  # (held while reading: no write is missed meanwhile)
            if self._stream_names is None:
                with self._read() as conn:
                    rows = conn.execute("SELECT DISTINCT stream FROM feeds").fetchall()
                self._stream_names = {r[0] for r in rows}
            return sorted(self._stream_names)

    def _names_changed(self, added: Iterable[str] = (), removed: Iterable[str] = ()) -> None:
        """Keep :meth:`streams`' set after a committed write."""
        with self._names_lock:
            if self._stream_names is not None:
                self._stream_names.update(added)
                self._stream_names.difference_update(removed)

    def feed_updated(self, stream: str, part: str = "") -> float | None:
        """Wall-clock time of the last change to a feed, or None if it has no entry."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT updated_at FROM feeds WHERE stream = ? AND part = ?", (stream, part)
            ).fetchone()
        return None if row is None else float(row[0])

    def count(self, stream: str, part: str = "") -> int:
        with self._read() as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM entries WHERE stream = ? AND part = ?", (stream, part)
            ).fetchone()
        return int(row[0])

    def hourly(self, stream: str, since: float) -> dict[float, int]:
        """How many entries of a stream (all its parts) were stored each hour since
        ``since`` (wall-clock seconds): the start of each hour -> entries."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT CAST(created_at / 3600 AS INTEGER), COUNT(*) FROM entries"
                " WHERE stream = ? AND created_at >= ? GROUP BY 1",
                (stream, float(since)),
            ).fetchall()
        return {hour * 3600.0: count for hour, count in rows}

    def batch_applied(self, query_id: str, batch_id: int) -> bool:
        with self._read() as conn:
            row = conn.execute(
                "SELECT 1 FROM batches WHERE query_id = ? AND batch_id = ?",
                (query_id, int(batch_id)),
            ).fetchone()
        return row is not None

    def last_batch(self, query_id: str) -> int | None:
        """The highest batch id applied for a query, or None."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT MAX(batch_id) FROM batches WHERE query_id = ?", (query_id,)
            ).fetchone()
        return None if row is None or row[0] is None else int(row[0])
