"""Spark lowering of the operators over publication time: each group of units that
read one another (:mod:`roses_app.algebra.lategraph`) runs in one
``transformWithStateInPandas`` operator, each unit once per micro-batch however many
read it (:mod:`roses_app.spark.lateunits`).

The operator's input is the rows of the group's sources (the frontier log's, each
tagged with its source's index), under one constant key: every unit's clock is the
latest time seen of every item, so its state is one key anyway.  Each unit keeps its
state in a value state of its own, named by its node's fingerprint, and its windows'
items in a map state of slices (:mod:`roses_app.algebra.slices`).  Out come the
items (not the heartbeats) of the units the query reads, each tagged with what reads
it: a head's key (the fused tail, :mod:`roses_app.spark.fused`) or a stream's name.

Also here: the handler of every node type that may be such a unit, which lowers it so
or, over ingest time, as its own module says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson
import pandas as pd
from pyspark import Accumulator
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import ValueState

from roses_app.algebra.eventtime import publishes_late
from roses_app.algebra.globalplan import node_fingerprint
from roses_app.algebra.lategraph import components, late_graph, late_unit, packed, unit_reads
from roses_app.algebra.lateness import tally_key
from roses_app.algebra.plan import (
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
from roses_app.algebra.slices import SliceMap
from roses_app.spark.aggregate import aggregate_frame, group_by_frame, nest_frame
from roses_app.spark.joins import diff_frame, join_frame, semijoin_frame
from roses_app.spark.late import timed_input
from roses_app.spark.lateprocessor import LateGraphProcessor, Target
from roses_app.spark.lateunits import Batch, Counts, Row, SourceRow, Unit, make_unit
from roses_app.spark.registry import EVENT_COLUMNS, Hooks, LowerContext, register, union_all
from roses_app.spark.sequential import window_or_delta, windowed_grouping_frame
from roses_app.spark.stateless import unnest_frame

KEY = "late_key"
OUTPUT_DDL = "source STRING, stream STRING, part STRING, ts BIGINT, seq BIGINT, item STRING"


@dataclass(frozen=True)
class LateGraph:
    """A group of units (:func:`~roses_app.algebra.lategraph.components`), the units
    each reads before it, with one micro-batch (the processor and the tests drive
    it)."""

    units: tuple[Unit, ...]
    sources: tuple[Node, ...]  # by their index in the input rows
    names: tuple[str, ...]  # each unit's state
    reads: tuple[tuple[tuple[Node, ...], tuple[Node, ...]], ...]  # each unit's

    @classmethod
    def of(cls, nodes: Sequence[Node], hooks: Hooks) -> LateGraph:
        reads = tuple(unit_reads(node) for node in nodes)
        sources = tuple(dict.fromkeys(s for _, found in reads for s in found))
        names = tuple("n" + node_fingerprint(node) for node in nodes)
        return cls(tuple(make_unit(node, hooks) for node in nodes), sources, names, reads)

    def advance(
        self,
        saved: Callable[[int], Any],
        sources: Mapping[Node, Sequence[SourceRow]],
        slices: Sequence[SliceMap | None],
    ) -> list[tuple[list[Row], Any, Counts] | None]:
        """Each unit's rows, state to save and counts after this micro-batch (its
        state read by ``saved``, its index given); None for a unit that read nothing
        in it (its state stays, unread)."""
        batch = Batch(sources)
        out: list[tuple[list[Row], Any, Counts] | None] = []
        for index, (unit, (units, found), store) in enumerate(
            zip(self.units, self.reads, slices, strict=True)
        ):
            if not any(sources.get(s) for s in found) and not any(
                batch.results.get(u) for u in units
            ):
                out.append(None)
                continue
            done = unit.advance(saved(index), batch, store)
            batch.results[unit.node] = done[0]
            out.append(done)
        return out


def handle_rows(
    graph: LateGraph,
    states: Sequence[ValueState],
    slices: Sequence[SliceMap | None],
    targets: tuple[Target, ...],
    tallies: Accumulator[dict[str, int]] | None,
    rows: Iterator[pd.DataFrame],
) -> Iterator[pd.DataFrame]:
    """One micro-batch of a :class:`~roses_app.spark.lateprocessor.LateGraphProcessor`:
    its units advanced, their state saved, the rows ``targets`` read out."""
    sources = read_sources(rows, graph.sources)
    done = graph.advance(lambda n: load_json(states[n]), sources, slices)
    found: dict[str, int] = {}
    for state, unit, result in zip(states, graph.units, done, strict=True):
        if result is not None:
            save_json(state, result[1])
            for kind, n in result[2].items():
                key = tally_key(kind, unit.node.origin.stream)
                found[key] = found.get(key, 0) + n
    found = {key: n for key, n in found.items() if n}
    if tallies is not None and found:
        tallies.add(found)
    out = [
        (source, stream, part, ts, seq, item)
        for index, source, stream in targets
        if (result := done[index]) is not None
        for ts, seq, item, part in result[0]
        if item is not None
    ]
    if out:
        yield pd.DataFrame(out, columns=["source", "stream", "part", "ts", "seq", "item"])


def load_json(state: ValueState) -> Any:
    """The value the last micro-batch saved (None before the first)."""
    stored = state.get() if state.exists() else None
    return orjson.loads(stored[0]) if stored is not None else None


def save_json(state: ValueState, value: Any) -> None:
    # orjson: the state is read and written whole each micro-batch, and json's
    # encoder and decoder were most of a sliding window's cost; int keys become
    # strings, as json.dumps makes them
    state.update((orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode(),))


def read_sources(
    frames: Iterator[pd.DataFrame], sources: Sequence[Node]
) -> dict[Node, list[SourceRow]]:
    """The input rows by source (``src``: its index), each (ingest time, seq, item,
    publication time or None)."""
    out: dict[Node, list[SourceRow]] = {node: [] for node in sources}
    for frame in frames:
        columns = [frame[c].tolist() for c in ("src", "ts", "seq", "item", "event")]
        for src, ts, seq, item, event in zip(*columns, strict=True):
            when = None if event is None or pd.isna(event) else int(event)
            out[sources[int(src)]].append((int(ts), int(seq), item, when))
    return out


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
