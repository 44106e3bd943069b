"""Delta, nest and a window read as a stream of its own over items read in publication
time: the events released to them in time order, once final (seed 001's lateness,
reported on close).

These operators compute, at each time t, something of the items up to t (the window
at t, what changed since the time before, the items at t).  A late item changes that
for its own time and the times after it, so their results are computed only once no
item still on time can come at or before t:

* **Clock, too late.**  As for joins (:mod:`roses_app.algebra.time.latejoin`): the latest
  time seen; an item more than the lateness L before the clock as it stood before its
  arrival is dropped and counted.  A heartbeat that far behind is dropped too (it
  would say that a time already released has come).
* **Released.**  The items on time and the heartbeats are held until the clock is
  more than L past their time; then they go to the operator in time order (then seq),
  which computes them as over ingest time.  Whatever the arrival order, what is
  released is in order, so results are final when published: no result is taken back.

Over the results of operators of time (a join's, a windowed aggregate's...), the
release is :mod:`roses_app.algebra.time.release_results`'s.

Both engines call :class:`Release`: the reference evaluator over the whole event list,
the Spark operator (:mod:`roses_app.spark.latesequential`) micro-batch after
micro-batch, its state saved in between.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from roses_app.algebra.plan.operators import Aggregate, GroupBy, Node
from roses_app.algebra.time.latejoin import split_late, timely_heartbeats
from roses_app.algebra.time.panes import Arrival


def release_order(arrival: Arrival) -> tuple[int, int, str]:
    """The order events are released in: the reference's event order."""
    return arrival.time, arrival.seq, arrival.item or ""


def release_before(held: list[Arrival], horizon: int) -> tuple[list[Arrival], list[Arrival]]:
    """Of the events ``held``, those before ``horizon`` in release order (out now), and
    the others (still held)."""
    out = sorted((a for a in held if a.time < horizon), key=release_order)
    return out, [a for a in held if a.time >= horizon]


def release_lateness(node: Node, settings_lateness: int) -> int:
    """The lateness an operator over publication time is released with: an aggregate's
    or a group's own (its ``lateness:``, which defaults to settings.lateness); delta,
    nest and windows take none of their own."""
    return node.lateness if isinstance(node, Aggregate | GroupBy) else settings_lateness


class Release:
    """The clock and the events held back of one operator."""

    def __init__(
        self, lateness: int, clock: int | None = None, held: list[Arrival] | None = None
    ) -> None:
        self.lateness = lateness
        self.clock = clock
        self.held: list[Arrival] = held or []

    @property
    def horizon(self) -> int | None:
        """The time before which everything on time has come (None: nothing yet)."""
        return None if self.clock is None else self.clock - self.lateness

    def advance(self, groups: Iterable[Sequence[Arrival]]) -> tuple[list[Arrival], list[Arrival]]:
        """Arrival groups, in order: the events released now (in order) and the items
        too late."""
        late: list[Arrival] = []
        for group in groups:
            before = self.clock
            self.held += timely_heartbeats(before, group, self.lateness)
            on, dropped, self.clock = split_late(before, group, self.lateness)
            late += dropped
            self.held += on
        horizon = self.horizon
        if horizon is None:
            return [], late
        released, self.held = release_before(self.held, horizon)
        return released, late

    def dump(self) -> dict[str, Any]:
        return {"clock": self.clock, "held": [[a.time, a.seq, a.item] for a in self.held]}

    @classmethod
    def load(cls, lateness: int, saved: dict[str, Any] | None) -> Release:
        if saved is None:
            return cls(lateness)
        held = [Arrival(time, seq, item) for time, seq, item in saved["held"]]
        return cls(lateness, saved["clock"], held)


__all__ = ["Release", "release_before", "release_lateness", "release_order"]
