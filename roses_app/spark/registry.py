"""The lowering dispatcher and what every handler shares.

A lowered node is a streaming DataFrame with the columns ``ts, seq, item, time``
(``time``: ``ts`` as a timestamp, the event-time column the watermark is defined on);
a split adds ``part``.  Rows with a null item are heartbeats: time passed.  Every
stateless operator passes them on, so that windows see time go by; the output drops
them.

Handler modules (:mod:`~roses_app.spark.stateless`, :mod:`~roses_app.spark.sequential`,
:mod:`~roses_app.spark.aggregate`, :mod:`~roses_app.spark.joins`) register on
:func:`lower`; :mod:`roses_app.spark.lower` imports them all, so importing it gives
the complete registry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import singledispatch

from pyspark import Accumulator
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from roses_app.algebra.plan.operators import Node
from roses_app.spark import counts

Namespaces = tuple[tuple[str, str], ...]
OUTPUT_COLUMNS = ("stream", "part", "ts", "seq", "item")
EVENT_COLUMNS = ("ts", "seq", "item", "time")


@dataclass(frozen=True)
class Hooks:
    """What an operator's item functions need where they run: the namespaces, the
    accumulator counting the items they drop, per step, and the allowed lateness."""

    namespaces: Namespaces = ()
    errors: Accumulator[dict[str, int]] | None = None
    lateness: int = 0

    def on_error(self, node: Node) -> counts.ErrorHook:
        return counts.error_hook(counts.Step.of(node), self.errors)


@dataclass(frozen=True)
class LowerContext:
    """What every handler may use: the spool's event stream (with its watermark), the
    namespaces, the allowed lateness (µs), the accumulator counting items dropped by
    failing functions, per step, and the nodes already computed elsewhere (the fused
    stateless stage's outputs), which are read instead of lowered.

    ``lowered`` keeps the frame of every node object lowered with this context, so a
    sub-plan that several paths reach is lowered once (a plan is a DAG: lowering it as
    a tree may double the work per level); keyed by object, each keeps its origin's
    error counts, and holds the node so that its id is not reused."""

    events: DataFrame
    namespaces: Namespaces = ()
    errors: Accumulator[dict[str, int]] | None = None
    lateness: int = 0
    computed: Mapping[Node, DataFrame] = field(default_factory=dict)
    # how many Spark operators run the late graph's groups (0: one per group)
    late_operators: int = 0
    lowered: dict[int, tuple[Node, DataFrame]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def on_error(self, node: Node) -> counts.ErrorHook:
        return counts.error_hook(counts.Step.of(node), self.errors)

    @property
    def hooks(self) -> Hooks:
        return Hooks(self.namespaces, self.errors, self.lateness)


@singledispatch
def _dispatch(node: Node, ctx: LowerContext) -> DataFrame:
    raise NotImplementedError(f"no Spark lowering for {type(node).__name__} ({node.origin})")


def lower(node: Node, ctx: LowerContext) -> DataFrame:
    """``node`` as a streaming DataFrame of events: read when already computed, else
    through its type's handler (once per node object)."""
    done = ctx.computed.get(node)
    if done is not None:
        return done
    found = ctx.lowered.get(id(node))
    if found is None:
        found = (node, _dispatch(node, ctx))
        ctx.lowered[id(node)] = found
    return found[1]


register = _dispatch.register


def has_handler(node_type: type) -> bool:
    return _dispatch.dispatch(node_type) is not _dispatch.dispatch(object)


def union_all(frames: Sequence[DataFrame]) -> DataFrame:
    """The rows of all ``frames`` (equal columns), one frame."""
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other)
    return frame


def with_watermark(events: DataFrame, lateness: int) -> DataFrame:
    """Events with the event-time column and the watermark on it."""
    timed = events.withColumn("time", F.timestamp_micros(F.col("ts")))
    return timed.withWatermark("time", f"{lateness} microseconds")


def heartbeat() -> Column:
    """True on heartbeat rows (a Column needs a running session: built on use)."""
    return F.col("item").isNull()


def above_watermark(condition: Column) -> Column:
    """``condition``, kept above the watermark: time is global, so every source's
    events move it, as in the reference evaluator.  Spark pushes a filter below the
    watermark unless it refers to the event-time column; ``time`` is never null, so
    the extra term changes nothing else."""
    return condition | F.col("time").isNull()
