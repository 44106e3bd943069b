"""The reference evaluator's released runs over publication time (windows, deltas,
nests, and the aggregates and groups that read them): their input events as
:class:`roses_app.algebra.release.Release` releases them (in time order, once final),
from the whole event list (see :func:`roses_app.algebra.reference_time.released_run`)."""

from __future__ import annotations

from collections.abc import Sequence

from roses_app.algebra.lateness import Arrival, arrival_groups
from roses_app.algebra.plan import Node
from roses_app.algebra.reference_registry import Context, RefEvent
from roses_app.algebra.release import Release


def released(events: Sequence[RefEvent], ctx: Context, lateness: int, node: Node) -> list[RefEvent]:
    """``events`` as a :class:`Release` with ``lateness`` gives them out, from the whole
    list; the items too late go to ``ctx.late[node]``."""
    arrivals = [(ctx.arrival(e.seq), Arrival(e.ts, e.seq, e.item)) for e in events]
    out, late = Release(lateness).advance(arrival_groups(arrivals))
    ctx.late[node] = [RefEvent(a.time, a.seq, a.item) for a in late]
    return [RefEvent(a.time, a.seq, a.item) for a in out]


__all__ = ["released"]
