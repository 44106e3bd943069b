"""Reference semantics of aggregation (α) and group-by (γ) (seed 002's physical
algebra): one item per timestamp (and key) of the window they read; over a periodic
time window, one per closed window (and key), stamped with its bounds and guid.

Over publication time, the windows :mod:`roses_app.algebra.time.lateness` runs take their
items in arrival order (:func:`_late_windows`); the others read a released run of
operators (:func:`~roses_app.algebra.reference.timed_input.timed_input`), where every
time is decided and a periodic window closes once a later time has been released.
"""

from __future__ import annotations

from roses_app.algebra.plan.operators import Aggregate, GroupBy, Window
from roses_app.algebra.reference.registry import (
    Context,
    RefEvent,
    items_only,
    ordered,
    register,
    run,
)
from roses_app.algebra.reference.time_operators import Group, time_groups
from roses_app.algebra.reference.timed_input import (
    released_events,
    run_chain,
    timed_input,
)
from roses_app.algebra.time.eventtime import late_sequential, late_windowed, released_windows
from roses_app.algebra.time.lateness import RELEASED_LATENESS, LateWindows, arrival_groups
from roses_app.algebra.time.windows import closed_windows, periodic_input


def _groups(node: Aggregate | GroupBy, ctx: Context) -> list[Group]:
    periodic = periodic_input(node.input)
    if periodic is not None:
        below, spec = periodic
        events, horizon = timed_input(node, ctx, below)
        if late_sequential(node) is not None:  # a window closes once a later time is released
            horizon = max((e.ts for e in events), default=0)
        closed = closed_windows(items_only(events), spec, horizon)
        return [(end, start, end, None, content) for start, end, content in closed]
    events, horizon = timed_input(node, ctx)
    return time_groups(items_only(events), horizon)


def _keyed(ctx: Context, by: str, groups: list[Group]) -> list[Group]:
    from roses_app.xmlfn.reduce import keyed_buckets

    out: list[Group] = []
    for ts, start, end, _, events in groups:
        out.extend(
            (ts, start, end, key, bucket) for key, bucket in keyed_buckets(by, ctx.ns, events)
        )
    return out


def _reduce(ctx: Context, node: Aggregate | GroupBy, groups: list[Group]) -> list[RefEvent]:
    """The stamped reducer result of each group, as Spark's aggregate computes it (one
    reducer call per key, the same function)."""
    from roses_app.xmlfn.reduce import group_results

    return ordered({RefEvent(*r) for r in group_results(node.reduce, ctx.ns, node.stream, groups)})


@register
def _aggregate(node: Aggregate, ctx: Context) -> list[RefEvent]:
    if late_windowed(node) is not None or released_windows(node) is not None:
        return _late_windows(node, ctx)
    return _reduce(ctx, node, _groups(node, ctx))


@register
def _group_by(node: GroupBy, ctx: Context) -> list[RefEvent]:
    if late_windowed(node) is not None or released_windows(node) is not None:
        return _late_windows(node, ctx)
    return _reduce(ctx, node, _keyed(ctx, node.by, _groups(node, ctx)))


def _late_windows(node: Aggregate | GroupBy, ctx: Context) -> list[RefEvent]:
    """α/γ over the windows :mod:`roses_app.algebra.time.lateness` runs: of items, taken in
    arrival order (the late items go to ``ctx.late``); of a released run
    (:func:`~roses_app.algebra.time.eventtime.released_windows`), what it releases, each
    time one arrival."""
    from roses_app.xmlfn.reduce import advance_windows, window_arrivals

    found = late_windowed(node)
    passed: set[int] = set()
    if found is not None:
        below, spec = found
        events, lateness = run(below, ctx), node.lateness
    else:
        spec = released_windows(node)  # type: ignore[assignment]
        assert spec is not None and isinstance(node.input, Window)
        out = released_events(node, ctx)
        events = run_chain(node, out, ctx, stop=node.input.input)
        lateness = RELEASED_LATENESS
        passed = {e.ts for e in out}  # each passes at the windows (see window_arrivals)

    def arrival(e: RefEvent) -> int:
        return ctx.arrival(e.seq) if found is not None else e.ts

    arrivals = window_arrivals(node, events, arrival, ctx.ns, passed=passed)  # type: ignore[arg-type]
    state = LateWindows(spec, lateness, node.report)
    planned, settled, published = advance_windows(
        state, arrival_groups(arrivals), node.reduce, ctx.ns, node.stream
    )
    ctx.unchanged[node] = settled.unchanged
    if found is not None:
        ctx.late[node] = [RefEvent(a.time, a.seq, a.item) for a in planned.late]
        heard = [RefEvent(a.time, a.seq, None) for a in planned.heartbeats]
        ctx.settled[node] = (state.clock, heard)
    return ordered(RefEvent(e.ts, e.seq, item) for e, item in published)


__all__: list[str] = []  # the handlers register themselves
