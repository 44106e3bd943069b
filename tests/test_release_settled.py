"""Released runs over an operator's results over publication time
(roses_app.algebra.time.release, "fed by an operator's results"): a window, a delta, a
nest, or an aggregate or a group over them, reading the results of a join or a
windowed grouping that reports on close, or of an aggregate or a group over periodic
windows (revised until the clock decides them).  The operator and the release,
micro-batch after micro-batch with their state through JSON, give what the reference
evaluator gives; Spark too; the config takes these plans and still refuses what no
engine runs.  The ``event_time_chained`` replay fixture runs both engines end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import (
    SPARK_EXAMPLES,
    fed_item_unions,
    fed_operator_plans,
    out_of_order_event_lists,
    released_chains,
)
from test_differential import assert_engines_agree
from test_lower_late import graph_results

from roses_app.algebra.plan.operators import (
    Aggregate,
    Node,
    Stream,
)
from roses_app.algebra.reference.evaluator import RefInput, evaluate_streams
from roses_app.algebra.time.eventtime import (
    fed_operators,
    late_sequential,
)
from roses_app.algebra.time.panes import Arrival
from roses_app.algebra.time.release_results import (
    FedRelease,
    fed_horizon,
    fed_release,
    mark_seq,
)
from roses_app.config import parse_config

Row = tuple[int, int, str | None]


def chained_results(plan: Node, events: list[RefInput], cuts: list[int]) -> list[Row]:
    """The run's results when the operators below and the release run batch after
    batch (cut before the ingest times ``cuts``), as the Spark operator runs them
    (:class:`~roses_app.spark.lower_late.LateGraph`, its state through JSON)."""
    found = graph_results([plan], events, cuts)[plan]
    return [(t, seq, item) for part, t, seq, item in found if not part]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=out_of_order_event_lists(max_size=30),
    # (unions with items drawn as often as the rest: they are one branch of many there)
    plan=released_chains(fed_operator_plans() | fed_item_unions()).filter(fed_release),
    cuts=st.lists(st.integers(1, 30), max_size=4),
)
def test_a_run_over_an_operators_results_cut_into_micro_batches_equals_the_reference(
    events: list[RefInput], plan: Node, cuts: list[int]
) -> None:
    """Whatever the micro-batches: the operators' results through their clocks, the
    items of a union with them through the run's own release (too late: dropped)."""
    expected = evaluate_streams([Stream("s", plan)], events)["s"][""]
    assert sorted(chained_results(plan, events, cuts)) == sorted(tuple(e) for e in expected)


def test_results_wait_for_the_horizon_told_and_come_out_in_time_order() -> None:
    """Results come out of order and nothing is too late; the horizon an operator
    tells (a heartbeat at seq -1) is not released, a heartbeat that came is."""
    release = FedRelease()
    out, _ = release.advance([[Arrival(20, 4, "<item>b</item>"), Arrival(15, -1, None)]])
    assert out == []  # 20 is not before the horizon 15
    arrivals = [Arrival(12, 2, "<item>a</item>"), Arrival(26, 7, None), Arrival(25, -1, None)]
    out, _ = release.advance([arrivals])
    # 12 is 13 before the horizon: the operator had decided it was on time
    assert [(a.time, a.item) for a in out] == [(12, "<item>a</item>"), (20, "<item>b</item>")]
    out, late = release.advance([[Arrival(35, -1, None)]])
    assert [(a.time, a.seq, a.item) for a in out] == [(26, 7, None)]  # not the horizons
    assert late == []


def test_over_a_union_the_least_horizon_of_its_branches_decides() -> None:
    release = FedRelease(2)
    first = [Arrival(5, 3, "<item>a</item>"), Arrival(30, mark_seq(0), None)]
    assert release.advance([first]) == ([], [])  # branch 1 has told nothing yet
    saved = json.loads(json.dumps(release.dump()))
    release = FedRelease.load(2, saved)
    out, _ = release.advance([[Arrival(10, mark_seq(1), None), Arrival(8, 4, "<item>b</item>")]])
    assert [a.item for a in out] == ["<item>a</item>", "<item>b</item>"]  # before 10
    assert release.horizon == 10


HEAD = (
    "sources:\n  wire: {feed: 'http://example.org/wire', time: published}\n"
    "  blog: {feed: 'http://example.org/blog', time: published}\nstreams:\n"
    "  pairs:\n    join:\n      left: {window: {from: wire, time: 1h}}\n"
    "      right: {window: {from: blog, time: 1h}}\n"
    "      on: '$i1/category = $i2/category'\n      lateness: 2h\n"
)


H = 3_600_000_000  # an hour in µs
# Streams over HEAD a released run reads, each with the lateness of what the
# operators below it decided (the least of their horizons), None for the others.
FED_STREAMS: list[tuple[str, int | None]] = [
    ("hourly: {aggregate: {from: {window: {from: pairs, time: 1h, every: 1h}},"
     " reduce: '<item/>'}}", 2 * H),
    ("recent: {window: {from: pairs, count: 10}}", 2 * H),
    ("some: {filter: {from: pairs, where: 'category'}}", None),
    ("recent_some: {window: {from: some, count: 10}}", 2 * H),
    ("firsts: {grouping: {from: wire, by: string(category), window: 2, reduce: '<item/>'}}", None),
    ("new_firsts: {delta: {from: {window: {from: firsts, time: 1d}}}}", 0),
    ("by_hour: {group: {from: {window: {from: wire, time: 1h, every: 1h}},"
     " by: string(category), reduce: '<item/>', lateness: 30m, report: on-change}}", None),
    ("daily: {aggregate: {from: {window: {from: by_hour, time: 1d, every: 1d}},"
     " reduce: '<item/>'}}", H // 2),
    ("tens: {aggregate: {from: {window: {from: wire, count: 10}}, reduce: '<item/>'}}", None),
    ("last_tens: {window: {from: tens, count: 3}}", 0),
    ("visits: {aggregate: {from: {window: {from: wire, gap: 1h}}, reduce: '<item/>',"
     " lateness: 2h}}", None),
    ("new_visits: {delta: {from: visits}}", 2 * H + H - 1),  # and a session's gap
    ("both: {window: {from: {union: [pairs, firsts]}, count: 5}}", 2 * H),
    # an optimistic join's final results (its on-close twin's)
    ("eager: {join: {left: wire, right: blog, kind: left, on: 'true()',"
     " report: optimistic, lateness: 1h}}", None),
    ("later: {window: {from: eager, count: 3}}", H),
    # windows' results filtered, mapped, and in a union with a join's (the least)
    ("big: {filter: {from: by_hour, where: 'number(title) > 9'}}", None),
    ("later_big: {window: {from: big, count: 3}}", H // 2),
    ("titles: {delta: {from: {window: {from: {map: {from: tens, xpath: 'title'}},"
     " count: 2}}}}", 0),
    ("mixed: {window: {from: {union: [by_hour, pairs]}, count: 3}}", 2 * H),
    # a union of an operator's results with items (the run's own clock decides them)
    ("with_items: {window: {from: {union: [wire, pairs, blog]}, count: 3}}", 2 * H),
    # a run over a run's results (hourly's: the last time it released)
    ("new_hours: {delta: {from: {window: {from: hourly, count: 2}}}}", 0),
    # over a join's results: a report policy, sessions, a windowed grouping (in time
    # order, each released time one arrival)
    ("live: {aggregate: {from: {window: {from: pairs, time: 1h, every: 1h}},"
     " reduce: '<item/>', report: on-change}}", 2 * H),
    ("streaks: {aggregate: {from: {window: {from: pairs, gap: 1h}}, reduce: '<item/>'}}",
     2 * H),
    ("in_turn: {grouping: {from: pairs, by: string(category), window: 2,"
     " reduce: '<item/>'}}", 2 * H),
    # over them: a policy's final results (its on-close twin's), a session's once
    # a gap has passed its last item
    ("after_live: {window: {from: live, count: 2}}", 0),
    ("after_streaks: {window: {from: streaks, count: 2}}", H - 1),
    # a join of a join's results and items: both sides released together, then
    # joined in time order (nothing late: its results before its clock are out)
    ("pairs_blog: {join: {left: pairs, right: {window: {from: blog, time: 1h}},"
     " on: 'true()', kind: left}}", None),
    ("new_pairs_blog: {delta: {from: {window: {from: pairs_blog, count: 2}}}}", 0),
]  # fmt: skip


def test_the_config_takes_operators_of_time_over_joins_groupings_and_periodic_windows(
    tmp_path: Path,
) -> None:
    text = HEAD + "".join(f"  {stream}\n" for stream, _ in FED_STREAMS)
    config = parse_config(text, tmp_path / "feeds.yaml")
    clock = 10**12
    for stream, lateness in FED_STREAMS:
        if lateness is None:
            continue
        plan = config.streams[stream.split(":")[0]].plan
        assert fed_release(plan), stream
        # what the operators below decided, each with its lateness, the least of them
        operators = fed_operators(late_sequential(plan))  # type: ignore[arg-type]
        assert operators is not None
        assert min(fed_horizon(op, clock) for op in operators) == clock - lateness  # type: ignore[type-var]
    # roses explain names what a run reads
    from roses_app.algebra.planner.explain import describe

    both = describe(config.streams["both"].plan)
    assert "the results of Join at step pairs/join and WindowedGrouping at step" in both
    later = describe(config.streams["later"].plan)
    assert "Join at step eager/join (its final results, computed on close)" in later
    joined = describe(config.streams["pairs_blog"].plan)
    assert "reading both sides released together in time order once Join at step" in joined
    after = describe(config.streams["after_live"].plan)
    assert "Aggregate at step live/aggregate (its final results, computed on close)" in after


@pytest.mark.spark
@SPARK_EXAMPLES
@given(
    events=out_of_order_event_lists(max_size=30),
    plans=st.lists(
        released_chains(fed_operator_plans()).filter(fed_release), min_size=2, max_size=2
    ),
)
def test_spark_equals_reference_on_runs_over_operators_results(
    events: list[RefInput], plans: list[Node], spark: Any, tmp_path: Path
) -> None:
    assert all(fed_release(plan) for plan in plans)
    assert_engines_agree(plans, events, tmp_path)


def test_the_clock_told_after_each_micro_batch_is_not_a_time_that_came() -> None:
    """A window read as a stream gives its content at every time of its input: at
    the pairs' times and at the heartbeats', never at the clocks the join told after
    each micro-batch (those depend on how arrivals were cut)."""
    from roses_app.algebra.plan.operators import CountWindow, Join, Source, Window

    join = Join(Source("a", "published"), Source("b", "published"), "inner", "true()")
    plan = Window(join, CountWindow(1))
    item = "<item><title>{}</title></item>"
    events = [
        RefInput("a", 1, 1, item.format("a1"), 5),
        RefInput("b", 2, 2, item.format("b1"), 5),
        RefInput("a", 3, 3, item.format("a2"), 9),
        RefInput("", 12, 4, None),
        RefInput("b", 13, 5, item.format("b2"), 20),
        RefInput("a", 30, 6, item.format("a3"), 30),
    ]
    expected = evaluate_streams([Stream("s", plan)], events)["s"][""]
    # the pair at 5, and again at 12, a heartbeat: not at 9, 20 or 30, clocks told
    assert [e.ts for e in expected if e.item is not None] == [5, 12]
    for cuts in ([], [2, 3, 12, 13, 30]):  # each arrival a micro-batch
        assert chained_results(plan, events, cuts) == [tuple(e) for e in expected]


def test_a_session_is_read_once_no_item_on_time_can_extend_it() -> None:
    """Sessions (gap 5, lateness 3, reported on change): with the clock at 17, the
    session of 10 still takes an item at 14 (it is kept until the clock passes
    10 + 5 - 1 + 3), so it is read only once the clock is the lateness and the gap
    past it, in its last version; the session of 17, published and then merged into
    it, not at all."""
    from roses_app.algebra.plan.operators import (
        CountWindow,
        Report,
        SessionWindow,
        Source,
        TimeWindow,
        Window,
    )
    from roses_app.algebra.plan.operators import XQuery as Query

    titles = Query("<item><title>{ string-join($items/title, '+') }</title></item>")
    sessions = Aggregate(
        Window(Source("a", "published"), SessionWindow(5)),
        titles,
        "s",
        3,
        report=Report(True, True),
    )
    plan = Window(sessions, CountWindow(1))
    item = "<item><title>{}</title></item>"
    events = [
        RefInput("a", 1, 1, item.format("x"), 10),
        RefInput("a", 2, 2, item.format("y"), 17),
        RefInput("a", 3, 3, item.format("z"), 14),
        RefInput("", 100, 4, None),
    ]
    expected = evaluate_streams([Stream("s", plan)], events)["s"][""]
    shown = [(e.ts, e.item.split("<title>")[1].split("<")[0]) for e in expected if e.item]
    # z bridged them: one session, y's merged into x's (its notice is not read)
    assert shown == [(17, "x+z+y")]
    for cuts in ([], [2, 3, 100]):  # each arrival a micro-batch
        assert chained_results(plan, events, cuts) == [tuple(e) for e in expected]
    # everything read, in a window of 100 ticks: that one result, never y's notice
    seen = Window(sessions, TimeWindow(100))
    found = evaluate_streams([Stream("s", seen)], events)["s"][""]
    assert {e.item for e in found} == {e.item for e in expected}


def test_a_group_over_sessions_closes_them_at_every_time_it_released() -> None:
    """The run of a group over sessions (gap 1) releases the untagged item at 2 and
    tells its horizon, 2: the session of the lava item at 1 must be out by then,
    though no item of the group came at 2 (it once came a batch later, and the run
    over the results and items, which had taken time 1, dropped it as late)."""
    from roses_app.algebra.plan.operators import (
        CountWindow,
        GroupBy,
        SessionWindow,
        Source,
        Union,
        Window,
    )
    from roses_app.algebra.plan.operators import XQuery as Query

    a = Source("a", "published")
    titles = Query("<item><title>{ string-join($items/title, '+') }</title></item>")
    hot = "if (contains(title, 'lava')) then 'hot' else ()"
    sessions = GroupBy(Window(Window(a, CountWindow(1)), SessionWindow(1)), hot, titles, "s")
    plan = Window(Union((sessions, a)), CountWindow(1))
    assert fed_release(plan)
    item = "<item><title>{}</title></item>"
    events = [
        RefInput("a", 1, 1, item.format("lava"), 1),
        RefInput("a", 1, 2, item.format("volcano"), 2),
        RefInput("", 3, 3, None),
        RefInput("a", 4, 4, item.format("volcano"), 4),
    ]
    expected = evaluate_streams([Stream("s", plan)], events)["s"][""]
    assert any("<title>lava</title>" in (e.item or "") and e.seq == 1 for e in expected)
    for cuts in ([], [3], [4]):
        assert sorted(chained_results(plan, events, cuts)) == sorted(tuple(e) for e in expected)
