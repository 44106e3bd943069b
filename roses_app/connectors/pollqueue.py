"""Which polls may start now: due times, fetches in flight, politeness per host.

A pure data structure (no clock, no I/O: the caller passes ``now``), so its rules are
tested with made-up times.  The rules:

* a source is *due* at its time, and has a *deadline*: its due time plus a slack (the
  caller gives its interval: a poll later than that is as good as one skipped).  Due
  sources start by deadline, earliest first, never dropped: one that waits is started
  late, and the caller counts the lag.  When polls cannot keep up (100,000 new feeds'
  first round, a slow machine), a busy feed polled every minute goes before a quiet
  one polled every fifteen that has waited longer, and no source waits past its
  deadline while one with a later deadline starts (earliest deadline first); without
  a backlog the order does not matter: every due source starts at once;
* a source *at risk* (the caller says so: its document soon fills with new items, and
  a late poll loses some) goes before every other due source, by deadline among them.
  Deadlines alone would not do it: at the end of a long first round, the feeds not yet
  polled are all past their deadlines, and a busy feed whose deadline is a minute away
  waited behind them until its document had overflowed (the busiest feeds of a
  100,000-feed run went 9 and 12 minutes unpolled).  Such feeds are few (173 of the
  benchmark farm's 100,000, each at most a poll per `min_every`), so the others are not
  starved;
* at most ``concurrency`` polls are in flight at once, all hosts together (from the
  fetch's start to the poll's end, its document parsed and written);
* at most ``per_host`` fetches to one host (``host:port``), and two starts on one
  host are at least ``spacing`` seconds apart: a thousand feeds of one blog platform
  are fetched a few at a time, not all at once;
* a source that waits for its host does not hold a slot of the others: due sources
  of a busy host wait in their host's line, and sources of other hosts go first.

:meth:`PollQueue.take` gives what may start now; :meth:`PollQueue.release` frees a
source's host slot when its fetch ends, :meth:`PollQueue.done` its place among the
``concurrency`` polls in flight when the poll ends (parsed and written);
:meth:`PollQueue.next_wakeup` says when ``take`` may give something again without a
``done`` (a due time, or a host's spacing ending).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


def host_of(url: str) -> str:
    """The politeness key of a URL: ``host:port`` (``file:`` URLs share one key)."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        return parts.scheme.lower() or "?"
    try:
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:
        port = 0
    return f"{(parts.hostname or '').lower()}:{port}"


@dataclass(order=True)
class _Entry:
    at: float
    n: int
    name: str = field(compare=False)
    deadline: float = field(compare=False, default=0.0)
    rank: int = field(compare=False, default=1)  # 0: at risk, first


Waiting = tuple[int, float, float, int, str]  # rank, deadline, due time, order, source
AT_RISK, OTHERS = 0, 1


class PollQueue:
    """Due times and slots of many sources (see the module docstring)."""

    def __init__(self, concurrency: int, per_host: int, spacing: float) -> None:
        self.concurrency = max(1, concurrency)
        self.per_host = max(1, per_host)
        self.spacing = max(0.0, spacing)
        self.in_flight = 0
        self._heap: list[_Entry] = []
        self._due: dict[str, float] = {}  # scheduled sources (heap entries may be stale)
        self._host: dict[str, str] = {}
        self._lines: dict[str, list[Waiting]] = {}  # host -> heap of its due sources
        self._ready: list[tuple[int, float, int, str]] = []  # rank, deadline, order, host
        self._spaced: list[tuple[float, str]] = []  # (next start, host): spacing not over
        # each host's place in those heaps (an entry that differs is stale: skipped)
        self._in_ready: dict[str, tuple[int, float, int, str]] = {}
        self._in_spaced: dict[str, float] = {}
        self._busy: Counter[str] = Counter()  # host -> polls in flight
        self._next_start: dict[str, float] = {}  # host -> earliest next start
        self._running: set[str] = set()  # polls in flight, until done()
        self._holding: set[str] = set()  # ... of which fetching: they hold a host slot
        self._counter = itertools.count()

    def __len__(self) -> int:
        """Sources scheduled or waiting for their host (not those in flight)."""
        return len(self._due)

    def schedule(
        self, name: str, host: str, at: float, slack: float = 0.0, at_risk: bool = False
    ) -> None:
        """Due at ``at``, its deadline ``slack`` seconds later, ``at_risk`` when a late
        poll loses items (a new time replaces the old one; in flight: ValueError)."""
        if name in self._running:
            raise ValueError(f"{name} is in flight: schedule it after done()")
        if self._due.get(name) == at:
            return
        self._due[name] = at
        self._host[name] = host
        deadline = at + max(0.0, slack)
        rank = AT_RISK if at_risk else OTHERS
        heapq.heappush(self._heap, _Entry(at, next(self._counter), name, deadline, rank))

    def unschedule(self, name: str) -> None:
        self._due.pop(name, None)  # its heap entry or line place is skipped when met

    def due_at(self, name: str) -> float | None:
        return self._due.get(name)

    def take(self, now: float) -> list[tuple[str, float]]:
        """The sources that start now, with their due times; each is now in flight."""
        self._move_due(now)
        self._open_spaced(now)
        started: list[tuple[str, float]] = []
        while self.in_flight < self.concurrency and self._ready:
            key = heapq.heappop(self._ready)
            host = key[3]
            if self._in_ready.get(host) != key:
                continue  # offered again since, at another place
            del self._in_ready[host]
            head = self._head(host)
            if head is None or self._busy[host] >= self.per_host:
                continue  # nothing left, or full: release() offers it again
            if (head[0], head[1], head[3], host) != key or self._next_start.get(host, 0.0) > now:
                self._offer(host, now)  # its line changed, or its spacing is not over
                continue
            heapq.heappop(self._lines[host])
            started.append((head[4], head[2]))
            self._start(head[4], host, now)
            self._offer(host, now)
        return started

    def release(self, name: str) -> None:
        """``name``'s fetch ended: its host's slot goes to the next source of that host
        (its poll, still parsing and writing, keeps its place in ``concurrency``, so
        that a parsing backlog slows fetching down instead of filling memory)."""
        if name not in self._holding:
            return
        self._holding.discard(name)
        host = self._host[name]
        self._busy[host] -= 1
        if self._busy[host] <= 0:
            del self._busy[host]
        self._offer(host, None)

    def done(self, name: str) -> None:
        """``name``'s poll ended; schedule it again with :meth:`schedule`."""
        if name not in self._running:
            return
        self.release(name)
        self._running.discard(name)
        self.in_flight -= 1

    def next_wakeup(self) -> float | None:
        """When :meth:`take` may start something next without a :meth:`done`."""
        times = []
        while self._heap and self._due.get(self._heap[0].name) != self._heap[0].at:
            heapq.heappop(self._heap)  # stale: rescheduled or unscheduled
        if self._heap:
            times.append(self._heap[0].at)
        if self.in_flight < self.concurrency:
            host = self._first_open(self._ready, self._in_ready, lambda key: (key[3], key))
            if host is not None:
                times.append(self._next_start.get(host, 0.0))
            host = self._first_open(self._spaced, self._in_spaced, lambda at: (at[1], at[0]))
            if host is not None:
                times.append(self._in_spaced[host])
        return min(times) if times else None

    # -- the steps ---------------------------------------------------------------------

    def _move_due(self, now: float) -> None:
        """Due sources leave the heap for their host's line, ordered by deadline."""
        heap = self._heap
        while heap and heap[0].at <= now:
            entry = heapq.heappop(heap)
            if self._due.get(entry.name) != entry.at:
                continue  # stale
            host = self._host[entry.name]
            line = self._lines.setdefault(host, [])
            waiting = (entry.rank, entry.deadline, entry.at, entry.n, entry.name)
            heapq.heappush(line, waiting)
            if line[0] is waiting:  # a new head: the host's place among the others
                self._offer(host, now)

    # Hosts that may start a poll are offered, by their line's head (at risk, then the
    # earliest deadline), in ``_ready``, or in ``_spaced`` until their spacing ends.
    # Both heaps are lazy: a host's place is kept beside them (``_in_ready``,
    # ``_in_spaced``), and an entry that is no longer it is skipped when it comes up;
    # handing out a poll costs a few heap steps at 50,000 hosts, not a sort of them all.

    def _offer(self, host: str, now: float | None) -> None:
        """Put ``host`` where :meth:`take` finds it, if it has a due source and a slot
        (``now`` None: its spacing is checked when it comes up)."""
        head = self._head(host)
        if head is None or self._busy[host] >= self.per_host:
            return
        at = self._next_start.get(host, 0.0)
        if now is not None and at > now:
            if self._in_spaced.get(host) != at:
                self._in_spaced[host] = at
                heapq.heappush(self._spaced, (at, host))
            return
        key = (head[0], head[1], head[3], host)
        if self._in_ready.get(host) != key:
            self._in_ready[host] = key
            heapq.heappush(self._ready, key)

    def _open_spaced(self, now: float) -> None:
        """Hosts whose spacing has ended are offered."""
        spaced = self._spaced
        while spaced and spaced[0][0] <= now:
            at, host = heapq.heappop(spaced)
            if self._in_spaced.get(host) == at:
                del self._in_spaced[host]
                self._offer(host, now)

    def _head(self, host: str) -> Waiting | None:
        """The next source of ``host``'s line (stale places dropped), None: none."""
        line = self._lines.get(host)
        while line and self._due.get(line[0][4]) != line[0][2]:
            heapq.heappop(line)  # unscheduled or rescheduled meanwhile
        if not line:
            self._lines.pop(host, None)
            return None
        return line[0]

    def _first_open(
        self, heap: list[Any], places: dict[str, Any], read: Callable[[Any], tuple[str, Any]]
    ) -> str | None:
        """The host at the top of ``heap`` (``_ready`` or ``_spaced``) that may start
        a poll, the entries above it dropped: superseded ones, and those of hosts
        emptied or full since, whose place is given up with them (a release or a new
        due source offers them again)."""
        while heap:
            host, place = read(heap[0])  # the entry's host, and the place it says
            if places.get(host) != place:
                heapq.heappop(heap)
            elif self._open(host):
                return host
            else:
                heapq.heappop(heap)
                del places[host]
        return None

    def _open(self, host: str) -> bool:
        return self._head(host) is not None and self._busy[host] < self.per_host

    def _start(self, name: str, host: str, now: float) -> None:
        del self._due[name]
        self._running.add(name)
        self._holding.add(name)
        self.in_flight += 1
        self._busy[host] += 1
        self._next_start[host] = now + self.spacing
