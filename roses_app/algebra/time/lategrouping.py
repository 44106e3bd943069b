"""FlameStream's windowed grouping over publication time (seed 000), with an allowed
lateness (seed 001).

A windowed grouping (``grouping:``) of filters, maps and unions over items read in
publication time takes its input in arrival order, one spool append after the other,
as the joins of :mod:`roses_app.algebra.time.latejoin` do.  The rules:

* **Buckets.**  Each item goes into its key's bucket at the position its time gives
  (then its seq): the seed's "position defined by its meta-information".  Its
  result is the reducer over the last ``size`` items of the bucket up to it (itself
  last), published at its time.  In order, this is the grouping over ingest time.
* **Clock, too late.**  As for joins: the latest time seen; an item more than the
  lateness L before the clock as it stood before its arrival is dropped and counted
  (:func:`~roses_app.algebra.time.latejoin.split_late`).
* **On close** (the default).  An item's result is published once no item still on
  time could come before it in its bucket (:func:`~roses_app.algebra.time.latejoin.decided`):
  it is final then, and published once.
* **Optimistic** (``report: optimistic``, seed 000).  An item's result is published
  at its arrival.  An out-of-order item changes the results of the ``size`` − 1 items
  after it in its bucket: those are computed again and, if their result changed,
  published again in place (same guid, a revision number); a result computed again
  but unchanged is counted, not published.
* **Identity.**  A result's guid names the stream, the key, its item's seq and a
  digest of its item (:func:`roses_app.xmlfn.stamp.grouping_guid`: two items one
  event gives through a union of two paths are two results).  It is published at its item's time
  with the largest seq of the items it reduces, so that a revision is newer than the
  result it replaces.
* **Kept.**  Per bucket, the items an item still on time could come before, and the
  ``size`` − 1 items before those (the predecessors such an item reduces with).

The reference evaluator computes the same from the whole event list
(:mod:`roses_app.algebra.reference.grouping`); on Spark the late graph's operator
(:class:`roses_app.spark.lateunits.GroupingUnit`) runs :class:`LateGrouping`
micro-batch after micro-batch: the differential tests compare them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from roses_app.algebra.time.latejoin import decided, split_late, timely_heartbeats
from roses_app.algebra.time.panes import Arrival, digest


@dataclass(eq=False)
class Bucketed:
    """An item in its key's bucket, and what became of its result."""

    time: int
    seq: int
    item: str
    shown: str | None = None  # the digest of its result as last published
    revisions: int = 0  # how many times its result was published
    computed: bool = False  # on close: its (final) result was computed


@dataclass(frozen=True)
class Computation:
    """A result to compute: the reducer over ``items`` under ``key``."""

    key: str
    time: int  # its item's time: the result's
    seq: int  # its item's seq: the result's identity
    at: int  # the largest seq of ``items``: the seq the result is published with
    items: tuple[str, ...]


@dataclass(frozen=True)
class Emission:
    """A result to publish, replacing any earlier one of the same item: ``revision``
    counts the results published before it (0: the first)."""

    key: str
    time: int
    seq: int
    at: int
    item: str
    revision: int
    anchor: str  # a digest of its item (two items of one event: two results)


@dataclass
class Planned:
    computations: list[Computation]
    late: list[Arrival]  # items later than the lateness
    # the bucket entry of each computation (settled in place)
    entries: list[Bucketed] = field(default_factory=list)
    heartbeats: list[Arrival] = field(default_factory=list)  # on time (timely_heartbeats)


@dataclass
class Settled:
    emissions: list[Emission]
    unchanged: int  # results computed again whose result had not changed


def emission(c: Computation, result: str, revision: int) -> Emission:
    """What publishes ``result`` of ``c``: its item (the last it reduces) names it
    along with its key and seq, since two paths of a union can give one event two
    items of one key."""
    return Emission(c.key, c.time, c.seq, c.at, result, revision, digest(c.items[-1])[:12])


class Held(Protocol):
    """An item in a bucket (an entry here, an arrival in the reference evaluator)."""

    @property
    def item(self) -> str | None: ...

    @property
    def seq(self) -> int: ...


def reduced(window: Sequence[Held]) -> tuple[tuple[str, ...], int]:
    """The items a result reduces, ``window`` (its item last), and the seq it is
    published with: the largest among them, so that a revision is newer."""
    return tuple(e.item or "" for e in window), max(e.seq for e in window)


def tuple_of(bucket: Sequence[Held], index: int, size: int) -> tuple[tuple[str, ...], int]:
    """:func:`reduced` of the last ``size`` items of ``bucket`` up to ``index``."""
    return reduced(bucket[max(0, index - size + 1) : index + 1])


def _order(entry: Bucketed) -> tuple[int, int]:
    return entry.time, entry.seq


def _index(bucket: list[Bucketed], entry: Bucketed) -> int:
    """Where ``entry`` is in ``bucket`` (the same object: two entries may tie)."""
    index = bisect_left(bucket, _order(entry), key=_order)
    while bucket[index] is not entry:
        index += 1
    return index


class LateGrouping:
    """The buckets and the clock of one windowed grouping over publication time."""

    def __init__(
        self,
        size: int,
        lateness: int,
        optimistic: bool,
        clock: int | None = None,
        buckets: dict[str, list[Bucketed]] | None = None,
    ) -> None:
        self.size = size
        self.lateness = lateness
        self.optimistic = optimistic
        self.clock = clock
        self.buckets: dict[str, list[Bucketed]] = buckets or {}

    def advance(self, groups: Iterable[Sequence[Arrival]]) -> Planned:
        """Arrival groups, in order: the results to compute (then :meth:`settle`)."""
        planned = Planned([], [])
        for group in groups:
            planned.heartbeats += timely_heartbeats(self.clock, group, self.lateness)
            on, late, self.clock = split_late(self.clock, group, self.lateness)
            planned.late += late
            marked: dict[str, set[Bucketed]] = {}
            for arrival in on:
                if arrival.key is not None and arrival.item is not None:
                    changed = self._insert(arrival.key, arrival)
                    marked.setdefault(arrival.key, set()).update(changed)
            # optimistically only the buckets an arrival changed; on close any bucket
            # may hold an item the clock has just decided
            for key in marked if self.optimistic else list(self.buckets):
                bucket = self.buckets[key]
                for index in self._due(bucket, marked.get(key, set())):
                    self._plan(planned, key, bucket, index)
            self._purge()
        return planned

    def _insert(self, key: str, arrival: Arrival) -> list[Bucketed]:
        """Put the item in its bucket: the entries whose result it changes (itself,
        and optimistically the next ``size`` − 1)."""
        bucket = self.buckets.setdefault(key, [])
        entry = Bucketed(arrival.time, arrival.seq, arrival.item or "")
        index = bisect_right(bucket, _order(entry), key=_order)
        bucket.insert(index, entry)
        return bucket[index : index + self.size] if self.optimistic else []

    def _due(self, bucket: list[Bucketed], marked: set[Bucketed]) -> list[int]:
        """The indexes of the entries of ``bucket`` whose result to compute now:
        optimistically those an arrival changed; on close those decided now."""
        if self.optimistic:
            return sorted(_index(bucket, entry) for entry in marked)
        assert self.clock is not None  # an arrival set it
        end = bisect_left(bucket, self.clock - self.lateness, key=lambda e: e.time)
        return [
            i
            for i in range(end)
            if not bucket[i].computed and decided(bucket[i].time, self.clock, self.lateness)
        ]

    def _plan(self, planned: Planned, key: str, bucket: list[Bucketed], index: int) -> None:
        entry = bucket[index]
        entry.computed = True
        items, at = tuple_of(bucket, index, self.size)
        planned.computations.append(Computation(key, entry.time, entry.seq, at, items))
        planned.entries.append(entry)

    def _purge(self) -> None:
        """Forget what no item still on time can change or reduce with."""
        if self.clock is None:
            return
        limit = self.clock - self.lateness  # the earliest time still on time
        for key in list(self.buckets):
            bucket = self.buckets[key]
            start = bisect_left(bucket, limit, key=lambda e: e.time) - (self.size - 1)
            if start > 0:
                del bucket[:start]
            if not bucket:
                del self.buckets[key]

    def settle(self, planned: Planned, results: Sequence[str | None]) -> Settled:
        """The reducer's ``results`` of ``planned``: what to publish (a result that
        changed), and how many were computed again unchanged.  None (λ, an error) is
        not published."""
        settled = Settled([], 0)
        for c, entry, result in zip(planned.computations, planned.entries, results, strict=True):
            if result is None:
                continue
            found = digest(result)
            if found == entry.shown:
                settled.unchanged += 1
                continue
            settled.emissions.append(emission(c, result, entry.revisions))
            entry.shown, entry.revisions = found, entry.revisions + 1
        return settled

    def dump(self) -> dict[str, Any]:
        """The state as JSON values (the Spark operator keeps it between micro-batches)."""
        return {
            "clock": self.clock,
            "buckets": {
                key: [[e.time, e.seq, e.item, e.shown, e.revisions, e.computed] for e in bucket]
                for key, bucket in self.buckets.items()
            },
        }

    @classmethod
    def load(
        cls, size: int, lateness: int, optimistic: bool, saved: dict[str, Any] | None
    ) -> LateGrouping:
        if saved is None:
            return cls(size, lateness, optimistic)
        buckets = {
            key: [Bucketed(*values) for values in bucket]
            for key, bucket in saved["buckets"].items()
        }
        return cls(size, lateness, optimistic, saved["clock"], buckets)


__all__ = [
    "Bucketed",
    "Computation",
    "Emission",
    "Held",
    "LateGrouping",
    "Planned",
    "Settled",
    "digest",
    "reduced",
    "tuple_of",
]
