"""Lowering of Join (inner, left, full, product), Semijoin, Diff and Unnest.

The event form of the seed's rewrite (:mod:`roses_app.algebra.reference.time_operators`): a
join input is a stream (ω0: the same timestamp only) or a sliding time window
(width w, delay d: the other side's event at t meets the events with
t − d − w + 1 ≤ ts ≤ t − d).  With ``gap = l.ts − r.ts``, a pair is

* in A when the left event meets the right window: ``d_R ≤ gap ≤ d_R + w_R − 1``;
* in B when the right event meets the left window: ``−(d_L + w_L − 1) ≤ gap ≤ −d_L``.

All of it is native stream-stream joins, whose state Spark drops once the
watermark has passed:

* candidates: an inner join on time buckets (:class:`Slots`) and, when the predicate
  has the form ``$i1/PATH = $i2/PATH2 [and ...]`` (:mod:`roses_app.algebra.plan.equikeys`),
  on key values too (a hash join); filtered to A or B exactly, then the whole
  predicate on the candidates and the combine on the matches (for a join, both in one
  pandas UDF);
* inner: the matches, each at max(l.ts, r.ts), max(l.seq, r.seq);
* left, full, product: the events of both sides left-outer joined with the events the
  matches were found by (the left one of a pair in A, the right one in B): a row with
  a match gives the pair (once), a row without one an unmatched event;
* Semijoin and Diff: the left events left-semi or left-outer joined with those of the
  matches in A.

Spark keeps a row's state until the watermark reaches a marked event-time key, and
drops input rows at or below the watermark as late.  The keys here are the first µs
after what they stand for (an event's time + 1, a bucket's end + 1), so a time is
decided once the watermark is past it (``ts < watermark``), as in the reference, to
the µs (Spark's range-condition eviction rounds to whole milliseconds instead, which
tick fixtures notice), and the watermark passes on unchanged to the operators after.
Heartbeats are dropped before joining: they only move the watermark.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from roses_app.algebra.plan.equikeys import EquiKey, equi_key
from roses_app.algebra.plan.operators import Diff, Join, Node, Semijoin, TimeWindow, Window
from roses_app.algebra.plan.specs import describe_window
from roses_app.spark.join_udfs import combine_udf, keys_udf, matched_udf, predicate_udf
from roses_app.spark.registry import LowerContext, above_watermark, lower

TRUE = "true()"
Metadata = dict[str, Any]
FIELDS = ("ts", "seq", "item")  # an event, without its time (rebuilt from ts)
WATERMARK_DELAY = "spark.watermarkDelayMs"  # the key of Spark's event-time marker

# -- time ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reach:
    """How far back a side's window reaches from the other side's event at t: the
    events with t − delay − width + 1 ≤ ts ≤ t − delay (a plain stream: ts = t)."""

    width: int = 1
    delay: int = 0


@dataclass(frozen=True)
class Gap:
    """The pairs with ``low ≤ l.ts − r.ts ≤ high``."""

    low: int
    high: int

    def holds(self) -> Column:
        gap = F.col("l_ts") - F.col("r_ts")
        return (gap >= F.lit(self.low)) & (gap <= F.lit(self.high))


def by_left(right: Reach) -> Gap:
    """A: the left event meets the right window at its time."""
    return Gap(right.delay, right.delay + right.width - 1)


def by_right(left: Reach) -> Gap:
    """B: the right event meets the left window at its time."""
    return Gap(-(left.delay + left.width - 1), -left.delay)


def reach_of(node: Node) -> tuple[Node, Reach]:
    """A binary operator's input: the stream below a window, and the window's reach."""
    if not isinstance(node, Window):
        return node, Reach()
    spec = node.spec
    if not isinstance(spec, TimeWindow) or spec.period is not None:
        raise NotImplementedError(
            f"a join input must be a sliding time window on Spark, "
            f"not {describe_window(spec)} ({node.origin})"
        )
    return node.input, Reach(spec.width, spec.delay)


def marked(micros: Column, name: str, metadata: Metadata) -> Column:
    """A timestamp column marked as the event time (``metadata``: the watermark's)."""
    return F.timestamp_micros(micros).alias(name, metadata=metadata)


def decided(prefix: str, metadata: Metadata) -> Column:
    """``prefix_decided``: the first µs after the event, the key of its state."""
    return marked(F.col(f"{prefix}_ts") + 1, f"{prefix}_decided", metadata)


def _floor_div(column: Column, size: int) -> Column:
    """Integer floor division, right below zero too (Spark's ``div`` truncates)."""
    exact = column - F.pmod(column, F.lit(size))
    return (exact / F.lit(size)).cast("bigint")  # exact: a multiple of size


@dataclass(frozen=True)
class Slots:
    """Time buckets of the width of the gap range: the equality Spark needs in every
    stream-stream join, and the key its state is dropped by.

    A right event is in the bucket of its time; a left event in the one or two
    buckets its partners' times [l.ts − high, l.ts − low] cover, so every pair meets
    in exactly one bucket.  A bucket's key, its *slot*, is the first µs after the
    bucket's end, plus ``high`` (how long after it a left event may still come for a
    right one): events to come are not before the watermark, so once it reaches the
    slot, none of them can meet the bucket's events.  An event's slots are never
    before its time + 1: a new event is never late.
    """

    gap: Gap
    metadata: Metadata

    @property
    def size(self) -> int:
        return self.gap.high - self.gap.low + 1

    def slot(self, bucket: Column, name: str) -> Column:
        return marked((bucket + 1) * self.size + max(self.gap.high, 0), name, self.metadata)

    def left(self, frame: DataFrame) -> DataFrame:
        first = _floor_div(F.col("l_ts") - self.gap.high, self.size)
        last = _floor_div(F.col("l_ts") - self.gap.low, self.size)
        buckets = frame.withColumn("l_bucket", F.explode(F.sequence(first, last)))
        return buckets.select("*", self.slot(F.col("l_bucket"), "l_slot")).drop("l_bucket")

    def right(self, frame: DataFrame) -> DataFrame:
        return frame.select("*", self.slot(_floor_div(F.col("r_ts"), self.size), "r_slot"))


# -- candidates and matches ------------------------------------------------------------


@dataclass(frozen=True)
class Sides:
    """A binary operator's inputs, as item events with columns ``l_*`` and ``r_*``."""

    left: DataFrame
    right: DataFrame
    left_reach: Reach
    right_reach: Reach
    metadata: Metadata  # the watermark's event-time marker


def items_of(frame: DataFrame, prefix: str) -> DataFrame:
    """A lowered input without heartbeats; ``prefix_time`` is a plain timestamp (a
    join input has one event-time column: the key its state is dropped by)."""
    # above the watermark operator, which must see the heartbeats
    kept = frame.where(above_watermark(F.col("item").isNotNull()))
    fields = [F.col(c).alias(f"{prefix}_{c}") for c in FIELDS]
    return kept.select(*fields, F.col("time").alias(f"{prefix}_time", metadata={}))


def watermark_marker(frame: DataFrame, ctx: LowerContext) -> Metadata:
    """The metadata marking ``frame``'s ``time`` as the event time; made up from the
    lateness if an operator before lost it (only its presence matters to Spark)."""
    found = dict(frame.schema["time"].metadata)
    return found if WATERMARK_DELAY in found else {WATERMARK_DELAY: ctx.lateness // 1000}


def sides(node: Join | Semijoin | Diff, ctx: LowerContext) -> Sides:
    left_node, left_reach = reach_of(node.left)
    right_node, right_reach = reach_of(node.right)
    left = lower(left_node, ctx)
    right = items_of(lower(right_node, ctx), "r")
    metadata = watermark_marker(left, ctx)
    return Sides(items_of(left, "l"), right, left_reach, right_reach, metadata)


def _with_keys(
    frame: DataFrame, prefix: str, path: str, ctx: LowerContext, node: Node
) -> DataFrame:
    keys = keys_udf(path, ctx.namespaces, ctx.on_error(node))
    with_keys = frame.withColumn(f"{prefix}_keys", keys(F.col(f"{prefix}_item")))
    return with_keys.withColumn(f"{prefix}_key", F.explode(f"{prefix}_keys"))


def candidates(
    s: Sides, gaps: list[Gap], key: EquiKey | None, ctx: LowerContext, node: Node
) -> DataFrame:
    """Stream-stream inner join: the pairs within one of ``gaps`` (and sharing a key
    value), each once."""
    slots = Slots(Gap(min(g.low for g in gaps), max(g.high for g in gaps)), s.metadata)
    left, right = slots.left(s.left), slots.right(s.right)
    on = F.col("l_slot") == F.col("r_slot")
    within = reduce(lambda a, b: a | b, (gap.holds() for gap in gaps))
    if key is None:
        return left.join(right, on & within, "inner").drop("l_slot", "r_slot")
    left = _with_keys(left, "l", key.left, ctx, node)
    right = _with_keys(right, "r", key.right, ctx, node)
    joined = left.join(right, on & (F.col("l_key") == F.col("r_key")) & within, "inner")
    # A pair sharing several key values is found once per value: keep the smallest.
    first = F.array_min(F.array_intersect(F.col("l_keys"), F.col("r_keys")))
    kept = joined.where(F.col("l_key") == first)
    return kept.drop("l_slot", "r_slot", "l_keys", "l_key", "r_keys", "r_key")


def matches(s: Sides, gaps: list[Gap], on: str, ctx: LowerContext, node: Node) -> DataFrame:
    """The pairs within one of ``gaps`` for which the predicate holds."""
    pairs = candidates(s, gaps, equi_key(on), ctx, node)
    if on.strip() == TRUE:
        return pairs
    holds = predicate_udf(on, ctx.namespaces, ctx.on_error(node))
    return pairs.where(holds(F.col("l_item"), F.col("r_item")))


def events(
    frame: DataFrame, ts: Column, seq: Column, item: Column, metadata: Metadata
) -> DataFrame:
    """An operator's output: ``ts, seq, item`` and ``time``, marked as the event time
    for the stateful operators after this one."""
    return frame.select(
        ts.alias("ts"), seq.alias("seq"), item.alias("item"), marked(ts, "time", metadata)
    )


# -- the left events with or without a partner (semijoin, diff) ------------------------


def _found_left(pairs: DataFrame, metadata: Metadata) -> DataFrame:
    """The left events of the pairs, as ``m_*`` columns keyed by ``m_decided``."""
    fields = [F.col(f"l_{c}").alias(f"m_{c}") for c in FIELDS]
    return pairs.select(*fields, marked(F.col("l_ts") + 1, "m_decided", metadata))


def _same_event(prefix: str) -> Column:
    # <=> rather than =: for =, Spark adds `item IS NOT NULL` filters and pushes them
    # below the watermark operator, which would then miss the heartbeats.
    return (
        (F.col(f"{prefix}_decided") == F.col("m_decided"))
        & F.col(f"{prefix}_seq").eqNullSafe(F.col("m_seq"))
        & F.col(f"{prefix}_item").eqNullSafe(F.col("m_item"))
    )


def _left_events(joined: DataFrame, metadata: Metadata) -> DataFrame:
    return events(joined, F.col("l_ts"), F.col("l_seq"), F.col("l_item"), metadata)


def with_partner(s: Sides, pairs: DataFrame) -> DataFrame:
    """The left events in one of the pairs, each once, as soon as it is found."""
    left = s.left.select("*", decided("l", s.metadata))
    joined = left.join(_found_left(pairs, s.metadata), _same_event("l"), "left_semi")
    return _left_events(joined, s.metadata)


def without_partner(s: Sides, pairs: DataFrame) -> DataFrame:
    """The left events in none of the pairs, once the watermark is past them."""
    left = s.left.select("*", decided("l", s.metadata))
    joined = left.join(_found_left(pairs, s.metadata), _same_event("l"), "left_outer")
    return _left_events(joined.where(F.col("m_ts").isNull()), s.metadata)


# -- the outer joins -------------------------------------------------------------------


def _tagged(frame: DataFrame, prefix: str, metadata: Metadata) -> DataFrame:
    """One side's events as ``e_*`` columns, ``e_side`` naming the side."""
    fields = [F.col(f"{prefix}_{c}").alias(f"e_{c}") for c in FIELDS]
    key = marked(F.col(f"{prefix}_ts") + 1, "e_decided", metadata)
    return frame.select(F.lit(prefix).alias("e_side"), *fields, key)


def _found(pairs: DataFrame, gaps: tuple[Gap, Gap], metadata: Metadata) -> DataFrame:
    """The events the pairs were found by (``m_*``): the left one of a pair in A, the
    right one of a pair in B.  ``m_emit`` is set on one row per pair with an item:
    the pair's event comes out of the outer join with that row."""
    in_a, in_b = gaps[0].holds(), gaps[1].holds()
    has_item = F.col("p_item").isNotNull()

    def event(prefix: str, found_by: Column, emit: Column) -> Column:
        fields = [F.col(f"{prefix}_{c}").alias(c) for c in FIELDS]
        return F.when(found_by, F.struct(F.lit(prefix).alias("side"), *fields, emit.alias("emit")))

    found = F.array(event("l", in_a, has_item), event("r", in_b, has_item & ~in_a))
    rows = pairs.select(F.explode(found).alias("m"), "p_ts", "p_seq", "p_item")
    return rows.where(F.col("m").isNotNull()).select(
        *(F.col(f"m.{c}").alias(f"m_{c}") for c in ("side", *FIELDS, "emit")),
        marked(F.col("m.ts") + 1, "m_decided", metadata),
        "p_ts",
        "p_seq",
        "p_item",
    )


def _outer(pairs: DataFrame, s: Sides, gaps: tuple[Gap, Gap], kind: str) -> DataFrame:
    """Left, full and product joins: one stateful join gives the pairs' events and,
    once the watermark is past them, the unmatched events (only the left ones for a
    left join)."""
    every = _tagged(s.left, "l", s.metadata).unionByName(_tagged(s.right, "r", s.metadata))
    same = (F.col("e_side") == F.col("m_side")) & _same_event("e")
    joined = every.join(_found(pairs, gaps, s.metadata), same, "left_outer")
    alone = F.col("m_side").isNull()
    if kind == "left":
        alone = alone & (F.col("e_side") == F.lit("l"))
    kept = joined.where(alone | F.col("m_emit"))

    def pick(name: str) -> Column:
        return F.when(F.col("m_side").isNull(), F.col(f"e_{name}")).otherwise(F.col(f"p_{name}"))

    return events(kept, pick("ts"), pick("seq"), pick("item"), s.metadata)


# -- handlers --------------------------------------------------------------------------


def _composed(s: Sides, gaps: list[Gap], node: Join, ctx: LowerContext) -> DataFrame:
    """The matches with their event ``p_ts, p_seq, p_item`` (p_item None: the combine
    gave λ, no event; the pair is still a match)."""
    pairs = candidates(s, gaps, equi_key(node.on), ctx, node)
    on_error = ctx.on_error(node)
    if node.on.strip() == TRUE:
        item = combine_udf(node.combine, ctx.namespaces, on_error)(F.col("l_item"), F.col("r_item"))
    else:
        matched = matched_udf(node.on, node.combine, ctx.namespaces, on_error)
        pairs = pairs.select("*", matched(F.col("l_item"), F.col("r_item")).alias("m"))
        pairs = pairs.where(F.col("m.holds"))
        item = F.col("m.item")
    return pairs.select(
        *[c for c in pairs.columns if c != "m"],
        F.greatest("l_ts", "r_ts").alias("p_ts"),
        F.greatest("l_seq", "r_seq").alias("p_seq"),
        item.alias("p_item"),
    )


def join_frame(node: Join, ctx: LowerContext) -> DataFrame:
    """⋈ over ingest time (:mod:`roses_app.spark.lower_late` lowers it over
    publication time)."""
    s = sides(node, ctx)
    gaps = (by_left(s.right_reach), by_right(s.left_reach))
    pairs = _composed(s, list(gaps), node, ctx)
    if node.kind != "inner":
        return _outer(pairs, s, gaps, node.kind)
    kept = pairs.where(F.col("p_item").isNotNull())
    return events(kept, F.col("p_ts"), F.col("p_seq"), F.col("p_item"), s.metadata)


def semijoin_frame(node: Semijoin, ctx: LowerContext) -> DataFrame:
    """⋉ over ingest time (as :func:`join_frame`)."""
    s = sides(node, ctx)
    return with_partner(s, matches(s, [by_left(s.right_reach)], node.on, ctx, node))


def diff_frame(node: Diff, ctx: LowerContext) -> DataFrame:
    """The difference over ingest time (as :func:`join_frame`)."""
    s = sides(node, ctx)
    return without_partner(s, matches(s, [by_left(s.right_reach)], node.on, ctx, node))
