"""Reducers over windows: the stamped result of each group of items, as both engines
publish it (the XQuery reducer, then the window's guid and bounds)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from lxml import etree

from roses_app.algebra.plan.operators import Aggregate, GroupBy, WindowedGrouping, XQuery
from roses_app.algebra.time import lategrouping
from roses_app.algebra.time.delta import Stamped
from roses_app.algebra.time.latejoin import CLOCK_SEQ
from roses_app.algebra.time.lateness import Arrival, Emission, LateWindows, Planned, Settled
from roses_app.xmlfn.batch import OnError, report, split_batch
from roses_app.xmlfn.stamp import merged_session, stamp_grouping, stamp_window
from roses_app.xmlfn.xpath import Namespaces

H = TypeVar("H", bound=lategrouping.Held)


def keyed_buckets(
    by: str, namespaces: Namespaces, events: Sequence[H], on_error: OnError | None = None
) -> list[tuple[str, list[H]]]:
    """γ's groups of ``events`` (one time's, or one window's): per key ``by`` gives,
    in key order, its events in their order; an event without a key goes nowhere."""
    keys = split_batch(by, namespaces, [e.item for e in events], on_error)
    buckets: dict[str, list[H]] = {}
    for e, key in zip(events, keys, strict=True):
        if key is not None:
            buckets.setdefault(key, []).append(e)
    return sorted(buckets.items())


def reduce_raw(
    query: XQuery,
    namespaces: Namespaces,
    groups: Sequence[tuple[Sequence[str], str | None]],
    on_error: OnError | None = None,
) -> list[str | None]:
    """The reducer's result (None: λ or an error) of each (items, key) group; one
    reducer call per distinct key, since ``$key`` is bound per call."""
    from roses_app.xmlfn.xquery import reduce_batch

    by_key: dict[str | None, list[int]] = {}
    for index, (_, key) in enumerate(groups):
        by_key.setdefault(key, []).append(index)
    results: list[str | None] = [None] * len(groups)
    for key, indices in by_key.items():
        extra = None if key is None else {"key": key}
        items = [list(groups[i][0]) for i in indices]
        for i, item in zip(
            indices, reduce_batch(query, namespaces, items, on_error, extra), strict=True
        ):
            results[i] = item
    return results


def reduce_groups(
    query: XQuery,
    namespaces: Namespaces,
    stream: str,
    groups: Sequence[tuple[Sequence[str], int, int, str | None]],
    on_error: OnError | None = None,
) -> list[str | None]:
    """The stamped reducer result (None: λ or an error) of each (items, start, end, key)
    group."""
    raw = reduce_raw(query, namespaces, [(items, key) for items, _, _, key in groups], on_error)
    return [
        None if item is None else stamped(item, stream, start, end, key, 0, on_error)
        for item, (_, start, end, key) in zip(raw, groups, strict=True)
    ]


def group_results(
    query: XQuery,
    namespaces: Namespaces,
    stream: str,
    groups: Sequence[tuple[int, int, int, str | None, Sequence[H]]],
    on_error: OnError | None = None,
) -> list[tuple[int, int, str]]:
    """(ts, seq, item) of each (ts, start, end, key, events) group's stamped reducer
    result: at the group's time, with its lowest seq; a λ or failed result is left out."""
    windows = [([e.item or "" for e in b], start, end, key) for _, start, end, key, b in groups]
    results = reduce_groups(query, namespaces, stream, windows, on_error)
    return [
        (ts, min(e.seq for e in b), item)
        for (ts, _, _, _, b), item in zip(groups, results, strict=True)
        if item is not None
    ]


def stamped(
    item: str,
    stream: str,
    start: int,
    end: int,
    key: str | None,
    revision: int,
    on_error: OnError | None,
    ident: int | None = None,
) -> str | None:
    """``item`` with its window's stamp (None, reported, if it is not an item)."""
    try:
        return stamp_window(item, stream, start, end, key, revision, ident)
    except (etree.XMLSyntaxError, ValueError) as exc:  # the reducer checks its result
        report(on_error, f"stamping a window of {stream}", item, exc)
        return None


def window_arrivals(
    node: Aggregate | GroupBy,
    events: Sequence[Stamped],
    arrival: Callable[[Stamped], int],
    namespaces: Namespaces,
    on_error: OnError | None = None,
    passed: Iterable[int] = (),
) -> list[tuple[int, Arrival]]:
    """(arrival, event) of ``events`` for the windows of ``node``: the heartbeats, and
    the items with γ's key (an item without one goes to no window of a group); and a
    heartbeat at each time ``passed`` (a released run's windows: every time released
    is an arrival, whether the stages before gave an item at it or not, so that the
    horizon the run tells, its last time released, is what its windows decided).
    Both engines call this."""
    out = [(t, Arrival(t, CLOCK_SEQ, None)) for t in passed]
    items = [e for e in events if e.item is not None]
    keys: list[str | None] = [None] * len(items)
    if isinstance(node, GroupBy):
        keys = split_batch(node.by, namespaces, [e.item for e in items], on_error)
    out += [(arrival(e), Arrival(e.ts, e.seq, None)) for e in events if e.item is None]
    out += [
        (arrival(e), Arrival(e.ts, e.seq, e.item, key))
        for e, key in zip(items, keys, strict=True)
        if key is not None or isinstance(node, Aggregate)
    ]
    return out


def advance_windows(
    windows: LateWindows,
    groups: Iterable[Sequence[Arrival]],
    query: XQuery,
    namespaces: Namespaces,
    stream: str,
    on_error: OnError | None = None,
) -> tuple[Planned, Settled, list[tuple[Emission, str]]]:
    """Arrival groups through ``windows`` (:mod:`roses_app.algebra.time.lateness`): the
    reducer over the windows its policy computes (one call per key), what to publish,
    each with its stamped item.  Both engines call this."""
    planned = windows.plan(groups)
    raw = reduce_raw(query, namespaces, [(c.items, c.key) for c in planned.computations], on_error)
    settled = windows.settle(planned, raw)
    out: list[tuple[Emission, str]] = []
    for e in settled.emissions:
        if e.merged_into is not None and e.ident is not None:
            merged = merged_session(
                stream, e.ident, e.merged_into, e.start, e.end, e.key, e.revision
            )
            out.append((e, merged))
            continue
        item = stamped(e.item, stream, e.start, e.end, e.key, e.revision, on_error, e.ident)
        if item is not None:
            out.append((e, item))
    return planned, settled, out


def advance_grouping(
    grouping: lategrouping.LateGrouping,
    groups: Iterable[Sequence[Arrival]],
    node: WindowedGrouping,
    namespaces: Namespaces,
    on_error: OnError | None = None,
) -> tuple[lategrouping.Planned, lategrouping.Settled, list[tuple[lategrouping.Emission, str]]]:
    """Arrival groups through a windowed grouping over publication time
    (:mod:`roses_app.algebra.time.lategrouping`): the reducer over the results it
    computes (one call per key), and what to publish, each with its stamped item."""
    planned = grouping.advance(groups)
    raw = reduce_raw(
        node.reduce, namespaces, [(c.items, c.key) for c in planned.computations], on_error
    )
    settled = grouping.settle(planned, raw)
    return planned, settled, stamped_results(settled.emissions, node.stream, on_error)


def stamped_results(
    emissions: Iterable[lategrouping.Emission], stream: str, on_error: OnError | None
) -> list[tuple[lategrouping.Emission, str]]:
    """Each windowed grouping result with its stamp (those that are not items are
    reported and left out)."""
    out: list[tuple[lategrouping.Emission, str]] = []
    for e in emissions:
        try:
            item = stamp_grouping(e.item, stream, e.key, e.seq, e.anchor, e.time, e.revision)
        except (etree.XMLSyntaxError, ValueError) as exc:  # the reducer checks its result
            report(on_error, f"stamping a grouping result of {stream}", e.item, exc)
            continue
        out.append((e, item))
    return out
