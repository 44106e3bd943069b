"""The global plan: one DAG for every stream, few Spark queries, plan changes that
leave the other streams alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roses_app.algebra.plan.operators import (
    Aggregate,
    Filter,
    Map,
    Source,
    Split,
    Stream,
    TimeWindow,
    Union,
    Window,
    XQuery,
)
from roses_app.algebra.planner.globalplan import GlobalPlan, frontier_of
from roses_app.algebra.planner.program import build_program
from roses_app.algebra.reference.evaluator import RefInput, evaluate_streams
from roses_app.items import Event
from roses_app.replay import MemorySink
from roses_app.spoolfiles import write_events

VOLCANO = Filter(Source("a"), "contains(lower-case(string(.)), 'volcano')")
DIGEST = XQuery("<item><title>{ count($items) }</title></item>")


def test_equal_subplans_of_different_streams_are_one_node() -> None:
    both = Union((VOLCANO, Filter(Source("b"), "true()")))
    streams = [
        Stream("volcano", VOLCANO),
        Stream("titles", Map(both, xpath="title")),
        Stream("split", Split(both, "string(category)")),
        Stream("hourly", Aggregate(Window(VOLCANO, TimeWindow(10, 10)), DIGEST, "hourly")),
    ]
    plan = GlobalPlan.of(streams)
    volcano = plan.nodes[plan.id_of(VOLCANO)]
    assert volcano.streams == {"volcano", "titles", "split", "hourly"}
    assert plan.nodes[plan.id_of(both)].streams == {"titles", "split"}
    assert len([d for d in plan.nodes.values() if isinstance(d.node, Source)]) == 2
    assert [s.name for s in plan.stateless_streams()] == ["volcano", "titles", "split"]
    assert [s.name for s in plan.stateful_streams()] == ["hourly"]
    assert plan.frontier() == [VOLCANO]  # what the aggregate's window reads
    # inputs come before the nodes that read them
    order = list(plan.nodes)
    for dag in plan.nodes.values():
        assert all(order.index(i) < order.index(dag.id) for i in dag.inputs)
    # ids are fingerprints of what a node computes: the same in any config
    assert GlobalPlan.of(streams[:1]).id_of(VOLCANO) == plan.id_of(VOLCANO)


def test_the_frontier_stops_at_the_first_stateless_node() -> None:
    inner = Window(Filter(VOLCANO, "title"), TimeWindow(5))
    assert list(frontier_of(Aggregate(inner, DIGEST))) == [Filter(VOLCANO, "title")]
    assert list(frontier_of(VOLCANO)) == []


def test_a_program_has_one_step_per_distinct_node() -> None:
    streams = [Stream(f"s{n}", Filter(Source("a"), f"contains(., 'w{n % 3}')")) for n in range(9)]
    program = build_program([(s.plan, s.name) for s in streams])
    assert program.describe() == "4 steps (3 filter, 1 source), 9 outputs"


def numbered_events(n: int, first_seq: int = 1, start: int = 1) -> list[RefInput]:
    words = ["volcano", "ash", "football", "rain"]
    return [
        RefInput(
            "ab"[k % 2],
            start + k,
            first_seq + k,
            f"<item><title>{words[k % 4]} {k}</title><guid>g{first_seq + k}</guid>"
            f"<category>{words[(k // 2) % 4]}</category></item>",
        )
        for k in range(n)
    ]


def write_spool(folder: Path, name: str, events: list[RefInput]) -> None:
    write_events(folder / name, [Event(e.source, e.ts, e.seq, e.item, e.published) for e in events])


def _run(
    spark: Any, work: Path, streams: list[Stream], sink: MemorySink, **options: Any
) -> list[Any]:
    from roses_app.spark.queries import await_all
    from roses_app.spark.runner import Engine, start_queries

    engine = Engine(spark, (), work / "log", work, sink, once=True, **options)
    running = start_queries(engine, streams)
    await_all(running)
    return running


def _subscriptions(n: int) -> list[Stream]:
    words = ["volcano", "ash", "football", "rain", "storm"]
    return [
        Stream(
            f"sub{k}",
            Filter(Source("ab"[k % 2]), f"contains(lower-case(title), '{words[k % 5]}')"),
        )
        for k in range(n)
    ]


@pytest.mark.spark
def test_one_query_for_1_and_for_200_stateless_streams(tmp_path: Path, spark: Any) -> None:
    events = numbered_events(40)
    counts = {}
    for n in (1, 200):
        work = tmp_path / str(n)
        write_spool(work / "log", "e.jsonl", events)
        streams = _subscriptions(n)
        sink = MemorySink([s.name for s in streams])
        running = _run(spark, work, streams, sink)
        counts[n] = len(running)
        # one file-stream read of the spool in that query
        assert len(running[0].query.lastProgress["sources"]) == 1
        expected = evaluate_streams(streams, events)
        got = {
            name: {p: sorted(e) for p, e in parts.items()} for name, parts in sink.collected.items()
        }
        assert {k: v for k, v in got.items() if v} == {
            k: v for k, v in expected.items() if v.get("")
        }
    assert counts == {1: 1, 200: 1}


@pytest.mark.spark
def test_a_backlog_runs_as_several_bounded_batches(tmp_path: Path, spark: Any) -> None:
    """A spool bigger than a micro-batch's byte bound is read in several batches (the
    driver never holds the whole backlog's output), with the same result."""
    events = numbered_events(60)
    for k in range(6):
        write_spool(tmp_path / "log", f"{k}.jsonl", events[k * 10 : (k + 1) * 10])
    streams = _subscriptions(3)
    sink = MemorySink([s.name for s in streams])
    file_size = (tmp_path / "log" / "0.jsonl").stat().st_size
    running = _run(spark, tmp_path, streams, sink, max_batch_bytes=2 * file_size)
    batches = [p["batchId"] for p in running[0].query.recentProgress if p["numInputRows"]]
    assert len(batches) >= 3, running[0].query.recentProgress
    expected = evaluate_streams(streams, events)
    for name in ("sub0", "sub1", "sub2"):
        assert sorted(sink.collected[name].get("", [])) == expected[name][""], name


@pytest.mark.spark
def test_adding_streams_recomputes_only_them(tmp_path: Path, spark: Any) -> None:
    """A new stateless and a new stateful stream are computed from the whole spool;
    the streams that were there go on from where they were, nothing recomputed."""
    hourly = Aggregate(Window(VOLCANO, TimeWindow(10, 10)), DIGEST, "hourly")
    old = [Stream("volcano", VOLCANO), Stream("hourly", hourly)]
    new = [
        *old,
        Stream("rain", Filter(Source("b"), "contains(., 'rain')")),
        Stream(
            "ash",
            Aggregate(
                Window(Filter(Source("b"), "contains(., 'ash')"), TimeWindow(10, 10)), DIGEST, "ash"
            ),
        ),
    ]
    first, second = numbered_events(30), numbered_events(30, first_seq=31, start=31)
    sink = MemorySink([s.name for s in new])
    write_spool(tmp_path / "log", "1.jsonl", first)
    running = _run(spark, tmp_path, old, sink)
    assert [r.name for r in running][:1] == ["stateless"] and len(running) == 2
    write_spool(tmp_path / "log", "2.jsonl", [*second, RefInput("", 10**4, 61, None)])
    running = _run(spark, tmp_path, new, sink)
    # the stateless query goes on; the new stateful stream gets a generation of its own
    assert [r.name for r in running][:2] == ["stateless", running[1].name] and len(running) == 3
    expected = evaluate_streams(new, [*first, *second, RefInput("", 10**4, 61, None)])
    for name in ("volcano", "hourly"):
        written = sink.collected[name][""]
        assert len(written) == len(set(written)), f"{name}: rows written again"
    for name in ("volcano", "rain", "ash", "hourly"):
        assert sorted(sink.collected[name].get("", [])) == expected[name][""], name


class FakeLedger:
    def __init__(self, position: int, versions: dict[str, str]) -> None:
        self._position, self._versions = position, versions

    def position(self, query_id: str) -> int:
        return self._position

    def versions(self) -> dict[str, str]:
        return dict(self._versions)


def test_the_layout_keeps_what_can_go_on_and_starts_what_is_new(tmp_path: Path) -> None:
    from roses_app.algebra.planner.globalplan import stream_fingerprint
    from roses_app.spark.layout import STATELESS_QUERY, plan_layout, save_generation

    hourly = Stream("hourly", Aggregate(Window(VOLCANO, TimeWindow(10, 10)), DIGEST, "hourly"))
    volcano, rain = Stream("volcano", VOLCANO), Stream("rain", Filter(Source("b"), "true()"))
    # a fresh start: one stateless query, one generation, nothing to backfill
    fresh = plan_layout([volcano, hourly], (), tmp_path, FakeLedger(0, {}))
    assert fresh.position == 0 and [s.name for s in fresh.new_stateless] == ["volcano"]
    assert fresh.query_ids() == [STATELESS_QUERY, fresh.generations[0].id]
    # after a run: the stateless checkpoint and the generation's plans are there
    (tmp_path / STATELESS_QUERY).mkdir()
    save_generation(tmp_path / fresh.generations[0].id, fresh.generations[0])
    published = {"volcano": stream_fingerprint(volcano, ()), "gone": "0" * 16}
    later = plan_layout([volcano, rain, hourly], (), tmp_path, FakeLedger(42, published))
    assert later.position == 42
    assert [s.name for s in later.new_stateless] == ["rain"]  # volcano goes on
    assert later.removed == ("gone",)  # forgotten: adding it again recomputes it
    assert [(g.id, g.fresh) for g in later.generations] == [(fresh.generations[0].id, False)]
    # hourly changed: a new generation from position 42; the old one has no stream left
    changed = Stream("hourly", Aggregate(Window(VOLCANO, TimeWindow(20, 20)), DIGEST, "hourly"))
    edited = plan_layout([volcano, changed], (), tmp_path, FakeLedger(42, published))
    assert edited.dropped == (fresh.generations[0].id,)
    assert [(g.live, g.boundary, g.fresh) for g in edited.generations] == [
        (frozenset({"hourly"}), 42, True)
    ]


@pytest.mark.spark
def test_deleting_the_checkpoints_recomputes_everything(tmp_path: Path, spark: Any) -> None:
    """Without checkpoints Spark numbers batches from 0 again: the store must not take
    them for batches it has already applied."""
    import shutil

    from roses_app.spark.queries import await_all
    from roses_app.spark.runner import Engine, start_queries
    from roses_app.store import Store

    events = numbered_events(12)
    write_spool(tmp_path / "log", "e.jsonl", events)
    streams = [Stream("volcano", VOLCANO)]
    expected = evaluate_streams(streams, events)["volcano"][""]
    with Store(tmp_path / "store.sqlite") as store:
        for _ in range(2):
            await_all(
                start_queries(
                    Engine(spark, (), tmp_path / "log", tmp_path, store, once=True), streams
                )
            )
            assert store.count("volcano") == len(expected) > 0
            shutil.rmtree(tmp_path / "checkpoints")
            store.restart_stream("volcano")  # as if its output had been lost too
            # what Spark archived is read again too (a backfill): the whole spool


@pytest.mark.spark
def test_streams_with_equal_plans_each_get_every_event_once(tmp_path: Path, spark: Any) -> None:
    events = numbered_events(12)
    write_spool(tmp_path / "log", "e.jsonl", events)
    streams = [Stream("one", VOLCANO), Stream("two", VOLCANO), Stream("all", Source("a"))]
    sink = MemorySink([s.name for s in streams])
    _run(spark, tmp_path, streams, sink)
    expected = evaluate_streams(streams, events)
    for stream in streams:
        assert sorted(sink.collected[stream.name][""]) == expected[stream.name][""]
