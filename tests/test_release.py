"""Delta, nest and windows read as streams over publication time
(roses_app.algebra.release): what is released does not depend on how the arrivals are
cut into micro-batches, comes out in time order, and leaves out exactly the items
later than the lateness; the config takes these operators; Spark publishes what the
reference evaluator does.  The ``event_time_release`` replay fixture runs both engines
end to end."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import SPARK_EXAMPLES, late_sequential_plans, out_of_order_event_lists
from test_differential import assert_engines_agree

from roses_app.algebra.eventtime import late_sequential
from roses_app.algebra.lateness import arrival_groups
from roses_app.algebra.panes import Arrival
from roses_app.algebra.plan import Delta, Nest, Node, Window
from roses_app.algebra.reference import RefInput
from roses_app.algebra.release import Release, release_order
from roses_app.config import parse_config


def arrivals(events: list[RefInput]) -> list[list[Arrival]]:
    """Each input event at its time (its publication time when it has one)."""
    return arrival_groups(
        (e.ts, Arrival(e.ts if e.published is None else e.published, e.seq, e.item)) for e in events
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=out_of_order_event_lists(max_size=30),
    lateness=st.integers(0, 10),
    cuts=st.lists(st.integers(1, 30), max_size=4),
)
def test_what_is_released_does_not_depend_on_the_micro_batches(
    events: list[RefInput], lateness: int, cuts: list[int]
) -> None:
    groups = arrivals(events)
    whole, whole_late = Release(lateness).advance(groups)
    bounds = sorted({0, len(groups), *(c for c in cuts if c < len(groups))})
    saved: dict[str, Any] | None = None
    released: list[Arrival] = []
    late: list[Arrival] = []
    for start, end in itertools.pairwise(bounds):
        release = Release.load(lateness, saved)
        now, too_late = release.advance(groups[start:end])
        released += now
        late += too_late
        saved = json.loads(json.dumps(release.dump()))
    assert released == whole and late == whole_late
    # in time order across micro-batches: the stages see them as over ingest time
    assert released == sorted(released, key=release_order)
    # an item is too late when it is more than the lateness before the clock
    clock: int | None = None
    for group in groups:
        for a in group:
            if a.item is not None:
                assert (a in late) == (clock is not None and a.time < clock - lateness)
        clock = max([a.time for a in group] + ([] if clock is None else [clock]))
    assert clock is None or all(a.time < clock - lateness for a in released)


def test_an_item_is_held_until_the_clock_is_the_lateness_past_it() -> None:
    release = Release(5)
    first, _ = release.advance([[Arrival(10, 1, "<item>a</item>")]])
    assert first == []  # nothing can tell yet whether an item before 10 will come
    late_one = Arrival(7, 2, "<item>b</item>")
    second, _ = release.advance([[late_one], [Arrival(14, 3, "<item>c</item>")]])
    assert [a.time for a in second] == [7]  # 7 < 14 - 5; 10 is not yet
    third, too_late = release.advance([[Arrival(1, 4, "<item>d</item>")], [Arrival(40, 5, None)]])
    assert [a.time for a in third] == [10, 14] and [a.time for a in too_late] == [1]


HEAD = """
sources:
  wire: {feed: "http://example.org/wire", time: published}
streams:
"""


def test_the_config_takes_delta_nest_and_windows_over_publication_time(tmp_path: Path) -> None:
    config = parse_config(
        HEAD
        + "  recent: {window: {from: wire, time: 1d}}\n"
        + "  gone: {delta: {from: {window: {from: wire, count: 20}}, kind: delete}}\n"
        + "  daily: {nest: {from: wire}}\n",
        tmp_path / "feeds.yaml",
    )
    plans = {name: stream.plan for name, stream in config.streams.items()}
    assert isinstance(plans["recent"], Window) and isinstance(plans["gone"], Delta)
    assert isinstance(plans["daily"], Nest)
    assert all(late_sequential(plan) is not None for plan in plans.values())


@pytest.mark.spark
@SPARK_EXAMPLES
@given(
    events=out_of_order_event_lists(max_size=30),
    plans=st.lists(late_sequential_plans(), min_size=2, max_size=2),
    lateness=st.integers(0, 10),
)
def test_spark_equals_reference_on_released_operators_over_out_of_order_items(
    events: list[RefInput], plans: list[Node], lateness: int, spark: Any, tmp_path: Path
) -> None:
    assert_engines_agree(plans, events, tmp_path, lateness)
