"""The pandas UDFs of the joins (:mod:`roses_app.spark.joins`): the two-item
predicate, the combine, both in one, and the join keys; one call of the batch
function per Arrow batch, evaluated above the join (never pushed into it)."""

from __future__ import annotations

from typing import Any

import pandas as pd
from pyspark.sql.functions import pandas_udf

from roses_app.algebra.plan.operators import XQuery
from roses_app.spark.counts import ErrorHook
from roses_app.spark.registry import Namespaces


def predicate_udf(expr: str, namespaces: Namespaces, on_error: ErrorHook) -> Any:
    """The two-item observer on candidate pairs; a failing pair does not match."""

    @pandas_udf("boolean")  # type: ignore[call-overload]
    def holds(first: pd.Series, second: pd.Series) -> pd.Series:
        from roses_app.xmlfn import observe2_batch

        pairs = list(zip(first.tolist(), second.tolist(), strict=True))
        return pd.Series(observe2_batch(expr, namespaces, pairs, on_error), dtype="bool")

    # Non-deterministic: evaluated once per candidate, above the join (never pushed in).
    return holds.asNondeterministic()


def combine_udf(query: XQuery | None, namespaces: Namespaces, on_error: ErrorHook) -> Any:
    """The item of a pair: the ``combine`` XQuery, or the built-in composition."""

    @pandas_udf("string")  # type: ignore[call-overload]
    def combine(first: pd.Series, second: pd.Series) -> pd.Series:
        pairs = list(zip(first.tolist(), second.tolist(), strict=True))
        return pd.Series(_pair_items(query, namespaces, pairs, on_error), dtype="object")

    return combine.asNondeterministic()


def matched_udf(
    expr: str, query: XQuery | None, namespaces: Namespaces, on_error: ErrorHook
) -> Any:
    """The predicate and the combine in one UDF: whether each candidate pair holds, and
    the item of each pair that does (None: the combine gave λ).  Two UDFs in a row
    are two Python evaluations of every batch, each with a worker of its own in every
    task (a cold one imports our modules, pandas and pyarrow first: over a second)."""

    @pandas_udf("holds boolean, item string")  # type: ignore[call-overload]
    def matched(first: pd.Series, second: pd.Series) -> pd.DataFrame:
        from roses_app.xmlfn import observe2_batch

        pairs = list(zip(first.tolist(), second.tolist(), strict=True))
        held = observe2_batch(expr, namespaces, pairs, on_error)
        kept = [pair for pair, ok in zip(pairs, held, strict=True) if ok]
        items = iter(_pair_items(query, namespaces, kept, on_error))
        return pd.DataFrame(
            {
                "holds": pd.Series(held, dtype="bool"),
                "item": pd.Series([next(items) if ok else None for ok in held], dtype="object"),
            }
        )

    return matched.asNondeterministic()


def _pair_items(
    query: XQuery | None,
    namespaces: Namespaces,
    pairs: list[tuple[str, str]],
    on_error: ErrorHook,
) -> list[str | None]:
    if query is not None:
        from roses_app.xmlfn import combine_batch

        return combine_batch(query, namespaces, pairs, on_error)
    return [_compose(a, b, on_error) for a, b in pairs]


def _compose(first: str, second: str, on_error: ErrorHook) -> str | None:
    from lxml.etree import XMLSyntaxError

    from roses_app.xmlfn.stamp import compose_items

    try:
        return compose_items(first, second)
    except (XMLSyntaxError, ValueError) as exc:  # the pair is dropped, and counted
        on_error(first, exc)
        return None


def keys_udf(path: str, namespaces: Namespaces, on_error: ErrorHook) -> Any:
    """The distinct string values ``path`` selects in each item (the join keys)."""

    @pandas_udf("array<string>")  # type: ignore[call-overload]
    def keys(items: pd.Series) -> pd.Series:
        from roses_app.xmlfn.keys import key_strings_batch

        return pd.Series(key_strings_batch(path, namespaces, items.tolist(), on_error))

    return keys.asNondeterministic()
