"""Hypothesis strategies: random event lists and random v1 plans over them."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

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
    XQuery,
)
from roses_app.algebra.reference.evaluator import RefInput
from roses_app.algebra.time.eventtime import (
    chained_grouping,
    late_sequential,
    released_joined,
    released_windows,
    revised_windows,
)

# A Spark differential test: a few examples (each runs queries), the session fixture.
SPARK_EXAMPLES = settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

SOURCES = ("a", "b")
WORDS = ("volcano", "football", "Iceland", "vote", "lava")
CATEGORIES = ("world", "sport", "science")

PREDICATES = (
    "contains(lower-case(title), 'volcano')",
    "category = 'sport'",
    "string-length(title) > 12",
    "not(category = 'world')",
    "exists(link)",
)
ACCESSORS = (
    "title",
    "title, category",
    "category[. = 'sport']",  # empty for most items: they are dropped (λ)
    ".",
)
# true of a window's result with few items, false once it has more (REDUCER's)
RESULT_PREDICATES = ("category = ('1', '2')", "string-length(title) < 16")
SPLITTERS = (
    "string(category)",
    "if (contains(title, 'lava')) then 'hot' else ()",  # empty: the item goes nowhere
)


@st.composite
def items(draw: st.DrawFn) -> str:
    title = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)))
    category = draw(st.sampled_from(CATEGORIES))
    link = draw(st.booleans())
    link_el = f"<link>http://example.org/{draw(st.integers(0, 99))}</link>" if link else ""
    return f"<item><title>{title}</title>{link_el}<category>{category}</category></item>"


@st.composite
def event_lists(draw: st.DrawFn, max_size: int = 25) -> list[RefInput]:
    n = draw(st.integers(0, max_size))
    times = sorted(draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)))
    return [
        RefInput(draw(st.sampled_from(SOURCES)), ts, seq, draw(items()))
        for seq, ts in enumerate(times, start=1)
    ]


P = ParamSpec("P")
T = TypeVar("T")


def compact(make: Callable[P, st.SearchStrategy[T]]) -> Callable[P, st.SearchStrategy[T]]:
    """``make``'s strategy, spelt by its name and arguments: hypothesis spells a
    filtered strategy out in full when the filter rejects a value, and the plan
    strategies nest one another many times over (gigabytes of text, spelt whole)."""
    built = functools.lru_cache(maxsize=None)(make)

    @functools.wraps(make)
    def strategy(*args: P.args, **kwargs: P.kwargs) -> st.SearchStrategy[T]:
        @st.composite
        def drawn(draw: st.DrawFn) -> T:
            return draw(built(*args, **kwargs))

        drawn.__name__ = drawn.__qualname__ = make.__name__
        return drawn()

    return strategy


def plans(max_leaves: int = 4) -> st.SearchStrategy[Node]:
    leaves = st.sampled_from(SOURCES).map(Source)

    def extend(children: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
        return st.one_of(
            st.builds(Filter, children, st.sampled_from(PREDICATES)),
            st.builds(Map, children, st.sampled_from(ACCESSORS)),
            st.lists(children, min_size=2, max_size=3).map(lambda xs: Union(tuple(xs))),
        )

    return st.recursive(leaves, extend, max_leaves=max_leaves)


def stream_plans() -> st.SearchStrategy[Node]:
    """A plan, possibly under a split at its root."""
    return st.one_of(plans(), st.builds(Split, plans(), st.sampled_from(SPLITTERS)))


# -- plans with the operators of time --------------------------------------------------

REDUCER = XQuery(
    "<item><title>{ string-join($items/title, ' + ') }</title>"
    "<category>{ count($items) }</category></item>"
)
COUNTER = XQuery("<item><title>{ count($items) }</title></item>")
PAIR_PREDICATES = ("$i1/link = $i2/link", "$i1/category = $i2/category", "true()")


def time_windows() -> st.SearchStrategy[TimeWindow]:
    sliding = st.builds(TimeWindow, st.integers(1, 4), st.none(), st.just(0), st.integers(0, 1))
    periodic = st.builds(
        TimeWindow, st.integers(1, 4), st.integers(1, 4), st.integers(0, 2), st.integers(0, 1)
    )
    return sliding | periodic


def windows(below: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    spec = time_windows() | st.builds(CountWindow, st.integers(1, 5))
    return st.builds(Window, below, spec)


def stream_windows(below: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    """A window read as a stream: a time, count or session window."""
    return windows(below) | st.builds(Window, below, st.builds(SessionWindow, st.integers(1, 6)))


def join_inputs(below: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    sliding = st.builds(TimeWindow, st.integers(1, 4), st.none(), st.just(0), st.integers(0, 1))
    return below | st.builds(Window, below, sliding)


def time_plans() -> st.SearchStrategy[Node]:
    """A stateless plan with one or two operators of time on top."""
    below = plans(max_leaves=2)
    periodic = st.builds(TimeWindow, st.integers(1, 4), st.integers(1, 4), st.integers(0, 2))
    return st.one_of(
        stream_windows(below),
        st.builds(Delta, stream_windows(below), st.sampled_from(("insert", "delete"))),
        st.builds(Aggregate, below | st.builds(Window, below, periodic), st.just(REDUCER)),
        st.builds(GroupBy, below, st.sampled_from(SPLITTERS[:1]), st.just(REDUCER)),
        st.builds(
            WindowedGrouping,
            below,
            st.just("string(category)"),
            st.integers(1, 3),
            st.just(REDUCER),
        ),
        st.builds(
            Join,
            join_inputs(below),
            join_inputs(below),
            st.sampled_from(("inner", "left", "full", "product")),
            st.sampled_from(PAIR_PREDICATES),
        ),
        st.builds(Semijoin, below, join_inputs(below), st.sampled_from(PAIR_PREDICATES)),
        st.builds(Diff, below, join_inputs(below), st.sampled_from(PAIR_PREDICATES)),
    )


# -- out-of-order items and windows over publication time ------------------------------


@st.composite
def out_of_order_event_lists(draw: st.DrawFn, max_size: int = 25) -> list[RefInput]:
    """Arrivals in order (ingest ticks from 1, several items per tick), each item with
    a publication time up to 12 ticks before it (or none), and a few heartbeats."""
    n = draw(st.integers(0, max_size))
    times = sorted(draw(st.lists(st.integers(1, 30), min_size=n, max_size=n)))
    out: list[RefInput] = []
    for seq, ts in enumerate(times, start=1):
        if draw(st.integers(0, 9)) == 0:
            out.append(RefInput("", ts, seq, None))
            continue
        published = draw(st.none() | st.integers(max(0, ts - 12), ts))
        out.append(RefInput(draw(st.sampled_from(SOURCES)), ts, seq, draw(items()), published))
    return out


@compact
def late_grouping_plans() -> st.SearchStrategy[Node]:
    """A windowed grouping of a stateless plan in publication time, with a lateness,
    reporting on close or optimistically; its reducer shows the items it reduces, or
    only how many (then a late item often leaves a result unchanged)."""
    return st.builds(
        WindowedGrouping,
        plans(max_leaves=2).map(published_time),
        st.sampled_from(SPLITTERS),
        st.integers(1, 3),
        st.sampled_from((REDUCER, COUNTER)),
        st.just("s"),
        st.integers(0, 10),
        st.booleans(),  # report: optimistic
    )


def late_sequential_plans() -> st.SearchStrategy[Node]:
    """A window, a delta (of a window or not), a nest or a group over a count window
    of a stateless plan in publication time: what roses_app.algebra.time.release feeds."""
    below = plans(max_leaves=2).map(published_time)
    kinds = st.sampled_from(("insert", "delete"))
    counted = st.builds(Window, below, st.builds(CountWindow, st.integers(1, 4)))
    return st.one_of(
        stream_windows(below),
        st.builds(Delta, stream_windows(below) | below, kinds),
        st.builds(Nest, below),
        st.builds(
            GroupBy,
            counted,
            st.sampled_from(SPLITTERS),
            st.just(REDUCER),
            st.just("s"),
            st.integers(0, 10),
            st.sampled_from(("drop", "publish")),
        ),
    )


RUN = (Window, Delta, Nest)


@compact
def released_chains(below: st.SearchStrategy[Node] | None = None) -> st.SearchStrategy[Node]:
    """One or two windows, deltas or nests over ``below`` (default: a stateless plan
    in publication time), or an aggregate or a group over a window of those (periodic,
    sliding or count): runs of operators where one reads another's results, which
    roses_app.algebra.time.release feeds as a whole."""
    below = plans(max_leaves=2).map(published_time) if below is None else below
    kinds = st.sampled_from(("insert", "delete"))

    def step(inner: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
        # (a grouping of items is lategrouping's operator: a run over it reads its results)
        grouping = st.builds(
            WindowedGrouping,
            inner,
            st.sampled_from(SPLITTERS),
            st.integers(1, 3),
            st.just(REDUCER),
            st.just("s"),
        ).filter(chained_grouping)
        return st.one_of(
            stream_windows(inner),
            st.builds(Delta, inner, kinds),
            st.builds(Nest, inner),
            st.builds(Unnest, inner),  # (of a nest: its items again; of items: none)
            grouping,
        )

    chain = step(below) | step(step(below))
    late = (st.integers(0, 10), st.sampled_from(("drop", "publish")))
    # over the plan itself: what lateness.py does not run (no window, a sliding one)
    sliding = st.builds(Window, below, time_windows().filter(lambda w: w.period is None))
    # (a chain that is a window of the plan itself is the aggregate's own window)
    # (sessions of a run are read as a stream, not by an aggregate: no time decides them)
    run = chain.filter(
        lambda n: (
            not isinstance(n, Window)
            or (isinstance(n.input, RUN) and not isinstance(n.spec, SessionWindow))
        )
    )
    read = windows(chain) | run | sliding | below
    aggregate = st.builds(Aggregate, read, st.just(REDUCER), st.just("s"), *late)
    group = st.builds(
        GroupBy, read, st.sampled_from(SPLITTERS), st.just(REDUCER), st.just("s"), *late
    )
    # windows with a report policy or sessions, over a run or operators' results: the
    # windows of lateness.py over what is released (eventtime.released_windows)
    reported = reportable_windows(chain | below)
    policy = st.builds(Aggregate, reported, st.just(REDUCER), st.just("s"), *late, reports())
    policy |= st.builds(
        GroupBy,
        reported.filter(lambda w: not isinstance(w.spec, CountWindow)),
        st.sampled_from(SPLITTERS),
        st.just(REDUCER),
        st.just("s"),
        *late,
        reports(),
    )
    return st.one_of(chain, aggregate, group, policy.filter(released_windows))


def reportable_windows(below: st.SearchStrategy[Node]) -> st.SearchStrategy[Window]:
    """A periodic time, count or session window of ``below``."""
    periodic = st.builds(TimeWindow, st.integers(1, 6), st.integers(1, 6), st.integers(0, 2))
    spec = periodic | st.builds(CountWindow, st.integers(1, 4))
    return st.builds(Window, below, spec | st.builds(SessionWindow, st.integers(1, 6)))


def published_time(plan: Node) -> Node:
    """``plan`` with every source read in publication time."""
    if isinstance(plan, Source):
        return Source(plan.name, "published")
    return plan.map_inputs(published_time)


def reports() -> st.SearchStrategy[Report]:
    def report(close: bool, change: bool, every: int | None, tick: str) -> Report:
        return Report(close or not (change or every), change, every, tick)

    return st.builds(
        report,
        st.booleans(),
        st.booleans(),
        st.sampled_from([None, 2, 5]),
        st.sampled_from(["batch", "item", "time"]),
    )


@compact
def late_window_plans() -> st.SearchStrategy[Node]:
    """α or γ over a periodic window of a stateless plan in publication time, with a
    lateness, a late policy and a report policy."""
    below = plans(max_leaves=2).map(published_time)
    periodic = st.builds(TimeWindow, st.integers(1, 6), st.integers(1, 6), st.integers(0, 2))
    window = st.builds(Window, below, periodic)
    counted = st.builds(Window, below, st.builds(CountWindow, st.integers(1, 4)))
    sessions = st.builds(Window, below, st.builds(SessionWindow, st.integers(1, 6)))
    lateness = st.integers(0, 10)
    late = st.sampled_from(("drop", "publish"))
    return st.one_of(
        st.builds(
            Aggregate,
            window | counted | sessions,
            st.just(REDUCER),
            st.just("s"),
            lateness,
            late,
            reports(),
        ),
        st.builds(
            GroupBy,
            window | sessions,
            st.sampled_from(SPLITTERS[:1]),
            st.just(REDUCER),
            st.just("s"),
            lateness,
            late,
            reports(),
        ),
    )


@compact
def late_join_plans(below: st.SearchStrategy[Node] | None = None) -> st.SearchStrategy[Node]:
    """A join (any kind), a semijoin or a difference of sliding windows (or none) of
    ``below`` (default: stateless plans in publication time), with a lateness; joins
    and differences reporting on close or optimistically."""
    below = plans(max_leaves=2).map(published_time) if below is None else below
    lateness = st.integers(0, 10)
    predicates = st.sampled_from(PAIR_PREDICATES)
    return st.one_of(
        st.builds(
            Join,
            join_inputs(below),
            join_inputs(below),
            st.sampled_from(("inner", "left", "full", "product")),
            predicates,
            st.none(),
            lateness,
            st.booleans(),  # report: optimistic
        ),
        st.builds(Semijoin, below, join_inputs(below), predicates, lateness),
        st.builds(Diff, below, join_inputs(below), predicates, lateness, st.booleans()),
    )


@compact
def fed_operator_plans() -> st.SearchStrategy[Node]:
    """Operators over publication time whose results a released run reads: a join,
    semijoin, difference or windowed grouping (reporting on close, or optimistically:
    the run reads its final results), an aggregate or group over windows (any report
    policy: a window's result is revised until the clock decides it), a run, a filter or a
    map of one, or a union of one of those with another (each with its clock) or
    with items (:func:`fed_item_unions`).  Some filters keep a window's early
    versions and drop its later ones."""
    read = fed_reads()
    union = st.builds(lambda a, b: Union((a, b)), read, read).filter(
        lambda u: len(set(u.inputs)) == 2  # (a union of one input twice is that input)
    )
    return read | union | fed_item_unions()


@compact
def fed_reads(joins: bool = True) -> st.SearchStrategy[Node]:
    """One operator of :func:`fed_operator_plans`, filtered, mapped or not; or a run
    of items or of a join's results (its last time released decides them); with
    ``joins``, also a join of operators' results (:func:`released_join_plans`)."""
    operators = late_join_plans() | late_grouping_plans()
    if joins:
        operators |= released_join_plans()
    operators |= late_window_plans().filter(revised_windows)
    runs = released_chains() | released_chains(late_join_plans())
    operators |= runs.filter(lambda n: late_sequential(n) is not None)
    predicates = st.sampled_from((*PREDICATES, *RESULT_PREDICATES))
    return (
        operators
        | st.builds(Filter, operators, predicates)
        | st.builds(Map, operators, st.sampled_from(ACCESSORS))
    )


@compact
def released_join_plans() -> st.SearchStrategy[Node]:
    """A join, a semijoin or a difference whose sides read operators' results
    (:func:`fed_reads`, or a union of those with items) or items, one side at least
    operators' results: both released together, then joined in time order."""
    items = plans(max_leaves=2).map(published_time)
    sides = fed_reads(joins=False) | fed_item_unions(joins=False) | items
    return late_join_plans(sides).filter(lambda n: released_joined(n) is not None)


@compact
def fed_item_unions(joins: bool = True) -> st.SearchStrategy[Node]:
    """A union of an operator's results (:func:`fed_reads`) and items in publication
    time, which the run's own clock decides."""
    items = plans(max_leaves=2).map(published_time)
    return st.builds(lambda a, b: Union((a, b)), fed_reads(joins), items)
