"""Lowering of the stateless operators one node at a time: Source, Filter, Map, Union,
Split, and Unnest over ingest time (its handler is in
:mod:`roses_app.spark.lower_late`, which also runs it in a released run).  The
multi-query engine computes the stateless part of the plan in one fused stage instead
(:mod:`roses_app.spark.fused`); these handlers lower the stateless nodes above stateful
ones (a filter over an aggregate, say)."""

from __future__ import annotations

from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf

from roses_app.algebra.plan.operators import Filter, Map, Source, Split, Union, Unnest
from roses_app.spark import udfs
from roses_app.spark.counts import ErrorHook
from roses_app.spark.registry import (
    EVENT_COLUMNS,
    LowerContext,
    above_watermark,
    heartbeat,
    lower,
    register,
    union_all,
)


@register
def _source(node: Source, ctx: LowerContext) -> DataFrame:
    # Heartbeats belong to every source: time passes for all of them.
    mine = (F.col("source") == F.lit(node.name)) | heartbeat()
    return ctx.events.where(above_watermark(mine)).select(*EVENT_COLUMNS)


@register
def _filter(node: Filter, ctx: LowerContext) -> DataFrame:
    upstream = lower(node.input, ctx)
    observe = udfs.observer_udf(node.where, ctx.namespaces, ctx.on_error(node))
    return upstream.where(heartbeat() | observe(F.col("item")))


@register
def _map(node: Map, ctx: LowerContext) -> DataFrame:
    upstream = lower(node.input, ctx)
    hook = ctx.on_error(node)
    function = (
        udfs.mutator_udf(node.xquery, ctx.namespaces, hook)
        if node.xquery is not None
        else udfs.accessor_udf(node.xpath, ctx.namespaces, hook)
    )
    mapped = upstream.withColumn("mapped", function(F.col("item")))
    # an empty result is λ: dropped (a heartbeat stays one)
    kept = mapped.where(heartbeat() | F.col("mapped").isNotNull())
    return kept.withColumn("item", F.col("mapped")).drop("mapped")


@register
def _union(node: Union, ctx: LowerContext) -> DataFrame:
    sources = [child.name for child in node.inputs if isinstance(child, Source)]
    if len(sources) == len(node.inputs) and not any(c in ctx.computed for c in node.inputs):
        # A union of plain sources reads the spool once instead of once per source.
        mine = F.col("source").isin(sources) | heartbeat()
        return ctx.events.where(above_watermark(mine)).select(*EVENT_COLUMNS)
    return union_all([lower(child, ctx) for child in node.inputs])


@register
def _split(node: Split, ctx: LowerContext) -> DataFrame:
    upstream = lower(node.input, ctx)
    split = udfs.splitter_udf(node.by, ctx.namespaces, ctx.on_error(node))
    named = upstream.withColumn("part", split(F.col("item")))
    return named.where(F.col("part").isNotNull())


def unnest_frame(node: Unnest, ctx: LowerContext) -> DataFrame:
    """Unnest over ingest time (the handler is in :mod:`roses_app.spark.lower_late`,
    which also lowers it over publication time)."""
    upstream = lower(node.input, ctx)
    nested = unnest_udf(ctx.on_error(node))
    found = upstream.withColumn("nested", nested(F.col("item")))
    # A heartbeat stays one row; an item gives one row per nested item (none: gone).
    rows = F.when(F.col("item").isNull(), F.array(F.lit(None).cast("string")))
    exploded = found.withColumn("item", F.explode(rows.otherwise(F.col("nested"))))
    return exploded.select(*EVENT_COLUMNS)


def unnest_udf(on_error: ErrorHook) -> Any:
    """The items nested one level below each item's children (None for a heartbeat)."""

    @pandas_udf("array<string>")  # type: ignore[call-overload]
    def unnest(items: pd.Series) -> pd.Series:
        return pd.Series([nested_items(xml, on_error) for xml in items.tolist()], dtype="object")

    return unnest.asNondeterministic()


def nested_items(xml: str | None, on_error: ErrorHook) -> list[str] | None:
    """The items nested one level below ``xml``'s children, each once (None for a
    heartbeat; a broken item goes to ``on_error`` and gives none)."""
    from lxml.etree import XMLSyntaxError

    from roses_app.xmlfn.stamp import unnest_items

    if xml is None:
        return None
    try:
        # a stream is a set of events: the same nested item twice is one event
        return list(dict.fromkeys(unnest_items(xml)))
    except (XMLSyntaxError, ValueError) as exc:
        on_error(xml, exc)
        return []
