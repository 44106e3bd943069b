"""Counting the items a step drops, on the workers: the error hook and its accumulator.

Every operator's functions report through these; they are kept apart from the pandas
UDF wrappers (:mod:`roses_app.spark.udfs`), which only the per-node lowering uses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from pyspark import Accumulator, AccumulatorParam

from roses_app.algebra.plan.operators import Node

log = logging.getLogger(__name__)

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
    where: str = ""  # file:line of the step, when known

    @classmethod
    def of(cls, node: Node) -> Step:
        origin = node.origin
        where = f"{origin.file}:{origin.line}" if origin.line else ""
        return cls(origin.stream, origin.step or type(node).__name__, where)


def error_hook(step: Step, errors: Accumulator[dict[str, int]] | None) -> ErrorHook:
    def on_error(xml: str | None, exc: Exception) -> None:
        from roses_app.xmlfn import guid_note

        note = guid_note(xml)
        where = f" ({step.where})" if step.where else ""
        log.warning(
            "stream %s, step %s%s: dropped an item%s: %s", step.stream, step.step, where, note, exc
        )
        if errors is not None:
            errors.add({step.step: 1})

    return on_error
