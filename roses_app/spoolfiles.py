"""The spool's files: their lines, written and read without the index.

A spool file is JSON Lines, one event a line (``source``, ``ts``, ``seq``, ``item``,
``published``, ``key``), named by the first seq it holds (``SEQ-RANDOM.jsonl``, or
``merged-FIRST-LAST.jsonl`` once compacted).  :class:`~roses_app.spool.Spool` writes
them and keeps their index; Spark's stage (``decode_lines``), replays, pull queries
and the console read them here, while a daemon may be appending, archiving and
compacting.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import orjson

from roses_app.errors import SpoolError
from roses_app.items import Event


def first_seq(path: Path) -> int:
    """The first seq of a spool file, from its name (``SEQ-…`` or ``merged-SEQ-…``)."""
    parts = path.stem.split("-")
    digits = parts[1] if parts[0] == "merged" else parts[0]
    return int(digits) if digits.isdigit() else 0


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
        ends = last_named_seq(path)
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


def last_named_seq(path: Path) -> int | None:
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
