"""A fused micro-batch's output, as the driver receives it, and its rows per stream.

The fused stage (:mod:`roses_app.spark.fused`) hands over one row per distinct
output item of an input event and part, with the indexes of the program outputs
(stream roots, frontier nodes) that have it: a thousand subscriptions matching one
item ship it once.  :func:`split_rows` expands such a table into a row per stream
(what the store writes) and the frontier rows.  :class:`FusedRows` keeps a table of
stateless streams' rows as it came, for a sink that can use it without that
expansion: a replay groups the rows of each stream and part with array operations
and makes each item's output line once (at 10,000 subscriptions, 840,000 rows per
100,000 items were Python tuples, events and look-ups one by one).

This module imports pyarrow and numpy, not pyspark.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from roses_app.algebra.planner.program import INPUT_ITEM, TICK_OUTPUT, Program

if TYPE_CHECKING:
    from roses_app.spark.frontier_log import FrontierRow

OutputRow = tuple[str, str, int, int, str] | tuple[str, str, int, int, str, str]
# stream, part, ts, seq, item[, guid]


def split_rows(
    table: pa.Table,
    program: Program,
    streams_of: dict[str, list[str]],
    frontier_keys: set[str] | None,
    items: list[str | None] | None = None,
) -> tuple[list[OutputRow], list[FrontierRow], int, int]:
    """A fused batch's rows: stream output rows, frontier rows, latest ts and seq.
    Each output node is one program output and each fused row one distinct item of an
    input event, so no row comes twice.  A frontier row is at its ingest time (the
    stateful queries' watermark follows the spool's order), with the item's own time
    beside it when that is another (its publication time)."""
    # per program output: the streams it stands for, and whether it is a frontier node
    # (looked up once here, not once per row and output)
    streams_at = [tuple(streams_of.get(key, ())) for _, key in program.outputs]
    frontier_at = [
        key if frontier_keys is not None and key in frontier_keys else None
        for _, key in program.outputs
    ]
    names = ("outputs", "part", "ts", "seq", "item", "guid", "arrival")
    columns = [
        items if n == "item" and items is not None else table.column(n).to_pylist() for n in names
    ]
    out: list[OutputRow] = []
    frontier: list[FrontierRow] = []
    append, mark = out.append, frontier.append
    latest_ts = latest_seq = 0
    for outputs, part, ts, seq, item, guid, arrival in zip(*columns, strict=True):
        if item is None:
            if outputs == [TICK_OUTPUT]:
                latest_ts, latest_seq = max(latest_ts, ts), max(latest_seq, seq)
            elif frontier_keys is not None:
                mark((None, ts, seq, None, None))  # a heartbeat
            continue
        for index in outputs:
            key = frontier_at[index]
            if key is not None:
                mark((key, arrival, seq, item, None if ts == arrival else ts))
            for stream in streams_at[index]:
                append((stream, part, ts, seq, item, guid))
    return out, frontier, latest_ts, latest_seq


@dataclass(frozen=True)
class StreamRows:
    """The rows of one stream and part in a :class:`FusedRows`: ``rows`` indexes its
    table, in event order."""

    stream: str
    part: str
    rows: np.ndarray


@dataclass(frozen=True)
class FusedRows:
    """A fused batch's rows of stateless streams, as the stage made them (see the
    module docstring); ``streams_of``: the streams each output key stands for."""

    table: pa.Table
    program: Program
    streams_of: dict[str, list[str]]
    # the input items by seq, when the stage left them out (INPUT_ITEM in its rows)
    inputs: Sequence[str | None] | None = None

    def items(self) -> list[str | None]:
        """The rows' items (None: a time mark or heartbeat), the input items put back."""
        items: list[str | None] = self.table.column("item").to_pylist()
        inputs = self.inputs
        if inputs is None:
            return items
        seqs = self.table.column("seq").to_pylist()
        return [inputs[s] if i == INPUT_ITEM else i for i, s in zip(items, seqs, strict=True)]

    def rows(self) -> list[OutputRow]:
        """A row per stream that has an item (what :func:`split_rows` makes)."""
        return split_rows(self.table, self.program, self.streams_of, None, self.items())[0]

    def count(self) -> int:
        """How many rows :meth:`rows` would make."""
        keys = [key for _, key in self.program.outputs]
        per_output = np.array([len(self.streams_of.get(key, ())) for key in keys] + [0])
        flat, _ = self._outputs()
        return int(per_output[flat].sum())

    def latest_seq(self) -> int | None:
        """The latest spool seq the batch read (its time marks'), None if it read none."""
        marks = self.table.filter(pc.is_null(self.table.column("item")))
        latest = pc.max(marks.column("seq")).as_py() if marks.num_rows else None
        return latest or None

    def _outputs(self) -> tuple[np.ndarray, np.ndarray]:
        """Each (output index, row) pair of the rows with an item (the rows' items
        are not copied: at 10,000 subscriptions they are 90 MB a batch)."""
        outputs = self.table.column("outputs").combine_chunks()
        flat = pc.list_flatten(outputs).to_numpy()
        rows = pc.list_parent_indices(outputs).to_numpy()
        has_item = pc.is_valid(self.table.column("item")).to_numpy(zero_copy_only=False)
        keep = has_item[rows]
        return flat[keep], rows[keep]

    def by_stream(self) -> Iterator[StreamRows]:
        """For each stream and part with rows, which rows of :attr:`table` it has, in
        event order (``event_order``'s: ts, seq, then item, as arrays)."""
        flat, rows = self._outputs()
        parts = self.table.column("part").combine_chunks().dictionary_encode()
        codes = parts.indices.to_numpy()[rows]
        # the rows in event order (ts, seq; a stable sort: ties by row), so that each
        # (output, row) pair sorts by three int32 keys rather than five arrays of its
        # own (100,000 subscriptions, 7.5 million pairs: 600 MB less at the peak)
        ts_row = self.table.column("ts").to_numpy()
        seq_row = self.table.column("seq").to_numpy()
        rank = np.empty(len(ts_row), dtype=np.int32)
        rank[np.lexsort((seq_row, ts_row))] = np.arange(len(ts_row), dtype=np.int32)
        order = np.lexsort((rank[rows], codes, flat))  # the last key first
        flat, codes, rows = flat[order], codes[order], rows[order].astype(np.int32)
        del order
        group = (flat[1:] != flat[:-1]) | (codes[1:] != codes[:-1])
        ties = ~group
        ties &= ts_row[rows[1:]] == ts_row[rows[:-1]]
        ties &= seq_row[rows[1:]] == seq_row[rows[:-1]]
        if ties.any():  # items of one event in one part of an output (a union of maps)
            rows = _by_item(rows, ties, self.items())
        edges = np.flatnonzero(group) + 1
        starts = [0, *edges.tolist()]
        ends = [*edges.tolist(), len(flat)]
        keys = [key for _, key in self.program.outputs]
        names = parts.dictionary.to_pylist()
        for start, end in zip(starts, ends, strict=True):
            if start == end:
                continue
            for stream in self.streams_of.get(keys[flat[start]], ()):
                yield StreamRows(stream, names[codes[start]], rows[start:end])


def _by_item(rows: np.ndarray, ties: np.ndarray, items: list[str | None]) -> np.ndarray:
    """``rows`` with each run of ties (``ties[i]``: rows i and i + 1 tie) sorted by
    item (Python's str order, as the reference engine's)."""
    rows = rows.copy()
    at = np.flatnonzero(ties).tolist()
    run: list[int] = []
    for i in [*at, -2]:
        if run and i != run[-1] + 1:  # the run (i + 1 of its last tie included) ends
            span = slice(run[0], run[-1] + 2)
            rows[span] = sorted(rows[span].tolist(), key=items.__getitem__)
            run = []
        run.append(i)
    return rows


__all__ = ["FusedRows", "OutputRow", "StreamRows", "split_rows"]
