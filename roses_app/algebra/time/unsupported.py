"""What no engine runs over publication time, and why (``roses check`` reports it with
the line): every operator runs over items read in publication time and over the
results of operators over publication time (:mod:`roses_app.algebra.time.eventtime`);
an operator that also reads the results of an operator over ingest time has no
clock to wait for there."""

from __future__ import annotations

from collections.abc import Iterator

from roses_app.algebra.plan.operators import Aggregate, GroupBy, Node, Source, Window
from roses_app.algebra.time.eventtime import (
    STATELESS,
    event_timed,
    inputs_first,
    late_grouped,
    late_joined,
    late_sequential,
    late_windowed,
    released_joined,
)


def unsupported_on_event_time(plan: Node) -> Iterator[tuple[Node, str]]:
    """The nodes of ``plan`` that read out-of-order (publication time) input and that
    no engine runs on it, each with why.  Filter, map, union and split take items in
    any order; the operators of time assume their input in time order."""
    timed: dict[int, bool] = {}
    windows = {  # the windows these engines read
        id(n.input)
        for n in plan.walk()
        if isinstance(n, Aggregate | GroupBy) and late_windowed(n) is not None
    }
    windows |= {
        id(side)
        for n in plan.walk()
        if late_joined(n) is not None or released_joined(n) is not None
        for side in (n.left, n.right)  # type: ignore[attr-defined]
        if isinstance(side, Window)
    }
    for node in inputs_first(plan):
        timed[id(node)] = (isinstance(node, Source) and node.time == "published") or any(
            timed[id(c)] for c in node.children()
        )
        if isinstance(node, STATELESS) or not timed[id(node)] or id(node) in windows:
            continue
        late = (late_windowed, late_joined, late_grouped, late_sequential, released_joined)
        if any(found(node) is not None for found in late):
            continue  # its output comes out of order too: stateful readers are reported
        timed[id(node)] = False  # the operators above it: the same cause, reported once
        yield node, _why_unsupported(node)


def _why_unsupported(node: Node) -> str:
    """Why no engine runs ``node`` over publication time: every operator runs over
    items in publication time and over the results of operators over publication
    time; the results of an operator over ingest time beside them are the cause."""
    what = f"{type(node).__name__} at step {node.origin.step}"
    read = {id(node), *(id(c) for c in node.children() if isinstance(c, Window))}  # its own
    below = next(
        (
            n
            for n in node.walk()
            if id(n) not in read and not isinstance(n, STATELESS) and not event_timed(n)
        ),
        None,
    )
    if below is None:
        return (
            f"{what} reads items in publication time (time: published), which may come "
            "out of order, and no engine runs it over them: read its sources with time: "
            "ingest"
        )
    return (
        f"{what} reads items in publication time (time: published), which may come out "
        f"of order, and the results of {type(below).__name__} at step "
        f"{below.origin.step}, which reads its items in ingest time: an operator over "
        "publication time reads items and the results of operators over publication "
        "time only; read the sources below both with the same time: (published, or "
        "ingest)"
    )
