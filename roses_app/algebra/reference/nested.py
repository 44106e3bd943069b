"""Operators of seed 002 over the nested form of a stream: one set of items per time.

Pure functions, the oracle that the reference evaluator's δ⁺, δ⁻ and windowed grouping
build on.  ``rows`` is a time-ordered list of ``(t, items)``: with a row for every
tick (empty ones included) they give the logical operators; with a row per input
timestamp only, the physical ones ("par rapport aux items de l'estampille
précédente du flux").
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T", bound=Hashable)
K = TypeVar("K", bound=Hashable)


def nest(events: Iterable[tuple[int, T]]) -> list[tuple[int, list[T]]]:
    """Nest: the items of each timestamp together, in time order (input order kept)."""
    rows: dict[int, list[T]] = {}
    for t, item in events:
        rows.setdefault(t, []).append(item)
    return sorted(rows.items(), key=lambda row: row[0])


def delta_insert(rows: Sequence[tuple[int, Sequence[T]]]) -> list[tuple[int, list[T]]]:
    """δ⁺: at each row, the items that were not in the previous row."""
    out: list[tuple[int, list[T]]] = []
    previous: set[T] = set()
    for t, items in rows:
        new = [i for i in items if i not in previous]
        if new:
            out.append((t, new))
        previous = set(items)
    return out


def delta_delete(rows: Sequence[tuple[int, Sequence[T]]]) -> list[tuple[int, list[T]]]:
    """δ⁻: at each row, the items of the previous row that are gone (in its order)."""
    out: list[tuple[int, list[T]]] = []
    previous: Sequence[T] = ()
    for t, items in rows:
        present = set(items)
        gone = [i for i in previous if i not in present]
        if gone:
            out.append((t, gone))
        previous = items
    return out


def windowed_grouping(
    items: Iterable[T], key: Callable[[T], K], window: int
) -> list[tuple[T, ...]]:
    """FlameStream's windowed grouping: for each item, the last ``window`` items of its
    key's bucket (fewer while the bucket is smaller), the item itself last."""
    if window <= 0:
        raise ValueError("windowed grouping needs a window > 0")
    buckets: dict[K, list[T]] = {}
    out: list[tuple[T, ...]] = []
    for item in items:
        bucket = buckets.setdefault(key(item), [])
        bucket.append(item)
        del bucket[:-window]  # only the last `window` items are ever needed
        out.append(tuple(bucket))
    return out


JOIN_KINDS = ("product", "inner", "left", "full")


def join_row(
    left: Sequence[T],
    right: Sequence[T],
    kind: str,
    pred: Callable[[T, T], bool],
    compose: Callable[[T, T], T],
) -> list[T]:
    """One time of a logical product or join (seed 002, "Produit cartésien", "Jointure").

    The product composes every pair, and an empty side is λ (i·λ = i).  Inner keeps
    the pairs ``pred`` accepts; left outer adds the left items that matched nothing;
    full outer adds the unmatched right items too.  Order: left items in order, each
    with its right partners in order; unmatched right items last.
    """
    if kind not in JOIN_KINDS:
        raise ValueError(f"unknown join kind {kind!r} (expected one of {', '.join(JOIN_KINDS)})")
    if kind == "product":
        if not left or not right:
            return [*left, *right]  # i·λ = i
        return [compose(i1, i2) for i1 in left for i2 in right]
    out: list[T] = []
    matched_right: set[int] = set()
    for i1 in left:
        partners = [(n, i2) for n, i2 in enumerate(right) if pred(i1, i2)]
        out.extend(compose(i1, i2) for _, i2 in partners)
        matched_right.update(n for n, _ in partners)
        if not partners and kind in ("left", "full"):
            out.append(i1)
    if kind == "full":
        out.extend(i2 for n, i2 in enumerate(right) if n not in matched_right)
    return out
