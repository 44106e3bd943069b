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
import sqlite3
import threading
import time
import uuid
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import orjson

from roses_app.dates import DEFAULT_MAX_FUTURE, plausible_published
from roses_app.errors import SpoolError
from roses_app.items import MICROS, Event, dedup_key, iso8601

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
        items is one line, not one a item: 100,000 new feeds made 12,000 such lines)."""
        self.implausible_dates[source] += len(dates)
        span = (
            iso8601(min(dates))
            if len(dates) == 1
            else (f"{iso8601(min(dates))} to {iso8601(max(dates))}")
        )
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
    named = _last_named_seq(newest)
    if named is not None:
        return named
    return max((e.seq for e in read_file(newest)), default=0)


def first_seq(path: Path) -> int:
    """The first seq of a spool file, from its name (``SEQ-…`` or ``merged-SEQ-…``)."""
    parts = path.stem.split("-")
    digits = parts[1] if parts[0] == "merged" else parts[0]
    return int(digits) if digits.isdigit() else 0


def compact_archive(archive: Path, tmp_dir: Path, min_files: int) -> int:
    """Merge archived files: the merged file is written and fsynced, a marker lists
    the files it replaces, it is renamed in place, the old files are removed, then
    the marker.  A crash at any step is finished or undone by
    :func:`finish_compaction` (no event is lost or read twice)."""
    # merged files stay as they are: each compaction costs what arrived since the last
    olds = sorted(p for p in archive.rglob("*.jsonl") if not p.name.startswith("merged-"))
    if len(olds) < min_files:
        return 0
    events = sorted((e for path in olds for e in read_file(path)), key=lambda e: e.seq)
    name = f"merged-{events[0].seq:020d}-{events[-1].seq:020d}.jsonl" if events else ""
    if not name:
        for path in olds:
            path.unlink()
        return len(olds)
    tmp = tmp_dir / name
    write_synced(tmp, events)
    marker = archive / MARKER
    marker.write_text("\n".join([name, *(str(p.relative_to(archive)) for p in olds)]))
    os.replace(tmp, archive / name)
    finish_compaction(archive)
    return len(olds)


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


def spool_files(root: Path) -> list[Path]:
    """The files of the spool at ``root``, by the first seq each holds."""
    every = [*(root / "archive").rglob("*.jsonl"), *(root / "log").glob("*.jsonl")]
    return sorted(every, key=first_seq)


def read_spool(
    root: Path, attempts: int = 5, until: int | None = None, since: int | None = None
) -> list[Event]:
    """Every event of the spool at ``root``, in seq order, read without its index:
    safe while a daemon appends, archives and compacts (a file moved away meanwhile
    is looked for again; a file and its merged copy give each event once).  With
    ``until``, only the events up to that time and the first one after it (if any):
    a file is read only up to its first event after ``until`` (ingest times grow
    with seq, so the rest of the file is later too).  With ``since``, a file whose
    events are all before that time is not read, but for the spool's first event
    (whose time messages name): the events from ``since`` on are all there."""
    for _ in range(attempts):
        found: dict[int, Event] = {}
        after: Event | None = None
        try:
            files = spool_files(root)
            firsts = _first_events(files) if since is not None else []
            skipped = _before(files, firsts, since) if since is not None else set()
            for path, first in zip(files, firsts or [None] * len(files), strict=True):
                if path in skipped:
                    if not found and first is not None:  # the spool's first event
                        found[first.seq] = first
                    continue
                for event in read_file(path):
                    if until is not None and event.ts > until:
                        after = event if after is None or event.seq < after.seq else after
                        break
                    found.setdefault(event.seq, event)
        except FileNotFoundError:
            continue  # archived or merged while read: list again
        if after is not None:
            found.setdefault(after.seq, after)
        return [found[seq] for seq in sorted(found)]
    raise SpoolError(f"the spool at {root} kept changing while read; try again")


def _before(files: list[Path], firsts: list[Event | None], since: int) -> set[Path]:
    """The files (sorted by first seq; ``firsts``: their first events) whose events
    are all before ``since``: each event is no later than the first event of any file
    that starts after it (ingest times grow with seq).  A plain file's seqs end before
    the next file's first seq, a merged file's at the last seq its name gives; copies
    a merged file replaces start where it does, so they bound nothing of it."""
    starts = [first_seq(path) for path in files]
    # the earliest first time among the files from each position on
    bound: list[int | None] = [None] * (len(files) + 1)
    for i in range(len(files) - 1, -1, -1):
        event, later = firsts[i], bound[i + 1]
        here = None if event is None else event.ts
        bound[i] = here if later is None else later if here is None else min(here, later)
    skipped: set[Path] = set()
    for path in files:
        ends = _last_named_seq(path)
        limit = bound[bisect_right(starts, first_seq(path) if ends is None else ends)]
        if limit is not None and limit < since:
            skipped.add(path)
    return skipped


def _first_events(paths: Sequence[Path]) -> list[Event | None]:
    """Each file's first event (None: an empty file), from its first line."""
    out: list[Event | None] = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            line = next((line for line in fh if line.strip()), None)
        out.append(Event(**orjson.loads(line)) if line is not None else None)
    return out


def _last_named_seq(path: Path) -> int | None:
    """The last seq of a merged file, from its name (``merged-FIRST-LAST``)."""
    parts = path.stem.split("-")
    return int(parts[-1]) if parts[0] == "merged" and parts[-1].isdigit() else None


def read_file(path: Path) -> Iterator[Event]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield Event(**orjson.loads(line))


# The columns of spool events as the Spark stage takes them: source, ts, seq, item,
# published (lists of equal length)
EventColumns = tuple[list[str | None], list[int], list[int], list[str | None], list[int | None]]


def decode_lines(
    lines: Sequence[str | bytes], on_bad: Callable[[str, str], None], max_seq: int | None = None
) -> EventColumns:
    """The events of spool lines (as Spark's text source reads the files), column by
    column, those up to ``max_seq`` if given; a line that is not an event goes to
    ``on_bad`` (its text, why) and is left out; a blank line is skipped.  Spark's JSON
    reader cost the JVM 3x more than reading lines (100,000 events: 0.61 s against
    0.22 s on 2 cores); an ``orjson.loads`` a line costs the stage 1.5 µs more."""
    sources: list[str | None] = []
    times: list[int] = []
    seqs: list[int] = []
    items: list[str | None] = []
    published: list[int | None] = []
    loads = orjson.loads
    for line in lines:
        try:
            record = loads(line)
            ts, seq = record["ts"], record["seq"]
            source, item, pub = record.get("source"), record.get("item"), record.get("published")
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            if isinstance(exc, orjson.JSONDecodeError) and not line.strip():
                continue
            on_bad(_text_of(line), _why(exc))
            continue
        # exact types: a bool is no time, and Spark's reader took no other kind either
        if not (
            type(ts) is int
            and type(seq) is int
            and (source is None or type(source) is str)
            and (item is None or type(item) is str)
            and (pub is None or type(pub) is int)
        ):
            on_bad(_text_of(line), "a field of the wrong type")
            continue
        if max_seq is not None and seq > max_seq:
            continue
        sources.append(source)
        times.append(ts)
        seqs.append(seq)
        items.append(item)
        published.append(pub)
    return sources, times, seqs, items, published


def _text_of(line: str | bytes) -> str:
    return line if isinstance(line, str) else line.decode("utf-8", "replace")


def _why(exc: Exception) -> str:
    if isinstance(exc, orjson.JSONDecodeError):
        return "not JSON"
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]}"
    return "not a JSON object"


def spool_line(event_line: bytes, seq: int) -> bytes:
    """The spool line of an event given as a JSON object line of its ``source``,
    integer ``ts``, ``item`` and integer ``published`` (as a replay reads them): that
    object with its ``seq`` (``decode_lines`` reads it as it reads write_events's)."""
    body = event_line.strip()
    return b'{"seq":%d,%s\n' % (seq, body[1:])


def write_lines(path: Path, lines: Sequence[bytes]) -> None:
    """Write spool lines (each with its newline) as one spool file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(b"".join(lines))


def write_synced(path: Path, events: Sequence[Event]) -> None:
    """Write events as one spool file, on disk when this returns (before the caller
    renames it into place)."""
    with open(path, "wb") as fh:
        _write_events(fh, events)
        fh.flush()
        os.fsync(fh.fileno())


def write_events(path: Path, events: Sequence[Event]) -> None:
    """Write events as one spool file (used by replay to feed Spark a finite list)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        _write_events(fh, events)


# Lines made at once when a file is written: orjson gives each line a 4 kB buffer, so
# the lines of a 100,000-item poll made together held 400 MB of the daemon
LINES_AT_ONCE = 1024


def _write_events(fh: BinaryIO, events: Sequence[Event]) -> None:
    for start in range(0, len(events), LINES_AT_ONCE):
        fh.write(b"".join(event_lines(events[start : start + LINES_AT_ONCE])))


def event_lines(events: Sequence[Event]) -> list[bytes]:
    """Events as JSON Lines (UTF-8, each with its newline), the lines the stage
    decodes (``decode_lines``).  orjson: ``json.dumps`` cost replay as much as the
    query."""
    return [
        orjson.dumps(
            {
                "source": event.source,
                "ts": event.ts,
                "seq": event.seq,
                "item": event.item,
                "published": event.published,
                "key": event.key,
            },
            option=orjson.OPT_APPEND_NEWLINE,
        )
        for event in events
    ]


__all__ = [
    "MICROS",
    "SPARK_SCHEMA_DDL",
    "EventColumns",
    "Spool",
    "decode_lines",
    "event_lines",
    "read_file",
    "read_spool",
    "spool_files",
    "spool_line",
    "write_events",
    "write_lines",
]
