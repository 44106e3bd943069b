"""The sequential operators (Window, Delta, WindowedGrouping) on Spark.

* Their batch-by-batch logic (``roses_app.spark.sequential``) equals the reference
  evaluator on random event lists cut into random micro-batches (no Spark needed).
* On Spark, the seed's tables: ω_time,3, ω_time,2,0,4,1 and ω_count,8 of F, δ⁺ and δ⁻ of
  ω_time,3(F), and FlameStream's windowed grouping example (the ``seq_windows`` replay
  fixture, all its streams in one query; test_replay runs it through ``run_spark``).
* A long run in many micro-batches, stopped and restarted from its checkpoint, equals
  the reference and keeps in its state only what the windows need.

All the streams of a test run as one query: a transformWithState operator starts a
Python process on the driver when its query starts, which Spark gives 10 s to connect
back; several queries starting at once on a busy machine can miss that.
"""

from __future__ import annotations

import functools
import os
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import seed_tables as seed
from hypothesis import example, given, settings
from hypothesis import strategies as st

from roses_app.algebra.plan.operators import (
    CountWindow,
    Delta,
    Node,
    Source,
    TimeWindow,
    Window,
    WindowSpec,
)
from roses_app.algebra.reference.evaluator import RefEvent, RefInput, evaluate
from roses_app.algebra.time.windows import count_window, time_window
from roses_app.config import load_config
from roses_app.config.model import Config
from roses_app.items import Event as SpoolEvent
from roses_app.replay import EventList, Outputs, read_events, run_reference
from roses_app.spark.sequential import (
    EVENTS_STATE,
    DeltaOperator,
    Event,
    Memory,
    Operator,
    WindowOperator,
    process,
    read_rows,
)
from roses_app.spoolfiles import write_events

FIXTURE = Path(__file__).resolve().parent / "data" / "replay" / "seq_windows"

# -- the seed's tables, at the times of the fixture (heartbeats at 5, 8, 9 and 10) -----

TIME_3 = seed.TIME_3
TIME_2_0_4_1 = seed.TIME_2_0_4_1
COUNT_8 = {**seed.COUNT_8, 10: "jklmnopqr"}  # the fixture has a heartbeat at 10 too
INSERTED = seed.DELTA_INSERT
DELETED = seed.DELTA_DELETE
PARITY = seed.FLAMESTREAM

TITLE = re.compile(r"<title>(.*?)</title>")


def title(event: RefEvent) -> str:
    found = TITLE.search(event.item or "")
    assert found is not None, event
    return found.group(1)


def by_time(events: Sequence[RefEvent]) -> dict[int, str]:
    """The titles of each output time, in output order, joined."""
    rows: dict[int, str] = defaultdict(str)
    for e in events:
        rows[e.ts] += title(e)
    return dict(rows)


# -- batch by batch, without Spark -----------------------------------------------------


def forbid_errors(xml: str | None, exc: Exception) -> None:
    raise AssertionError(f"unexpected error on {xml}: {exc}")


def run_batches(
    processors: Sequence[Sequence[Operator]], batches: Sequence[list[Event]]
) -> list[RefEvent]:
    """Processors (each a chain of stages, the output of one the input of the next)
    over micro-batches, each row delivered twice (as by a union of two branches): the
    item events of the last one."""
    memories = [Memory() for _ in processors]
    out: list[RefEvent] = []
    for batch in batches:
        rows = [Event(*e) for e in batch]
        for stages, memory in zip(processors, memories, strict=True):
            frame = pd.DataFrame(rows, columns=["ts", "seq", "item"])
            rows = process(stages, memory, read_rows(iter([frame, frame])), 0, forbid_errors)
        out.extend(RefEvent(*e) for e in rows if e.item is not None)
    return sorted(out)


specs: st.SearchStrategy[WindowSpec] = st.one_of(
    st.builds(
        TimeWindow,
        width=st.integers(1, 4),
        period=st.none() | st.integers(1, 4),
        start=st.integers(0, 3),
        delay=st.integers(0, 2),
    ),
    st.builds(CountWindow, st.integers(1, 5)),
)
steps = st.one_of(specs, st.sampled_from(["insert", "delete"]))


@st.composite
def inputs(draw: st.DrawFn) -> list[RefInput]:
    times = sorted(draw(st.lists(st.integers(0, 10), max_size=20)))
    return [
        RefInput("", t, seq, None)
        if draw(st.integers(0, 4)) == 0  # some heartbeats
        else RefInput("a", t, seq, f"<i>{draw(st.sampled_from('xyz'))}</i>")
        for seq, t in enumerate(times, start=1)
    ]


@settings(max_examples=200, deadline=None)
# a heartbeat time must reach every stage: δ⁻ of δ⁺ sees x go at 2, an empty time
@example(
    events=[RefInput("a", 1, 1, "<i>x</i>"), RefInput("", 2, 2, None)],
    chain=[TimeWindow(1), "insert", "delete"],
    fused=3,
    cuts=set(),
)
@given(
    events=inputs(),
    chain=st.lists(steps, min_size=1, max_size=4),
    fused=st.integers(1, 4),
    cuts=st.sets(st.integers(0, 10)),
)
def test_batch_by_batch_equals_the_reference(
    events: list[RefInput], chain: list[WindowSpec | str], fused: int, cuts: set[int]
) -> None:
    plan: Node = Source("a")
    operators: list[Operator] = []
    for step in chain:
        if isinstance(step, str):
            plan = Delta(plan, step)
            operators.append(DeltaOperator(step))
        else:
            plan = Window(plan, step)
            operators.append(WindowOperator(step))
    # micro-batches in time order: a cut before time c starts a new batch
    batches: dict[int, list[Event]] = defaultdict(list)
    for e in events:
        batches[sum(c <= e.ts for c in cuts)].append(Event(e.ts, e.seq, e.item))
    # the first ``fused`` nodes in one processor, the others in a second one
    processors = [operators[:fused], operators[fused:]] if fused < len(chain) else [operators]
    got = run_batches(processors, [batches[k] for k in sorted(batches)])
    assert got == evaluate(plan, events)


def test_a_late_row_is_reported_and_dropped() -> None:
    memory = Memory(clock=5)
    dropped: list[tuple[str | None, Exception]] = []
    rows = [
        Event(4, 1, "<i>old</i>"),
        Event(5, 2, None),
        Event(6, 3, "<i>new</i>"),
        Event(7, 4, None),
    ]
    out = process(
        [WindowOperator(TimeWindow(3))], memory, rows, 0, lambda x, e: dropped.append((x, e))
    )
    assert out == [Event(6, 3, "<i>new</i>"), Event(7, 3, "<i>new</i>"), Event(7, 4, None)]
    assert [xml for xml, _ in dropped] == ["<i>old</i>"]
    assert "after time 5" in str(dropped[0][1])
    assert memory == Memory(7, {0: [Event(6, 3, "<i>new</i>")]})


# -- on Spark: the seed's tables -------------------------------------------------------


@pytest.mark.spark
def test_seed_tables_on_spark(spark: object, tmp_path: Path) -> None:
    config = load_config(FIXTURE / "feeds.yaml")
    events = read_events(FIXTURE / "events.jsonl").events
    write_spool(tmp_path / "log", events, per_file=5)  # two micro-batches
    got, _ = run_in_one_query(spark, config, tmp_path / "log", tmp_path / "checkpoint")
    reference = run_reference(config, EventList(events, iso_times=False))
    assert got == reference
    out = {name: parts[""] for name, parts in reference.items()}
    assert by_time(out["time3"]) == TIME_3
    assert by_time(out["periodic"]) == TIME_2_0_4_1
    assert by_time(out["count8"]) == COUNT_8
    assert by_time(out["inserted"]) == INSERTED
    assert by_time(out["deleted"]) == DELETED
    assert [title(e) for e in out["parity"]] == PARITY


# -- on Spark: many micro-batches, a restart, and the state's size ---------------------

LONG_FEEDS = """
sources:
  F: {feed: "file:F.xml"}
  G: {feed: "file:G.xml"}
streams:
  last4:
    window:
      # every F event reaches the window twice: the union is a set
      from: {union: [F, {filter: {from: F, where: "true()"}}]}
      count: 4
  gone:
    delta: {from: {window: {from: F, time: 5us}}, kind: delete}
  pairs:
    grouping:
      from: {union: [F, G]}
      by: "string(category)"
      window: 2
      reduce: |
        declare variable $items external;
        <item><title>{ $key }: { string-join($items/title, ' ') }</title></item>
"""
LAST = 24  # times 1..24; every sixth one is a heartbeat only


def long_events() -> list[RefInput]:
    events: list[RefInput] = []
    for t in range(1, LAST + 1):
        if t % 6 == 0:
            events.append(RefInput("", t, len(events) + 1, None))
            continue
        for source, n in (("F", 0), ("F", 1), ("G", 0)):
            item = (
                f"<item><title>{source.lower()}{t}.{n}</title>"
                f"<category>{'odd' if t % 2 else 'even'}</category></item>"
            )
            events.append(RefInput(source, t, len(events) + 1, item))
    return events


def write_spool(
    log_dir: Path, events: Sequence[RefInput], per_file: int, first_file: int = 0
) -> None:
    """One spool file per ``per_file`` times (from time 1), with increasing modification
    times (the file source reads the oldest first)."""
    chunks: dict[int, list[SpoolEvent]] = defaultdict(list)
    for e in events:
        chunks[(e.ts - 1) // per_file].append(SpoolEvent(e.source, e.ts, e.seq, e.item))
    for n, chunk in enumerate(chunks[k] for k in sorted(chunks)):
        path = log_dir / f"events-{first_file + n:04d}.jsonl"
        write_events(path, chunk)
        stamp = 1_700_000_000 + first_file + n
        os.utime(path, (stamp, stamp))


def run_in_one_query(
    spark: Any, config: Config, log_dir: Path, checkpoint: Path
) -> tuple[Outputs, int]:
    """All the streams in one query, one spool file per micro-batch, until the files
    are done: the outputs (stream → part → events) and the number of micro-batches."""
    from pyspark.sql import DataFrame

    from roses_app.spark.lower import LowerContext, compile_stream, with_watermark
    from roses_app.spool import SPARK_SCHEMA_DDL

    raw = spark.readStream.schema(SPARK_SCHEMA_DDL).option("maxFilesPerTrigger", 1)
    ctx = LowerContext(with_watermark(raw.json(str(log_dir)), 0), config.settings.namespaces)
    frames = [compile_stream(s.stream, ctx) for s in config.streams.values()]
    rows: list[Any] = []
    query = (
        functools.reduce(DataFrame.unionByName, frames)
        .writeStream.option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .foreachBatch(lambda batch, _id: rows.extend(batch.collect()))
        .start()
    )
    query.awaitTermination()
    got: dict[str, set[RefEvent]] = {name: set() for name in config.streams}
    for row in rows:  # a set: union copies are one event, as in the runner's sink
        got[row.stream].add(RefEvent(row.ts, row.seq, row.item))
    return {name: {"": sorted(evs)} for name, evs in got.items()}, len(query.recentProgress)


def state_sizes(spark: Any, checkpoint: Path, operators: int) -> list[int]:
    """How many events each stateful operator keeps (Spark's state reader), sorted."""
    reader = spark.read.format("statestore").option("path", str(checkpoint))
    return sorted(
        reader.option("operatorId", n).option("stateVarName", EVENTS_STATE).load().count()
        for n in range(operators)
    )


def needed(events: Sequence[RefInput], t: int) -> list[int]:
    """How many events the operators of LONG_FEEDS need at time t, sorted."""
    f_items = [e for e in events if e.source == "F"]
    keys = {"odd" if e.ts % 2 else "even" for e in events if e.item is not None}
    return sorted(
        [
            len(count_window(f_items, t, 4)),  # last4: the last 4
            # gone, one operator: its window's last 5 times, its δ the window's items at t
            2 * len(time_window(f_items, t, 5)),
            2 * len(keys),  # pairs: the last 2 items of each key
        ]
    )


@pytest.mark.spark
def test_many_batches_and_a_restart_keep_state_bounded(spark: object, tmp_path: Path) -> None:
    (tmp_path / "feeds.yaml").write_text(LONG_FEEDS)
    config = load_config(tmp_path / "feeds.yaml")
    events = long_events()
    log_dir, checkpoint = tmp_path / "log", tmp_path / "checkpoint"
    half = [e for e in events if e.ts <= LAST // 2]
    write_spool(log_dir, half, per_file=6)
    first, first_batches = run_in_one_query(spark, config, log_dir, checkpoint)
    write_spool(log_dir, [e for e in events if e.ts > LAST // 2], per_file=6, first_file=100)
    second, second_batches = run_in_one_query(spark, config, log_dir, checkpoint)
    assert first_batches >= 2 and second_batches >= 2

    reference = run_reference(config, EventList(events, iso_times=False))
    assert {
        name: {"": sorted(first[name][""] + second[name][""])} for name in config.streams
    } == reference
    # the state holds what the operators need at the end, and no more: as much as
    # after the first half, though the stream is twice as long
    assert state_sizes(spark, checkpoint, 3) == needed(events, LAST) == needed(half, LAST // 2)
