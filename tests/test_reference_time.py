"""The reference evaluator's operators of time, and their feeds.yaml form."""

from __future__ import annotations

from pathlib import Path

import pytest
import seed_tables as seed
from hypothesis import given, settings
from hypothesis import strategies as st

from roses_app.algebra.plan.operators import (
    Aggregate,
    CountWindow,
    Delta,
    Diff,
    GroupBy,
    Join,
    Nest,
    Semijoin,
    Source,
    TimeWindow,
    Unnest,
    Window,
    WindowedGrouping,
    XQuery,
)
from roses_app.algebra.reference.evaluator import RefEvent, RefInput, evaluate
from roses_app.algebra.reference.time_operators import WindowCall
from roses_app.algebra.time.windows import count_window, time_window
from roses_app.config import parse_config
from roses_app.errors import ConfigError


def item(title: str, extra: str = "") -> str:
    return f"<item><title>{title}</title>{extra}</item>"


@st.composite
def timed_events(draw: st.DrawFn) -> list[RefEvent]:
    times = sorted(draw(st.lists(st.integers(0, 30), max_size=30)))
    return [RefEvent(t, n, item(str(n))) for n, t in enumerate(times)]


@st.composite
def time_specs(draw: st.DrawFn) -> TimeWindow:
    period = draw(st.none() | st.integers(1, 8))
    start = draw(st.integers(0, 6)) if period else 0
    return TimeWindow(draw(st.integers(1, 8)), period, start, draw(st.integers(0, 3)))


@settings(max_examples=150, deadline=None)
@given(timed_events(), time_specs(), st.integers(0, 40))
def test_window_call_is_the_time_window_of_the_seed_tables(
    events: list[RefEvent], spec: TimeWindow, t: int
) -> None:
    expected = time_window(
        events, t, spec.width, period=spec.period, start=spec.start, delay=spec.delay
    )
    assert WindowCall(events, spec).at(t) == expected


@settings(max_examples=100, deadline=None)
@given(timed_events(), st.integers(1, 8), st.integers(0, 40))
def test_window_call_is_the_count_window(events: list[RefEvent], n: int, t: int) -> None:
    assert WindowCall(events, CountWindow(n)).at(t) == count_window(events, t, n)


def titles(events: list[RefEvent]) -> list[tuple[int, str]]:
    import re

    return [(e.ts, re.sub(r".*<title>(.*?)</title>.*", r"\1", e.item or "")) for e in events]


LEFT = [RefInput("a", 10, 1, item("l1", "<k>x</k>")), RefInput("a", 30, 4, item("l2", "<k>y</k>"))]
RIGHT = [RefInput("b", 5, 0, item("r0", "<k>x</k>")), RefInput("b", 20, 2, item("r1", "<k>y</k>"))]
ON = "$i1/k = $i2/k"


def test_a_windowed_join_emits_each_pair_once_at_the_later_time() -> None:
    plan = Join(Source("a"), Window(Source("b"), TimeWindow(15)), "inner", ON)
    out = evaluate(plan, LEFT + RIGHT)
    # l1 meets r0 (5 ∈ [−4, 10]); l2 meets r1 (20 ∈ [16, 30]); r1 does not see l1 (ω0)
    assert [(e.ts, e.seq) for e in out] == [(10, 1), (30, 4)]
    assert all("roses:related" in (e.item or "") for e in out)


MS = 1000  # the horizon counts whole milliseconds, like Spark's watermark


def test_outer_rows_wait_until_their_time_is_decided() -> None:
    plan = Join(Source("a"), Window(Source("b"), TimeWindow(3 * MS)), "left", ON)
    events = [RefInput(e.source, e.ts * MS, e.seq, e.item) for e in LEFT + RIGHT]
    assert titles(evaluate(plan, events)) == [(10 * MS, "l1")]  # t=30ms is not decided yet
    late = [*events, RefInput("", 31 * MS, 9, None)]  # a heartbeat: time 31ms has come
    assert titles(evaluate(plan, late)) == [(10 * MS, "l1"), (30 * MS, "l2")]
    assert titles(evaluate(plan, late, lateness=2 * MS)) == [(10 * MS, "l1")]
    # 30.999ms is still millisecond 30: not later than 30ms for the watermark
    assert titles(evaluate(plan, [*events, RefInput("", 31 * MS - 1, 9, None)])) == [
        (10 * MS, "l1")
    ]


def test_semijoin_and_diff_split_the_left_stream() -> None:
    right = Window(Source("b"), TimeWindow(15))
    events = [*LEFT, *RIGHT, RefInput("", 99 * MS, 9, None)]
    assert titles(evaluate(Semijoin(Source("a"), right, ON), events)) == [(10, "l1"), (30, "l2")]
    narrow = Window(Source("b"), TimeWindow(5))
    assert titles(evaluate(Semijoin(Source("a"), narrow, ON), events)) == []
    assert titles(evaluate(Diff(Source("a"), narrow, ON), events)) == [(10, "l1"), (30, "l2")]


REDUCE = XQuery("<item><title>{ string-join($items/title, '+') }</title></item>")


def test_a_tumbling_aggregate_is_one_stamped_item_per_closed_window() -> None:
    events = [RefInput("a", t, t, item(f"i{t}")) for t in (1, 2, 5, 9)]
    plan = Aggregate(Window(Source("a"), TimeWindow(4, 4)), REDUCE, "digest")
    out = evaluate(plan, [*events, RefInput("", 12, 99, None), RefInput("", MS, 100, None)])
    # windows [1, 4] (refresh 4) and [5, 8]; [9, 12] holds nothing
    assert titles(out) == [(4, "i1+i2"), (8, "i5"), (12, "i9")]
    early = evaluate(plan, [*events, RefInput("", 999, 99, None)])
    assert early == []  # the horizon is still 0: nothing is closed
    assert '<guid isPermaLink="false">roses:digest/1/4</guid>' in (out[0].item or "")
    assert 'start="1970-01-01T00:00:00.000001Z"' in (out[0].item or "")


def test_group_by_keys_each_time() -> None:
    events = [RefInput("a", 1, n, item(t)) for n, t in enumerate(["a1", "b1", "a2"])]
    plan = GroupBy(Source("a"), "substring(title, 1, 1)", REDUCE, "g")
    out = evaluate(plan, [*events, RefInput("", MS, 9, None)])
    assert titles(out) == [(1, "a1+a2"), (1, "b1")]
    assert "roses:g/1/1/a</guid>" in (out[0].item or "")


def test_windowed_grouping_is_flamestreams_example() -> None:
    events = [RefInput("a", n, n, item(str(n), f"<k>{n % 2}</k>")) for n in range(1, 9)]
    reduce = XQuery("<item><title>({ string-join($items/title, '|') })</title></item>")
    out = evaluate(WindowedGrouping(Source("a"), "string(k)", 3, reduce), events)
    assert [t for _, t in titles(out)] == [f"({group})" for group in seed.FLAMESTREAM]


def test_nest_then_unnest_gives_the_stream_back() -> None:
    events = [RefInput("a", t, n, item(f"i{n}")) for n, t in enumerate([1, 1, 2])]
    nested = evaluate(Nest(Source("a")), [*events, RefInput("", MS, 9, None)])
    assert len(nested) == 2
    again = evaluate(Unnest(Nest(Source("a"))), [*events, RefInput("", MS, 9, None)])
    assert titles(again) == [(1, "i0"), (1, "i1"), (2, "i2")]


def test_delta_of_a_window_gives_arrivals_and_departures() -> None:
    events = [RefInput("a", t, t, item(f"i{t}")) for t in (1, 2, 4)]
    window = Window(Source("a"), TimeWindow(2))
    assert titles(evaluate(Delta(window, "insert"), events)) == [(1, "i1"), (2, "i2"), (4, "i4")]
    assert titles(evaluate(Delta(window, "delete"), events)) == [(4, "i1"), (4, "i2")]


CONFIG = """\
sources:
  a: {feed: "http://a.org/rss"}
  b: {feed: "http://b.org/rss"}
streams:
  w: {window: {from: a, time: 1h, every: 10m, start: "2024-01-01T00:00:00Z", delay: 1m}}
  c: {window: {from: a, count: 5}}
  j:
    join: {left: a, right: {window: {from: b, time: 24h}}, on: "$i1/link = $i2/link",
           kind: left, combine: "<item>{ $i1/title }</item>"}
  p: {product: {left: a, right: b}}
  s: {semijoin: {left: a, right: {window: {from: b, time: 2h}}, on: "$i1/title = $i2/title"}}
  d: {diff: {left: a, right: b, on: "$i1/title = $i2/title"}}
  dm: {delta: {from: c, kind: delete}}
  ag: {aggregate: {from: {window: {from: a, time: 1d, every: 1d}}, reduce: "<item/>"}}
  gb: {group: {from: a, by: "string(category)", reduce: "<item/>"}}
  fg: {grouping: {from: a, by: "string(category)", window: 3, reduce: "<item/>"}}
  n: {unnest: {from: {nest: {from: a}}}}
"""
HOUR = 3_600_000_000


def test_feeds_yaml_builds_every_operator_of_time(tmp_path: Path) -> None:
    streams = parse_config(CONFIG, tmp_path / "feeds.yaml").streams
    plans = {name: s.plan for name, s in streams.items()}
    assert plans["w"] == Window(
        Source("a"), TimeWindow(HOUR, HOUR // 6, 1_704_067_200_000_000, HOUR // 60)
    )
    assert plans["c"] == Window(Source("a"), CountWindow(5))
    join = plans["j"]
    assert isinstance(join, Join) and join.kind == "left" and join.combine is not None
    assert join.right == Window(Source("b"), TimeWindow(24 * HOUR))
    assert plans["p"] == Join(Source("a"), Source("b"), "product", "true()")
    assert isinstance(plans["s"], Semijoin) and isinstance(plans["d"], Diff)
    assert plans["dm"] == Delta(Window(Source("a"), CountWindow(5)), "delete")
    aggregate = plans["ag"]
    assert isinstance(aggregate, Aggregate) and aggregate.stream == "ag"
    assert isinstance(plans["gb"], GroupBy) and isinstance(plans["fg"], WindowedGrouping)
    assert plans["n"] == Unnest(Nest(Source("a")))


BAD = """\
sources:
  a: {feed: "http://a.org/rss"}
streams:
  w1: {window: {from: a}}
  w2: {window: {from: a, count: 3, every: 1h}}
  j1: {join: {left: a, right: {window: {from: a, count: 3}}, on: "true()"}}
  j2: {join: {left: a, right: a, on: "$i1/x = ", kind: inner}}
  j3: {join: {left: a, right: a, on: "true()", kind: outer}}
  d1: {delta: {from: a, kind: both}}
  g1: {grouping: {from: a, by: "string(x)", window: 0, reduce: "<item/>"}}
"""


def test_mistakes_in_operators_of_time_are_reported_at_their_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(BAD, tmp_path / "feeds.yaml")
    found = {(p.line, p.message.split(":")[0].split(" (")[0]) for p in info.value.problems}
    lines = {line for line, _ in found}
    assert {4, 5, 6, 7, 8, 9, 10} <= lines, found
    text = "\n".join(f"{p.line}: {p.message}" for p in info.value.problems)
    assert "4: window takes one of time" in text
    assert "5: window.every only applies to time windows" in text
    assert "a join input may be a sliding time window" in text
    assert "8: join.kind must be inner, left or full, got 'outer'" in text
    assert "9: delta.kind must be insert or delete" in text
    assert "10: grouping.window must be a positive whole number" in text
