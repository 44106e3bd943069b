"""Joins, semijoins and differences over publication time, with an allowed lateness
(seed 001).

A join (of any kind), a semijoin or a difference whose sides are sliding time windows
(or no window) of filters, maps and unions over items read in publication time takes
its input in arrival order: the events of one spool append (one ingest time)
together, appends one after the other, both sides merged.  The rules:

* **Clock.**  The latest time seen on either side: an item's time (its publication
  time, or its ingest time) or a heartbeat's.
* **Too late.**  An item whose time is more than the lateness L before the clock as
  it stood before its arrival is dropped and counted (``late:STREAM``); items of one
  arrival never make each other late.
* **Pairs.**  Items ``a`` (left) and ``b`` (right) pair as in ingest time: ``b`` is in
  the right window at ``a``'s time, or (a join) ``a`` in the left window at ``b``'s
  time (:func:`pairs_at`), and ``on`` holds.  Whatever order they arrive in, a pair is
  found when the second of the two arrives: a join publishes it then, at the later of
  the two times (the larger seq); a semijoin publishes its left item at its first
  partner, once.  Pairs only grow as items come, so these results are final when
  published: optimistic and on-close are one here, and nothing is taken back.
* **No partner.**  An item without one (a left join's, a full join's or a product's
  items, a difference's left items) is published once no item still on time could
  be its partner (:func:`decided`: the clock is more than L past it), at its time:
  the on-close answer.  With ``report: optimistic`` (seed 000) it is published at
  its arrival instead, if no partner came before it, and taken back when its first
  partner comes (:meth:`LateJoin.provisional`): the left item of a join with the
  built-in composition is replaced in place by its pair (same guid); any other by a
  withdrawal notice with its guid (:func:`roses_app.xmlfn.stamp.withdrawn_item`).
* **Kept.**  An item stays while an item of the other side that is not too late could
  still pair with it: until the clock passes its time plus its window's reach plus L.
* **Keys.**  When ``on`` is ``$i1/PATH = $i2/PATH2 [and ...]``
  (:mod:`roses_app.algebra.plan.equikeys`) it holds only for items sharing a key value, so
  an arriving item meets only the kept items of the other side with one of its keys
  (a hash join, as over ingest time): the other pairs ``on`` would refuse are never
  tested.  The keys of each item are kept with it.

The reference evaluator filters the too-late items with :func:`on_time` and pairs the
rest as in ingest time; on Spark :func:`roses_app.spark.lateunits.late_join_batch` runs
:class:`LateJoin` micro-batch after micro-batch: the differential tests compare them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from roses_app.algebra.plan.equikeys import equi_key
from roses_app.algebra.plan.operators import Diff, Join, Node, Semijoin, TimeWindow
from roses_app.algebra.time.panes import Arrival, digest
from roses_app.algebra.time.windows import call_bounds

LEFT, RIGHT = "l", "r"  # an arrival's side, in Arrival.key


def meets(spec: TimeWindow | None, t: int, other: int) -> bool:
    """Whether an item at ``other`` is in the window ``spec`` at ``t``."""
    found = call_bounds(spec, t)
    return found is not None and found[0] <= other <= found[1]


def pairs_at(
    left: TimeWindow | None, right: TimeWindow | None, ta: int, tb: int, both: bool
) -> bool:
    """Whether a left item at ``ta`` and a right one at ``tb`` meet: ``tb`` in the right
    window at ``ta``, or (``both``: a join) ``ta`` in the left window at ``tb``."""
    return meets(right, ta, tb) or (both and meets(left, tb, ta))


def decided(t: int, clock: int | None, lateness: int) -> bool:
    """Whether an item at ``t`` can get no new partner that counts for it (a left
    item's in its right window, a right item's in its left window: windows look back,
    so at most at ``t``): every item still on time is after it."""
    return clock is not None and t < clock - lateness


def join_keyed(node: Join | Semijoin | Diff) -> bool:
    """Whether ``node``'s ``on`` holds only for items sharing a key (a hash join)."""
    return equi_key(node.on) is not None


def join_kind(node: Node) -> str:
    """A join's kind, or ``semijoin``, ``diff``: the :class:`LateJoin` of ``node``."""
    return node.kind if isinstance(node, Join) else type(node).__name__.lower()


ALONE = {"left": (LEFT,), "full": (LEFT, RIGHT), "product": (LEFT, RIGHT), "diff": (LEFT,)}


def alone_sides(kind: str) -> tuple[str, ...]:
    """The sides whose items a join of ``kind`` (:func:`join_kind`) publishes without
    a partner."""
    return ALONE.get(kind, ())


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


def timely_heartbeats(clock: int | None, group: Sequence[Arrival], lateness: int) -> list[Arrival]:
    """The heartbeats of one arrival not more than the lateness before ``clock`` (as it
    stood before it): the times a released run sees come (one further behind would
    say that a time already released has come)."""
    return [a for a in group if a.item is None and (clock is None or a.time >= clock - lateness)]


# The seq of a heartbeat row that tells an operator's clock after a micro-batch (on
# Spark, to a released run over its results): not a time that came.
CLOCK_SEQ = -1


@dataclass
class OnTime:
    """Arrivals taken in order: the items on time, those too late, the clock after
    the last, and the heartbeats on time."""

    kept: list[Arrival] = field(default_factory=list)
    late: list[Arrival] = field(default_factory=list)
    clock: int | None = None
    heartbeats: list[Arrival] = field(default_factory=list)


def on_time(groups: Iterable[Sequence[Arrival]], lateness: int) -> OnTime:
    """The items of arrivals ``groups`` (in order) on time, those too late, the clock
    after the last, and the heartbeats on time."""
    out = OnTime()
    for group in groups:
        out.heartbeats += timely_heartbeats(out.clock, group, lateness)
        on, late, out.clock = split_late(out.clock, group, lateness)
        out.kept += on
        out.late += late
    return out


Ident = tuple[str, int, int, str]  # side, time, seq, item digest: one item of one side


@dataclass
class Planned:
    """What a batch of arrivals gives: the pairs to test (left, right), for each whether
    its left item is the one that arrived last (it met the right one, kept), the
    items on time in the order they were taken, the items too late, and the
    heartbeats on time."""

    pairs: list[tuple[Arrival, Arrival]] = field(default_factory=list)
    left_last: list[bool] = field(default_factory=list)
    arrived: list[Arrival] = field(default_factory=list)
    late: list[Arrival] = field(default_factory=list)
    heartbeats: list[Arrival] = field(default_factory=list)  # on time (timely_heartbeats)


@dataclass
class LateJoin:
    """The state of one join, semijoin or difference (``kind``: a join's kind,
    ``semijoin`` or ``diff``): the clock, the items kept per side, those that found a
    partner that counts for them, and those whose lack of one is decided."""

    left: TimeWindow | None
    right: TimeWindow | None
    lateness: int
    kind: str
    optimistic: bool = False
    clock: int | None = None
    kept: dict[str, list[Arrival]] = field(default_factory=lambda: {LEFT: [], RIGHT: []})
    matched: set[Ident] = field(default_factory=set)
    settled: set[Ident] = field(default_factory=set)
    shown: set[Ident] = field(default_factory=set)  # published alone before being decided
    keyed: bool = False  # ``on`` holds only for items sharing a key (see the module doc)
    # with ``keyed``: each kept item's keys, in the order of ``kept``
    keys: dict[str, list[tuple[str, ...]]] = field(default_factory=lambda: {LEFT: [], RIGHT: []})
    _index: dict[str, dict[str, list[int]]] = field(default_factory=dict, repr=False, compare=False)
    _digests: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def _ident(self, arrival: Arrival) -> Ident:
        """The item's name in the state's sets (its text's digest, made once per
        micro-batch: an operator names its items often)."""
        item = arrival.item or ""
        found = self._digests.get(item)
        if found is None:
            found = self._digests[item] = digest(item)
        return (arrival.key or LEFT, arrival.time, arrival.seq, found)

    @property
    def both(self) -> bool:
        """A join: pairs are found from both sides."""
        return self.kind not in ("semijoin", "diff")

    def advance(
        self,
        groups: Iterable[Sequence[Arrival]],
        keys_of: Callable[[Arrival], Sequence[str]] | None = None,
    ) -> Planned:
        """Take arrivals in order: each item on time meets the other side's kept items
        (with ``keyed``, those sharing one of its keys, which ``keys_of`` gives; a
        semijoin's or difference's left items that have a partner already are not
        tested again)."""
        assert keys_of is not None or not self.keyed, "a keyed join needs its items' keys"
        out = Planned()
        for group in groups:
            out.heartbeats += timely_heartbeats(self.clock, group, self.lateness)
            on, late, self.clock = split_late(self.clock, group, self.lateness)
            out.late += late
            for arrival in on:
                keys = tuple(keys_of(arrival)) if keys_of is not None and self.keyed else ()
                met = self._meet(arrival, keys)
                out.pairs += met
                out.left_last += [arrival.key != RIGHT] * len(met)
                out.arrived.append(arrival)
                self._keep(arrival, keys)
        return out

    def _keep(self, arrival: Arrival, keys: tuple[str, ...]) -> None:
        side = arrival.key or LEFT
        # the index before the item is added: built after, it would hold the item
        # already, and the item would meet every later partner twice
        index = self._side_index(side) if self.keyed else {}
        self.kept[side].append(arrival)
        if self.keyed:
            self.keys[side].append(keys)
            for key in dict.fromkeys(keys):  # a key the item has twice: indexed once
                index.setdefault(key, []).append(len(self.kept[side]) - 1)

    def _side_index(self, side: str) -> dict[str, list[int]]:
        """Key -> the positions in ``kept[side]`` of the items with it."""
        index = self._index.get(side)
        if index is None:
            index = self._index[side] = {}
            for n, keys in enumerate(self.keys[side]):
                for key in dict.fromkeys(keys):
                    index.setdefault(key, []).append(n)
        return index

    def _others(self, side: str, keys: tuple[str, ...]) -> list[Arrival]:
        """The kept items of ``side`` an item with ``keys`` may pair with, in the order
        they came: all, or (keyed) those sharing a key."""
        kept = self.kept[side]
        if not self.keyed:
            return kept
        index = self._side_index(side)
        if len(keys) == 1:  # (most items: one category, one link) already in order
            return [kept[n] for n in index.get(keys[0], ())]
        return [kept[n] for n in sorted({n for key in keys for n in index.get(key, ())})]

    def _meet(self, arrival: Arrival, keys: tuple[str, ...]) -> list[tuple[Arrival, Arrival]]:
        once = not self.both  # one partner tells all
        # the times a partner may have (an item is in a window at t up to its reach
        # before t): a cheap test first, as a large micro-batch keeps many items
        t, left, right = arrival.time, reach(self.left), reach(self.right)
        if arrival.key == LEFT:
            if once and self._ident(arrival) in self.matched:
                return []
            low, high = t - right, t + (left if self.both else 0)
            return [
                (arrival, other)
                for other in self._others(RIGHT, keys)
                if low <= other.time <= high
                and pairs_at(self.left, self.right, t, other.time, self.both)
            ]
        low, high = t - (left if self.both else 0), t + right
        return [
            (other, arrival)
            for other in self._others(LEFT, keys)
            if low <= other.time <= high
            and not (once and self._ident(other) in self.matched)
            and pairs_at(self.left, self.right, other.time, t, self.both)
        ]

    def found(self, pairs: Iterable[tuple[Arrival, Arrival]]) -> list[Arrival]:
        """Record the pairs ``on`` holds for: a left item has a partner when the right
        one is in its right window, a right item (a full join) when the left one is in
        its left window.  The left items that had none before, in order."""
        first: dict[Ident, Arrival] = {}
        for a, b in pairs:
            if meets(self.right, a.time, b.time) and self._ident(a) not in self.matched:
                self.matched.add(self._ident(a))
                first[self._ident(a)] = a
            if self.kind in ("full", "product") and meets(self.left, b.time, a.time):
                self.matched.add(self._ident(b))
        return list(first.values())

    def partners(
        self, pairs: Sequence[tuple[Arrival, Arrival]], left_last: Sequence[bool]
    ) -> list[tuple[Arrival, Arrival, bool]]:
        """(item, partner, whether the item arrived last) for each matched pair and
        each of its items that it counts for (as :meth:`found`)."""
        out = []
        for (a, b), last in zip(pairs, left_last, strict=True):
            if meets(self.right, a.time, b.time):
                out.append((a, b, last))
            if RIGHT in alone_sides(self.kind) and meets(self.left, b.time, a.time):
                out.append((b, a, not last))
        return out

    def provisional(
        self, arrived: Sequence[Arrival], partners: Sequence[tuple[Arrival, Arrival, bool]]
    ) -> tuple[list[Arrival], list[tuple[Arrival, Arrival]]]:
        """Optimistic reporting, before :meth:`found` records this batch's pairs: the
        items of ``arrived`` (this batch's, in order) that no partner came before,
        published now; and (item, partner) for each item published so that now has its
        first partner (``partners``: this batch's, in the order they were found)."""
        sides = alone_sides(self.kind)
        preceded = {self._ident(item) for item, _, last in partners if last}
        shown = [
            a
            for a in arrived
            if (a.key or LEFT) in sides
            and self._ident(a) not in preceded
            and self._ident(a) not in self.shown
        ]
        self.shown.update(map(self._ident, shown))
        taken: dict[Ident, tuple[Arrival, Arrival]] = {}
        for item, partner, _ in partners:
            key = self._ident(item)
            if key in self.shown and key not in self.matched and key not in taken:
                taken[key] = (item, partner)
        return shown, list(taken.values())

    def settle(self) -> list[Arrival]:
        """The items that now surely have no partner (:func:`decided`) and that the
        operator publishes then: a left or full join's and a difference's left items,
        a full join's right ones.  Then the items no new one can meet are let go."""
        out: list[Arrival] = []
        for side in alone_sides(self.kind):
            for arrival in self.kept[side]:
                key = self._ident(arrival)
                if key in self.settled or not decided(arrival.time, self.clock, self.lateness):
                    continue
                self.settled.add(key)
                if key not in self.matched and key not in self.shown:
                    out.append(arrival)
        self._evict()
        return out

    def _evict(self) -> None:
        if self.clock is None:
            return
        horizon = self.clock - self.lateness
        for side, spec in ((LEFT, self.left), (RIGHT, self.right)):
            width = reach(spec)
            stay = [a.time + width >= horizon for a in self.kept[side]]
            self.kept[side] = [a for a, ok in zip(self.kept[side], stay, strict=True) if ok]
            if self.keyed:
                keys = self.keys[side]
                self.keys[side] = [k for k, ok in zip(keys, stay, strict=True) if ok]
        self._index = {}
        alive = {self._ident(a) for side in (LEFT, RIGHT) for a in self.kept[side]}
        self.matched &= alive
        self.settled &= alive
        self.shown &= alive

    def dump(self) -> dict[str, Any]:
        data = {
            "clock": self.clock,
            "kept": {
                side: [[a.time, a.seq, a.item] for a in kept] for side, kept in self.kept.items()
            },
            "matched": sorted(self.matched),
            "settled": sorted(self.settled),
            "shown": sorted(self.shown),
        }
        if self.keyed:
            data["keys"] = {side: [list(k) for k in keys] for side, keys in self.keys.items()}
        return data

    @classmethod
    def load(
        cls,
        left: TimeWindow | None,
        right: TimeWindow | None,
        lateness: int,
        kind: str,
        saved: dict[str, Any] | None,
        optimistic: bool = False,
        keyed: bool = False,
    ) -> LateJoin:
        state = cls(left, right, lateness, kind, optimistic, keyed=keyed)
        if saved is not None:
            if keyed:
                state.keys = {side: list(map(tuple, k)) for side, k in saved["keys"].items()}
            state.clock = saved["clock"]
            state.kept = {
                side: [Arrival(t, s, item, side) for t, s, item in rows]
                for side, rows in saved["kept"].items()
            }
            state.matched = {tuple(k) for k in saved["matched"]}
            state.settled = {tuple(k) for k in saved["settled"]}
            state.shown = {tuple(k) for k in saved.get("shown", ())}  # older states: none
        return state
