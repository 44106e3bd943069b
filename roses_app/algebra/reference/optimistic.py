"""The reference evaluator's ``report: optimistic`` for joins and differences over
publication time (seed 000): what :meth:`roses_app.algebra.time.latejoin.LateJoin.provisional`
publishes arrival after arrival, computed from the whole event list."""

from __future__ import annotations

from collections.abc import Callable

from roses_app.algebra.plan.operators import Diff, Join
from roses_app.algebra.reference.registry import Context, RefEvent
from roses_app.algebra.time.latejoin import LEFT, RIGHT, alone_sides, join_kind
from roses_app.algebra.time.lateness import Arrival, arrival_order


def optimistic_events(
    ctx: Context,
    node: Join | Diff,
    sides: tuple[list[RefEvent], list[RefEvent]],
    via_left: set[tuple[int, int]],
    via_right: set[tuple[int, int]],
    arrival: Callable[[RefEvent], int],
) -> set[RefEvent]:
    """``report: optimistic`` over publication time, as
    :meth:`roses_app.algebra.time.latejoin.LateJoin.provisional` runs it in arrival order:
    an item of a side published without a partner that no partner came before is
    published at its arrival; if a partner comes after it, it is taken back at the
    first one (a withdrawal, unless that pair takes its place).  ``arrival``: when an
    event reached the join."""
    from roses_app.xmlfn.pairs import replaced_by_pair
    from roses_app.xmlfn.stamp import withdrawn_item

    left, right = sides
    kinds = alone_sides(join_kind(node))
    partners: dict[tuple[str, int], list[tuple[str, RefEvent]]] = {}
    for i, j in via_left:
        partners.setdefault((LEFT, i), []).append((RIGHT, right[j]))
    if RIGHT in kinds:
        for i, j in via_right:
            partners.setdefault((RIGHT, j), []).append((LEFT, left[i]))
    alone = [(tag, events) for tag, events in ((LEFT, left), (RIGHT, right)) if tag in kinds]

    def order(tag: str, e: RefEvent) -> tuple[int, int, int, str, str]:
        return (arrival(e), *arrival_order(Arrival(e.ts, e.seq, e.item, tag)))

    out: set[RefEvent] = set()
    for tag, events in alone:
        for index, e in enumerate(events):
            mine = order(tag, e)
            found = sorted(order(t, p) for t, p in partners.get((tag, index), []))
            if found and found[0] < mine:
                continue  # a partner came first: never published alone
            out.add(e)
            after = [o for o in found if o > mine]
            if after and not replaced_by_pair(node, Arrival(e.ts, e.seq, e.item, tag)):
                _, seq, ts, _, _ = after[0]  # the first partner after it
                out.add(RefEvent(max(e.ts, ts), seq, withdrawn_item(e.item or "")))
    return out
