"""Vectorized (Arrow/pandas) UDFs wrapping the XML item functions.

Each UDF receives a whole Arrow batch of serialized items and calls the batch
functions of ``roses_app.xmlfn`` once per batch; compiled expressions are cached per
Python worker process.  An item on which a function fails is dropped, logged with
its stream, step and guid, and counted per step (:mod:`roses_app.spark.counts`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from pyspark.sql.functions import pandas_udf

from roses_app.algebra.plan.operators import XQuery
from roses_app.spark.counts import ErrorHook
from roses_app.spark.registry import Namespaces


def _once(udf: Any) -> Any:
    """Keep Spark from evaluating the UDF twice.

    A deterministic UDF whose result is both filtered on (``IS NOT NULL``) and kept
    gets copied into the filter by the optimizer, which doubles the XML work.
    """
    return udf.asNondeterministic()


def observer_udf(expr: str, namespaces: Namespaces, on_error: ErrorHook) -> Any:
    @pandas_udf("boolean")  # type: ignore[call-overload]
    def observe(items: pd.Series) -> pd.Series:
        from roses_app.xmlfn import filter_batch

        kept = filter_batch(expr, namespaces, items.tolist(), on_error=on_error)
        return pd.Series(kept, dtype="bool")

    return observe


def _string_udf(function: str, argument: Any, namespaces: Namespaces, on_error: ErrorHook) -> Any:
    """A string-valued UDF calling ``roses_app.xmlfn.<function>`` once per batch."""

    @pandas_udf("string")  # type: ignore[call-overload]
    def apply(items: pd.Series) -> pd.Series:
        from roses_app import xmlfn

        batch = getattr(xmlfn, function)
        results = batch(argument, namespaces, items.tolist(), on_error=on_error)
        return pd.Series(results, dtype="object")

    return _once(apply)


def accessor_udf(expr: str, namespaces: Namespaces, on_error: ErrorHook) -> Any:
    """μ with an XPath accessor: the selected part of the item, None for λ."""
    return _string_udf("map_batch", expr, namespaces, on_error)


def mutator_udf(query: XQuery, namespaces: Namespaces, on_error: ErrorHook) -> Any:
    """μ with an XQuery mutator (Saxon, one call per Arrow batch)."""
    return _string_udf("mutate_batch", query, namespaces, on_error)


def splitter_udf(expr: str, namespaces: Namespaces, on_error: ErrorHook) -> Any:
    """Ψ: the output name of each item, None when it goes nowhere."""
    return _string_udf("split_batch", expr, namespaces, on_error)
