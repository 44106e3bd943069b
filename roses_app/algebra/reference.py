"""Pure-Python reference evaluator: the exact seed semantics on a finite event list.

It is the test oracle: the Spark compiler must give the same output events, in the
same order.  Output order is (ts, seq, item): the timestamp first (the physical model
orders events by timestamp), then the position of the input event the output comes
from, then the item text so that two outputs of one input event are ordered the
same way by every engine.

Time-dependent results (closed windows, outer-join and diff rows) only count once
they are decided: before the *horizon*, the latest input time (heartbeats included)
minus the allowed lateness, like Spark's watermark.  The operators of time live in
:mod:`roses_app.algebra.reference_time`, registered on the same dispatcher.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import singledispatch

from roses_app.algebra.plan import Filter, Map, Node, Source, Split, Stream, Union

Namespaces = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class RefEvent:
    """One event of a stream, ordered by (ts, seq, item); ``item`` None is a heartbeat
    (λ: time passed, nothing arrived), which the stateless operators pass on."""

    ts: int
    seq: int
    item: str | None

    def __lt__(self, other: RefEvent) -> bool:
        return (self.ts, self.seq, self.item or "") < (other.ts, other.seq, other.item or "")


@dataclass(frozen=True)
class RefInput:
    """An input event; ``item`` None is a heartbeat: it only says that time passed."""

    source: str
    ts: int
    seq: int
    item: str | None


@dataclass
class Context:
    """One evaluation: the input, the namespaces, the horizon and the memo of shared
    sub-plans (equal nodes are evaluated once: common sub-plans are computed once)."""

    inputs: Sequence[RefInput]
    ns: Namespaces = ()
    horizon: int = 0
    memo: dict[Node, list[RefEvent]] = field(default_factory=dict)


def horizon_of(inputs: Sequence[RefInput], lateness: int = 0) -> int:
    """The time before which results are decided: the latest input time − lateness,
    each in whole milliseconds (rounded down), as Spark's watermark counts them."""
    latest = max((e.ts for e in inputs), default=0)
    return 1000 * (latest // 1000 - lateness // 1000)


def ordered(events: Iterable[RefEvent]) -> list[RefEvent]:
    return sorted(events)


def items_only(events: Iterable[RefEvent]) -> list[RefEvent]:
    """The events that carry an item (no heartbeats)."""
    return [e for e in events if e.item is not None]


def run(node: Node, ctx: Context) -> list[RefEvent]:
    """The output events of ``node`` (memoized: a shared sub-plan is computed once)."""
    found = ctx.memo.get(node)
    if found is None:
        found = ordered(_evaluate(node, ctx))
        ctx.memo[node] = found
    return found


@singledispatch
def _evaluate(node: Node, ctx: Context) -> list[RefEvent]:
    raise NotImplementedError(f"no reference semantics for {type(node).__name__}")


@_evaluate.register
def _source(node: Source, ctx: Context) -> list[RefEvent]:
    # Heartbeats belong to every source: time passes for all of them.
    return [
        RefEvent(e.ts, e.seq, e.item) for e in ctx.inputs if e.source == node.name or e.item is None
    ]


@_evaluate.register
def _filter(node: Filter, ctx: Context) -> list[RefEvent]:
    from roses_app.xmlfn import filter_batch

    events = run(node.input, ctx)
    keep = filter_batch(node.where, ctx.ns, [e.item for e in events])
    return [e for e, k in zip(events, keep, strict=True) if k or e.item is None]


@_evaluate.register
def _map(node: Map, ctx: Context) -> list[RefEvent]:
    from roses_app.xmlfn import map_batch, mutate_batch

    events = run(node.input, ctx)
    xmls = [e.item for e in events]
    if node.xquery is not None:
        new_items = mutate_batch(node.xquery, ctx.ns, xmls)
    else:
        new_items = map_batch(node.xpath, ctx.ns, xmls)
    # A stream is a set of events: two copies of one event that map to the same item
    # (possible below a union) are one event.
    return ordered(
        {
            RefEvent(e.ts, e.seq, new)
            for e, new in zip(events, new_items, strict=True)
            if new is not None or e.item is None
        }
    )


@_evaluate.register
def _union(node: Union, ctx: Context) -> list[RefEvent]:
    # The seed's union is a set union of events: an event that reaches the union by
    # several branches (Union(F, F), or σp(F) ∪ σq(F)) is there once.
    out: set[RefEvent] = set()
    for child in node.inputs:
        out.update(run(child, ctx))
    return ordered(out)


def _context(
    inputs: Sequence[RefInput], namespaces: Namespaces, lateness: int, horizon: int | None
) -> Context:
    return Context(inputs, namespaces, horizon_of(inputs, lateness) if horizon is None else horizon)


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
    return out


def evaluate_stream(
    stream: Stream, inputs: Sequence[RefInput], namespaces: Namespaces = (), *, lateness: int = 0
) -> dict[str, list[RefEvent]]:
    """Outputs of a stream keyed by part: '' for a plain stream, split names otherwise."""
    return evaluate_streams([stream], inputs, namespaces, lateness=lateness)[stream.name]


# The operators of time register themselves on the dispatcher.
from roses_app.algebra import reference_time  # noqa: E402, F401
