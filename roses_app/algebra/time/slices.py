"""A periodic or session window's items in time slices, once per key (Scotty's
slicing, seed 001).

An aggregate or group over a periodic time window or a session window with an allowed
lateness keeps the items of its windows until they are past the lateness
(:mod:`roses_app.algebra.time.lateness`).  A window holds exactly the items of its key
within its bounds (an item enters every window of its time still kept when it
arrives; sessions of a key never overlap), so each item is kept once, in the slice of
its time: ``time // width``, ``width`` the window's period (a session's gap), at most
an hour.  A window's items are those of the slices it spans, within its bounds.

A slice is kept in *chunks*: the items one micro-batch added to it are a new chunk,
so that a micro-batch writes what it added (a late item too), not the slices it
added to; once a slice has ``MAX_CHUNKS`` chunks they are merged into one.  The
chunks live in a :class:`SliceMap`: a dict for the reference evaluator, the
operator's ``MapState`` on Spark (:mod:`roses_app.spark.late`); a micro-batch reads
only the slices of the windows it computes.

An item is added once: the copies of one event are made one in its arrival group
(:func:`roses_app.algebra.time.lateness.arrival_groups`), and an event arrives once.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable
from dataclasses import dataclass, field
from heapq import merge
from typing import Any, NamedTuple, Protocol

HOUR = 3_600_000_000  # µs
MAX_CHUNKS = 16
ChunkId = tuple[str | None, int, int]  # γ's key (None: α), slice number, chunk number


class Entry(NamedTuple):
    """An item in a window: its time, seq and text (ordered so)."""

    ts: int
    seq: int
    item: str


class SliceMap(Protocol):
    """Where the chunks are kept: each a list of entries in (time, seq) order."""

    def get(self, chunk: ChunkId) -> list[Entry] | None: ...

    def put(self, chunk: ChunkId, entries: list[Entry]) -> None: ...

    def remove(self, chunk: ChunkId) -> None: ...


class MemorySlices(dict[ChunkId, list[Entry]]):
    """Chunks in memory (the reference evaluator's, and tests')."""

    def put(self, chunk: ChunkId, entries: list[Entry]) -> None:
        self[chunk] = entries

    def remove(self, chunk: ChunkId) -> None:
        self.pop(chunk, None)


def slice_width(span: int) -> int:
    """The time a slice spans: the window's period or gap, at most an hour."""
    return max(1, min(span, HOUR))


@dataclass
class Slices:
    """The items of one operator, per key, in slices of ``width``; ``held``: the
    chunks of each slice of each key (saved in the operator's own state)."""

    width: int
    store: SliceMap = field(default_factory=MemorySlices)
    held: dict[str | None, dict[int, list[int]]] = field(default_factory=dict)
    # per key, per slice: what was added since the last flush (the reference
    # evaluator never flushes: its items stay here)
    _added: dict[str | None, dict[int, list[Entry]]] = field(default_factory=dict)
    _read: dict[tuple[str | None, int], list[Entry]] = field(default_factory=dict)
    _gone: list[ChunkId] = field(default_factory=list)

    def add(self, key: str | None, entry: Entry) -> None:
        """Keep ``entry`` under ``key`` (see the module doc: once)."""
        slices = self._added.setdefault(key, {})
        insort(slices.setdefault(entry.ts // self.width, []), entry)

    def _slice(self, key: str | None, n: int) -> list[Entry]:
        """The entries of a slice, in order: its chunks and what was added since."""
        found = self._read.get((key, n))
        if found is None:
            chunks = [self.store.get((key, n, c)) or [] for c in self.held.get(key, {}).get(n, ())]
            found = self._read[key, n] = list(merge(*chunks))
        added = self._added.get(key, {}).get(n)
        return list(merge(found, added)) if added else found

    def between(self, key: str | None, low: int, high: int) -> list[Entry]:
        """The entries of ``key`` whose time is in [low, high], in order."""
        out: list[Entry] = []
        first, last = low // self.width, high // self.width
        numbers = {*self.held.get(key, {}), *self._added.get(key, {})}
        for n in sorted(numbers):
            if first <= n <= last:
                entries = self._slice(key, n)
                start = bisect_left(entries, low, key=_time)
                out += entries[start : bisect_right(entries, high, key=_time)]
        return out

    def forget(self, key: str | None, before: int | None) -> None:
        """Drop the slices of ``key`` wholly before ``before`` (None: all of them)."""
        slices = self.held.get(key, {})
        for n in [n for n in slices if before is None or (n + 1) * self.width <= before]:
            self._gone += [(key, n, c) for c in slices.pop(n)]
            self._read.pop((key, n), None)
        added = self._added.get(key, {})
        for n in [n for n in added if before is None or (n + 1) * self.width <= before]:
            del added[n]
        if not slices:
            self.held.pop(key, None)
        if not added:
            self._added.pop(key, None)

    def flush(self) -> None:
        """Write what was added as new chunks (merging a slice's chunks once it has
        ``MAX_CHUNKS``) and remove the chunks of the slices forgotten."""
        for chunk in self._gone:
            self.store.remove(chunk)
        news = [((key, n), found) for key, mine in self._added.items() for n, found in mine.items()]
        for (key, n), added in sorted(news, key=_order):
            chunks = self.held.setdefault(key, {}).setdefault(n, [])
            if len(chunks) + 1 < MAX_CHUNKS:
                number = chunks[-1] + 1 if chunks else 0
                self.store.put((key, n, number), added)
                chunks.append(number)
                continue
            merged = self._slice(key, n)
            for c in chunks[1:]:
                self.store.remove((key, n, c))
            self.store.put((key, n, chunks[0]), merged)
            del chunks[1:]
        self._added.clear()
        self._read.clear()
        self._gone.clear()

    def dump(self) -> list[list[Any]]:
        return [[key, sorted(slices.items())] for key, slices in self.held.items()]

    @classmethod
    def load(cls, width: int, store: SliceMap, data: Iterable[list[Any]]) -> Slices:
        held = {key: {n: list(chunks) for n, chunks in slices} for key, slices in data}
        return cls(width, store, held)


def _time(entry: Entry) -> int:
    return entry.ts


def _order(item: tuple[tuple[str | None, int], list[Entry]]) -> tuple[str, int]:
    (key, n), _ = item
    return key or "", n
