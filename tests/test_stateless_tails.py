"""A stateful node read by several streams is computed once: its readers' stateless
tails run in one fused pass over its rows (:mod:`roses_app.algebra.planner.stateless_tails`)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from test_globalplan import _run, write_spool

from roses_app.algebra.plan.operators import (
    Aggregate,
    Delta,
    Filter,
    Join,
    Map,
    Source,
    Split,
    Stream,
    TimeWindow,
    Union,
    Window,
    XQuery,
)
from roses_app.algebra.planner.globalplan import GlobalPlan
from roses_app.algebra.planner.stateless_tails import operator_count, plan_tails, spark_copies
from roses_app.algebra.reference.evaluator import RefInput, evaluate_streams
from roses_app.replay import MemorySink

DIGEST = XQuery(
    "<item><title>{ count($items) } items</title>"
    "<category>{ if (count($items) > 2) then 'busy' else 'calm' }</category></item>"
)
HOURLY = Aggregate(Window(Source("a"), TimeWindow(10, 10)), DIGEST, "hourly")
OTHER = Aggregate(Window(Source("b"), TimeWindow(5, 5)), DIGEST, "other")
STREAMS = [
    Stream("hourly", HOURLY),
    Stream("busy", Filter(HOURLY, "category = 'busy'")),
    Stream("titles", Map(HOURLY, xpath="title")),
    Stream("by_load", Split(HOURLY, "string(category)")),
    Stream("both", Union((HOURLY, Source("b")))),
    Stream("other", OTHER),
]


key_of = GlobalPlan.of(STREAMS).id_of


def test_every_reader_of_a_stateful_node_goes_through_one_tail() -> None:
    tails = plan_tails(STREAMS, key_of)
    # the aggregate is a head once; the source a union reads is one too
    assert dict(tails.heads) == {HOURLY: key_of(HOURLY), Source("b"): key_of(Source("b"))}
    # a stream whose root is a head nobody else reads is lowered on its own
    assert [s.name for s in tails.direct] == ["other"]
    assert tails.program is not None
    assert sorted(n for names in tails.streams_of.values() for n in names) == [
        "both",
        "busy",
        "by_load",
        "hourly",
        "titles",
    ]
    kinds = sorted(step.kind for step in tails.program.steps)
    assert kinds == ["filter", "map", "source", "source", "split", "union"]
    assert "2 head(s) computed once, 5 stream(s)" in tails.describe()


def test_streams_with_equal_stateful_plans_share_one_head() -> None:
    tails = plan_tails([Stream("x", HOURLY), Stream("y", HOURLY)], key_of)
    assert dict(tails.heads) == {HOURLY: key_of(HOURLY)} and not tails.direct
    assert tails.streams_of == {key_of(HOURLY): ("x", "y")}


def test_operators_are_counted_once_per_head() -> None:
    counts = dict((s.name, n) for s, n in operator_count(STREAMS))
    # an aggregate's window is its grouping, not an operator of its own
    assert counts == {"hourly": 1, "busy": 1, "titles": 1, "by_load": 1, "both": 1, "other": 2}
    # a stateful node read by two stateful operators runs in both (a query is a tree)
    twice = Join(HOURLY, HOURLY)
    assert [n for _, n in operator_count([Stream("j", twice)])] == [3]


WINDOW = Window(Source("a"), TimeWindow(10, 10))
# a window published as it is, and the items each of its times adds (δ⁺ of it)
WINDOW_AND_DELTA = [Stream("window", WINDOW), Stream("arrivals", Delta(WINDOW, "insert"))]


def test_a_window_that_a_chain_also_computes_is_said_to_run_twice() -> None:
    """The delta's chain computes the window's content as its first stage, beside the
    window's own operator: ``roses explain`` must not say "computed once"."""
    assert spark_copies(WINDOW_AND_DELTA)[WINDOW] == 2
    assert [n for _, n in operator_count(WINDOW_AND_DELTA)] == [1, 2]
    # read by the delta alone, it is computed once, inside the chain
    assert spark_copies(WINDOW_AND_DELTA[1:])[WINDOW] == 1
    # read by an aggregate and published too: the aggregate groups its items again
    both = [Stream("window", WINDOW), Stream("digest", Aggregate(WINDOW, DIGEST, "d"))]
    assert spark_copies(both)[WINDOW] == 2


# α per day over the items new at each time of the last week's window, in publication
# time: one released run, one Spark operator (its window, delta and window are stages)
PUBLISHED = Source("a", "published")
RUN = Aggregate(
    Window(Delta(Window(PUBLISHED, TimeWindow(20, None)), "insert"), TimeWindow(10, 10)),
    DIGEST,
    "fresh",
)


def test_a_run_of_operators_is_counted_as_the_one_operator_spark_runs() -> None:
    assert [n for _, n in operator_count([Stream("fresh", RUN)])] == [1]
    copies = spark_copies([Stream("fresh", RUN)])
    assert set(copies.values()) == {1} and len(copies) == 4  # each computed once, in it
    # over ingest time a delta of a delta is one operator too
    twice = Delta(Delta(Source("a"), "insert"), "delete")
    assert [n for _, n in operator_count([Stream("d", twice)])] == [1]


@pytest.mark.spark
def test_the_operators_spark_runs_are_the_ones_explain_counts(tmp_path: Path, spark: Any) -> None:
    """The window and the delta's chain: two operators; the run over publication time
    (its items out of order): one more."""
    streams = [*WINDOW_AND_DELTA, Stream("fresh", RUN)]
    events = [
        RefInput("a", 1 + k * 3, 1 + k, f"<item><title>t{k}</title></item>", 1 + k * 3 - k % 3)
        for k in range(12)
    ]
    events.append(RefInput("", 100, 13, None))  # time passes: the run's windows close
    write_spool(tmp_path / "log", "e.jsonl", events)
    sink = MemorySink([s.name for s in streams])
    running = _run(spark, tmp_path, streams, sink, lateness=2)
    stateful = [r for r in running if r.name != "stateless"]
    operators = stateful[0].query.lastProgress["stateOperators"]
    assert len(operators) == list(operator_count(streams))[-1][1] == 3
    expected = evaluate_streams(streams, events, lateness=2)
    assert expected["fresh"][""]  # the run publishes something
    got = {name: {p: sorted(e) for p, e in parts.items()} for name, parts in sink.collected.items()}
    assert got == {name: parts for name, parts in expected.items() if any(parts.values())}


@pytest.mark.spark
def test_a_shared_aggregate_runs_one_stateful_operator(tmp_path: Path, spark: Any) -> None:
    events = [
        RefInput("ab"[k % 2], 1 + k * 2, 1 + k, f"<item><title>t{k}</title></item>")
        for k in range(30)
    ]
    events.append(RefInput("", 10**4, 31, None))  # time passes: the last windows close
    write_spool(tmp_path / "log", "e.jsonl", events)
    sink = MemorySink([s.name for s in STREAMS])
    running = _run(spark, tmp_path, STREAMS, sink)
    stateful = [r for r in running if r.name != "stateless"]
    assert len(stateful) == 1
    operators = stateful[0].query.lastProgress["stateOperators"]
    # HOURLY once for its five readers, OTHER once: two, where a query per reader had six
    assert len(operators) == 2
    expected = evaluate_streams(STREAMS, events)
    got = {name: {p: sorted(e) for p, e in parts.items()} for name, parts in sink.collected.items()}
    assert got == {name: parts for name, parts in expected.items() if any(parts.values())}
    assert expected["busy"][""] and expected["by_load"]["calm"]


def test_a_generation_saved_by_an_earlier_version_starts_again(tmp_path: Path) -> None:
    from roses_app.spark.layout import (
        LOWERING,
        PLANS_FILE,
        Generation,
        load_generation,
        save_generation,
    )

    folder = tmp_path / "gen-x"
    save_generation(folder, Generation("gen-x", tuple(STREAMS), frozenset(), 7, True, 2))
    assert load_generation(folder) == (tuple(STREAMS), 7, 2)
    # saved before the late operators were packed by cores: one operator per group,
    # as its checkpoint holds them
    (folder / PLANS_FILE).write_bytes(pickle.dumps((tuple(STREAMS), 7, LOWERING)))
    assert load_generation(folder) == (tuple(STREAMS), 7, 0)
    # saved before the plan's modules moved into algebra/plan/ (issue 45): the same
    old = pickle.dumps((tuple(STREAMS), 7, LOWERING, 2), protocol=2)  # names as text
    for module in ("operators", "node", "specs"):
        new = f"croses_app.algebra.plan.{module}\n".encode()
        assert new in old
        old = old.replace(new, f"croses_app.algebra.{module}\n".encode())
    old = old.replace(b"croses_app.algebra.operators\n", b"croses_app.algebra.plan\n")
    (folder / PLANS_FILE).write_bytes(old)
    assert load_generation(folder) == (tuple(STREAMS), 7, 2)
    # the format before each head was computed once: its checkpoint's operators differ
    (folder / PLANS_FILE).write_bytes(pickle.dumps((tuple(STREAMS), 7)))
    assert load_generation(folder) is None
