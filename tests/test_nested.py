"""δ⁺ and δ⁻ tables of seed 002 and the windowed grouping example of seed 000."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import seed_tables as seed
from hypothesis import given, settings
from hypothesis import strategies as st

from roses_app.algebra.reference.nested import (
    delta_delete,
    delta_insert,
    nest,
    windowed_grouping,
)
from roses_app.algebra.time.windows import time_window


@dataclass(frozen=True, order=True)
class Ev:
    ts: int
    name: str


# F of the delta tables: the ω_time,3 window of the window tables, one row per tick
ROWS = [(t, list(seed.TIME_3.get(t, ""))) for t in range(1, 12)]


def joined(rows: list[tuple[int, list[str]]]) -> dict[int, str]:
    return {t: "".join(items) for t, items in rows}


def test_delta_insert_table() -> None:
    assert joined(delta_insert(ROWS)) == seed.DELTA_INSERT


def test_delta_delete_table() -> None:
    assert joined(delta_delete(ROWS)) == seed.DELTA_DELETE


def test_nest_groups_by_timestamp_in_order() -> None:
    events = [(2, "d"), (1, "a"), (1, "b"), (2, "e")]
    assert nest(events) == [(1, ["a", "b"]), (2, ["d", "e"])]


def test_physical_delta_compares_with_the_previous_timestamp_present() -> None:
    # Without rows for empty ticks, δ⁻ can only fire at the next timestamp present.
    rows = [(1, ["a"]), (5, ["b"])]
    assert delta_delete(rows) == [(5, ["a"])]
    assert delta_insert(rows) == [(1, ["a"]), (5, ["b"])]


def test_windowed_grouping_example_of_the_flamestream_seed() -> None:
    # Items 1, 2, 3...; key: 0 for odd, 1 for even; window 3.
    got = windowed_grouping(range(1, 9), lambda n: n % 2, 3)
    assert ["|".join(map(str, group)) for group in got] == seed.FLAMESTREAM


def test_windowed_grouping_needs_a_window() -> None:
    with pytest.raises(ValueError):
        windowed_grouping([1], lambda n: n, 0)


@given(
    st.lists(st.tuples(st.integers(0, 8), st.sampled_from("abcdef")), max_size=20),
    st.integers(1, 4),
)
@settings(max_examples=100, deadline=None)
def test_delta_insert_of_a_time_window_is_delta_insert_of_the_stream(
    raw: list[tuple[int, str]], width: int
) -> None:
    # Seed 002: δ⁺(ω_time,w(F)) = δ⁺(F), logically (a row for every tick).
    events = sorted(Ev(ts, f"{name}{n}") for n, (ts, name) in enumerate(raw))
    ticks = range(0, 14)
    windowed = [(t, time_window(events, t, width)) for t in ticks]
    plain = [(t, [e for e in events if e.ts == t]) for t in ticks]
    assert delta_insert(windowed) == delta_insert(plain)
