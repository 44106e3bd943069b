"""The reference evaluator's windowed grouping over publication time (seed 000 with
seed 001's lateness): what :class:`roses_app.algebra.time.lategrouping.LateGrouping`
publishes arrival after arrival, computed from the whole event list.

The items on time are found as for joins (:func:`~roses_app.algebra.time.latejoin.on_time`).
On close, an item's result is the reducer over the last ``size`` items up to it in
its key's final bucket, published if the last clock decided it.  Optimistically, an
item's result is computed at its arrival and again after each later arrival that
changed the items it reduces; each one that differs from the result published last
is published in its place.
"""

from __future__ import annotations

from collections.abc import Sequence

from roses_app.algebra.plan.operators import WindowedGrouping
from roses_app.algebra.reference.registry import (
    Context,
    RefEvent,
    heartbeats,
    items_only,
    ordered,
    run,
)
from roses_app.algebra.time.lategrouping import (
    Computation,
    Emission,
    digest,
    emission,
    reduced,
    tuple_of,
)
from roses_app.algebra.time.latejoin import decided, on_time
from roses_app.algebra.time.lateness import Arrival, arrival_groups


def late_grouping_events(node: WindowedGrouping, ctx: Context) -> list[RefEvent]:
    from roses_app.xmlfn import split_batch
    from roses_app.xmlfn.reduce import reduce_raw, stamped_results

    events = run(node.input, ctx)
    items = items_only(events)
    keys = split_batch(node.by, ctx.ns, [e.item for e in items])
    arrivals = [(ctx.arrival(e.seq), Arrival(e.ts, e.seq, None)) for e in heartbeats(events)]
    arrivals += [
        (ctx.arrival(e.seq), Arrival(e.ts, e.seq, e.item, key))
        for e, key in zip(items, keys, strict=True)
        if key is not None
    ]
    groups = arrival_groups(arrivals)
    taken = on_time(groups, node.lateness)
    kept, clock = taken.kept, taken.clock
    ctx.late[node] = [RefEvent(a.time, a.seq, a.item) for a in taken.late]
    ctx.settled[node] = (clock, [RefEvent(a.time, a.seq, None) for a in taken.heartbeats])
    rank = {a: n for n, group in enumerate(groups) for a in group}
    computations: list[Computation] = []
    by_key: dict[str, list[Arrival]] = {}
    for arrival in kept:
        assert arrival.key is not None
        by_key.setdefault(arrival.key, []).append(arrival)
    for key, arrived in by_key.items():
        if node.optimistic:
            computations += _as_they_come(key, arrived, rank, node.size, node.lateness)
        else:
            computations += _once_final(key, arrived, node.size, clock, node.lateness)
    raw = reduce_raw(node.reduce, ctx.ns, [(c.items, c.key) for c in computations])
    emissions, ctx.unchanged[node] = _published(computations, raw)
    stamped = stamped_results(emissions, node.stream, None)
    return ordered(RefEvent(e.time, e.at, item) for e, item in stamped)


def _once_final(
    key: str, arrived: list[Arrival], size: int, clock: int | None, lateness: int
) -> list[Computation]:
    """On close: each decided item's result over its key's final bucket."""
    bucket = sorted(arrived, key=lambda a: (a.time, a.seq))
    out = []
    for index, a in enumerate(bucket):
        if decided(a.time, clock, lateness):
            items, at = tuple_of(bucket, index, size)
            out.append(Computation(key, a.time, a.seq, at, items))
    return out


def _as_they_come(
    key: str, arrived: list[Arrival], rank: dict[Arrival, int], size: int, lateness: int
) -> list[Computation]:
    """Optimistically: each item's result after its arrival's group, and again after
    each later group whose items changed what it reduces, in that order.  An item
    that arrives after ``z`` and comes before it is on time, so at most ``lateness``
    before it: only those are looked for."""
    bucket = sorted(arrived, key=lambda a: (a.time, a.seq))
    out: list[Computation] = []
    for i, z in enumerate(bucket):
        later: set[int] = set()
        j = i - 1
        while j >= 0 and bucket[j].time >= z.time - lateness:
            if rank[bucket[j]] > rank[z]:
                later.add(rank[bucket[j]])
            j -= 1
        last: list[Arrival] | None = None
        for group in [rank[z], *sorted(later)]:
            window = _last_arrived(bucket, i, size, rank, group)
            if window != last:  # other items (equal texts or not): computed again
                items, at = reduced(window)
                out.append(Computation(key, z.time, z.seq, at, items))
                last = window
    return out


def _last_arrived(
    bucket: list[Arrival], index: int, size: int, rank: dict[Arrival, int], group: int
) -> list[Arrival]:
    """The last ``size`` items up to ``bucket[index]`` arrived by ``group``, in order."""
    window: list[Arrival] = []
    while index >= 0 and len(window) < size:
        if rank[bucket[index]] <= group:
            window.append(bucket[index])
        index -= 1
    return window[::-1]


def _published(
    computations: Sequence[Computation], results: Sequence[str | None]
) -> tuple[list[Emission], int]:
    """The results that differ from their item's last published one (each with its
    revision number), and how many were computed again unchanged."""
    # per item (key, seq, its text: two paths of a union may give one event two
    # items): the digest of its last published result, and how many were published
    shown: dict[tuple[str, int, str], tuple[str, int]] = {}
    emissions: list[Emission] = []
    unchanged = 0
    for c, result in zip(computations, results, strict=True):
        if result is None:
            continue
        found = digest(result)
        mine = (c.key, c.seq, c.items[-1])
        last, revisions = shown.get(mine, (None, 0))
        if found == last:
            unchanged += 1
            continue
        emissions.append(emission(c, result, revisions))
        shown[mine] = (found, revisions + 1)
    return emissions, unchanged
