"""Bench-only: ``benchmarks/bench_floor.py`` puts this folder on ``PYTHONPATH`` so that
every Python process of a replay (the driver, its reading child, Spark's Python
daemon and workers) imports this module at start-up.  With ``ROSES_BENCH_FLOOR`` set
(comma-separated words), it takes work out of the replay as it imports ROSES' modules:

* ``stage=none``: the fused stage hands each input item back as an output of the first
  stream, parsing nothing;
* ``stage=parse``: the same, after lxml has parsed each item (as the stage does);
* ``nocheck``: the replay does not check that each event's item is well-formed XML;
* ``nooutput``: the fused stage hands back no output (only its time mark).

Without ``ROSES_BENCH_FLOOR`` it changes nothing.  ROSES itself never imports it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

WORDS = frozenset(filter(None, os.environ.get("ROSES_BENCH_FLOOR", "").split(",")))


def _stage(module: ModuleType) -> None:
    from roses_app.algebra.planner.program import INPUT_ITEM, TICK_OUTPUT

    parse_items = "stage=parse" in WORDS
    outputs = "nooutput" not in WORDS

    def run_program(
        program: Any,
        sources: Sequence[str | None],
        ts: Sequence[int],
        seq: Sequence[int],
        items: Sequence[str | None],
        *args: Any,
        **kwargs: Any,
    ) -> list[Any]:
        if parse_items:
            from roses_app.xmlfn.xpath import parse, thread_parser

            parser = thread_parser()
            for xml in items:
                if xml is not None:
                    parse(xml, parser)
        rows: list[Any] = []
        if outputs:
            held = bool(kwargs.get("inputs_held"))  # the replay holds the input items
            rows = [
                ([0], "", t, s, INPUT_ITEM if held else x, None, t)
                for t, s, x in zip(ts, seq, items, strict=True)
                if x is not None
            ]
        if len(ts):
            rows.append(([TICK_OUTPUT], "", max(ts), max(seq), None, None, max(ts)))
        return rows

    module.run_program = run_program  # type: ignore[attr-defined]


def _items(module: ModuleType) -> None:
    def check_item(xml: str) -> None:
        return None

    module.check_item = check_item  # type: ignore[attr-defined]


PATCHES: dict[str, Callable[[ModuleType], None]] = {}
if "stage=none" in WORDS or "stage=parse" in WORDS or "nooutput" in WORDS:
    PATCHES["roses_app.xmlfn.fused"] = _stage
if "nocheck" in WORDS:
    PATCHES["roses_app.items"] = _items


class _Patcher(importlib.abc.MetaPathFinder):
    """Finds a patched module as Python would, and patches it once it has run."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if PATCHES:
    sys.meta_path.insert(0, _Patcher())
