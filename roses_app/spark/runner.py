"""Running compiled streams as Structured Streaming queries.

One query per stream, each with its own checkpoint under
``checkpoints/<stream>-<plan fingerprint>``: adding or changing a stream in
feeds.yaml starts that stream afresh from the beginning of the spool without
disturbing the others.  Each query reads the spool's log folder as a file stream and
hands every micro-batch to a sink together with its batch id, so the sink can be
idempotent.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark import Accumulator
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from roses_app.algebra.plan import Stream
from roses_app.algebra.rewrite import rewrite_streams
from roses_app.algebra.sharing import SharedPlan, share
from roses_app.errors import QueryError
from roses_app.items import Event
from roses_app.spark.lower import (
    OUTPUT_COLUMNS,
    LowerContext,
    compile_stream,
    compile_view,
    with_watermark,
)
from roses_app.spark.udfs import CountsParam
from roses_app.spool import SPARK_SCHEMA_DDL, write_events

log = logging.getLogger(__name__)

Namespaces = tuple[tuple[str, str], ...]
BatchSink = Callable[[str, int, list[tuple[str, str, int, int, str]]], None]


def fingerprint(stream: Stream, namespaces: Namespaces) -> str:
    """Changes exactly when the stream's semantics change (origins do not count)."""
    text = repr((stream.plan, sorted(namespaces)))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def query_id(stream: Stream, namespaces: Namespaces) -> str:
    return f"{stream.name}-{fingerprint(stream, namespaces)}"


def events_stream(spark: SparkSession, log_dir: Path) -> DataFrame:
    """The spool's events as a streaming DataFrame."""
    return spark.readStream.schema(SPARK_SCHEMA_DDL).json(str(log_dir))


def stream_frame(
    spark: SparkSession,
    log_dir: Path,
    stream: Stream,
    namespaces: Namespaces,
    errors: Accumulator[dict[str, int]] | None = None,
    lateness: int = 0,
    views: Mapping[str, Path] | None = None,
) -> DataFrame:
    return compile_stream(stream, _context(spark, log_dir, namespaces, errors, lateness, views))


def _context(
    spark: SparkSession,
    log_dir: Path,
    namespaces: Namespaces,
    errors: Accumulator[dict[str, int]] | None,
    lateness: int,
    views: Mapping[str, Path] | None,
) -> LowerContext:
    frames = {
        name: with_watermark(events_stream(spark, folder), lateness)
        for name, folder in (views or {}).items()
    }
    events = with_watermark(events_stream(spark, log_dir), lateness)
    return LowerContext(events, namespaces, errors, lateness, frames)


def error_counter(spark: SparkSession) -> Accumulator[dict[str, int]]:
    """Items dropped by failing item functions, per step id (read on the driver)."""
    return spark.sparkContext.accumulator({}, CountsParam())


@dataclass
class RunningQuery:
    stream: str  # the stream's name, or the view's
    query_id: str
    query: StreamingQuery
    # starts the same query again from its checkpoint (after a failure)
    restart: Callable[[], StreamingQuery]


BatchHandler = Callable[[DataFrame, int], None]


def _foreach(qid: str, sink: BatchSink) -> BatchHandler:
    def handle(batch: DataFrame, batch_id: int) -> None:
        # Arrow transfer: several times faster than collect() for big batches.
        table = batch.toArrow()
        columns = [table.column(name).to_pylist() for name in OUTPUT_COLUMNS]
        # Union is a set union of events.  One event enters one micro-batch only, so
        # the copies that reached a union through several branches are all here.
        rows = list(dict.fromkeys(zip(*columns, strict=True)))
        sink(qid, batch_id, rows)

    return handle


@dataclass(frozen=True)
class QuerySetup:
    """What every query of one start needs."""

    spark: SparkSession
    namespaces: Namespaces
    log_dir: Path
    checkpoint_root: Path
    once: bool
    trigger_seconds: float
    errors: Accumulator[dict[str, int]] | None
    lateness: int
    views: Mapping[str, Path]

    def context(self) -> LowerContext:
        return _context(
            self.spark, self.log_dir, self.namespaces, self.errors, self.lateness, self.views
        )

    def start(self, name: str, qid: str, frame: DataFrame, handle: BatchHandler) -> RunningQuery:
        def launch() -> StreamingQuery:
            writer = (
                frame.writeStream.queryName(qid.replace("-", "_"))
                .option("checkpointLocation", str(self.checkpoint_root / qid))
                .foreachBatch(handle)
            )
            writer = (
                writer.trigger(availableNow=True)
                if self.once
                else writer.trigger(processingTime=f"{self.trigger_seconds} seconds")
            )
            return writer.start()

        return RunningQuery(name, qid, launch(), launch)


def start_queries(
    spark: SparkSession,
    streams: Sequence[Stream],
    namespaces: Namespaces,
    log_dir: Path,
    checkpoint_root: Path,
    sink: BatchSink,
    *,
    once: bool = False,
    trigger_seconds: float = 5.0,
    on_fresh: Callable[[str, str], None] | None = None,
    errors: Accumulator[dict[str, int]] | None = None,
    lateness: int = 0,
    views_root: Path | None = None,
) -> list[RunningQuery]:
    """Start one query per stream; ``once`` processes what is there and stops.

    With ``views_root``, a stateless sub-plan common to several streams is computed
    once, by a query of its own writing a view there, which those streams read
    (:mod:`roses_app.algebra.sharing`); with ``once``, views are finished first.
    ``on_fresh(stream, query_id)`` is called for a query with no checkpoint yet (a new
    or changed stream), before it starts: it will recompute from the whole spool.
    """
    checkpoint_root.mkdir(parents=True, exist_ok=True)
    # The rewritten plans run (and name the checkpoints); the reference evaluator runs
    # the plans as written, so the differential tests check the rewrites too.
    streams = rewrite_streams(streams, namespaces)
    shared = share(streams) if views_root is not None else SharedPlan({}, list(streams))
    folders = _prepare_views(views_root, checkpoint_root, shared)
    setup = QuerySetup(
        spark,
        namespaces,
        log_dir,
        checkpoint_root,
        once,
        trigger_seconds,
        errors,
        lateness,
        folders,
    )
    running: list[RunningQuery] = []
    for name, node in shared.views.items():
        frame = compile_view(node, name, setup.context())
        running.append(setup.start(name, name, frame, _view_writer(folders[name])))
    if once:
        await_all(running)  # the streams read what the views wrote
    for stream in shared.streams:
        qid = query_id(stream, namespaces)
        _drop_stale_checkpoints(checkpoint_root, stream.name, qid)
        if on_fresh is not None and not (checkpoint_root / qid).exists():
            on_fresh(stream.name, qid)
        frame = compile_stream(stream, setup.context())
        running.append(setup.start(stream.name, qid, frame, _foreach(qid, sink)))
    return running


def _prepare_views(
    views_root: Path | None, checkpoint_root: Path, shared: SharedPlan
) -> dict[str, Path]:
    """Folders of the current views; those of views no longer used are removed."""
    if views_root is None:
        return {}
    views_root.mkdir(parents=True, exist_ok=True)
    for old in views_root.iterdir():
        if old.name not in shared.views:
            log.info("dropping view %s: no stream shares it any more", old.name)
            shutil.rmtree(old)
            shutil.rmtree(checkpoint_root / old.name, ignore_errors=True)
    folders = {name: views_root / name for name in shared.views}
    for folder in folders.values():
        folder.mkdir(exist_ok=True)
    return folders


def _view_writer(folder: Path) -> BatchHandler:
    """Write a view's micro-batch as one spool-format file, named by its batch id: a
    replayed batch rewrites the same file (idempotent), atomically (rename)."""

    def handle(batch: DataFrame, batch_id: int) -> None:
        table = batch.toArrow()
        columns = [table.column(name).to_pylist() for name in ("source", "ts", "seq", "item")]
        rows = list(dict.fromkeys(zip(*columns, strict=True)))  # the union's set semantics
        if not rows:
            return
        events = [Event(source, ts, seq, item) for source, ts, seq, item in rows]
        tmp = folder.parent / f".{folder.name}-{batch_id}.tmp"
        write_events(tmp, events)
        os.replace(tmp, folder / f"batch-{batch_id:012d}.jsonl")

    return handle


def _drop_stale_checkpoints(root: Path, stream: str, current: str) -> None:
    """A stream whose plan changed starts again from the whole spool."""
    pattern = re.compile(re.escape(stream) + r"-[0-9a-f]{16}")
    for path in root.iterdir():
        if path.name != current and pattern.fullmatch(path.name):
            log.info("stream %s changed: dropping checkpoint %s", stream, path.name)
            shutil.rmtree(path)


def await_all(queries: Sequence[RunningQuery]) -> None:
    for running in queries:
        running.query.awaitTermination()
        exc = running.query.exception()
        if exc is not None:
            raise QueryError(f"stream {running.stream} failed: {exc}") from exc


def stop_gracefully(queries: Sequence[RunningQuery], timeout: float = 60.0) -> None:
    """Let a micro-batch in flight finish, then stop each query."""
    deadline = time.monotonic() + timeout
    for running in queries:
        while running.query.isActive and running.query.status.get("isTriggerActive"):
            if time.monotonic() > deadline:
                log.warning(
                    "stream %s: batch still running after %.0fs, stopping it",
                    running.stream,
                    timeout,
                )
                break
            time.sleep(0.1)
        running.query.stop()
