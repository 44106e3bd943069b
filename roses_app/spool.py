"""The spool: the durable, append-only log between connectors and Spark.

Layout under ``data_dir/spool``::

    log/   one JSON Lines file per append, named by its first seq; Spark's file
           source reads this folder as a stream and records in its checkpoint
           which files it has processed, so a restart neither loses nor repeats.
    archive/  the files Spark has committed: its file source moves them here
           (``cleanSource: archive``, keeping their full path below), so listing
           ``log/`` costs what is pending, not the spool's whole history.
           :meth:`Spool.compact` merges archived files into few big ones.
    tmp/   files being written; renamed into log/ only once fsynced.
    index.sqlite   dedup keys (source, guid or link, content hash), the files
           already indexed, and the last seq/ts handed out.

Crash safety: a file is written to tmp/, fsynced, atomically renamed into log/,
and the directory fsynced; only then are its keys committed to the index.  When the
process dies between the two, opening the spool re-indexes any log file the index
does not know, so an item is never lost and never appended twice.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from roses_app.dates import DEFAULT_MAX_FUTURE, plausible_published
from roses_app.errors import SpoolError
from roses_app.items import MICROS, Event, dedup_key, iso8601
from roses_app.spoolfiles import first_seq, last_named_seq, read_file, spool_files, write_synced

log = logging.getLogger(__name__)

SPARK_SCHEMA_DDL = "source STRING, ts BIGINT, seq BIGINT, item STRING, published BIGINT, key STRING"


_SCHEMA = """
CREATE TABLE IF NOT EXISTS keys (key TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS files (name TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


def wall_clock_micros() -> int:
    return time.time_ns() // 1000


class Spool:
    """Append-only, deduplicating, crash-safe event log."""

    def __init__(
        self,
        root: Path,
        clock: Callable[[], int] = wall_clock_micros,
        max_future: int = DEFAULT_MAX_FUTURE,
    ) -> None:
        self.root = Path(root)
        self.max_future = max_future
        # source -> publication dates not believed since the start (kept as missing)
        self.implausible_dates: Counter[str] = Counter()
        self.log_dir = self.root / "log"
        self.archive_dir = self.root / "archive"
        self.tmp_dir = self.root / "tmp"
        self._clock = clock
        self._lock = threading.Lock()
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self.archive_dir.mkdir(parents=True, exist_ok=True)
            self.tmp_dir.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.root / "index.sqlite", check_same_thread=False)
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise SpoolError(f"cannot open the spool at {self.root}: {exc}") from exc
        self._items = 0
        self._recover()
        # counted once here, then kept as items are indexed: a count(*) scans millions
        # of keys, and /healthz asks every second
        self._items = int(self._db.execute("SELECT count(*) FROM keys").fetchone()[0])

    # -- recovery ---------------------------------------------------------------
    def _recover(self) -> None:
        for leftover in self.tmp_dir.iterdir():
            leftover.unlink()  # never renamed, so never visible to Spark: discard
        finish_compaction(self.archive_dir)
        known = {row[0] for row in self._db.execute("SELECT name FROM files")}
        for path in sorted(self.log_dir.glob("*.jsonl")):
            if path.name not in known:
                log.warning("spool: re-indexing %s (the last append was interrupted)", path.name)
                self._index(path.name, list(read_file(path)))

    def _counter(self, name: str) -> int:
        row = self._db.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
        return int(row[0]) if row else 0

    def _index(self, name: str, events: Sequence[Event]) -> None:
        with self._db:
            added = self._db.executemany(
                "INSERT OR IGNORE INTO keys VALUES (?)",
                [(e.key,) for e in events if e.item is not None],
            ).rowcount
            self._items += max(added, 0)
            self._db.execute("INSERT OR IGNORE INTO files VALUES (?)", (name,))
            if events:
                counters = [
                    ("seq", max(e.seq for e in events)),
                    ("ts", max(e.ts for e in events)),
                ]
                items = [e.ts for e in events if e.item is not None]
                if items:
                    counters.append(("item_ts", max(items)))
                for counter, value in counters:
                    self._db.execute(
                        "INSERT INTO counters VALUES (?, ?) ON CONFLICT(name) DO UPDATE "
                        "SET value = max(value, excluded.value)",
                        (counter, value),
                    )

    # -- appending --------------------------------------------------------------
    def next_ts(self) -> int:
        """The ingest timestamp of the next append: monotone even across restarts."""
        return max(self._clock(), self._counter("ts") + 1)

    def append(self, source: str, items: Sequence[tuple[str, int | None]]) -> list[Event]:
        """Append the items not seen before; all get one ingest timestamp.

        Returns the events actually appended (duplicates are dropped).
        """
        return self.append_many([(source, items)])[0]

    def append_many(
        self, batches: Sequence[tuple[str, Sequence[tuple[str, int | None]]]]
    ) -> list[list[Event]]:
        """Append the new items of several polls as one arrival: one file, one fsync,
        one ingest timestamp (the feed connector commits many polls at once).

        Returns the events appended for each ``(source, items)``, in order.
        """
        with self._lock:
            seen_now: set[str] = set()
            fresh: list[list[tuple[str, str, int | None]]] = []
            for source, items in batches:
                mine = []
                for xml, published in items:
                    key = dedup_key(source, xml)
                    if key in seen_now or self._known(key):
                        continue
                    seen_now.add(key)
                    mine.append((key, xml, published))
                fresh.append(mine)
            if not seen_now:
                return [[] for _ in batches]
            ts = self.next_ts()
            seq = self._counter("seq") + 1
            first = seq
            out: list[list[Event]] = []
            for (source, _), mine in zip(batches, fresh, strict=True):
                events = []
                doubted: list[int] = []
                for key, xml, pub in mine:
                    checked = plausible_published(pub, ts, self.max_future)
                    if checked is None and pub is not None:
                        doubted.append(pub)
                    events.append(Event(source, ts, seq, xml, checked, key))
                    seq += 1
                if doubted:
                    self._doubted(source, doubted)
                out.append(events)
            every = [e for events in out for e in events]
            name = f"{first:020d}-{uuid.uuid4().hex[:8]}.jsonl"
            self._write_durably(name, every)
            self._index(name, every)
            return out

    def _doubted(self, source: str, dates: list[int]) -> None:
        """Counted, and one warning per source and append (a feed's archive of old
        items is one line, not one an item: 100,000 new feeds made 12,000 such lines)."""
        self.implausible_dates[source] += len(dates)
        first, last = iso8601(min(dates)), iso8601(max(dates))
        span = first if first == last else f"{first} to {last}"
        log.warning(
            "source %s: %d item(s) dated %s, before 1990 or more than %ds after now: "
            "they keep their ingest time",
            source, len(dates), span, self.max_future // MICROS,
        )  # fmt: skip

    def heartbeat(self) -> Event:
        """Append a heartbeat: an event without item saying that time has come.

        Spark's watermark only moves with event times; without items arriving, the
        windows and outer joins that time alone closes would wait for the next item.
        """
        with self._lock:
            seq = self._counter("seq") + 1
            event = Event(source="", ts=self.next_ts(), seq=seq, item=None)
            name = f"{seq:020d}-{uuid.uuid4().hex[:8]}.jsonl"
            self._write_durably(name, [event])
            self._index(name, [event])
            return event

    def last_ts(self) -> int:
        """The ingest time of the latest append (0 for an empty spool)."""
        return self._counter("ts")

    def last_item_ts(self) -> int | None:
        """The ingest time of the latest item (heartbeats aside); None for a spool
        without items.  A spool written before this was counted answers its latest
        append's time, which only makes heartbeats go on a little longer."""
        return self._counter("item_ts") or self._counter("ts") or None

    def _known(self, key: str) -> bool:
        return self._db.execute("SELECT 1 FROM keys WHERE key = ?", (key,)).fetchone() is not None

    def _write_durably(self, name: str, events: Sequence[Event]) -> None:
        tmp = self.tmp_dir / name
        try:
            write_synced(tmp, events)
            os.replace(tmp, self.log_dir / name)
            dir_fd = os.open(self.log_dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise SpoolError(f"cannot append to the spool at {self.root}: {exc}") from exc

    # -- reading ----------------------------------------------------------------
    def files(self) -> list[Path]:
        """Every spool file, by the first seq it holds (archived ones are below their
        original path, merged ones at the top of the archive)."""
        return spool_files(self.root)

    def events(self) -> Iterator[Event]:
        """Every event in the spool, in seq order."""
        for path in self.files():
            yield from read_file(path)

    def count(self) -> int:
        """How many distinct items the spool holds."""
        return self._items

    def compact(self, min_files: int = 2) -> int:
        """Merge the archived files into one (when there are at least ``min_files``);
        returns how many were merged.  Only files Spark has committed are ever
        archived, so nothing a running query still has to read is touched."""
        with self._lock:
            return compact_archive(self.archive_dir, self.tmp_dir, min_files)

    def close(self) -> None:
        self._db.close()


MARKER = ".compacting"


def archive_of(log_dir: Path) -> Path:
    """Where Spark moves the spool files it has committed (the ``archive/`` beside
    ``log/``)."""
    return log_dir.parent / "archive"


def last_archived_seq(archive: Path) -> int:
    """The latest seq in the archived spool files (0: none).  Files never overlap in
    seq, so it is in the file that starts last: only that one is read."""
    files = list(archive.rglob("*.jsonl"))
    if not files:
        return 0
    newest = max(files, key=first_seq)
    named = last_named_seq(newest)
    if named is not None:
        return named
    return max((e.seq for e in read_file(newest)), default=0)


def compact_archive(archive: Path, tmp_dir: Path, min_files: int) -> int:
    """Merge archived files: the merged file is written and fsynced, a marker lists
    the files it replaces, it is renamed in place, the old files are removed, then
    the marker.  A crash at any step is finished or undone by
    :func:`finish_compaction` (no event is lost or read twice)."""
    # merged files stay as they are: each compaction costs what arrived since the last
    olds = sorted(
        (p for p in archive.rglob("*.jsonl") if not p.name.startswith("merged-")),
        key=first_seq,
    )
    if len(olds) < min_files:
        return 0
    bounds = _seq_bounds(olds)
    if bounds is None:
        for path in olds:
            path.unlink()
        return len(olds)
    name = f"merged-{bounds[0]:020d}-{bounds[1]:020d}.jsonl"
    tmp = tmp_dir / name
    _concatenate(olds, tmp)
    marker = archive / MARKER
    marker.write_text("\n".join([name, *(str(p.relative_to(archive)) for p in olds)]))
    os.replace(tmp, archive / name)
    finish_compaction(archive)
    return len(olds)


def _seq_bounds(files: Sequence[Path]) -> tuple[int, int] | None:
    """The first and last seq of ``files`` (by first seq: the first and last events of
    the first and last files that hold any), None if they hold none."""
    first = next((e.seq for path in files for e in read_file(path)), None)
    last = next(
        (events[-1].seq for path in reversed(files) if (events := list(read_file(path)))), None
    )
    return None if first is None or last is None else (first, last)


def _concatenate(files: Sequence[Path], target: Path) -> None:
    """``files`` one after the other into ``target``, on disk when this returns.

    Spool files never overlap in seq and each is in seq order (an append takes its
    seqs from the counter under the spool's lock), so in the order of their first seq
    their lines are the events in seq order: they are copied as bytes.  Reading and
    sorting the events instead held every archived item in the daemon at once (1.8
    million items of a 100,000-feed first round: 1.1 GB, and seconds of the GIL)."""
    with open(target, "wb") as out:
        for path in files:
            with open(path, "rb") as part:
                shutil.copyfileobj(part, out)
                if part.tell():  # a last line without its newline gets one
                    part.seek(-1, os.SEEK_END)
                    if part.read(1) != b"\n":
                        out.write(b"\n")
        out.flush()
        os.fsync(out.fileno())


def finish_compaction(archive: Path) -> None:
    """After a crash: remove the files a merged file replaced (if it is in place),
    or forget the marker (if it is not: the old files are all still there)."""
    marker = archive / MARKER
    if not marker.exists():
        return
    merged, *olds = marker.read_text().splitlines()
    if (archive / merged).exists():
        for old in olds:
            if old != merged:
                (archive / old).unlink(missing_ok=True)
    marker.unlink()


__all__ = [
    "MICROS",
    "SPARK_SCHEMA_DDL",
    "Spool",
    "archive_of",
    "last_archived_seq",
    "wall_clock_micros",
]
