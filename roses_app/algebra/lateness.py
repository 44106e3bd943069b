"""Windows over publication time with an allowed lateness (seed 001: Scotty's goal).

An aggregate (α) or group-by (γ) over a periodic time window ω_time,w,d,f,t0 of items
read in publication time (``time: published``) takes its input in *arrival* order:
the events of one spool append (one ingest time) together, appends one after the
other.  Both engines call this module, the reference evaluator over a whole event
list at once, the Spark operator micro-batch after micro-batch with its state kept
in between (:meth:`LateWindows.dump`), so both publish the same results.

* **Clock.**  The latest time seen: the largest publication time of an item that
  reached the window, or the time of a heartbeat (time passing on the ingest clock).
* **Closing.**  The window [low, high] closes when the clock passes ``high``; its
  result (the reducer over its items, if it has items and the reducer returns one)
  is then published, at time ``high``, with the smallest seq of its items.
* **Allowed lateness** L.  A closed window keeps its items until the clock passes
  ``high + L``.  An item that arrives for it meanwhile updates it, and with the same
  arrival (the next watermark) its result is computed again and published again only
  if it changed: same guid (it replaces the published one), the seq of its latest
  item.  A result that did not change is counted (``unchanged``), not published.
  Only the windows an item belongs to are computed again: the window(s) of its time.
* **Too late.**  An item none of whose windows is still kept (``high + L`` before the
  clock for every one) is late: the caller drops and counts it, or publishes it in
  the stream's ``late`` part (``late: publish``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from roses_app.algebra.windows import Refreshed, refresh_bounds, refreshes_holding

PaneId = tuple[int, str | None]  # the window's inclusive end, the key (None: α)
Entry = tuple[int, int, str]  # time, seq, item


@dataclass(frozen=True)
class Arrival:
    """One input event at the window: an item at its time (with γ's key), or a
    heartbeat (``item`` None) at the time it says has come."""

    time: int
    seq: int
    item: str | None
    key: str | None = None


@dataclass
class Pane:
    """One window of one key: its items, whether it was computed since it closed, and
    whether an item came since it was last computed."""

    start: int
    end: int
    key: str | None
    entries: set[Entry] = field(default_factory=set)
    computed: bool = False
    touched: bool = False


@dataclass(frozen=True)
class Computation:
    """A window to reduce now: its items in (time, seq) order, the seq its result
    carries, and whether it was published before (a revision)."""

    pane: PaneId
    start: int
    end: int
    key: str | None
    items: tuple[str, ...]
    seq: int
    revision: bool


@dataclass(frozen=True)
class Emission:
    """A result to publish: at the window's end, replacing any earlier one."""

    ts: int
    seq: int
    item: str
    revision: bool


@dataclass
class Settled:
    emissions: list[Emission]
    unchanged: int  # windows computed again whose result had not changed


@dataclass
class Planned:
    computations: list[Computation]
    late: list[Arrival]  # items too late for every window they belong to
    purged: list[PaneId]  # windows gone past the lateness


# The output part (the feed NAME/late) of a stream's items later than the lateness.
LATE_PART = "late"

# The error accumulator of the Spark engine also counts, per stream, the items later
# than the lateness and the results computed again but unchanged, under these keys.
TALLIES = ("late", "unchanged")


def tally_key(kind: str, stream: str) -> str:
    return f"{kind}:{stream}"


def split_tallies(counts: dict[str, int]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """(items dropped per step, {kind: {stream: count}}) from the accumulator's counts."""
    dropped: dict[str, int] = {}
    tallies: dict[str, dict[str, int]] = {kind: {} for kind in TALLIES}
    for key, count in counts.items():
        kind, _, stream = key.partition(":")
        if kind in tallies and stream:
            tallies[kind][stream] = tallies[kind].get(stream, 0) + count
        else:
            dropped[key] = count
    return dropped, tallies


def digest(item: str) -> str:
    return hashlib.sha256(item.encode("utf-8")).hexdigest()[:32]


@dataclass
class LateWindows:
    """The state of one operator: the clock, the windows kept, and a digest of what
    was published for each (to tell a changed result from an unchanged one)."""

    spec: Refreshed
    lateness: int
    clock: int | None = None
    panes: dict[PaneId, Pane] = field(default_factory=dict)
    published: dict[PaneId, str] = field(default_factory=dict)

    def plan(self, groups: Iterable[Sequence[Arrival]]) -> Planned:
        """Take each arrival group in order: add its items, move the clock, and list the
        windows to compute (closing now, or closed and changed since)."""
        out = Planned([], [], [])
        for group in groups:
            out.late.extend(self._add(group))
            times = [a.time for a in group]
            if times:
                self.clock = max(times) if self.clock is None else max(self.clock, *times)
            out.computations.extend(self._due())
            out.purged.extend(self._purge())
        return out

    def settle(self, planned: Planned, results: Sequence[str | None]) -> Settled:
        """What to publish, given each computation's result (None: λ, nothing)."""
        out = Settled([], 0)
        for comp, result in zip(planned.computations, results, strict=True):
            if result is None:
                continue  # λ: nothing to publish (an earlier result stays as it was)
            found = digest(result)
            if self.published.get(comp.pane) == found:
                out.unchanged += 1
                continue
            self.published[comp.pane] = found
            out.emissions.append(Emission(comp.end, comp.seq, result, comp.revision))
        for pane in planned.purged:
            self.published.pop(pane, None)
        return out

    def _add(self, group: Sequence[Arrival]) -> list[Arrival]:
        late: list[Arrival] = []
        for arrival in group:
            if arrival.item is None:
                continue
            kept = [
                r
                for r in refreshes_holding(self.spec, arrival.time)
                if not self._gone(r, self.clock)
            ]
            if not kept:
                if len(refreshes_holding(self.spec, arrival.time)):
                    late.append(arrival)  # else before the first window: in none
                continue
            entry = (arrival.time, arrival.seq, arrival.item)
            for refresh in kept:
                start, end = refresh_bounds(self.spec, refresh)
                pane = self.panes.setdefault((end, arrival.key), Pane(start, end, arrival.key))
                if entry not in pane.entries:
                    pane.entries.add(entry)
                    pane.touched = pane.touched or pane.computed
        return late

    def _gone(self, refresh: int, clock: int | None) -> bool:
        return clock is not None and refresh_bounds(self.spec, refresh)[1] + self.lateness < clock

    def _due(self) -> list[Computation]:
        out: list[Computation] = []
        if self.clock is None:
            return out
        for pane_id in sorted(self.panes, key=_pane_order):
            pane = self.panes[pane_id]
            if pane.end >= self.clock or (pane.computed and not pane.touched):
                continue
            entries = sorted(pane.entries)
            seq = max(e[1] for e in entries) if pane.computed else min(e[1] for e in entries)
            out.append(
                Computation(
                    pane_id,
                    pane.start,
                    pane.end,
                    pane.key,
                    tuple(e[2] for e in entries),
                    seq,
                    pane.computed,
                )
            )
            pane.computed, pane.touched = True, False
        return out

    def _purge(self) -> list[PaneId]:
        gone = [
            p
            for p, pane in self.panes.items()
            if self.clock is not None and pane.end + self.lateness < self.clock
        ]
        for pane_id in gone:
            del self.panes[pane_id]
        return gone

    # -- the state as plain data (the Spark operator keeps it between micro-batches) --

    def dump(self) -> dict[str, Any]:
        return {
            "clock": self.clock,
            "panes": [
                [p.start, p.end, p.key, sorted(p.entries), p.computed, p.touched]
                for p in self.panes.values()
            ],
            "published": [[end, key, d] for (end, key), d in self.published.items()],
        }

    @classmethod
    def load(cls, spec: Refreshed, lateness: int, data: dict[str, Any] | None) -> LateWindows:
        state = cls(spec, lateness)
        if not data:
            return state
        state.clock = data["clock"]
        for start, end, key, entries, computed, touched in data["panes"]:
            state.panes[(end, key)] = Pane(
                start, end, key, {(t, s, i) for t, s, i in entries}, computed, touched
            )
        state.published = {(end, key): d for end, key, d in data["published"]}
        return state


def _pane_order(pane: PaneId) -> tuple[int, str]:
    end, key = pane
    return end, key or ""


def arrival_groups(arrivals: Iterable[tuple[int, Arrival]]) -> list[list[Arrival]]:
    """(ingest time, arrival) pairs as arrival groups: one per ingest time, in order,
    each in seq order, copies of one event (several paths of a union) made one."""
    groups: dict[int, set[Arrival]] = {}
    for ingest, arrival in arrivals:
        groups.setdefault(ingest, set()).add(arrival)
    return [
        sorted(groups[t], key=lambda a: (a.seq, a.time, a.item or "", a.key or ""))
        for t in sorted(groups)
    ]
