"""The stages of a released run over publication time
(:mod:`roses_app.spark.latesequential`), beyond the windows and deltas of
:mod:`roses_app.spark.sequential`: each reads the events released to it in time order
and computes them as over ingest time, all keys under the run's one key.

* a nest, an aggregate or a group per time of its input, or per closed periodic window;
* a windowed grouping, each key's bucket in the stage's memory; an unnest;
* an aggregate or a group over windows with a report policy or sessions
  (:func:`~roses_app.algebra.time.eventtime.released_windows`): the windows of
  :mod:`roses_app.algebra.time.lateness`, each released time one arrival.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from roses_app.algebra.plan.operators import (
    Aggregate,
    CountWindow,
    GroupBy,
    TimeWindow,
    WindowedGrouping,
)
from roses_app.algebra.time.eventtime import LateSpec
from roses_app.algebra.time.lateness import RELEASED_LATENESS, LateWindows, arrival_groups
from roses_app.algebra.time.slices import SliceMap
from roses_app.algebra.time.windows import closed_windows, open_after
from roses_app.spark import counts
from roses_app.spark.aggregate import nest_groups
from roses_app.spark.registry import Namespaces
from roses_app.spark.sequential import Event, GroupingOperator, by_time
from roses_app.spark.stateless import nested_items


@dataclass(frozen=True)
class NestOperator:
    """Nest as a stage: at each input time, one item holding that time's items."""

    on_error: counts.ErrorHook

    def advance(
        self, kept: list[Event], rows: Sequence[Event], key: Any
    ) -> tuple[list[Event], list[Event]]:
        groups = [(t, items) for t, items in by_time(rows) if items]
        nested = nest_groups(
            [([e.item or "" for e in items], t) for t, items in groups], self.on_error
        )
        out = [
            Event(t, min(e.seq for e in items), item)
            for (t, items), item in zip(groups, nested, strict=True)
            if item is not None
        ]
        return out, []


@dataclass(frozen=True)
class GroupOperator:
    """α or γ as a stage: at each input time (its items: a window's content), one item
    (per key), the reducer over its items, stamped as over ingest time."""

    node: Aggregate | GroupBy
    namespaces: Namespaces
    on_error: counts.ErrorHook

    def advance(
        self, kept: list[Event], rows: Sequence[Event], key: Any
    ) -> tuple[list[Event], list[Event]]:
        groups = [
            (t, t, t, found, bucket)
            for t, items in by_time(rows)
            for found, bucket in buckets(self.node, self.namespaces, items, self.on_error)
        ]
        return reduced(self.node, self.namespaces, groups, self.on_error), []


MARK = -1  # the seq of the event in which a closed-windows stage keeps its time


@dataclass(frozen=True)
class ClosedWindowsOperator:
    """α or γ over a periodic time window as a stage reading the window's input: once
    a later time has come, the reducer over each closed window's items (per key),
    stamped with its bounds.  It keeps the items of windows still open, and the time
    it has closed the windows up to."""

    node: Aggregate | GroupBy
    spec: TimeWindow
    namespaces: Namespaces
    on_error: counts.ErrorHook

    def advance(
        self, kept: list[Event], rows: Sequence[Event], key: Any
    ) -> tuple[list[Event], list[Event]]:
        if not rows:
            return [], kept
        since = kept[0].ts if kept and kept[0].seq == MARK else None
        items = [e for e in kept if e.seq != MARK] + [e for e in rows if e.item is not None]
        until = rows[-1].ts
        groups = [
            (end, start, end, found, bucket)
            for start, end, content in closed_windows(items, self.spec, until, since)
            for found, bucket in buckets(self.node, self.namespaces, content, self.on_error)
        ]
        out = reduced(self.node, self.namespaces, groups, self.on_error)
        still = [e for e in items if open_after(self.spec, e.ts, until)]
        return out, [Event(until, MARK, None), *still]


Group = tuple[int, int, int, str | None, list[Event]]  # ts, start, end, key, events


def buckets(
    node: Aggregate | GroupBy,
    namespaces: Namespaces,
    items: list[Event],
    on_error: counts.ErrorHook,
) -> list[tuple[str | None, list[Event]]]:
    """A group's items per key (γ), or all of them (α)."""
    from roses_app.xmlfn.reduce import keyed_buckets

    if isinstance(node, Aggregate):
        return [(None, items)] if items else []
    return list(keyed_buckets(node.by, namespaces, items, on_error))


def reduced(
    node: Aggregate | GroupBy,
    namespaces: Namespaces,
    groups: list[Group],
    on_error: counts.ErrorHook,
) -> list[Event]:
    """The stamped reducer result of each group, at its time with its lowest seq."""
    from roses_app.xmlfn.reduce import group_results

    return [
        Event(*r) for r in group_results(node.reduce, namespaces, node.stream, groups, on_error)
    ]


@dataclass(frozen=True)
class UnnestOperator:
    """Unnest as a stage: each item nested in an event's item, at its time and seq."""

    on_error: counts.ErrorHook

    def advance(
        self, kept: list[Event], rows: Sequence[Event], key: Any
    ) -> tuple[list[Event], list[Event]]:
        found = ((e, nested_items(e.item, self.on_error)) for e in rows if e.item is not None)
        return [Event(e.ts, e.seq, inner) for e, nested in found for inner in nested or ()], []


# a grouping stage keeps each kept item with its key: KEY NUL ITEM (NUL is in no XML)
KEPT_SEP = "\0"


@dataclass(frozen=True)
class KeyedGroupingOperator:
    """FlameStream's windowed grouping as a stage of a released run: for each item,
    the reducer over the last ``size`` items of its key's bucket (itself last), at its
    time.  The memory holds each key's bucket (an item without a key goes nowhere)."""

    node: WindowedGrouping
    namespaces: Namespaces
    on_error: counts.ErrorHook

    def advance(
        self, kept: list[Event], rows: Sequence[Event], key: Any
    ) -> tuple[list[Event], list[Event]]:
        from roses_app.xmlfn import split_batch

        items = [e for e in rows if e.item is not None]
        if not items:
            return [], kept
        bucket_of: dict[str, list[Event]] = {}
        for e in kept:
            held, _, item = (e.item or "").partition(KEPT_SEP)
            bucket_of.setdefault(held, []).append(Event(e.ts, e.seq, item))
        names = split_batch(self.node.by, self.namespaces, [e.item for e in items], self.on_error)
        per_key: dict[str, list[Event]] = {}
        for e, found in zip(items, names, strict=True):
            if found is not None:
                per_key.setdefault(found, []).append(e)
        node = self.node
        stage = GroupingOperator(node.size, node.reduce, self.namespaces, self.on_error)
        out: list[Event] = []
        for name, mine in per_key.items():  # over ingest time, one key's stage
            found_now, bucket_of[name] = stage.advance(bucket_of.get(name, []), mine, name)
            out += found_now
        memory = [
            Event(e.ts, e.seq, f"{name}{KEPT_SEP}{e.item}")
            for name, bucket in bucket_of.items()
            for e in bucket
        ]
        return out, memory


@dataclass(frozen=True)
class WindowsStage:
    """An aggregate or a group over windows with a report policy or sessions, last
    stage of a released run (:func:`~roses_app.algebra.time.eventtime.released_windows`):
    :class:`LateWindows` over what the stages before it give, each time one arrival
    (in time order: nothing is late).  Its state is the windows' (its items in
    ``slices``)."""

    node: Aggregate | GroupBy
    spec: LateSpec
    namespaces: Namespaces
    on_error: counts.ErrorHook

    @property
    def sliced(self) -> bool:
        """Whether its windows keep their items in slices (periodic or sessions)."""
        return not isinstance(self.spec, CountWindow)

    def advance(
        self,
        saved: Any,
        events: Sequence[Event],
        slices: SliceMap | None,
        passed: Iterable[int] = (),
    ) -> tuple[list[tuple[int, int, str | None]], Any, tuple[int, int]]:
        """The results to publish, the state to save, and (unchanged, revised); the
        times the run released (``passed``) each pass at the windows."""
        from roses_app.xmlfn.reduce import advance_windows, window_arrivals

        node = self.node
        windows = LateWindows.load(self.spec, RELEASED_LATENESS, node.report, saved, slices)
        # each released time one arrival
        arrivals = window_arrivals(
            node, events, lambda e: e.ts, self.namespaces, self.on_error, passed
        )
        _, settled, published = advance_windows(
            windows,
            arrival_groups(arrivals),
            node.reduce,
            self.namespaces,
            node.stream,
            self.on_error,
        )
        revised = sum(1 for e, _ in published if e.revision)
        out: list[tuple[int, int, str | None]] = [(e.ts, e.seq, item) for e, item in published]
        return out, windows.dump(), (settled.unchanged, revised)
