"""The stateless tails of a stateful query: each stateful node computed once.

A Spark query is a tree: a DataFrame read at two places of one query is computed at
both, and its operator state kept twice.  So an hourly digest published as it is,
filtered for busy hours and mapped to its titles would run three aggregations.
Instead the query lowers each *head* once — a stateful node (window, join,
aggregate...) or a frontier node that the stateless part of a stream reads — and
sends the rows of every head, tagged with its id, through one fused program
(:mod:`roses_app.xmlfn.fused`, the stateless stage's engine) that runs the stateless
*tail* of every stream: its filters, maps, unions and split above the heads.

A stream whose root is a head nobody else reads is lowered on its own (its rows need
no Python pass), as is a stream whose tail reads a window that publishes its late
items (``late: publish``: those rows carry a part of their own, which a fused program
does not take).

Only stateless operators fan out this way: over ingest time a stateful node read by
another stateful node is still computed in that node's branch too
(``operator_count``), since Spark gives a stateful operator one input.  Over
publication time the operators that read one another run in one operator, each once
(:mod:`roses_app.algebra.planner.late_groups`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from roses_app.algebra.plan.operators import Node, Stream, Window
from roses_app.algebra.planner.globalplan import STATELESS_TYPES, is_stateless_in
from roses_app.algebra.planner.late_groups import late_graph, late_unit, unit_parts
from roses_app.algebra.planner.program import Namespaces, Program, build_program
from roses_app.algebra.time.eventtime import (
    late_sequential,
    publishes_late,
    released_chain,
    window_delta_run,
)


@dataclass(frozen=True)
class Tails:
    """How a stateful query computes its streams: ``heads`` (node, key) are lowered
    once each and run through ``program`` (None: no stream goes that way), whose
    output keys ``streams_of`` maps to stream names; ``direct`` streams are lowered
    on their own."""

    heads: tuple[tuple[Node, str], ...]
    program: Program | None
    streams_of: dict[str, tuple[str, ...]]
    direct: tuple[Stream, ...]

    def describe(self) -> str:
        if self.program is None:
            return f"{len(self.direct)} stream(s) lowered on their own"
        fanned = sum(len(names) for names in self.streams_of.values())
        return (
            f"{len(self.heads)} head(s) computed once, {fanned} stream(s) through one "
            f"fused tail ({self.program.describe()}), {len(self.direct)} on their own"
        )


def in_tail(node: Node, memo: dict[Node, bool]) -> bool:
    """Whether ``node`` is a stateless operator above a stateful one."""
    return isinstance(node, STATELESS_TYPES) and not is_stateless_in(node, memo)


def split_tail(plan: Node, memo: dict[Node, bool]) -> tuple[list[Node], list[Node]]:
    """The stateless nodes of ``plan`` above its stateful ones (the tail, inputs
    first) and the nodes the tail reads (its heads); a stateful root is its own
    only head."""
    tail: list[Node] = []
    heads: list[Node] = []
    seen: set[Node] = set()

    def visit(node: Node) -> None:
        if node in seen:
            return
        seen.add(node)
        if in_tail(node, memo):
            for child in node.children():
                visit(child)
            tail.append(node)
        else:
            heads.append(node)

    visit(plan)
    return tail, heads


def plan_tails(
    streams: Sequence[Stream], key_of: Callable[[Node], str], namespaces: Namespaces = ()
) -> Tails:
    """The heads, fused tail and direct streams of the stateful ``streams``."""
    memo: dict[Node, bool] = {}
    split = {s.name: split_tail(s.plan, memo) for s in streams}
    readers: dict[Node, int] = {}  # head -> tail nodes and stream roots reading it
    for node in dict.fromkeys(n for tail, _ in split.values() for n in tail):
        for child in dict.fromkeys(node.children()):
            if not in_tail(child, memo):
                readers[child] = readers.get(child, 0) + 1
    for stream in streams:
        if not split[stream.name][0]:  # the root is a head
            readers[stream.plan] = readers.get(stream.plan, 0) + 1
    direct: list[Stream] = []
    fanned: list[Stream] = []
    for stream in streams:
        tail, read = split[stream.name]
        alone = not tail and readers[stream.plan] == 1
        if alone or any(publishes_late(h) for h in read):
            direct.append(stream)
        else:
            fanned.append(stream)
    if not fanned:
        return Tails((), None, {}, tuple(direct))
    heads = {h: key_of(h) for s in fanned for h in split[s.name][1]}
    outputs = {s.plan: key_of(s.plan) for s in fanned}
    program = build_program(list(outputs.items()), namespaces, leaves=heads)
    streams_of: dict[str, tuple[str, ...]] = {}
    for stream in fanned:
        key = outputs[stream.plan]
        streams_of[key] = (*streams_of.get(key, ()), stream.name)
    return Tails(tuple(heads.items()), program, streams_of, tuple(direct))


def _copies_of_heads(streams: Iterable[Stream]) -> Iterator[tuple[Stream, Node, bool]]:
    """Each head Spark runs a copy of, with the stream that brings it and whether the
    copy is the query's shared one: a head once however many streams read it, but a
    stream whose tail reads a head that publishes its late items is lowered on its
    own, so with its own copy of each of its heads."""
    stateless: dict[Node, bool] = {}
    seen: set[Node] = set()
    for stream in streams:
        tail, heads = split_tail(stream.plan, stateless)
        alone = bool(tail) and any(publishes_late(h) for h in heads)
        for head in heads:
            if alone or head not in seen:
                seen.add(head)
                yield stream, head, not alone


def _copies(streams: Iterable[Stream], *, windows: bool) -> Iterator[tuple[Stream, Node, int]]:
    """Each stateful node Spark computes, with the stream that brings it and how many
    times it adds (see :func:`spark_copies`).  The operators over publication time
    the query shares are computed once each (:mod:`roses_app.algebra.planner.late_groups`),
    with the windows they read; over ingest time, once per path from a head."""
    stateless: dict[Node, bool] = {}
    units: set[Node] = set()
    for stream, head, shared in _copies_of_heads(streams):
        if not late_unit(head):
            for node, paths in _paths_from(head, stateless, windows=windows).items():
                yield stream, node, paths
            continue
        for unit in late_graph([head]):
            if shared and unit in units:
                continue
            if shared:
                units.add(unit)
            yield stream, unit, 1
            if windows:
                for part in unit_parts(unit):
                    yield stream, part, 1


def operator_count(streams: Sequence[Stream]) -> Iterator[tuple[Stream, int]]:
    """Each stream with the number of stateful operators Spark computes for it and the
    streams before it (see :func:`spark_copies`)."""
    brought: dict[int, int] = {}  # id(stream) -> the operators its new heads add
    for stream, _, added in _copies(streams, windows=False):
        brought[id(stream)] = brought.get(id(stream), 0) + added
    total = 0
    for stream in streams:
        total += brought.get(id(stream), 0)
        yield stream, total


def spark_copies(streams: Iterable[Stream]) -> dict[Node, int]:
    """Each stateful node of ``streams`` with the number of times Spark computes it:
    once per path to it from a head (a query is a tree), each head once (but each
    head of a stream lowered on its own once more), an operator over publication
    time once.  A window counts in each operator that reads it, as well as on its
    own."""
    copies: dict[Node, int] = {}
    for _, node, paths in _copies(streams, windows=True):
        copies[node] = copies.get(node, 0) + paths
    return copies


def _paths_from(
    head: Node, stateless: dict[Node, bool], *, windows: bool = False
) -> dict[Node, int]:
    """The stateful operators below ``head`` (itself included) with the number of
    paths from it to each (a child read twice by one node is two paths); with
    ``windows``, also the windows other operators read (see below)."""
    order: list[Node] = []  # children before the nodes that read them
    seen: set[Node] = set()

    def visit(node: Node) -> None:
        if node in seen or is_stateless_in(node, stateless):
            return
        seen.add(node)
        for child in node.children():
            visit(child)
        order.append(node)

    visit(head)
    paths = dict.fromkeys(order, 0)
    if head in paths:
        paths[head] = 1
    for node in reversed(order):
        for child in node.children():
            if child in paths:
                paths[child] += paths[node]
    # A window read by another operator is part of it (a join's range, an aggregate's
    # grouping, a stage of a delta's chain), not an operator of its own: what is below
    # it is.  Its content is still computed there: a window that is also a head, or
    # that two operators read, is computed once by each.  So are the stages of the
    # head's own operator.
    if windows:
        return paths
    stages = _stages(head)
    return {
        n: p for n, p in paths.items() if n is head or not (isinstance(n, Window) or n in stages)
    }


def _stages(head: Node) -> frozenset[Node]:
    """The operators Spark runs inside ``head``'s own operator as its stages: those of
    a released run over publication time, or over ingest time the windows and deltas
    below a window or a delta (one operator for the run)."""
    run = released_chain(head) if late_sequential(head) is not None else window_delta_run(head)[1]
    return frozenset(run) - {head}
