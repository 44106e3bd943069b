"""Pure-Python reference evaluator: the exact seed semantics on a finite event list.

It is the test oracle: the Spark compiler must give the same output events, in the
same order.  Output order is (ts, seq, item): the timestamp first (the physical model
orders events by timestamp), then the position of the input event the output comes
from, then the item text so that two outputs of one input event are ordered the
same way by every engine.

Time-dependent results (closed windows, outer-join and diff rows) only count once
they are decided: before the *horizon*, the latest input time (heartbeats included)
minus the allowed lateness, like Spark's watermark.

The handlers live in :mod:`roses_app.algebra.reference.stateless` (Source, Filter, Map,
Union), :mod:`roses_app.algebra.reference.time_operators` (the operators of time) and
:mod:`roses_app.algebra.reference.aggregate` (aggregation and group-by), and register on
:mod:`roses_app.algebra.reference.registry`'s dispatcher; importing them here, at the
top, makes the registry complete for whoever imports this module.
"""

from __future__ import annotations

from collections.abc import Sequence

from roses_app.algebra.plan.operators import NODE_TYPES, Node, Split, Stream
from roses_app.algebra.reference import aggregate, stateless, time_operators
from roses_app.algebra.reference.registry import (
    Context,
    Namespaces,
    RefEvent,
    RefInput,
    has_semantics,
    horizon_of,
    items_only,
    ordered,
    run,
)
from roses_app.algebra.time.eventtime import publishes_late
from roses_app.algebra.time.lateness import LATE_PART

HANDLER_MODULES = (stateless, time_operators, aggregate)


def evaluated_types() -> set[type]:
    """Node types that have reference semantics on the dispatcher (a split has its
    own entry points: :func:`evaluate_split`, :func:`evaluate_streams`)."""
    return {t for t in NODE_TYPES if has_semantics(t)}


def _context(
    inputs: Sequence[RefInput], namespaces: Namespaces, lateness: int, horizon: int | None
) -> Context:
    found = horizon_of(inputs, lateness) if horizon is None else horizon
    return Context(inputs, namespaces, found, lateness=lateness)


def evaluate(
    node: Node,
    inputs: Sequence[RefInput],
    namespaces: Namespaces = (),
    *,
    lateness: int = 0,
    horizon: int | None = None,
) -> list[RefEvent]:
    """The output events of a non-split plan, in output order."""
    if isinstance(node, Split):
        raise TypeError("a split has several outputs: use evaluate_stream()")
    return items_only(run(node, _context(inputs, namespaces, lateness, horizon)))


def _split_parts(node: Split, ctx: Context) -> dict[str, list[RefEvent]]:
    from roses_app.xmlfn import split_batch

    events = run(node.input, ctx)
    names = split_batch(node.by, ctx.ns, [e.item for e in events])
    parts: dict[str, list[RefEvent]] = {}
    for event, name in zip(events, names, strict=True):
        if name is not None:
            parts.setdefault(name, []).append(event)
    return parts


def evaluate_split(
    node: Split, inputs: Sequence[RefInput], ns: Namespaces, *, lateness: int = 0
) -> dict[str, list[RefEvent]]:
    return _split_parts(node, _context(inputs, ns, lateness, None))


def evaluate_streams(
    streams: Sequence[Stream],
    inputs: Sequence[RefInput],
    namespaces: Namespaces = (),
    *,
    lateness: int = 0,
) -> dict[str, dict[str, list[RefEvent]]]:
    """Outputs of several streams (stream → part → events), sharing one memo: a
    sub-plan common to several streams is computed once."""
    ctx = _context(inputs, namespaces, lateness, None)
    out: dict[str, dict[str, list[RefEvent]]] = {}
    for stream in streams:
        if isinstance(stream.plan, Split):
            out[stream.name] = _split_parts(stream.plan, ctx)
        else:
            out[stream.name] = {"": items_only(run(stream.plan, ctx))}
            late = ctx.late.get(stream.plan)
            if late and publishes_late(stream.plan):
                out[stream.name][LATE_PART] = ordered(late)  # in output order, as Spark's
    return out


def evaluate_stream(
    stream: Stream, inputs: Sequence[RefInput], namespaces: Namespaces = (), *, lateness: int = 0
) -> dict[str, list[RefEvent]]:
    """Outputs of a stream keyed by part: '' for a plain stream, split names otherwise."""
    return evaluate_streams([stream], inputs, namespaces, lateness=lateness)[stream.name]


__all__ = [
    "HANDLER_MODULES",
    "Context",
    "Namespaces",
    "RefEvent",
    "RefInput",
    "evaluate",
    "evaluate_split",
    "evaluate_stream",
    "evaluate_streams",
    "evaluated_types",
    "horizon_of",
    "items_only",
    "ordered",
    "run",
]
