"""Reducers over windows: the stamped result of each group of items, as both engines
publish it (the XQuery reducer, then the window's guid and bounds)."""

from __future__ import annotations

from collections.abc import Sequence

from lxml import etree

from roses_app.algebra.plan import XQuery
from roses_app.xmlfn.batch import OnError, report
from roses_app.xmlfn.stamp import stamp_window
from roses_app.xmlfn.xpath import Namespaces


def reduce_groups(
    query: XQuery,
    namespaces: Namespaces,
    stream: str,
    groups: Sequence[tuple[Sequence[str], int, int, str | None]],
    on_error: OnError | None = None,
) -> list[str | None]:
    """The stamped reducer result (None: λ or an error) of each (items, start, end, key)
    group; one reducer call per distinct key, since ``$key`` is bound per call."""
    from roses_app.xmlfn.xquery import reduce_batch

    by_key: dict[str | None, list[int]] = {}
    for index, (_, _, _, key) in enumerate(groups):
        by_key.setdefault(key, []).append(index)
    results: list[str | None] = [None] * len(groups)
    for key, indices in by_key.items():
        extra = None if key is None else {"key": key}
        items = [list(groups[i][0]) for i in indices]
        for i, item in zip(
            indices, reduce_batch(query, namespaces, items, on_error, extra), strict=True
        ):
            if item is not None:
                _, start, end, _ = groups[i]
                results[i] = _stamped(item, stream, start, end, key, on_error)
    return results


def _stamped(
    item: str, stream: str, start: int, end: int, key: str | None, on_error: OnError | None
) -> str | None:
    try:
        return stamp_window(item, stream, start, end, key)
    except (etree.XMLSyntaxError, ValueError) as exc:  # the reducer checks its result
        report(on_error, f"stamping a window of {stream}", item, exc)
        return None
