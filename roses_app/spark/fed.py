"""The rows a reader of operators' results over publication time takes: a released
run (:mod:`roses_app.spark.latesequential`) or a join over released sides
(:mod:`roses_app.spark.latejoin`).  Each branch's results with its horizon under the
branch's own seq (:func:`~roses_app.algebra.release_fed.mark_seq`), a window's results
named by branch and guid, and the items of the other branches keyed
:data:`~roses_app.algebra.release_fed.ITEMS` (:mod:`roses_app.algebra.release_fed`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from roses_app.algebra.latejoin import CLOCK_SEQ
from roses_app.algebra.lateness import LATE_PART
from roses_app.algebra.plan import Filter, Node
from roses_app.algebra.release_fed import DROPPED, ITEMS, RESULT_NAME, FedBranch, mark_seq
from roses_app.spark import udfs
from roses_app.spark.late import timed_input
from roses_app.spark.registry import LowerContext, lower, union_all


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
