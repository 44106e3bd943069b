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
import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark import Accumulator
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from roses_app.algebra.plan import Stream
from roses_app.errors import QueryError
from roses_app.spark.lower import OUTPUT_COLUMNS, LowerContext, compile_stream, with_watermark
from roses_app.spark.udfs import CountsParam
from roses_app.spool import SPARK_SCHEMA_DDL

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
) -> DataFrame:
    events = with_watermark(events_stream(spark, log_dir), lateness)
    context = LowerContext(events, namespaces, errors, lateness)
    return compile_stream(stream, context)


def error_counter(spark: SparkSession) -> Accumulator[dict[str, int]]:
    """Items dropped by failing item functions, per step id (read on the driver)."""
    return spark.sparkContext.accumulator({}, CountsParam())


@dataclass
class RunningQuery:
    stream: str
    query_id: str
    query: StreamingQuery


def _foreach(qid: str, sink: BatchSink) -> Callable[[DataFrame, int], None]:
    def handle(batch: DataFrame, batch_id: int) -> None:
        # Arrow transfer: several times faster than collect() for big batches.
        table = batch.toArrow()
        columns = [table.column(name).to_pylist() for name in OUTPUT_COLUMNS]
        # Union is a set union of events.  One event enters one micro-batch only, so
        # the copies that reached a union through several branches are all here.
        rows = list(dict.fromkeys(zip(*columns, strict=True)))
        sink(qid, batch_id, rows)

    return handle


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
) -> list[RunningQuery]:
    """Start one query per stream; ``once`` processes what is there and stops.

    ``on_fresh(stream, query_id)`` is called for a query with no checkpoint yet (a new
    or changed stream), before it starts: it will recompute from the whole spool.
    """
    checkpoint_root.mkdir(parents=True, exist_ok=True)
    running: list[RunningQuery] = []
    for stream in streams:
        qid = query_id(stream, namespaces)
        _drop_stale_checkpoints(checkpoint_root, stream.name, qid)
        if on_fresh is not None and not (checkpoint_root / qid).exists():
            on_fresh(stream.name, qid)
        writer = (
            stream_frame(spark, log_dir, stream, namespaces, errors, lateness)
            .writeStream.queryName(qid.replace("-", "_"))
            .option("checkpointLocation", str(checkpoint_root / qid))
            .foreachBatch(_foreach(qid, sink))
        )
        writer = (
            writer.trigger(availableNow=True)
            if once
            else writer.trigger(processingTime=f"{trigger_seconds} seconds")
        )
        running.append(RunningQuery(stream.name, qid, writer.start()))
    return running


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
