"""Pure-Python reference evaluator: the exact seed semantics on a finite event list.

It is the test oracle: the Spark compiler must give the same output events, in the
same order.  Output order is (ts, seq, item): the timestamp first (the physical model
orders events by timestamp), then the position of the input event the output comes
from, then the item text so that two outputs of one input event are ordered the
same way by every engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import singledispatch

from roses_app.algebra.plan import Filter, Map, Node, Source, Split, Stream, Union

Namespaces = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True, order=True)
class RefEvent:
    """One event of a stream: ordered by (ts, seq, item)."""

    ts: int
    seq: int
    item: str


@dataclass(frozen=True)
class RefInput:
    source: str
    ts: int
    seq: int
    item: str


def ordered(events: Iterable[RefEvent]) -> list[RefEvent]:
    return sorted(events)


@singledispatch
def _evaluate(node: Node, inputs: Sequence[RefInput], ns: Namespaces) -> list[RefEvent]:
    raise NotImplementedError(f"no reference semantics for {type(node).__name__}")


@_evaluate.register
def _source(node: Source, inputs: Sequence[RefInput], ns: Namespaces) -> list[RefEvent]:
    return [RefEvent(e.ts, e.seq, e.item) for e in inputs if e.source == node.name]


def _batched(
    events: list[RefEvent],
    fn: Callable[[str, Namespaces, list[str | None]], list],
    expr: str,
    ns: Namespaces,
) -> list:
    return fn(expr, ns, [e.item for e in events])


@_evaluate.register
def _filter(node: Filter, inputs: Sequence[RefInput], ns: Namespaces) -> list[RefEvent]:
    from roses_app.xmlfn import filter_batch

    events = _evaluate(node.input, inputs, ns)
    keep = _batched(events, filter_batch, node.where, ns)
    return [e for e, k in zip(events, keep, strict=True) if k]


@_evaluate.register
def _map(node: Map, inputs: Sequence[RefInput], ns: Namespaces) -> list[RefEvent]:
    from roses_app.xmlfn import map_batch, mutate_batch

    events = _evaluate(node.input, inputs, ns)
    xmls = [e.item for e in events]
    if node.xquery is not None:
        new_items = mutate_batch(node.xquery, ns, xmls)
    else:
        new_items = map_batch(node.xpath, ns, xmls)
    # A stream is a set of events: two copies of one event that map to the same item
    # (possible below a union) are one event.
    return ordered(
        {
            RefEvent(e.ts, e.seq, new)
            for e, new in zip(events, new_items, strict=True)
            if new is not None
        }
    )


@_evaluate.register
def _union(node: Union, inputs: Sequence[RefInput], ns: Namespaces) -> list[RefEvent]:
    # The seed's union is a set union of events: an event that reaches the union by
    # several branches (Union(F, F), or σp(F) ∪ σq(F)) is there once.
    out: set[RefEvent] = set()
    for child in node.inputs:
        out.update(_evaluate(child, inputs, ns))
    return ordered(out)


def evaluate(node: Node, inputs: Sequence[RefInput], namespaces: Namespaces = ()) -> list[RefEvent]:
    """The output events of a non-split plan, in output order."""
    if isinstance(node, Split):
        raise TypeError("a split has several outputs: use evaluate_stream()")
    return ordered(_evaluate(node, inputs, namespaces))


def evaluate_split(
    node: Split, inputs: Sequence[RefInput], ns: Namespaces
) -> dict[str, list[RefEvent]]:
    from roses_app.xmlfn import split_batch

    events = ordered(_evaluate(node.input, inputs, ns))
    names = _batched(events, split_batch, node.by, ns)
    parts: dict[str, list[RefEvent]] = {}
    for event, name in zip(events, names, strict=True):
        if name is not None:
            parts.setdefault(name, []).append(event)
    return parts


def evaluate_stream(
    stream: Stream, inputs: Sequence[RefInput], namespaces: Namespaces = ()
) -> dict[str, list[RefEvent]]:
    """Outputs of a stream keyed by part: '' for a plain stream, split names otherwise."""
    if isinstance(stream.plan, Split):
        return evaluate_split(stream.plan, inputs, namespaces)
    return {"": evaluate(stream.plan, inputs, namespaces)}
