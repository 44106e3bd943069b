"""Spark lowering of the operators over publication time: each group of units that
read one another (:mod:`roses_app.algebra.planner.late_groups`) runs in one
``transformWithStateInPandas`` operator, each unit once per micro-batch however many
read it (:mod:`roses_app.spark.lateunits`).

The operator's input is the rows of the group's sources (the frontier log's, each
tagged with its source's index), under one constant key: every unit's clock is the
latest time seen of every item, so its state is one key anyway.  Each unit keeps its
state in a value state of its own, named by its node's fingerprint, and its windows'
items in a map state of slices (:mod:`roses_app.algebra.time.slices`); what a micro-batch
does there is in :mod:`roses_app.spark.latebatch`.  Out come the
items (not the heartbeats) of the units the query reads, each tagged with what reads
it: a head's key (the fused tail, :mod:`roses_app.spark.fused`) or a stream's name.

Also here: the handler of every node type that may be such a unit, which lowers it so
or, over ingest time, as its own module says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from roses_app.algebra.plan.operators import (
    Aggregate,
    Delta,
    Diff,
    GroupBy,
    Join,
    Nest,
    Node,
    Semijoin,
    Unnest,
    Window,
    WindowedGrouping,
)
from roses_app.algebra.planner.late_groups import components, late_graph, late_unit, packed
from roses_app.algebra.time.eventtime import publishes_late
from roses_app.spark.aggregate import aggregate_frame, group_by_frame, nest_frame
from roses_app.spark.joins import diff_frame, join_frame, semijoin_frame
from roses_app.spark.late import timed_input
from roses_app.spark.latebatch import LateGraph
from roses_app.spark.lateprocessor import LateGraphProcessor
from roses_app.spark.registry import EVENT_COLUMNS, LowerContext, register, union_all
from roses_app.spark.sequential import window_or_delta, windowed_grouping_frame
from roses_app.spark.stateless import unnest_frame

KEY = "late_key"
OUTPUT_DDL = "source STRING, stream STRING, part STRING, ts BIGINT, seq BIGINT, item STRING"


def late_graph_frame(
    targets: Sequence[tuple[Node, str | None, str | None]], ctx: LowerContext
) -> DataFrame:
    """The items of the units ``targets`` name, each with what reads it (a head's
    key, a stream): columns ``source, stream, part, ts, seq, item``."""
    roots = dict.fromkeys(node for node, _, _ in targets)
    frames = []
    for nodes in packed(components(late_graph(roots)), ctx.late_operators):
        graph = LateGraph.of(nodes, ctx.hooks)
        mine = tuple((nodes.index(n), key, s) for n, key, s in targets if n in nodes)
        inputs = [
            timed_input(nodes[0], below, ctx).select(
                F.lit(index).alias("src"), "ts", "seq", "item", "event"
            )
            for index, below in enumerate(graph.sources)
        ]
        rows = union_all(inputs).select(F.lit(0).alias(KEY), "src", "ts", "seq", "item", "event")
        processor = LateGraphProcessor.of(graph, mine, ctx.errors)
        frames.append(
            rows.groupBy(KEY).transformWithStateInPandas(
                statefulProcessor=processor,
                outputStructType=OUTPUT_DDL,
                outputMode="Append",
                timeMode="None",
                # No event-time column: results come at publication times, behind
                # the watermark (the ingest clock), which Spark refuses of an
                # operator passing the watermark on.
            )
        )
    return union_all(frames)


def late_unit_frame(node: Node, ctx: LowerContext) -> DataFrame:
    """``node``'s results alone, as any lowered node's (with its late part when it
    publishes one)."""
    frame = late_graph_frame([(node, None, None)], ctx)
    frame = frame.withColumn("time", F.timestamp_micros(F.greatest("ts", F.lit(1))))
    return (
        frame.select(*EVENT_COLUMNS, "part")
        if publishes_late(node)
        else frame.select(*EVENT_COLUMNS)
    )


def _late_or(
    ingest: Callable[[Any, LowerContext], DataFrame], node: Node, ctx: LowerContext
) -> DataFrame:
    return late_unit_frame(node, ctx) if late_unit(node) else ingest(node, ctx)


# Every node type that may be a unit, with its lowering over ingest time
INGEST_LOWERING: dict[type[Node], Callable[[Any, LowerContext], DataFrame]] = {
    Window: window_or_delta,
    Delta: window_or_delta,
    Aggregate: aggregate_frame,
    GroupBy: group_by_frame,
    Nest: nest_frame,
    Unnest: unnest_frame,
    WindowedGrouping: windowed_grouping_frame,
    Join: join_frame,
    Semijoin: semijoin_frame,
    Diff: diff_frame,
}
for _type, _ingest in INGEST_LOWERING.items():
    register(_type, partial(_late_or, _ingest))
