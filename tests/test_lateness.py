"""Windows over publication time with an allowed lateness (seed 001).

The rule (:mod:`roses_app.algebra.time.lateness`) on its own, with a plain Python reducer:
Scotty's cases, and properties over random out-of-order arrivals.  Both engines run
it on the ``event_time_windows`` replay fixture (tests/test_replay.py); the last test
runs Spark over that fixture in several micro-batches, its state kept in between.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roses_app.algebra.plan.operators import CountWindow, Report, SessionWindow, TimeWindow
from roses_app.algebra.time.lateness import (
    Arrival,
    LateWindows,
    Planned,
    Settled,
    arrival_groups,
)
from roses_app.algebra.time.slices import ChunkId, Entry, MemorySlices
from roses_app.algebra.time.windows import refresh_bounds, refreshes_holding

DATA = Path(__file__).resolve().parent / "data"
TUMBLING = TimeWindow(10, period=10)  # [1, 10], [11, 20], ... (refreshed at 0, 10, 20)
SLIDING = TimeWindow(10, period=5)  # [1, 10], [6, 15], [11, 20], ...


def categories(planned: Planned) -> list[str | None]:
    """A reducer: the distinct items of each window, sorted (changes only when a new
    value comes)."""
    return [" ".join(sorted(set(c.items))) for c in planned.computations]


def step(windows: LateWindows, groups: Sequence[Sequence[Arrival]]) -> tuple[Planned, Settled]:
    planned = windows.plan(groups)
    return planned, windows.settle(planned, categories(planned))


def item(time: int, seq: int, value: str) -> Arrival:
    return Arrival(time, seq, value)


def test_a_window_is_published_when_the_clock_passes_its_end() -> None:
    windows = LateWindows(TUMBLING, lateness=10)
    _, settled = step(windows, [[item(1, 1, "a"), item(5, 2, "b")], [item(10, 3, "c")]])
    assert settled.emissions == []  # the clock is 10: [1, 10] is not over yet
    _, settled = step(windows, [[item(11, 4, "d")]])
    assert [(e.ts, e.seq, e.item, e.revision) for e in settled.emissions] == [(10, 1, "a b c", 0)]


def test_only_the_windows_a_late_item_changed_are_published_again() -> None:
    # Scotty's tupleInAllowedLatenessTest, on sliding windows: the late item is in two
    # windows; it changes one of them only.
    windows = LateWindows(SLIDING, lateness=20)
    step(windows, [[item(2, 1, "a"), item(7, 2, "b"), item(12, 3, "a")], [item(21, 4, "x")]])
    # closed: [1, 10] = a b, [6, 15] = a b, [11, 20] = a
    planned, settled = step(windows, [[item(8, 5, "b")]])
    assert [(c.start, c.end) for c in planned.computations] == [(1, 10), (6, 15)]
    assert settled.emissions == []  # both windows of time 8 already held b
    assert settled.unchanged == 2
    planned, settled = step(windows, [[item(13, 6, "c")]])
    assert [(c.start, c.end) for c in planned.computations] == [(6, 15), (11, 20)]
    assert [(e.ts, e.seq, e.item, e.revision) for e in settled.emissions] == [
        (15, 6, "a b c", 1),  # the seq of the item that changed it
        (20, 6, "a c", 1),
    ]


def test_an_item_later_than_the_lateness_is_late_and_changes_nothing() -> None:
    windows = LateWindows(TUMBLING, lateness=5)
    step(windows, [[item(3, 1, "a")], [item(16, 2, "b")]])  # [1, 10] closed, kept until 15
    planned, settled = step(windows, [[item(4, 3, "late")]])
    assert planned.late == [item(4, 3, "late")]
    assert settled.emissions == []
    assert (10, None) not in windows.panes  # gone at clock 16 > 10 + 5


def test_a_heartbeat_moves_the_clock_and_an_item_before_every_window_is_in_none() -> None:
    windows = LateWindows(TimeWindow(10, period=10, start=20), lateness=0)
    planned, settled = step(
        windows, [[item(3, 1, "early")], [Arrival(25, 2, None)], [item(22, 3, "a")]]
    )
    assert planned.late == []  # time 3 is before the first window (refreshed at 20)
    assert settled.emissions == []  # [11, 20] holds nothing
    planned, settled = step(windows, [[Arrival(31, 4, None)]])
    assert [(e.ts, e.item) for e in settled.emissions] == [(30, "a")]


def test_arrival_groups_are_in_ingest_order_and_a_copy_is_one_event() -> None:
    a, b, c = item(9, 2, "a"), item(1, 3, "b"), item(5, 1, "c")
    assert arrival_groups([(20, a), (10, c), (20, b), (20, a)]) == [[c], [a, b]]


# -- properties over random arrivals ---------------------------------------------------


@st.composite
def arrivals(draw: Any) -> list[list[Arrival]]:
    """Arrival groups: items at times near the clock (some far behind), heartbeats."""
    groups: list[list[Arrival]] = []
    seq = 0
    now = 0
    for _ in range(draw(st.integers(1, 12))):
        now += draw(st.integers(0, 8))
        group = []
        for _ in range(draw(st.integers(1, 4))):
            seq += 1
            if draw(st.booleans()) and draw(st.booleans()):
                group.append(Arrival(now, seq, None))
            else:
                when = now - draw(st.integers(0, 30))
                group.append(item(when, seq, draw(st.sampled_from("abcd"))))
        groups.append(group)
    return groups


specs = st.sampled_from([TUMBLING, SLIDING, TimeWindow(4, period=10, start=3)])
reports = st.builds(
    lambda close, change, every, tick: Report(close or not (change or every), change, every, tick),
    st.booleans(),
    st.booleans(),
    st.sampled_from([None, 3, 7]),
    st.sampled_from(["batch", "item", "time"]),
)


@settings(max_examples=150, deadline=None)
@given(
    arrivals(),
    specs | st.builds(CountWindow, st.integers(1, 4)) | st.builds(SessionWindow, st.integers(1, 6)),
    st.integers(0, 25),
    reports,
    st.data(),
)
def test_batches_with_the_state_saved_in_between_publish_what_one_pass_does(
    groups: list[list[Arrival]],
    spec: TimeWindow | CountWindow | SessionWindow,
    lateness: int,
    report: Report,
    data: Any,
) -> None:
    if not isinstance(spec, CountWindow) and data.draw(st.booleans()):  # γ: two keys
        groups = [[replace(a, key=f"k{a.seq % 2}") if a.item else a for a in g] for g in groups]
    _, whole = step(LateWindows(spec, lateness, report), groups)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(groups) - 1)), max_size=4)))
    saved: dict[str, Any] | None = None
    store = RecordedSlices()  # the operator's MapState: kept between micro-batches
    emitted = []
    for start, end in zip([0, *cuts], [*cuts, len(groups)], strict=True):
        # as the Spark operator keeps it (roses_app.spark.late)
        text = orjson.dumps(saved, option=orjson.OPT_NON_STR_KEYS)
        windows = LateWindows.load(spec, lateness, report, orjson.loads(text), store)
        emitted += step(windows, groups[start:end])[1].emissions
        saved = windows.dump()
    assert emitted == whole.emissions


class RecordedSlices(MemorySlices):
    """Chunks as MapState keeps them (a copy of each value), and those written."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[tuple[ChunkId, int]] = []  # and how many entries

    def get(self, chunk: ChunkId) -> list[Entry] | None:  # type: ignore[override]
        found = super().get(chunk)
        return None if found is None else list(found)

    def put(self, chunk: ChunkId, entries: list[Entry]) -> None:
        self.written.append((chunk, len(entries)))
        super().put(chunk, list(entries))


def test_a_poll_writes_only_the_items_it_added_and_old_slices_go() -> None:
    """Each item is kept once, in the slice of its time; a micro-batch writes the items
    it added (a late one too, in its own slice), not the slices they went to nor the
    whole state; a slice goes once no window kept holds it."""
    spec = TimeWindow(10, 2)  # every item is in five windows; slices of 2
    store = RecordedSlices()
    saved: dict[str, Any] | None = None
    for poll in range(10):
        windows = LateWindows.load(spec, 6, Report(), saved, store)
        items = [Arrival(t, t, f"<item>{t}</item>", f"k{t % 2}") for t in (poll * 4, poll * 4 + 1)]
        if poll in (6, 7):  # 8 and 12 behind the clock: some of its windows are still kept
            items.append(Arrival(poll * 2 + 1, 100 + poll, "<late/>", "k1"))
        store.written.clear()
        planned, _ = step(windows, [items])
        assert not planned.late
        saved = windows.dump()
        assert sorted(c[:2] for c, _ in store.written) == sorted(
            {(a.key, a.time // 2) for a in items}
        )
        assert sum(n for _, n in store.written) == len(items)
    kept = [e for entries in store.values() for e in entries]
    assert len(kept) == len(set(kept))  # each item once
    assert saved is not None
    lowest = min(start for _, _, start, *_ in saved["panes"])
    # nothing older than the slice of the oldest window kept
    assert all(e.ts // 2 >= lowest // 2 for e in kept)
    assert len(kept) < 12  # of 22


@settings(max_examples=150, deadline=None)
@given(arrivals(), specs, st.integers(0, 25))
def test_the_last_result_of_a_window_is_over_every_item_it_took_and_never_repeats(
    groups: list[list[Arrival]], spec: TimeWindow, lateness: int
) -> None:
    windows = LateWindows(spec, lateness)
    taken: dict[int, set[str]] = {}  # window end -> the items it took (a model)
    last: dict[int, str] = {}
    counts: dict[int, int] = {}
    clock: int | None = None
    for group in groups:
        planned, settled = step(windows, [group])
        for a in group:
            if a.item is None:
                continue
            kept = False
            for refresh in refreshes_holding(spec, a.time):
                _, end = refresh_bounds(spec, refresh)
                if clock is None or end + lateness >= clock:
                    taken.setdefault(end, set()).add(a.item)
                    kept = True
            assert (a in planned.late) == (not kept and len(refreshes_holding(spec, a.time)) > 0)
        times = [a.time for a in group]
        clock = max(times) if clock is None else max(clock, *times)
        for e in settled.emissions:
            assert last.get(e.ts) != e.item  # a result is published again only if changed
            assert e.revision == counts.get(e.ts, 0)
            counts[e.ts] = counts.get(e.ts, 0) + 1
            last[e.ts] = e.item
    for end, result in last.items():
        assert result == " ".join(sorted(taken[end]))


# -- Spark, micro-batch after micro-batch ------------------------------------------------


@pytest.mark.spark
def test_spark_keeps_the_windows_between_micro_batches(tmp_path: Path, spark: Any) -> None:
    from roses_app.config import load_config
    from roses_app.items import Event
    from roses_app.replay import MemorySink, read_events, run_reference
    from roses_app.spark.queries import await_all
    from roses_app.spark.runner import Engine, start_queries
    from roses_app.spoolfiles import write_events

    fixture = DATA / "replay" / "event_time_windows"
    config = load_config(fixture / "feeds.yaml")
    events = read_events(fixture / "events.jsonl")
    streams = [s.stream for s in config.streams.values()]
    sink = MemorySink(list(config.streams))
    # three appends, three runs of the queries over the same checkpoints
    for n, (start, end) in enumerate([(0, 3), (3, 6), (6, len(events.events))]):
        chunk = events.events[start:end]
        write_events(
            tmp_path / "log" / f"events-{n}.jsonl",
            [Event(e.source, e.ts, e.seq, e.item, e.published) for e in chunk],
        )
        engine = Engine(spark, (), tmp_path / "log", tmp_path, sink, once=True)
        await_all(start_queries(engine, streams))
    expected = run_reference(config, events)
    for name, parts in expected.items():
        for part, evs in parts.items():
            assert sorted(sink.collected[name].get(part, [])) == evs, (name, part)


def test_the_counts_per_stream_are_told_from_the_items_dropped_per_step() -> None:
    from roses_app.algebra.time.lateness import split_tallies
    from roses_app.metrics import Metrics, Snapshot

    dropped, tallies = split_tallies(
        {"big/filter": 2, "late:daily": 3, "unchanged:daily": 4, "late:other": 1, "revised:d": 5}
    )
    assert dropped == {"big/filter": 2}
    assert tallies == {
        "late": {"daily": 3, "other": 1},
        "unchanged": {"daily": 4},
        "revised": {"d": 5},
    }
    metrics = Metrics(
        lambda: Snapshot(
            too_late=tallies["late"], unchanged=tallies["unchanged"], revised=tallies["revised"]
        )
    )
    text = metrics.exposition()[0].decode()
    assert 'roses_items_too_late_total{stream="daily"} 3.0' in text
    assert 'roses_windows_unchanged_total{stream="daily"} 4.0' in text
    assert 'roses_windows_revised_total{stream="d"} 5.0' in text


@settings(max_examples=150, deadline=None)
@given(arrivals(), st.integers(1, 6), st.integers(0, 25))
def test_sessions_stay_apart_by_their_gap_and_hold_their_items(
    groups: list[list[Arrival]], gap: int, lateness: int
) -> None:
    windows = LateWindows(SessionWindow(gap), lateness)
    assert windows.items is not None
    merged_away: set[int] = set()
    taken: list[Arrival] = []  # the items not too late
    for group in groups:
        planned, settled = step(windows, [group])
        spans = sorted((p.start, p.end) for p in windows.panes.values())
        for (_, end), (start, _) in pairwise(spans):
            assert start - end >= gap  # else one item would have merged them
        for pane in windows.panes.values():
            held = windows.items.between(pane.key, pane.start, pane.end)
            assert {pane.start, pane.end} <= {e.ts for e in held}
        taken += [a for a in group if a.item is not None and a not in planned.late]
        # an item taken is in a session kept, or older than every one (purged)
        starts = [p.start for p in windows.panes.values()]
        for a in taken:
            assert any(p.start <= a.time <= p.end for p in windows.panes.values()) or all(
                a.time < start for start in starts
            )
        merged_away |= {m.gone[0] for m in planned.merged}
        for e in settled.emissions:
            if e.merged_into is not None:  # a pointer, to a session that is still there
                assert e.ident in merged_away and e.item == ""


def test_seed_001_session_cases_add_extend_and_merge() -> None:
    windows = LateWindows(SessionWindow(10), lateness=30)
    _, settled = step(windows, [[item(1, 1, "a"), item(3, 2, "b")], [item(20, 3, "c")]])
    assert [(e.ident, e.item, e.revision) for e in settled.emissions] == [(1, "a b", 0)]
    _, settled = step(windows, [[item(30, 4, "d")]])  # adds a session; [20] closes
    assert [(e.ident, e.item) for e in settled.emissions] == [(3, "c")]
    _, settled = step(windows, [[item(5, 5, "e")]])  # extends [1, 3] to [1, 5]
    assert [(e.ident, e.start, e.end, e.item, e.revision) for e in settled.emissions] == [
        (1, 1, 5, "a b e", 1)
    ]
    planned, settled = step(windows, [[item(12, 6, "f")]])  # merges [1, 5] and [20]
    assert [(m.gone[0], m.into[0]) for m in planned.merged] == [(3, 1)]
    assert [(e.ident, e.item, e.revision, e.merged_into) for e in settled.emissions] == [
        (3, "", 1, 1),  # the merged one's published result now points to the other
        (1, "a b c e f", 2, None),
    ]
