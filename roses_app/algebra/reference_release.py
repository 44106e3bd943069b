"""The reference evaluator's delta, nest and windows read as streams over publication
time: their input events as :class:`roses_app.algebra.release.Release` releases them
(in time order, once final), from the whole event list."""

from __future__ import annotations

from roses_app.algebra.eventtime import late_sequential
from roses_app.algebra.lateness import Arrival, arrival_groups
from roses_app.algebra.plan import Delta, Nest, Window
from roses_app.algebra.reference_registry import Context, RefEvent, run
from roses_app.algebra.release import Release


def sequential_input(node: Window | Delta | Nest, ctx: Context) -> list[RefEvent]:
    """The input events of ``node``: over publication time, when it reads the
    stateless plan itself (the lowest of a run of windows and deltas), those released
    to it, the items too late left out (``ctx.late``); else all of them."""
    events = run(node.input, ctx)
    if late_sequential(node) is not node.input:
        return events
    arrivals = [(ctx.arrival(e.seq), Arrival(e.ts, e.seq, e.item)) for e in events]
    released, late = Release(ctx.lateness).advance(arrival_groups(arrivals))
    ctx.late[node] = [RefEvent(a.time, a.seq, a.item) for a in late]
    return [RefEvent(a.time, a.seq, a.item) for a in released]


__all__ = ["sequential_input"]
