"""A released run over the results of operators over publication time (seed 001's
lateness, reported on close): a window, a delta, a nest, or an aggregate or a group
over them, reading what a join, a semijoin, a difference, a windowed grouping, an
aggregate or a group over windows, or another released run publishes
(:func:`fed_operators`), filtered or mapped or not, or a union of those, with items
or not (:func:`fed_branches`).

Those results come out of order, but each operator has a clock that decides them:

* **Settled.**  A join's, a semijoin's, a difference's or a windowed grouping's
  result, reporting on close, is final when published, at a time its clock had not
  decided before that arrival: after each arrival, its results before
  ``clock - lateness`` are all out.  Filtered or mapped, the same.  Reporting
  optimistically, its final results are its on-close twin's, which the run reads.
  A released run's results come in time order: those before the last time it
  released are all out (its sessions', a gap less one before it: a session's result
  is at its last item); with a report policy, its final results are its on-close
  twin's.
* **Revised windows.**  An aggregate's or a group's window result may be published
  again, in place (same guid), while a late item can still change it; not once its
  time is before ``clock - lateness`` (a session's: the gap too, since an item up to a
  gap after its last one may still extend it).  Only the last version counts, and
  none of a session merged into another (its notice carries `` merged`` in its name,
  :data:`RESULT_NAME`); the branch's filters and maps read that last version (a
  version they drop is :data:`DROPPED`, which still replaces the earlier ones).
* **Horizon.**  What an operator has decided, :func:`fed_horizon`, it tells after
  each micro-batch on Spark (a heartbeat row at that time, seq
  :data:`~roses_app.algebra.time.latejoin.CLOCK_SEQ`, made :func:`mark_seq` of its branch
  of a union); over a union of operators the run reads what all of them decided, the
  least of their horizons.  Items in the union (:data:`ITEMS`) go through the run's
  own :class:`~roses_app.algebra.time.release.Release`, whose horizon is one more.
* **Released.**  Nothing from an operator is too late for the run (the operators
  dropped their late items): :class:`FedRelease` holds the results and the
  heartbeats the operators took on time
  (:func:`~roses_app.algebra.time.latejoin.timely_heartbeats`) until the horizon passes
  them, then gives them out in time order.

The reference evaluator computes the same from the operators' whole outputs and last
clocks (:func:`~roses_app.algebra.reference.timed_input.timed_input`); the Spark operator
(:mod:`roses_app.spark.latesequential`) runs :class:`FedRelease` micro-batch after
micro-batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from roses_app.algebra.plan.operators import (
    Filter,
    Map,
    Node,
    SessionWindow,
)
from roses_app.algebra.time.eventtime import (
    branches,
    fed_below,
    fed_items,
    fed_operators,
    final_results,
    late_sequential,
    late_windowed,
    released_joined,
    released_windows,
    revised_windows,
)
from roses_app.algebra.time.latejoin import CLOCK_SEQ, LEFT, RIGHT
from roses_app.algebra.time.lateness import RELEASED_LATENESS
from roses_app.algebra.time.panes import Arrival
from roses_app.algebra.time.release import Release, release_before, release_order

# What names a window's result through its revisions (roses_app.xmlfn.stamp): its
# guid, and " merged" after it on the notice of a session merged into another
RESULT_NAME = "string-join((string(guid), *:window/@merged-into ! 'merged'), ' ')"
MERGED = " merged"
# A version of a window's result that a filter or a map of its branch dropped: it
# still replaces the earlier versions (NUL is in no XML document)
DROPPED = "\0"
# The key of the items of a union with operators' results (fed_items)
ITEMS = "\0items"

V = TypeVar("V")


def fed_release(node: Node) -> bool:
    """Whether ``node``'s released run reads operators' results (:func:`fed_operators`)."""
    below = late_sequential(node)
    return below is not None and fed_operators(below) is not None


def fed_horizon(operator: Node, clock: int | None) -> int | None:
    """The time before which ``operator``'s results are all out and final, at
    ``clock`` (a run's: the last time it released; None: it has seen nothing)."""
    if clock is None:
        return None
    if late_sequential(operator) is not None:  # a run: its last time released
        # (its sessions close a gap after their last item, the time of their result)
        spec = released_windows(operator)
        return clock - (spec.gap - 1 if isinstance(spec, SessionWindow) else 0)
    if released_joined(operator) is not None:  # over released sides: nothing late
        return clock - RELEASED_LATENESS
    windowed = late_windowed(operator)
    reach = windowed[1].gap - 1 if windowed and isinstance(windowed[1], SessionWindow) else 0
    return clock - operator.lateness - reach  # type: ignore[attr-defined]


@dataclass(frozen=True)
class FedBranch:
    """One branch of what a released run reads (:func:`fed_branches`)."""

    node: Node  # what the engines compute: the branch, with its operator's final results
    operator: Node  # the operator in ``node`` whose clock decides the branch
    tail: tuple[Filter | Map, ...]  # the filters and maps between them, the lowest first
    named: bool  # windows' results: each named (RESULT_NAME), a revision replaces it


def fed_branches(below: Node) -> list[FedBranch]:
    """The branches a released run reads ``below`` by (see :func:`fed_operators`).
    An optimistic operator's final results are those its on-close twin publishes
    (a result taken back or replaced was never final), so the branch reads the twin.
    Of a window's results, the run reads the last version through the branch's
    filters and maps: a filter dropping it drops that result, not its revision."""
    out: list[FedBranch] = []
    for branch in branches(below):
        operator = fed_below(branch)
        if operator is None:  # items (fed_items)
            continue
        tail: list[Filter | Map] = []
        current = branch
        while current is not operator:
            assert isinstance(current, Filter | Map)
            tail.append(current)
            current = current.input
        node = final = final_results(operator)
        for step in reversed(tail):
            node = replace(step, input=node)
        out.append(FedBranch(node, final, tuple(reversed(tail)), revised_windows(operator)))
    return out


def mark_seq(branch: int) -> int:
    """The seq of the heartbeat row telling the horizon of a union's ``branch``."""
    return CLOCK_SEQ - branch


def last_versions(
    results: Sequence[V], names: Sequence[str | None], seq: Callable[[V], int]
) -> list[V]:
    """Of results named by :data:`RESULT_NAME`, the last version of each (a revision
    has the larger seq: its latest item), none of a session merged into another; the
    unnamed ones all."""
    last: dict[str, V] = {}
    out: list[V] = []
    for result, name in sorted(zip(results, names, strict=True), key=lambda pair: seq(pair[0])):
        if name is None:
            out.append(result)
        else:
            last[name.removesuffix(MERGED)] = result
    gone = {name.removesuffix(MERGED) for name in names if name and name.endswith(MERGED)}
    return out + [result for name, result in last.items() if name not in gone]


class FedRelease:
    """The horizons told and the events held back of a run over ``sources`` branches;
    with ``items``, the last of them is items (keyed :data:`ITEMS`), which that
    :class:`~roses_app.algebra.time.release.Release` decides as it would alone: its
    horizon is its clock less its lateness, and what it finds too late is dropped."""

    def __init__(
        self,
        sources: int = 1,
        marks: dict[int, int] | None = None,
        held: list[Arrival] | None = None,
        items: Release | None = None,
    ) -> None:
        self.sources = sources
        self.marks: dict[int, int] = marks or {}  # branch mark seq -> horizon
        self.held: list[Arrival] = held or []
        self.items = items

    @property
    def horizon(self) -> int | None:
        """What every branch has decided (None until each has told)."""
        if len(self.marks) < self.sources:
            return None
        return min(self.marks.values())

    def advance(self, groups: Iterable[Sequence[Arrival]]) -> tuple[list[Arrival], list[Arrival]]:
        """Arrival groups (results, heartbeats, horizons; items): the events released
        now, in time order (the reference's event order), and the items too late."""
        late: list[Arrival] = []
        for group in groups:
            if self.items is not None:
                group = self._take_items(group, late)
            for a in group:
                if a.item is None and a.seq <= CLOCK_SEQ:
                    self.marks[a.seq] = max(a.time, self.marks.get(a.seq, a.time))
            self._hold([a for a in group if a.item is not None or a.seq > CLOCK_SEQ])
        horizon = self.horizon
        if horizon is None:
            return [], late
        # a union is a set: an event two branches have is one
        released = {
            (a.time, a.seq, a.item): a for a in self.held if a.time < horizon and a.item != DROPPED
        }
        self.held = [a for a in self.held if a.time >= horizon]
        return sorted(released.values(), key=release_order), late

    def _take_items(self, group: Sequence[Arrival], late: list[Arrival]) -> list[Arrival]:
        """The items of ``group`` through the items' release (an event several item
        branches have is one: they all come from one input row); the rest."""
        assert self.items is not None
        mine = dict.fromkeys(Arrival(a.time, a.seq, a.item) for a in group if a.key == ITEMS)
        if mine:
            out, dropped = self.items.advance([list(mine)])
            late += dropped
            self.held += out
            if self.items.horizon is not None:
                self.marks[mark_seq(self.sources - 1)] = self.items.horizon
        return [a for a in group if a.key != ITEMS]

    def _hold(self, arrivals: list[Arrival]) -> None:
        if not any(a.key for a in arrivals):  # nothing named: no version replaces another
            self.held += arrivals
            return
        held = [*self.held, *arrivals]
        self.held = last_versions(held, [a.key for a in held], lambda a: a.seq)

    def dump(self) -> dict[str, Any]:
        held = [[a.time, a.seq, a.item, *([a.key] if a.key else [])] for a in self.held]
        items = None if self.items is None else self.items.dump()
        return {"marks": self.marks, "held": held, "items": items}

    @classmethod
    def load(
        cls, sources: int, saved: dict[str, Any] | None, items: int | None = None
    ) -> FedRelease:
        """``items``: the lateness of the items' release, if a branch is items."""
        if saved is None:
            return cls(sources, items=None if items is None else Release(items))
        marks = {int(seq): horizon for seq, horizon in saved["marks"].items()}
        held = [Arrival(*entry) for entry in saved["held"]]
        release = None if items is None else Release.load(items, saved.get("items"))
        return cls(sources, marks, held, release)


def side_inputs(below: Node) -> tuple[list[FedBranch], list[Node]]:
    """A released join's side (:func:`~roses_app.algebra.time.eventtime.released_joined`):
    the branches of operators' results it reads, and its branches of items (all of
    it when it is a stateless plan)."""
    if fed_operators(below) is None:
        return [], [below]
    return fed_branches(below), fed_items(below)


def side_shape(below: Node, lateness: int) -> tuple[int, int | None]:
    """What a side's :class:`FedRelease` waits for: how many branches tell their
    horizon (the items one more) and, if it has items, their lateness."""
    fed, items = side_inputs(below)
    return len(fed) + (1 if items else 0), (lateness if items else None)


class SidesRelease:
    """The two sides of a join over operators' results
    (:func:`~roses_app.algebra.time.eventtime.released_joined`), each a :class:`FedRelease`
    (its operators' results; its items through their own clock, the join's lateness),
    what either gives held until the other has decided that time too, then out in
    time order, each arrival with its side in its key."""

    def __init__(self, sides: tuple[FedRelease, FedRelease], held: list[Arrival] | None = None):
        self.sides = sides
        self.held: list[Arrival] = held or []

    @property
    def horizon(self) -> int | None:
        """What both sides have decided (None until each has told)."""
        found = [side.horizon for side in self.sides]
        return None if None in found else min(h for h in found if h is not None)

    def advance(
        self, left: Iterable[Sequence[Arrival]], right: Iterable[Sequence[Arrival]]
    ) -> tuple[list[Arrival], list[Arrival]]:
        """Each side's arrival groups: the events released now (in time order, keyed
        LEFT or RIGHT) and the items too late."""
        late: list[Arrival] = []
        for tag, release, groups in zip((LEFT, RIGHT), self.sides, (left, right), strict=True):
            out, dropped = release.advance(groups)
            late += dropped
            self.held += [Arrival(a.time, a.seq, a.item, tag) for a in out]
        horizon = self.horizon
        if horizon is None:
            return [], late
        released, self.held = release_before(self.held, horizon)
        return released, late

    def dump(self) -> dict[str, Any]:
        held = [[a.time, a.seq, a.item, a.key] for a in self.held]
        return {"sides": [side.dump() for side in self.sides], "held": held}

    @classmethod
    def load(
        cls, shapes: Sequence[tuple[int, int | None]], saved: dict[str, Any] | None
    ) -> SidesRelease:
        """``shapes``: each side's branches and its items' lateness (None: no items)."""
        found = saved["sides"] if saved else [None, None]
        left, right = (
            FedRelease.load(sources, side, items)
            for (sources, items), side in zip(shapes, found, strict=True)
        )
        held = [Arrival(*entry) for entry in saved["held"]] if saved else []
        return cls((left, right), held)


__all__ = [
    "DROPPED",
    "ITEMS",
    "MERGED",
    "RESULT_NAME",
    "FedBranch",
    "FedRelease",
    "SidesRelease",
    "branches",
    "fed_branches",
    "fed_horizon",
    "fed_items",
    "fed_operators",
    "fed_release",
    "last_versions",
    "mark_seq",
    "side_inputs",
    "side_shape",
]
