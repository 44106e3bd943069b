"""Event time (``time: published``): configuration, the plausible-date rule, replay
and spool input.  The engines' outputs are checked on the ``event_time`` replay
fixture (tests/test_replay.py runs it through both)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roses_app.algebra.plan.operators import Node, Source
from roses_app.algebra.planner.explain import describe
from roses_app.config.loader import parse_config
from roses_app.dates import EARLIEST_PUBLISHED, plausible_published
from roses_app.errors import ConfigError
from roses_app.items import micros_of
from roses_app.replay import read_events
from roses_app.spool import Spool

DAY = 86_400_000_000
NOW = micros_of(datetime(2026, 11, 1, tzinfo=UTC))


def problems_in(text: str, tmp_path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, tmp_path / "feeds.yaml")
    return [f"{p.line}: {p.message}" for p in info.value.problems]


def test_a_publication_date_is_believed_between_1990_and_a_day_ahead() -> None:
    assert plausible_published(NOW - 5 * DAY, NOW) == NOW - 5 * DAY
    assert plausible_published(NOW + DAY, NOW) == NOW + DAY  # the bound itself
    assert plausible_published(NOW + DAY + 1, NOW) is None
    assert plausible_published(NOW + 3 * DAY, NOW, max_future=7 * DAY) == NOW + 3 * DAY
    assert plausible_published(EARLIEST_PUBLISHED, NOW) == EARLIEST_PUBLISHED
    assert plausible_published(EARLIEST_PUBLISHED - 1, NOW) is None
    assert plausible_published(0, NOW) is None  # the epoch: a placeholder
    assert plausible_published(None, NOW) is None


CONFIG = """
sources:
  wire: {feed: "http://example.org/wire", time: published}
  blog: {feed: "http://example.org/blog"}
streams:
  both:
    union: [wire, blog]
  blog_by_date:
    time: published
    filter: {from: blog, where: "true()"}
  wire_as_fetched:
    time: ingest
    filter: {from: wire, where: "true()"}
  view:            # a stream named by another keeps its own time
    time: ingest
    union: [both, blog_by_date]
"""


def sources_of(plan: object) -> dict[str, str]:
    return {n.name: n.time for n in plan.walk() if isinstance(n, Source)}  # type: ignore[attr-defined]


def test_time_is_set_per_source_and_a_stream_overrides_it_for_the_sources_it_names(
    tmp_path: Path,
) -> None:
    config = parse_config(CONFIG, tmp_path / "feeds.yaml")
    assert config.sources["wire"].time == "published"
    assert config.sources["blog"].time == "ingest"
    assert sources_of(config.streams["both"].plan) == {"wire": "published", "blog": "ingest"}
    assert sources_of(config.streams["blog_by_date"].plan) == {"blog": "published"}
    assert sources_of(config.streams["wire_as_fetched"].plan) == {"wire": "ingest"}
    view = [n for n in config.streams["view"].plan.walk() if isinstance(n, Source)]
    assert {(n.name, n.time) for n in view} == {
        ("wire", "published"),
        ("blog", "ingest"),
        ("blog", "published"),
    }
    assert describe(Source("wire", "published")) == "Source wire (published time)"


def test_a_bad_time_is_reported_and_a_join_of_a_groupings_results_runs(
    tmp_path: Path,
) -> None:
    """A bad ``time:`` with its line; a join of a windowed grouping's results and items
    over publication time is no problem: both sides are released together."""
    problems = problems_in(
        "sources:\n"
        "  wire: {feed: 'http://example.org/wire', time: pubdate}\n"
        "  blog: {feed: 'http://example.org/blog', time: published}\n"
        "streams:\n"
        "  a:\n"
        "    time: 12\n"
        "    filter: {from: blog, where: 'true()'}\n"
        "  last:\n"
        "    join:\n"
        "      left: {window: {from: {grouping: {from: blog, by: 'string(title)', window: 2,"
        " reduce: '<item/>'}}, time: 1h}}\n"
        "      right: blog\n"
        "      on: 'true()'\n",
        tmp_path,
    )
    assert problems[0].startswith(
        "2: sources.wire.time must be one of ingest, published (published: each item's "
        "publication time is its time), got a string ('pubdate')"
    )
    assert problems[1].startswith("6: streams.a.time must be one of ingest, published")
    assert len(problems) == 2


def test_an_operator_over_publication_time_reading_ingest_time_results_is_refused(
    tmp_path: Path,
) -> None:
    """Every operator runs over publication time, over items and over the results of
    operators over publication time; the results of an operator over ingest time
    have no clock the reader could wait for: refused, naming that operator."""
    problems = problems_in(
        "sources:\n"
        "  wire: {feed: 'http://example.org/wire', time: published}\n"
        "  blog: {feed: 'http://example.org/blog'}\n"
        "streams:\n"
        "  hourly: {aggregate: {from: {window: {from: blog, time: 1h, every: 1h}},"
        " reduce: '<item/>'}}\n"
        "  both: {join: {left: wire, right: {window: {from: hourly, time: 1h}},"
        " on: 'true()'}}\n",
        tmp_path,
    )
    assert len(problems) == 1
    assert problems[0].startswith("6: stream 'both': Join at step both/join reads items in")
    assert "the results of Aggregate at step hourly/aggregate" in problems[0]
    assert "read the sources below both with the same time:" in problems[0]


def test_replay_keeps_a_plausible_published_time_and_logs_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    at = "2026-11-01T00:00:00Z"
    lines = [
        {"source": "s", "ts": at, "item": "<item/>"},
        {"source": "s", "ts": at, "published": "2026-10-30T12:00:00Z", "item": "<item/>"},
        {"source": "s", "ts": at, "published": "1970-01-01T00:00:00Z", "item": "<item/>"},
        {"source": "s", "ts": at, "published": "2027-01-01T00:00:00Z", "item": "<item/>"},
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with caplog.at_level(logging.WARNING):
        events = read_events(path)
    assert [e.published for e in events.events] == [
        None,
        micros_of(datetime(2026, 10, 30, 12, tzinfo=UTC)),
        None,
        None,
    ]
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2
    assert warned[0].startswith(f"{path}:3: source s: published 1970-01-01T00:00:00Z")
    assert warned[1].startswith(f"{path}:4: source s: published 2027-01-01T00:00:00Z")


def test_replay_refuses_a_published_time_of_another_kind_than_ts(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    line = {"source": "s", "ts": 5, "published": "2026-01-01T00:00:00Z", "item": "<i/>"}
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match=r":1: published must be of the same kind as ts"):
        read_events(path)


def test_the_spool_keeps_plausible_dates_and_counts_the_others(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", clock=lambda: NOW)
    try:
        events = spool.append(
            "wire",
            [
                ("<item><guid>1</guid></item>", NOW - DAY),
                ("<item><guid>2</guid></item>", NOW + 2 * DAY),
                ("<item><guid>3</guid></item>", 42),
                ("<item><guid>4</guid></item>", None),
            ],
        )
        assert [e.published for e in events] == [NOW - DAY, None, None, None]
        assert spool.implausible_dates == {"wire": 2}
    finally:
        spool.close()
    wider = Spool(tmp_path / "spool2", clock=lambda: NOW, max_future=3 * DAY)
    try:
        (event,) = wider.append("wire", [("<item><guid>2</guid></item>", NOW + 2 * DAY)])
        assert event.published == NOW + 2 * DAY
    finally:
        wider.close()


def test_a_poll_s_implausible_dates_are_one_warning_with_their_count_and_range(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A feed's archive of items from the 1980s is one line, not one per item."""
    from roses_app.spool import Spool

    spool = Spool(tmp_path / "spool", clock=lambda: NOW)
    old = [(f"<item><guid>{k}</guid></item>", 300_000_000_000_000 + k * DAY) for k in range(50)]
    try:
        with caplog.at_level("WARNING", logger="roses_app.spool"):
            spool.append_many([("archive", old), ("fresh", [("<item><guid>n</guid></item>", NOW)])])
    finally:
        spool.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and spool.implausible_dates == {"archive": 50}
    assert "source archive: 50 item(s) dated 1979-07-05" in lines[0]
    assert " to 1979-08-23" in lines[0]


def test_a_shared_input_is_seen_before_every_node_reading_it() -> None:
    from roses_app.algebra.plan.operators import (
        CountWindow,
        Filter,
        Join,
        Union,
        Window,
        WindowedGrouping,
        XQuery,
    )
    from roses_app.algebra.time.eventtime import inputs_first
    from roses_app.algebra.time.unsupported import unsupported_on_event_time

    wire = Source("wire", "published")
    grouping = WindowedGrouping(wire, "string(title)", 2, XQuery("<item/>"))
    # a join's side may be a sliding time window, not a count window
    group = Join(Window(grouping, CountWindow(2)), wire, "inner", "true()")
    plan = Union((group, Filter(group, "true()"), Filter(wire, "true()")))
    order = [id(n) for n in inputs_first(plan)]
    for node in plan.walk():
        assert all(order.index(id(c)) < order.index(id(node)) for c in node.children())
    assert [n for n, _ in unsupported_on_event_time(plan)] == [group]


def test_lateness_and_late_belong_to_windows_over_publication_time(tmp_path: Path) -> None:
    from roses_app.algebra.plan.operators import Aggregate

    head = (
        "settings: {lateness: 90s}\n"
        "sources:\n"
        "  wire: {feed: 'http://example.org/wire', time: published}\n"
        "  blog: {feed: 'http://example.org/blog'}\n"
        "streams:\n"
    )
    window = "{window: {from: %s, time: 1h, every: 1h}}"
    reduce = "'<item><title>{count($items)}</title></item>'"
    config = parse_config(
        head
        + f"  a: {{aggregate: {{from: {window % 'wire'}, reduce: {reduce}}}}}\n"
        + f"  b: {{aggregate: {{from: {window % 'wire'}, reduce: {reduce}, lateness: 2h,"
        + " late: publish}}\n",
        tmp_path / "feeds.yaml",
    )
    a, b = config.streams["a"].plan, config.streams["b"].plan
    assert isinstance(a, Aggregate) and isinstance(b, Aggregate)
    assert (a.lateness, a.late) == (90_000_000, "drop")  # settings.lateness by default
    assert (b.lateness, b.late) == (7_200_000_000, "publish")
    assert "lateness" not in repr(Aggregate(Source("blog"), a.reduce))  # unchanged repr

    problems = problems_in(
        head
        + f"  c: {{aggregate: {{from: {window % 'blog'}, reduce: {reduce}, lateness: 1h}}}}\n"
        + f"  d: {{aggregate: {{from: {window % 'wire'}, reduce: {reduce}, late: later}}}}\n"
        + "  e:\n"
        + "    filter:\n"
        + "      where: 'true()'\n"
        + f"      from: {{aggregate: {{from: {window % 'wire'}, reduce: {reduce},"
        + " late: publish}}\n",
        tmp_path,
    )
    assert problems[0].startswith(
        "6: aggregate.lateness applies to items read in publication time (time: published)"
    )
    assert problems[1].startswith("7: aggregate.late must be drop or publish")
    assert problems[2].startswith(
        "11: stream 'e': late: publish sends late items to the stream's late feed, so the "
        "Aggregate must be the stream itself"
    )
    assert len(problems) == 3


def test_report_policies_are_read_and_their_mistakes_reported(tmp_path: Path) -> None:
    from roses_app.algebra.plan.operators import Aggregate, Report

    head = "sources:\n  feed: {feed: 'http://example.org/feed'}\nstreams:\n"
    window = "{window: {from: feed, time: 1h, every: 1h}}"
    reduce = "'<item><title>{count($items)}</title></item>'"

    def agg(extra: str, source: str = window) -> str:
        return f"{{aggregate: {{from: {source}, reduce: {reduce}, {extra}}}}}"

    config = parse_config(
        head
        + f"  a: {agg('report: on-change')}\n"
        + f"  b: {agg('report: optimistic, tick: item')}\n"
        + f"  c: {agg('report: [non-empty, {every: 10m}], tick: time')}\n"
        + f"  d: {agg('report: non-empty')}\n",
        tmp_path / "feeds.yaml",
    )
    reports = {}
    for name in "abcd":
        plan = config.streams[name].plan
        assert isinstance(plan, Aggregate)
        reports[name] = plan.report
    assert reports == {
        "a": Report(on_close=False, on_change=True),
        "b": Report(on_close=True, on_change=True, tick="item"),
        "c": Report(on_close=False, every=600_000_000, tick="time"),
        "d": Report(),  # non-empty alone: when the window closes, as by default
    }
    problems = problems_in(
        head
        + f"  e: {agg('report: on-change', source='feed')}\n"
        + f"  f: {agg('report: sometimes')}\n"
        + f"  g: {agg('report: {every: 0s}')}\n"
        + f"  h: {agg('tick: hourly')}\n",
        tmp_path,
    )
    assert problems[0].startswith(
        "4: aggregate.report and .tick apply to an aggregate over a periodic time window"
    )
    assert problems[1].startswith(
        "5: aggregate.report: one of on-close, on-change, optimistic, non-empty, "
        "{every: DURATION}, or a list of them; got a string ('sometimes')"
    )
    assert problems[2].startswith("6: aggregate.report every must be a duration > 0")
    assert problems[3].startswith("7: aggregate.tick must be one of batch, item, time")
    assert len(problems) == 4


def test_a_group_over_a_count_window_in_publication_time_reports_on_close(
    tmp_path: Path,
) -> None:
    # a late item could take a key out of a published window: its results wait until
    # final (roses_app.algebra.time.release), and a report policy is refused with its line
    from roses_app.algebra.time.eventtime import late_sequential

    group = (
        "sources:\n  wire: {feed: 'http://example.org/wire', time: published}\nstreams:\n"
        "  g:\n    group:\n      from: {window: {from: wire, count: 3}}\n"
        "      by: string(category)\n      reduce: '<item/>'\n"
    )
    config = parse_config(group + "      lateness: 1h\n", tmp_path / "feeds.yaml")
    assert late_sequential(config.streams["g"].plan) is not None
    problems = problems_in(group + "      report: on-change\n", tmp_path)
    assert len(problems) == 1 and problems[0].startswith("9: group.report and .tick apply")
    config = parse_config(
        "sources:\n  wire: {feed: 'http://example.org/wire', time: published}\nstreams:\n"
        "  a: {aggregate: {from: {window: {from: wire, count: 3}}, reduce: '<item/>'}}\n",
        tmp_path / "feeds.yaml",
    )
    assert "a" in config.streams


def test_session_windows_are_read_by_aggregates_and_as_streams_not_by_joins(tmp_path: Path) -> None:
    from roses_app.algebra.plan.operators import Aggregate, SessionWindow, Window

    config = parse_config(
        "sources:\n  feed: {feed: 'http://example.org/feed'}\nstreams:\n"
        "  s: {aggregate: {from: {window: {from: feed, gap: 30m}}, reduce: '<item/>'}}\n",
        tmp_path / "feeds.yaml",
    )
    plan = config.streams["s"].plan
    assert isinstance(plan, Aggregate) and isinstance(plan.input, Window)
    assert plan.input.spec == SessionWindow(1_800_000_000)
    # read as a stream too: at each time, the session going on (see test_windows)
    config = parse_config(
        "sources:\n  feed: {feed: 'http://example.org/feed'}\nstreams:\n"
        "  a: {window: {from: feed, gap: 30m}}\n",
        tmp_path / "feeds.yaml",
    )
    assert config.streams["a"].plan == Window(Source("feed"), SessionWindow(1_800_000_000))
    problems = problems_in(
        "sources:\n  feed: {feed: 'http://example.org/feed'}\nstreams:\n"
        "  b: {window: {from: feed, gap: 30m, every: 1h}}\n"
        "  c: {window: {from: feed, gap: 30m, count: 3}}\n"
        "  d: {join: {left: {window: {from: feed, gap: 30m}}, right: feed, on: 'true()'}}\n",
        tmp_path,
    )
    assert problems == [
        "4: window.every only applies to time windows",
        "5: window takes one of time (a duration), count (a number of items) or gap (a "
        "duration: session windows)",
        "6: join.left: a join input may be a sliding time window (time: and delay:), not a "
        "count or periodic window; aggregate those instead",
    ]


def test_explain_says_how_late_items_are_taken_and_when_results_are_reported() -> None:
    from roses_app.algebra.plan.operators import Aggregate, Report, TimeWindow, Window, XQuery

    window = Window(Source("wire", "published"), TimeWindow(3_600_000_000, 3_600_000_000))
    plain = Aggregate(window, XQuery("<item/>"), "s")
    assert describe(plain) == "Aggregate α reduce inline XQuery '<item/>'"
    reported = Aggregate(
        window, XQuery("<item/>"), "s", 7_200_000_000, "publish", Report(True, True, 600_000_000)
    )
    assert describe(reported) == (
        "Aggregate α reduce inline XQuery '<item/>', lateness 2h, late items: publish, "
        "report on-close + on-change + every 10m (tick batch)"
    )


def test_explain_says_which_windows_a_release_runs_and_which_their_reader_runs() -> None:
    """A window read as a stream over publication time is released on close; the
    same window as a join's side, or under an aggregate over late windows, is run by
    that operator (the tree and the global plan say the same)."""
    from roses_app.algebra.plan.operators import Aggregate, Join, Stream, TimeWindow, Window, XQuery
    from roses_app.algebra.planner.explain import format_global, format_plan
    from roses_app.algebra.planner.globalplan import GlobalPlan

    wire, blog = Source("wire", "published"), Source("blog", "published")
    side = Window(wire, TimeWindow(5))
    join = Join(side, Window(blog, TimeWindow(5)), "inner", "true()")
    hourly = Aggregate(Window(wire, TimeWindow(10, 10)), XQuery("<item/>"), "s")
    streams = [Stream("j", join), Stream("h", hourly), Stream("w", side)]
    read = "on close: items released in time order"
    run = "run by the operator over publication time reading it"
    assert read in describe(side) and run in describe(side, side=True)
    assert format_plan(join).count(run) == 2 and read not in format_plan(join)
    assert run in format_plan(hourly) and read not in format_plan(hourly)
    # the global plan: w reads the side window as a stream, the other windows only
    # their readers run
    lines = format_global(GlobalPlan.of(streams), {}).splitlines()
    assert sum(read in line for line in lines) == 1
    assert sum(run in line for line in lines) == 2


def test_runs_over_runs_are_found_once_per_node_however_deep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a node is a released run depends on whether the node below is one:
    each node is asked once (asked again at every level, 12 runs over a join took
    2^12 steps, 50 runs hours)."""
    from roses_app.algebra.time import eventtime
    from roses_app.algebra.time.release_results import fed_release

    lines = [
        "sources:",
        "  wire: {feed: 'http://example.org/wire', time: published}",
        "  blog: {feed: 'http://example.org/blog', time: published}",
        "streams:",
        "  s0: {join: {left: wire, right: blog, on: 'true()'}}",
    ]
    hourly = (
        "{{aggregate: {{from: {{window: {{from: s{}, time: 1h, every: 1h}}}}, reduce: '<x/>'}}}}"
    )
    lines += [f"  s{i}: {hourly.format(i - 1)}" for i in range(1, 13)]
    asked: list[int] = []
    original = eventtime._late_sequential

    def counted(node: eventtime.Node) -> eventtime.Node | None:
        asked.append(id(node))
        return original(node)

    monkeypatch.setattr(eventtime, "_late_sequential", counted)
    config = parse_config("\n".join(lines) + "\n", tmp_path / "feeds.yaml")
    top = config.streams["s12"].plan
    assert fed_release(top)  # a run over a run over ... a join's results
    assert len(asked) == len(set(asked)) <= sum(1 for _ in top.walk()) * 2


def _any_plan(below: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    """One operator over ``below``: every kind, with the windows each may read."""
    from strategies import REDUCER

    from roses_app.algebra.plan.operators import (
        Aggregate,
        CountWindow,
        Delta,
        Diff,
        Filter,
        GroupBy,
        Join,
        Nest,
        Report,
        Semijoin,
        SessionWindow,
        TimeWindow,
        Union,
        Unnest,
        Window,
        WindowedGrouping,
    )

    sliding = st.builds(TimeWindow, st.integers(1, 4), st.none(), st.just(0), st.integers(0, 1))
    periodic = st.builds(TimeWindow, st.integers(1, 4), st.integers(1, 4), st.integers(0, 2))
    specs = sliding | periodic | st.builds(CountWindow, st.integers(1, 3))
    specs |= st.builds(SessionWindow, st.integers(1, 4))
    side = below | st.builds(Window, below, sliding)  # a join reads sliding windows
    policy = st.sampled_from([Report(), Report(True, True)])
    reported = st.builds(Window, below, periodic | st.builds(SessionWindow, st.integers(1, 4)))
    late = (st.just("s"), st.just(0), st.just("drop"))
    return st.one_of(
        st.builds(Filter, below, st.just("true()")),
        st.builds(Union, st.tuples(below, below)),
        st.builds(Window, below, specs),
        st.builds(Delta, below, st.sampled_from(["insert", "delete"])),
        st.builds(Nest, below),
        st.builds(Unnest, below),
        st.builds(Aggregate, below | st.builds(Window, below, specs), st.just(REDUCER), *late),
        st.builds(Aggregate, reported, st.just(REDUCER), *late, policy),
        st.builds(GroupBy, reported, st.just("string(title)"), st.just(REDUCER), *late, policy),
        st.builds(
            WindowedGrouping,
            below,
            st.just("string(title)"),
            st.integers(1, 2),
            st.just(REDUCER),
            st.just("s"),
        ),
        st.one_of(
            st.builds(Join, side, side, st.sampled_from(["inner", "left"]), st.just("true()")),
            st.builds(Semijoin, below, side, st.just("true()")),
            st.builds(Diff, below, side, st.just("true()")),
        ).filter(_sliding_sides),
    )


def _sliding_sides(node: Node) -> bool:
    """Whether a join's sides are sliding time windows or no window (the config
    refuses the others, over ingest time too)."""
    from roses_app.algebra.plan.operators import TimeWindow, Window

    sides = [c for c in node.children() if isinstance(c, Window)]
    return all(isinstance(w.spec, TimeWindow) and w.spec.period is None for w in sides)


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.sampled_from([Source("a", "published"), Source("b", "published")]),
        _any_plan,
        max_leaves=5,
    )
)
def test_every_plan_over_publication_time_runs(plan: Node) -> None:
    """Whatever the operators and however deep, over sources read in publication time:
    none is refused (each reads items or the results of operators over publication
    time)."""
    from roses_app.algebra.time.unsupported import unsupported_on_event_time

    assert [type(n).__name__ for n, _ in unsupported_on_event_time(plan)] == []
