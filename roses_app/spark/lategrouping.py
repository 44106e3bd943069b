"""Spark lowering of a windowed grouping over publication time: the rule of
:mod:`roses_app.algebra.lategrouping`, run by one ``transformWithStateInPandas``
operator.

As for the late joins (:mod:`roses_app.spark.latejoin`), the rows go to one operator
under one constant key: the clock that decides what is too late, and what is final,
is the latest time seen under every key.  Its state (the buckets kept and the clock)
is JSON in one value state.  Each micro-batch's results are reduced in one call per
key.  Items later than the lateness are counted under ``late:STREAM``, results
computed again but unchanged under ``unchanged:STREAM``, and revisions (results that
replaced a published one) under ``revised:STREAM``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark import Accumulator
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import TimerValues

from roses_app.algebra.eventtime import late_grouped
from roses_app.algebra.lategrouping import LateGrouping
from roses_app.algebra.lateness import arrival_groups
from roses_app.algebra.plan import WindowedGrouping
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

KEY = "grouping_key"


class LateGroupingProcessor(JsonStateProcessor):
    """One windowed grouping's :class:`LateGrouping`, micro-batch after micro-batch."""

    def __init__(
        self,
        node: WindowedGrouping,
        namespaces: Namespaces,
        on_error: udfs.ErrorHook,
        tallies: Accumulator[dict[str, int]] | None,
    ) -> None:
        super().__init__(namespaces, on_error, tallies)
        self.node = node

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        from roses_app.xmlfn.reduce import advance_grouping

        node = self.node
        grouping = LateGrouping.load(node.size, node.lateness, node.optimistic, self.load_state())
        groups = arrival_groups(read_arrivals(rows, "key"))
        planned, settled, published = advance_grouping(
            grouping, groups, node, self.namespaces, self.on_error
        )
        self.save_state(grouping.dump())
        revised = sum(1 for e, _ in published if e.revision)
        self.tally(
            node.stream, late=len(planned.late), unchanged=settled.unchanged, revised=revised
        )
        found = [(e.time, e.at, item, "") for e, item in published]
        results = with_clock(found, planned.heartbeats, fed_horizon(node, grouping.clock))
        if results:
            yield output_frame(results)


def late_grouping_frame(node: WindowedGrouping, ctx: LowerContext) -> DataFrame:
    """The results of ``node`` over publication time: see the module doc."""
    below = late_grouped(node)
    assert below is not None
    frame = timed_input(node, below, ctx)
    split = udfs.splitter_udf(node.by, ctx.namespaces, ctx.on_error(node))
    keyed = frame.withColumn("key", split(F.col("item")))
    rows = keyed.select(F.lit(0).alias(KEY), "ts", "seq", "item", "event", "key")
    processor = LateGroupingProcessor(node, ctx.namespaces, ctx.on_error(node), ctx.errors)
    out = rows.groupBy(KEY).transformWithStateInPandas(
        statefulProcessor=processor,
        outputStructType=OUTPUT_DDL,
        outputMode="Append",
        timeMode="None",
        # No event-time column, as for the late windows (roses_app.spark.late): a
        # result comes at its item's publication time, behind the watermark.
    )
    return out.select(*EVENT_COLUMNS)
