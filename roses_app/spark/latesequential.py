"""Lowering of Window (read as a stream), Delta, Nest, Aggregate and GroupBy: over
ingest time (and α/γ over the windows :mod:`roses_app.algebra.lateness` runs) as
:mod:`roses_app.spark.sequential`, :mod:`roses_app.spark.aggregate` and
:mod:`roses_app.spark.late` say; over a released run of items read in publication
time (:func:`roses_app.algebra.eventtime.late_sequential`), the rule of
:mod:`roses_app.algebra.release`.

Over publication time one ``transformWithStateInPandas`` operator, under one constant
key (the clock is the latest time seen of every item), holds the items on time until
the clock is more than the lateness past them, then runs them in time order through
the same stages as over ingest time (the windows, deltas and nests of the run, then an
aggregate or a group: per time of its window, or per closed window of a periodic one).
Its state (the clock, the items held and each stage's memory) is JSON in one value
state. Items later than the lateness are counted under ``late:STREAM`` (and an
aggregate or a group with ``late: publish`` publishes them in its ``late`` part).
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

from roses_app.algebra.eventtime import (
    fed_operators,
    late_sequential,
    publishes_late,
    released_chain,
)
from roses_app.algebra.latejoin import CLOCK_SEQ
from roses_app.algebra.lateness import LATE_PART, arrival_groups
from roses_app.algebra.plan import (
    Aggregate,
    Delta,
    Filter,
    GroupBy,
    Nest,
    Node,
    TimeWindow,
    Window,
)
from roses_app.algebra.release import Release, release_lateness
from roses_app.algebra.release_fed import (
    DROPPED,
    ITEMS,
    RESULT_NAME,
    FedBranch,
    FedRelease,
    fed_branches,
    fed_items,
    mark_seq,
)
from roses_app.algebra.windows import closed_windows, open_after, periodic_input
from roses_app.spark import udfs
from roses_app.spark.aggregate import aggregate_frame, group_by_frame, nest_frame, nest_groups
from roses_app.spark.late import (
    OUTPUT_DDL,
    JsonStateProcessor,
    output_frame,
    read_arrivals,
    timed_input,
    with_clock,
)
from roses_app.spark.registry import (
    EVENT_COLUMNS,
    LowerContext,
    Namespaces,
    lower,
    register,
    union_all,
)
from roses_app.spark.sequential import (
    Event,
    Memory,
    Operator,
    by_time,
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
    """α or γ as a stage: at each input time (its items: a window's content), one item
    (per key), the reducer over its items, stamped as over ingest time."""

    node: Aggregate | GroupBy
    namespaces: Namespaces
    on_error: udfs.ErrorHook

    def advance(
        self, kept: list[Event], rows: Sequence[Event], key: Any
    ) -> tuple[list[Event], list[Event]]:
        groups = [
            (t, t, t, found, bucket)
            for t, items in by_time(rows)
            for found, bucket in buckets(self.node, self.namespaces, items, self.on_error)
        ]
        return reduced(self.node, self.namespaces, groups, self.on_error), []


MARK = -1  # the seq of the event in which a closed-windows stage keeps its time


@dataclass(frozen=True)
class ClosedWindowsOperator:
    """α or γ over a periodic time window as a stage reading the window's input: once
    a later time has come, the reducer over each closed window's items (per key),
    stamped with its bounds.  It keeps the items of windows still open, and the time
    it has closed the windows up to."""

    node: Aggregate | GroupBy
    spec: TimeWindow
    namespaces: Namespaces
    on_error: udfs.ErrorHook

    def advance(
        self, kept: list[Event], rows: Sequence[Event], key: Any
    ) -> tuple[list[Event], list[Event]]:
        if not rows:
            return [], kept
        since = kept[0].ts if kept and kept[0].seq == MARK else None
        items = [e for e in kept if e.seq != MARK] + [e for e in rows if e.item is not None]
        until = rows[-1].ts
        groups = [
            (end, start, end, found, bucket)
            for start, end, content in closed_windows(items, self.spec, until, since)
            for found, bucket in buckets(self.node, self.namespaces, content, self.on_error)
        ]
        out = reduced(self.node, self.namespaces, groups, self.on_error)
        still = [e for e in items if open_after(self.spec, e.ts, until)]
        return out, [Event(until, MARK, None), *still]


Group = tuple[int, int, int, str | None, list[Event]]  # ts, start, end, key, events


def buckets(
    node: Aggregate | GroupBy, namespaces: Namespaces, items: list[Event], on_error: udfs.ErrorHook
) -> list[tuple[str | None, list[Event]]]:
    """A group's items per key (γ), or all of them (α)."""
    from roses_app.xmlfn.reduce import keyed_buckets

    if isinstance(node, Aggregate):
        return [(None, items)] if items else []
    return list(keyed_buckets(node.by, namespaces, items, on_error))


def reduced(
    node: Aggregate | GroupBy, namespaces: Namespaces, groups: list[Group], on_error: udfs.ErrorHook
) -> list[Event]:
    """The stamped reducer result of each group, at its time with its lowest seq."""
    from roses_app.xmlfn.reduce import group_results

    return [
        Event(*r) for r in group_results(node.reduce, namespaces, node.stream, groups, on_error)
    ]


class LateSequentialProcessor(JsonStateProcessor):
    """One :class:`Release` and the stages it feeds, micro-batch after micro-batch."""

    def __init__(
        self,
        node: Node,
        stages: Sequence[Operator],
        lateness: int,
        on_error: udfs.ErrorHook,
        tallies: Accumulator[dict[str, int]] | None,
        fed: int = 0,
        keyed: bool = False,
        items: bool = False,
    ) -> None:
        super().__init__((), on_error, tallies)
        self.stream = node.origin.stream
        self.stages = tuple(stages)
        self.lateness = lateness
        self.late_part = publishes_late(node)
        # over operators' results: how many branches tell their horizon (items among
        # them); a window's results by their guid (fed_frame's key), so that a
        # revision replaces, and items keyed ITEMS
        self.fed = fed
        self.keyed = keyed
        self.items = items

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        saved = self.load_state() or {}
        memory = load_memory(saved.get("memory"))
        # over operators' results, windows' results and items are keyed, the others not
        found = read_arrivals(rows, "key" if self.keyed else None, unkeyed=True)
        groups = arrival_groups(found)
        release: Release | FedRelease
        if self.fed:
            items = self.lateness if self.items else None
            release = FedRelease.load(self.fed, saved.get("release"), items)
        else:
            release = Release.load(self.lateness, saved.get("release"))
        released, late = release.advance(groups)
        events = [Event(a.time, a.seq, a.item) for a in released]
        out = process(self.stages, memory, events, 0, self.on_error) if events else []
        # the last time released: a run over these results knows what is before it
        # is out (roses_app.algebra.release_fed), and sees the heartbeats released
        last = max((a.time for a in released), default=saved.get("last"))
        state = {"release": release.dump(), "memory": dump_memory(memory), "last": last}
        self.save_state(state)
        self.tally(self.stream, late=len(late))
        published = [(e.ts, e.seq, e.item, "") for e in out if e.item is not None]
        if self.late_part:
            published += [(a.time, a.seq, a.item or "", LATE_PART) for a in late]
        beats = [a for a in released if a.item is None]
        told = with_clock(published, beats, last)
        if told:
            yield output_frame(told)


def dump_memory(memory: Memory) -> dict[str, Any]:
    kept = {str(n): [list(e) for e in events] for n, events in memory.kept.items()}
    return {"clock": memory.clock, "kept": kept}


def load_memory(saved: dict[str, Any] | None) -> Memory:
    if saved is None:
        return Memory()
    kept = {int(n): [Event(*e) for e in events] for n, events in saved["kept"].items()}
    return Memory(saved["clock"], kept)


def released_stages(node: Node, ctx: LowerContext) -> list[Operator]:
    """The stages of the run of operators ``node`` ends over publication time
    (:func:`~roses_app.algebra.eventtime.released_chain`), the lowest first."""
    stages: list[Operator] = []
    for n in released_chain(node):
        if isinstance(n, Aggregate | GroupBy):
            periodic = periodic_input(n.input)
            if periodic is None:
                stages.append(GroupOperator(n, ctx.namespaces, ctx.on_error(n)))
            else:  # it reads the window's input: no window stage before it
                stage = ClosedWindowsOperator(n, periodic[1], ctx.namespaces, ctx.on_error(n))
                stages.append(stage)
        elif isinstance(n, Nest):
            stages.append(NestOperator(ctx.on_error(n)))
        elif isinstance(n, Window | Delta) and not (
            isinstance(node, Aggregate | GroupBy) and n is node.input and periodic_input(n)
        ):
            stages.append(stage_of(n))
    return stages


def late_sequential_frame(node: Node, ctx: LowerContext) -> DataFrame:
    """The results of ``node`` over publication time: see the module doc."""
    below = late_sequential(node)
    assert below is not None
    lateness = release_lateness(node, ctx.lateness)
    stages = released_stages(node, ctx)
    fed = fed_operators(below) is not None
    branches = fed_branches(below) if fed else []
    items = fed_items(below) if fed else []
    if fed:
        frame = fed_frame(node, branches, items, ctx)
    else:
        frame = timed_input(node, below, ctx).withColumn("key", F.lit(None).cast("string"))
    rows = frame.select(F.lit(0).alias(KEY), "ts", "seq", "item", "event", "key")
    hook = ctx.on_error(node)
    keyed = bool(items) or any(b.named for b in branches)
    sources = len(branches) + (1 if items else 0)
    processor = LateSequentialProcessor(
        node, stages, lateness, hook, ctx.errors, sources, keyed, bool(items)
    )
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


def fed_frame(
    node: Node, fed: Sequence[FedBranch], items: Sequence[Node], ctx: LowerContext
) -> DataFrame:
    """The results of the branches a released run reads (their heartbeats and
    horizons among them, each branch's horizon under its own seq; not the items
    published as late), each result of a window named by its branch and guid
    (``key``), which its revisions keep; and the items of the union's other branches
    (their frontier rows, with their time), keyed :data:`ITEMS`."""
    columns = ("ts", "seq", "item", "event", "key")
    frames = []
    for index, branch in enumerate(fed):
        if branch.named:
            frame = named_tail(branch, index, ctx)
        else:
            frame = lower(branch.node, ctx).withColumn("key", F.lit(None).cast("string"))
        if "part" in frame.columns:
            frame = frame.where(F.col("part") != F.lit(LATE_PART))
        told = F.col("item").isNull() & (F.col("seq") == F.lit(CLOCK_SEQ))
        seq = F.when(told, F.lit(mark_seq(index))).otherwise(F.col("seq"))
        frame = frame.withColumn("seq", seq).withColumn("event", F.lit(None).cast("bigint"))
        frames.append(frame.select(*columns))
    for below in items:
        frame = timed_input(node, below, ctx).withColumn("key", F.lit(ITEMS))
        frames.append(frame.select(*columns))
    return union_all(frames)


def named_tail(branch: FedBranch, index: int, ctx: LowerContext) -> DataFrame:
    """A branch of windows' results: each named by its branch and guid, then through
    the branch's filters and maps, a version they drop kept as :data:`DROPPED` (it
    still replaces the earlier versions)."""
    frame = lower(branch.operator, ctx)  # (its late part: dropped by fed_frame)
    name = udfs.splitter_udf(RESULT_NAME, ctx.namespaces, ctx.on_error(branch.operator))
    frame = frame.withColumn("key", F.concat(F.lit(f"{index} "), name(F.col("item"))))
    item = F.col("item")
    for step in branch.tail:
        live = F.when(item == F.lit(DROPPED), F.lit(None)).otherwise(item)  # heartbeats: null
        hook = ctx.on_error(step)
        if isinstance(step, Filter):
            kept = udfs.observer_udf(step.where, ctx.namespaces, hook)(live)
            new = F.when(kept, item).otherwise(F.lit(DROPPED))
        else:
            function = (
                udfs.mutator_udf(step.xquery, ctx.namespaces, hook)
                if step.xquery is not None
                else udfs.accessor_udf(step.xpath, ctx.namespaces, hook)
            )
            mapped = function(live)
            new = F.when(mapped.isNull(), F.lit(DROPPED)).otherwise(mapped)
        frame = frame.withColumn("item", F.when(live.isNull(), item).otherwise(new))
    return frame


@register(Window)
@register(Delta)
def _window_or_delta(node: Window | Delta, ctx: LowerContext) -> DataFrame:
    if late_sequential(node) is not None:
        return late_sequential_frame(node, ctx)
    return window_or_delta(node, ctx)


@register
def _aggregate(node: Aggregate, ctx: LowerContext) -> DataFrame:
    if late_sequential(node) is not None:
        return late_sequential_frame(node, ctx)
    return aggregate_frame(node, ctx)


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
