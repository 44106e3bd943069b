"""Spark lowering of the sequential operators: Window, Delta and WindowedGrouping.

They read their input in time order, each with a ``transformWithStateInPandas``
operator.  Window and Delta have no natural key: all their rows go to one constant
key, and a chain of them (δ of a window, a window of a window) is one operator, its
stages run one after the other on each micro-batch: one shuffle and one state instead
of one per node.  WindowedGrouping is keyed by its ``by`` key (heartbeats under the
null key).

Every micro-batch, a key's rows are deduplicated (a union may deliver one event by
several branches; the reference's union is a set), sorted by (ts, seq, item) and
taken one input time after the other, heartbeats included, exactly as
:mod:`roses_app.algebra.reference.time_operators` does over the whole list.  The state keeps
only what later times need: the events a window may still show, the previous time's
items (Delta), the last N items of a bucket (WindowedGrouping), and the last input
time processed (the *clock*).  Input heartbeats are passed on, like the reference.

Outputs are emitted as soon as their input time is processed (the reference does not
wait for the horizon for these operators).  That equals the reference when each
micro-batch comes after the previous ones in time, which the spool guarantees: every
append gets a larger ingest timestamp and lands in one file, read in one batch.  A
row at or before a time already processed cannot change what was emitted (append
mode has no retraction): it is dropped and counted as a failed item of the step.

The output carries the event-time column ``time`` (``eventTimeColumnName``), so the
watermark goes on to later stateful operators (another sequential operator, an
aggregation or a join).  With ``timeMode`` None Spark filters no input row: the
watermark's late-row filter would drop a replay's tick 0 in the first batch.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, NamedTuple, Protocol

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import TimerValues

from roses_app.algebra.plan.operators import (
    CountWindow,
    Delta,
    SessionWindow,
    Window,
    WindowedGrouping,
    WindowSpec,
    XQuery,
)
from roses_app.algebra.time.delta import delta, present
from roses_app.algebra.time.eventtime import window_delta_run
from roses_app.algebra.time.windows import oldest_needed, window_content
from roses_app.spark import counts, udfs
from roses_app.spark.registry import LowerContext, Namespaces, heartbeat, lower

KEY = "seq_key"
KEPT_DDL = "stage INT, ts BIGINT, seq BIGINT, item STRING"
CLOCK_DDL = "clock BIGINT"
OUTPUT_DDL = "ts BIGINT, seq BIGINT, item STRING, time TIMESTAMP"
# Names of the state variables (tests read them back with Spark's state reader).
EVENTS_STATE = "events"
CLOCK_STATE = "clock"


class Event(NamedTuple):
    """One row of a lowered stream; ``item`` None is a heartbeat."""

    ts: int
    seq: int
    item: str | None


def order(event: Event) -> tuple[int, int, str]:
    """The reference's event order: (ts, seq, item), a heartbeat's item as ''."""
    return event.ts, event.seq, event.item or ""


@dataclass
class Memory:
    """A key's state: the last input time processed, and per stage the events it
    keeps for later times."""

    clock: int | None = None
    kept: dict[int, list[Event]] = field(default_factory=dict)


class LateEventError(ValueError):
    """A row at or before a time the operator has already processed."""


class Operator(Protocol):
    def advance(
        self, kept: list[Event], rows: Sequence[Event], key: Any
    ) -> tuple[list[Event], list[Event]]:
        """The outputs of ``rows`` (on time, sorted, heartbeats included) but the
        input heartbeats, which :func:`process` passes on; and what to keep."""
        ...


def by_time(rows: Sequence[Event]) -> Iterator[tuple[int, list[Event]]]:
    """Each input time with its item events (a heartbeat-only time has none)."""
    for t, group in groupby(rows, key=lambda e: e.ts):
        yield t, [e for e in group if e.item is not None]


# -- Window ----------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowOperator:
    """Window: at each input time t (heartbeats included), the window content at t,
    stamped t with each event's own seq."""

    spec: WindowSpec

    def content(self, events: list[Event], t: int) -> list[Event]:
        return window_content(events, self.spec, t)

    def keep(self, events: list[Event], content: list[Event], t: int) -> list[Event]:
        """What later times may still show (the memory stays bounded)."""
        if isinstance(self.spec, CountWindow | SessionWindow):
            # later windows are the last N of content + newer events, or the session
            # going on (a later one never takes an older event): nothing older
            return content
        low = oldest_needed(self.spec, t)
        return events[bisect_left([e.ts for e in events], low) :]

    def advance(
        self, kept: list[Event], rows: Sequence[Event], key: Any
    ) -> tuple[list[Event], list[Event]]:
        out: list[Event] = []
        events = list(kept)
        for t, items in by_time(rows):
            events.extend(items)  # rows are sorted: events stays sorted
            content = self.content(events, t)
            out.extend(Event(t, e.seq, e.item) for e in content)
            events = self.keep(events, content, t)
        return out, events


# -- Delta -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DeltaOperator:
    """δ⁺: at each input time, the items not there at the previous one; δ⁻: the items
    of the previous time that are gone, stamped now with their old seq.  The memory
    holds the previous time's items."""

    kind: str

    def advance(
        self, kept: list[Event], rows: Sequence[Event], key: Any
    ) -> tuple[list[Event], list[Event]]:
        out, now = delta(self.kind, rows, present(kept), Event)
        return out, list(now.values())


# -- WindowedGrouping ------------------------------------------------------------------


@dataclass(frozen=True)
class GroupingOperator:
    """FlameStream's windowed grouping for one key: for each item, the reducer over the
    last ``size`` items of the key's bucket (itself last), at the item's time.  The
    memory holds the bucket."""

    size: int
    reduce: XQuery
    namespaces: Namespaces
    on_error: counts.ErrorHook

    def advance(
        self, kept: list[Event], rows: Sequence[Event], key: Any
    ) -> tuple[list[Event], list[Event]]:
        items = [e for e in rows if e.item is not None]
        if not items or key is None:  # the null key holds the heartbeats only
            return [], kept
        bucket = kept
        groups: list[list[str]] = []
        for e in items:
            bucket = [*bucket, e][-self.size :]
            groups.append([b.item or "" for b in bucket])
        from roses_app.xmlfn import reduce_batch

        # one Saxon call for the whole batch of this key ($key is bound per call)
        results = reduce_batch(self.reduce, self.namespaces, groups, self.on_error, {"key": key})
        out = [Event(e.ts, e.seq, r) for e, r in zip(items, results, strict=True) if r is not None]
        return out, bucket


# -- the stateful processor ------------------------------------------------------------


def read_rows(frames: Iterator[pd.DataFrame]) -> list[Event]:
    """A key's rows of one micro-batch, without copies, in (ts, seq, item) order."""
    rows: set[Event] = set()
    for frame in frames:
        columns = (frame["ts"].tolist(), frame["seq"].tolist(), frame["item"].tolist())
        rows.update(Event(int(ts), int(seq), item) for ts, seq, item in zip(*columns, strict=True))
    return sorted(rows, key=order)


def output_frame(events: Sequence[Event]) -> pd.DataFrame:
    ts = pd.Series([e.ts for e in events], dtype="int64")
    return pd.DataFrame(
        {
            "ts": ts,
            "seq": pd.Series([e.seq for e in events], dtype="int64"),
            "item": pd.Series([e.item for e in events], dtype="object"),
            # Spark fails a query whose operator emits a row at or before the watermark,
            # which is the epoch in the first batch: a replay's tick 0 is stamped 1 µs,
            # the same millisecond, so the watermark (in ms) does not change.
            "time": pd.to_datetime(ts.clip(lower=1), unit="us", utc=True),
        }
    )


def drop_late(rows: list[Event], clock: int | None, on_error: counts.ErrorHook) -> list[Event]:
    """The rows after ``clock``; an item at or before it is reported and dropped."""
    if clock is None or not rows or rows[0].ts > clock:
        return rows
    for e in rows:
        if e.ts <= clock and e.item is not None:
            on_error(e.item, LateEventError(f"time {e.ts} came after time {clock} was processed"))
    return [e for e in rows if e.ts > clock]


def process(
    stages: Sequence[Operator],
    memory: Memory,
    rows: list[Event],
    key: Any,
    on_error: counts.ErrorHook,
) -> list[Event]:
    """One micro-batch of a key (rows sorted, without copies) through the stages, the
    output of one the input of the next: the output events, sorted, heartbeats
    included.  Updates ``memory``.  Only the first stage's input can be late: a
    stage emits at the times of its input."""
    rows = drop_late(rows, memory.clock, on_error)
    if not rows:
        return []
    memory.clock = rows[-1].ts
    for n, stage in enumerate(stages):
        out, memory.kept[n] = stage.advance(memory.kept.get(n, []), rows, key)
        out.extend(e for e in rows if e.item is None)  # heartbeats go on
        rows = sorted(set(out), key=order)
    return rows


class SequentialProcessor(StatefulProcessor):
    """Runs stages of operators over each key's rows, batch after batch; its memory
    lives in two state variables (the clock, and the events kept by each stage)."""

    def __init__(self, stages: Sequence[Operator], on_error: counts.ErrorHook) -> None:
        self.stages = tuple(stages)
        self.on_error = on_error

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.events_state = handle.getListState(EVENTS_STATE, KEPT_DDL)
        self.clock_state = handle.getValueState(CLOCK_STATE, CLOCK_DDL)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        memory = self.load()
        clock = memory.clock
        out = process(self.stages, memory, read_rows(rows), key[0], self.on_error)
        if memory.clock != clock:  # else every row was late: the state is unchanged
            self.save(memory)
        if out:
            yield output_frame(out)

    def load(self) -> Memory:
        # a new key has no state yet (asking first keeps Spark from warning about it)
        if not self.clock_state.exists():
            return Memory()
        clock = self.clock_state.get()
        stored = self.events_state.get() if self.events_state.exists() else iter(())
        kept: dict[int, list[Event]] = {}
        for stage, ts, seq, item in stored:  # stored in order
            kept.setdefault(int(stage), []).append(Event(int(ts), int(seq), item))
        return Memory(None if clock is None else int(clock[0]), kept)

    def save(self, memory: Memory) -> None:
        self.clock_state.update((memory.clock,))
        rows = [(n, *e) for n, events in sorted(memory.kept.items()) for e in events]
        if rows:
            self.events_state.put(rows)
        else:
            self.events_state.clear()

    def close(self) -> None:
        """Nothing to release: the state lives in the state store."""


def sequential(frame: DataFrame, key: Column, processor: SequentialProcessor) -> DataFrame:
    """``processor`` over ``frame``'s rows grouped by ``key``, one micro-batch at a time."""
    keyed = frame.select(key.alias(KEY), "ts", "seq", "item")
    return keyed.groupBy(KEY).transformWithStateInPandas(
        statefulProcessor=processor,
        outputStructType=OUTPUT_DDL,
        outputMode="Append",
        timeMode="None",
        eventTimeColumnName="time",
    )


# -- lowering --------------------------------------------------------------------------


def stage_of(node: Window | Delta) -> Operator:
    if isinstance(node, Window):
        return WindowOperator(node.spec)
    return DeltaOperator(node.kind)


def window_or_delta(node: Window | Delta, ctx: LowerContext) -> DataFrame:
    """A run of windows and deltas over ingest time (the handler is in
    :mod:`roses_app.spark.lower_late`, which also lowers them over publication time)."""
    below, run = window_delta_run(node)
    # a late row is dropped where the chain reads its input: the lowest node's step
    processor = SequentialProcessor([stage_of(n) for n in run], ctx.on_error(run[0]))
    return sequential(lower(below, ctx), F.lit(0), processor)


def windowed_grouping_frame(node: WindowedGrouping, ctx: LowerContext) -> DataFrame:
    """A windowed grouping over ingest time (the handler is in
    :mod:`roses_app.spark.lower_late`, which also lowers it over publication time)."""
    hook = ctx.on_error(node)
    split = udfs.splitter_udf(node.by, ctx.namespaces, hook)
    keyed = lower(node.input, ctx).withColumn(KEY, split(F.col("item")))
    # an item without a key goes to no bucket (the reference drops it too)
    kept = keyed.where(heartbeat() | F.col(KEY).isNotNull())
    operator = GroupingOperator(node.size, node.reduce, ctx.namespaces, hook)
    return sequential(kept, F.col(KEY), SequentialProcessor([operator], hook))
