"""Heartbeats are written only while time alone can still change a result."""

from __future__ import annotations

from pathlib import Path

from roses_app.algebra.plan.operators import (
    Aggregate,
    CountWindow,
    Filter,
    Join,
    Source,
    Stream,
    TimeWindow,
    Union,
    Window,
    XQuery,
)
from roses_app.algebra.planner.heartbeats import (
    MAX_INTERVAL,
    MICROS,
    MIN_INTERVAL,
    heartbeat_plan,
    next_refresh,
)
from roses_app.spool import Spool

HOUR = 3600 * MICROS
DIGEST = XQuery("<item><title>{ count($items) }</title></item>")
HOURLY = TimeWindow(HOUR, period=HOUR)


def _hourly_digest() -> Stream:
    return Stream("digest", Aggregate(Window(Source("a"), HOURLY), DIGEST, "hourly"))


def test_stateless_streams_need_no_heartbeat() -> None:
    streams = [Stream("f", Filter(Source("a"), "title")), Stream("u", Union((Source("a"),)))]
    assert heartbeat_plan(streams) is None


def test_an_hourly_digest_beats_every_six_minutes_and_just_after_each_hour() -> None:
    plan = heartbeat_plan([_hourly_digest()])
    assert plan is not None
    assert plan.interval == HOUR // 10
    item = 10 * HOUR + 5 * MICROS
    # right after the item: the next heartbeat six minutes later
    assert plan.next_due(item, item) == item + HOUR // 10
    # close to the end of the hour, the refresh comes first: just after 11:00
    late = 11 * HOUR - 60 * MICROS
    assert plan.next_due(item, late) == 11 * HOUR + MICROS
    # the lateness delays the refresh heartbeat by as much
    assert plan.next_due(item, late, lateness=120 * MICROS) == 11 * HOUR + 121 * MICROS


def test_heartbeats_stop_once_the_last_item_is_past_every_window() -> None:
    plan = heartbeat_plan([_hourly_digest()])
    assert plan is not None
    item = 10 * HOUR
    assert plan.horizon == 2 * HOUR  # width + period
    assert plan.next_due(item, item + 2 * HOUR) is not None
    assert plan.next_due(item, item + 3 * HOUR) is None
    assert plan.next_due(None, item) is None  # no item ever: nothing to close


def test_count_windows_get_one_heartbeat_after_a_quiet_spell() -> None:
    plan = heartbeat_plan([Stream("last5", Window(Source("a"), CountWindow(5)))])
    assert plan is not None
    assert (plan.interval, plan.horizon, plan.refreshes) == (MIN_INTERVAL, 0, ())
    item = 1000 * MICROS
    first = plan.next_due(item, item)
    assert first == item + MIN_INTERVAL
    assert first is not None and plan.next_due(item, first) is None


def test_the_interval_is_bounded_and_windows_below_windows_add_up() -> None:
    day = 24 * HOUR
    joined = Join(Window(Source("a"), TimeWindow(day)), Window(Source("b"), TimeWindow(day)))
    week = Window(Window(Source("c"), TimeWindow(7 * day)), TimeWindow(day))
    plan = heartbeat_plan([Stream("j", joined), Stream("w", week)])
    assert plan is not None
    assert plan.interval == MAX_INTERVAL
    assert plan.horizon == 8 * day
    short = heartbeat_plan([Stream("s", Window(Source("a"), TimeWindow(60 * MICROS)))])
    assert short is not None and short.interval == MIN_INTERVAL


def test_refresh_instants() -> None:
    spec = TimeWindow(HOUR, period=HOUR, start=30 * MICROS)
    assert next_refresh(spec, 0) == 30 * MICROS
    assert next_refresh(spec, 30 * MICROS) == 30 * MICROS + HOUR
    assert next_refresh(spec, 30 * MICROS + HOUR - 1) == 30 * MICROS + HOUR


def test_the_spool_knows_its_last_item_apart_from_heartbeats(tmp_path: Path) -> None:
    now = [100 * MICROS]
    spool = Spool(tmp_path / "spool", clock=lambda: now[0])
    assert spool.last_item_ts() is None
    spool.append("a", [("<item><title>x</title></item>", None)])
    now[0] = 200 * MICROS
    spool.heartbeat()
    assert (spool.last_item_ts(), spool.last_ts()) == (100 * MICROS, 200 * MICROS)
    spool.close()
    reopened = Spool(tmp_path / "spool")
    assert reopened.last_item_ts() == 100 * MICROS
    reopened.close()
