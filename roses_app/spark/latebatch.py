"""One micro-batch of a late graph (:mod:`roses_app.spark.lower_late`): its units
advanced in order, each unit's state read from and saved to its value state, its
windows' items kept in its map state of slices, the rows the query reads out.

This is what runs inside the ``transformWithStateInPandas`` operator: the processor
(:mod:`roses_app.spark.lateprocessor`, kept light) loads it where rows are handled;
the lowering (:mod:`roses_app.spark.lower_late`) builds the graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pandas as pd
from pyspark import Accumulator
from pyspark.sql.streaming.stateful_processor import ValueState

from roses_app.algebra.plan.operators import Node
from roses_app.algebra.planner.globalplan import node_fingerprint
from roses_app.algebra.planner.late_groups import unit_reads
from roses_app.algebra.time.lateness import tally_key
from roses_app.algebra.time.slices import SliceMap
from roses_app.spark.lateunits import Batch, Counts, Row, SourceRow, Unit, make_unit
from roses_app.spark.registry import Hooks

# what reads a unit's items: (the unit's index in its graph, a head's key, a stream)
Target = tuple[int, str | None, str | None]


@dataclass(frozen=True)
class LateGraph:
    """A group of units (:func:`~roses_app.algebra.planner.late_groups.components`), the units
    each reads before it, with one micro-batch (the processor and the tests drive
    it)."""

    units: tuple[Unit, ...]
    sources: tuple[Node, ...]  # by their index in the input rows
    names: tuple[str, ...]  # each unit's state
    reads: tuple[tuple[tuple[Node, ...], tuple[Node, ...]], ...]  # each unit's

    @classmethod
    def of(cls, nodes: Sequence[Node], hooks: Hooks) -> LateGraph:
        reads = tuple(unit_reads(node) for node in nodes)
        sources = tuple(dict.fromkeys(s for _, found in reads for s in found))
        names = tuple("n" + node_fingerprint(node) for node in nodes)
        return cls(tuple(make_unit(node, hooks) for node in nodes), sources, names, reads)

    def advance(
        self,
        saved: Callable[[int], Any],
        sources: Mapping[Node, Sequence[SourceRow]],
        slices: Sequence[SliceMap | None],
    ) -> list[tuple[list[Row], Any, Counts] | None]:
        """Each unit's rows, state to save and counts after this micro-batch (its
        state read by ``saved``, its index given); None for a unit that read nothing
        in it (its state stays, unread)."""
        batch = Batch(sources)
        out: list[tuple[list[Row], Any, Counts] | None] = []
        for index, (unit, (units, found), store) in enumerate(
            zip(self.units, self.reads, slices, strict=True)
        ):
            if not any(sources.get(s) for s in found) and not any(
                batch.results.get(u) for u in units
            ):
                out.append(None)
                continue
            done = unit.advance(saved(index), batch, store)
            batch.results[unit.node] = done[0]
            out.append(done)
        return out


def handle_rows(
    graph: LateGraph,
    states: Sequence[ValueState],
    slices: Sequence[SliceMap | None],
    targets: tuple[Target, ...],
    tallies: Accumulator[dict[str, int]] | None,
    rows: Iterator[pd.DataFrame],
) -> Iterator[pd.DataFrame]:
    """One micro-batch of a :class:`~roses_app.spark.lateprocessor.LateGraphProcessor`:
    its units advanced, their state saved, the rows ``targets`` read out."""
    sources = read_sources(rows, graph.sources)
    done = graph.advance(lambda n: load_json(states[n]), sources, slices)
    found: dict[str, int] = {}
    for state, unit, result in zip(states, graph.units, done, strict=True):
        if result is not None:
            save_json(state, result[1])
            for kind, n in result[2].items():
                key = tally_key(kind, unit.node.origin.stream)
                found[key] = found.get(key, 0) + n
    found = {key: n for key, n in found.items() if n}
    if tallies is not None and found:
        tallies.add(found)
    out = [
        (source, stream, part, ts, seq, item)
        for index, source, stream in targets
        if (result := done[index]) is not None
        for ts, seq, item, part in result[0]
        if item is not None
    ]
    if out:
        yield pd.DataFrame(out, columns=["source", "stream", "part", "ts", "seq", "item"])


def load_json(state: ValueState) -> Any:
    """The value the last micro-batch saved (None before the first)."""
    stored = state.get() if state.exists() else None
    return orjson.loads(stored[0]) if stored is not None else None


def save_json(state: ValueState, value: Any) -> None:
    # orjson: the state is read and written whole each micro-batch, and json's
    # encoder and decoder were most of a sliding window's cost; int keys become
    # strings, as json.dumps makes them
    state.update((orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode(),))


def read_sources(
    frames: Iterator[pd.DataFrame], sources: Sequence[Node]
) -> dict[Node, list[SourceRow]]:
    """The input rows by source (``src``: its index), each (ingest time, seq, item,
    publication time or None)."""
    out: dict[Node, list[SourceRow]] = {node: [] for node in sources}
    for frame in frames:
        columns = [frame[c].tolist() for c in ("src", "ts", "seq", "item", "event")]
        for src, ts, seq, item, event in zip(*columns, strict=True):
            when = None if event is None or pd.isna(event) else int(event)
            out[sources[int(src)]].append((int(ts), int(seq), item, when))
    return out
