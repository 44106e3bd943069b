"""Event time: which time of an item its operators use, and which publication times
are believed.

A source (or a stream, for the sources it reads) with ``time: published`` gives each
item its publication time (RSS pubDate, Atom published/updated, a mail's Date) as its
time, and its ingest time when it has none.  Items then come out of order: the arrival
order stays the spool's (ingest time, then seq).

A publication date far in the future (beyond ``settings.max_future``, one day by
default) or before 1990 is a broken clock or a placeholder, not a time: it is
treated as missing (the item keeps its ingest time), and the caller logs and counts
it, so that it never holds a window open for years or opens one years away.  The
daemon applies the rule when an item enters the spool, ``roses replay`` when it
reads an event (both call :func:`roses_app.dates.plausible_published`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TypeVar

from roses_app.algebra.plan.operators import (
    Aggregate,
    CountWindow,
    Delta,
    Diff,
    Filter,
    GroupBy,
    Join,
    Map,
    Nest,
    Node,
    Report,
    Semijoin,
    SessionWindow,
    Source,
    Split,
    TimeWindow,
    Union,
    Unnest,
    Window,
    WindowedGrouping,
)

STATELESS = (Source, Filter, Map, Union, Split)
LateSpec = TimeWindow | CountWindow | SessionWindow  # the windows lateness.py runs


def stateless(plan: Node) -> bool:
    """Whether ``plan`` has only filters, maps, unions and splits over its sources:
    what the operators over publication time read."""
    return memoized(plan, "stateless", _stateless)


def _stateless(node: Node) -> bool:
    return isinstance(node, STATELESS) and all(stateless(c) for c in node.children())


T = TypeVar("T")


def memoized(node: Node, key: str, compute: Callable[[Node], T]) -> T:
    """``compute(node)``, once per node object (kept in ``node.analysis``), computed
    for the nodes below first: ``compute`` may ask the same of the node's inputs, and
    then never recurses deeper than one level, however deep the plan."""
    found = node.analysis
    if key not in found:
        for below in inputs_first(node, lambda n: key in n.analysis):
            below.analysis[key] = compute(below)
    result: T = found[key]
    return result


def event_time(ingest: int, published: int | None, mode: str) -> int:
    """An item's time for a source in ``mode`` (see
    :class:`~roses_app.algebra.plan.operators.Source`)."""
    if mode == "published" and published is not None:
        return published
    return ingest


def event_timed(node: Node) -> bool:
    """Whether some source of ``node``'s plan gives its items their publication time
    (their events may then come out of order)."""
    return memoized(node, "event_timed", _event_timed)


def _event_timed(node: Node) -> bool:
    if isinstance(node, Source):
        return node.time == "published"
    return any(event_timed(c) for c in node.children())


def late_windowed(node: Node) -> tuple[Node, LateSpec] | None:
    """(the stream below, the window) when ``node`` is an aggregate or a group-by over a
    periodic time window or a session window (an aggregate: or a count window) of a
    stateless plan, with a source read in publication time, a report policy of its
    own, or sessions (no other engine has them): what :mod:`roses_app.algebra.time.lateness`
    runs."""
    if not isinstance(node, Aggregate | GroupBy) or not reportable(node):
        return None
    window = node.input
    assert isinstance(window, Window)
    below = window.input
    sessions = isinstance(window.spec, SessionWindow)  # only this engine has them
    if not (sessions or event_timed(below) or node.report != Report()):
        return None
    if not stateless(below):
        return None
    return below, window.spec


JoinSides = tuple[Node, TimeWindow | None, Node, TimeWindow | None]


def join_sides(node: Node) -> JoinSides | None:
    """(left input, its window, right input, its window) when ``node`` is a join, a
    semijoin or a difference whose sides are sliding time windows (or no window)."""
    if not isinstance(node, Join | Semijoin | Diff):
        return None
    found: list[Node | TimeWindow | None] = []
    for side in (node.left, node.right):
        below, spec = (side.input, side.spec) if isinstance(side, Window) else (side, None)
        if spec is not None and not (isinstance(spec, TimeWindow) and spec.period is None):
            return None
        found += [below, spec]
    return found[0], found[1], found[2], found[3]  # type: ignore[return-value]


def late_joined(node: Node) -> JoinSides | None:
    """:func:`join_sides` of ``node`` when it reads items in publication time and its
    sides' inputs are stateless plans: what :mod:`roses_app.algebra.time.latejoin` runs."""
    if not event_timed(node):
        return None
    sides = join_sides(node)
    if sides is None or not (stateless(sides[0]) and stateless(sides[2])):
        return None
    return sides


def released_joined(node: Node) -> JoinSides | None:
    """:func:`join_sides` of ``node`` over publication time when a side reads
    operators' results (:func:`fed_input`), the other those or items: both sides
    released together in time order (:class:`~roses_app.algebra.time.release_results.SidesRelease`),
    then :mod:`roses_app.algebra.time.latejoin`'s rule over them, nothing late."""
    return memoized(node, "released_joined", _released_joined)


def _released_joined(node: Node) -> JoinSides | None:
    if not event_timed(node) or late_joined(node) is not None:
        return None
    sides = join_sides(node)
    if sides is None or not all(stateless(b) or fed_input(b) for b in (sides[0], sides[2])):
        return None
    return sides


def late_grouped(node: Node) -> Node | None:
    """The stream below ``node`` when it is a windowed grouping of a stateless plan
    over items read in publication time: what :mod:`roses_app.algebra.time.lategrouping`
    runs."""
    if not isinstance(node, WindowedGrouping) or not event_timed(node):
        return None
    if not stateless(node.input):
        return None
    return node.input


def decided(node: Node) -> bool:
    """Whether ``node`` is an operator over publication time whose results a clock
    decides, each at a time its clock has not yet decided: a join, a semijoin, a
    difference (of items, or of released sides: :func:`released_joined`) or a
    windowed grouping, or a released run (:func:`late_sequential`).
    Reporting on close, its results are final when published; optimistically, they
    are taken back or replaced, and its final ones are those its on-close twin
    publishes (:func:`~roses_app.algebra.time.release_results.fed_branches`).  A run's results
    come in time order, all of them before the last time it released once that time
    has been released (a periodic window closes once a later time has come).  Its
    final results are then an out-of-order input like the items themselves, complete
    before its horizon after each arrival (:mod:`roses_app.algebra.time.release_results`)."""
    found = late_joined(node) is not None or late_grouped(node) is not None
    return found or released_joined(node) is not None or late_sequential(node) is not None


def revised_windows(node: Node) -> bool:
    """Whether ``node`` is an aggregate or a group over the windows of items read in
    publication time that :func:`late_windowed` runs: a window's result may be
    published again, in place, while its items may still change, but a result at a
    time before ``clock - lateness`` is final (its window takes no item any more: a
    periodic window ends there, a count window is at its refresh, an item's time), and
    each keeps its guid through its revisions.  A session's result is at its last
    item, which an item up to ``gap`` later may extend (so one gap more), and a
    session merged into another ends with a notice under its guid."""
    return late_windowed(node) is not None and event_timed(node)


def fed_below(node: Node) -> Node | None:
    """The operator under the filters and maps from ``node`` down whose results a
    released run reads (:func:`decided` or :func:`revised_windows`), if it is one."""
    below = node
    while isinstance(below, Filter | Map):
        below = below.input
    return below if decided(below) or revised_windows(below) else None


def fed_operators(node: Node) -> list[Node] | None:
    """The operators whose results a released run reads, as their clocks decide them
    (:mod:`roses_app.algebra.time.release_results`), when it reads ``node``, one per branch
    (:func:`branches`) that is a :func:`decided` operator or :func:`revised_windows`,
    or one of them under filters and maps; over a union, the other branches are
    stateless plans of items (:func:`fed_items`), which the run's own clock decides.
    None if ``node`` is none of these."""
    found = [fed_below(child) for child in branches(node)]
    operators = [op for op in found if op is not None]
    if not operators or any(not stateless(child) for child in fed_items(node)):
        return None
    return operators


def final_results(operator: Node) -> Node:
    """What computes ``operator``'s final results, which a released run reads: itself,
    or its on-close twin when it reports otherwise (an optimistic join, difference or
    grouping; a released run's windows with a report policy): a result taken back or
    replaced was never final."""
    if isinstance(operator, Join | Diff | WindowedGrouping) and operator.optimistic:
        return replace(operator, optimistic=False)
    policy = isinstance(operator, Aggregate | GroupBy) and operator.report != Report()
    if policy and released_windows(operator) is not None:
        return replace(operator, report=Report())  # type: ignore[call-arg]
    return operator


def fed_items(node: Node) -> list[Node]:
    """The branches of a union a released run reads that no operator decides (see
    :func:`fed_operators`): items, which the run releases as it would alone."""
    return [child for child in branches(node) if fed_below(child) is None]


def branches(node: Node) -> tuple[Node, ...]:
    """The inputs of ``node`` that :func:`fed_operators` names one operator each."""
    return node.inputs if isinstance(node, Union) else (node,)


def fed_input(node: Node) -> bool:
    """Whether a released run reads ``node``'s results as operators' clocks decide
    them (:func:`fed_operators`)."""
    return fed_operators(node) is not None


def released_input(below: Node) -> bool:
    """Whether a released run may read ``below``: a stateless plan of items read in
    publication time, or the results of a :func:`fed_input` operator."""
    return (event_timed(below) and stateless(below)) or fed_input(below)


# Operators that compute, at each time of their input, something of its items up to
# then (or of its items at that time: unnest): released in time order, they run one
# after the other as over ingest time.
CHAINED = (Window, Delta, Nest, Unnest)


def chained_grouping(node: Node) -> bool:
    """Whether ``node`` is a windowed grouping a released run computes as a stage (one
    of items read in publication time is :func:`late_grouped`'s operator)."""
    return isinstance(node, WindowedGrouping) and late_grouped(node) is None


def chain_below(node: Node) -> Node | None:
    """The node below the run of windows, deltas, nests, unnests and windowed
    groupings (:func:`chained_grouping`) from ``node`` down (``node`` itself if it is
    none of them)."""
    below = node
    while isinstance(below, CHAINED) or chained_grouping(below):
        below = below.input  # type: ignore[attr-defined]
    return below


def released_windows(node: Node) -> LateSpec | None:
    """The window of ``node`` when it is a released run's aggregate or group over
    periodic time, count (an aggregate's) or session windows that
    :mod:`roses_app.algebra.time.lateness` computes over what is released (a report policy
    of its own, or sessions): in time order, each time one arrival, nothing late."""
    if not isinstance(node, Aggregate | GroupBy) or late_sequential(node) is None:
        return None
    window = node.input
    if not isinstance(window, Window):
        return None
    if node.report == Report() and not isinstance(window.spec, SessionWindow):
        return None
    assert isinstance(window.spec, TimeWindow | CountWindow | SessionWindow)
    return window.spec


def window_delta_run(node: Node) -> tuple[Node, list[Window | Delta]]:
    """The run of windows and deltas from ``node`` down (the lowest first; empty if
    ``node`` is neither) and the node below it: over ingest time, one operator."""
    run: list[Window | Delta] = []
    below = node
    while isinstance(below, Window | Delta):
        run.append(below)
        below = below.input
    return below, run[::-1]


def late_sequential(node: Node) -> Node | None:
    """The stream below ``node`` when :mod:`roses_app.algebra.time.release` feeds it (see
    :func:`_late_sequential`)."""
    return memoized(node, "late_sequential", _late_sequential)


def _late_sequential(node: Node) -> Node | None:
    """The stream below ``node`` when :mod:`roses_app.algebra.time.release` feeds it: over a
    stateless plan of items read in publication time, or over the results of a
    :func:`fed_input` operator, a run of windows, deltas, nests, unnests and windowed
    groupings (in any order; a grouping of items is :func:`late_grouped`'s), or an
    aggregate or a group over such a run, over a window of it, or over the plan
    itself or a window of it where :func:`late_windowed` does not run it (a group
    over a count window, anything over a sliding window or over no window, and the
    windows of a run or of operators' results, with a report policy or sessions:
    :func:`released_windows`)."""
    if isinstance(node, Aggregate | GroupBy):
        if late_windowed(node) is not None:
            return None
        window = node.input
        if not isinstance(window, Window):  # per time of its input (ω0)
            below = None if node.report != Report() else chain_below(window)
        elif node.report != Report() or isinstance(window.spec, SessionWindow):
            below = chain_below(window.input) if reportable(node) else None
        else:
            below = chain_below(window.input)
    elif isinstance(node, CHAINED) or chained_grouping(node):
        below = chain_below(node)
    else:
        return None
    if below is None or not released_input(below):
        return None
    return below


def released_chain(node: Node) -> list[Node]:
    """The operators :func:`late_sequential` runs for ``node``, the lowest first (the
    windows, deltas and nests, then the aggregate or group itself)."""
    below = late_sequential(node)
    assert below is not None, f"{node} is not released"
    run: list[Node] = []
    current = node
    while current is not below:
        run.append(current)
        current = current.input  # type: ignore[attr-defined]
    return run[::-1]


def publishes_late(node: Node) -> bool:
    """Whether ``node`` sends its items later than the lateness to its stream's
    ``late`` part (``late: publish``)."""
    return isinstance(node, Aggregate | GroupBy) and node.late == "publish"


def reportable(node: Aggregate | GroupBy) -> bool:
    """Whether ``node`` reads a window whose results a report policy may publish."""
    return reportable_input(node.input, isinstance(node, Aggregate))


def reportable_input(window: Node, aggregate: bool) -> bool:
    """Whether ``window`` is a periodic time window, a session window, or (an
    aggregate's) a count window.  (A group over a count window is not: a late item
    could take a key out of a window already published; over publication time it
    reports on close, :mod:`roses_app.algebra.time.release`.)"""
    if not isinstance(window, Window):
        return False
    spec = window.spec
    if isinstance(spec, CountWindow):
        return aggregate
    if isinstance(spec, SessionWindow):
        return True
    return spec.period is not None


def inputs_first(plan: Node, known: Callable[[Node], bool] | None = None) -> Iterator[Node]:
    """Every node object of ``plan`` once, each after all its inputs; with ``known``,
    not the nodes it holds true of, nor below them."""
    done: set[int] = set()
    stack: list[tuple[Node, bool]] = [(plan, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in done or (known is not None and known(node)):
            continue
        if expanded:
            done.add(id(node))
            yield node
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in node.children() if id(child) not in done)
