"""Spark lowering of a join, semijoin or difference over publication time: the rule of
:mod:`roses_app.algebra.latejoin`, run by one ``transformWithStateInPandas`` operator.

Spark's stream-stream joins bound their state by a watermark on the joined columns,
which here would be the publication time: out of order by design, it would either
hold the watermark back or drop items Spark deems late by its own rule.  So both
sides' rows go, tagged with their side, to one operator under one constant key,
whose state (:class:`~roses_app.algebra.latejoin.LateJoin`: the clock and the items
kept, with their join keys) is JSON in one value state.  An item meets the kept items
of the other side sharing a key when ``on`` has keys; each micro-batch's candidate
pairs are tested with ``on`` in one call, and a join's matches composed in one call.
Items later than the lateness are counted under ``late:STREAM``, the optimistic items
taken back under ``revised:STREAM``.

Over operators' results (:func:`~roses_app.algebra.eventtime.released_joined`), each
side's rows are those a released run would read (:mod:`roses_app.spark.fed`), and the
operator first releases both sides together (:class:`ReleasedJoin`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark import Accumulator
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import TimerValues

from roses_app.algebra.eventtime import JoinSides, late_joined, released_joined
from roses_app.algebra.latejoin import LEFT, RIGHT, LateJoin, join_keyed, join_kind
from roses_app.algebra.lateness import RELEASED_LATENESS, Arrival, arrival_groups
from roses_app.algebra.plan import Diff, Join, Semijoin, optimistic
from roses_app.algebra.release_fed import SidesRelease, fed_horizon, side_inputs, side_shape
from roses_app.spark import udfs
from roses_app.spark.fed import fed_frame
from roses_app.spark.late import (
    OUTPUT_DDL,
    JsonStateProcessor,
    output_frame,
    read_arrivals,
    timed_input,
    with_clock,
)
from roses_app.spark.registry import EVENT_COLUMNS, LowerContext, Namespaces

KEY = "join_key"


Row = tuple[int, int, str | None, str]  # ts, seq, item, part


@dataclass(frozen=True)
class ReleasedJoin:
    """A join over operators' results
    (:func:`~roses_app.algebra.eventtime.released_joined`) with one micro-batch,
    without Spark (the processor and the tests drive it): its sides'
    :class:`~roses_app.algebra.release_fed.SidesRelease`, then :class:`LateJoin` over
    what they release, in time order (each time one arrival, nothing late)."""

    node: Join | Semijoin | Diff
    namespaces: Namespaces
    on_error: udfs.ErrorHook

    @property
    def shapes(self) -> tuple[tuple[int, int | None], ...]:
        """Each side's :func:`~roses_app.algebra.release_fed.side_shape`."""
        sides = released_joined(self.node)
        assert sides is not None
        return tuple(side_shape(b, self.node.lateness) for b in (sides[0], sides[2]))

    def advance(
        self,
        saved: dict[str, Any] | None,
        left: list[list[Arrival]],
        right: list[list[Arrival]],
    ) -> tuple[list[Row], dict[str, Any], tuple[int, int]]:
        """The rows to emit (results, heartbeats, the horizon told), the state to
        save, and the counts (items too late, results taken back)."""
        from roses_app.xmlfn.pairs import advance_join, late_join_results

        node, sides = self.node, released_joined(self.node)
        assert sides is not None
        release = SidesRelease.load(self.shapes, saved and saved["release"])
        released, late = release.advance(left, right)
        kind, keyed = join_kind(node), join_keyed(node)
        state = saved and saved["join"]
        join = LateJoin.load(
            sides[1], sides[3], RELEASED_LATENESS, kind, state, optimistic(node), keyed
        )
        planned = advance_join(
            node, join, arrival_groups((a.time, a) for a in released), self.namespaces
        )
        out, revised = late_join_results(node, join, planned, self.namespaces, self.on_error)
        found: list[Row] = [(ts, seq, item, "") for ts, seq, item in out]
        rows = with_clock(found, planned.heartbeats, fed_horizon(node, join.clock))
        return rows, {"release": release.dump(), "join": join.dump()}, (len(late), revised)


class LateJoinProcessor(JsonStateProcessor):
    """One join's :class:`LateJoin`, micro-batch after micro-batch; over operators'
    results, a :class:`ReleasedJoin` (its rows tagged with their side)."""

    def __init__(
        self,
        node: Join | Semijoin | Diff,
        sides: JoinSides,
        namespaces: Namespaces,
        on_error: udfs.ErrorHook,
        tallies: Accumulator[dict[str, int]] | None,
    ) -> None:
        super().__init__(namespaces, on_error, tallies)
        self.node = node
        self.specs = (sides[1], sides[3])
        self.released = (
            ReleasedJoin(node, namespaces, on_error) if released_joined(node) is not None else None
        )

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        from roses_app.xmlfn.pairs import advance_join, late_join_results

        node = self.node
        saved = self.load_state()
        if self.released is not None:
            frames = list(rows)
            left, right = (side_groups(frames, tag) for tag in (LEFT, RIGHT))
            results, state, (late, revised) = self.released.advance(saved, left, right)
            self.save_state(state)
            self.tally(node.origin.stream, late=late, revised=revised)
            if results:
                yield output_frame(results)
            return
        kind, keyed = join_kind(node), join_keyed(node)
        join = LateJoin.load(*self.specs, node.lateness, kind, saved, optimistic(node), keyed)
        groups = arrival_groups(read_arrivals(rows, "side"))
        planned = advance_join(node, join, groups, self.namespaces)
        out, revised = late_join_results(node, join, planned, self.namespaces, self.on_error)
        self.save_state(join.dump())
        self.tally(node.origin.stream, late=len(planned.late), revised=revised)
        found = [(ts, seq, item, "") for ts, seq, item in out]
        results = with_clock(found, planned.heartbeats, fed_horizon(node, join.clock))
        if results:
            yield output_frame(results)


def side_groups(frames: list[pd.DataFrame], tag: str) -> list[list[Arrival]]:
    """The arrival groups of one side's rows (keyed as a released run reads them)."""
    rows = (frame[frame["side"] == tag] for frame in frames)
    return arrival_groups(read_arrivals(rows, "key", unkeyed=True))


def late_join_frame(node: Join | Semijoin | Diff, ctx: LowerContext) -> DataFrame:
    """The results of ``node`` over publication time: see the module doc."""
    sides = late_joined(node)
    columns = ["ts", "seq", "item", "event"]
    tagged = []
    if sides is not None:
        tagged = [timed_input(node, below, ctx) for below in (sides[0], sides[2])]
    else:  # over operators' results: each side's rows as a released run reads them
        sides = released_joined(node)
        assert sides is not None
        tagged = [fed_frame(node, *side_inputs(below), ctx) for below in (sides[0], sides[2])]
        columns.append("key")
    keyed = [
        frame.select(F.lit(0).alias(KEY), *columns, F.lit(tag).alias("side"))
        for frame, tag in zip(tagged, (LEFT, RIGHT), strict=True)
    ]
    processor = LateJoinProcessor(node, sides, ctx.namespaces, ctx.on_error(node), ctx.errors)
    out = (
        keyed[0]
        .unionByName(keyed[1])
        .groupBy(KEY)
        .transformWithStateInPandas(
            statefulProcessor=processor,
            outputStructType=OUTPUT_DDL,
            outputMode="Append",
            timeMode="None",
            # No event-time column, as for the late windows (roses_app.spark.late): a
            # pair comes at the later of its publication times, behind the watermark.
        )
    )
    return out.select(*EVENT_COLUMNS)
