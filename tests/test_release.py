"""Delta, nest and windows read as streams over publication time
(roses_app.algebra.time.release): what is released does not depend on how the arrivals are
cut into micro-batches, comes out in time order, and leaves out exactly the items
later than the lateness; the config takes these operators; Spark publishes what the
reference evaluator does.  The ``event_time_release`` replay fixture runs both engines
end to end."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import (
    SPARK_EXAMPLES,
    late_sequential_plans,
    out_of_order_event_lists,
    released_chains,
)
from test_differential import assert_engines_agree

from roses_app.algebra.plan.operators import Delta, Nest, Node, Stream, Window
from roses_app.algebra.reference.evaluator import RefInput
from roses_app.algebra.time.eventtime import late_sequential
from roses_app.algebra.time.lateness import arrival_groups
from roses_app.algebra.time.panes import Arrival
from roses_app.algebra.time.release import Release, release_order
from roses_app.config import parse_config


def arrivals(events: list[RefInput]) -> list[list[Arrival]]:
    """Each input event at its time (its publication time when it has one)."""
    return arrival_groups(
        (e.ts, Arrival(e.ts if e.published is None else e.published, e.seq, e.item)) for e in events
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=out_of_order_event_lists(max_size=30),
    lateness=st.integers(0, 10),
    cuts=st.lists(st.integers(1, 30), max_size=4),
)
def test_what_is_released_does_not_depend_on_the_micro_batches(
    events: list[RefInput], lateness: int, cuts: list[int]
) -> None:
    groups = arrivals(events)
    whole, whole_late = Release(lateness).advance(groups)
    bounds = sorted({0, len(groups), *(c for c in cuts if c < len(groups))})
    saved: dict[str, Any] | None = None
    released: list[Arrival] = []
    late: list[Arrival] = []
    for start, end in itertools.pairwise(bounds):
        release = Release.load(lateness, saved)
        now, too_late = release.advance(groups[start:end])
        released += now
        late += too_late
        saved = json.loads(json.dumps(release.dump()))
    assert released == whole and late == whole_late
    # in time order across micro-batches: the stages see them as over ingest time
    assert released == sorted(released, key=release_order)
    # an item is too late when it is more than the lateness before the clock
    clock: int | None = None
    for group in groups:
        for a in group:
            if a.item is not None:
                assert (a in late) == (clock is not None and a.time < clock - lateness)
        clock = max([a.time for a in group] + ([] if clock is None else [clock]))
    assert clock is None or all(a.time < clock - lateness for a in released)


def test_an_item_is_held_until_the_clock_is_the_lateness_past_it() -> None:
    release = Release(5)
    first, _ = release.advance([[Arrival(10, 1, "<item>a</item>")]])
    assert first == []  # nothing can tell yet whether an item before 10 will come
    late_one = Arrival(7, 2, "<item>b</item>")
    second, _ = release.advance([[late_one], [Arrival(14, 3, "<item>c</item>")]])
    assert [a.time for a in second] == [7]  # 7 < 14 - 5; 10 is not yet
    third, too_late = release.advance([[Arrival(1, 4, "<item>d</item>")], [Arrival(40, 5, None)]])
    assert [a.time for a in third] == [10, 14] and [a.time for a in too_late] == [1]


HEAD = """
sources:
  wire: {feed: "http://example.org/wire", time: published}
streams:
"""


def test_the_config_takes_delta_nest_windows_and_runs_of_them_in_publication_time(
    tmp_path: Path,
) -> None:
    config = parse_config(
        HEAD
        + "  recent: {window: {from: wire, time: 1d}}\n"
        + "  gone: {delta: {from: {window: {from: wire, count: 20}}, kind: delete}}\n"
        + "  daily: {nest: {from: wire}}\n"
        + "  fresh: {aggregate: {from: {window: {from: {delta: {from: {window: {from: wire,"
        + " time: 1d}}}}, time: 1d, every: 1d}}, reduce: '<item/>'}}\n"
        + "  nested: {window: {from: {nest: {from: wire}}, count: 3}}\n",
        tmp_path / "feeds.yaml",
    )
    plans = {name: stream.plan for name, stream in config.streams.items()}
    assert isinstance(plans["recent"], Window) and isinstance(plans["gone"], Delta)
    assert isinstance(plans["daily"], Nest)
    assert all(late_sequential(plan) is not None for plan in plans.values())


@pytest.mark.spark
@SPARK_EXAMPLES
@given(
    events=out_of_order_event_lists(max_size=30),
    plans=st.lists(late_sequential_plans() | released_chains(), min_size=2, max_size=2),
    lateness=st.integers(0, 10),
)
def test_spark_equals_reference_on_released_operators_over_out_of_order_items(
    events: list[RefInput], plans: list[Node], lateness: int, spark: Any, tmp_path: Path
) -> None:
    """A released operator, or a run of them where one reads another's results (a
    window of a nest, a delta of a delta, an aggregate of a delta...)."""
    assert all(late_sequential(plan) is not None for plan in plans)
    assert_engines_agree(plans, events, tmp_path, lateness)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=out_of_order_event_lists(max_size=30),
    plan=released_chains(),
    lateness=st.integers(0, 10),
    cuts=st.lists(st.integers(1, 30), max_size=4),
)
def test_a_released_run_cut_into_micro_batches_equals_the_reference(
    events: list[RefInput], plan: Node, lateness: int, cuts: list[int]
) -> None:
    """The Spark operator's logic without Spark: the release and the stages of a run
    of operators, micro-batch after micro-batch with their state through JSON, give
    the reference's results."""
    from types import SimpleNamespace

    from roses_app.algebra.reference.evaluator import _context, evaluate_streams
    from roses_app.algebra.reference.registry import run
    from roses_app.algebra.time.slices import MemorySlices
    from roses_app.spark.latesequential import released_run

    def failed(item: str | None, exc: BaseException) -> None:
        raise AssertionError(f"{item}: {exc}")

    below = late_sequential(plan)
    assert below is not None
    arrived = {e.seq: e.ts for e in events}
    rows = run(below, _context(events, (), lateness, None))
    groups = arrival_groups((arrived[e.seq], Arrival(e.ts, e.seq, e.item)) for e in rows)
    context = SimpleNamespace(namespaces=(), on_error=lambda node: failed, lateness=lateness)
    released = released_run(plan, context)  # type: ignore[arg-type]
    bounds = sorted({0, len(groups), *(c for c in cuts if c < len(groups))})
    saved: dict[str, Any] = {}
    store = MemorySlices()  # the windows' MapState: kept between micro-batches
    published: list[tuple[int, int, str | None]] = []
    for start, end in itertools.pairwise(bounds):
        told, _, state, _ = released.advance(saved, groups[start:end], store)
        published += [(t, seq, item) for t, seq, item, part in told if item and not part]
        saved = json.loads(json.dumps(state))
    expected = evaluate_streams([Stream("s", plan)], events, lateness=lateness)["s"][""]
    assert sorted(published) == sorted(tuple(e) for e in expected)


def test_a_periodic_window_over_a_released_run_closes_once_across_micro_batches() -> None:
    """α over sliding periodic windows (4 ticks every 2) of a released run: each window
    is published once, when a later time comes, with every item it holds, however the
    micro-batches cut its items (an item of two windows is kept for the second)."""
    from roses_app.algebra.plan.operators import Aggregate, Source, TimeWindow, XQuery
    from roses_app.spark.sequential import Event
    from roses_app.spark.stages import ClosedWindowsOperator

    spec = TimeWindow(4, 2, 0, 0)  # the window refreshed at r holds r-3 .. r
    counted = XQuery("<item><title>{ count($items) }</title></item>")
    node = Aggregate(Window(Source("a", "published"), spec), counted, "s")

    def failed(item: str | None, exc: BaseException) -> None:
        raise AssertionError(f"{item}: {exc}")

    stage = ClosedWindowsOperator(node, spec, (), failed)
    first = [Event(t, t, f"<item><title>{t}</title></item>") for t in (1, 2, 3)]
    out, kept = stage.advance([], first, 0)
    assert [(e.ts, "<title>2</title>" in (e.item or "")) for e in out] == [(2, True)]
    later = [Event(6, 6, "<item><title>6</title></item>")]
    saved = [Event(*e) for e in json.loads(json.dumps(kept))]  # as the state keeps it
    out, kept = stage.advance(saved, later, 0)
    # the window ending at 4 (items 1, 2, 3), and not again the one ending at 2
    assert [(e.ts, "<title>3</title>" in (e.item or "")) for e in out] == [(4, True)]
    assert [e.ts for e in kept if e.item is not None] == [3, 6]  # 3 is in the window of 6


def test_every_operator_over_publication_time_is_lowered_in_the_late_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On Spark, each node type an operator over publication time may be (a released
    run's end, late windows, a grouping or a join of items, a join of released
    sides) goes to the late graph's operator, whichever module lowers it over ingest
    time (a windowed grouping's handler once lowered it as over ingest time)."""
    from types import SimpleNamespace

    from strategies import REDUCER

    from roses_app.algebra.plan.operators import (
        Aggregate,
        CountWindow,
        Diff,
        GroupBy,
        Join,
        Semijoin,
        SessionWindow,
        Source,
        TimeWindow,
        Unnest,
        WindowedGrouping,
    )
    from roses_app.algebra.planner.late_groups import late_unit
    from roses_app.spark import lower_late
    from roses_app.spark.lower import lower

    wire = Source("wire", "published")
    pairs = Join(Window(wire, TimeWindow(5, None, 0, 0)), Source("blog", "published"), "inner")
    nodes = [
        Window(pairs, CountWindow(2)),
        Delta(pairs, "insert"),
        Nest(pairs),
        Unnest(pairs),
        WindowedGrouping(pairs, "string(title)", 2, REDUCER),
        Aggregate(Window(pairs, CountWindow(2)), REDUCER, "s"),
        GroupBy(Window(pairs, SessionWindow(3)), "string(title)", REDUCER, "s"),
        pairs,
        Semijoin(wire, Window(pairs, TimeWindow(5, None, 0, 0)), "true()"),
        Diff(wire, Source("blog", "published"), "true()"),
        WindowedGrouping(wire, "string(title)", 2, REDUCER),
        Aggregate(Window(wire, TimeWindow(10, 10, 0, 0)), REDUCER, "s"),
    ]
    ran: list[Node] = []

    def late(node: Node, ctx: object) -> str:
        ran.append(node)
        return "late"

    monkeypatch.setattr(lower_late, "late_unit_frame", late)
    for node in nodes:
        assert late_unit(node), node
        assert lower(node, SimpleNamespace(computed={}, lowered={})) == "late"  # type: ignore[arg-type]
    assert ran == nodes
    assert set(map(type, nodes)) == set(lower_late.INGEST_LOWERING)
