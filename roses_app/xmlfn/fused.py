"""Running a fused stateless program over a batch of input events.

Each item is parsed once; every step works on trees (a map's accessor builds a new
tree, a mutator's result is parsed only if a later step needs it).  Steps run in
topological order, each over the rows that reached it, so a step no row reaches costs
nothing.  Filters reading the same step go through a presearcher
(:mod:`roses_app.xmlfn.presearch`): one scan of each item names the observers that may
hold, and only those are evaluated; those it decides exactly are not evaluated at all.
XQuery mutators stay batched: one call per mutator per batch.

The result follows the reference semantics of each node: a union is a set of
events, so the copies of one input event that reach a step by several paths are one
(compared by their serialized item).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lxml import etree

from roses_app.algebra.planner.program import INPUT_ITEM, TICK_OUTPUT, Program, Step
from roses_app.heap import collector_paused
from roses_app.items import content_hash, item_identity
from roses_app.xmlfn import budget
from roses_app.xmlfn.batch import (
    OnError,
    logging_hook,
    report,
)
from roses_app.xmlfn.fused_compile import Compiled, compiled, shipped_analyses
from roses_app.xmlfn.xpath import parse, thread_parser

if TYPE_CHECKING:
    from roses_app.xmlfn.presearch import Presearcher

__all__ = ["Compiled", "Run", "compiled", "run_program", "shipped_analyses"]

log = logging.getLogger(__name__)

# outputs (indexes into Program.outputs; TICK_OUTPUT for a time mark), part, ts (the
# item's time), seq, item, guid, arrival (the input row's ingest time)
Row = tuple[list[int], str, int, int, str | None, str | None, int]
HookFor = Callable[[Step], OnError]


class Val:
    """An item on its way through the steps: a tree, its text, or both (lazily); and
    its time when it is not its input row's ingest time (its publication time, for a
    source read with ``time: published``)."""

    __slots__ = ("_elem", "_xml", "ts")

    def __init__(
        self, elem: etree._Element | None = None, xml: str | None = None, ts: int | None = None
    ) -> None:
        self._elem = elem
        self._xml = xml
        self.ts = ts

    def element(self) -> etree._Element:
        if self._elem is None:
            self._elem = parse(self._xml or "")
        return self._elem

    def text(self) -> str:
        if self._xml is None:
            self._xml = etree.tostring(self._elem, encoding="unicode")
        return self._xml

    def identity(self) -> str:
        """The item's guid in its feed (as the store computes it), from the tree."""
        try:
            found = item_identity(self.element())
        except (etree.XMLSyntaxError, ValueError):
            found = ""
        return found or content_hash(self.text())


Values = dict[int, list[Val]]  # input row -> the items of that row at a step


def default_hooks(step: Step) -> OnError:
    return logging_hook(f"stream {step.stream}, step {step.label}")


@dataclass
class Run:
    """One batch through a compiled program."""

    code: Compiled
    hook_for: HookFor
    values: dict[int, Values] = field(default_factory=dict)
    parts: dict[int, dict[int, list[tuple[str, Val]]]] = field(default_factory=dict)
    # presearch results: filter step -> rows it accepted without evaluation / must evaluate
    accepted: dict[int, Values] = field(default_factory=dict)
    pending: dict[int, Values] = field(default_factory=dict)
    # row -> the outputs of direct filters that accepted its loaded item
    hits: dict[int, list[int]] = field(default_factory=dict)
    loaded: dict[int, tuple[str, Val]] = field(default_factory=dict)  # row -> source, item

    def load(
        self,
        sources: Sequence[str | None],
        items: Sequence[str | None],
        published: Sequence[int | None] | None = None,
    ) -> None:
        """Parse each item once and hand it to its source's steps (a source read in
        publication time gets the same tree at that time)."""
        parser = thread_parser()
        steps = self.code.program.steps
        for row, (source, xml) in enumerate(zip(sources, items, strict=True)):
            targets = self.code.sources.get(source or "")
            if xml is None or not targets:
                continue
            try:
                val = Val(parse(xml, parser), xml)
            except (etree.XMLSyntaxError, ValueError) as exc:
                step = steps[targets[0]]
                report(self.hook_for(step), f"source {step.arg}", xml, exc)
                continue
            self.loaded[row] = (source or "", val)
            when = None if published is None else published[row]
            for target in targets:
                mine = val
                if when is not None and steps[target].time == "published":
                    mine = Val(val.element(), xml, when)
                self.values.setdefault(target, {})[row] = [mine]

    def step(self, n: int, step: Step) -> None:
        if step.kind == "source":
            return
        if step.kind == "union":
            if n not in self.code.unread:
                self._union(n, step)
            return
        if self.code.raw is not None and n in self.code.raw_sources:
            self._filter(n, step, {})  # it takes the loaded items, not its input's
            return
        upstream = self.values.get(step.inputs[0])
        if not upstream:
            return
        if step.kind == "filter":
            self._filter(n, step, upstream)
        elif step.kind == "map" and step.xquery is not None:
            self._mutate(n, step, upstream)
        elif step.kind == "map":
            self._map(n, step, upstream)
        else:
            self._split(n, step, upstream)

    def _presearch(
        self,
        searcher: Presearcher[int],
        filters: Iterable[int],
        items: Iterable[tuple[int, str, Val]],
        holds: dict[int, frozenset[str]] | None = None,
    ) -> None:
        """Match each (row, source, item) once against all the searcher's filters;
        each filter takes the items it accepts or must evaluate, of the sources it
        holds (``holds`` None: every item)."""
        for f in filters:
            self.accepted[f] = {}
            self.pending[f] = {}
        direct = self.code.direct if holds is not None else {}
        for row, source, val in items:
            accepted, candidates = searcher.match(val.element())
            for f in accepted:
                if holds is None or source in holds[f]:
                    index = direct.get(f)
                    if index is None:
                        self.accepted[f].setdefault(row, []).append(val)
                    else:
                        self.hits.setdefault(row, []).append(index)
            for f in candidates:
                if holds is None or source in holds[f]:
                    self.pending[f].setdefault(row, []).append(val)

    def _filter(self, n: int, step: Step, upstream: Values) -> None:
        read = step.inputs[0]
        raw = self.code.raw
        holds = self.code.raw_sources
        if raw is not None and n in holds:
            if n not in self.pending:  # the first of these filters: one match for all
                held = self.code.raw_held
                loaded = (
                    (row, source, val)
                    for row, (source, val) in self.loaded.items()
                    if source in held
                )
                self._presearch(raw, holds, loaded, holds)
            kept, todo = self.accepted.pop(n), self.pending.pop(n)
        elif read in self.code.presearchers:
            if n not in self.pending:
                items = ((row, "", v) for row, vals in upstream.items() for v in vals)
                self._presearch(self.code.presearchers[read], self.code.searched[read], items)
            kept, todo = self.accepted.pop(n), self.pending.pop(n)
        else:
            kept, todo = {}, upstream
        for row, pairs in self._applied(n, step, todo).items():
            for ok, val in pairs:
                if ok:
                    kept.setdefault(row, []).append(val)
        if kept:
            self.values[n] = kept

    def _applied(self, n: int, step: Step, upstream: Values) -> dict[int, list[tuple[Any, Val]]]:
        """The step's function of each item, per row: (result, item) pairs for the
        results that are not None; an item on which it fails is reported, dropped."""
        out: dict[int, list[tuple[Any, Val]]] = {}
        if not upstream:
            return out  # nothing to evaluate: the function need not be compiled
        function = self.code.functions[n]
        strikes = budget.Strikes()
        for row, vals in upstream.items():
            for val in vals:
                try:
                    strikes.check()
                    result = function(val.element())
                except Exception as exc:  # a dynamic error on one item: it is dropped
                    strikes.record(exc)
                    report(self.hook_for(step), f"{step.kind} {step.arg!r}", val.text(), exc)
                    continue
                if result is not None:
                    out.setdefault(row, []).append((result, val))
        return out

    def _map(self, n: int, step: Step, upstream: Values) -> None:
        mapped = self._applied(n, step, upstream)
        self._set(
            n, {row: [Val(new, ts=old.ts) for new, old in pairs] for row, pairs in mapped.items()}
        )

    def _mutate(self, n: int, step: Step, upstream: Values) -> None:
        from roses_app.xmlfn.xquery import mutate_batch

        flat = [(row, val) for row, vals in upstream.items() for val in vals]
        assert step.xquery is not None
        results = mutate_batch(
            step.xquery,
            self.code.program.namespaces,
            [val.text() for _, val in flat],
            self.hook_for(step),
        )
        out: Values = {}
        for (row, val), result in zip(flat, results, strict=True):
            if result is not None:
                out.setdefault(row, []).append(Val(xml=result, ts=val.ts))
        self._set(n, out)

    def _union(self, n: int, step: Step) -> None:
        out: Values = {}
        for read in step.inputs:
            for row, vals in self.values.get(read, {}).items():
                out.setdefault(row, []).extend(vals)
        self._set(n, out)

    def _split(self, n: int, step: Step, upstream: Values) -> None:
        self.parts[n] = self._applied(n, step, upstream)

    def _set(self, n: int, out: Values) -> None:
        """The step's values, each row's copies of one item made one (a set)."""
        for row, vals in out.items():
            if len(vals) > 1:
                out[row] = _distinct(vals)
        if out:
            self.values[n] = out


def _distinct(vals: list[Val]) -> list[Val]:
    seen: dict[tuple[str, int | None], Val] = {}
    for val in vals:
        seen.setdefault((val.text(), val.ts), val)
    return list(seen.values())


def run_program(
    program: Program,
    sources: Sequence[str | None],
    ts: Sequence[int],
    seq: Sequence[int],
    items: Sequence[str | None],
    hook_for: HookFor = default_hooks,
    *,
    presearch: bool = True,
    published: Sequence[int | None] | None = None,
    inputs_held: bool = False,
) -> list[Row]:
    """The output rows of one batch of input events: (outputs, part, ts, seq, item,
    guid, arrival), one per distinct output item of an input event and part, ``outputs`` the
    indexes in ``program.outputs`` of every output that has it (a thousand
    subscriptions matching one item ship it once, with a thousand small integers); with
    ``program.heartbeats``, a ([], "", ts, seq, None, None, ts) row per heartbeat; and
    one ([TICK_OUTPUT], "", latest ts, latest seq, None, None, latest ts) row.  ``ts`` is each
    row's ingest time; an item of a source read in publication time comes out at its
    ``published`` time when it has one.  With ``inputs_held`` (the sink holds the
    input items by seq: a replay), an output item that is its input event's item comes
    as INPUT_ITEM and no row has a guid: at 10,000 subscriptions, 166,000 items
    of 100,000 went through the JVM twice more for nothing (0.8 s of a replay)."""
    run = Run(compiled(program, presearch=presearch), hook_for)
    # an item past settings.limits.item_seconds is dropped by its step (budget)
    with collector_paused(), budget.watching():
        run.load(sources, items, published)
        for n, step in enumerate(program.steps):
            run.step(n, step)
        return _rows(program, run, ts, seq, items, inputs_held)


def _rows(
    program: Program,
    run: Run,
    ts: Sequence[int],
    seq: Sequence[int],
    items: Sequence[str | None],
    inputs_held: bool = False,
) -> list[Row]:
    """The rows of a batch whose steps have run (see :func:`run_program`)."""
    # (input row, part, item text, its own time) -> the outputs that have it, the item
    found: dict[tuple[int, str, str, int | None], tuple[list[int], Val]] = {}
    for index, (n, _) in enumerate(program.outputs):
        named: Iterable[tuple[int, str, Val]]
        if program.steps[n].kind == "split":
            named = ((r, name, v) for r, pairs in run.parts.get(n, {}).items() for name, v in pairs)
        else:
            named = ((r, "", v) for r, vals in run.values.get(n, {}).items() for v in vals)
        for row, part, val in named:
            found.setdefault((row, part, val.text(), val.ts), ([], val))[0].append(index)
    for row, indexes in run.hits.items():  # the loaded item, at its ingest time
        val = run.loaded[row][1]
        outputs = found.setdefault((row, "", val.text(), val.ts), ([], val))[0]
        outputs.extend(indexes)
        outputs.sort()  # in the order of the program's outputs, as the others
    rows: list[Row] = []
    append = rows.append
    for (row, part, text, when), (outputs, val) in found.items():
        time = ts[row] if when is None else when
        if inputs_held:  # the loaded item's text is the input's own string
            item = INPUT_ITEM if text is items[row] else text
            append((outputs, part, time, seq[row], item, None, ts[row]))
        else:
            append((outputs, part, time, seq[row], text, val.identity(), ts[row]))
    if program.heartbeats:
        rows.extend(
            ([], "", t, s, None, None, t)
            for t, s, xml in zip(ts, seq, items, strict=True)
            if xml is None
        )
    if len(ts):
        rows.append(([TICK_OUTPUT], "", max(ts), max(seq), None, None, max(ts)))
    return rows
