"""Reference semantics of the stateless operators: Source, Filter, Map and Union.

Registered on :mod:`roses_app.algebra.reference.registry`'s dispatcher.  Heartbeats
pass through every one of them, so that the operators of time see time go by.
"""

from __future__ import annotations

from roses_app.algebra.plan.operators import Filter, Map, Source, Union
from roses_app.algebra.reference.registry import Context, RefEvent, ordered, register, run
from roses_app.algebra.time.eventtime import event_time


@register
def _source(node: Source, ctx: Context) -> list[RefEvent]:
    # Heartbeats belong to every source: time passes for all of them.
    return ordered(
        RefEvent(event_time(e.ts, e.published, node.time), e.seq, e.item)
        for e in ctx.inputs
        if e.source == node.name or e.item is None
    )


@register
def _filter(node: Filter, ctx: Context) -> list[RefEvent]:
    from roses_app.xmlfn import filter_batch

    events = run(node.input, ctx)
    keep = filter_batch(node.where, ctx.ns, [e.item for e in events])
    return [e for e, k in zip(events, keep, strict=True) if k or e.item is None]


@register
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


@register
def _union(node: Union, ctx: Context) -> list[RefEvent]:
    # The seed's union is a set union of events: an event that reaches the union by
    # several branches (Union(F, F), or σp(F) ∪ σq(F)) is there once.
    out: set[RefEvent] = set()
    for child in node.inputs:
        out.update(run(child, ctx))
    return ordered(out)
