"""A join's two functions over a batch of (left, right) item pairs: its predicate
``on`` and its composition (``combine``, or the built-in one), as both engines'
joins over publication time and the reference evaluator's joins call them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from lxml import etree

from roses_app.algebra.plan.equikeys import equi_key
from roses_app.algebra.plan.operators import Diff, Join, Semijoin, XQuery
from roses_app.algebra.time.latejoin import LEFT, RIGHT, LateJoin, Planned
from roses_app.algebra.time.panes import Arrival
from roses_app.items import item_identity
from roses_app.xmlfn.batch import OnError, observe2_batch
from roses_app.xmlfn.stamp import compose_items, withdrawn_item
from roses_app.xmlfn.xpath import Namespaces, parse
from roses_app.xmlfn.xquery import combine_batch

Pairs = Sequence[tuple[str, str]]


def observe_pairs(
    on: str, namespaces: Namespaces, pairs: Pairs, on_error: OnError | None = None
) -> list[bool]:
    """``on`` ($i1, $i2) of each pair (``true()`` is not evaluated)."""
    if on.strip() == "true()":
        return [True] * len(pairs)
    return observe2_batch(on, namespaces, list(pairs), on_error)


def compose_pairs(
    combine: XQuery | None, namespaces: Namespaces, pairs: Pairs, on_error: OnError | None = None
) -> list[str | None]:
    """The joined item of each pair: ``combine``'s, or the built-in composition."""
    if combine is None:
        return [compose_items(a, b) for a, b in pairs]
    return combine_batch(combine, namespaces, list(pairs), on_error)


def advance_join(
    node: Join | Semijoin | Diff,
    join: LateJoin,
    groups: Sequence[Sequence[Arrival]],
    namespaces: Namespaces,
) -> Planned:
    """``join.advance(groups)``, with the join key values of their items when ``on``
    has keys (:attr:`LateJoin.keyed`), computed in one call per side."""
    key = equi_key(node.on)
    if not join.keyed or key is None:
        return join.advance(groups)
    from roses_app.xmlfn.keys import key_strings_batch

    found: dict[int, list[str]] = {}
    for side, path in ((LEFT, key.left), (RIGHT, key.right)):
        mine = [a for a in _items(groups) if (a.key or LEFT) == side]
        values = key_strings_batch(path, namespaces, [a.item for a in mine])
        found.update(zip(map(id, mine), values, strict=True))
    return join.advance(groups, lambda arrival: found[id(arrival)])


def _items(groups: Iterable[Sequence[Arrival]]) -> Iterable[Arrival]:
    return (a for group in groups for a in group if a.item is not None)


def late_join_results(
    node: Join | Semijoin | Diff,
    join: LateJoin,
    planned: Planned,
    namespaces: Namespaces,
    on_error: OnError | None = None,
) -> tuple[list[tuple[int, int, str]], int]:
    """(ts, seq, item) of what an operator over publication time publishes after an
    arrival batch was ``planned``: a join's composed pairs that ``on`` keeps, at the
    later of the two times (the larger seq), or a semijoin's left items at their
    first partner; with ``report: optimistic``, the items alone at their arrival and
    the withdrawals of those a partner now came for; then the items now decided to
    have none (:meth:`LateJoin.settle`).  And how many published items were taken
    back (replaced in place or withdrawn)."""
    texts = [(a.item or "", b.item or "") for a, b in planned.pairs]
    keep = observe_pairs(node.on, namespaces, texts, on_error)
    found = zip(planned.pairs, planned.left_last, keep, strict=True)
    kept = [(pair, last) for pair, last, ok in found if ok]
    matched = [pair for pair, _ in kept]
    shown: list[Arrival] = []
    taken: list[tuple[Arrival, Arrival]] = []
    if join.optimistic:
        partners = join.partners(matched, [last for _, last in kept])
        shown, taken = join.provisional(planned.arrived, partners)
    first = join.found(matched)
    out: list[tuple[int, int, str]] = []
    if isinstance(node, Semijoin):
        out = [(a.time, a.seq, a.item or "") for a in first]
    elif isinstance(node, Join):
        items = compose_pairs(
            node.combine, namespaces, [(a.item or "", b.item or "") for a, b in matched], on_error
        )
        out = [
            (max(a.time, b.time), max(a.seq, b.seq), item)
            for (a, b), item in zip(matched, items, strict=True)
            if item is not None
        ]
    out += [(a.time, a.seq, a.item or "") for a in shown]
    out += [
        (max(item.time, partner.time), partner.seq, withdrawn_item(item.item or ""))
        for item, partner in taken
        if not replaced_by_pair(node, item)
    ]
    return out + [(a.time, a.seq, a.item or "") for a in join.settle()], len(taken)


def replaced_by_pair(node: Join | Semijoin | Diff, item: Arrival) -> bool:
    """Whether a published item's first pair takes its place in its feed: a join's
    left item with the built-in composition, which keeps its guid (or link)."""
    if not isinstance(node, Join) or node.combine is not None or item.key == RIGHT:
        return False
    try:
        return bool(item_identity(parse(item.item or "")))
    except (etree.XMLSyntaxError, ValueError):
        return False
