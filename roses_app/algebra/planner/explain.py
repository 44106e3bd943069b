"""Text rendering of logical plans for ``roses explain``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from roses_app.algebra.plan.operators import (
    Aggregate,
    Delta,
    Diff,
    Filter,
    GroupBy,
    Join,
    Map,
    Nest,
    Node,
    Report,
    Semijoin,
    Source,
    Split,
    Stream,
    Union,
    Unnest,
    Window,
    WindowedGrouping,
    XQuery,
    optimistic,
)
from roses_app.algebra.plan.specs import describe_window, duration
from roses_app.algebra.planner.globalplan import STATELESS_TYPES, GlobalPlan
from roses_app.algebra.planner.stateless_tails import spark_copies
from roses_app.algebra.time.eventtime import (
    fed_items,
    fed_operators,
    final_results,
    late_joined,
    late_sequential,
    late_windowed,
    released_joined,
    released_windows,
)


def describe_xquery(query: XQuery, width: int = 40) -> str:
    """An XQuery file's path, or the start of inline text (which records the feeds.yaml
    it was written in as its file)."""
    if query.file and not query.file.endswith((".yaml", ".yml")):
        return query.file
    text = " ".join(query.text.split())
    return f"inline XQuery {text if len(text) <= width else text[: width - 1] + '…'!r}"


def _describe_join(node: Join) -> str:
    combine = describe_xquery(node.combine) if node.combine else "built-in composition"
    if node.kind == "product":
        return f"Join × product, combine {combine}{_join_lateness(node)}"
    return f"Join ⋈ {node.kind} on {node.on!r}, combine {combine}{_join_lateness(node)}"


def _join_lateness(node: Join | Semijoin | Diff) -> str:
    out = f", lateness {duration(node.lateness)}" if node.lateness else ""
    if optimistic(node):
        out += ", report optimistic (items alone published at once, taken back in place)"
    return out


def _describe_time_operator(node: Node) -> str | None:
    """The operators of time (None for the others)."""
    if isinstance(node, Window):
        return f"Window {describe_window(node.spec)}"
    if isinstance(node, Join):
        return _describe_join(node)
    if isinstance(node, Semijoin):
        return f"Semijoin ⋉ on {node.on!r}{_join_lateness(node)}"
    if isinstance(node, Diff):
        return f"Diff − on {node.on!r}{_join_lateness(node)}"
    if isinstance(node, Delta):
        return "Delta δ⁺ insert" if node.kind == "insert" else "Delta δ⁻ delete"
    if isinstance(node, Aggregate):
        return f"Aggregate α reduce {describe_xquery(node.reduce)}{_lateness(node)}"
    if isinstance(node, GroupBy):
        return f"GroupBy γ by {node.by!r} reduce {describe_xquery(node.reduce)}{_lateness(node)}"
    if isinstance(node, WindowedGrouping):
        reduce = describe_xquery(node.reduce)
        out = f"WindowedGrouping by {node.by!r} last {node.size} reduce {reduce}"
        if node.lateness:
            out += f", lateness {duration(node.lateness)}"
        if node.optimistic:
            out += ", report optimistic (results published at once, revised in place)"
        return out
    if isinstance(node, Nest | Unnest):
        return type(node).__name__
    return None


def _lateness(node: Aggregate | GroupBy) -> str:
    """How late items are taken (over publication time) and when results are reported
    (a report policy), when they are not the defaults."""
    out = ""
    if node.lateness or node.late != "drop":
        out += f", lateness {duration(node.lateness)}, late items: {node.late}"
    report = node.report
    if report != Report():
        moments = [
            m for m, on in (("on-close", report.on_close), ("on-change", report.on_change)) if on
        ]
        if report.every:
            moments.append(f"every {duration(report.every)}")
        out += f", report {' + '.join(moments)} (tick {report.tick})"
    return out


def describe(node: Node, *, side: bool = False) -> str:
    """One line for one node: the operator and its parameters (``side``: a window
    that the operator reading it runs, not a release: :func:`runs_window`)."""
    if isinstance(node, Source):
        return f"Source {node.name}" + (" (published time)" if node.time == "published" else "")
    if isinstance(node, Filter):
        return f"Filter σ where {node.where!r}"
    if isinstance(node, Map):
        if node.xquery is not None:
            return f"Map μ xquery {describe_xquery(node.xquery)}"
        return f"Map μ xpath {node.xpath!r}"
    if isinstance(node, Union):
        return f"Union ∪ of {len(node.inputs)}"
    if isinstance(node, Split):
        return f"Split Ψ by {node.by!r}"
    described = _describe_time_operator(node) or type(node).__name__
    if side:
        return described + ", run by the operator over publication time reading it"
    below = late_sequential(node)
    operators = None if below is None else fed_operators(below)
    joined = released_joined(node)
    if joined is not None:
        return (
            described
            + ", reading both sides released together in time order once "
            + (
                " and ".join(_side_reads(side) for side in (joined[0], joined[2]))
                + " decided them (their lateness passed)"
            )
        )
    # a run's input is released on close; its own windows may report otherwise
    reads = "reading" if released_windows(node) is not None else "on close:"
    if below is not None and operators:
        named = " and ".join(
            f"{type(op).__name__} at step {op.origin.step}"
            + ("" if final_results(op) is op else " (its final results, computed on close)")
            for op in operators
        )
        items = fed_items(below)
        if items:
            named += f" and the items of {len(items)} other branch(es) (with the run's lateness)"
        described += (
            f", {reads} the results of {named} released in time order once decided"
            " (their lateness passed)"
        )
    elif below is not None:
        described += f", {reads} items released in time order once the lateness has passed"
    return described


def _side_reads(below: Node) -> str:
    """What a side of a join over operators' results reads, for :func:`describe`."""
    operators = fed_operators(below)
    if operators is None:
        return "its items' clock"
    named = " and ".join(f"{type(op).__name__} at step {op.origin.step}" for op in operators)
    return named + (" and its items' clock" if fed_items(below) else "")


def shared_subplans(plans: Mapping[str, Node]) -> dict[Node, frozenset[str]]:
    """The sub-plans found in more than one stream's plan (equal nodes, origins aside),
    with the names of those streams.  The reference evaluator computes each of them
    once (its memo).  Bare sources are left out: every stream reads them."""
    streams: dict[Node, set[str]] = {}
    for name, plan in plans.items():
        for node in set(plan.walk()):
            if not isinstance(node, Source):
                streams.setdefault(node, set()).add(name)
    return {node: frozenset(names) for node, names in streams.items() if len(names) > 1}


@dataclass(frozen=True)
class Sharing:
    """What to mark in a plan: the sub-plans shared by several streams (both engines
    compute each of them once)."""

    streams: Mapping[Node, frozenset[str]]
    copies: Mapping[Node, int] = field(default_factory=dict)  # Spark's, when not 1

    @classmethod
    def of(cls, plans: Mapping[str, Node]) -> Sharing:
        copies = spark_copies(Stream(name, plan) for name, plan in plans.items())
        return cls(shared_subplans(plans), copies)

    def note(self, node: Node, above: frozenset[str]) -> str:
        streams = self.streams.get(node, frozenset())
        # Below a marked node everything is shared too: say it again only if more
        # streams share it.
        if not streams > above:
            return ""
        runs = self.copies.get(node, 1)
        once = "computed once" if runs == 1 else f"the reference computes it once, Spark {runs}×"
        return f"  (shared by {_names(streams)}: {once})"


NAMED = 10  # streams named in a note; beyond, how many (the note is on each of them)


def _names(streams: frozenset[str]) -> str:
    """The streams, or the first few and how many: a node shared by ten thousand
    streams is noted in the plan of each, so naming all would be quadratic."""
    if len(streams) <= NAMED:
        return ", ".join(sorted(streams))
    return f"{len(streams):,} streams ({', '.join(sorted(streams)[:3])}, ...)"


def format_global(
    plan: GlobalPlan, queries: Mapping[str, str], *, only: AbstractSet[str] | None = None
) -> str:
    """The global plan: each node of the DAG (inputs first) with its id, its inputs,
    the streams that share it and the Spark queries that compute it (``queries``:
    stream -> query id; stateless nodes all run in the fused stage); ``only``: the
    nodes these streams use."""
    frontier = set(plan.frontier())
    copies = spark_copies(plan.streams)
    lines = [
        f"{len(plan.nodes)} nodes for {len(plan.streams)} streams; "
        f"{len(plan.stateless_streams())} stateless, {len(plan.stateful_streams())} stateful, "
        f"{len(frontier)} frontier nodes, {len(plan.shared())} shared nodes"
    ]
    readers: dict[str, list[Node]] = {}
    for dag in plan.nodes.values():
        for read in dag.inputs:
            readers.setdefault(read, []).append(dag.node)
    roots = set(plan.roots.values())
    for dag in plan.nodes.values():
        if only is not None and only.isdisjoint(dag.streams):
            continue
        where = f" [{dag.node.origin.file}:{dag.node.origin.line}]" if dag.node.origin.line else ""
        side = dag.id not in roots and all(runs_window(r, dag.node) for r in readers[dag.id])
        inputs = f" <- {', '.join(dag.inputs)}" if dag.inputs else ""
        if dag.stateless:
            runs = "stateless (fused stage)" + ("; frontier" if dag.node in frontier else "")
        else:
            runs = ", ".join(sorted({queries.get(s, "?") for s in dag.streams}))
            times = copies.get(dag.node, 1)
            if isinstance(dag.node, STATELESS_TYPES):
                runs += " (fused tail)"
            else:
                runs += "; computed once" if times == 1 else f"; Spark runs it {times}×"
        users = _names(dag.streams)
        lines.append(f"{dag.id} {describe(dag.node, side=side)}{where}{inputs}")
        lines.append(f"    streams: {users}; query: {runs}")
    return "\n".join(lines)


AGAIN = "  (the same sub-plan as above)"


def runs_window(reader: Node, node: Node) -> bool:
    """Whether ``reader`` runs the window ``node`` itself over publication time: a
    join's side, or the windows of an aggregate or a group over late windows."""
    if not isinstance(node, Window):
        return False
    joined = late_joined(reader) is not None or released_joined(reader) is not None
    return joined or late_windowed(reader) is not None


def _lines(
    node: Node,
    indent: str,
    sharing: Sharing,
    above: frozenset[str],
    seen: set[int],
    side: bool = False,
) -> Iterator[str]:
    where = f"  [{node.origin.file}:{node.origin.line}]" if node.origin.line else ""
    if id(node) in seen and node.children():
        # printed already: a plan is a DAG, written out as a tree it may double per level
        yield f"{indent}{describe(node, side=side)}{where}{AGAIN}"
        return
    seen.add(id(node))
    yield f"{indent}{describe(node, side=side)}{where}{sharing.note(node, above)}"
    streams = sharing.streams.get(node, frozenset())
    for child in node.children():
        yield from _lines(child, indent + "  ", sharing, streams, seen, runs_window(node, child))


def format_plan(node: Node, indent: str = "", *, sharing: Sharing | None = None) -> str:
    """The plan as an indented tree, each node with the feeds.yaml line it came from;
    the sub-plans several streams share (``sharing``, see :meth:`Sharing.of`) are
    marked.  A sub-plan met again (a stream used twice) is one line the second time."""
    return "\n".join(_lines(node, indent, sharing or Sharing({}), frozenset(), set()))
