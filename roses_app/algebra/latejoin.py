"""Joins and semijoins over publication time, with an allowed lateness (seed 001).

An inner join or a semijoin whose sides are sliding time windows (or no window) of
filters, maps and unions over items read in publication time takes its input in
arrival order: the events of one spool append (one ingest time) together, appends one
after the other, both sides merged.  The rules:

* **Clock.**  The latest time seen on either side: an item's time (its publication
  time, or its ingest time) or a heartbeat's.
* **Too late.**  An item whose time is more than the lateness L before the clock as
  it stood before its arrival is dropped and counted (``late:STREAM``); items of one
  arrival never make each other late.
* **Pairs.**  Items ``a`` (left) and ``b`` (right) pair as in ingest time: ``b`` is in
  the right window at ``a``'s time, or (a join) ``a`` in the left window at ``b``'s
  time (:func:`pairs_at`), and ``on`` holds.  Whatever order they arrive in, the pair
  is found when the second of the two arrives: a join publishes it then, at the later
  of the two times (the largest seq), a semijoin its left item, once.  An inner join's
  pairs only grow as items come, so a result once published is final: optimistic and
  on-close are one here.
* **Kept.**  An item stays while an item of the other side that is not too late could
  still pair with it: until the clock passes its time plus its window's reach plus L.

Left and outer joins, products, differences and count windows are not monotone (a
late item takes a result back), so they are not run over publication time.

The reference evaluator filters the too-late items with :func:`on_time` and pairs the
rest as in ingest time; the Spark operator (:mod:`roses_app.spark.latejoin`) runs
:class:`LateJoin` micro-batch after micro-batch: the differential tests compare them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from roses_app.algebra.panes import Arrival
from roses_app.algebra.plan import TimeWindow
from roses_app.algebra.windows import call_bounds

LEFT, RIGHT = "l", "r"  # an arrival's side, in Arrival.key


def pairs_at(
    left: TimeWindow | None, right: TimeWindow | None, ta: int, tb: int, both: bool
) -> bool:
    """Whether a left item at ``ta`` and a right one at ``tb`` meet: ``tb`` in the right
    window at ``ta``, or (``both``: a join) ``ta`` in the left window at ``tb``."""
    found = call_bounds(right, ta)
    if found is not None and found[0] <= tb <= found[1]:
        return True
    if not both:
        return False
    found = call_bounds(left, tb)
    return found is not None and found[0] <= ta <= found[1]


def reach(spec: TimeWindow | None) -> int:
    """How long after its time an item may still be in its side's window."""
    return 0 if spec is None else max(0, spec.delay + spec.width - 1)


def split_late(
    clock: int | None, group: Sequence[Arrival], lateness: int
) -> tuple[list[Arrival], list[Arrival], int | None]:
    """One arrival: its items on time, its items too late, and the clock after it."""
    on, late = [], []
    for arrival in group:
        if arrival.item is None:
            continue
        if clock is not None and arrival.time < clock - lateness:
            late.append(arrival)
        else:
            on.append(arrival)
    times = [a.time for a in group]
    if times:
        clock = max(times) if clock is None else max(clock, *times)
    return on, late, clock


def on_time(
    groups: Iterable[Sequence[Arrival]], lateness: int
) -> tuple[list[Arrival], list[Arrival]]:
    """The items of arrivals ``groups`` (in order) on time, and those too late."""
    clock: int | None = None
    kept: list[Arrival] = []
    dropped: list[Arrival] = []
    for group in groups:
        on, late, clock = split_late(clock, group, lateness)
        kept += on
        dropped += late
    return kept, dropped


@dataclass
class Planned:
    """What a batch of arrivals gives: the pairs to test (left, right), and the items
    too late."""

    pairs: list[tuple[Arrival, Arrival]] = field(default_factory=list)
    late: list[Arrival] = field(default_factory=list)


@dataclass
class LateJoin:
    """The state of one join or semijoin: the clock and the items kept per side (a
    semijoin's left items with whether they were published)."""

    left: TimeWindow | None
    right: TimeWindow | None
    lateness: int
    both: bool  # a join (pairs found from both sides), not a semijoin
    clock: int | None = None
    kept: dict[str, list[Arrival]] = field(default_factory=lambda: {LEFT: [], RIGHT: []})
    published: set[int] = field(default_factory=set)  # a semijoin's left seqs

    def advance(self, groups: Iterable[Sequence[Arrival]]) -> Planned:
        """Take arrivals in order: each item on time meets the other side's kept items
        (a semijoin's left items already published are not tested again)."""
        out = Planned()
        for group in groups:
            on, late, self.clock = split_late(self.clock, group, self.lateness)
            out.late += late
            for arrival in on:
                out.pairs += self._meet(arrival)
                self.kept[arrival.key or LEFT].append(arrival)
            self._evict()
        return out

    def mark_published(self, seqs: Iterable[int]) -> None:
        """A semijoin's left items just published: they are not tested again."""
        self.published.update(seqs)

    def _meet(self, arrival: Arrival) -> list[tuple[Arrival, Arrival]]:
        if arrival.key == LEFT:
            if arrival.seq in self.published:
                return []
            return [
                (arrival, other)
                for other in self.kept[RIGHT]
                if pairs_at(self.left, self.right, arrival.time, other.time, self.both)
            ]
        return [
            (other, arrival)
            for other in self.kept[LEFT]
            if other.seq not in self.published
            and pairs_at(self.left, self.right, other.time, arrival.time, self.both)
        ]

    def _evict(self) -> None:
        if self.clock is None:
            return
        horizon = self.clock - self.lateness
        for side, spec in ((LEFT, self.left), (RIGHT, self.right)):
            width = reach(spec)
            self.kept[side] = [a for a in self.kept[side] if a.time + width >= horizon]
        alive = {a.seq for a in self.kept[LEFT]}
        self.published &= alive

    def dump(self) -> dict[str, Any]:
        return {
            "clock": self.clock,
            "kept": {
                side: [[a.time, a.seq, a.item] for a in kept] for side, kept in self.kept.items()
            },
            "published": sorted(self.published),
        }

    @classmethod
    def load(
        cls,
        left: TimeWindow | None,
        right: TimeWindow | None,
        lateness: int,
        both: bool,
        saved: dict[str, Any] | None,
    ) -> LateJoin:
        state = cls(left, right, lateness, both)
        if saved is not None:
            state.clock = saved["clock"]
            state.kept = {
                side: [Arrival(t, s, item, side) for t, s, item in rows]
                for side, rows in saved["kept"].items()
            }
            state.published = set(saved["published"])
        return state
