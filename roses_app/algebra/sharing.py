"""Common sub-plans of different streams, so that they are computed once.

The reference evaluator shares them through its memo (equal nodes are evaluated
once).  On Spark every stream is its own query; a sub-plan that several streams
contain is computed by a query of its own into a *view* (a folder of events like the
spool), and the streams read the view as if it were a source.  Only stateless
sub-plans (filter, map, union over sources) are shared that way: they carry the
heartbeats exactly as the spool does, so what a stream computes from a view is what it
would compute from the spool.  A lone source is not worth a view: reading the spool
costs the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from roses_app.algebra.plan import Filter, Map, Node, Source, Stream, Union

STATELESS = (Source, Filter, Map, Union)
VIEW_PREFIX = "view-"


def _stateless(node: Node) -> bool:
    return all(isinstance(n, STATELESS) for n in node.walk())


def view_name(node: Node) -> str:
    """A source name for the view of ``node``: the same plan always gets the same name."""
    return VIEW_PREFIX + hashlib.sha256(repr(node).encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class SharedPlan:
    """The views to compute first, and the streams rewritten to read them."""

    views: dict[str, Node]
    streams: list[Stream]


def _candidates(stream: Stream) -> set[Node]:
    """Stateless sub-plans with work in them (an XPath or XQuery function to run)."""
    return {
        n
        for n in stream.plan.walk()
        if _stateless(n) and any(isinstance(d, Filter | Map) for d in n.walk())
    }


def shared_subplans(streams: Sequence[Stream]) -> list[Node]:
    """The largest stateless sub-plans that at least two streams contain."""
    counts: dict[Node, int] = {}
    for stream in streams:
        for node in _candidates(stream):
            counts[node] = counts.get(node, 0) + 1
    shared = {node for node, n in counts.items() if n >= 2}
    inner = {d for node in shared for d in node.walk() if d is not node}
    # a node shared only as part of a larger shared node is computed by that one's view
    return sorted(shared - inner, key=repr)


def _substitute(node: Node, views: dict[Node, str]) -> Node:
    name = views.get(node)
    if name is not None:
        return Source(name, origin=node.origin)
    return node.map_inputs(lambda child: _substitute(child, views))


def share(streams: Sequence[Stream]) -> SharedPlan:
    """Views for the common sub-plans, and every stream reading them instead."""
    nodes = shared_subplans(streams)
    names = {node: view_name(node) for node in nodes}
    rewritten = [Stream(s.name, _substitute(s.plan, names), s.origin) for s in streams]
    return SharedPlan({name: node for node, name in names.items()}, rewritten)
