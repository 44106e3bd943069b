"""The Spark compiler's entry: every lowering handler, one per plan node type.

The handler modules register on :func:`roses_app.spark.registry.lower`; importing
them here, at the top, makes the registry complete for whoever imports this module.
``compile_stream`` gives a stream's output rows with the columns
``stream, part, ts, seq, item``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from roses_app.algebra.plan.operators import NODE_TYPES, Split, Stream
from roses_app.spark import aggregate, joins, lower_late, sequential, stateless
from roses_app.spark.registry import (
    EVENT_COLUMNS,
    OUTPUT_COLUMNS,
    LowerContext,
    Namespaces,
    has_handler,
    heartbeat,
    lower,
    with_watermark,
)

HANDLER_MODULES = (stateless, sequential, aggregate, joins, lower_late)


def compile_stream(stream: Stream, ctx: LowerContext) -> DataFrame:
    """The streaming DataFrame of a stream's output rows."""
    frame = lower(stream.plan, ctx).where(~heartbeat())
    if not isinstance(stream.plan, Split) and "part" not in frame.columns:
        # (a window over publication time with late: publish has its late part)
        frame = frame.withColumn("part", F.lit(""))
    return frame.withColumn("stream", F.lit(stream.name)).select(*OUTPUT_COLUMNS)


def lowered_types() -> set[type]:
    """Node types that have a handler (a test checks it covers NODE_TYPES)."""
    return {t for t in NODE_TYPES if has_handler(t)}


__all__ = [
    "EVENT_COLUMNS",
    "HANDLER_MODULES",
    "OUTPUT_COLUMNS",
    "LowerContext",
    "Namespaces",
    "compile_stream",
    "lower",
    "lowered_types",
    "with_watermark",
]
