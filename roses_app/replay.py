"""``roses replay``: evaluate the configured streams on a finite event list.

Input: JSON Lines, one ``{"source": NAME, "ts": ISO-8601 or integer, "item": XML}``
per line, in arrival order (``ts`` is the ingest time), with an optional
``"published"`` time of the same kind (the event time of sources read with
``time: published``).  Output: ``DIR/STREAM.jsonl`` (split outputs ``DIR/STREAM/VALUE.jsonl``),
one ``{"ts": ..., "item": ...}`` per output event in output order.  Integer times
are abstract ticks and come out as integers; ISO-8601 times come out as ISO-8601 UTC.
Both engines write identical files.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO

import orjson

from roses_app.algebra.plan.operators import Split
from roses_app.algebra.reference.evaluator import RefEvent, RefInput, evaluate_streams
from roses_app.algebra.reference.registry import ordered
from roses_app.config.model import Config
from roses_app.dates import DEFAULT_MAX_FUTURE, plausible_published
from roses_app.errors import RosesError
from roses_app.heap import collector_paused
from roses_app.items import Event, check_item, iso8601, iso_micros, part_filename
from roses_app.replay_sink import FusedFiles, MemorySink, Outputs
from roses_app.writes import ParallelWrites

log = logging.getLogger(__name__)

Progress = Callable[[str], None] | None


class ReplayInputError(RosesError, ValueError):
    """The events file has mistakes (each reported with its line)."""


class ReplayReadError(RosesError, RuntimeError):
    """The process that reads and spools a replay's events failed."""


@dataclass(frozen=True)
class EventList:
    events: list[RefInput]
    iso_times: bool  # True: ts were ISO-8601 and are µs since the epoch


@dataclass(frozen=True)
class Spooled:
    """Events already spooled for Spark (:func:`write_spool`) under ``folder``, and
    their items by seq (the queries' sink takes them from there)."""

    folder: Path
    count: int
    iso_times: bool
    items: list[str | None]


def items_by_seq(events: Sequence[RefInput]) -> list[str | None]:
    """The events' items, at the index of their seq (None where no event has it)."""
    items: list[str | None] = [None] * (max((e.seq for e in events), default=0) + 1)
    for event in events:
        items[event.seq] = event.item
    return items


def _parse_ts(value: object) -> tuple[int, bool]:
    if isinstance(value, bool):
        raise ValueError("ts must be an integer or an ISO-8601 string, not a boolean")
    if isinstance(value, int):
        return value, False
    if isinstance(value, str):
        try:
            return iso_micros(value), True
        except ValueError as exc:
            raise ValueError(f"ts {value!r} is not ISO-8601 (e.g. 2024-05-01T12:00:00Z)") from exc
    raise ValueError(f"ts must be an integer or an ISO-8601 string, got {type(value).__name__}")


KEYS = frozenset({"source", "ts", "item", "published"})


def _parse_line(line: bytes) -> tuple[str, int, bool, str | None, int | None]:
    """source, ts, whether ts is ISO-8601, item, published (same kind as ts).  The
    line stays bytes: orjson checks its UTF-8 too, so that a byte that is not UTF-8
    is a mistake of its line, reported with the others."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(record, dict):
        raise ValueError("each line must be a JSON object")
    # the checks cost no set or list on a well-formed line (100,000 lines a replay)
    item = record.get("item", "")
    # A heartbeat ({"ts": T, "item": null}) only says that time T has come.
    if "ts" not in record or "item" not in record or (item is not None and "source" not in record):
        needed = ("ts", "item") if item is None else ("source", "ts", "item")
        missing = [k for k in needed if k not in record]
        raise ValueError(f"missing key(s): {', '.join(missing)}")
    if not KEYS.issuperset(record):
        extra = sorted(set(record) - KEYS)
        raise ValueError(
            f"unknown key(s): {', '.join(extra)} (expected: source, ts, item, published)"
        )
    source = record.get("source", "")
    if not isinstance(source, str) or not (item is None or isinstance(item, str)):
        raise ValueError("source and item must be strings (item null: a heartbeat)")
    if item is not None:
        check_item(item)  # a broken item is an input mistake, reported with its line
    ts, iso = _parse_ts(record["ts"])
    published = record.get("published")
    if published is not None:
        published, published_iso = _parse_ts(published)
        if published_iso != iso:
            raise ValueError("published must be of the same kind as ts (both ISO-8601 or ticks)")
    return source, ts, iso, item, published


def open_events(path: Path) -> BinaryIO:
    """The events file, open; a file that cannot be read is a ReplayInputError."""
    try:
        return open(path, "rb")
    except OSError as exc:
        raise ReplayInputError(
            f"{path}: cannot read the events file ({exc.strerror or exc}); give the path "
            "of a JSON Lines file with --events"
        ) from exc


def read_events(
    path: Path,
    max_future: int = DEFAULT_MAX_FUTURE,
    opened: BinaryIO | None = None,
    lines: list[bytes] | None = None,
) -> EventList:
    """Read and check the whole file (``opened``: its handle, closed here; ``lines``:
    each event's line is appended to it, as read); all mistakes are reported
    together.  The line order is the arrival order.  An ISO-8601 ``published`` time
    that cannot be one (before 1990, or more than ``max_future`` µs after ``ts``) is
    logged and treated as missing, as the daemon does; integer ticks are taken as
    they are."""
    events: list[RefInput] = []
    kinds: set[bool] = set()
    problems: list[str] = []
    with opened or open_events(path) as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                source, ts, iso, item, published = _parse_line(line)
            except (ValueError, SyntaxError) as exc:  # bad JSON, our checks; lxml: SyntaxError
                problems.append(f"{path}:{number}: {exc}")
                continue
            kinds.add(iso)
            if iso and published is not None:
                checked = plausible_published(published, ts, max_future)
                if checked is None:
                    log.warning(
                        "%s:%d: source %s: published %s is not plausible at ts %s (before "
                        "1990 or too far ahead): the item keeps its ingest time",
                        path, number, source, iso8601(published), iso8601(ts),
                    )  # fmt: skip
                published = checked
            events.append(RefInput(source, ts, number, item, published))
            if lines is not None:
                lines.append(line)
    if len(kinds) > 1:
        problems.append(f"{path}: mixes integer and ISO-8601 times; use one kind")
    if problems:
        raise ReplayInputError("\n".join(problems))
    return EventList(events, iso_times=kinds == {True})


def run_reference(config: Config, events: EventList) -> Outputs:
    streams = [stream.stream for stream in config.streams.values()]
    return evaluate_streams(
        streams, events.events, config.settings.namespaces, lateness=config.settings.lateness
    )


def spool_log(work: Path) -> Path:
    """Where a replay working in ``work`` spools its events for Spark."""
    return work / "spool" / "log"


def write_spool(
    work: Path, events: Sequence[RefInput], files: int, lines: Sequence[bytes] | None = None
) -> None:
    """Spool ``events`` for Spark in ``files`` files (one per core: Spark reads each
    file as a partition at least, and cuts larger ones to fill the cores).  ``lines``:
    their lines as read, when their times are integers (as the spool's): each is then
    its spool line with its seq put in, not made again from the event (0.5 s of the
    0.6 s 100,000 events took, while the JVM starts)."""
    from roses_app.spoolfiles import spool_line, write_events, write_lines

    size = -(-len(events) // max(1, files)) or 1
    with collector_paused():  # an Event per event, no cycle among them
        for n in range(0, max(len(events), 1), size):
            chunk = events[n : n + size]
            path = spool_log(work) / f"events-{n:012d}.jsonl"
            if lines is None:
                made = [Event(e.source, e.ts, e.seq, e.item, e.published) for e in chunk]
                write_events(path, made)  # its lines made a few at a time (see spool)
            else:
                raw = lines[n : n + size]
                spooled = [spool_line(line, e.seq) for e, line in zip(chunk, raw, strict=True)]
                write_lines(path, spooled)


def run_spark(
    config: Config, events: EventList, work_dir: Path | None = None, progress: Progress = None
) -> Outputs:
    """Evaluate through the Spark engine: the same queries the daemon runs (with
    ``progress``, a line of what they have done about every second), spooling the
    events under ``work_dir``; each stream's events in event order."""
    return sink_outputs(config, spark_sink(config, events, work_dir, progress).collected)


def spark_sink(
    config: Config,
    events: EventList | Spooled,
    work_dir: Path | None = None,
    progress: Progress = None,
) -> MemorySink:
    """What the queries wrote, evaluating ``events`` as :func:`run_spark` does: spooled
    in a new folder under ``work_dir`` (removed after), or already (the caller removes
    that folder)."""
    from roses_app.spark.queries import await_all
    from roses_app.spark.runner import Engine, start_queries
    from roses_app.spark.session import build_session

    if isinstance(events, Spooled):
        work, inputs, total = events.folder, events.items, events.count
    else:
        work = Path(tempfile.mkdtemp(prefix="roses-replay-", dir=work_dir))
        inputs, total = items_by_seq(events.events), len(events.events)
    sink = MemorySink(list(config.streams))
    try:
        spark = build_session(
            config.settings.spark,
            config.settings.data_dir / "cache",
            finite=True,
            limits=config.settings.limits,
        )
        if isinstance(events, EventList):
            write_spool(work, events.events, spark.sparkContext.defaultParallelism)
        engine = Engine(
            spark,
            config.settings.namespaces,
            spool_log(work),
            work,
            sink,
            once=True,
            lateness=config.settings.lateness,
            inputs=inputs,
            limits=config.settings.limits,
        )
        running = start_queries(engine, [stream.stream for stream in config.streams.values()])
        await_all(running, progress, total_events=total)
    finally:
        if isinstance(events, EventList):
            shutil.rmtree(work, ignore_errors=True)
    return sink


def sink_outputs(config: Config, collected: Outputs) -> Outputs:
    """Each stream's events in event order, an empty "" part for a stream that is not
    a split and has none."""
    for name, stream in config.streams.items():
        if not isinstance(stream.plan, Split):
            collected[name].setdefault("", [])
    with collector_paused():  # a sort key per event
        return {
            name: {part: ordered(evs) for part, evs in parts.items()}
            for name, parts in collected.items()
        }


def write_outputs(
    outputs: Outputs, out_dir: Path, iso_times: bool, fused: FusedFiles | None = None
) -> list[Path]:
    """Write DIR/STREAM.jsonl, or DIR/STREAM/VALUE.jsonl for split outputs, one
    ``json.dumps({"ts": ..., "item": ...}, ensure_ascii=False)`` line per event.  The
    line of an event many streams have (a thousand subscriptions matching one item)
    is made once and written as the same bytes to each file.  ``fused``: the files
    of streams whose events are not in ``outputs`` (their parts there are empty)."""
    written: list[Path] = []
    # id of the item object (which the events hold alive) -> its time and line:
    # hashing and comparing the text of each of a million lines cost more than
    # making them, and a look-up by a plain int costs less than by (ts, id)
    lines: dict[int, tuple[int, bytes]] = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    with collector_paused(), ParallelWrites() as writes:
        for stream, parts in outputs.items():
            more = fused.parts(stream) if fused is not None else []
            if any(parts) or any(more):
                (out_dir / stream).mkdir(parents=True, exist_ok=True)
            for part in sorted({*parts, *more}):
                name = f"{stream}.jsonl" if part == "" else f"{stream}/{part_filename(part)}.jsonl"
                path = out_dir / name
                data = fused.data(stream, part) if fused is not None and more else None
                if data is None:
                    data = _joined(parts.get(part, ()), lines, iso_times)
                writes.submit(path.write_bytes, data)
                written.append(path)
            if not parts and not more:
                (out_dir / stream).mkdir(parents=True, exist_ok=True)
    return written


def _joined(events: Sequence[RefEvent], cache: dict[int, tuple[int, bytes]], iso: bool) -> bytes:
    """The events' output lines, each made once per item object and time (the loop
    is inline: a call per event doubled the cost of writing a replay's outputs)."""
    get = cache.get
    chunks: list[bytes] = []
    add = chunks.append
    for event in events:
        found = get(id(event.item))
        if found is None or found[0] != event.ts:
            found = cache[id(event.item)] = (event.ts, output_line(event, iso))
        add(found[1])
    return b"".join(chunks)


def output_line(event: RefEvent, iso_times: bool) -> bytes:
    """The bytes of ``json.dumps({"ts": ..., "item": ...}, ensure_ascii=False)`` and a
    newline: a dict and ``json.dumps`` per line cost a replay as much as its engine."""
    return _line(event.ts, event.item, iso_times)


def _line(ts: int, item: str | None, iso_times: bool) -> bytes:
    # orjson escapes strings as json.dumps(ensure_ascii=False) does (the test of
    # output_line holds it to that for any text), in 0.4 of the time of json's own
    # C encoder and the UTF-8 encoding after it
    text = orjson.dumps(iso8601(ts)) if iso_times else str(ts).encode()
    return b"".join((b'{"ts": ', text, b', "item": ', orjson.dumps(item), b"}\n"))


def replay(
    config: Config,
    events_path: Path,
    out_dir: Path,
    engine: str,
    progress: Progress = None,
) -> list[Path]:
    if engine == "reference":
        events = read_events(events_path, config.settings.max_future)
        return write_outputs(run_reference(config, events), out_dir, events.iso_times)
    if engine == "spark":
        # The driver only holds events and rows (no cycles among them): collections
        # walking them cost a 100,000-item replay at 10,000 streams 2 s.
        work = Path(tempfile.mkdtemp(prefix="roses-replay-"))
        try:
            with collector_paused():
                spooled = _read_while_spark_starts(config, events_path, work)
                sink = spark_sink(config, spooled, progress=progress)
                iso = spooled.iso_times
                fused = FusedFiles(sink.take_fused(), partial(_line, iso_times=iso))
                outputs = sink_outputs(config, sink.collected)
                return write_outputs(outputs, out_dir, iso, fused)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    raise ValueError(f"unknown engine {engine!r} (expected spark or reference)")


def _read_while_spark_starts(config: Config, events_path: Path, work: Path) -> Spooled:
    """The events, read, checked and spooled in ``work`` by a child process while this
    one starts Spark, which boots the JVM in its own process: the three overlap (a
    second or two of a replay).  A thread did it before; its JSON and XML work held
    the GIL that the start of Spark's py4j gateway waits for, a few ms at each call."""
    from roses_app.spark.session import build_session

    open_events(events_path).close()  # a path that cannot be read fails now, not after
    # one file per core of this machine, as for a local master; Spark cuts the files
    # into more partitions when it has more cores (JSON Lines can be split)
    files = os.cpu_count() or 1
    # forked (cheap) before this process starts a JVM; the child only reads and writes
    # files, and logs (logging's locks are reset in a forked child)
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        reading = pool.submit(_read_and_spool, events_path, config.settings.max_future, work, files)
        build_session(config.settings.spark, config.settings.data_dir / "cache", finite=True)
        try:
            return reading.result()
        except BrokenProcessPool as exc:
            raise ReplayReadError(
                f"{events_path}: the process reading the events ended abruptly (killed, or "
                "out of memory?); run the replay again, on fewer events if memory is short"
            ) from exc
        except OSError as exc:  # the spool's files (ReplayInputError: the events file)
            raise ReplayReadError(
                f"cannot spool the events in {work} ({exc.strerror or exc}); free space in "
                "the temporary folder (TMPDIR) and run the replay again"
            ) from exc


def _read_and_spool(events_path: Path, max_future: int, work: Path, files: int) -> Spooled:
    lines: list[bytes] = []
    events = read_events(events_path, max_future, lines=lines)
    write_spool(work, events.events, files, None if events.iso_times else lines)
    return Spooled(work, len(events.events), events.iso_times, items_by_seq(events.events))


__all__: Sequence[str] = [
    "MemorySink",
    "Outputs",
    "ReplayInputError",
    "ReplayReadError",
    "Spooled",
    "open_events",
    "read_events",
    "replay",
    "run_reference",
    "run_spark",
    "sink_outputs",
    "spark_sink",
    "spool_log",
    "write_outputs",
    "write_spool",
]
