"""Windows with an allowed lateness and report policies (seeds 001, 000 and 003).

An aggregate (α) or group-by (γ) over a periodic time window ω_time,w,d,f,t0 or a
session window (α: or a count window; :mod:`roses_app.algebra.time.panes`) of items read
in publication time (``time: published``), or with a ``report:`` policy, takes its
input in *arrival* order: the events of one spool append (one ingest time)
together, appends one after the other.  Both engines call this module, the reference
evaluator over a whole event list at once, the Spark operator micro-batch after
micro-batch with its state kept in between (:meth:`LateWindows.dump`), so both
publish the same results.

* **Clock.**  The latest time seen: the largest time of an item that reached the
  window (its publication time, or its ingest time), or the time of a heartbeat.
* **Closing.**  The window [low, high] closes when the clock passes ``high`` (a
  session: when it is ``gap`` past its last item).
* **Report** (SECRET's report dimension, seed 003;
  :class:`~roses_app.algebra.plan.operators.Report`).
  By default a window's result (the reducer over its items) is published when it
  closes (``on-close``); ``on-change`` publishes it whenever its items change, before
  it closes too (FlameStream's optimistic results, seed 000); ``every: P`` when the
  clock passes a multiple of P and it changed since.  ``tick`` says when these are
  looked at: after each arrival (``batch``), each item (``item``), or each advance of
  the clock (``time``).  Whatever the policy, a result is published only if it
  differs from the window's last published one, and then in place of it (same guid),
  with a revision number (0 for the first); a result that had not changed is counted
  (``unchanged``).  The first result of a window carries the smallest seq of its
  items, a revision the largest (its latest item).  An empty window is never
  published (SECRET's non-empty content).
* **Allowed lateness** L (seed 001, Scotty's goal).  A closed window keeps its items
  until the clock passes ``high + L``.  An item that arrives for it meanwhile updates
  it: the window(s) of its time, and only they, are computed again (with that
  arrival: the next watermark), and published again if their result changed.
* **Too late.**  An item none of whose windows is still kept (``high + L`` before the
  clock for every one) is late: the caller drops and counts it, or publishes it in
  the stream's ``late`` part (``late: publish``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from roses_app.algebra.plan.operators import CountWindow, Report, SessionWindow
from roses_app.algebra.time.latejoin import timely_heartbeats
from roses_app.algebra.time.panes import (
    Arrival,
    Entry,
    Merge,
    Pane,
    PaneId,
    add_counted,
    add_to_sessions,
    closes_at,
    digest,
    past_lateness,
    plain_entries,
)
from roses_app.algebra.time.slices import MemorySlices, SliceMap, Slices, slice_width
from roses_app.algebra.time.windows import (
    Refreshed,
    count_window,
    refresh_bounds,
    refreshes_holding,
)


@dataclass(frozen=True)
class Computation:
    """A window to reduce now: its items in (time, seq) order and the smallest and
    largest seq among them."""

    pane: PaneId
    start: int
    end: int
    key: str | None
    items: tuple[str, ...]
    first_seq: int
    last_seq: int
    ident: int | None = None  # a session's: the seq of its first item (its guid)


@dataclass(frozen=True)
class Emission:
    """A result to publish at the window's end, replacing any earlier one of the same
    window: ``revision`` counts the results published before it (0: the first).  The
    engine stamps the window (guid, bounds, key, revision) on ``item``."""

    ts: int
    seq: int
    item: str
    start: int
    end: int
    key: str | None
    revision: int
    ident: int | None = None  # a session's (see Computation)
    merged_into: int | None = None  # a session merged into that one: ``item`` is empty


@dataclass
class Settled:
    emissions: list[Emission]
    unchanged: int  # windows computed again whose result had not changed


@dataclass
class Planned:
    computations: list[Computation]
    late: list[Arrival]  # items too late for every window they belong to
    purged: list[PaneId]  # windows gone past the lateness
    merged: list[Merge] = field(default_factory=list)  # sessions merged into older ones
    # the computations and merges in the order they happened (settled in that order)
    order: list[Computation | Merge] = field(default_factory=list)
    heartbeats: list[Arrival] = field(default_factory=list)  # on time (timely_heartbeats)


# The output part (the feed NAME/late) of a stream's items later than the lateness.
LATE_PART = "late"

# The error accumulator of the Spark engine also counts, per stream, the items later
# than the lateness, the results computed again but unchanged, and the results that
# replaced (retracted) a published one, under these keys.
TALLIES = ("late", "unchanged", "revised")


# The lateness of the windows a released run computes (eventtime.released_windows):
# what it releases comes in time order, each time one arrival, so nothing is late
RELEASED_LATENESS = 0


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


@dataclass
class LateWindows:
    """The state of one operator: the clock, the windows kept, and for each the digest
    of its last published result and how many it published (to tell a changed result
    from an unchanged one, and to number revisions).  A periodic or session window's
    items are in ``items`` (:mod:`roses_app.algebra.time.slices`), each once; a count
    window's in its panes."""

    spec: Refreshed | CountWindow | SessionWindow
    lateness: int
    report: Report = field(default_factory=Report)
    clock: int | None = None
    panes: dict[PaneId, Pane] = field(default_factory=dict)
    published: dict[PaneId, tuple[str, int]] = field(default_factory=dict)
    # a count window's items, as far back as a window still to come may reach (an
    # aggregate's only: a group's key would have to leave published windows)
    kept: list[Entry] = field(default_factory=list)
    items: Slices | None = None  # a periodic or session window's

    def __post_init__(self) -> None:
        spec = self.spec
        if self.items is None and not isinstance(spec, CountWindow):
            span = spec.gap if isinstance(spec, SessionWindow) else spec.period or 1
            self.items = Slices(slice_width(span))

    def plan(self, groups: Iterable[Sequence[Arrival]]) -> Planned:
        """Take each arrival group in order (each item alone with ``tick: item``): add
        its items, move the clock, and list the windows the report policy computes."""
        out = Planned([], [], [])
        for group in self._ticks(groups):
            out.heartbeats += timely_heartbeats(self.clock, group, self.lateness)
            merged = len(out.merged)
            out.late.extend(self._add(group, out.merged))
            out.order.extend(out.merged[merged:])
            before = self.clock
            times = [a.time for a in group]
            if times:
                self.clock = max(times) if self.clock is None else max(self.clock, *times)
            if self.report.tick == "time" and self.clock == before:
                continue  # evaluated when the clock moves
            due = self._due(self._period_passed(before))
            out.computations.extend(due)
            out.order.extend(due)
            out.purged.extend(self._purge())
        return out

    def settle(self, planned: Planned, results: Sequence[str | None]) -> Settled:
        """What to publish, given each computation's reducer result (None: λ)."""
        out = Settled([], 0)
        found = dict(zip(map(id, planned.computations), results, strict=True))
        for step in planned.order:
            if isinstance(step, Merge):
                self._merged(step, out)
            else:
                self._settled(step, found[id(step)], out)
        for pane in planned.purged:
            self.published.pop(pane, None)
        return out

    def _settled(self, comp: Computation, result: str | None, out: Settled) -> None:
        if result is None:
            return  # λ: nothing to publish (an earlier result stays as it was)
        found = digest(result)
        known, count = self.published.get(comp.pane, ("", 0))
        if known == found:
            out.unchanged += 1
            return
        self.published[comp.pane] = (found, count + 1)
        seq = comp.last_seq if count else comp.first_seq
        out.emissions.append(
            Emission(comp.end, seq, result, comp.start, comp.end, comp.key, count, comp.ident)
        )

    def _merged(self, merge: Merge, out: Settled) -> None:
        """A published session merged into another: its result points to that one."""
        if merge.gone not in self.published:
            return
        _, count = self.published.pop(merge.gone)
        ident, key = merge.gone
        into = merge.into[0]
        out.emissions.append(
            Emission(merge.end, merge.seq, "", merge.start, merge.end, key, count, ident, into)
        )

    def _ticks(self, groups: Iterable[Sequence[Arrival]]) -> Iterator[Sequence[Arrival]]:
        for group in groups:
            if self.report.tick == "item":
                yield from ([a] for a in group)
            else:
                yield group

    def _add(self, group: Sequence[Arrival], merged: list[Merge]) -> list[Arrival]:
        spec = self.spec
        if isinstance(spec, CountWindow):
            return add_counted(self.panes, self.kept, spec, self.lateness, self.clock, group)
        if isinstance(spec, SessionWindow):
            assert self.items is not None
            gone, merges = add_to_sessions(
                self.panes, self.items, spec, self.lateness, self.clock, group
            )
            merged.extend(merges)
            return gone
        late: list[Arrival] = []
        items = self.items
        assert items is not None
        for arrival in group:
            if arrival.item is None:
                continue
            holding = refreshes_holding(spec, arrival.time)
            kept = [r for r in holding if not self._gone(r, self.clock)]
            if not kept:
                if len(holding):
                    late.append(arrival)  # else before the first window: in none
                continue
            # an item comes once (arrival_groups makes the copies of one event one)
            items.add(arrival.key, Entry(arrival.time, arrival.seq, arrival.item))
            for refresh in kept:
                start, end = refresh_bounds(spec, refresh)
                pane = self.panes.setdefault((end, arrival.key), Pane(start, end, arrival.key))
                pane.touched = True
        return late

    def _gone(self, refresh: int, clock: int | None) -> bool:
        assert not isinstance(self.spec, CountWindow | SessionWindow)
        return past_lateness(refresh_bounds(self.spec, refresh)[1] + 1, self.lateness, clock)

    def _period_passed(self, before: int | None) -> bool:
        """Whether the clock passed a multiple of the report period (``every``)."""
        every = self.report.every
        if not every or self.clock is None or before is None:
            return False  # the first time seen starts the count
        return self.clock // every > before // every

    def _due(self, period: bool) -> list[Computation]:
        out: list[Computation] = []
        if self.clock is None:
            return out
        report = self.report
        sliced = self.items
        for pane_id in sorted(self.panes, key=_pane_order):
            pane = self.panes[pane_id]
            pane.closed = pane.closed or closes_at(self.spec, pane) <= self.clock
            wanted = report.on_change or period or (report.on_close and pane.closed)
            # a periodic or session window's pane exists once an item is in it
            if not (pane.touched and wanted and (sliced is not None or pane.entries)):
                continue
            if sliced is not None:
                entries = sliced.between(pane.key, pane.start, pane.end)
            else:
                entries = sorted(pane.entries)
            seqs = [e[1] for e in entries]
            items = tuple(e[2] for e in entries)
            ident = pane_id[0] if isinstance(self.spec, SessionWindow) else None
            out.append(
                Computation(
                    pane_id, pane.start, pane.end, pane.key, items, min(seqs), max(seqs), ident
                )
            )
            pane.touched = False
        return out

    def _purge(self) -> list[PaneId]:
        clock = self.clock
        if clock is None:
            return []
        spec = self.spec
        gone = [
            p
            for p, pane in self.panes.items()
            if past_lateness(closes_at(spec, pane), self.lateness, clock)
        ]
        for pane_id in gone:
            del self.panes[pane_id]
        if self.items is not None and gone:
            # a key's items before its windows left are in none of them, nor in any
            # window to come (each window of an item's time is made when it comes; a
            # session is purged before any later one of its key)
            starts: dict[str | None, int] = {}
            for pane in self.panes.values():
                starts[pane.key] = min(pane.start, starts.get(pane.key, pane.start))
            for key in {key for _, key in gone}:
                self.items.forget(key, starts.get(key))
        if isinstance(self.spec, CountWindow):
            # a window still to come (at clock − lateness or later) reaches back N items
            reach = count_window(self.kept, clock - self.lateness, self.spec.size)
            if reach:
                del self.kept[: self.kept.index(reach[0])]
        return gone

    # -- the state as plain data (the Spark operator keeps it between micro-batches) --

    def dump(self) -> dict[str, Any]:
        """The state as JSON values, but for a periodic or session window's items: those go to
        their slice store (:meth:`Slices.flush`), and the state says which slices
        each key has."""
        panes = []
        for (n, key), p in self.panes.items():
            entries = plain_entries(sorted(p.entries))
            panes.append([n, key, p.start, p.end, entries, p.closed, p.touched])
        data: dict[str, Any] = {
            "clock": self.clock,
            "panes": panes,
            "published": [[end, key, d, n] for (end, key), (d, n) in self.published.items()],
            "kept": plain_entries(self.kept),
        }
        if self.items is not None:
            self.items.flush()
            data["slices"] = self.items.dump()
        return data

    @classmethod
    def load(
        cls,
        spec: Refreshed | CountWindow | SessionWindow,
        lateness: int,
        report: Report,
        data: dict[str, Any] | None,
        slices: SliceMap | None = None,
    ) -> LateWindows:
        """The state :meth:`dump` saved; ``slices``: where a periodic or session window's items
        are (the operator's own, kept beside the state)."""
        state = cls(spec, lateness, report)
        if state.items is not None:
            held = data.get("slices", ()) if data else ()
            store = MemorySlices() if slices is None else slices
            state.items = Slices.load(state.items.width, store, held)
        if not data:
            return state
        state.clock = data["clock"]
        make = Entry._make
        for n, key, start, end, entries, closed, touched in data["panes"]:
            found = set(map(make, entries))
            state.panes[(n, key)] = Pane(start, end, key, found, closed, touched)
        state.published = {(end, key): (d, n) for end, key, d, n in data["published"]}
        state.kept = list(map(make, data.get("kept", ())))
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
    return [sorted(groups[t], key=arrival_order) for t in sorted(groups)]


def arrival_order(arrival: Arrival) -> tuple[int, int, str, str]:
    """The order of the arrivals of one ingest time, in which operators take them."""
    return (arrival.seq, arrival.time, arrival.item or "", arrival.key or "")
