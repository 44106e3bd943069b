"""Running the global plan as a few Structured Streaming queries.

* The **stateless query** reads the spool once (one file stream) and runs the fused
  stage (:mod:`roses_app.spark.fused`).  Its sink hands the stateless streams' rows
  to the store, one transaction per micro-batch for all of them, and writes the
  frontier rows (the inputs of stateful nodes, heartbeats, a time mark) as one
  Parquet file per micro-batch into the *frontier log*.
* Each **stateful generation** (:mod:`roses_app.spark.layout`) reads the frontier log
  once (one file stream, plus its own backfill) and runs all its stateful streams in
  one query (:mod:`roses_app.spark.generation_frame`): each stateful node the streams'
  stateless parts read is lowered once (one handler per node type), their stateless
  tails run in one fused pass, and the output is written to the store once per
  micro-batch.

Exactly once: the store records each (query, batch id) it applied, in the same
transaction as the rows; a frontier file is named by its batch id and written
atomically before that transaction, so a replayed micro-batch rewrites the same file.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pyspark import Accumulator
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from roses_app.algebra.plan.operators import Node, Stream
from roses_app.algebra.planner.globalplan import GlobalPlan
from roses_app.algebra.planner.program import Program, build_program
from roses_app.algebra.planner.rewrite import rewrite_streams
from roses_app.config.model import LimitSettings, SparkSettings
from roses_app.heap import collector_paused, freeze_long_lived
from roses_app.spark.counts import CountsParam
from roses_app.spark.fresh_checkpoint import finish_rebase, read_epoch, rebase_due, rebase_stateless
from roses_app.spark.frontier_log import FrontierLog
from roses_app.spark.fused import fused_frame
from roses_app.spark.fusedrows import FusedRows, OutputRow, split_rows
from roses_app.spark.generation_frame import stateful_frame, under_one_key
from roses_app.spark.layout import (
    STATELESS_QUERY,
    Generation,
    Layout,
    Ledger,
    Planned,
    clear_unfinished_writes,
    plan_layout,
    plan_streams,
    remove_query,
    save_generation,
)
from roses_app.spark.lower import (
    OUTPUT_COLUMNS,
    LowerContext,
    with_watermark,
)
from roses_app.spark.queries import RunningQuery, abandonable, await_all
from roses_app.spark.session import shuffle_partitions
from roses_app.spool import archive_of, last_archived_seq

log = logging.getLogger(__name__)

Namespaces = tuple[tuple[str, str], ...]


class Sink(Ledger, Protocol):
    def write_batch(
        self, query_id: str, batch_id: int, rows: list[OutputRow], position: int | None = None
    ) -> bool:
        """Apply one micro-batch's rows (and the spool position it reached) once."""
        ...

    def write_fused(
        self, query_id: str, batch_id: int, rows: FusedRows, position: int | None = None
    ) -> bool:
        """:meth:`write_batch` for the stateless streams' rows as the stage made them."""
        ...

    def restart_stream(self, stream: str) -> int:
        """Forget a stream's output: it is computed again."""
        ...

    def restart_streams(self, streams: Sequence[str]) -> int:
        """:meth:`restart_stream` of each (at once)."""
        ...

    def set_versions(self, versions: dict[str, str]) -> None:
        """Record the plans of stateless streams whose output is now complete."""
        ...

    def forget_query(self, query_id: str, *, keep_position: bool = False) -> None:
        """The query starts without a checkpoint: its batch ids start again at 0 (and
        its position, unless it goes on from where it was)."""
        ...


# At most this much of the spool per micro-batch (Spark takes at least one file): a
# backlog (a fresh start over a big spool, a long pause) runs as several batches, so
# the driver never holds the output of the whole backlog at once.
MAX_BATCH_BYTES = 64 * 1024 * 1024


def events_stream(
    spark: SparkSession, log_dir: Path, max_batch_bytes: int = MAX_BATCH_BYTES
) -> DataFrame:
    """The spool's lines as a streaming DataFrame (the fused stage decodes them);
    the files of committed batches are moved to the spool's archive, so each trigger
    lists only what is new."""
    reader = spark.readStream.option("maxBytesPerTrigger", max_batch_bytes)
    reader = reader.option("cleanSource", "archive")
    reader = reader.option("sourceArchiveDir", str(archive_of(log_dir)))
    return reader.text(str(log_dir))


def spool_events(spark: SparkSession, log_dir: Path) -> DataFrame:
    """Every line of the spool, archived or not (a batch read, for backfills)."""
    archive = archive_of(log_dir)
    archive.mkdir(parents=True, exist_ok=True)
    reader = spark.read.option("recursiveFileLookup", "true")
    return reader.text([str(log_dir), str(archive)])


def error_counter(spark: SparkSession) -> Accumulator[dict[str, int]]:
    """Items dropped by failing item functions, per step id (read on the driver)."""
    return spark.sparkContext.accumulator({}, CountsParam())


BatchHandler = Callable[[DataFrame, int], int]  # returns the rows it wrote
BatchHook = Callable[[str, int, float], None]  # query, rows written, seconds


@dataclass(frozen=True)
class Engine:
    """What every query of one start needs."""

    spark: SparkSession
    namespaces: Namespaces
    log_dir: Path
    data: Path  # checkpoints/ and frontier/ live here
    sink: Sink
    once: bool = False
    trigger_seconds: float = SparkSettings.trigger_seconds
    errors: Accumulator[dict[str, int]] | None = None
    lateness: int = 0
    max_batch_bytes: int = MAX_BATCH_BYTES
    on_batch: BatchHook | None = None  # told of each micro-batch (metrics)
    # the spool's items by seq, when the caller holds them (a replay): the stateless
    # query's rows then carry only the items it made (see run_program's inputs_held)
    inputs: Sequence[str | None] | None = None
    # what an expression may take on one item in the fused stage (settings.limits)
    limits: LimitSettings = field(default_factory=LimitSettings)

    @property
    def checkpoints(self) -> Path:
        return self.data / "checkpoints"

    @property
    def frontier(self) -> FrontierLog:
        return FrontierLog(self.data / "frontier")

    def launch(
        self, qid: str, frame: DataFrame, handle: BatchHandler, partitions: int | None = None
    ) -> StreamingQuery:
        """Start the query (with ``partitions``: that many shuffle partitions instead of
        the session's, when it has no checkpoint yet; a checkpoint keeps its own)."""
        clear_unfinished_writes(self.checkpoints / qid)
        writer = (
            frame.writeStream.queryName(qid.replace("-", "_"))
            .option("checkpointLocation", str(self.checkpoints / qid))
            .foreachBatch(self.timed(qid, handle))
        )
        if self.once:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.trigger_seconds} seconds")
        with shuffle_partitions(self.spark, partitions):
            return writer.start()

    def timed(self, qid: str, handle: BatchHandler) -> Callable[[DataFrame, int], None]:
        """``handle``, telling ``on_batch`` the rows it wrote and the time it took (the
        micro-batch's computation runs inside it: the handler collects the result)."""
        hook = self.on_batch
        handle = abandonable(qid, handle)

        def run(batch: DataFrame, batch_id: int) -> None:
            started = time.perf_counter()
            rows = handle(batch, batch_id)
            if hook is not None:
                hook(qid, rows, time.perf_counter() - started)

        return run

    def start(
        self,
        name: str,
        streams: frozenset[str],
        frame: DataFrame,
        handle: BatchHandler,
        partitions: int | None = None,
    ) -> RunningQuery:
        def launch() -> StreamingQuery:
            return self.launch(name, frame, handle, partitions)

        return RunningQuery(name, streams, launch(), launch)


def prepare(engine: Engine, streams: Sequence[Stream] | Planned) -> Layout:
    """Rewrite the streams (unless planned already), decide the queries, clear what
    is stale."""
    planned = streams if isinstance(streams, Planned) else plan_streams(streams, engine.namespaces)
    engine.checkpoints.mkdir(parents=True, exist_ok=True)
    folder = engine.checkpoints / STATELESS_QUERY
    finish_rebase(folder, lambda: engine.sink.forget_query(STATELESS_QUERY, keep_position=True))
    if folder.exists() and rebase_due(folder):
        rebase_stateless(engine.checkpoints, engine.log_dir, engine.sink)
    archived = 0
    if not (engine.checkpoints / STATELESS_QUERY).exists():
        # Everything starts from the beginning of the spool: no older state or
        # frontier row may mix in (and earlier layouts' folders go).
        for old in engine.checkpoints.iterdir():
            shutil.rmtree(old, ignore_errors=True)
        engine.frontier.clear()
        engine.sink.forget_query(STATELESS_QUERY)
        archived = last_archived_seq(archive_of(engine.log_dir))
    cores = engine.spark.sparkContext.defaultParallelism
    layout = plan_layout(
        planned.streams,
        engine.namespaces,
        engine.checkpoints,
        engine.sink,
        archived,
        cores,
        plan=planned.plan,
    )
    for name in layout.removed:
        log.info("stream %s is no longer in the config: forgetting its output", name)
        engine.sink.restart_stream(name)
    for qid in layout.dropped:
        remove_query(engine.checkpoints, qid)
        engine.frontier.remove(qid)
    return layout


def start_queries(engine: Engine, streams: Sequence[Stream] | Planned) -> list[RunningQuery]:
    """Start the queries of the global plan of ``streams`` (or of what
    :func:`plan_streams` made of them); with ``engine.once`` they process what the
    spool holds and stop (the stateless query first: the stateful ones read what it
    writes)."""
    layout = prepare(engine, streams)
    backfill_stateless(engine, layout)
    running: list[RunningQuery] = []
    if layout.query_ids():
        running.append(start_stateless(engine, layout))
    if engine.once:
        await_all(running)
    for generation in layout.generations:
        if generation.fresh:
            backfill_generation(engine, layout, generation)
        running.append(start_generation(engine, generation))
    if not engine.once:
        # the plans live as long as the queries; a finite run is not worth the full
        # collection (0.7 s over a replay's events at 10,000 streams)
        freeze_long_lived()
    return running


# -- the stateless query ---------------------------------------------------------------


def start_stateless(engine: Engine, layout: Layout) -> RunningQuery:
    frame, handle = stateless_query(engine, layout)
    names = frozenset(s.name for s in layout.stateless)
    return engine.start(STATELESS_QUERY, names, frame, handle)


def stateless_query(engine: Engine, layout: Layout) -> tuple[DataFrame, BatchHandler]:
    """The stateless query's frame (the fused stage over the spool) and its sink."""
    plan = layout.plan
    frontier = plan.frontier(s for g in layout.generations for s in g.streams if s.name in g.live)
    program, streams_of = stateless_program(engine, plan, layout.stateless, frontier)
    log.info("stateless query: %s", program.describe())
    keys = {plan.id_of(node) for node in frontier}
    events = events_stream(engine.spark, engine.log_dir, engine.max_batch_bytes)
    # frontier rows are read by other queries: they carry their items
    inputs = None if frontier else engine.inputs
    frame = fused_frame(
        events, program, engine.errors, inputs_held=inputs is not None, limits=engine.limits
    )
    readers = [g.id for g in layout.generations]
    for generation in readers:
        engine.frontier.prepare(generation)
    handle = stateless_handler(
        engine, program, streams_of, keys if frontier else None, readers, inputs
    )
    return frame, handle


def stateless_program(
    engine: Engine, plan: GlobalPlan, streams: Sequence[Stream], frontier: Sequence[Node] = ()
) -> tuple[Program, dict[str, list[str]]]:
    """The fused program of ``streams`` (and of the frontier nodes), and which streams
    each output node id stands for (equal plans are one output)."""
    # one output per node: streams with equal plans, or a stream root that is also a
    # frontier node, share it, so no row comes out twice
    nodes = dict.fromkeys([*(s.plan for s in streams), *frontier])
    outputs = [(node, plan.id_of(node)) for node in nodes]
    program = build_program(outputs, engine.namespaces, heartbeats=bool(frontier))
    streams_of: dict[str, list[str]] = {}
    for stream in streams:
        streams_of.setdefault(plan.id_of(stream.plan), []).append(stream.name)
    return program, streams_of


def stateless_handler(
    engine: Engine,
    program: Program,
    streams_of: dict[str, list[str]],
    frontier_keys: set[str] | None,
    readers: Sequence[str],
    inputs: Sequence[str | None] | None = None,
) -> BatchHandler:
    def handle(batch: DataFrame, batch_id: int) -> int:
        table = batch.toArrow()
        if frontier_keys is None:  # no frontier: the rows go to the sink as they came
            fused = FusedRows(table, program, streams_of, inputs)
            with collector_paused():  # the store makes a row per stream an item reaches
                engine.sink.write_fused(STATELESS_QUERY, batch_id, fused, fused.latest_seq())
            return fused.count()
        with collector_paused():  # a row per stream an item reaches: many small objects
            rows, frontier, latest_ts, latest_seq = split_rows(
                table, program, streams_of, frontier_keys
            )
            if frontier or latest_seq:
                epoch = read_epoch(engine.checkpoints / STATELESS_QUERY)
                engine.frontier.write_live(
                    readers, batch_id, frontier, latest_ts, latest_seq, epoch
                )
            engine.sink.write_batch(STATELESS_QUERY, batch_id, rows, latest_seq or None)
            written = len(rows)
            del rows, frontier  # freed while the collector is off: no collection walks them
        return written

    return handle


def backfill_stateless(engine: Engine, layout: Layout) -> None:
    """New or changed stateless streams: forget their old output, compute them over
    the spool the stateless query has already read, then record them as published."""
    if not layout.new_stateless:
        return
    engine.sink.restart_streams([stream.name for stream in layout.new_stateless])
    if layout.position > 0:
        plan = layout.plan
        log.info(
            "computing %d new or changed stream(s) over the spool read so far: %s",
            len(layout.new_stateless),
            ", ".join(s.name for s in layout.new_stateless),
        )
        program, streams_of = stateless_program(engine, plan, layout.new_stateless)
        table = _backfill_table(engine, program, layout.position)
        rows, _, _, _ = split_rows(table, program, streams_of, None)
        engine.sink.write_batch(f"backfill-{time.time_ns()}", 0, rows)
    engine.sink.set_versions({s.name: layout.fingerprints[s.name] for s in layout.new_stateless})


def _backfill_table(engine: Engine, program: Program, position: int) -> object:
    """The fused program over the spool events up to ``position`` (a batch job)."""
    events = spool_events(engine.spark, engine.log_dir)
    frame = fused_frame(events, program, engine.errors, max_seq=position, limits=engine.limits)
    return frame.toArrow()


# -- stateful generations --------------------------------------------------------------


def backfill_generation(engine: Engine, layout: Layout, generation: Generation) -> None:
    """A new generation: forget its streams' old output; its frontier rows up to the
    stateless query's position come from a backfill, the later ones from the log."""
    for name in generation.live:
        engine.sink.restart_stream(name)
    engine.sink.forget_query(generation.id)
    folder = engine.checkpoints / generation.id
    if generation.boundary > 0:
        plan = layout.plan
        nodes = plan.frontier(generation.streams)
        program, _ = stateless_program(engine, plan, (), nodes)
        keys = {plan.id_of(n) for n in nodes}
        table = _backfill_table(engine, program, generation.boundary)
        _, frontier, latest_ts, latest_seq = split_rows(table, program, {}, keys)
        engine.frontier.write_backfill(generation.id, frontier, latest_ts, latest_seq)
    save_generation(folder, generation)


def start_generation(engine: Engine, generation: Generation) -> RunningQuery:
    frame = generation_frame(engine, generation)
    handle = output_handler(engine, generation)
    # all under one key: one partition (the others would hold nothing, yet each costs a
    # state store commit and a Python worker in every micro-batch)
    partitions = 1 if under_one_key(generation.streams, engine.namespaces) else None
    return engine.start(generation.id, generation.live, frame, handle, partitions)


def generation_frame(engine: Engine, generation: Generation) -> DataFrame:
    """All the stateful streams of a generation as one frame of output rows, over the
    frontier log (live rows after its boundary, its backfill before)."""
    events = with_watermark(engine.frontier.stream(engine.spark, generation.id), engine.lateness)
    context = LowerContext(
        events,
        engine.namespaces,
        engine.errors,
        engine.lateness,
        late_operators=generation.late_operators,
    )
    return stateful_frame(context, generation.streams, generation.boundary, generation.id)


def query_frames(
    engine: Engine, streams: Sequence[Stream], *, rewritten: bool = False
) -> tuple[Layout, list[tuple[str, DataFrame]]]:
    """What ``start_queries`` would run now, without starting or changing anything
    (for ``roses explain``): the layout and each query's frame (``rewritten``: the
    streams are rewritten already)."""
    if not rewritten:
        streams = rewrite_streams(streams, engine.namespaces)
    cores = engine.spark.sparkContext.defaultParallelism
    layout = plan_layout(streams, engine.namespaces, engine.checkpoints, engine.sink, 0, cores)
    frames = [(STATELESS_QUERY, stateless_query(engine, layout)[0])] if layout.query_ids() else []
    frames += [(g.id, generation_frame(engine, g)) for g in layout.generations]
    return layout, frames


def output_handler(engine: Engine, generation: Generation) -> BatchHandler:
    def handle(batch: DataFrame, batch_id: int) -> int:
        # Arrow transfer: several times faster than collect() for big batches.
        table = batch.toArrow()
        columns = [table.column(name).to_pylist() for name in OUTPUT_COLUMNS]
        # Union is a set union of events: the copies that reached it through several
        # branches are all in this micro-batch.  Streams no longer in the config
        # (the generation runs its plans as they were) publish nothing.
        rows = [r for r in dict.fromkeys(zip(*columns, strict=True)) if r[0] in generation.live]
        engine.sink.write_batch(generation.id, batch_id, rows)
        return len(rows)

    return handle
