"""Vectorized (Arrow/pandas) UDFs wrapping the XML item functions.

Each UDF receives a whole Arrow batch of serialized items and calls the batch
functions of ``roses_app.xmlfn`` once per batch; compiled expressions are cached per
Python worker process.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from pyspark.sql.functions import pandas_udf

Namespaces = tuple[tuple[str, str], ...]


def _once(udf: Any) -> Any:
    """Keep Spark from evaluating the UDF twice.

    A deterministic UDF whose result is both filtered on (``IS NOT NULL``) and kept
    gets copied into the filter by the optimizer, which doubles the XML work.
    """
    return udf.asNondeterministic()


def observer_udf(expr: str, namespaces: Namespaces) -> Any:
    @pandas_udf("boolean")  # type: ignore[call-overload]
    def observe(items: pd.Series) -> pd.Series:
        from roses_app.xmlfn import filter_batch

        return pd.Series(filter_batch(expr, namespaces, items.tolist()), dtype="bool")

    return observe


def accessor_udf(expr: str, namespaces: Namespaces) -> Any:
    @pandas_udf("string")  # type: ignore[call-overload]
    def access(items: pd.Series) -> pd.Series:
        from roses_app.xmlfn import map_batch

        return pd.Series(map_batch(expr, namespaces, items.tolist()), dtype="object")

    return _once(access)


def splitter_udf(expr: str, namespaces: Namespaces) -> Any:
    @pandas_udf("string")  # type: ignore[call-overload]
    def split(items: pd.Series) -> pd.Series:
        from roses_app.xmlfn import split_batch

        return pd.Series(split_batch(expr, namespaces, items.tolist()), dtype="object")

    return _once(split)
