"""Spark lowering of α and γ over the windows of :mod:`roses_app.algebra.lateness`:
periodic time, count (α) and session windows, of items in publication time or with a
report policy.

The rule is :mod:`roses_app.algebra.lateness` (the reference evaluator runs the same
code): items are taken in arrival order, one ingest time after the other, a window is
published when its report policy says (by default when the clock passes its end), and
again, in place, when a late item changed its result within the allowed lateness.
Spark's own operators cannot do that (append mode publishes a window once, after the
lateness; update mode publishes every touched key again, changed or not), so one
``transformWithStateInPandas`` operator runs it: all rows under one constant key, its
state the windows kept, the clock and a digest of each published result, as JSON in
one value state, and a periodic or session window's items in a map state of time slices
(:mod:`roses_app.algebra.slices`): a micro-batch writes the items it adds, and reads
the slices of the windows it computes, not every item kept.

Input rows come from the frontier log: ``ts`` is the ingest time (the arrival, which
also drives the query's watermark, in order), ``event`` the item's publication time
when it is not its ingest time.  Items later than the lateness are counted in the
error accumulator under ``late:STREAM`` (and published in the stream's ``late`` part
with ``late: publish``); results computed again but unchanged under
``unchanged:STREAM``, results that replaced a published one under ``revised:STREAM``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import pandas as pd
from pyspark import Accumulator
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import MapState, TimerValues

from roses_app.algebra.eventtime import LateSpec, late_windowed
from roses_app.algebra.latejoin import CLOCK_SEQ
from roses_app.algebra.lateness import (
    LATE_PART,
    Arrival,
    LateWindows,
    arrival_groups,
    tally_key,
)
from roses_app.algebra.panes import Entry, plain_entries
from roses_app.algebra.plan import Aggregate, GroupBy, Node
from roses_app.algebra.release_fed import fed_horizon
from roses_app.algebra.slices import ChunkId
from roses_app.spark import udfs
from roses_app.spark.registry import EVENT_COLUMNS, LowerContext, Namespaces

KEY = "late_key"
STATE = "windows"
STATE_DDL = "state STRING"
SLICES = "slices"
SLICE_KEY_DDL = "key STRING, slice BIGINT, chunk INT"  # γ's key as JSON (null: α)
SLICE_DDL = "entries STRING"
OUTPUT_DDL = "ts BIGINT, seq BIGINT, item STRING, time TIMESTAMP, part STRING"


class JsonStateProcessor(StatefulProcessor):
    """A processor under one constant key whose state is one JSON value, running item
    functions (their failures go to ``on_error``) and counting in ``tallies``."""

    def __init__(
        self,
        namespaces: Namespaces,
        on_error: udfs.ErrorHook,
        tallies: Accumulator[dict[str, int]] | None,
    ) -> None:
        self.namespaces = namespaces
        self.on_error = on_error
        self.tallies = tallies

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState(STATE, STATE_DDL)

    def load_state(self) -> Any:
        """The value saved by the last micro-batch (None before the first)."""
        stored = self.state.get() if self.state.exists() else None
        return orjson.loads(stored[0]) if stored is not None else None

    def save_state(self, value: Any) -> None:
        # orjson: the state is read and written whole each micro-batch, and json's
        # encoder and decoder were most of a sliding window's cost; int keys become
        # strings, as json.dumps makes them
        self.state.update((orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode(),))

    def tally(self, stream: str, **counts: int) -> None:
        """Add what happened (late, unchanged, revised: see ``TALLIES``) to the
        stream's counts; /healthz lists a stream only under what it counted."""
        found = {tally_key(kind, stream): n for kind, n in counts.items() if n}
        if self.tallies is not None and found:
            self.tallies.add(found)

    def close(self) -> None:
        """Nothing to release: the state lives in the state store."""


class LateProcessor(JsonStateProcessor):
    """One operator's :class:`LateWindows`, micro-batch after micro-batch."""

    def __init__(
        self,
        node: Aggregate | GroupBy,
        spec: LateSpec,
        namespaces: Namespaces,
        on_error: udfs.ErrorHook,
        tallies: Accumulator[dict[str, int]] | None,
    ) -> None:
        super().__init__(namespaces, on_error, tallies)
        self.node = node
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.slices = StateSlices(handle.getMapState(SLICES, SLICE_KEY_DDL, SLICE_DDL))

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        from roses_app.xmlfn.reduce import advance_windows

        node = self.node
        state = self.load_state()
        windows = LateWindows.load(self.spec, node.lateness, node.report, state, self.slices)
        groups = arrival_groups(read_arrivals(rows, "key" if isinstance(node, GroupBy) else None))
        planned, settled, published = advance_windows(
            windows, groups, node.reduce, self.namespaces, node.stream, self.on_error
        )
        self.save_state(windows.dump())
        revised = sum(1 for e, _ in published if e.revision)
        self.tally(
            node.stream, late=len(planned.late), unchanged=settled.unchanged, revised=revised
        )
        found = [(e.ts, e.seq, item, "") for e, item in published]
        if node.late == "publish":
            found += [(a.time, a.seq, a.item or "", LATE_PART) for a in planned.late]
        out = with_clock(found, planned.heartbeats, fed_horizon(node, windows.clock))
        if out:
            yield output_frame(out)


class StateSlices:
    """A :class:`~roses_app.algebra.slices.SliceMap` in the operator's map state."""

    def __init__(self, state: MapState) -> None:
        self.state = state

    @staticmethod
    def _key(chunk: ChunkId) -> tuple[str, int, int]:
        return orjson.dumps(chunk[0]).decode(), chunk[1], chunk[2]

    def get(self, chunk: ChunkId) -> list[Entry] | None:
        found = self.state.getValue(self._key(chunk))
        return None if found is None else list(map(Entry._make, orjson.loads(found[0])))

    def put(self, chunk: ChunkId, entries: list[Entry]) -> None:
        text = orjson.dumps(plain_entries(entries)).decode()
        self.state.updateValue(self._key(chunk), (text,))

    def remove(self, chunk: ChunkId) -> None:
        self.state.removeKey(self._key(chunk))


def read_arrivals(
    frames: Iterator[pd.DataFrame], key: str | None, *, unkeyed: bool = False
) -> list[tuple[int, Arrival]]:
    """(ingest time, arrival) of each input row: an item at its publication time (or
    its ingest time), a heartbeat at its time; with a ``key`` column (γ's key, a
    join's side) in ``Arrival.key``, and an item without one goes nowhere (with
    ``unkeyed``, it is taken without a key)."""
    out: list[tuple[int, Arrival]] = []
    for frame in frames:
        names = ("ts", "seq", "item", "event", key or "event")
        columns = [frame[c].tolist() for c in names]
        for ts, seq, item, event, found in zip(*columns, strict=True):
            if key is not None and item is not None and found is None and not unkeyed:
                continue
            when = int(ts) if event is None or pd.isna(event) else int(event)
            out.append((int(ts), Arrival(when, int(seq), item, found if key else None)))
    return out


def with_clock(
    rows: Sequence[tuple[int, int, str | None, str]],
    heartbeats: Sequence[Arrival],
    horizon: int | None,
) -> list[tuple[int, int, str | None, str]]:
    """``rows``, the heartbeats on time and a heartbeat (seq ``CLOCK_SEQ``) telling the
    ``horizon`` before which the operator's results are out and final: a released run
    over them (:mod:`roses_app.algebra.release_fed`) sees those times pass and takes
    what is decided.  Every other reader of the results drops heartbeats."""
    out: list[tuple[int, int, str | None, str]] = [*rows]
    out += dict.fromkeys((a.time, a.seq, None, "") for a in heartbeats)  # a join's 2 sides
    return out if horizon is None else [*out, (horizon, CLOCK_SEQ, None, "")]


def output_frame(rows: Sequence[tuple[int, int, str | None, str]]) -> pd.DataFrame:
    ts = pd.Series([r[0] for r in rows], dtype="int64")
    return pd.DataFrame(
        {
            "ts": ts,
            "seq": pd.Series([r[1] for r in rows], dtype="int64"),
            "item": pd.Series([r[2] for r in rows], dtype="object"),
            "time": pd.to_datetime(ts.clip(lower=1), unit="us", utc=True),
            "part": pd.Series([r[3] for r in rows], dtype="object"),
        }
    )


def timed_input(node: Node, below: Node, ctx: LowerContext) -> DataFrame:
    """The frontier rows of ``below``, an input of ``node``, with their ``event`` time
    (null over ingest time: the time is then the ingest time ``ts``)."""
    frame = ctx.computed.get(below)
    if frame is None:
        raise TypeError(f"{node.origin}: its input is not read from the frontier log")
    if "event" not in frame.columns:
        frame = frame.withColumn("event", F.lit(None).cast("bigint"))
    return frame


def late_frame(node: Aggregate | GroupBy, ctx: LowerContext) -> DataFrame:
    """The published results (and late items) of ``node``: see the module doc."""
    found = late_windowed(node)
    assert found is not None
    below, spec = found
    frame = timed_input(node, below, ctx)
    if isinstance(node, GroupBy):
        split = udfs.splitter_udf(node.by, ctx.namespaces, ctx.on_error(node))
        frame = frame.withColumn("key", split(F.col("item")))
    else:  # α: one group per window
        frame = frame.withColumn("key", F.lit(None).cast("string"))
    keyed = frame.select(F.lit(0).alias(KEY), "ts", "seq", "item", "event", "key")
    processor = LateProcessor(node, spec, ctx.namespaces, ctx.on_error(node), ctx.errors)
    out = keyed.groupBy(KEY).transformWithStateInPandas(
        statefulProcessor=processor,
        outputStructType=OUTPUT_DDL,
        outputMode="Append",
        timeMode="None",
        # No event-time column: a result is published again at its window's end, long
        # behind the watermark (the ingest clock), which Spark refuses of an operator
        # passing the watermark on; no stateful operator reads this one's output.
    )
    if node.late == "publish":
        return out.select(*EVENT_COLUMNS, "part")
    return out.select(*EVENT_COLUMNS)
