"""The fused stateless stage as a program: the stateless nodes of the global plan in
topological order, each a step reading earlier steps, and the steps whose events
leave the stage (stream roots, frontier nodes), each under an output key.

It only describes; :mod:`roses_app.xmlfn.fused` runs it over batches of items (on
Spark workers and in tests), parsing each item once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from roses_app.algebra.plan.operators import Filter, Map, Node, Source, Split, Union, XQuery
from roses_app.algebra.planner.globalplan import fingerprint

Namespaces = tuple[tuple[str, str], ...]
TICK = "~tick"  # the key of a batch's time mark (latest ts and seq seen) in the frontier log
TICK_OUTPUT = -1  # the output index of that time mark in the fused stage's rows
# The item of a fused row that is its input event's item, when the sink holds the
# input items (a replay): "" is no item, and the item need not travel back
INPUT_ITEM = ""


@dataclass(frozen=True, slots=True)  # a hundred thousand, in each worker too
class Step:
    """One stateless node: ``kind`` is source, filter, map, union or split; ``arg``
    the source name or the XPath; ``xquery`` a map's mutator.  ``stream`` and
    ``label`` name it in error messages and per-step error counts."""

    kind: str
    inputs: tuple[int, ...] = ()
    arg: str = ""
    xquery: XQuery | None = None
    stream: str = ""
    label: str = ""
    time: str = "ingest"  # a source's: which time its items take (Source.time)
    # where it is written (feeds.yaml or a subscriptions file), for messages
    file: str = ""
    line: int = 0

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else ""


@dataclass(frozen=True)
class Program:
    """Steps in topological order; ``outputs``: (step, output key) pairs.  With
    ``heartbeats``, heartbeat rows are passed on (the frontier log needs them)."""

    steps: tuple[Step, ...]
    outputs: tuple[tuple[int, str], ...]
    namespaces: Namespaces = ()
    heartbeats: bool = False

    @cached_property
    def key(self) -> str:
        """Identifies the program, so workers compile it once (computed once per
        program object: a worker looks it up for every batch)."""
        return fingerprint((self.steps, self.outputs, self.namespaces, self.heartbeats))

    def describe(self) -> str:
        kinds: dict[str, int] = {}
        for step in self.steps:
            kinds[step.kind] = kinds.get(step.kind, 0) + 1
        parts = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        return f"{len(self.steps)} steps ({parts}), {len(self.outputs)} outputs"


def _step(node: Node, inputs: tuple[int, ...]) -> Step:
    label = node.origin.step or type(node).__name__
    origin = node.origin
    common = {
        "inputs": inputs,
        "stream": origin.stream,
        "label": label,
        "file": origin.file,
        "line": origin.line,
    }
    if isinstance(node, Source):
        return Step("source", arg=node.name, time=node.time, **common)  # type: ignore[arg-type]
    if isinstance(node, Filter):
        return Step("filter", arg=node.where, **common)  # type: ignore[arg-type]
    if isinstance(node, Map):
        return Step("map", arg=node.xpath, xquery=node.xquery, **common)  # type: ignore[arg-type]
    if isinstance(node, Union):
        return Step("union", **common)  # type: ignore[arg-type]
    if isinstance(node, Split):
        return Step("split", arg=node.by, **common)  # type: ignore[arg-type]
    raise ValueError(f"{type(node).__name__} is not stateless: it has no fused step")


def build_program(
    outputs: Sequence[tuple[Node, str]],
    namespaces: Namespaces = (),
    *,
    heartbeats: bool = False,
    leaves: Mapping[Node, str] | None = None,
) -> Program:
    """The program computing every node of ``outputs`` (each emitted under its key);
    equal sub-plans become one step.  A node of ``leaves`` is not computed: it is a
    source step named by its key (the rows of another operator, tagged with it)."""
    index: dict[Node, int] = {}
    steps: list[Step] = []
    leaves = leaves or {}

    def visit(node: Node) -> int:
        found = index.get(node)
        if found is not None:
            return found
        key = leaves.get(node)
        if key is not None:
            step = Step("source", arg=key, stream=node.origin.stream, label=key)
        else:
            step = _step(node, tuple(visit(child) for child in node.children()))
        index[node] = len(steps)
        steps.append(step)
        return index[node]

    emitted = tuple((visit(node), key) for node, key in outputs)
    return Program(tuple(steps), emitted, namespaces, heartbeats)
