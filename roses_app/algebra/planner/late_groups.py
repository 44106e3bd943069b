"""The operators over publication time of a query as one graph, each computed once.

A Spark query is a tree: an operator read by two others is computed in each of their
branches.  Over publication time a join read by twelve runs would run thirteen
times, each copy with its own state.  Every such operator (a *unit*: late windows, a
late join or grouping, a released run, a join of released sides) already runs under
one constant key, since its clock is the latest time seen of every item, so nothing
is lost by running the units that read one another in one operator: each is computed
once per micro-batch, in topological order, and its results go to the units reading
them and out.  Units that share nothing are separate groups (:func:`components`),
packed into at most as many operators as there are cores (:func:`packed`), so Spark
still runs them side by side.

What each unit reads is either another unit's results or *sources*: the stateless
plans below it, whose rows the frontier log holds (see
:mod:`roses_app.algebra.planner.globalplan`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from roses_app.algebra.plan.operators import Node, Window
from roses_app.algebra.time.eventtime import (
    fed_items,
    fed_operators,
    late_grouped,
    late_joined,
    late_sequential,
    late_windowed,
    released_chain,
    released_joined,
)
from roses_app.algebra.time.release_results import fed_branches, side_inputs


def late_unit(node: Node) -> bool:
    """Whether ``node`` is an operator over publication time of its own (see the
    module doc)."""
    return (
        late_sequential(node) is not None
        or late_windowed(node) is not None
        or late_grouped(node) is not None
        or late_joined(node) is not None
        or released_joined(node) is not None
    )


def unit_reads(node: Node) -> tuple[tuple[Node, ...], tuple[Node, ...]]:
    """The units whose results ``node`` (a unit) reads, and its sources."""
    found = late_windowed(node)
    if found is not None:
        return (), (found[0],)
    grouped = late_grouped(node)
    if grouped is not None:
        return (), (grouped,)
    sides = late_joined(node)
    if sides is not None:
        return (), (sides[0], sides[2])
    sides = released_joined(node)
    if sides is not None:
        inputs = [side_inputs(below) for below in (sides[0], sides[2])]
        units = [b.operator for fed, _ in inputs for b in fed]
        return tuple(dict.fromkeys(units)), tuple(dict.fromkeys(n for _, i in inputs for n in i))
    below = late_sequential(node)
    assert below is not None, f"{node} is not an operator over publication time"
    if fed_operators(below) is None:
        return (), (below,)
    units = [b.operator for b in fed_branches(below)]
    return tuple(dict.fromkeys(units)), tuple(dict.fromkeys(fed_items(below)))


def late_graph(roots: Iterable[Node]) -> list[Node]:
    """The units ``roots`` need (themselves among them), each once, the units each
    reads before it."""
    order: list[Node] = []
    seen: set[Node] = set()

    def visit(node: Node) -> None:
        if node in seen:
            return
        seen.add(node)
        for below in unit_reads(node)[0]:
            visit(below)
        order.append(node)

    for root in roots:
        visit(root)
    return order


def components(units: Sequence[Node]) -> list[list[Node]]:
    """``units`` (a :func:`late_graph`) in groups of those that read one another,
    each group in the order of ``units``."""
    index = {unit: n for n, unit in enumerate(units)}
    parent = list(range(len(units)))

    def find(n: int) -> int:
        while parent[n] != n:
            n = parent[n]
        return n

    for unit in units:
        for below in unit_reads(unit)[0]:
            parent[find(index[below])] = find(index[unit])
    out: dict[int, list[Node]] = {}
    for n, unit in enumerate(units):
        out.setdefault(find(n), []).append(unit)
    return list(out.values())


def packed(groups: Sequence[Sequence[Node]], most: int) -> list[list[Node]]:
    """``groups`` (:func:`components`) in at most ``most`` operators (0: one each).

    Each operator costs a Python process to plan and a state store commit per
    micro-batch, but the operators run side by side: as many as there are cores keeps
    the cores busy on a large micro-batch, and the rest is overhead.  The largest
    groups first, each to the operator with the fewest units (ties: the first); each
    operator's units in the order of ``groups``, which keeps each group's order."""
    if most <= 0 or len(groups) <= most:
        return [list(group) for group in groups]
    bins: list[list[int]] = [[] for _ in range(most)]
    sizes = [0] * most
    for n in sorted(range(len(groups)), key=lambda n: -len(groups[n])):
        lightest = min(range(most), key=sizes.__getitem__)
        bins[lightest].append(n)
        sizes[lightest] += len(groups[n])
    return [[unit for n in sorted(chosen) for unit in groups[n]] for chosen in bins if chosen]


def unit_parts(unit: Node) -> set[Node]:
    """The stateful nodes ``unit``'s own operator computes besides itself: the
    windows of its sides or of its groups, the stages of its run."""
    if late_sequential(unit) is not None:
        return set(released_chain(unit)) - {unit}
    if late_windowed(unit) is not None:
        return set(unit.children())
    if late_joined(unit) is not None or released_joined(unit) is not None:
        return {side for side in unit.children() if isinstance(side, Window)}
    return set()
