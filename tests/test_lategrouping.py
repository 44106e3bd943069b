"""FlameStream's windowed grouping over publication time (roses_app.algebra.time.lategrouping,
seed 000 with seed 001's lateness): the operator taken micro-batch after micro-batch
publishes what the reference evaluator does, counts the same results unchanged and
the same items too late; the seed's example comes out whatever the arrival order; the
config takes ``lateness`` and ``report`` where they apply.  The
``event_time_grouping`` replay fixture runs both engines end to end."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import SPARK_EXAMPLES, late_grouping_plans, out_of_order_event_lists
from test_differential import assert_engines_agree

from roses_app.algebra.plan.operators import Node, Source, Stream, WindowedGrouping, XQuery
from roses_app.algebra.reference.evaluator import RefInput, evaluate_streams
from roses_app.algebra.reference.grouping import late_grouping_events
from roses_app.algebra.reference.registry import Context
from roses_app.algebra.time.eventtime import late_grouped
from roses_app.algebra.time.lategrouping import LateGrouping
from roses_app.algebra.time.lateness import arrival_groups
from roses_app.algebra.time.panes import Arrival
from roses_app.config import parse_config
from roses_app.errors import ConfigError
from roses_app.xmlfn import split_batch
from roses_app.xmlfn.reduce import advance_grouping

Published = set[tuple[int, int, str]]


def arrivals_of(plan: WindowedGrouping, events: list[RefInput]) -> list[list[Arrival]]:
    """The arrival groups the operator gets: the items of the stream below (with
    their key) at their time, and the heartbeats, grouped by ingest time."""
    below = late_grouped(plan)
    assert below is not None
    found = evaluate_streams([Stream("b", below)], events)["b"].get("", [])
    keys = split_batch(plan.by, (), [e.item for e in found])
    ingest = {e.seq: e.ts for e in events}
    tagged = [
        (ingest[e.seq], Arrival(e.ts, e.seq, e.item, key))
        for e, key in zip(found, keys, strict=True)
        if key is not None
    ]
    tagged += [(e.ts, Arrival(e.ts, e.seq, None)) for e in events if e.item is None]
    return arrival_groups(tagged)


def operator_results(
    plan: WindowedGrouping, events: list[RefInput], cuts: list[int]
) -> tuple[Published, int, int]:
    """What the operator publishes when the arrivals come in batches cut at ``cuts``,
    its state dumped to JSON and loaded back between two batches (as on Spark), how
    many results it computed again unchanged, and how many items came too late."""
    groups = arrivals_of(plan, events)
    bounds = sorted({0, len(groups), *(c for c in cuts if c < len(groups))})
    saved: dict[str, Any] | None = None
    found: Published = set()
    unchanged = late = 0
    for start, end in itertools.pairwise(bounds):
        grouping = LateGrouping.load(plan.size, plan.lateness, plan.optimistic, saved)
        planned, settled, out = advance_grouping(grouping, groups[start:end], plan, ())
        found.update((e.time, e.at, item) for e, item in out)
        unchanged, late = unchanged + settled.unchanged, late + len(planned.late)
        saved = json.loads(json.dumps(grouping.dump()))
    return found, unchanged, late


def reference_results(plan: WindowedGrouping, events: list[RefInput]) -> tuple[Published, int, int]:
    ctx = Context(events)
    published = {(e.ts, e.seq, e.item or "") for e in late_grouping_events(plan, ctx)}
    return published, ctx.unchanged[plan], len(ctx.late[plan])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=out_of_order_event_lists(max_size=30),
    plan=late_grouping_plans(),
    cuts=st.lists(st.integers(1, 30), max_size=4),
)
def test_batch_after_batch_the_operator_publishes_what_the_reference_does(
    events: list[RefInput], plan: WindowedGrouping, cuts: list[int]
) -> None:
    assert operator_results(plan, events, cuts) == reference_results(plan, events)


SEED = ["(1)", "(2)", "(1|3)", "(2|4)", "(1|3|5)", "(2|4|6)", "(3|5|7)", "(4|6|8)"]
PARITY = "if (number(title) mod 2 = 0) then '1' else '0'"
JOINED = XQuery("<item><title>({ string-join($items/title, '|') })</title></item>")


def numbers(order: list[int], lateness: int) -> tuple[list[RefInput], int]:
    """The seed's items 1..8 (published at their number) arriving in ``order``, one
    per ingest tick from 20, then a heartbeat that decides them all."""
    events = [
        RefInput("n", 20 + i, i + 1, f"<item><title>{n}</title></item>", n)
        for i, n in enumerate(order)
    ]
    events.append(RefInput("", 40, len(order) + 1, None))
    return events, lateness


def titles(published: Published) -> list[str]:
    from lxml import etree

    return [etree.fromstring(item).findtext("title") or "" for _, _, item in sorted(published)]


@pytest.mark.parametrize("order", [[1, 2, 3, 4, 5, 6, 7, 8], [2, 1, 4, 3, 6, 8, 7, 5]])
def test_on_close_the_seeds_example_comes_out_whatever_the_arrival_order(order: list[int]) -> None:
    events, lateness = numbers(order, 5)
    plan = WindowedGrouping(Source("n", "published"), PARITY, 3, JOINED, "s", lateness)
    published, unchanged, late = operator_results(plan, events, [3, 6])
    assert titles(published) == SEED and unchanged == late == 0


def test_optimistically_a_late_item_revises_the_results_after_it_in_place() -> None:
    # 5 arrives after 7: 7's result was (1|3|7), and is published again as (3|5|7)
    events, lateness = numbers([1, 2, 3, 4, 6, 7, 5, 8], 5)
    plan = WindowedGrouping(Source("n", "published"), PARITY, 3, JOINED, "s", lateness, True)
    published, _, _ = operator_results(plan, events, [])
    assert titles(published) == [*SEED[:6], "(1|3|7)", "(3|5|7)", "(4|6|8)"]
    guids = {
        title: item.split("<guid")[1]
        for title, (_, _, item) in zip(titles(published), sorted(published), strict=True)
    }
    assert guids["(1|3|7)"].replace(' revision="1"', "") == guids["(3|5|7)"].replace(
        ' revision="1"', ""
    )
    assert 'revision="1"' in guids["(3|5|7)"] and "revision" not in guids["(1|3|7)"]
    counted = WindowedGrouping(
        Source("n", "published"),
        PARITY,
        3,
        XQuery("<item>{ count($items) }</item>"),
        "s",
        lateness,
        True,
    )
    published, unchanged, _ = operator_results(counted, events, [])
    assert len(published) == 8 and unchanged == 1  # 7's count stayed 3: not published again


def test_an_item_later_than_the_lateness_is_dropped_and_counted() -> None:
    events, lateness = numbers([1, 2, 3, 4, 5, 6, 7, 8, 1], 5)  # the second 1 at clock 8
    plan = WindowedGrouping(Source("n", "published"), PARITY, 3, JOINED, "s", lateness)
    published, _, late = operator_results(plan, events, [])
    assert titles(published) == SEED and late == 1


def test_the_state_keeps_what_an_item_on_time_could_change_or_reduce_with() -> None:
    grouping = LateGrouping(3, 10, True)
    for t in range(1, 101):
        grouping.advance([[Arrival(t, t, f"<item>{t}</item>", "k")]])
    kept = [e.time for e in grouping.buckets["k"]]
    # on time: 90 and after; and the two before them, which 90's result reduces
    assert kept == list(range(88, 101))


def test_two_items_one_event_gives_through_a_union_are_two_results() -> None:
    # the source's item and its marked copy: one event, one key, two items
    from roses_app.algebra.plan.operators import Map, Union

    source = Source("n", "published")
    marked = Map(source, xquery=XQuery("<item><title>{ string($i/title) }!</title></item>"))
    plan = WindowedGrouping(Union((source, marked)), "'k'", 1, JOINED, "s", 5)
    events, _ = numbers([1, 2], 5)
    for published, _, _ in (operator_results(plan, events, []), reference_results(plan, events)):
        assert sorted(titles(published)) == ["(1!)", "(1)", "(2!)", "(2)"]
        guids = {item.split("<guid")[1].split("<")[0] for _, _, item in published}
        assert len(guids) == 4  # one per result: none replaces another in the store


HEAD = """
sources:
  wire: {feed: "http://example.org/wire", time: published}
  blog: {feed: "http://example.org/blog"}
streams:
"""
GROUPING = "grouping: {{from: {src}, by: 'string(category)', window: 2, reduce: '<item/>'{more}}}"


def grouping(name: str, src: str, more: str = "") -> str:
    return f"  {name}: {{{GROUPING.format(src=src, more=more)}}}\n"


def problems(streams: str, folder: Path) -> str:
    """What loading HEAD and ``streams`` reports (it must refuse them)."""
    with pytest.raises(ConfigError) as caught:
        parse_config(HEAD + streams, folder / "feeds.yaml")
    return str(caught.value)


def test_lateness_and_report_belong_to_groupings_over_publication_time(tmp_path: Path) -> None:
    config = parse_config(
        HEAD
        + grouping("a", "wire", ", lateness: 2h, report: optimistic")
        + grouping("b", "wire")
        + grouping("c", "blog"),
        tmp_path / "feeds.yaml",
    )
    a, b, c = (config.streams[n].plan for n in "abc")
    assert isinstance(a, WindowedGrouping) and a.optimistic and a.lateness == 7_200_000_000
    assert isinstance(b, WindowedGrouping) and not b.optimistic and b.stream == "b"
    assert late_grouped(a) is not None and late_grouped(b) is not None
    assert late_grouped(c) is None
    assert "stream=" not in repr(c) and "lateness=" not in repr(c)  # ingest time: as before
    found = problems(
        grouping("d", "blog", ", lateness: 1h")
        + grouping("e", "blog", ", report: optimistic")
        + grouping("f", "wire", ", report: soon"),
        tmp_path,
    )
    assert "feeds.yaml:6: grouping.lateness applies to items read in publication time" in found
    assert "feeds.yaml:7: grouping.report applies to items read in publication time" in found
    assert "so a result is final when it comes" in found
    assert "feeds.yaml:8: grouping.report must be on-close or optimistic, got 'soon'" in found


def test_a_wrong_report_is_told_with_the_other_mistakes_of_its_operator(tmp_path: Path) -> None:
    broken = "grouping: {from: wire, by: 'string(category)', window: 0, reduce: '<item>{'"
    join = "join: {left: wire, right: blog, kind: outer, on: '(', report: optimistic}"
    found = problems(f"  a:\n    {broken}, report: soon}}\n  b:\n    {join}\n", tmp_path)
    assert "feeds.yaml:7: grouping.report must be on-close or optimistic, got 'soon'" in found
    assert "feeds.yaml:7: XQuery error in grouping.reduce" in found
    assert "feeds.yaml:7: grouping.window must be" in found
    assert "feeds.yaml:9: join.kind must be inner, left or full" in found
    assert "feeds.yaml:9: XPath syntax error in join.on" in found  # the observer's too


@pytest.mark.spark
@SPARK_EXAMPLES
@given(
    events=out_of_order_event_lists(max_size=30),
    plans=st.lists(late_grouping_plans(), min_size=2, max_size=2),
)
def test_spark_equals_reference_on_groupings_over_out_of_order_items(
    events: list[RefInput], plans: list[Node], spark: Any, tmp_path: Path
) -> None:
    assert_engines_agree(plans, events, tmp_path)
