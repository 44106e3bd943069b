"""The fused stateless stage on Spark: one ``mapInArrow`` over the spool's events.

Every Arrow batch of a partition goes through :func:`roses_app.xmlfn.fused.run_program`
once: each item is parsed once and every stateless step of the global plan runs on
that tree.  The stage emits ``outputs, part, ts, seq, item, guid, arrival`` rows: each
output item once, with the indexes of the program's outputs (stream roots, frontier
nodes) that have it, heartbeats (no output, no item), and a time mark per batch;
``ts`` is the item's time (its publication time for a source read so), ``arrival``
its input event's ingest time.  Spark spreads partitions over cores and executors
as for any ``mapInArrow``.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark import Accumulator
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from roses_app.algebra.planner.program import Program, Step
from roses_app.config.model import LimitSettings
from roses_app.heap import collector_paused
from roses_app.spark import counts
from roses_app.spark.registry import OUTPUT_COLUMNS
from roses_app.spoolfiles import decode_lines

log = logging.getLogger(__name__)
BAD_LINE = "spool"  # the key under which spool lines that are no event are counted

# the spool as Spark's text source reads it: one line a row (decoded in the stage)
LINE_COLUMN = "value"
FUSED_DDL = (
    "outputs ARRAY<INT>, part STRING, ts BIGINT, seq BIGINT, item STRING, guid STRING,"
    " arrival BIGINT"
)
FUSED_SCHEMA = pa.schema(
    [
        ("outputs", pa.list_(pa.int32())),
        ("part", pa.string()),
        ("ts", pa.int64()),
        ("seq", pa.int64()),
        ("item", pa.string()),
        ("guid", pa.string()),
        ("arrival", pa.int64()),
    ]
)


def to_batch(rows: Sequence[Sequence[object]], schema: pa.Schema = FUSED_SCHEMA) -> pa.RecordBatch:
    """Output rows as an Arrow batch of ``schema`` (default: the stage's)."""
    if not rows:
        return pa.RecordBatch.from_pylist([], schema=schema)
    columns = zip(*rows, strict=True)
    arrays = [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# a row with a stream is already that stream's (a stream rooted at an operator over
# publication time, computed with the heads it shares: roses_app.spark.lower_late)
TAIL_INPUT = ("source", "stream", "part", "ts", "seq", "item")
TAIL_SCHEMA = pa.schema(
    [
        ("stream", pa.string()),
        ("part", pa.string()),
        ("ts", pa.int64()),
        ("seq", pa.int64()),
        ("item", pa.string()),
    ]
)
TAIL_DDL = "stream STRING, part STRING, ts BIGINT, seq BIGINT, item STRING"


def error_hooks(
    errors: Accumulator[dict[str, int]] | None,
) -> Callable[[Step], counts.ErrorHook]:
    """Per step of a program, the hook counting (and logging) the items it drops."""

    def hook_for(step: Step) -> counts.ErrorHook:
        return counts.error_hook(counts.Step(step.stream, step.label, step.where), errors)

    return hook_for


def fused_frame(
    events: DataFrame,
    program: Program,
    errors: Accumulator[dict[str, int]] | None = None,
    *,
    presearch: bool = True,
    max_seq: int | None = None,
    inputs_held: bool = False,
    limits: LimitSettings | None = None,
) -> DataFrame:
    """``events`` (the spool's lines: Spark's text source) through ``program``: the
    events up to ``max_seq``, if given; ``inputs_held``: see ``run_program``;
    ``limits``: what an expression may take on an item (xmlfn/budget.py)."""

    from roses_app.xmlfn.fused import shipped_analyses

    timed = any(step.kind == "source" and step.time == "published" for step in program.steps)
    hook_for = error_hooks(errors)
    on_bad = bad_line_hook(errors)
    analyses = shipped_analyses(program) if presearch else b""
    key = program.key  # computed here, so it travels with the program to each task
    sent = pickle.dumps(program, protocol=pickle.HIGHEST_PROTOCOL)  # see received()
    limits = limits or LimitSettings()
    seconds, memory = limits.item_seconds, limits.worker_memory

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from roses_app.xmlfn import budget
        from roses_app.xmlfn.fused import run_program
        from roses_app.xmlfn.presearch_terms import remember

        budget.apply(seconds, memory)
        remember(key, analyses)
        program = received(key, sent)
        for batch in batches:
            # the batch's objects all die here: freed before the collector is back
            # on, none is walked by a collection (one per batch cost 5 % of the stage)
            with collector_paused():
                lines = batch.column(0).cast(pa.binary()).to_pylist()
                sources, ts, seq, items, published = decode_lines(lines, on_bad, max_seq)
                del lines
                rows = run_program(
                    program,
                    sources,
                    ts,
                    seq,
                    items,
                    hook_for=hook_for,
                    presearch=presearch,
                    published=published if timed else None,
                    inputs_held=inputs_held,
                )
                out = to_batch(rows)
                del sources, ts, seq, items, published, rows
            yield out

    return events.select(LINE_COLUMN).mapInArrow(run, FUSED_DDL)


_received: dict[str, Program] = {}  # in a worker: its programs, by key


def received(key: str, sent: bytes) -> Program:
    """The program of a task, unpickled once per worker process.  It travels as bytes
    (pickled by the driver once) rather than in the task's closure: cloudpickle called
    Python code for each of its objects (100,000 steps: 3 s of the driver's start-up)
    and each task unpickled it again."""
    found = _received.get(key)
    if found is None:
        with collector_paused():  # many small objects, no cycle
            found = _received[key] = pickle.loads(sent)  # bytes of our own driver
    return found


def bad_line_hook(errors: Accumulator[dict[str, int]] | None) -> Callable[[str, str], None]:
    """Logs and counts a spool line that is not an event (the stage leaves it out)."""

    def on_bad(line: str, why: str) -> None:
        log.warning("left out a spool line that is not an event (%s): %.200s", why, line)
        if errors is not None:
            errors.add({BAD_LINE: 1})

    return on_bad


def no_stream() -> tuple[Column, Column]:
    """The ``stream`` and ``part`` of a head's rows in :func:`tail_frame`'s input."""
    return F.lit(None).cast("string").alias("stream"), F.lit("").alias("part")


def tail_frame(
    heads: DataFrame,
    program: Program,
    streams_of: Mapping[str, Sequence[str]],
    errors: Accumulator[dict[str, int]] | None = None,
) -> DataFrame:
    """The output rows (``stream, part, ts, seq, item``) of the stateless tails of a
    stateful query (:mod:`roses_app.algebra.planner.stateless_tails`): ``heads`` holds the rows of
    every head once, ``source`` its key, and ``program`` runs every tail on them;
    its rows that name a stream pass as they are."""
    names = [tuple(streams_of.get(key, ())) for _, key in program.outputs]
    hook_for = error_hooks(errors)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from roses_app.xmlfn.fused import run_program

        for batch in batches:
            columns = [batch.column(name).to_pylist() for name in TAIL_INPUT]
            passed = [row[1:] for row in zip(*columns, strict=True) if row[1] is not None]
            if passed:  # the program takes the others
                rows = [row for row in zip(*columns, strict=True) if row[1] is None]
                columns = [list(c) for c in zip(*rows, strict=True)] if rows else [[]] * 6
            sources, _, _, ts, seq, items = columns
            rows = run_program(program, sources, ts, seq, items, hook_for=hook_for)
            out = [
                (stream, part, when, at, item)
                for outputs, part, when, at, item, _, _ in rows
                if item is not None
                for index in outputs
                for stream in names[index]
            ]
            yield to_batch(passed + out, TAIL_SCHEMA)

    return heads.select(*TAIL_INPUT).mapInArrow(run, TAIL_DDL).select(*OUTPUT_COLUMNS)
