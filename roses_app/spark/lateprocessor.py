"""The stateful processor of an operator over publication time, and its state's shape.

Kept light on purpose.  When Spark plans a query, it starts a fresh Python process for
each ``transformWithStateInPandas`` operator, to learn the state the processor's
``init`` declares; that process unpickles the processor, importing every module its
pickle names.  So the processor holds its :class:`~roses_app.spark.latebatch.LateGraph`
pickled apart (plans, units, and through them pandas and the XPath engines) and
loads it only where rows are handled: this module imports neither, and each such
operator's start cost about half a second less.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson
from pyspark import Accumulator, cloudpickle
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import MapState, TimerValues, ValueState

from roses_app.algebra.time.panes import plain_entries
from roses_app.algebra.time.slices import ChunkId, Entry, SliceMap

if TYPE_CHECKING:
    import pandas as pd

    from roses_app.spark.latebatch import LateGraph, Target

STATE_DDL = "state STRING"
SLICE_KEY_DDL = "key STRING, slice BIGINT, chunk INT"  # γ's key as JSON (null: α)
SLICE_DDL = "entries STRING"


class StateSlices:
    """A :class:`~roses_app.algebra.time.slices.SliceMap` in the operator's map state."""

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


class LateGraphProcessor(StatefulProcessor):
    """One late graph, micro-batch after micro-batch.  ``graph``: the graph, pickled;
    ``names``: each unit's state; ``sliced``: whether each unit keeps slices."""

    def __init__(
        self,
        graph: bytes,
        names: tuple[str, ...],
        sliced: tuple[bool, ...],
        targets: tuple[Target, ...],
        tallies: Accumulator[dict[str, int]] | None,
    ) -> None:
        self.graph = graph
        self.names = names
        self.sliced = sliced
        self.targets = targets
        self.tallies = tallies
        self.loaded: LateGraph | None = None

    @classmethod
    def of(
        cls,
        graph: LateGraph,
        targets: tuple[Target, ...],
        tallies: Accumulator[dict[str, int]] | None,
    ) -> LateGraphProcessor:
        names, sliced = graph.names, tuple(unit.sliced for unit in graph.units)
        return cls(cloudpickle.dumps(graph), names, sliced, targets, tallies)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.states: list[ValueState] = [
            handle.getValueState(name, STATE_DDL) for name in self.names
        ]
        self.slices: list[SliceMap | None] = [
            StateSlices(handle.getMapState(f"{name}_slices", SLICE_KEY_DDL, SLICE_DDL))
            if sliced
            else None
            for name, sliced in zip(self.names, self.sliced, strict=True)
        ]

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        # here, not at the top: see the module docstring
        from roses_app.spark.latebatch import handle_rows

        if self.loaded is None:
            self.loaded = pickle.loads(self.graph)
        return handle_rows(self.loaded, self.states, self.slices, self.targets, self.tallies, rows)

    def close(self) -> None:
        """Nothing to release: the state lives in the state store."""


__all__ = ["SLICE_DDL", "SLICE_KEY_DDL", "STATE_DDL", "LateGraphProcessor", "StateSlices"]
