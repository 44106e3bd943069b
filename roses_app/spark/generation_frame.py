"""The frame of a stateful generation: its streams' output rows over the frontier log.

Each frontier node is read from the log (its rows under its key); every other node is
lowered once (:mod:`roses_app.spark.lower`).  The heads of the streams' stateless
tails are computed once each and the tails run in one fused pass over them
(:mod:`roses_app.algebra.planner.stateless_tails`); the streams left out of that are
lowered on their own.  The operators over publication time among the heads and those streams' roots
run in the late graph's operators (:mod:`roses_app.spark.lower_late`), whose rows go
through the fused pass too (a stream's own pass as they are).  All of it is one
frame, so one query.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from roses_app.algebra.plan.operators import Node, Stream
from roses_app.algebra.planner.globalplan import GlobalPlan
from roses_app.algebra.planner.late_groups import late_unit
from roses_app.algebra.planner.stateless_tails import plan_tails
from roses_app.algebra.time.eventtime import event_timed
from roses_app.spark.fused import TAIL_INPUT, no_stream, tail_frame
from roses_app.spark.lower import LowerContext, compile_stream, heartbeat, lower
from roses_app.spark.lower_late import late_graph_frame
from roses_app.spark.registry import (
    EVENT_COLUMNS,
    OUTPUT_COLUMNS,
    Namespaces,
    above_watermark,
    union_all,
)

log = logging.getLogger(__name__)


def stateful_frame(
    context: LowerContext, streams: Sequence[Stream], boundary: int = 0, name: str = ""
) -> DataFrame:
    """The output rows of ``streams`` over ``context.events`` (the frontier log with its
    watermark): its backfill rows, and its live rows after ``boundary``."""
    plan = GlobalPlan.of(streams)
    events = context.events
    if boundary > 0:
        mine = (F.col("origin") == F.lit("b")) | (F.col("seq") > F.lit(boundary))
        events = events.where(above_watermark(mine))
    computed = {
        node: events.where(
            above_watermark((F.col("key") == F.lit(plan.id_of(node))) | F.col("key").isNull())
        ).select(*frontier_columns(node))
        for node in plan.frontier()
    }
    ctx = LowerContext(
        events,
        context.namespaces,
        context.errors,
        context.lateness,
        computed,
        context.late_operators,
    )
    tails = plan_tails(streams, plan.id_of, ctx.namespaces)
    late: list[tuple[Node, str | None, str | None]] = [
        (head, key, None) for head, key in tails.heads if late_unit(head)
    ]
    late += [(s.plan, None, s.name) for s in tails.direct if late_unit(s.plan)]
    frames = [compile_stream(s, ctx) for s in tails.direct if not late_unit(s.plan)]
    # the operators over publication time, each once: one frame, read at one place
    # (a frame read twice would be computed twice)
    late_rows = late_graph_frame(late, ctx) if late else None
    if tails.program is not None:
        # every head once, then every stream's stateless tail in one pass over them
        heads = [
            lower(head, ctx)
            .where(~heartbeat())
            .select(F.lit(key).alias("source"), *no_stream(), "ts", "seq", "item")
            for head, key in tails.heads
            if not late_unit(head)
        ]
        if late_rows is not None:
            heads.append(late_rows.select(*TAIL_INPUT))
        frames.append(tail_frame(union_all(heads), tails.program, tails.streams_of, ctx.errors))
    elif late_rows is not None:
        frames.append(late_rows.select(*OUTPUT_COLUMNS))
    log.debug("query %s: %s", name, tails.describe())
    return union_all(frames)


def under_one_key(streams: Sequence[Stream], namespaces: Namespaces) -> bool:
    """Whether every stateful operator of ``streams`` is one of the late graph's, each
    of which runs under one constant key (:mod:`roses_app.spark.lower_late`)."""
    tails = plan_tails(streams, GlobalPlan.of(streams).id_of, namespaces)
    heads = [head for head, _ in tails.heads] + [s.plan for s in tails.direct]
    return all(late_unit(head) for head in heads)


def frontier_columns(node: Node) -> tuple[str, ...]:
    """A frontier node's columns: an event's, and its publication time when a source
    below reads in publication time (only the operators of
    :mod:`roses_app.spark.lower_late` read those: ``ts`` stays the ingest time)."""
    return (*EVENT_COLUMNS, "event") if event_timed(node) else EVENT_COLUMNS
