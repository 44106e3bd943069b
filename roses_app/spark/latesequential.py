"""Lowering of Window (read as a stream), Delta, Nest and GroupBy: over ingest time
(and γ over the other windows) as :mod:`roses_app.spark.sequential` and
:mod:`roses_app.spark.aggregate` say; over items read in publication time, the rule of
:mod:`roses_app.algebra.release`.

Over publication time one ``transformWithStateInPandas`` operator, under one constant
key (the clock is the latest time seen of every item), holds the items on time until
the clock is more than the lateness past them, then runs them in time order through
the same stages as over ingest time (the windows and deltas of the run, the nest, or
a count window and the group).  Its state (the clock, the items held and each stage's
memory) is JSON in one value state.  Items later than the lateness are counted under
``late:STREAM`` (and a group with ``late: publish`` publishes them in its ``late``
part).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark import Accumulator
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import TimerValues

from roses_app.algebra.eventtime import late_sequential, publishes_late
from roses_app.algebra.lateness import LATE_PART, arrival_groups
from roses_app.algebra.plan import Delta, GroupBy, Nest, Node, Window
from roses_app.algebra.release import Release, release_lateness
from roses_app.spark import udfs
from roses_app.spark.aggregate import group_by_frame, nest_frame, nest_groups
from roses_app.spark.late import (
    OUTPUT_DDL,
    JsonStateProcessor,
    output_frame,
    read_arrivals,
    timed_input,
)
from roses_app.spark.registry import EVENT_COLUMNS, LowerContext, Namespaces, register
from roses_app.spark.sequential import (
    Event,
    Memory,
    Operator,
    by_time,
    chain,
    process,
    stage_of,
    window_or_delta,
)

KEY = "release_key"


@dataclass(frozen=True)
class NestOperator:
    """Nest as a stage: at each input time, one item holding that time's items."""

    on_error: udfs.ErrorHook

    def advance(
        self, kept: list[Event], rows: Sequence[Event], key: Any
    ) -> tuple[list[Event], list[Event]]:
        groups = [(t, items) for t, items in by_time(rows) if items]
        nested = nest_groups(
            [([e.item or "" for e in items], t) for t, items in groups], self.on_error
        )
        out = [
            Event(t, min(e.seq for e in items), item)
            for (t, items), item in zip(groups, nested, strict=True)
            if item is not None
        ]
        return out, []


@dataclass(frozen=True)
class GroupOperator:
    """γ as a stage: at each input time (its items: a window's content), one item per
    key, the reducer over the key's items, stamped as over ingest time."""

    node: GroupBy
    namespaces: Namespaces
    on_error: udfs.ErrorHook

    def advance(
        self, kept: list[Event], rows: Sequence[Event], key: Any
    ) -> tuple[list[Event], list[Event]]:
        from roses_app.xmlfn.reduce import keyed_buckets, reduce_groups

        node = self.node
        groups = [
            (t, found, bucket)
            for t, items in by_time(rows)
            for found, bucket in keyed_buckets(node.by, self.namespaces, items, self.on_error)
        ]
        windows = [([e.item or "" for e in b], t, t, found) for t, found, b in groups]
        results = reduce_groups(node.reduce, self.namespaces, node.stream, windows, self.on_error)
        out = [
            Event(t, min(e.seq for e in b), item)
            for (t, _, b), item in zip(groups, results, strict=True)
            if item is not None
        ]
        return out, []


class LateSequentialProcessor(JsonStateProcessor):
    """One :class:`Release` and the stages it feeds, micro-batch after micro-batch."""

    def __init__(
        self,
        node: Node,
        stages: Sequence[Operator],
        lateness: int,
        on_error: udfs.ErrorHook,
        tallies: Accumulator[dict[str, int]] | None,
    ) -> None:
        super().__init__((), on_error, tallies)
        self.stream = node.origin.stream
        self.stages = tuple(stages)
        self.lateness = lateness
        self.late_part = publishes_late(node)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        saved = self.load_state() or {}
        release = Release.load(self.lateness, saved.get("release"))
        memory = load_memory(saved.get("memory"))
        released, late = release.advance(arrival_groups(read_arrivals(rows, None)))
        events = [Event(a.time, a.seq, a.item) for a in released]
        out = process(self.stages, memory, events, 0, self.on_error) if events else []
        self.save_state({"release": release.dump(), "memory": dump_memory(memory)})
        self.tally(self.stream, late=len(late))
        published = [(e.ts, e.seq, e.item, "") for e in out if e.item is not None]
        if self.late_part:
            published += [(a.time, a.seq, a.item or "", LATE_PART) for a in late]
        if published:
            yield output_frame(published)


def dump_memory(memory: Memory) -> dict[str, Any]:
    kept = {str(n): [list(e) for e in events] for n, events in memory.kept.items()}
    return {"clock": memory.clock, "kept": kept}


def load_memory(saved: dict[str, Any] | None) -> Memory:
    if saved is None:
        return Memory()
    kept = {int(n): [Event(*e) for e in events] for n, events in saved["kept"].items()}
    return Memory(saved["clock"], kept)


def late_sequential_frame(node: Window | Delta | Nest | GroupBy, ctx: LowerContext) -> DataFrame:
    """The results of ``node`` over publication time: see the module doc."""
    below = late_sequential(node)
    assert below is not None
    lateness = release_lateness(node, ctx.lateness)
    stages: list[Operator]
    if isinstance(node, Nest):
        stages = [NestOperator(ctx.on_error(node))]
    elif isinstance(node, GroupBy):
        assert isinstance(node.input, Window)
        stages = [stage_of(node.input), GroupOperator(node, ctx.namespaces, ctx.on_error(node))]
    else:
        stages = [stage_of(n) for n in chain(node)[1]]
    frame = timed_input(node, below, ctx)
    rows = frame.select(F.lit(0).alias(KEY), "ts", "seq", "item", "event")
    processor = LateSequentialProcessor(node, stages, lateness, ctx.on_error(node), ctx.errors)
    out = rows.groupBy(KEY).transformWithStateInPandas(
        statefulProcessor=processor,
        outputStructType=OUTPUT_DDL,
        outputMode="Append",
        timeMode="None",
        # No event-time column, as for the late windows (roses_app.spark.late): results
        # come at publication times, behind the watermark.
    )
    if publishes_late(node):
        return out.select(*EVENT_COLUMNS, "part")
    return out.select(*EVENT_COLUMNS)


@register(Window)
@register(Delta)
def _window_or_delta(node: Window | Delta, ctx: LowerContext) -> DataFrame:
    if late_sequential(node) is not None:
        return late_sequential_frame(node, ctx)
    return window_or_delta(node, ctx)


@register
def _nest(node: Nest, ctx: LowerContext) -> DataFrame:
    if late_sequential(node) is not None:
        return late_sequential_frame(node, ctx)
    return nest_frame(node, ctx)


@register
def _group_by(node: GroupBy, ctx: LowerContext) -> DataFrame:
    if late_sequential(node) is not None:
        return late_sequential_frame(node, ctx)
    return group_by_frame(node, ctx)
