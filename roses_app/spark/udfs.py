"""Vectorized (Arrow/pandas) UDFs wrapping the XML item functions.

Each UDF receives a whole Arrow batch of serialized items and calls the batch
functions of ``roses_app.xmlfn`` once per batch; compiled expressions are cached per
Python worker process.  An item on which a function fails is dropped, logged with
its stream, step and guid, and counted per step in a Spark accumulator that the
driver reads (``roses run``'s /healthz shows the counts).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark import Accumulator, AccumulatorParam
from pyspark.sql.functions import pandas_udf

from roses_app.algebra.plan import Node, XQuery

log = logging.getLogger(__name__)

Namespaces = tuple[tuple[str, str], ...]
ErrorHook = Callable[[str | None, Exception], None]


class CountsParam(AccumulatorParam[dict[str, int]]):
    """Accumulates ``{step id: count}`` dictionaries from the workers."""

    def zero(self, value: dict[str, int]) -> dict[str, int]:
        return {}

    def addInPlace(self, value1: dict[str, int], value2: dict[str, int]) -> dict[str, int]:
        for key, count in value2.items():
            value1[key] = value1.get(key, 0) + count
        return value1


@dataclass(frozen=True)
class Step:
    """Where a function runs: for messages and per-step error counts."""

    stream: str
    step: str

    @classmethod
    def of(cls, node: Node) -> Step:
        return cls(node.origin.stream, node.origin.step or type(node).__name__)


def error_hook(step: Step, errors: Accumulator[dict[str, int]] | None) -> ErrorHook:
    def on_error(xml: str | None, exc: Exception) -> None:
        from roses_app.xmlfn import guid_note

        note = guid_note(xml)
        log.warning("stream %s, step %s: dropped an item%s: %s", step.stream, step.step, note, exc)
        if errors is not None:
            errors.add({step.step: 1})

    return on_error


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
