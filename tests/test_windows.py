"""The window tables of seed 002, row by row (WindowCall at every time of the table),
and the physical Window form at the input's timestamps."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import partial

import pytest
import seed_tables as seed
from hypothesis import given
from hypothesis import strategies as st

from roses_app.algebra.time.windows import count_window, session_window, time_window, window_events


@dataclass(frozen=True)
class Ev:
    ts: int
    name: str


F = [Ev(ts, name) for ts, names in seed.F.items() for name in names]


def names(events: list[Ev]) -> str:
    return "".join(e.name for e in events)


TIME_3 = seed.TIME_3
TIME_2_0_4_1 = {**seed.TIME_2_0_4_1, 9: ""}  # the seed's row 9 is empty
COUNT_8 = seed.COUNT_8


@pytest.mark.parametrize(("t", "expected"), sorted(TIME_3.items()))
def test_time_window_table(t: int, expected: str) -> None:
    assert names(time_window(F, t, 3)) == expected


@pytest.mark.parametrize(("t", "expected"), sorted(TIME_2_0_4_1.items()))
def test_time_window_with_period_and_start_table(t: int, expected: str) -> None:
    assert names(time_window(F, t, 2, delay=0, period=4, start=1)) == expected


@pytest.mark.parametrize(("t", "expected"), sorted(COUNT_8.items()))
def test_count_window_table(t: int, expected: str) -> None:
    assert names(count_window(F, t, 8)) == expected


def test_window_operator_emits_at_input_timestamps_only() -> None:
    # Window(ω_time,3)(F): the rows of the table at 1, 2, 3, 4, 6, 7 (no event at 5).
    emitted = window_events(F, partial(time_window, width=3))
    by_time: dict[int, str] = {}
    for t, e in emitted:
        by_time[t] = by_time.get(t, "") + e.name
    assert by_time == {t: TIME_3[t] for t in (1, 2, 3, 4, 6, 7)}


def test_tumbling_sliding_and_holes() -> None:
    ticks = [Ev(t, str(t)) for t in range(1, 9)]
    # Between refreshes a window shows the last refresh: at 1 none has covered 1 yet.
    tumbling = [names(time_window(ticks, t, 2, period=2, start=0)) for t in range(1, 9)]
    assert tumbling == ["", "12", "12", "34", "34", "56", "56", "78"]
    sliding = [names(time_window(ticks, t, 3, period=2, start=0)) for t in (2, 4, 6)]
    assert sliding == ["12", "234", "456"]
    holes = [names(time_window(ticks, t, 1, period=3, start=0)) for t in (3, 6)]
    assert holes == ["3", "6"]


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        time_window(F, 1, 0)
    with pytest.raises(ValueError):
        time_window(F, 1, 2, period=0)
    with pytest.raises(ValueError):
        count_window(F, 1, 0)


def test_a_session_window_read_as_a_stream_is_the_session_going_on() -> None:
    events = [Ev(t, f"e{t}") for t in (1, 3, 10, 12, 20)]
    at = {t: [e.ts for e in session_window(events, t, 3)] for t in (0, 3, 5, 6, 12, 14, 15, 20)}
    # 3 - 1 < 3: one session; open until 3 + 3; 10 starts another (10 - 3 >= 3)
    assert at == {0: [], 3: [1, 3], 5: [1, 3], 6: [], 12: [10, 12], 14: [10, 12], 15: [], 20: [20]}


@given(st.lists(st.integers(0, 40), max_size=12), st.integers(0, 45), st.integers(1, 6))
def test_a_session_is_the_items_less_than_a_gap_apart_up_to_t_while_open(
    times: list[int], t: int, gap: int
) -> None:
    events = [Ev(ts, f"e{n}") for n, ts in enumerate(sorted(times))]
    found = session_window(events, t, gap)
    past = [e for e in events if e.ts <= t]
    if not past or t - past[-1].ts >= gap:
        assert found == []
        return
    assert found == past[len(past) - len(found) :]  # the last ones up to t
    assert all(b.ts - a.ts < gap for a, b in itertools.pairwise(found))
    before = past[: len(past) - len(found)]
    assert not before or found[0].ts - before[-1].ts >= gap  # the session starts there
