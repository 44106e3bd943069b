"""The reference evaluator's delta, nest, windows read as streams and groups over
count windows over publication time: their input events as
:class:`roses_app.algebra.release.Release` releases them (in time order, once final),
from the whole event list."""

from __future__ import annotations

from collections.abc import Sequence

from roses_app.algebra.eventtime import late_sequential
from roses_app.algebra.lateness import Arrival, arrival_groups
from roses_app.algebra.plan import CountWindow, Delta, GroupBy, Nest, Node, Window
from roses_app.algebra.reference_registry import Context, RefEvent, items_only, ordered, run
from roses_app.algebra.release import Release, release_lateness
from roses_app.algebra.windows import count_window

Group = tuple[int, int, int, str | None, list[RefEvent]]  # ts, start, end, key, events


def released(events: Sequence[RefEvent], ctx: Context, lateness: int, node: Node) -> list[RefEvent]:
    """``events`` as a :class:`Release` with ``lateness`` gives them out, from the whole
    list; the items too late go to ``ctx.late[node]``."""
    arrivals = [(ctx.arrival(e.seq), Arrival(e.ts, e.seq, e.item)) for e in events]
    out, late = Release(lateness).advance(arrival_groups(arrivals))
    ctx.late[node] = [RefEvent(a.time, a.seq, a.item) for a in late]
    return [RefEvent(a.time, a.seq, a.item) for a in out]


def sequential_input(node: Window | Delta | Nest, ctx: Context) -> list[RefEvent]:
    """The input events of ``node``: over publication time, when it reads the
    stateless plan itself (the lowest of a run of windows and deltas), those released
    to it (with ``settings.lateness``); else all of them."""
    events = run(node.input, ctx)
    if late_sequential(node) is not node.input:
        return events
    return released(events, ctx, release_lateness(node, ctx.lateness), node)


def released_count_groups(node: GroupBy, ctx: Context) -> list[Group]:
    """A group over a count window over publication time: the window's items at each
    released time (with the group's lateness), one group per time, as over ingest
    time."""
    window = node.input
    assert isinstance(window, Window) and isinstance(window.spec, CountWindow)
    events = released(run(window.input, ctx), ctx, release_lateness(node, ctx.lateness), node)
    items = items_only(events)
    groups: list[Group] = []
    for t in sorted({e.ts for e in events}):
        content = count_window(items, t, window.spec.size)
        if content:
            groups.append((t, t, t, None, ordered(RefEvent(t, e.seq, e.item) for e in content)))
    return groups


__all__ = ["released", "released_count_groups", "sequential_input"]
