"""Lowering of α (Aggregate), γ (GroupBy) and Nest: native streaming aggregation.

The input rows are bucketed with Spark's ``window()`` on the event-time column (and
grouped by key for γ); each group collects its items as ``(ts, seq, item)`` structs.
In append mode Spark emits a group once the watermark has passed its bucket, and a
pandas UDF then runs the reducer (or builds the nest item) over the group's items in
event order (ts, seq, item), duplicates removed: a stream is a set of events.

Buckets.  The seed's periodic window refreshed at r = t0 + k·f (k ≥ 0) holds the
events with r−d−w+1 ≤ ts ≤ r−d; on Spark that is the half-open bucket
[r−d−w+1, r−d+1) of ``window(time, w, f, startTime)``, startTime ≡ t0−d−w+1 (mod f),
in µs.  Spark wants slide ≤ duration, so a window with holes (w < f) uses buckets of
f µs that *end* where the seed's window ends and keeps the items of their last w µs:
the bucket closes exactly when the window does.  Buckets before the first refresh
(r < t0), which ``window()`` makes too, are dropped.  Every other input (Nest's
always) is grouped per timestamp: a bucket [t, t+1) of one µs, and ``ts`` as a key.

Closing.  Spark evicts a group when ``window.end <= watermark``, that is when its
inclusive end r−d (or t) is ``< watermark``: the reference's "closed when end <
horizon", with the watermark in the place of the horizon.  (Spark keeps the watermark
in milliseconds, max event time and lateness each rounded down.)

Output: ``ts`` = the inclusive end (the window's end, or the timestamp), ``seq`` = the
smallest seq of the group, ``item`` stamped with the stream, bounds and key
(:func:`roses_app.xmlfn.stamp.stamp_window`), ``time`` = ``window_time(window)``:
``ts`` as a timestamp, with the watermark kept, so stateful operators may follow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf

from roses_app.algebra.plan.operators import Aggregate, GroupBy, Nest, TimeWindow, XQuery
from roses_app.algebra.time.windows import BucketLayout, bucket_layout, periodic_input
from roses_app.errors import QueryError
from roses_app.spark import counts, udfs
from roses_app.spark.registry import EVENT_COLUMNS, LowerContext, Namespaces, lower
from roses_app.xmlfn.reduce import reduce_groups

# Spark's mark of a column with a watermark (the field metadata of ``time``).
WATERMARK_METADATA = "spark.watermarkDelayMs"


# -- buckets ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Buckets(BucketLayout):
    """Spark ``window()`` arguments (µs), and what the seed's window keeps of a bucket
    (the layout of :func:`roses_app.algebra.time.windows.bucket_layout`)."""

    # One group per input timestamp: ``ts`` is a grouping key too, since the bucket
    # is only the watermark's handle (see PER_TIMESTAMP).
    per_timestamp: bool = False

    def column(self) -> Column:
        return F.window(
            "time",
            f"{self.duration} microseconds",
            f"{self.slide} microseconds",
            f"{self.offset} microseconds",
        )


# ``time`` is ``ts`` as a timestamp, except after a sequential operator, which stamps
# a ts ≤ 0 at 1 µs (Spark refuses its rows at or before the first watermark, the
# epoch): grouping by ``ts`` as well keeps such a time apart from time 1.
PER_TIMESTAMP = Buckets(duration=1, slide=1, offset=0, width=1, per_timestamp=True)


def periodic_buckets(spec: TimeWindow) -> Buckets:
    """The buckets of a periodic time window (see the module doc)."""
    layout = bucket_layout(spec)
    return Buckets(layout.duration, layout.slide, layout.offset, layout.width, layout.first_end)


# -- grouping --------------------------------------------------------------------------


def collect(frame: DataFrame, buckets: Buckets, key: Column | None = None) -> DataFrame:
    """One row per closed non-empty group: ``time, ts, start, key, seq, items``.

    Heartbeats (and items without a key) go into the groups as nulls, which
    ``collect_list`` skips: filtering them out first would let Spark push the filter
    below the watermark, which would then no longer see the heartbeats' time."""
    wanted = F.col("item").isNotNull()
    if key is None:
        keyed = frame.withColumn("key", F.lit(None).cast("string"))
    else:
        keyed = frame.withColumn("key", key)
        wanted = wanted & F.col("key").isNotNull()
    event = F.when(wanted, F.struct("ts", "seq", "item"))
    by = ["key", "ts"] if buckets.per_timestamp else ["key"]
    grouped = keyed.groupBy(buckets.column().alias("window"), *by).agg(
        F.collect_list(event).alias("events")
    )
    return _bounded(grouped, buckets)


def _bounded(grouped: DataFrame, buckets: Buckets) -> DataFrame:
    """Each group's inclusive bounds, and its items in event order without duplicates."""
    window_end = F.unix_micros(F.col("window.end")) - F.lit(1)  # inclusive
    end = F.col("ts") if buckets.per_timestamp else window_end
    start = end - F.lit(buckets.width - 1)
    events = F.col("events")
    if buckets.width < buckets.duration:  # a window with holes: the bucket's tail only
        events = F.filter(events, lambda e: e["ts"] >= start)
    bounded = grouped.select(
        F.window_time("window").alias("time"),  # keeps the watermark, unlike a new column
        end.alias("ts"),
        start.alias("start"),
        "key",
        F.array_sort(F.array_distinct(events)).alias("events"),
    )
    kept = F.size("events") > 0
    if buckets.first_end is not None:
        kept = kept & (F.col("ts") >= F.lit(buckets.first_end - 1))
    return bounded.where(kept).select(
        "time",
        "ts",
        "start",
        "key",
        F.array_min(F.transform("events", lambda e: e["seq"])).alias("seq"),
        F.transform("events", lambda e: e["item"]).alias("items"),
    )


def grouped_input(node: Aggregate | GroupBy | Nest, ctx: LowerContext) -> tuple[DataFrame, Buckets]:
    """The frame to group and its buckets: below a periodic window, or per timestamp."""
    periodic = None if isinstance(node, Nest) else periodic_input(node.input)
    if periodic is not None:
        below, spec = periodic
        return lower(below, ctx), periodic_buckets(spec)
    frame = lower(node.input, ctx)
    if WATERMARK_METADATA not in frame.schema["time"].metadata:
        # Spark would only say "append mode needs a watermark" when the query starts.
        raise QueryError(
            f"{type(node).__name__} at {node.origin}: its input ({type(node.input).__name__}) "
            "has lost the watermark on its time column, so Spark cannot tell when a "
            "timestamp is complete; the input's lowering must keep it (for "
            "transformWithStateInPandas: eventTimeColumnName='time')"
        )
    return frame, PER_TIMESTAMP


def _finish(groups: DataFrame, item: Column) -> DataFrame:
    out = groups.select("ts", "seq", item.alias("item"), "time")
    return out.where(F.col("item").isNotNull()).select(*EVENT_COLUMNS)


def aggregate_frame(node: Aggregate, ctx: LowerContext) -> DataFrame:
    """α over ingest time (:mod:`roses_app.spark.lower_late` lowers it over
    publication time)."""
    frame, buckets = grouped_input(node, ctx)
    groups = collect(frame, buckets)
    reduce = reducer_udf(node.reduce, ctx.namespaces, node.stream, ctx.on_error(node))
    return _finish(groups, reduce("items", "start", "ts", "key"))


def group_by_frame(node: GroupBy, ctx: LowerContext) -> DataFrame:
    """γ over ingest time (as :func:`aggregate_frame`)."""
    frame, buckets = grouped_input(node, ctx)
    split = udfs.splitter_udf(node.by, ctx.namespaces, ctx.on_error(node))
    groups = collect(frame, buckets, split(F.col("item")))
    reduce = reducer_udf(node.reduce, ctx.namespaces, node.stream, ctx.on_error(node))
    return _finish(groups, reduce("items", "start", "ts", "key"))


def nest_frame(node: Nest, ctx: LowerContext) -> DataFrame:
    """Nest over ingest time (as :func:`aggregate_frame`)."""
    frame, buckets = grouped_input(node, ctx)
    groups = collect(frame, buckets)
    return _finish(groups, nester_udf(ctx.on_error(node))("items", "ts"))


# -- the functions the UDFs run (plain Python: the unit tests call them too) -----------


def nest_groups(
    groups: Sequence[tuple[Sequence[str], int]], on_error: counts.ErrorHook | None = None
) -> list[str | None]:
    """The nest item of each (items, ts) group."""
    from lxml import etree

    from roses_app.xmlfn.batch import report
    from roses_app.xmlfn.stamp import nest_items

    out: list[str | None] = []
    for items, ts in groups:
        try:
            out.append(nest_items(list(items), ts))
        except (etree.XMLSyntaxError, ValueError) as exc:  # items are checked upstream
            report(on_error, "nest", items[0] if len(items) else None, exc)
            out.append(None)
    return out


def _keys(keys: pd.Series) -> list[str | None]:
    # Arrow gives None for a null string; be safe with pandas' NaN all the same.
    return [key if isinstance(key, str) else None for key in keys.tolist()]


def reducer_udf(
    query: XQuery, namespaces: Namespaces, stream: str, on_error: counts.ErrorHook
) -> Any:
    @pandas_udf("string")  # type: ignore[call-overload]
    def reduce(items: pd.Series, start: pd.Series, end: pd.Series, key: pd.Series) -> pd.Series:
        groups = list(zip(items.tolist(), start.tolist(), end.tolist(), _keys(key), strict=True))
        return pd.Series(reduce_groups(query, namespaces, stream, groups, on_error), dtype="object")

    # Non-deterministic: evaluated once, not again in the filter on its result.
    return reduce.asNondeterministic()


def nester_udf(on_error: counts.ErrorHook) -> Any:
    @pandas_udf("string")  # type: ignore[call-overload]
    def nest(items: pd.Series, ts: pd.Series) -> pd.Series:
        groups = list(zip(items.tolist(), ts.tolist(), strict=True))
        return pd.Series(nest_groups(groups, on_error), dtype="object")

    return nest.asNondeterministic()
