"""The windows of :mod:`roses_app.algebra.time.lateness`: their items, and how an arriving
item enters them for count windows and session windows (periodic time windows are
there: an item's windows follow from its time alone)."""

from __future__ import annotations

import hashlib
from bisect import insort
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat

from roses_app.algebra.plan.operators import CountWindow, SessionWindow
from roses_app.algebra.time.slices import Entry, Slices
from roses_app.algebra.time.windows import count_window

# a window: its inclusive end (a session: the seq of its first item), its key (None: α)
PaneId = tuple[int, str | None]


def digest(text: str) -> str:
    """An item's or a result's text in a state (saved each micro-batch) without the
    text itself: to tell a changed result, or two items of one event, apart."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def plain_entries(entries: Iterable[Entry]) -> list[tuple[int, int, str]]:
    """Entries as plain tuples (orjson writes no named tuple)."""
    return list(map(tuple.__new__, repeat(tuple), entries))


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
    """One window of one key: its items; whether the clock has passed its end; whether
    items came since its result was last computed (or it never was)."""

    start: int
    end: int
    key: str | None
    entries: set[Entry] = field(default_factory=set)
    closed: bool = False
    touched: bool = True


def add_counted(
    panes: dict[PaneId, Pane],
    kept: list[Entry],
    spec: CountWindow,
    lateness: int,
    clock: int | None,
    group: Sequence[Arrival],
) -> list[Arrival]:
    """A count window has a window at each time seen (items' and heartbeats'): the
    last N items then.  An item changes the later windows it enters: each window
    is compared with its content before, and marked when it changed."""
    late: list[Arrival] = []
    for arrival in group:
        if past_lateness(arrival.time + 1, lateness, clock):  # its own window's
            if arrival.item is not None:
                late.append(arrival)
            continue
        if arrival.item is not None:
            entry = Entry(arrival.time, arrival.seq, arrival.item)
            if entry not in kept:
                insort(kept, entry)
        panes.setdefault((arrival.time, None), Pane(arrival.time, arrival.time, None))
    for (t, _), pane in panes.items():
        content = set(count_window(kept, t, spec.size))
        if content != pane.entries:
            pane.entries, pane.touched = content, True
    return late


@dataclass(frozen=True)
class Merge:
    """A session merged into an older one by an item that bridged them: ``gone``'s
    result, if published, is replaced by a pointer to ``into``'s."""

    gone: PaneId
    into: PaneId
    start: int
    end: int
    seq: int  # the item that bridged them


def add_to_sessions(
    panes: dict[PaneId, Pane],
    items: Slices,
    spec: SessionWindow,
    lateness: int,
    clock: int | None,
    group: Sequence[Arrival],
) -> tuple[list[Arrival], list[Merge]]:
    """Sessions (per key): an item less than ``gap`` from a session's span joins it
    (extending it), from two or more merges them into the oldest (by its first item's
    seq, which names the session: its guid stays), from none starts a new session, or
    is late when that session would already be past the lateness.  A session is
    keyed (first seq, key), its span is [first time, last time]."""
    late: list[Arrival] = []
    merges: list[Merge] = []
    gap = spec.gap
    by_key: dict[str | None, list[PaneId]] = {}  # a key's sessions (γ may have many keys)
    for pid in panes:
        by_key.setdefault(pid[1], []).append(pid)
    for arrival in group:
        if arrival.item is None:
            continue
        mine = by_key.setdefault(arrival.key, [])
        mine[:] = [pid for pid in mine if pid in panes]  # merged ones are gone
        near = sorted(
            pid for pid in mine if panes[pid].start - gap < arrival.time < panes[pid].end + gap
        )
        if not near:
            if past_lateness(arrival.time + gap, lateness, clock):  # a session of it alone
                late.append(arrival)
                continue
            near = [(arrival.seq, arrival.key)]
            panes[near[0]] = Pane(arrival.time, arrival.time, arrival.key)
            mine.append(near[0])
        into = panes[near[0]]
        for other in near[1:]:
            gone = panes.pop(other)
            merges.append(Merge(other, near[0], gone.start, gone.end, arrival.seq))
            into.start, into.end = min(into.start, gone.start), max(into.end, gone.end)
        # a session holds the items of its key in its span (spans never overlap)
        items.add(arrival.key, Entry(arrival.time, arrival.seq, arrival.item))
        into.start, into.end = min(into.start, arrival.time), max(into.end, arrival.time)
        into.touched = True
    return late, merges


def closes_at(spec: object, pane: Pane) -> int:
    """The clock at which a window is closed: past its end (a session: by its gap)."""
    if isinstance(spec, SessionWindow):
        return pane.end + spec.gap
    return pane.end + 1


def past_lateness(closes: int, lateness: int, clock: int | None) -> bool:
    """Whether a window closed at ``closes`` is past its lateness at ``clock``: it
    takes no item any more (an item only for it is late) and is forgotten."""
    return clock is not None and closes - 1 + lateness < clock
