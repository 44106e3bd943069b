"""Delta, nest and a window read as a stream of its own over items read in publication
time: the events released to them in time order, once final (seed 001's lateness,
reported on close).

These operators compute, at each time t, something of the items up to t (the window
at t, what changed since the time before, the items at t).  A late item changes that
for its own time and the times after it, so their results are computed only once no
item still on time can come at or before t:

* **Clock, too late.**  As for joins (:mod:`roses_app.algebra.latejoin`): the latest
  time seen; an item more than the lateness L before the clock as it stood before its
  arrival is dropped and counted.  A heartbeat that far behind is dropped too (it
  would say that a time already released has come).
* **Released.**  The items on time and the heartbeats are held until the clock is
  more than L past their time; then they go to the operator in time order (then seq),
  which computes them as over ingest time.  Whatever the arrival order, what is
  released is in order, so results are final when published: no result is taken back.
* **Fed by an operator's results.**  Over the results of a join, a semijoin, a
  difference or a windowed grouping reporting on close
  (:func:`~roses_app.algebra.eventtime.settled`), nothing is too late: that operator
  dropped its late items, and it publishes a result final, at a time its clock had
  not decided before that arrival.  So after each arrival its results before its
  clock − its lateness are all there.  It tells its clock (a heartbeat at that time
  after each micro-batch, on Spark); the release holds its results until that
  horizon passes them and gives them out in time order, with the heartbeats the
  operator took on time (:func:`~roses_app.algebra.latejoin.timely_heartbeats`).
  An aggregate or a group over periodic windows
  (:func:`~roses_app.algebra.eventtime.revised_windows`) publishes a window's result
  again when it changes, until its end is before that horizon: a result named by its
  key (its guid) replaces the one held before it, so only the final one is given out.

Both engines call :class:`Release`: the reference evaluator over the whole event list,
the Spark operator (:mod:`roses_app.spark.latesequential`) micro-batch after
micro-batch, its state saved in between.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from roses_app.algebra.eventtime import fed_input, fed_operator, late_sequential
from roses_app.algebra.latejoin import CLOCK_SEQ, split_late, timely_heartbeats
from roses_app.algebra.panes import Arrival
from roses_app.algebra.plan import Aggregate, GroupBy, Node, SessionWindow, Window

# What names a window's result through its revisions (roses_app.xmlfn.stamp): its
# guid, and " merged" after it on the notice of a session merged into another
RESULT_NAME = "string-join((string(guid), *:window/@merged-into ! 'merged'), ' ')"
MERGED = " merged"

V = TypeVar("V")


def last_versions(
    results: Sequence[V], names: Sequence[str | None], seq: Callable[[V], int]
) -> list[V]:
    """Of results named by :data:`RESULT_NAME`, the last version of each (a revision
    has the larger seq: its latest item), none of a session merged into another;
    the unnamed ones all."""
    last: dict[str, V] = {}
    out: list[V] = []
    for result, name in sorted(zip(results, names, strict=True), key=lambda pair: seq(pair[0])):
        if name is None:
            out.append(result)
        else:
            last[name.removesuffix(MERGED)] = result
    gone = {name.removesuffix(MERGED) for name in names if name and name.endswith(MERGED)}
    return out + [result for name, result in last.items() if name not in gone]


def release_order(arrival: Arrival) -> tuple[int, int, str]:
    """The order events are released in: the reference's event order."""
    return arrival.time, arrival.seq, arrival.item or ""


def release_lateness(node: Node, settings_lateness: int) -> int:
    """The lateness an operator over publication time is released with: over a settled
    operator, that operator's; else an aggregate's or a group's own (its
    ``lateness:``, which defaults to settings.lateness); delta, nest and windows take
    none of their own."""
    below = late_sequential(node)
    fed = None if below is None else fed_operator(below)
    if fed is not None:
        # a session's result is at its last item, and an item up to its gap later may
        # still extend it: decided once the clock is past that too
        window = fed.input if isinstance(fed, Aggregate | GroupBy) else None
        spec = window.spec if isinstance(window, Window) else None
        reach = spec.gap - 1 if isinstance(spec, SessionWindow) else 0
        return fed.lateness + reach  # type: ignore[attr-defined]
    return node.lateness if isinstance(node, Aggregate | GroupBy) else settings_lateness


def fed_release(node: Node) -> bool:
    """Whether the release of ``node``'s run is fed by an operator's results
    (:func:`~roses_app.algebra.eventtime.fed_input`)."""
    below = late_sequential(node)
    return below is not None and fed_input(below)


class Release:
    """The clock and the events held back of one operator."""

    def __init__(
        self,
        lateness: int,
        clock: int | None = None,
        held: list[Arrival] | None = None,
        fed: bool = False,
    ) -> None:
        self.lateness = lateness
        self.clock = clock
        self.held: list[Arrival] = held or []
        self.fed = fed  # by an operator's results (fed_input): nothing is too late

    def advance(self, groups: Iterable[Sequence[Arrival]]) -> tuple[list[Arrival], list[Arrival]]:
        """Arrival groups, in order: the events released now (in order) and the items
        too late."""
        late: list[Arrival] = []
        for group in groups:
            before = self.clock
            if self.fed:  # results, heartbeats, and the clock (not a time that came)
                clocks = [a.time for a in group if a.item is None and a.seq == CLOCK_SEQ]
                # (only the operator's clock: an open window's result may be ahead of it)
                self.clock = max([*clocks, *([] if before is None else [before])], default=None)
                self._hold([a for a in group if a.item is not None or a.seq != CLOCK_SEQ])
                continue
            self.held += timely_heartbeats(before, group, self.lateness)
            on, dropped, self.clock = split_late(before, group, self.lateness)
            late += dropped
            self.held += on
        if self.clock is None:
            return [], late
        horizon = self.clock - self.lateness
        released = sorted((a for a in self.held if a.time < horizon), key=release_order)
        self.held = [a for a in self.held if a.time >= horizon]
        return released, late

    def _hold(self, arrivals: list[Arrival]) -> None:
        """Hold results; of those named by a key (:data:`RESULT_NAME`), only the last
        version (:func:`last_versions`)."""
        held = [*self.held, *arrivals]
        self.held = last_versions(held, [a.key for a in held], lambda a: a.seq)

    def dump(self) -> dict[str, Any]:
        held = [[a.time, a.seq, a.item, *([a.key] if a.key else [])] for a in self.held]
        return {"clock": self.clock, "held": held}

    @classmethod
    def load(cls, lateness: int, saved: dict[str, Any] | None, fed: bool = False) -> Release:
        if saved is None:
            return cls(lateness, fed=fed)
        held = [Arrival(*entry) for entry in saved["held"]]
        return cls(lateness, saved["clock"], held, fed)


__all__ = [
    "MERGED",
    "RESULT_NAME",
    "Release",
    "fed_release",
    "last_versions",
    "release_lateness",
    "release_order",
]
