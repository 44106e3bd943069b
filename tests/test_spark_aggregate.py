"""α (Aggregate), γ (GroupBy) and Nest on Spark (roses_app/spark/aggregate.py).

The replay fixtures tests/data/replay/agg_* run through both engines in
tests/test_replay.py; here every reduced item must carry its window's guid and
bounds.  The bucket arithmetic (the seed's inclusive windows on Spark's half-open,
aligned ones) is checked against the reference on random windows without Spark.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roses_app.algebra.plan.operators import (
    Aggregate,
    GroupBy,
    Nest,
    Node,
    Origin,
    Source,
    Stream,
    TimeWindow,
    XQuery,
)
from roses_app.algebra.reference.evaluator import RefEvent
from roses_app.algebra.time.windows import closed_windows
from roses_app.config import load_config
from roses_app.items import iso8601
from roses_app.replay import read_events, run_reference
from roses_app.spark.aggregate import Buckets, periodic_buckets, periodic_input
from roses_app.xmlfn.reduce import reduce_groups
from roses_app.xmlfn.stamp import ROSES_NS, window_guid
from roses_app.xmlfn.xpath import parse

DATA = Path(__file__).resolve().parent / "data"
FIXTURES = sorted(p for p in (DATA / "replay").glob("agg_*") if (p / "events.jsonl").exists())
WINDOW = f"{{{ROSES_NS}}}window"


def _spec(plan: Node) -> TimeWindow | None:
    if isinstance(plan, Aggregate | GroupBy):
        found = periodic_input(plan.input)
        return found[1] if found else None
    return None


def expected_bounds(ts: int, spec: TimeWindow | None) -> tuple[int, int]:
    """[r−d−w+1, r−d] for a refresh r ≥ t0 of a periodic window; [ts, ts] otherwise."""
    if spec is None:
        return ts, ts
    assert spec.period is not None
    refresh = ts + spec.delay
    assert refresh >= spec.start and (refresh - spec.start) % spec.period == 0
    return ts - spec.width + 1, ts


@pytest.mark.parametrize("fixture", FIXTURES, ids=[p.name for p in FIXTURES])
def test_reduced_items_carry_their_window(fixture: Path) -> None:
    # On the reference's events: tests/test_replay.py shows Spark's are the same.
    config = load_config(fixture / "feeds.yaml")
    for stream, parts in run_reference(config, read_events(fixture / "events.jsonl")).items():
        plan = config.streams[stream].plan
        if isinstance(plan, Nest):
            continue
        for event in parts[""]:
            item = parse(event.item or "")
            window = item.find(WINDOW)
            assert window is not None, event
            start, end = expected_bounds(event.ts, _spec(plan))
            key = window.get("key")
            assert (window.get("start"), window.get("end")) == (iso8601(start), iso8601(end))
            assert item.findtext("guid") == window_guid(stream, start, end, key)
            assert (key is not None) == isinstance(plan, GroupBy)


# -- the bucket arithmetic, without Spark ----------------------------------------------


def spark_windows(ts: int, buckets: Buckets) -> list[tuple[int, int]]:
    """What Spark's window() gives a row at ``ts`` (its algorithm), after the filters of
    ``collect``: inclusive (start, end) of each seed window the row is in."""
    last_start = ts - (ts - buckets.offset) % buckets.slide
    out = []
    for k in range(math.ceil(buckets.duration / buckets.slide)):
        low = last_start - k * buckets.slide
        if not low <= ts < low + buckets.duration:
            continue
        end = low + buckets.duration - 1
        start = end - buckets.width + 1
        if ts >= start and (buckets.first_end is None or end >= buckets.first_end - 1):
            out.append((start, end))
    return out


@settings(max_examples=300, deadline=None)
@given(
    width=st.integers(1, 12),
    period=st.integers(1, 12),
    start=st.integers(-10, 10),
    delay=st.integers(0, 5),
    times=st.lists(st.integers(-20, 40), min_size=1, max_size=12),
)
def test_buckets_hold_the_reference_windows(
    width: int, period: int, start: int, delay: int, times: list[int]
) -> None:
    spec = TimeWindow(width, period, start, delay)
    events = sorted(RefEvent(t, seq, "<item/>") for seq, t in enumerate(times))
    expected = {
        (low, high): [e.ts for e in content]
        for low, high, content in closed_windows(events, spec, until=10**9)
    }
    got: dict[tuple[int, int], list[int]] = {}
    for e in events:
        for bounds in spark_windows(e.ts, periodic_buckets(spec)):
            got.setdefault(bounds, []).append(e.ts)
    assert got == expected


# -- the reducer UDF's work, and its errors --------------------------------------------


def test_reduce_groups_binds_the_key_of_each_group_and_stamps_it() -> None:
    query = XQuery("<item><title>{ $key }{ count($items) }</title></item>")
    items = ["<item><title>x</title></item>"]
    groups = [(items, 1, 3, "a"), (items * 2, 4, 6, "b"), (items * 3, 1, 3, "a")]
    out = reduce_groups(query, (), "s", groups)
    titles = [parse(x or "").findtext("title") for x in out]
    assert titles == ["a1", "b2", "a3"]
    assert parse(out[1] or "").findtext("guid") == "roses:s/4/6/b"


def test_reduce_groups_reports_a_failing_group_and_keeps_the_others() -> None:
    query = XQuery(
        "if (count($items) = 2) then error(xs:QName('boom'), 'two') "
        "else <item><title>{ count($items) }</title></item>"
    )
    calls: list[tuple[str | None, Exception]] = []
    items = ["<item><title>x</title></item>"]
    groups = [(items, 1, 1, None), (items * 2, 2, 2, None), (items * 3, 3, 3, None)]
    out = reduce_groups(query, (), "s", groups, lambda xml, exc: calls.append((xml, exc)))
    assert [x is None for x in out] == [False, True, False]
    assert len(calls) == 1 and "two" in str(calls[0][1])


@pytest.mark.spark
def test_a_failing_reducer_is_counted_for_its_step(spark: object) -> None:
    from roses_app.items import Event
    from roses_app.replay import MemorySink
    from roses_app.spark.queries import await_all
    from roses_app.spark.runner import Engine, error_counter, start_queries
    from roses_app.spoolfiles import write_events

    origin = Origin(stream="counted", step="counted/aggregate")
    query = XQuery(
        "if (count($items) = 2) then error(xs:QName('boom'), 'two') "
        "else <item><title>{ count($items) }</title></item>"
    )
    plan = Aggregate(Source("F"), query, "counted", origin=origin)
    events = [
        Event("F", t, seq, "<item><title>x</title></item>") for seq, t in enumerate((1, 2, 2, 3))
    ]
    sink = MemorySink(["counted"])
    with tempfile.TemporaryDirectory() as work:
        write_events(Path(work) / "log" / "e.jsonl", [*events, Event("", 10**6, 9, None)])
        errors = error_counter(spark)  # type: ignore[arg-type]
        engine = Engine(spark, (), Path(work) / "log", Path(work), sink, once=True, errors=errors)  # type: ignore[arg-type]
        await_all(start_queries(engine, [Stream("counted", plan)]))
    assert sorted(e.ts for e in sink.collected["counted"][""]) == [1, 3]
    assert errors.value == {"counted/aggregate": 1}


@pytest.mark.spark
def test_an_input_without_watermark_is_refused_naming_the_node(spark: object) -> None:
    from pyspark.sql import functions as F

    from roses_app.errors import QueryError
    from roses_app.spark.lower import LowerContext, lower

    frame = spark.createDataFrame(  # type: ignore[attr-defined]
        [("F", 1, 1, "<item/>")], "source string, ts bigint, seq bigint, item string"
    ).withColumn("time", F.timestamp_micros("ts"))  # no watermark on it
    origin = Origin("feeds.yaml", 7, "digest", "digest/aggregate")
    node = Aggregate(Source("F"), XQuery("<item/>"), "digest", origin=origin)
    with pytest.raises(QueryError, match=r"feeds\.yaml:7"):
        lower(node, LowerContext(frame))
