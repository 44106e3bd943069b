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
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark import Accumulator
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import TimerValues

from roses_app.algebra.eventtime import JoinSides, late_joined
from roses_app.algebra.latejoin import LEFT, RIGHT, LateJoin, join_keyed, join_kind
from roses_app.algebra.lateness import arrival_groups
from roses_app.algebra.plan import Diff, Join, Semijoin, optimistic
from roses_app.algebra.release_fed import fed_horizon
from roses_app.spark import udfs
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


class LateJoinProcessor(JsonStateProcessor):
    """One join's :class:`LateJoin`, micro-batch after micro-batch."""

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

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        from roses_app.xmlfn.pairs import advance_join, late_join_results

        node = self.node
        saved = self.load_state()
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


def late_join_frame(node: Join | Semijoin | Diff, ctx: LowerContext) -> DataFrame:
    """The results of ``node`` over publication time: see the module doc."""
    sides = late_joined(node)
    assert sides is not None
    tagged = []
    for below, tag in ((sides[0], LEFT), (sides[2], RIGHT)):
        frame = timed_input(node, below, ctx)
        columns = ("ts", "seq", "item", "event")
        tagged.append(frame.select(F.lit(0).alias(KEY), *columns, F.lit(tag).alias("side")))
    processor = LateJoinProcessor(node, sides, ctx.namespaces, ctx.on_error(node), ctx.errors)
    out = (
        tagged[0]
        .unionByName(tagged[1])
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
