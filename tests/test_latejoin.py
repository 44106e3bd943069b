"""Inner joins and semijoins over publication time (roses_app.algebra.time.latejoin): the
operator taken micro-batch after micro-batch publishes what the reference evaluator
does; the config takes ``lateness`` where it applies and refuses the joins that a
late item would take back.  The ``event_time_join`` replay fixture runs both engines
end to end."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import SPARK_EXAMPLES, late_join_plans, out_of_order_event_lists
from test_differential import assert_engines_agree

from roses_app.algebra.plan.operators import Join, Node, Source, Stream, TimeWindow, optimistic
from roses_app.algebra.reference.evaluator import RefInput, evaluate_streams
from roses_app.algebra.time.eventtime import late_joined
from roses_app.algebra.time.latejoin import (
    LEFT,
    RIGHT,
    LateJoin,
    join_keyed,
    join_kind,
    on_time,
    pairs_at,
)
from roses_app.algebra.time.lateness import arrival_groups
from roses_app.algebra.time.panes import Arrival
from roses_app.config import parse_config
from roses_app.errors import ConfigError
from roses_app.xmlfn.pairs import advance_join, late_join_results


def join_arrivals(plan: Node, events: list[RefInput]) -> list[list[Arrival]]:
    """The arrival groups a join over publication time takes: both sides' events,
    tagged with their side, heartbeats on both."""
    sides = late_joined(plan)
    assert sides is not None
    below = evaluate_streams([Stream("l", sides[0]), Stream("r", sides[2])], events)
    ingest = {e.seq: e.ts for e in events}
    tagged = [
        (ingest[e.seq], Arrival(e.ts, e.seq, e.item, tag))
        for tag, name in ((LEFT, "l"), (RIGHT, "r"))
        for e in below[name].get("", [])
    ]
    tagged += [
        (e.ts, Arrival(e.ts, e.seq, None, tag))
        for e in events
        if e.item is None
        for tag in (LEFT, RIGHT)
    ]
    return arrival_groups(tagged)


def operator_results(plan: Node, events: list[RefInput], cuts: list[int]) -> set[tuple]:
    """What the operator publishes when the arrivals come in batches cut at ``cuts``,
    its state dumped to JSON and loaded back between two batches (as on Spark)."""
    sides = late_joined(plan)
    assert sides is not None
    groups = join_arrivals(plan, events)
    bounds = sorted({0, len(groups), *(c for c in cuts if c < len(groups))})
    saved: dict[str, Any] | None = None
    found: set[tuple] = set()
    for start, end in itertools.pairwise(bounds):
        kind, keyed = join_kind(plan), join_keyed(plan)  # type: ignore[arg-type]
        lateness = plan.lateness  # type: ignore[attr-defined]
        join = LateJoin.load(sides[1], sides[3], lateness, kind, saved, optimistic(plan), keyed)
        planned = advance_join(plan, join, groups[start:end], ())  # type: ignore[arg-type]
        found.update(late_join_results(plan, join, planned, ())[0])  # type: ignore[arg-type]
        saved = json.loads(json.dumps(join.dump()))
    return found


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=out_of_order_event_lists(max_size=30),
    plan=late_join_plans(),
    cuts=st.lists(st.integers(1, 30), max_size=4),
)
def test_batch_after_batch_the_operator_publishes_what_the_reference_does(
    events: list[RefInput], plan: Node, cuts: list[int]
) -> None:
    expected = evaluate_streams([Stream("s", plan)], events)["s"].get("", [])
    assert operator_results(plan, events, cuts) == {(e.ts, e.seq, e.item) for e in expected}


def test_an_item_later_than_the_lateness_is_dropped_and_one_arrival_never_late_to_itself() -> None:
    group = [Arrival(20, 1, "<item/>", LEFT), Arrival(5, 2, "<item/>", RIGHT)]
    taken = on_time(
        [group, [Arrival(9, 3, "<item/>", LEFT)], [Arrival(10, 4, "<item/>", RIGHT)]], 10
    )
    assert [a.seq for a in taken.kept] == [1, 2, 4] and [a.seq for a in taken.late] == [3]


def test_pairs_meet_in_either_window_a_semijoin_in_the_right_one_only() -> None:
    five = TimeWindow(5)
    # b at 22 is not in the right window at 20 ([16, 20]); a at 20 is in the left one at 22
    assert pairs_at(five, five, 20, 22, both=True)
    assert not pairs_at(five, five, 20, 22, both=False)
    assert pairs_at(None, five, 20, 18, both=False) and not pairs_at(None, None, 20, 18, True)


HEAD = """
sources:
  wire: {feed: "http://example.org/wire", time: published}
  blog: {feed: "http://example.org/blog"}
streams:
"""


def problems(tmp_path: Path, streams: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(HEAD + streams, tmp_path / "feeds.yaml")
    return str(caught.value)


def test_lateness_belongs_to_joins_over_publication_time(tmp_path: Path) -> None:
    config = parse_config(
        HEAD
        + "  j: {join: {left: wire, right: blog, on: 'true()', lateness: 2h}}\n"
        + "  s: {semijoin: {left: wire, right: {window: {from: blog, time: 1h}}, on: 'true()'}}\n",
        tmp_path / "feeds.yaml",
    )
    join, semijoin = config.streams["j"].plan, config.streams["s"].plan
    assert isinstance(join, Join) and join.lateness == 7_200_000_000
    assert late_joined(join) is not None and late_joined(semijoin) is not None
    found = problems(
        tmp_path, "  j: {join: {left: blog, right: blog, on: 'true()', lateness: 2h}}\n"
    )
    assert "feeds.yaml:6" in found and "applies to items read in publication time" in found


def test_operators_of_time_read_joins_reporting_on_close_or_optimistically(
    tmp_path: Path,
) -> None:
    from roses_app.algebra.time.eventtime import late_sequential, released_joined

    config = parse_config(
        HEAD
        + "  j: {join: {left: wire, right: blog, on: 'true()', kind: left}}\n"
        + "  d: {diff: {left: wire, right: blog, on: 'true()', lateness: 1h}}\n"
        + "  x: {delta: {from: {join: {left: wire, right: blog, on: 'true()'}}}}\n"
        + "  y: {aggregate: {from: {window: {from: {join: {left: wire, right: blog, on: 'true()'}},"
        + " count: 3}}, reduce: '<item/>'}}\n"
        # an optimistic join's final results: what its on-close twin publishes
        + "  z: {delta: {from: {join: {left: wire, right: blog, on: 'true()', kind: left,"
        + " report: optimistic}}}}\n",
        tmp_path / "feeds.yaml",
    )
    assert all(late_joined(config.streams[n].plan) is not None for n in "jd")
    assert all(late_sequential(config.streams[n].plan) is not None for n in "xyz")
    # a join of a join's results and items: both sides released together, then joined
    config = parse_config(
        HEAD + "  x: {delta: {from: {join: {left: {join: {left: wire, right: blog, on: 'true()'}},"
        " right: blog, on: 'true()'}}}}\n",
        tmp_path / "feeds.yaml",
    )
    delta = config.streams["x"].plan
    assert released_joined(delta.input) is not None  # type: ignore[attr-defined]
    assert late_sequential(delta) is not None  # a run over its results


def test_report_optimistic_belongs_to_outer_joins_and_differences_over_publication_time(
    tmp_path: Path,
) -> None:
    from roses_app.algebra.plan.operators import Diff

    config = parse_config(
        HEAD
        + "  j: {join: {left: wire, right: blog, on: 'true()', kind: full, report: optimistic}}\n"
        + "  d: {diff: {left: wire, right: blog, on: 'true()', report: optimistic}}\n"
        + "  p: {product: {left: wire, right: blog, report: on-close}}\n",
        tmp_path / "feeds.yaml",
    )
    join, diff, product = (config.streams[n].plan for n in "jdp")
    assert isinstance(join, Join) and join.optimistic
    assert isinstance(diff, Diff) and diff.optimistic
    assert isinstance(product, Join) and not product.optimistic
    found = problems(
        tmp_path,
        "  a: {join: {left: blog, right: blog, on: 'true()', kind: left, report: optimistic}}\n"
        "  b: {join: {left: wire, right: blog, on: 'true()', report: optimistic}}\n"
        "  c: {diff: {left: wire, right: blog, on: 'true()', report: soon}}\n"
        "  e: {semijoin: {left: wire, right: blog, on: 'true()', report: optimistic}}\n",
    )
    assert "feeds.yaml:6: join.report applies to items read in publication time" in found
    assert "feeds.yaml:7: join.report: optimistic applies to a left or full join" in found
    assert "feeds.yaml:8: diff.report must be on-close or optimistic, got 'soon'" in found
    assert "feeds.yaml:9" in found and "report" in found.split("feeds.yaml:9")[1]


def test_an_item_taken_back_keeps_its_identity() -> None:
    from roses_app.algebra.plan.operators import Diff
    from roses_app.items import content_hash, item_identity
    from roses_app.xmlfn.pairs import replaced_by_pair
    from roses_app.xmlfn.stamp import withdrawn_item
    from roses_app.xmlfn.xpath import parse

    bare = "<item><title>t</title></item>"
    for xml, identity in (
        ("<item><title>t</title><guid>g</guid><link>l</link></item>", "g"),
        ("<item><title>t</title><link> l </link></item>", "l"),
        (bare, content_hash(bare)),
    ):
        notice = parse(withdrawn_item(xml))
        assert item_identity(notice) == identity  # the store replaces the entry
        assert notice.findtext("title") == "Withdrawn: t"
    left_join = Join(Source("a"), Source("b"), "left")
    with_guid = Arrival(1, 1, "<item><guid>g</guid></item>", LEFT)
    # the pair keeps a left item's guid: it takes the item's place, no notice needed
    assert replaced_by_pair(left_join, with_guid)
    assert not replaced_by_pair(left_join, Arrival(1, 1, bare, LEFT))  # hashed: differs
    assert not replaced_by_pair(left_join, Arrival(1, 1, with_guid.item, RIGHT))
    assert not replaced_by_pair(Diff(Source("a"), Source("b"), "true()"), with_guid)


@pytest.mark.spark
@SPARK_EXAMPLES
@given(
    events=out_of_order_event_lists(max_size=30),
    plans=st.lists(late_join_plans(), min_size=2, max_size=2),
)
def test_spark_equals_reference_on_joins_over_out_of_order_items(
    events: list[RefInput], plans: list[Node], spark: Any, tmp_path: Path
) -> None:
    assert_engines_agree(plans, events, tmp_path)


@pytest.mark.spark
def test_spark_keeps_the_join_between_micro_batches_and_counts_late_items(
    tmp_path: Path, spark: Any
) -> None:
    from roses_app.config import load_config
    from roses_app.items import Event
    from roses_app.replay import MemorySink, read_events, run_reference
    from roses_app.spark.queries import await_all
    from roses_app.spark.runner import Engine, error_counter, start_queries
    from roses_app.spoolfiles import write_events

    fixture = Path(__file__).parent / "data" / "replay" / "event_time_join"
    config = load_config(fixture / "feeds.yaml")
    events = read_events(fixture / "events.jsonl")
    streams = [s.stream for s in config.streams.values()]
    sink = MemorySink(list(config.streams))
    errors = error_counter(spark)
    # three appends, three runs of the queries over the same checkpoints: b2 (at ts 12)
    # meets w1 from the state, and the two late items come in the last two runs
    for n, (start, end) in enumerate([(0, 2), (2, 5), (5, len(events.events))]):
        chunk = events.events[start:end]
        write_events(
            tmp_path / "log" / f"events-{n}.jsonl",
            [Event(e.source, e.ts, e.seq, e.item, e.published) for e in chunk],
        )
        engine = Engine(spark, (), tmp_path / "log", tmp_path, sink, once=True, errors=errors)
        await_all(start_queries(engine, streams))
    expected = run_reference(config, events)
    for name, parts in expected.items():
        assert sorted(sink.collected[name].get("", [])) == parts[""], name
    late = {k: v for k, v in errors.value.items() if k.startswith("late:")}
    assert late == {f"late:{name}": 2 for name in ("pairs", "seen", "lonely", "all_wire")}


def test_a_join_on_keys_meets_only_the_items_sharing_one_and_keeps_their_keys() -> None:
    """``$i1/category = $i2/category``: an item meets the kept items with any of its
    categories (the others are never tested), through a state saved as JSON."""
    on = "$i1/category = $i2/category"
    node = Join(Source("l", time="published"), Source("r", time="published"), "inner", on)
    assert join_keyed(node)

    def item(n: int, *categories: str) -> str:
        tags = "".join(f"<category>{c}</category>" for c in categories)
        return f"<item><guid>{n}</guid>{tags}</item>"

    join = LateJoin.load(None, None, 100, "inner", None, keyed=True)
    first = [[Arrival(5, 1, item(1, "sport"), RIGHT), Arrival(5, 2, item(2, "arts"), RIGHT)]]
    assert advance_join(node, join, first, ()).pairs == []
    saved = json.loads(json.dumps(join.dump()))
    join = LateJoin.load(None, None, 100, "inner", saved, keyed=True)
    second = [[Arrival(5, 3, item(3, "world", "arts", "sport"), LEFT)]]
    planned = advance_join(node, join, second, ())
    # both kept items share a category with it, and only they were candidates
    assert [(a.seq, b.seq) for a, b in planned.pairs] == [(3, 1), (3, 2)]
    third = [[Arrival(5, 4, item(4, "science"), LEFT)]]
    assert advance_join(node, join, third, ()).pairs == []


def test_a_join_on_keys_pairs_items_of_one_micro_batch_once() -> None:
    """Both sides in one micro-batch, after a state saved as JSON: each pair comes out
    once (the first item kept on a side was once indexed twice, and met each later
    partner twice), an item whose key repeats too."""
    on = "$i1/link = $i2/link"
    node = Join(Source("l", time="published"), Source("r", time="published"), "inner", on)

    def item(n: int, *links: str) -> str:
        return f"<item><guid>{n}</guid>{''.join(f'<link>{x}</link>' for x in links)}</item>"

    keyed = LateJoin.load(None, None, 100, "inner", None, keyed=True)
    saved = json.loads(json.dumps(keyed.dump()))
    batch = [
        Arrival(5, 1, item(1, "a", "a"), LEFT),
        Arrival(5, 2, item(2, "a"), RIGHT),
        Arrival(5, 3, item(3, "a"), LEFT),
        Arrival(5, 4, item(4, "a"), RIGHT),
    ]
    found = {}
    for flag in (True, False):
        join = LateJoin.load(None, None, 100, "inner", saved, keyed=flag)
        planned = advance_join(node, join, [batch], ())
        found[flag] = sorted((a.seq, b.seq) for a, b in planned.pairs)
    assert found[True] == [(1, 2), (1, 4), (3, 2), (3, 4)]
    assert found[True] == found[False]  # the hash join meets what testing all would
