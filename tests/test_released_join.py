"""Joins, semijoins and differences over operators' results over publication time
(:func:`roses_app.algebra.time.eventtime.released_joined`): both sides released together,
each as a released run reads its operators' results and items
(:class:`roses_app.algebra.time.release_results.SidesRelease`), then joined in time order.

The micro-batch property runs the Spark operator's logic
(:class:`roses_app.spark.lower_late.LateGraph`, whose unit
:class:`roses_app.spark.lateunits.ReleasedJoinUnit` is) batch after batch, with each
side's operators cut into the same batches; the replay fixture ``event_time_chained`` runs
both engines end to end (``pairs_and_counts``, ``pairs_with_blog``, ``lonely_pairs``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import SPARK_EXAMPLES, out_of_order_event_lists, released_join_plans
from test_differential import assert_engines_agree
from test_lower_late import graph_results

from roses_app.algebra.plan.operators import Node, Stream
from roses_app.algebra.reference.evaluator import RefInput, evaluate_streams
from roses_app.algebra.time.latejoin import LEFT, RIGHT
from roses_app.algebra.time.panes import Arrival
from roses_app.algebra.time.release_results import FedRelease, SidesRelease, mark_seq


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    events=out_of_order_event_lists(max_size=30),
    plan=released_join_plans(),
    cuts=st.lists(st.integers(1, 30), max_size=4),
)
def test_a_join_of_operators_results_cut_into_micro_batches_equals_the_reference(
    events: list[RefInput], plan: Node, cuts: list[int]
) -> None:
    """Whatever the micro-batches: each side's operators' results through their
    clocks, its items through its own release, both sides out once both decided."""
    found = {(t, seq, item) for _, t, seq, item in graph_results([plan], events, cuts)[plan]}
    expected = evaluate_streams([Stream("s", plan)], events)["s"].get("", [])
    assert found == {(e.ts, e.seq, e.item) for e in expected}  # (events: a set)


def test_a_side_waits_for_the_other_to_decide_a_time() -> None:
    """The left side's operator has decided up to 30, the right's up to 10: only what
    is before 10 comes out, each event with its side; the rest once the right side
    tells 40."""
    release = SidesRelease((FedRelease(1), FedRelease(1)))
    left = [[Arrival(5, 3, "<item>a</item>"), Arrival(20, 4, "<item>b</item>")]]
    left[0].append(Arrival(30, mark_seq(0), None))
    right = [[Arrival(8, 5, "<item>c</item>"), Arrival(10, mark_seq(0), None)]]
    out, late = release.advance(left, right)
    assert [(a.time, a.key) for a in out] == [(5, LEFT), (8, RIGHT)] and late == []
    release = SidesRelease.load([(1, None), (1, None)], json.loads(json.dumps(release.dump())))
    out, _ = release.advance([], [[Arrival(40, mark_seq(0), None)]])
    assert [(a.time, a.item, a.key) for a in out] == [(20, "<item>b</item>", LEFT)]


@pytest.mark.spark
@SPARK_EXAMPLES
@given(events=out_of_order_event_lists(max_size=30), plan=released_join_plans())
def test_spark_equals_reference_on_joins_of_operators_results(
    events: list[RefInput], plan: Node, spark: Any, tmp_path: Path
) -> None:
    assert_engines_agree([plan], events, tmp_path)
