"""The multi-query plan: every stream of a config in one DAG.

Equal sub-plans of different streams are one node (plan nodes compare by value,
origins aside), each stream is a root.  The DAG is split where the engine must split
it:

* the **stateless part**: nodes whose whole sub-plan is Source, Filter, Map, Union
  (and a Split at the root of a stream).  A stream made only of them is a *stateless
  stream*; all of them, however many, are computed in one fused stage;
* the **frontier**: the stateless nodes that a stateful node reads (a window's
  input, a join's sides, ...).  The fused stage computes them too, once, for every
  stateful stream that reads them;
* the **stateful streams**: the rest, which read the frontier.

Node ids are fingerprints of what a node computes: the same node gets the same id in
every run and every config, so data keyed by them (the frontier log) survives edits
of other streams.  Every walk here visits each node once, however many paths lead to
it (a plan of a few lines may have 2^N paths).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from roses_app.algebra.plan.operators import Filter, Map, Node, Source, Split, Stream, Union

STATELESS_TYPES = (Source, Filter, Map, Union, Split)
Namespaces = tuple[tuple[str, str], ...]


# A plan whose text (its repr, which spells every path out) would hold more nodes than
# this is fingerprinted by its Merkle digest instead; smaller ones keep the ids of
# their text, which existing data folders hold (store versions, frontier keys).
REPR_NODES = 1_000


def fingerprint(value: object) -> str:
    """16 hex digits that change exactly when ``repr(value)`` does (origins are not
    part of a node's repr).  For plans, :func:`node_fingerprint`."""
    return hashlib.sha256(repr(value).encode("utf-8")).hexdigest()[:16]


def node_fingerprint(node: Node) -> str:
    """16 hex digits that change exactly when what ``node`` computes does: the
    fingerprint of its text, or of its digest when its text would be too long."""
    if node.tree_size <= REPR_NODES:
        return fingerprint(node)
    return hashlib.sha256(b"plan:" + node.digest).hexdigest()[:16]


def stream_fingerprint(stream: Stream, namespaces: Namespaces) -> str:
    """Changes exactly when the stream's semantics change."""
    plan = stream.plan
    if plan.tree_size <= REPR_NODES:
        return fingerprint((plan, sorted(namespaces)))
    return fingerprint(("plan", plan.digest.hex(), sorted(namespaces)))


def is_stateless_in(node: Node, memo: dict[Node, bool]) -> bool:
    """:func:`is_stateless` with the caller's memo (for walks over many nodes)."""
    found = memo.get(node)
    if found is None:
        found = isinstance(node, STATELESS_TYPES) and all(
            is_stateless_in(child, memo) for child in node.children()
        )
        memo[node] = found
    return found


def is_stateless(node: Node) -> bool:
    """True when ``node`` and everything below it is stateless."""
    return is_stateless_in(node, {})


@dataclass(frozen=True, slots=True)  # one per node of the global plan
class DagNode:
    """One node of the DAG: its id, the ids of its inputs, the streams that use it."""

    id: str
    node: Node
    inputs: tuple[str, ...]
    streams: frozenset[str]
    stateless: bool


@dataclass(frozen=True)
class GlobalPlan:
    """All streams of a config as one DAG (``nodes`` in topological order: inputs
    first), with the stateless/stateful split."""

    streams: tuple[Stream, ...]
    nodes: dict[str, DagNode]
    roots: dict[str, str]  # stream name -> node id
    ids: dict[Node, str] = field(repr=False)

    @classmethod
    def of(cls, streams: Sequence[Stream]) -> GlobalPlan:
        ids: dict[Node, str] = {}
        users: dict[Node, set[str]] = {}
        order: list[Node] = []
        stateless: dict[Node, bool] = {}

        def visit(node: Node, stream: str) -> None:
            if node in ids:
                if stream not in users[node]:
                    users[node].add(stream)
                    for child in node.children():
                        visit(child, stream)
                return
            for child in node.children():
                visit(child, stream)
            ids[node] = "n" + node_fingerprint(node)
            users[node] = {stream}
            stateless[node] = isinstance(node, STATELESS_TYPES) and all(
                stateless[c] for c in node.children()
            )
            order.append(node)

        for stream in streams:
            visit(stream.plan, stream.name)
        nodes = {
            ids[n]: DagNode(
                ids[n],
                n,
                tuple(ids[c] for c in n.children()),
                frozenset(users[n]),
                stateless[n],
            )
            for n in order
        }
        roots = {s.name: ids[s.plan] for s in streams}
        return cls(tuple(streams), nodes, roots, ids)

    def id_of(self, node: Node) -> str:
        return self.ids[node]

    def stateless_streams(self) -> list[Stream]:
        return [s for s in self.streams if self.nodes[self.roots[s.name]].stateless]

    def stateful_streams(self) -> list[Stream]:
        return [s for s in self.streams if not self.nodes[self.roots[s.name]].stateless]

    def frontier(self, streams: Iterable[Stream] | None = None) -> list[Node]:
        """The stateless nodes read by the stateful nodes of ``streams`` (default:
        every stateful stream), each once, in topological order."""
        chosen = self.stateful_streams() if streams is None else list(streams)
        found = {n for s in chosen for n in frontier_of(s.plan)}
        return [d.node for d in self.nodes.values() if d.node in found]

    def shared(self) -> list[DagNode]:
        """Nodes that more than one stream uses (computed once for all of them)."""
        return [d for d in self.nodes.values() if len(d.streams) > 1]


def frontier_of(plan: Node) -> Iterator[Node]:
    """The maximal stateless sub-plans below the stateful nodes of ``plan``, each once
    (none when ``plan`` is stateless itself: the fused stage computes all of it)."""
    stateless: dict[Node, bool] = {}
    if is_stateless_in(plan, stateless):
        return
    seen: set[Node] = set()

    def below(node: Node) -> Iterator[Node]:
        for child in node.children():
            if child in seen:
                continue
            seen.add(child)
            if is_stateless_in(child, stateless):
                yield child
            else:
                yield from below(child)

    yield from below(plan)
