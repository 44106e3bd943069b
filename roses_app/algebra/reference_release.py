"""The reference evaluator's released runs over publication time (windows, deltas,
nests, and the aggregates and groups that read them): their input events as
:class:`roses_app.algebra.release.Release` releases them (in time order, once final),
or the results of operators as their last clocks decided them
(:mod:`roses_app.algebra.release_fed`), from the whole event list (see
:func:`roses_app.algebra.reference_time.released_run`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from roses_app.algebra.eventtime import released_joined
from roses_app.algebra.lateness import Arrival, arrival_groups
from roses_app.algebra.plan import Node
from roses_app.algebra.reference_registry import Context, RefEvent, items_only, ordered, run
from roses_app.algebra.release import Release
from roses_app.algebra.release_fed import (
    RESULT_NAME,
    FedBranch,
    fed_branches,
    fed_horizon,
    fed_items,
    last_versions,
    side_inputs,
)


def released(events: Sequence[RefEvent], ctx: Context, lateness: int, node: Node) -> list[RefEvent]:
    """``events`` as a :class:`Release` with ``lateness`` gives them out, from the whole
    list; the items too late go to ``ctx.late[node]``."""
    out, _, ctx.late[node] = _release(events, ctx, lateness)
    return out


def _release(
    events: Sequence[RefEvent], ctx: Context, lateness: int
) -> tuple[list[RefEvent], Release, list[RefEvent]]:
    arrivals = [(ctx.arrival(e.seq), Arrival(e.ts, e.seq, e.item)) for e in events]
    release = Release(lateness)
    out, late = release.advance(arrival_groups(arrivals))
    dropped = [RefEvent(a.time, a.seq, a.item) for a in late]
    return [RefEvent(a.time, a.seq, a.item) for a in out], release, dropped


def fed_released(below: Node, ctx: Context, node: Node, lateness: int) -> list[RefEvent]:
    """The results (and heartbeats on time) of the operators ``below`` reads
    (:func:`~roses_app.algebra.release_fed.fed_branches`) that all their last clocks
    decided, in time order; of a window's results, the last version through its
    branch's filters and maps.  The items of a union's other branches
    (:func:`~roses_app.algebra.eventtime.fed_items`) as a :class:`Release` with
    ``lateness`` gives them out, its horizon one more (the items too late go to
    ``ctx.late[node]``)."""
    events, horizon, late = _fed_side(fed_branches(below), fed_items(below), ctx, lateness)
    if fed_items(below):
        ctx.late[node] = late
    return [] if horizon is None else ordered(e for e in events if e.ts < horizon)


def released_sides(node: Node, ctx: Context) -> tuple[list[RefEvent], list[RefEvent]]:
    """A join's sides over operators' results
    (:func:`~roses_app.algebra.eventtime.released_joined`) as
    :class:`~roses_app.algebra.release_fed.SidesRelease` gives them out: each side's
    results and items (through their own clock, the join's lateness: the items too
    late go to ``ctx.late[node]``) that both sides have decided, in time order."""
    sides = released_joined(node)
    assert sides is not None
    found = [
        _fed_side(*side_inputs(below), ctx, node.lateness)  # type: ignore[attr-defined]
        for below in (sides[0], sides[2])
    ]
    ctx.late[node] = [e for _, _, late in found for e in late]
    horizons = [h for _, h, _ in found]
    if None in horizons:
        return [], []
    horizon = min(h for h in horizons if h is not None)
    left, right = ([e for e in events if e.ts < horizon] for events, _, _ in found)
    return ordered(left), ordered(right)


def _fed_side(
    fed: Sequence[FedBranch], items: Sequence[Node], ctx: Context, lateness: int
) -> tuple[set[RefEvent], int | None, list[RefEvent]]:
    """The events of the branches ``fed`` (their operators' final results and
    heartbeats on time) and of the item branches ``items`` (as their release gives
    them out), the least horizon of them all, and the items too late."""
    events: set[RefEvent] = set()
    horizons: list[int | None] = []
    for branch in fed:
        events.update(items_only(_final_results(branch, ctx)))
        clock, taken = ctx.settled[branch.operator]
        horizons.append(fed_horizon(branch.operator, clock))
        events.update(taken)
    late: list[RefEvent] = []
    if items:
        union = ordered({e for child in items for e in run(child, ctx)})
        out, release, late = _release(union, ctx, lateness)
        events.update(out)
        horizons.append(release.horizon)
    if not horizons or None in horizons:
        return events, None, late
    return events, min(h for h in horizons if h is not None), late


def _final_results(branch: FedBranch, ctx: Context) -> list[RefEvent]:
    """What ``branch`` gives the run: of windows' results, the tail over the last
    version of each (a context of its own holds them as the operator's output)."""
    from roses_app.xmlfn import split_batch

    found = run(branch.operator, ctx)
    if not branch.named:
        return run(branch.node, ctx)
    results = items_only(found)
    names = split_batch(RESULT_NAME, (), [e.item for e in results])
    last = ordered(last_versions(results, names, lambda e: e.seq))
    return run(branch.node, replace(ctx, memo={branch.operator: last}))


__all__ = ["fed_released", "released", "released_sides"]
