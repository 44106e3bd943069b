"""How the reference evaluator's operators of time read their input, one rule for
both times, parameterized by each item's time and the allowed lateness.

In ingest time items come in time order and none is late: an operator reads its input
as it comes, a time decided before the watermark (``ctx.horizon``).  Over publication
time a window, delta, nest, unnest or windowed grouping (and an aggregate or group
over such a run) reads what :class:`~roses_app.algebra.time.release.Release` gives out, in
time order once final, or the results below it as their clocks decided them
(:mod:`roses_app.algebra.time.release_results`): :func:`timed_input`; a join, semijoin or
difference reads its sides without the items too late: :func:`timed_sides`.  Each
operator's one step (:data:`STEPS`, :mod:`roses_app.algebra.reference.time_operators`) runs
over that input."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from roses_app.algebra.plan.operators import Diff, Join, Node, Semijoin, Window, WindowSpec
from roses_app.algebra.reference.registry import (
    Context,
    RefEvent,
    heartbeats,
    items_only,
    ordered,
    run,
)
from roses_app.algebra.time.eventtime import (
    late_joined,
    late_sequential,
    released_chain,
    released_joined,
)
from roses_app.algebra.time.latejoin import LEFT, RIGHT, decided, on_time
from roses_app.algebra.time.lateness import RELEASED_LATENESS, Arrival, arrival_groups
from roses_app.algebra.time.release import Release, release_lateness
from roses_app.algebra.time.release_results import (
    RESULT_NAME,
    FedBranch,
    fed_branches,
    fed_horizon,
    fed_items,
    fed_release,
    last_versions,
    side_inputs,
)

ALL_DECIDED = 2**63 - 1  # a horizon past every time

# One operator's step: its input events in time order (heartbeats included), the
# operator (Any: each step takes its own node type), the evaluation, and the
# horizon before which a time is decided.
Step = Callable[[list[RefEvent], Any, Context, int], list[RefEvent]]
STEPS: dict[type[Node], Step] = {}


def step(node_type: type[Node]) -> Callable[[Step], Step]:
    """Registers the one step of ``node_type`` (both times run it)."""

    def add(function: Step) -> Step:
        STEPS[node_type] = function
        return function

    return add


def timed_input(node: Node, ctx: Context, below: Node | None = None) -> tuple[list[RefEvent], int]:
    """The events ``node`` reads from ``below`` (default: its input), in time order,
    and the horizon before which their times are decided.  Over ingest time: as they
    come, and the watermark.  Over publication time, ``below``'s events in the run
    of operators ``node`` ends (:func:`~roses_app.algebra.time.eventtime.released_chain`):
    the stateless plan's events as :class:`Release` gives them out (with ``node``'s
    lateness; the items too late go to ``ctx.late[node]``), or the results of
    operators below as their clocks decided them (:func:`fed_released`), through
    the run's steps up to ``below``, heartbeats passed on (as the Spark stages do),
    every time decided."""
    below = node.input if below is None else below  # type: ignore[attr-defined]
    if late_sequential(node) is None:
        return run(below, ctx), ctx.horizon
    return run_chain(node, released_events(node, ctx), ctx, below), ALL_DECIDED


def released_events(top: Node, ctx: Context) -> list[RefEvent]:
    """What the release of the run ``top`` ends gives out (see :func:`timed_input`),
    every time it releases; records what a run over its results knows is decided."""
    below = late_sequential(top)
    assert below is not None
    lateness = release_lateness(top, ctx.lateness)
    if fed_release(top):
        events = fed_released(below, ctx, top, lateness)
    else:
        events = released(run(below, ctx), ctx, lateness, top)
    # what a run over this one's results knows is decided, and sees pass
    last = max((e.ts for e in events), default=None)
    ctx.settled[top] = (last, heartbeats(events))
    return events


def run_chain(
    top: Node, events: list[RefEvent], ctx: Context, stop: Node | None = None
) -> list[RefEvent]:
    """``events`` (:func:`released_events`) through the steps of ``top``'s run up to
    ``stop`` (default ``top``; the plan below: none).  An aggregate or a group of the
    run has no step here: its handler reads the run."""
    stop = top if stop is None else stop
    if stop is late_sequential(top):
        return events
    for node in released_chain(top):
        found = STEPS.get(type(node))
        if found is not None:
            events = found(events, node, ctx, ALL_DECIDED)
        if node is stop:
            break
    return events


# -- binary operators: joins, semijoin, diff -------------------------------------------

Decided = Callable[[int], bool]  # whether an item at that time can get no new partner


def side(node: Node) -> tuple[Node, WindowSpec | None]:
    """A binary operator's input: the stream below a window, and the window (None: ω0)."""
    if isinstance(node, Window):
        return node.input, node.spec
    return node, None


def timed_sides(
    ctx: Context, node: Join | Semijoin | Diff
) -> tuple[list[RefEvent], list[RefEvent], Decided]:
    """Both sides' events, and which items surely have no new partner (one rule:
    :func:`~roses_app.algebra.time.latejoin.decided`).  In ingest time nothing is late, the
    clock is the watermark and the lateness 0; over publication time
    (:func:`late_joined`) the items too late are left out, taken in arrival order, at
    the last clock and the join's lateness; over operators' results
    (:func:`released_joined`), the same over what both sides released, in time order
    (nothing is late)."""
    is_released = released_joined(node) is not None
    if is_released:
        left, right = released_sides(node, ctx)
    else:
        left, right = run(side(node.left)[0], ctx), run(side(node.right)[0], ctx)
    if late_joined(node) is None and not is_released:
        return left, right, lambda t: decided(t, ctx.horizon, 0)
    sides = ((LEFT, left), (RIGHT, right))
    arrivals = [
        (join_arrival(ctx, node, e), Arrival(e.ts, e.seq, e.item, tag))
        for tag, events in sides
        for e in events
    ]
    lateness = RELEASED_LATENESS if is_released else node.lateness
    taken = on_time(arrival_groups(arrivals), lateness)
    clock = taken.clock
    if not is_released:  # (over released sides, their items' releases found the late ones)
        ctx.late[node] = [RefEvent(a.time, a.seq, a.item) for a in taken.late]
    ctx.settled[node] = (clock, [RefEvent(a.time, a.seq, None) for a in taken.heartbeats])
    keep = set(taken.kept)
    on_left, on_right = (
        [e for e in events if e.item is not None and Arrival(e.ts, e.seq, e.item, tag) in keep]
        for tag, events in sides
    )
    return on_left, on_right, lambda t: decided(t, clock, lateness)


def join_arrival(ctx: Context, node: Node, event: RefEvent) -> int:
    """When ``event`` reaches the join ``node`` over publication time: its ingest
    time, or over released sides (:func:`released_joined`) its own time (they come
    in time order, each time one arrival)."""
    return event.ts if released_joined(node) is not None else ctx.arrival(event.seq)


# -- the releases ----------------------------------------------------------------------


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
    (:func:`~roses_app.algebra.time.release_results.fed_branches`) that all their last clocks
    decided, in time order; of a window's results, the last version through its
    branch's filters and maps.  The items of a union's other branches
    (:func:`~roses_app.algebra.time.eventtime.fed_items`) as a :class:`Release` with
    ``lateness`` gives them out, its horizon one more (the items too late go to
    ``ctx.late[node]``)."""
    events, horizon, late = _fed_side(fed_branches(below), fed_items(below), ctx, lateness)
    if fed_items(below):
        ctx.late[node] = late
    return [] if horizon is None else ordered(e for e in events if e.ts < horizon)


def released_sides(node: Node, ctx: Context) -> tuple[list[RefEvent], list[RefEvent]]:
    """A join's sides over operators' results
    (:func:`~roses_app.algebra.time.eventtime.released_joined`) as
    :class:`~roses_app.algebra.time.release_results.SidesRelease` gives them out: each side's
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
