"""Differential testing: random event lists × random plans, Spark equals the reference.

Each example runs several random streams in one replay so Spark's start-up cost is
shared; output files must be identical, event for event, in the same order.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import (
    event_lists,
    late_window_plans,
    out_of_order_event_lists,
    stream_plans,
    time_plans,
)

from roses_app.algebra.plan.operators import Node
from roses_app.algebra.reference.evaluator import RefInput
from roses_app.config.model import Config, Settings, SparkSettings, StreamConfig
from roses_app.replay import EventList, run_reference, run_spark

pytestmark = pytest.mark.spark


def assert_engines_agree(
    plans: list[Node], events: list[RefInput], tmp_path: Path, lateness: int = 0
) -> None:
    """The plans as streams s0, s1...: Spark's events are the reference's."""
    streams = {f"s{n}": StreamConfig(f"s{n}", plan, None) for n, plan in enumerate(plans)}
    settings = Settings(
        data_dir=tmp_path / "data", spark=SparkSettings(master="local[2]"), lateness=lateness
    )
    config = Config(
        tmp_path / "feeds.yaml",
        settings,
        {},
        streams,
    )
    event_list = EventList(events, iso_times=False)
    assert run_spark(config, event_list, work_dir=tmp_path) == run_reference(config, event_list)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(events=event_lists(max_size=40), plans=st.lists(stream_plans(), min_size=3, max_size=3))
def test_spark_equals_reference(events, plans, spark, tmp_path: Path) -> None:
    assert_engines_agree(plans, events, tmp_path)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(events=event_lists(max_size=30), plans=st.lists(time_plans(), min_size=3, max_size=3))
def test_spark_equals_reference_with_the_operators_of_time(
    events, plans, spark, tmp_path: Path
) -> None:
    # Ticks from 1 (Spark's first watermark is the epoch), and a heartbeat far enough
    # ahead that every window closes and every outer row is decided.
    timed = [RefInput(e.source, e.ts + 1, e.seq, e.item) for e in events]
    timed.append(RefInput("", 10_000, len(events) + 1, None))
    assert_engines_agree(plans, timed, tmp_path)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    events=out_of_order_event_lists(max_size=30),
    plans=st.lists(late_window_plans(), min_size=3, max_size=3),
)
def test_spark_equals_reference_on_out_of_order_items(events, plans, spark, tmp_path: Path) -> None:
    # windows over publication time, with lateness and report policies (seed 001, 003)
    assert_engines_agree(plans, events, tmp_path)
