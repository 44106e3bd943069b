"""One micro-batch of each kind of operator over publication time (a *unit* of
:mod:`roses_app.algebra.planner.late_groups`), without Spark: the late graph's operator
(:mod:`roses_app.spark.lower_late`) and the tests drive them.

A unit reads its sources' rows (an item at its publication time, or its ingest time;
heartbeats) and the rows other units gave in the same micro-batch, and gives its own:
its results, the heartbeats on time and the horizon it tells
(:func:`~roses_app.spark.late.with_clock`).  Its state is a JSON value (and the
slices of its windows' items, :mod:`roses_app.algebra.time.slices`):

- late windows of α or γ (:mod:`roses_app.algebra.time.lateness`);
- a windowed grouping of items (:mod:`roses_app.algebra.time.lategrouping`);
- a join, semijoin or difference (:mod:`roses_app.algebra.time.latejoin`), of items or
  of released sides: one implementation, :func:`late_join_batch`;
- a released run (:class:`~roses_app.spark.latesequential.ReleasedRun`).

A reader of units' results takes them as a released run reads them
(:mod:`roses_app.algebra.time.release_results`): through its branch's filters and maps, a
window's results named by branch and guid (a version a filter drops kept as
:data:`~roses_app.algebra.time.release_results.DROPPED`, still replacing the earlier ones),
each branch's horizon under its own seq, not the items published as late.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from roses_app.algebra.plan.operators import (
    Aggregate,
    Diff,
    Filter,
    GroupBy,
    Join,
    Map,
    Node,
    Semijoin,
    WindowedGrouping,
    optimistic,
)
from roses_app.algebra.time.eventtime import (
    JoinSides,
    late_grouped,
    late_joined,
    late_sequential,
    late_windowed,
    released_joined,
)
from roses_app.algebra.time.lategrouping import LateGrouping
from roses_app.algebra.time.latejoin import CLOCK_SEQ, LEFT, RIGHT, LateJoin, join_keyed, join_kind
from roses_app.algebra.time.lateness import (
    LATE_PART,
    RELEASED_LATENESS,
    Arrival,
    LateWindows,
    arrival_groups,
)
from roses_app.algebra.time.release_results import (
    DROPPED,
    ITEMS,
    RESULT_NAME,
    FedBranch,
    SidesRelease,
    fed_horizon,
    mark_seq,
    side_inputs,
    side_shape,
)
from roses_app.algebra.time.slices import SliceMap
from roses_app.spark.late import with_clock
from roses_app.spark.latesequential import ReleasedRun, released_run
from roses_app.spark.registry import Hooks

Row = tuple[int, int, str | None, str]  # ts, seq, item (None: heartbeat), part
# a source's row: ingest time, seq, item (None: heartbeat), publication time (None:
# the ingest time)
SourceRow = tuple[int, int, str | None, int | None]
Counts = dict[str, int]  # late, unchanged, revised: counted per stream (tally_key)


@dataclass
class Batch:
    """What the units of a graph read in one micro-batch: their sources' rows, and
    the rows each unit computed before (filled in as they run)."""

    sources: Mapping[Node, Sequence[SourceRow]]
    results: dict[Node, list[Row]] = field(default_factory=dict)


class Unit(Protocol):
    @property
    def node(self) -> Node: ...

    @property
    def sliced(self) -> bool:
        """Whether its windows' items are kept in slices."""
        ...

    def advance(
        self, saved: Any, batch: Batch, slices: SliceMap | None
    ) -> tuple[list[Row], Any, Counts]:
        """Its rows, its state to save and its counts after one micro-batch."""
        ...


def source_arrivals(
    rows: Sequence[SourceRow], keys: Sequence[str | None] | None = None, tag: str | None = None
) -> list[tuple[int, Arrival]]:
    """(ingest time, arrival) of a source's rows, each with its key: with ``keys``
    (one per item, in order: γ's, a grouping's), an item without one goes nowhere;
    else ``tag`` (a join's side, ITEMS), heartbeats included."""
    if keys is None:
        return [
            (ts, Arrival(ts if event is None else event, seq, item, tag))
            for ts, seq, item, event in rows
        ]
    out: list[tuple[int, Arrival]] = []
    found = iter(keys)
    for ts, seq, item, event in rows:
        key = None if item is None else next(found)
        if item is not None and key is None:
            continue
        out.append((ts, Arrival(ts if event is None else event, seq, item, key)))
    return out


def item_keys(expr: str, rows: Sequence[SourceRow], hooks: Hooks, node: Node) -> list[str | None]:
    """``expr``'s value (a split's) for each item of ``rows``, in order."""
    from roses_app.xmlfn import split_batch

    items = [item for _, _, item, _ in rows if item is not None]
    return split_batch(expr, hooks.namespaces, items, on_error=hooks.on_error(node))


def told(
    found: list[Row],
    planned: Any,
    settled: Any,
    published: Sequence[tuple[Any, str]],
    horizon: int | None,
) -> tuple[list[Row], Counts]:
    """The rows of a windowed operator (``found``, the heartbeats on time, the
    ``horizon``) and its counts: items too late, results unchanged, revisions."""
    revised = sum(1 for e, _ in published if e.revision)
    counts = {"late": len(planned.late), "unchanged": settled.unchanged, "revised": revised}
    return with_clock(found, planned.heartbeats, horizon), counts


@dataclass(frozen=True)
class WindowsUnit:
    """α or γ over the windows :mod:`roses_app.algebra.time.lateness` runs."""

    node: Aggregate | GroupBy
    hooks: Hooks
    sliced: bool = True

    def advance(
        self, saved: Any, batch: Batch, slices: SliceMap | None
    ) -> tuple[list[Row], Any, Counts]:
        from roses_app.xmlfn.reduce import advance_windows

        node, hooks = self.node, self.hooks
        found = late_windowed(node)
        assert found is not None and slices is not None
        below, spec = found
        items = batch.sources[below]
        keys = item_keys(node.by, items, hooks, node) if isinstance(node, GroupBy) else None
        windows = LateWindows.load(spec, node.lateness, node.report, saved, slices)
        groups = arrival_groups(source_arrivals(items, keys))
        planned, settled, published = advance_windows(
            windows, groups, node.reduce, hooks.namespaces, node.stream, hooks.on_error(node)
        )
        found_rows: list[Row] = [(e.ts, e.seq, item, "") for e, item in published]
        if node.late == "publish":
            found_rows += [(a.time, a.seq, a.item or "", LATE_PART) for a in planned.late]
        horizon = fed_horizon(node, windows.clock)
        rows, counts = told(found_rows, planned, settled, published, horizon)
        return rows, windows.dump(), counts


@dataclass(frozen=True)
class GroupingUnit:
    """A windowed grouping of items (:mod:`roses_app.algebra.time.lategrouping`)."""

    node: WindowedGrouping
    hooks: Hooks
    sliced: bool = False

    def advance(
        self, saved: Any, batch: Batch, slices: SliceMap | None
    ) -> tuple[list[Row], Any, Counts]:
        from roses_app.xmlfn.reduce import advance_grouping

        node, hooks = self.node, self.hooks
        below = late_grouped(node)
        assert below is not None
        items = batch.sources[below]
        grouping = LateGrouping.load(node.size, node.lateness, node.optimistic, saved)
        groups = arrival_groups(source_arrivals(items, item_keys(node.by, items, hooks, node)))
        planned, settled, published = advance_grouping(
            grouping, groups, node, hooks.namespaces, hooks.on_error(node)
        )
        found: list[Row] = [(e.time, e.at, item, "") for e, item in published]
        horizon = fed_horizon(node, grouping.clock)
        rows, counts = told(found, planned, settled, published, horizon)
        return rows, grouping.dump(), counts


def late_join_batch(
    node: Join | Semijoin | Diff,
    sides: JoinSides,
    lateness: int,
    saved: Any,
    groups: Sequence[Sequence[Arrival]],
    hooks: Hooks,
) -> tuple[list[Row], Any, int, int]:
    """:class:`LateJoin` (the windows of ``sides``, ``lateness``, its state ``saved``)
    over the arrival ``groups``: its rows (results, heartbeats on time, the horizon
    told), its state, the items too late and the results taken back."""
    from roses_app.xmlfn.pairs import advance_join, late_join_results

    kind, on_keys = join_kind(node), join_keyed(node)
    join = LateJoin.load(sides[1], sides[3], lateness, kind, saved, optimistic(node), on_keys)
    planned = advance_join(node, join, groups, hooks.namespaces)
    out, revised = late_join_results(node, join, planned, hooks.namespaces, hooks.on_error(node))
    found: list[Row] = [(ts, seq, item, "") for ts, seq, item in out]
    rows = with_clock(found, planned.heartbeats, fed_horizon(node, join.clock))
    return rows, join.dump(), len(planned.late), revised


@dataclass(frozen=True)
class JoinUnit:
    """A join, semijoin or difference of items, with its lateness."""

    node: Join | Semijoin | Diff
    hooks: Hooks
    sliced: bool = False

    def advance(
        self, saved: Any, batch: Batch, slices: SliceMap | None
    ) -> tuple[list[Row], Any, Counts]:
        node = self.node
        sides = late_joined(node)
        assert sides is not None
        arrivals = source_arrivals(batch.sources[sides[0]], tag=LEFT)
        arrivals += source_arrivals(batch.sources[sides[2]], tag=RIGHT)
        groups = arrival_groups(arrivals)
        rows, state, late, revised = late_join_batch(
            node, sides, node.lateness, saved, groups, self.hooks
        )
        return rows, state, {"late": late, "revised": revised}


# what a reader of units' results reads below it: the branches of operators'
# results (release_results.fed_branches), and the branches of items
Side = tuple[tuple[FedBranch, ...], tuple[Node, ...]]


def side_of(below: Node) -> Side:
    branches, items = side_inputs(below)
    return tuple(branches), tuple(items)


@dataclass(frozen=True)
class ReleasedJoinUnit:
    """A join over operators' results
    (:func:`~roses_app.algebra.time.eventtime.released_joined`): each side reads what a
    released run would (:func:`fed_arrivals`); both sides are released together
    (:class:`~roses_app.algebra.time.release_results.SidesRelease`), then joined as items in
    time order, nothing late (:func:`late_join_batch`)."""

    node: Join | Semijoin | Diff
    sides: tuple[Side, Side]
    hooks: Hooks
    sliced: bool = False

    def advance(
        self, saved: Any, batch: Batch, slices: SliceMap | None
    ) -> tuple[list[Row], Any, Counts]:
        node, joined = self.node, released_joined(self.node)
        assert joined is not None
        left, right = (
            arrival_groups(fed_arrivals(*side, batch, self.hooks)) for side in self.sides
        )
        shapes = tuple(side_shape(b, node.lateness) for b in (joined[0], joined[2]))
        release = SidesRelease.load(shapes, saved and saved["release"])
        released, late = release.advance(left, right)
        groups = arrival_groups((a.time, a) for a in released)
        rows, join, _, revised = late_join_batch(
            node, joined, RELEASED_LATENESS, saved and saved["join"], groups, self.hooks
        )
        state = {"release": release.dump(), "join": join}
        return rows, state, {"late": len(late), "revised": revised}


@dataclass(frozen=True)
class RunUnit:
    """A released run (:class:`~roses_app.spark.latesequential.ReleasedRun`) of items
    of ``below``, or of what its ``side`` reads."""

    node: Node
    run: ReleasedRun
    below: Node
    side: Side | None
    hooks: Hooks
    sliced: bool = False

    def advance(
        self, saved: Any, batch: Batch, slices: SliceMap | None
    ) -> tuple[list[Row], Any, Counts]:
        if self.side is not None:
            found = fed_arrivals(*self.side, batch, self.hooks)
        else:
            found = source_arrivals(batch.sources[self.below])
        told, _, state, (late, unchanged, revised) = self.run.advance(
            saved or {}, arrival_groups(found), slices
        )
        return told, state, {"late": late, "unchanged": unchanged, "revised": revised}


def make_unit(node: Node, hooks: Hooks) -> Unit:
    """The unit computing ``node`` (a :func:`~roses_app.algebra.planner.late_groups.late_unit`)."""
    if late_windowed(node) is not None:
        return WindowsUnit(node, hooks)  # type: ignore[arg-type]
    if late_grouped(node) is not None:
        return GroupingUnit(node, hooks)  # type: ignore[arg-type]
    if late_joined(node) is not None:
        return JoinUnit(node, hooks)  # type: ignore[arg-type]
    sides = released_joined(node)
    if sides is not None:
        fed = (side_of(sides[0]), side_of(sides[2]))
        return ReleasedJoinUnit(node, fed, hooks)  # type: ignore[arg-type]
    below = late_sequential(node)
    assert below is not None, f"{node} is not an operator over publication time"
    run = released_run(node, hooks)
    sliced = run.windows is not None and run.windows.sliced
    return RunUnit(node, run, below, side_of(below) if run.fed else None, hooks, sliced)


def fed_arrivals(
    branches: Sequence[FedBranch], items: Sequence[Node], batch: Batch, hooks: Hooks
) -> list[tuple[int, Arrival]]:
    """What a reader of units' results takes in one micro-batch (see the module doc):
    each branch's operator's rows, and the rows of its item branches keyed
    :data:`ITEMS`."""
    out: list[tuple[int, Arrival]] = []
    for index, branch in enumerate(branches):
        rows = batch.results.get(branch.operator, [])
        if branch.named:
            found = named_rows(branch, index, rows, hooks)
        else:
            found = [(*row, None) for row in through_tail(branch.tail, rows, hooks)]
        for ts, seq, item, part, key in found:
            if part == LATE_PART:
                continue
            told = item is None and seq == CLOCK_SEQ
            out.append((ts, Arrival(ts, mark_seq(index) if told else seq, item, key)))
    for node in items:
        out += source_arrivals(batch.sources[node], tag=ITEMS)
    return out


def named_rows(
    branch: FedBranch, index: int, rows: list[Row], hooks: Hooks
) -> list[tuple[int, int, str | None, str, str | None]]:
    """A branch of windows' results, each named by its branch and guid, then through
    the branch's filters and maps, a version they drop kept as :data:`DROPPED`."""
    from roses_app.xmlfn import split_batch

    items = [item for _, _, item, _ in rows if item is not None]
    names = iter(split_batch(RESULT_NAME, hooks.namespaces, items, hooks.on_error(branch.operator)))
    keys = [None if item is None else next(names) for _, _, item, _ in rows]
    current = [row[2] for row in rows]
    for step in branch.tail:
        live = [None if item == DROPPED else item for item in current]
        new = iter(step_results(step, [i for i in live if i is not None], hooks))
        current = [
            item if now is None else tombstone(step, now, next(new))
            for item, now in zip(current, live, strict=True)
        ]
    return [
        (ts, seq, item, part, None if key is None else f"{index} {key}")
        for (ts, seq, _, part), item, key in zip(rows, current, keys, strict=True)
    ]


def tombstone(step: Filter | Map, item: str, result: str | bool | None) -> str:
    """``item`` after ``step`` (its result ``result``), :data:`DROPPED` if gone."""
    if isinstance(step, Filter):
        return item if result else DROPPED
    return DROPPED if result is None else str(result)


def through_tail(tail: Sequence[Filter | Map], rows: list[Row], hooks: Hooks) -> list[Row]:
    """``rows`` through the filters and maps of ``tail`` (heartbeats pass)."""
    for step in tail:
        results = iter(step_results(step, [r[2] for r in rows if r[2] is not None], hooks))
        out: list[Row] = []
        for ts, seq, item, part in rows:
            if item is None:
                out.append((ts, seq, item, part))
                continue
            result = next(results)
            if isinstance(step, Filter):
                if result:
                    out.append((ts, seq, item, part))
            elif result is not None:
                out.append((ts, seq, str(result), part))
        rows = out
    return rows


def step_results(step: Filter | Map, items: list[str], hooks: Hooks) -> Sequence[Any]:
    """``step``'s function over ``items``, in one call: kept or not, or the map's
    result (None: the item is dropped)."""
    from roses_app.xmlfn import filter_batch, map_batch, mutate_batch

    hook = hooks.on_error(step)
    if isinstance(step, Filter):
        return filter_batch(step.where, hooks.namespaces, items, on_error=hook)
    if step.xquery is not None:
        return mutate_batch(step.xquery, hooks.namespaces, items, on_error=hook)
    assert step.xpath is not None
    return map_batch(step.xpath, hooks.namespaces, items, on_error=hook)
