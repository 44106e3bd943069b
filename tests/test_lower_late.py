"""The late graph (roses_app.spark.lower_late): the operators over publication time
that read one another run in one operator, each computed once per micro-batch, its
results going to the units reading them.  Driven micro-batch after micro-batch
without Spark, the state through JSON as the processor keeps it, every unit a query
reads gives what the reference evaluator gives for it alone; on Spark, a join read
by several streams is one stateful operator."""

from __future__ import annotations

import pickle
import subprocess
import sys
from bisect import bisect_right
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import (
    fed_item_unions,
    fed_operator_plans,
    late_grouping_plans,
    late_join_plans,
    late_sequential_plans,
    late_window_plans,
    out_of_order_event_lists,
    released_chains,
    released_join_plans,
)

from roses_app.algebra.plan.operators import Node, Source, Stream
from roses_app.algebra.planner.late_groups import (
    components,
    late_graph,
    late_unit,
    packed,
    unit_reads,
)
from roses_app.algebra.reference.evaluator import RefInput, evaluate_streams
from roses_app.algebra.time.release_results import fed_release
from roses_app.algebra.time.slices import MemorySlices, SliceMap
from roses_app.spark.lateunits import SourceRow
from roses_app.spark.lower_late import LateGraph
from roses_app.spark.registry import Hooks

Out = tuple[str, int, int, str]  # part, time, seq, item


def source_batches(
    sources: list[Node], events: list[RefInput], cuts: list[int]
) -> dict[Node, dict[int, list[SourceRow]]]:
    """Per source, per micro-batch (cut before the ingest times ``cuts``), its rows
    as the frontier log holds them: its items at their ingest time with their
    publication time, and every heartbeat."""
    found = evaluate_streams([Stream(f"s{n}", node) for n, node in enumerate(sources)], events)
    ingest = {e.seq: e.ts for e in events}
    bounds = sorted(cuts)
    out: dict[Node, dict[int, list[SourceRow]]] = {}
    for n, node in enumerate(sources):
        rows: list[SourceRow] = [(e.ts, e.seq, None, None) for e in events if e.item is None]
        rows += [(ingest[e.seq], e.seq, e.item, e.ts) for e in found[f"s{n}"].get("", []) if e.item]
        batches: dict[int, list[SourceRow]] = {}
        for row in rows:
            batches.setdefault(bisect_right(bounds, row[0]), []).append(row)
        out[node] = batches
    return out


def graph_results(
    roots: list[Node], events: list[RefInput], cuts: list[int], most: int = 0
) -> dict[Node, list[Out]]:
    """What each of ``roots`` publishes when the late graph runs micro-batch after
    micro-batch, as the Spark processor runs it (state through orjson), its groups
    in at most ``most`` operators (0: one each)."""
    out: dict[Node, list[Out]] = {root: [] for root in roots}
    for nodes in packed(components(late_graph(roots)), most):
        graph = LateGraph.of(nodes, Hooks())
        batches = source_batches(list(graph.sources), events, cuts)
        saved: list[Any] = [None] * len(nodes)
        stores: list[SliceMap | None] = [MemorySlices() if u.sliced else None for u in graph.units]
        for batch in range(len(cuts) + 1):
            sources = {node: batches[node].get(batch, []) for node in graph.sources}
            for index, done in enumerate(graph.advance(saved.__getitem__, sources, stores)):
                if done is None:
                    continue
                text = orjson.dumps(done[1], option=orjson.OPT_NON_STR_KEYS)
                saved[index] = orjson.loads(text)
                node = graph.units[index].node
                if node in out:
                    out[node] += [(p, t, s, i) for t, s, i, p in done[0] if i is not None]
    return out


def expected(roots: list[Node], events: list[RefInput]) -> dict[Node, list[Out]]:
    found = evaluate_streams([Stream(f"r{n}", root) for n, root in enumerate(roots)], events)
    return {
        root: [(part, e.ts, e.seq, e.item) for part, es in found[f"r{n}"].items() for e in es]
        for n, root in enumerate(roots)
    }


def late_plans() -> st.SearchStrategy[Node]:
    return st.one_of(
        released_chains(fed_operator_plans() | fed_item_unions()).filter(fed_release),
        released_join_plans(),
        late_window_plans(),
        late_join_plans(),
        late_grouping_plans(),
        late_sequential_plans(),
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=out_of_order_event_lists(max_size=30),
    plan=late_plans(),
    cuts=st.lists(st.integers(1, 30), max_size=4),
)
def test_each_unit_of_a_graph_cut_into_micro_batches_equals_the_reference(
    events: list[RefInput], plan: Node, cuts: list[int]
) -> None:
    """A plan and every unit it reads published as streams of their own (as the
    fixture's `pairs` and the runs over it): each computed once, each equal to the
    reference's answer for it alone, whatever the micro-batches."""
    roots = late_graph([plan])
    got = graph_results(roots, events, cuts)
    want = expected(roots, events)
    for root in roots:  # (as sets: the store keeps an event once, as the reference)
        assert set(got[root]) == set(want[root]), root


CONFIG = """
sources:
  wire: {feed: 'http://example.org/wire', time: published}
  blog: {feed: 'http://example.org/blog', time: published}
streams:
  pairs:
    join:
      left: {window: {from: wire, time: 5us}}
      right: {window: {from: blog, time: 5us}}
      on: '$i1/category = $i2/category'
      lateness: 10us
  counts:
    aggregate:
      from: {window: {from: pairs, time: 10us, every: 10us}}
      reduce: '<item><title>{count($items)} pairs</title></item>'
  fresh:
    delta: {from: {window: {from: pairs, time: 20us}}, kind: insert}
  alone:
    semijoin: {left: wire, right: {window: {from: blog, time: 3us}}, on: 'true()', lateness: 10us}
"""


def config_streams(tmp_path: Path) -> list[Stream]:
    from roses_app.config import parse_config

    config = parse_config(CONFIG, tmp_path / "feeds.yaml")
    return [s.stream for s in config.streams.values()]


def test_a_unit_read_by_several_is_one_unit_and_each_group_apart(tmp_path: Path) -> None:
    """Equal operators are one unit, whatever stream wrote them; units that share
    nothing are separate groups (Spark runs those side by side)."""
    plans = [s.plan for s in config_streams(tmp_path)]
    assert all(late_unit(p) for p in plans)
    units = late_graph(plans)
    assert len(units) == 4  # the join once, though three streams read it
    assert sorted(len(g) for g in components(units)) == [1, 3]
    assert all(unit_reads(p)[0] == (plans[0],) for p in plans[1:3])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=out_of_order_event_lists(max_size=30),
    plans=st.lists(late_plans(), min_size=2, max_size=4),
    cuts=st.lists(st.integers(1, 30), max_size=3),
    most=st.integers(1, 2),
)
def test_groups_packed_into_fewer_operators_give_what_each_gives_alone(
    events: list[RefInput], plans: list[Node], cuts: list[int], most: int
) -> None:
    """Groups that share nothing, run in one or two operators (the cores), each
    micro-batch: every unit still gives the reference's answer for it alone."""
    roots = late_graph(plans)
    got = graph_results(roots, events, cuts, most)
    want = expected(roots, events)
    for root in roots:
        assert set(got[root]) == set(want[root]), root


def test_groups_go_to_at_most_as_many_operators_as_cores_largest_first() -> None:
    """Sizes 1, 3, 1, 2, 1 into two: 3 then 2 then the ones to the lighter operator
    (ties to the first); each operator keeps its groups in their order."""
    sizes = (1, 3, 1, 2, 1)
    groups = [[Source(f"g{n}u{k}") for k in range(size)] for n, size in enumerate(sizes)]
    two = packed(groups, 2)
    assert two == [groups[1] + groups[2], groups[0] + groups[3] + groups[4]]
    assert packed(groups, 0) == packed(groups, 5) == groups  # one operator per group
    assert packed(groups, 1) == [[unit for group in groups for unit in group]]


def test_only_a_generation_whose_operators_all_run_in_the_late_graph_is_under_one_key(
    tmp_path: Path,
) -> None:
    from roses_app.config import parse_config
    from roses_app.spark.generation_frame import under_one_key

    assert under_one_key(config_streams(tmp_path), ())
    # the same operators over ingest time
    ingest = CONFIG.replace(", time: published}", "}").replace("lateness: 10us", "")
    config = parse_config(ingest, tmp_path / "feeds.yaml")
    streams = [s.stream for s in config.streams.values()]
    assert not under_one_key(streams, ())  # Spark's own joins and windows, keyed
    assert not under_one_key([*config_streams(tmp_path), streams[0]], ())


def test_the_processor_spark_unpickles_to_plan_a_query_imports_no_engine(
    tmp_path: Path,
) -> None:
    """Spark plans each such operator in a fresh Python process that unpickles its
    processor and calls ``init``: that needs the states' names, not the units (nor
    pandas, lxml, elementpath); the units come back where rows are handled."""
    from pyspark import cloudpickle

    from roses_app.spark.lateprocessor import LateGraphProcessor

    (nodes,) = [g for g in components(late_graph([config_streams(tmp_path)[1].plan])) if g]
    graph = LateGraph.of(nodes, Hooks())
    pickled = tmp_path / "processor.pickle"
    pickled.write_bytes(cloudpickle.dumps(LateGraphProcessor.of(graph, ((1, None, "s"),), None)))
    code = (
        "import pickle, sys\n"
        f"processor = pickle.loads(open({str(pickled)!r}, 'rb').read())\n"
        "class Handle:\n"
        "    def __init__(self): self.made = []\n"
        "    def getValueState(self, name, ddl): self.made.append(name)\n"
        "    def getMapState(self, name, key, value): self.made.append(name)\n"
        "handle = Handle(); processor.init(handle)\n"
        "heavy = [m for m in ('pandas', 'lxml', 'elementpath') if m in sys.modules]\n"
        "print(handle.made, heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    units = zip(graph.names, graph.units, strict=True)
    sliced = [f"{name}_slices" for name, unit in units if unit.sliced]
    assert done.stdout.strip() == f"{[*graph.names, *sliced]} []"
    processor = pickle.loads(pickled.read_bytes())
    assert pickle.loads(processor.graph).names == graph.names == processor.names


@pytest.mark.spark
def test_spark_runs_a_join_read_by_several_streams_once(tmp_path: Path, spark: Any) -> None:
    """The join and the two runs over it in one stateful operator (before, three
    joins ran: one per stream reading it); the semijoin and a window that share
    nothing with it in a second one, as the session has two cores; the results are
    the reference engine's."""
    from test_globalplan import _run, write_spool

    from roses_app.config import parse_config
    from roses_app.replay import MemorySink

    extra = "  recent:\n    window: {from: blog, time: 4us}\n"
    config = parse_config(CONFIG + extra, tmp_path / "feeds.yaml")
    streams = [s.stream for s in config.streams.values()]
    assert len(components(late_graph([s.plan for s in streams]))) == 3
    events = [
        RefInput(
            ("wire", "blog")[k % 2],
            1 + k,
            1 + k,
            f"<item><title>t{k}</title><category>{'xyz'[k % 3]}</category></item>",
            max(0, 1 + k - (k * 7) % 6),
        )
        for k in range(40)
    ]
    events.append(RefInput("", 200, 41, None))  # time passes: the last windows close
    write_spool(tmp_path / "log", "e.jsonl", events)
    sink = MemorySink([s.name for s in streams])
    running = _run(spark, tmp_path, streams, sink)
    stateful = [r for r in running if r.name != "stateless"]
    assert len(stateful) == 1
    operators = stateful[0].query.lastProgress["stateOperators"]
    assert len(operators) == 2
    # each under one key: one partition (a second would only commit an empty state
    # store); the session's own setting stays for the queries started after
    assert {op["numShufflePartitions"] for op in operators} == {1}
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    expected = evaluate_streams(streams, events)
    assert all(expected[s.name][""] for s in streams)  # each publishes something
    got = {name: {p: sorted(e) for p, e in parts.items()} for name, parts in sink.collected.items()}
    assert got == {name: parts for name, parts in expected.items() if any(parts.values())}
