"""Reference semantics of the operators of time (seed 002's physical algebra).

* Window: at each input timestamp t (heartbeats included), the window content at t.
* Join, Semijoin, Diff: the event form of the seed's rewrite: each event meets the
  other side's WindowCall at its own time.  A join pair is emitted once, at the later
  of its two timestamps; the outer rows (Diff) of an event once its time is decided.
* Delta: δ⁺/δ⁻ between consecutive input timestamps.
* WindowedGrouping: FlameStream's per-key buckets of the last N items.
* Nest and Unnest.

One implementation of each, for both times: a sequential operator's step
(:func:`sequential`) and a binary operator's pairs run over the input its time gives
it, as :mod:`roses_app.algebra.reference.timed_input` says (in ingest time, the events as
they come; over publication time, released in time order or without the items too
late).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from functools import partial
from itertools import groupby

from roses_app.algebra.plan.equikeys import equi_key, keyed_pairs
from roses_app.algebra.plan.operators import (
    CountWindow,
    Delta,
    Diff,
    Join,
    Nest,
    Node,
    Semijoin,
    SessionWindow,
    TimeWindow,
    Unnest,
    Window,
    WindowedGrouping,
    WindowSpec,
    XQuery,
)
from roses_app.algebra.reference.grouping import late_grouping_events
from roses_app.algebra.reference.optimistic import optimistic_events
from roses_app.algebra.reference.registry import (
    Context,
    RefEvent,
    heartbeats,
    items_only,
    ordered,
    register,
)
from roses_app.algebra.reference.timed_input import (
    STEPS,
    Decided,
    join_arrival,
    side,
    step,
    timed_input,
    timed_sides,
)
from roses_app.algebra.time.delta import delta
from roses_app.algebra.time.eventtime import late_grouped
from roses_app.algebra.time.windows import call_bounds, window_content

# -- windows ---------------------------------------------------------------------------


class WindowCall:
    """ω(f, t) on demand over a time-ordered event list; no window is ω0 (same ts).

    The same contents as :func:`roses_app.algebra.time.windows.time_window` (the oracle of
    the seed's window tables), found by bisection: a test compares the two."""

    def __init__(self, events: Sequence[RefEvent], spec: WindowSpec | None) -> None:
        self.events = items_only(events)
        self.times = [e.ts for e in self.events]
        self.spec = spec

    def bounds(self, t: int) -> tuple[int, int] | None:
        """The [low, high] range of times in the window at ``t`` (not for count windows)."""
        spec = self.spec
        assert spec is None or isinstance(spec, TimeWindow)
        return call_bounds(spec, t)

    def indices(self, t: int) -> range:
        if isinstance(self.spec, CountWindow | SessionWindow):
            content = window_content(self.events, self.spec, t)
            end = bisect_right(self.times, t)
            return range(end - len(content), end)
        found = self.bounds(t)
        if found is None:
            return range(0)
        low, high = found
        return range(bisect_left(self.times, low), bisect_right(self.times, high))

    def at(self, t: int) -> list[RefEvent]:
        return [self.events[i] for i in self.indices(t)]


def sequential(node: Node, ctx: Context) -> list[RefEvent]:
    """A window, a delta, a nest, an unnest or a windowed grouping: its one step over
    the input its time gives it (:func:`~roses_app.algebra.reference.timed_input.timed_input`)."""
    events, horizon = timed_input(node, ctx)
    return STEPS[type(node)](events, node, ctx, horizon)


@step(Window)
def window_stream(
    events: list[RefEvent], node: Window, ctx: Context, horizon: int
) -> list[RefEvent]:
    """At each time of ``events`` (heartbeats included, and passed on), the window."""
    call = WindowCall(events, node.spec)
    out = set(heartbeats(events))
    for t in sorted({e.ts for e in events}):
        out.update(RefEvent(t, e.seq, e.item) for e in call.at(t))
    return ordered(out)


# -- joins, semijoin, diff -------------------------------------------------------------


def _observe(ctx: Context, on: str, pairs: Sequence[tuple[str, str]]) -> list[bool]:
    from roses_app.xmlfn.pairs import observe_pairs

    return observe_pairs(on, ctx.ns, pairs)


def _compose(
    ctx: Context, combine: XQuery | None, pairs: Sequence[tuple[str, str]]
) -> list[str | None]:
    from roses_app.xmlfn.pairs import compose_pairs

    return compose_pairs(combine, ctx.ns, pairs)


def _matches(
    ctx: Context, node: Join | Semijoin | Diff
) -> tuple[list[RefEvent], list[RefEvent], set[tuple[int, int]], set[tuple[int, int]], Decided]:
    """Both sides' item events, the matching pairs (left index, right index) found by
    left events in the right window (A) and by right events in the left window (B),
    and which items can get no new partner."""
    left_events, right_events, done = timed_sides(ctx, node)
    lcall = WindowCall(left_events, side(node.left)[1])
    rcall = WindowCall(right_events, side(node.right)[1])
    left, right = lcall.events, rcall.events
    by_left, by_right = _in_windows(ctx, node, lcall, rcall)
    candidates = sorted(by_left | by_right)
    keep = _observe(
        ctx, node.on, [(left[i].item or "", right[j].item or "") for i, j in candidates]
    )
    matched = {pair for pair, ok in zip(candidates, keep, strict=True) if ok}
    return left, right, matched & by_left, matched & by_right, done


def _in_windows(
    ctx: Context, node: Join | Semijoin | Diff, lcall: WindowCall, rcall: WindowCall
) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """The pairs in A and in B.  A predicate ``$i1/P = $i2/Q [and ...]`` only holds
    for items sharing a key value: then only those pairs are candidates (hash join)."""
    key = equi_key(node.on)
    if key is None or CountWindow in (type(lcall.spec), type(rcall.spec)):
        by_left = {(i, j) for i, e in enumerate(lcall.events) for j in rcall.indices(e.ts)}
        by_right: set[tuple[int, int]] = set()
        if isinstance(node, Join):
            by_right = {(i, j) for j, e in enumerate(rcall.events) for i in lcall.indices(e.ts)}
        return by_left, by_right
    from roses_app.xmlfn.keys import key_strings_batch

    lkeys = key_strings_batch(key.left, ctx.ns, [e.item for e in lcall.events])
    rkeys = key_strings_batch(key.right, ctx.ns, [e.item for e in rcall.events])
    by_left = keyed_pairs(lcall.times, lkeys, rcall.times, rkeys, rcall.bounds)
    if isinstance(node, Join):
        swapped = keyed_pairs(rcall.times, rkeys, lcall.times, lkeys, lcall.bounds)
        return by_left, {(i, j) for j, i in swapped}
    return by_left, set()


@register
def _join(node: Join, ctx: Context) -> list[RefEvent]:
    left, right, via_left, via_right, done = _matches(ctx, node)
    pairs = sorted(via_left | via_right)
    items = _compose(
        ctx, node.combine, [(left[i].item or "", right[j].item or "") for i, j in pairs]
    )
    out = {
        RefEvent(max(left[i].ts, right[j].ts), max(left[i].seq, right[j].seq), item)
        for (i, j), item in zip(pairs, items, strict=True)
        if item is not None
    }
    if node.kind in ("left", "full", "product"):
        # Diff(Window(f1), WindowCall(f2)): i·λ = i, once the left event's time is decided
        found = {i for i, _ in via_left}
        out.update(e for i, e in enumerate(left) if i not in found and done(e.ts))
    if node.kind in ("full", "product"):
        found = {j for _, j in via_right}
        out.update(e for j, e in enumerate(right) if j not in found and done(e.ts))
    if node.optimistic:
        arrival = partial(join_arrival, ctx, node)
        out.update(optimistic_events(ctx, node, (left, right), via_left, via_right, arrival))
    return ordered(out)


@register
def _semijoin(node: Semijoin, ctx: Context) -> list[RefEvent]:
    left, _, via_left, _, _ = _matches(ctx, node)
    found = {i for i, _ in via_left}
    return [e for i, e in enumerate(left) if i in found]


@register
def _diff(node: Diff, ctx: Context) -> list[RefEvent]:
    left, right, via_left, _, done = _matches(ctx, node)
    found = {i for i, _ in via_left}
    out = {e for i, e in enumerate(left) if i not in found and done(e.ts)}
    if node.optimistic:
        arrival = partial(join_arrival, ctx, node)
        out.update(optimistic_events(ctx, node, (left, right), via_left, set(), arrival))
    return ordered(out)


# -- delta -----------------------------------------------------------------------------


@step(Delta)
def delta_stream(events: list[RefEvent], node: Delta, ctx: Context, horizon: int) -> list[RefEvent]:
    changes, _ = delta(node.kind, events, {}, RefEvent)
    return ordered({*heartbeats(events), *changes})


# -- windowed grouping, nest, unnest ---------------------------------------------------


@register
def _windowed_grouping(node: WindowedGrouping, ctx: Context) -> list[RefEvent]:
    if late_grouped(node) is not None:
        return late_grouping_events(node, ctx)
    return sequential(node, ctx)


@step(WindowedGrouping)
def grouping_stream(
    events: list[RefEvent], node: WindowedGrouping, ctx: Context, horizon: int
) -> list[RefEvent]:
    """FlameStream's windowed grouping of ``events`` in time order: for each item, the
    reducer over the last ``size`` items of its key's bucket, at its time."""
    from roses_app.algebra.reference.nested import windowed_grouping
    from roses_app.xmlfn import reduce_batch, split_batch

    present = items_only(events)
    keys = split_batch(node.by, ctx.ns, [e.item for e in present])
    keyed = [(e, k) for e, k in zip(present, keys, strict=True) if k is not None]
    buckets = windowed_grouping(keyed, key=lambda pair: pair[1], window=node.size)
    out: set[RefEvent] = set(heartbeats(events))
    for (event, key), bucket in zip(keyed, buckets, strict=True):
        (item,) = reduce_batch(
            node.reduce, ctx.ns, [[e.item or "" for e, _ in bucket]], None, {"key": key}
        )
        if item is not None:
            out.add(RefEvent(event.ts, event.seq, item))
    return ordered(out)


@register
def _nest(node: Nest, ctx: Context) -> list[RefEvent]:
    return items_only(sequential(node, ctx))  # a nest's own stream has no heartbeats


@step(Nest)
def nest_stream(events: list[RefEvent], node: Nest, ctx: Context, horizon: int) -> list[RefEvent]:
    """One item nesting the items of each time before ``horizon``; heartbeats go on."""
    from roses_app.xmlfn.stamp import nest_items

    nested = {
        RefEvent(ts, min(e.seq for e in group), nest_items([e.item or "" for e in group], ts))
        for ts, _, _, _, group in time_groups(items_only(events), horizon)
    }
    return ordered({*heartbeats(events), *nested})


Group = tuple[int, int, int, str | None, list[RefEvent]]  # ts, start, end, key, events


def time_groups(events: Sequence[RefEvent], horizon: int) -> list[Group]:
    """One group per input timestamp, once decided."""
    return [(t, t, t, None, list(g)) for t, g in groupby(events, key=lambda e: e.ts) if t < horizon]


@step(Unnest)
def unnest_stream(
    events: list[RefEvent], node: Unnest, ctx: Context, horizon: int
) -> list[RefEvent]:
    """Each item nested one level below each event's item, at its time and seq."""
    from roses_app.xmlfn.stamp import unnest_items

    out: set[RefEvent] = set()
    for e in events:
        if e.item is None:
            out.add(e)
        else:
            out.update(RefEvent(e.ts, e.seq, inner) for inner in unnest_items(e.item))
    return ordered(out)


for _type in (Window, Delta, Unnest):  # their handler is their step over their timed input
    register(_type, sequential)
