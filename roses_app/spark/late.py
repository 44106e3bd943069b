"""What the operators over publication time share on Spark
(:mod:`roses_app.spark.lower_late`): the heartbeats and horizon they tell, and their
input.  Their state's shape is in :mod:`roses_app.spark.lateprocessor`.

Each such operator keeps its state as one JSON value, and a periodic or session
window's items in a map state of time slices (:mod:`roses_app.algebra.time.slices`): a
micro-batch writes the items it adds, and reads the slices of the windows it
computes, not every item kept.  Its input rows come from the frontier log: ``ts`` is
the ingest time (the arrival, which also drives the query's watermark, in order),
``event`` the item's publication time when it is not its ingest time.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from roses_app.algebra.plan.operators import Node
from roses_app.algebra.time.latejoin import CLOCK_SEQ
from roses_app.algebra.time.lateness import Arrival
from roses_app.spark.registry import LowerContext


def with_clock(
    rows: Sequence[tuple[int, int, str | None, str]],
    heartbeats: Sequence[Arrival],
    horizon: int | None,
) -> list[tuple[int, int, str | None, str]]:
    """``rows``, the heartbeats on time and a heartbeat (seq ``CLOCK_SEQ``) telling the
    ``horizon`` before which the operator's results are out and final: a released run
    over them (:mod:`roses_app.algebra.time.release_results`) sees those times pass and takes
    what is decided.  Every other reader of the results drops heartbeats."""
    out: list[tuple[int, int, str | None, str]] = [*rows]
    out += dict.fromkeys((a.time, a.seq, None, "") for a in heartbeats)  # a join's 2 sides
    return out if horizon is None else [*out, (horizon, CLOCK_SEQ, None, "")]


def timed_input(node: Node, below: Node, ctx: LowerContext) -> DataFrame:
    """The frontier rows of ``below``, an input of ``node``, with their ``event`` time
    (null over ingest time: the time is then the ingest time ``ts``)."""
    frame = ctx.computed.get(below)
    if frame is None:
        raise TypeError(f"{node.origin}: its input is not read from the frontier log")
    if "event" not in frame.columns:
        frame = frame.withColumn("event", F.lit(None).cast("bigint"))
    return frame
