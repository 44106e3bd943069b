"""``roses explain``'s summary: what a config of any size computes, in a screenful.

Every stream's plan written out is a line per operator: a hundred thousand
subscriptions are half a million lines.  The summary counts instead: the streams
(stateless, stateful, published), the operators of the plans as written and of the
global plan (equal sub-plans one node) by kind, the rewrite rules applied, the nodes
several streams share (the most shared ones named, with their feeds.yaml lines),
the largest plans, and which query computes how many streams.  ``roses explain
STREAM...`` prints streams' plans in full, ``--all`` every stream's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from heapq import nlargest

from roses_app.algebra.plan.operators import Node, Source, Stream
from roses_app.algebra.planner.explain import describe
from roses_app.algebra.planner.globalplan import DagNode, GlobalPlan

TOP = 10  # the most shared nodes and the largest plans named


def operator_kinds(plans: Sequence[Node]) -> Counter[str]:
    """Operators and source reads by kind, each node object once."""
    seen: set[int] = set()
    kinds: Counter[str] = Counter()
    todo = list(plans)
    while todo:
        node = todo.pop()
        if id(node) not in seen:
            seen.add(id(node))
            kinds[type(node).__name__] += 1
            todo.extend(node.children())
    return kinds


def _kinds(kinds: Counter[str]) -> str:
    return ", ".join(f"{kind} {count:,}" for kind, count in kinds.most_common())


def _where(node: Node) -> str:
    origin = node.origin
    return f" [{origin.file}:{origin.line}]" if origin.line else ""


def _short(text: str, width: int = 100) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def summary(
    written: Sequence[Stream],
    applied: Mapping[str, Sequence[str]],
    plan: GlobalPlan,
    published: int,
    queries: Mapping[str, str] | None = None,
) -> str:
    """The summary of a config's streams (``written``), the rules the rewrite applied
    to each, the global plan of the rewritten streams, and (``queries``: stream ->
    query id) the Spark queries."""
    return "\n".join(_summary(written, applied, plan, published, queries))


def _summary(
    written: Sequence[Stream],
    applied: Mapping[str, Sequence[str]],
    plan: GlobalPlan,
    published: int,
    queries: Mapping[str, str] | None,
) -> Iterator[str]:
    stateless = len(plan.stateless_streams())
    sources = {n.node.name for n in plan.nodes.values() if isinstance(n.node, Source)}
    yield (
        f"== {len(written):,} streams over {len(sources):,} sources: {stateless:,} stateless "
        f"(one fused stage), {len(written) - stateless:,} stateful; {published:,} published"
    )
    kinds = operator_kinds([s.plan for s in written])
    yield (
        f"== the plans as written: {sum(kinds.values()):,} operators and source reads "
        f"({_kinds(kinds)})"
    )
    rules = Counter(rule for names in applied.values() for rule in names)
    changed = sum(1 for names in applied.values() if names)
    yield f"== rewritten: {_count(changed, 'stream')} changed" + (
        f" ({', '.join(f'{rule} ×{n:,}' for rule, n in rules.most_common())})" if rules else ""
    )
    dag_kinds = Counter(type(n.node).__name__ for n in plan.nodes.values())
    shared = plan.shared()
    yield (
        f"== the global plan: {len(plan.nodes):,} nodes (equal sub-plans are one node), "
        f"{len(shared):,} shared by several streams (each computed once): {_kinds(dag_kinds)}"
    )
    yield from _most_shared(shared)
    yield from _largest(written)
    if queries is not None:
        per_query = Counter(queries.get(s.name, "?") for s in plan.streams)
        yield "== Spark queries: " + ", ".join(
            f"{qid}{' (fused stage)' if qid == 'stateless' else ''} {_count(count, 'stream')}"
            for qid, count in per_query.most_common()
        )
    yield (
        "(`roses explain STREAM...` prints those streams' plans, the global plan's nodes "
        "they use and Spark's plans; `--all` every stream's and every node)"
    )


def _count(count: int, what: str) -> str:
    return f"{count:,} {what}" + ("" if count == 1 else "s")


def _most_shared(shared: Sequence[DagNode]) -> Iterator[str]:
    operators = [d for d in shared if not isinstance(d.node, Source)]
    if not operators:
        return
    yield f"   the most shared (of {_count(len(operators), 'operator')} shared):"
    for dag in nlargest(TOP, operators, key=lambda d: len(d.streams)):
        text = _short(describe(dag.node))
        yield f"   {dag.id} {text}{_where(dag.node)}: {len(dag.streams):,} streams"


def _largest(streams: Sequence[Stream]) -> Iterator[str]:
    """The streams that write the most operators themselves (the streams they read by
    name aside: each node is counted in one stream, however many read it)."""
    sizes = {stream.name: _written(stream) for stream in streams}
    yield "== the largest streams (operators and source reads each writes itself):"
    plans = {stream.name: stream.plan for stream in streams}
    for name in nlargest(TOP, sizes, key=lambda n: sizes[n]):
        yield f"   stream {name}: {sizes[name]:,}{_where(plans[name])}"


def _written(stream: Stream) -> int:
    seen: set[int] = set()
    todo = [stream.plan]
    while todo:
        node = todo.pop()
        if id(node) not in seen and node.origin.stream in (stream.name, ""):
            seen.add(id(node))
            todo.extend(node.children())
    return len(seen)
