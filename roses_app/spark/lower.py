"""Lowering: one handler per logical plan node type, registered with singledispatch.

A lowered node is a streaming DataFrame with the columns ``ts, seq, item, time``
(``time``: ``ts`` as a timestamp, the event-time column the watermark is defined on);
a split adds ``part``.  Rows with a null item are heartbeats: time passed.  Every
stateless operator passes them on, so that windows see time go by; the output drops
them.  ``compile_stream`` adds the stream name and gives every output the columns of
an output row: ``stream, part, ts, seq, item``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import singledispatch

from pyspark import Accumulator
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from roses_app.algebra.plan import NODE_TYPES, Filter, Map, Node, Source, Split, Stream, Union
from roses_app.spark import udfs

Namespaces = tuple[tuple[str, str], ...]
OUTPUT_COLUMNS = ("stream", "part", "ts", "seq", "item")
EVENT_COLUMNS = ("ts", "seq", "item", "time")


@dataclass(frozen=True)
class LowerContext:
    """What every handler may use: the spool's event stream (with its watermark), the
    namespaces, the allowed lateness (µs) and the accumulator counting items dropped
    by failing functions, per step."""

    events: DataFrame
    namespaces: Namespaces = ()
    errors: Accumulator[dict[str, int]] | None = None
    lateness: int = 0
    # source name -> the events of a view (a sub-plan shared by several streams)
    views: Mapping[str, DataFrame] = field(default_factory=dict)

    def on_error(self, node: Node) -> udfs.ErrorHook:
        return udfs.error_hook(udfs.Step.of(node), self.errors)


@singledispatch
def lower(node: Node, ctx: LowerContext) -> DataFrame:
    raise NotImplementedError(f"no Spark lowering for {type(node).__name__} ({node.origin})")


def with_watermark(events: DataFrame, lateness: int) -> DataFrame:
    """The spool's events with the event-time column and the watermark on it."""
    timed = events.withColumn("time", F.timestamp_micros(F.col("ts")))
    return timed.withWatermark("time", f"{lateness} microseconds")


def heartbeat() -> Column:
    """True on heartbeat rows (a Column needs a running session: built on use)."""
    return F.col("item").isNull()


def above_watermark(condition: Column) -> Column:
    """``condition``, kept above the watermark: time is global, so every source's
    events move it, as in the reference evaluator.  Spark pushes a filter below the
    watermark unless it refers to the event-time column; ``time`` is never null, so
    the extra term changes nothing else."""
    return condition | F.col("time").isNull()


@lower.register
def _source(node: Source, ctx: LowerContext) -> DataFrame:
    view = ctx.views.get(node.name)
    if view is not None:
        return view.select(*EVENT_COLUMNS)  # a view carries its own heartbeats
    # Heartbeats belong to every source: time passes for all of them.
    mine = (F.col("source") == F.lit(node.name)) | heartbeat()
    return ctx.events.where(above_watermark(mine)).select(*EVENT_COLUMNS)


@lower.register
def _filter(node: Filter, ctx: LowerContext) -> DataFrame:
    upstream = lower(node.input, ctx)
    observe = udfs.observer_udf(node.where, ctx.namespaces, ctx.on_error(node))
    return upstream.where(heartbeat() | observe(F.col("item")))


@lower.register
def _map(node: Map, ctx: LowerContext) -> DataFrame:
    upstream = lower(node.input, ctx)
    hook = ctx.on_error(node)
    function = (
        udfs.mutator_udf(node.xquery, ctx.namespaces, hook)
        if node.xquery is not None
        else udfs.accessor_udf(node.xpath, ctx.namespaces, hook)
    )
    mapped = upstream.withColumn("mapped", function(F.col("item")))
    # an empty result is λ: dropped (a heartbeat stays one)
    kept = mapped.where(heartbeat() | F.col("mapped").isNotNull())
    return kept.withColumn("item", F.col("mapped")).drop("mapped")


@lower.register
def _union(node: Union, ctx: LowerContext) -> DataFrame:
    sources = [
        child.name
        for child in node.inputs
        if isinstance(child, Source) and child.name not in ctx.views
    ]
    if len(sources) == len(node.inputs):
        # A union of plain sources reads the spool once instead of once per source.
        mine = F.col("source").isin(sources) | heartbeat()
        return ctx.events.where(above_watermark(mine)).select(*EVENT_COLUMNS)
    frames = [lower(child, ctx) for child in node.inputs]
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


@lower.register
def _split(node: Split, ctx: LowerContext) -> DataFrame:
    upstream = lower(node.input, ctx)
    split = udfs.splitter_udf(node.by, ctx.namespaces, ctx.on_error(node))
    named = upstream.withColumn("part", split(F.col("item")))
    return named.where(F.col("part").isNotNull())


def compile_view(node: Node, name: str, ctx: LowerContext) -> DataFrame:
    """The events of a shared sub-plan, heartbeats included, as spool rows of ``name``."""
    return lower(node, ctx).withColumn("source", F.lit(name)).select("source", "ts", "seq", "item")


def compile_stream(stream: Stream, ctx: LowerContext) -> DataFrame:
    """The streaming DataFrame of a stream's output rows."""
    frame = lower(stream.plan, ctx).where(~heartbeat())
    if not isinstance(stream.plan, Split):
        frame = frame.withColumn("part", F.lit(""))
    return frame.withColumn("stream", F.lit(stream.name)).select(*OUTPUT_COLUMNS)


def lowered_types() -> set[type]:
    """Node types that have a handler (a test checks it covers NODE_TYPES)."""
    return {t for t in NODE_TYPES if lower.dispatch(t) is not lower.dispatch(object)}


# Handlers of the operators of time register themselves on ``lower``.
from roses_app.spark import aggregate, joins, sequential  # noqa: E402, F401
