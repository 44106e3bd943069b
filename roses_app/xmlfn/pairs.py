"""A join's two functions over a batch of (left, right) item pairs: its predicate
``on`` and its composition (``combine``, or the built-in one), as both engines'
joins over publication time and the reference evaluator's joins call them."""

from __future__ import annotations

from collections.abc import Sequence

from roses_app.algebra.latejoin import LateJoin
from roses_app.algebra.panes import Arrival
from roses_app.algebra.plan import Diff, Join, Semijoin, XQuery
from roses_app.xmlfn.batch import OnError, observe2_batch
from roses_app.xmlfn.stamp import compose_items
from roses_app.xmlfn.xpath import Namespaces
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


def late_join_results(
    node: Join | Semijoin | Diff,
    join: LateJoin,
    pairs: Sequence[tuple[Arrival, Arrival]],
    namespaces: Namespaces,
    on_error: OnError | None = None,
) -> list[tuple[int, int, str]]:
    """(ts, seq, item) of what an operator over publication time publishes after an
    arrival batch planned ``pairs``: a join's composed pairs that ``on`` keeps, at the
    later of the two times (the larger seq), or a semijoin's left items at their
    first partner; then the items now decided to have none (:meth:`LateJoin.settle`)."""
    texts = [(a.item or "", b.item or "") for a, b in pairs]
    keep = observe_pairs(node.on, namespaces, texts, on_error)
    matched = [pair for pair, ok in zip(pairs, keep, strict=True) if ok]
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
    return out + [(a.time, a.seq, a.item or "") for a in join.settle()]
