"""A released run over publication time (:func:`roses_app.algebra.time.eventtime.late_sequential`),
the rule of :mod:`roses_app.algebra.time.release`, one micro-batch at a time.

The run holds the items on time until the clock (the latest time seen of every item)
is more than the lateness past them, then runs them in time order through the same
stages as over ingest time (:mod:`roses_app.spark.stages`: the windows, deltas, nests
and windowed groupings of the run, then an aggregate or a group: per time of its
window, or per closed window of a periodic one; with a report policy or sessions, the
windows of :mod:`roses_app.algebra.time.lateness`, each time one arrival).  Its state (the
clock, the items held and each stage's memory) is JSON.  Items later than the
lateness are counted under ``late:STREAM`` (and an aggregate or a group with
``late: publish`` publishes them in its ``late`` part).  The late graph's operator
runs it (:mod:`roses_app.spark.lower_late`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roses_app.algebra.plan.operators import (
    Aggregate,
    Delta,
    GroupBy,
    Nest,
    Node,
    Unnest,
    Window,
    WindowedGrouping,
)
from roses_app.algebra.time.eventtime import (
    fed_operators,
    late_sequential,
    publishes_late,
    released_chain,
    released_windows,
)
from roses_app.algebra.time.lateness import LATE_PART, Arrival
from roses_app.algebra.time.release import Release, release_lateness
from roses_app.algebra.time.release_results import FedRelease, fed_horizon, side_shape
from roses_app.algebra.time.slices import SliceMap
from roses_app.algebra.time.windows import periodic_input
from roses_app.spark import counts
from roses_app.spark.late import with_clock
from roses_app.spark.registry import Hooks
from roses_app.spark.sequential import Event, Memory, Operator, process, stage_of
from roses_app.spark.stages import (
    ClosedWindowsOperator,
    GroupOperator,
    KeyedGroupingOperator,
    NestOperator,
    UnnestOperator,
    WindowsStage,
)

Row = tuple[int, int, str | None, str]  # ts, seq, item, part


@dataclass(frozen=True)
class ReleasedRun:
    """What a released run does with one micro-batch, without Spark (the processor
    and the tests drive it): its release, then its stages, then its windows stage if
    it has one (:func:`~roses_app.algebra.time.eventtime.released_windows`)."""

    node: Node
    stages: tuple[Operator, ...]
    lateness: int
    on_error: counts.ErrorHook
    # over operators' results: how many branches tell their horizon (items among them)
    fed: int = 0
    items: bool = False  # the last branch is items (keyed ITEMS)
    windows: WindowsStage | None = None

    def advance(
        self, saved: dict[str, Any], groups: list[list[Arrival]], slices: SliceMap | None = None
    ) -> tuple[list[Row], list[Arrival], dict[str, Any], tuple[int, int, int]]:
        """The rows to emit (results, late items in the late part, heartbeats released
        and the horizon told), the items too late, the state to save, and the counts
        (late, unchanged, revised)."""
        memory = load_memory(saved.get("memory"))
        release: Release | FedRelease
        if self.fed:
            items = self.lateness if self.items else None
            release = FedRelease.load(self.fed, saved.get("release"), items)
        else:
            release = Release.load(self.lateness, saved.get("release"))
        released, late = release.advance(groups)
        events = [Event(a.time, a.seq, a.item) for a in released]
        out = process(self.stages, memory, events, 0, self.on_error) if events else []
        state: dict[str, Any] = {"release": release.dump(), "memory": dump_memory(memory)}
        counts = (0, 0)
        found: list[tuple[int, int, str | None]] = [
            (e.ts, e.seq, e.item) for e in out if e.item is not None
        ]
        if self.windows is not None:
            state["windows"] = saved.get("windows")
            if released:
                passed = sorted({a.time for a in released})
                found, state["windows"], counts = self.windows.advance(
                    saved.get("windows"), out, slices, passed
                )
        # the last time released: a run over these results knows what is before it
        # is out (roses_app.algebra.time.release_results), and sees the heartbeats released
        state["last"] = last = max((a.time for a in released), default=saved.get("last"))
        published: list[Row] = [(ts, seq, item, "") for ts, seq, item in found]
        if publishes_late(self.node):
            published += [(a.time, a.seq, a.item or "", LATE_PART) for a in late]
        beats = [a for a in released if a.item is None]
        told = with_clock(published, beats, fed_horizon(self.node, last))
        return told, late, state, (len(late), *counts)


def dump_memory(memory: Memory) -> dict[str, Any]:
    kept = {str(n): [list(e) for e in events] for n, events in memory.kept.items()}
    return {"clock": memory.clock, "kept": kept}


def load_memory(saved: dict[str, Any] | None) -> Memory:
    if saved is None:
        return Memory()
    kept = {int(n): [Event(*e) for e in events] for n, events in saved["kept"].items()}
    return Memory(saved["clock"], kept)


def released_stages(node: Node, ctx: Hooks) -> list[Operator]:
    """The stages of the run of operators ``node`` ends over publication time
    (:func:`~roses_app.algebra.time.eventtime.released_chain`), the lowest first; not the
    windows stage (:func:`windows_stage`) nor the window it reads."""
    stages: list[Operator] = []
    chain = released_chain(node)
    if released_windows(node) is not None:
        chain = chain[:-2]
    for n in chain:
        if isinstance(n, WindowedGrouping):
            stages.append(KeyedGroupingOperator(n, ctx.namespaces, ctx.on_error(n)))
        elif isinstance(n, Unnest):
            stages.append(UnnestOperator(ctx.on_error(n)))
        elif isinstance(n, Aggregate | GroupBy):
            periodic = periodic_input(n.input)
            if periodic is None:
                stages.append(GroupOperator(n, ctx.namespaces, ctx.on_error(n)))
            else:  # it reads the window's input: no window stage before it
                stage = ClosedWindowsOperator(n, periodic[1], ctx.namespaces, ctx.on_error(n))
                stages.append(stage)
        elif isinstance(n, Nest):
            stages.append(NestOperator(ctx.on_error(n)))
        elif isinstance(n, Window | Delta) and not (
            isinstance(node, Aggregate | GroupBy) and n is node.input and periodic_input(n)
        ):
            stages.append(stage_of(n))
    return stages


def windows_stage(node: Node, ctx: Hooks) -> WindowsStage | None:
    """The last stage of ``node``'s run, when it computes windows with a report
    policy or sessions (:func:`~roses_app.algebra.time.eventtime.released_windows`)."""
    spec = released_windows(node)
    if spec is None:
        return None
    assert isinstance(node, Aggregate | GroupBy)
    return WindowsStage(node, spec, ctx.namespaces, ctx.on_error(node))


def released_run(node: Node, ctx: Hooks) -> ReleasedRun:
    """The release and the stages of the run ``node`` ends (see :class:`ReleasedRun`)."""
    below = late_sequential(node)
    assert below is not None
    lateness = release_lateness(node, ctx.lateness)
    fed = fed_operators(below) is not None
    sources, items = side_shape(below, lateness) if fed else (0, None)
    return ReleasedRun(
        node,
        tuple(released_stages(node, ctx)),
        lateness,
        ctx.on_error(node),
        sources,
        items is not None,
        windows_stage(node, ctx),
    )
