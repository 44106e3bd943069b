"""The one window arithmetic (roses_app.algebra.time.windows), the one delta loop
(roses_app.algebra.time.delta), and the registries of the reference evaluator and of the
feeds.yaml operators: without Spark."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roses_app.algebra.plan.operators import NODE_TYPES, Split, TimeWindow
from roses_app.algebra.reference.nested import delta_delete, delta_insert
from roses_app.algebra.time.delta import delta, present
from roses_app.algebra.time.windows import (
    bounds,
    bucket_layout,
    last_refresh,
    oldest_needed,
    refresh_bounds,
    refreshes_holding,
    time_window,
)

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "reference.md"

windows = st.builds(
    TimeWindow,
    width=st.integers(1, 12),
    period=st.one_of(st.none(), st.integers(1, 12)),
    start=st.integers(-10, 10),
    delay=st.integers(0, 5),
)
periodic = st.builds(
    TimeWindow,
    width=st.integers(1, 12),
    period=st.integers(1, 12),
    start=st.integers(-10, 10),
    delay=st.integers(0, 5),
)


def refreshes(spec: TimeWindow, until: int) -> list[int]:
    """Every refresh t0 + k·f ≤ ``until`` (k ≥ 0), by enumeration."""
    assert spec.period is not None
    return list(range(spec.start, until + 1, spec.period))


# -- refreshes and bounds --------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(spec=windows, t=st.integers(-30, 40))
def test_the_window_at_t_is_the_last_refreshs_up_to_t(spec: TimeWindow, t: int) -> None:
    if spec.period is None:
        assert last_refresh(spec, t) == t
    else:
        done = refreshes(spec, t)
        assert last_refresh(spec, t) == (done[-1] if done else None)
    found = bounds(spec, t)
    refresh = last_refresh(spec, t)
    if refresh is None:
        assert found is None
    else:
        low, high = refresh_bounds(spec, refresh)
        assert found == (low, min(high, t))
        assert (low, high) == (refresh - spec.delay - spec.width + 1, refresh - spec.delay)


@settings(max_examples=300, deadline=None)
@given(spec=windows, t=st.integers(-30, 40), times=st.lists(st.integers(-40, 40), max_size=12))
def test_time_window_holds_the_times_within_bounds(
    spec: TimeWindow, t: int, times: list[int]
) -> None:
    class Ev(NamedTuple):
        ts: int

    events = [Ev(ts) for ts in sorted(times)]
    got = time_window(events, t, spec.width, period=spec.period, start=spec.start, delay=spec.delay)
    found = bounds(spec, t)
    assert got == [e for e in events if found is not None and found[0] <= e.ts <= found[1]]


@settings(max_examples=300, deadline=None)
@given(spec=windows, t=st.integers(-30, 40), later=st.integers(0, 40))
def test_nothing_older_than_oldest_needed_is_shown_later(
    spec: TimeWindow, t: int, later: int
) -> None:
    low = oldest_needed(spec, t)
    found = bounds(spec, t + later)
    assert found is None or found[0] >= low
    if spec.period is not None and t < spec.start:
        assert low == refresh_bounds(spec, spec.start)[0]  # the first refresh's window
    else:
        found_now = bounds(spec, t)
        assert found_now is not None and found_now[0] == low  # what is shown now


@settings(max_examples=300, deadline=None)
@given(spec=periodic, ts=st.integers(-30, 40))
def test_refreshes_holding_an_event(spec: TimeWindow, ts: int) -> None:
    expected = [
        r
        for r in refreshes(spec, ts + spec.delay + spec.width)
        if refresh_bounds(spec, r)[0] <= ts <= refresh_bounds(spec, r)[1]
    ]
    assert list(refreshes_holding(spec, ts)) == expected


@settings(max_examples=300, deadline=None)
@given(spec=periodic)
def test_bucket_layout_ends_a_bucket_where_each_window_ends(spec: TimeWindow) -> None:
    layout = bucket_layout(spec)
    assert spec.period is not None
    assert (layout.slide, layout.width) == (spec.period, spec.width)
    assert layout.duration == max(spec.width, spec.period) >= layout.slide
    assert 0 <= layout.offset < layout.slide
    assert layout.first_end == refresh_bounds(spec, spec.start)[1] + 1
    for r in refreshes(spec, spec.start + 5 * spec.period):
        end = refresh_bounds(spec, r)[1] + 1  # Spark's exclusive end
        assert (end - layout.duration - layout.offset) % layout.slide == 0


def test_a_window_without_period_has_no_buckets() -> None:
    with pytest.raises(ValueError, match="no period"):
        bucket_layout(TimeWindow(3))
    with pytest.raises(ValueError):
        refreshes_holding(TimeWindow(3), 1)


# -- delta -----------------------------------------------------------------------------


class Ev(NamedTuple):
    ts: int
    seq: int
    item: str | None


rows = st.lists(
    st.tuples(st.integers(0, 12), st.one_of(st.none(), st.sampled_from("abcd"))), max_size=20
)


@settings(max_examples=300, deadline=None)
@given(rows=rows, kind=st.sampled_from(["insert", "delete"]))
def test_delta_is_the_nested_oracle_over_the_timestamps_present(
    rows: list[tuple[int, str | None]], kind: str
) -> None:
    events = sorted(Ev(ts, seq, item) for seq, (ts, item) in enumerate(rows))
    out, _ = delta(kind, events, {}, Ev)
    nested: dict[int, list[str]] = {}
    for e in events:
        nested.setdefault(e.ts, [])
        if e.item is not None and e.item not in nested[e.ts]:
            nested[e.ts].append(e.item)
    oracle = delta_insert if kind == "insert" else delta_delete
    expected = [(t, sorted(items)) for t, items in oracle(sorted(nested.items()))]
    got: dict[int, list[str]] = {}
    for e in out:
        got.setdefault(e.ts, []).append(e.item or "")
    assert [(t, sorted(items)) for t, items in sorted(got.items())] == expected


@settings(max_examples=300, deadline=None)
@given(rows=rows, kind=st.sampled_from(["insert", "delete"]), cut=st.integers(0, 13))
def test_delta_in_two_batches_is_delta_in_one(
    rows: list[tuple[int, str | None]], kind: str, cut: int
) -> None:
    # Spark's Delta operator carries the last time's items from one batch to the next.
    events = sorted(Ev(ts, seq, item) for seq, (ts, item) in enumerate(rows))
    whole, last = delta(kind, events, {}, Ev)
    first, kept = delta(kind, [e for e in events if e.ts < cut], {}, Ev)
    second, again = delta(kind, [e for e in events if e.ts >= cut], present(kept.values()), Ev)
    assert first + second == whole
    assert again == last


# -- registries ------------------------------------------------------------------------


def test_every_node_type_but_split_has_reference_semantics() -> None:
    from roses_app.algebra.reference.evaluator import evaluated_types

    assert evaluated_types() == set(NODE_TYPES) - {Split}


def documented_operators() -> list[str]:
    """The operator keys of the operator table of docs/reference.md, in order."""
    lines = REFERENCE.read_text(encoding="utf-8").splitlines()
    table = lines.index("| operator | meaning |")
    names: list[str] = []
    for line in lines[table + 2 :]:
        if not line.startswith("|"):
            break
        if line.startswith("| `"):
            cell = line.split(" | ")[0]
            for name in re.findall(r"`(\w+):", cell):
                if name not in names:
                    names.append(name)
    return names


def test_the_operator_registry_holds_every_documented_operator() -> None:
    from roses_app.config import streams_stateless, streams_time
    from roses_app.config.streams import operator, operator_names

    documented = documented_operators()
    assert "filter" in documented and "unnest" in documented  # the table was found
    assert list(operator_names()) == documented
    in_docstrings = [
        name
        for module in (streams_stateless, streams_time)
        for name in re.findall(r"^(\w+):", module.__doc__ or "", re.MULTILINE)
    ]
    assert set(in_docstrings) == set(documented)
    assert [n for n in documented if (spec := operator(n)) and spec.root_only] == ["split"]
