"""``streams:`` of feeds.yaml → logical plans, through a registry of operators.

An operator node is a mapping with exactly one operator key; its value holds the
operator's arguments, among them its inputs (``from:``, ``union:`` items...), each
either another operator node or a bare name.  A bare name is a source (a
:class:`~roses_app.algebra.plan.operators.Source` leaf) or another stream, whose plan is inlined:
finished plans only have Source leaves.  References are resolved depth-first, so cycles
are found and reported once, with the whole path.

The set of operators is closed but extensible: an operator is a builder function
registered with :func:`~roses_app.config.operator_registry.register_operator` (see
:mod:`roses_app.config.operator_registry`).  The handler modules
:mod:`~roses_app.config.streams_stateless` (filter, map, union, split) and
:mod:`~roses_app.config.streams_time` (windows, joins, delta, aggregation...) register
theirs; importing them here, at the top, makes the registry complete for whoever
imports this module.  They are imported in that order, which is the order of
:func:`operator_names` (the order messages list the operators in).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from roses_app.algebra.plan.operators import Filter, Map, Node, Origin, Source, Split, Stream, Union
from roses_app.config import streams_stateless, streams_time
from roses_app.config.fields import NAME_RE, Problems, did_you_mean, listing
from roses_app.config.limits import MAX_EXPRESSION_CHARS, MAX_PLAN_DEPTH, MAX_STATEFUL_COPIES
from roses_app.config.operator_registry import (
    XQUERY_FILE,
    Builder,
    OperatorContext,
    OperatorSpec,
    operator,
    operator_names,
    register_operator,
    xquery_argument,
)
from roses_app.config.yamlmarks import Marked, describe

# (expression, namespaces, variables) -> None, or raises ExpressionError
XPathChecker = Callable[[str, tuple[tuple[str, str], ...], tuple[str, ...]], None]

# Keys a stream mapping may hold besides its one operator key.
STREAM_KEYS: tuple[str, ...] = ("publish", "time")

# The handler modules, in registration order.
HANDLER_MODULES = (streams_stateless, streams_time)
STATELESS_NODES = (Source, Filter, Map, Union, Split)


class StreamPlanner:
    """Builds the plan of every stream, resolving and inlining references."""

    def __init__(
        self,
        problems: Problems,
        sources: Sequence[str],
        bodies: dict[str, Marked],
        namespaces: tuple[tuple[str, str], ...],
        xpath_checker: XPathChecker,
        times: dict[str, str] | None = None,
        lateness: int = 0,
        files: dict[str, str] | None = None,
    ) -> None:
        self.lateness = lateness
        # stream name -> the file it is written in, when not ``file`` (subscriptions)
        self.files = files or {}
        # source or stream name -> its time: (a stream's applies to the sources it
        # names itself; a stream it names keeps its own)
        self.times = times or {}
        self.problems = problems
        self.sources = set(sources)
        self.bodies = bodies
        self.known = [*sources, *(n for n in bodies if n not in self.sources)]
        self.namespaces = namespaces
        self.xpath_checker = xpath_checker
        self.plans: dict[str, Node | None] = {}
        self.stack: list[str] = []
        self.level = 0  # operators being built, one inside the other (references inlined)
        # id(node) -> its depth in operators (and the node, which keeps the id its own)
        self.depths: dict[int, tuple[int, Node]] = {}

    @property
    def file(self) -> str:
        """The file of the stream being planned (its lines are that file's)."""
        return self.problems.file

    # -- streams ---------------------------------------------------------------------

    def plan(self, name: str) -> Node | None:
        """The plan of stream ``name`` (built once); None if it has problems."""
        if name in self.plans:
            return self.plans[name]
        self.stack.append(name)
        # the problems of its lines are in its file (no context manager: one per
        # stream cost 100,000 subscriptions a second)
        outer = self.problems.file
        self.problems.file = self.files.get(name, self.problems.main)
        try:
            plan = self.node(self.bodies[name], name, name, root=True)
        finally:
            self.stack.pop()
            self.problems.file = outer
        self.plans[name] = plan
        return plan

    def reference(self, name: str, line: int, stream: str, step: str, root: bool) -> Node | None:
        if name in self.sources:
            time = self.times.get(stream) or self.times.get(name, "ingest")
            origin = Origin(self.file, line, stream, f"{step}/source:{name}")
            return Source(name, time, origin=origin)
        if name not in self.bodies:
            # close names among a hundred thousand cost a second each: sources only
            close = self.known if len(self.known) <= 5_000 else sorted(self.sources)
            self.problems.add(
                line,
                f"stream {stream!r} refers to unknown source or stream {name!r}"
                f"{did_you_mean(name, close)} (known: {listing(self.known)})",
            )
            return None
        if name in self.stack:
            cycle = [*self.stack[self.stack.index(name) :], name]
            self.problems.add(line, f"cyclic stream references: {' -> '.join(cycle)}")
            return None
        plan = self.plan(name)
        if plan is None:
            return None
        if isinstance(plan, Split):
            self.problems.add(
                line,
                f"stream {name!r} is a split; using a split stream as "
                f"{'a stream' if root else 'an input'} is not supported yet "
                f"(refer to the input of its split instead)",
            )
            return None
        return plan

    # -- nodes -----------------------------------------------------------------------

    def node(self, value: Marked, stream: str, step: str, *, root: bool) -> Node | None:
        """An operator node or a bare name; ``step`` is the parent's step id (+ slot)."""
        if isinstance(value.value, str):
            return self.reference(value.value, value.line, stream, step, root)
        if value.is_scalar and value.value is not None and NAME_RE.fullmatch(value.text or ""):
            # a name YAML reads as a number or boolean (2024, yes): names are text
            return self.reference(str(value.text), value.line, stream, step, root)
        ops = operator_names()
        if not value.is_map:
            what = f"stream {stream!r}" if root else "an input"
            self.problems.add(
                value.line,
                f"{what} must be a source or stream name, or a mapping with one operator "
                f"({', '.join(ops)}), got {describe(value)}",
            )
            return None
        extra = STREAM_KEYS if root else ()
        expected = ", ".join(ops) + (f"; or {', '.join(extra)}" if extra else "")
        found = []
        for key in value.value:
            if key in extra:
                continue
            if operator(key) is not None:
                found.append(key)
            else:
                self.problems.add(
                    value.key_line(key),
                    f"unknown operator {key!r} (expected one of: {expected})"
                    + did_you_mean(key, [*ops, *extra]),
                )
        if not found:
            if all(k in extra or operator(k) is not None for k in value.value):
                where = f"stream {stream!r}" if root else "this node"
                self.problems.add(
                    value.line, f"{where} has no operator (expected one of: {expected})"
                )
            return None
        if len(found) > 1:
            self.problems.add(
                value.key_line(found[1]),
                f"a node has exactly one operator, found {len(found)}: {', '.join(found)} "
                "(nest one inside the other's input instead)",
            )
            return None
        name = found[0]
        spec = operator(name)
        assert spec is not None
        line = value.key_line(name)
        if spec.root_only and not root:
            self.problems.add(
                line,
                f"{name} is only allowed at the root of a stream (make it a stream of its own)",
            )
            return None
        origin = Origin(self.file, line, stream, f"{step}/{name}")
        if self.level >= MAX_PLAN_DEPTH:  # before recursing further: a chain may be long
            self._too_deep(line, self.stack[0] if self.stack else stream, " down to here")
            return None
        self.level += 1
        try:
            built = spec.build(OperatorContext(self, name, origin), value.value[name])
        finally:
            self.level -= 1
        return None if built is None else self._checked_depth(built, line, stream)

    # -- limits ----------------------------------------------------------------------

    def _checked_depth(self, node: Node, line: int, stream: str) -> Node | None:
        """``node``, or None (reported) when it nests more than MAX_PLAN_DEPTH operators.
        Depths are kept per node object (no hashing: a node's digest is not needed to
        check a config), so a plan used by many streams is measured once."""
        depths = self.depths
        below = (depths[id(child)][0] if id(child) in depths else 0 for child in node.children())
        depth = 1 + max(below, default=0)
        if depth > MAX_PLAN_DEPTH:
            self._too_deep(line, stream, " here")
            return None
        depths[id(node)] = (depth, node)
        return node

    def _too_deep(self, line: int, stream: str, where: str) -> None:
        self.problems.add(
            line,
            f"stream {stream!r} is more than {MAX_PLAN_DEPTH} operators deep{where}, counting "
            "the streams it uses by name (the limit of feeds.yaml): give a union several "
            "inputs, or chain fewer streams",
        )

    # -- expressions -----------------------------------------------------------------

    def check_xpath(self, expr: str, line: int, field: str, variables: tuple[str, ...]) -> bool:
        from roses_app.errors import ExpressionError

        if len(expr) > MAX_EXPRESSION_CHARS:
            self.problems.add(
                line,
                f"{field} is {len(expr):,} characters long, more than the {MAX_EXPRESSION_CHARS:,} "
                "of an XPath expression (the limit of feeds.yaml): split it between streams",
            )
            return False
        try:
            self.xpath_checker(expr, self.namespaces, variables)
        except RecursionError:
            self.problems.add(
                line,
                f"{field} nests too deeply for the XPath parser (parentheses, or terms joined "
                "by and/or): split it between streams",
            )
            return False
        except ExpressionError as exc:
            detail = str(exc.__cause__ or exc)
            if "XPST0081" in detail:
                detail += " (declare the prefix under settings.namespaces)"
            self.problems.add(line, f"XPath syntax error in {field}: {detail}")
            return False
        return True


def stateful_streams(streams: Sequence[Stream]) -> list[Stream]:
    """The streams with an operator of time: what the checks below look at (filters,
    maps, unions and splits add no Spark operator and read no publication time).
    Each node object is looked at once, by its id: hashing a hundred thousand plans
    only to find them stateless cost seconds."""
    memo: dict[int, bool] = {}
    return [stream for stream in streams if not _stateless(stream.plan, memo)]


def _stateless(node: Node, memo: dict[int, bool]) -> bool:
    """(A function of the module, not a closure calling itself: that would be a cycle,
    which the config's reading, frozen after it, never collects: see heap.)"""
    found = memo.get(id(node))
    if found is None:  # recursion: plans are at most MAX_PLAN_DEPTH deep
        found = isinstance(node, STATELESS_NODES) and all(
            _stateless(child, memo) for child in node.children()
        )
        memo[id(node)] = found
    return found


def check_stateful_copies(
    problems: Problems, streams: Sequence[Stream], namespaces: tuple[tuple[str, str], ...]
) -> None:
    """Report (once, at the stream that goes beyond) plans whose stateful part Spark
    would run more than MAX_STATEFUL_COPIES operators for.  The written plans are
    counted first; only when they go beyond are they rewritten (a union of one
    stateful stream with itself is that stream) and counted again.  ``streams``: the
    :func:`stateful_streams` (stateless ones add no operator)."""
    if not streams:
        return
    from roses_app.algebra.planner.stateless_tails import operator_count

    def beyond(plans: Sequence[Stream]) -> Stream | None:
        for stream, total in operator_count(plans):
            if total > MAX_STATEFUL_COPIES:
                return stream
        return None

    if beyond(streams) is None:
        return
    from roses_app.algebra.planner.rewrite import rewrite_streams

    found = beyond(rewrite_streams(streams, namespaces))
    if found is not None:
        problems.add(
            found.origin.line,
            f"with stream {found.name!r}, the stateful streams need Spark to run more than "
            f"{MAX_STATEFUL_COPIES} operators (the limit of feeds.yaml): Spark runs a window, "
            "join, delta... once for every stateful operator that reads it, so a stateful "
            "stream read twice by each of several levels doubles per level; read it at "
            "fewer places",
        )


def check_event_time(problems: Problems, streams: Sequence[Stream]) -> None:
    """Report the operators of time that read items in publication time and that the
    engines cannot run on out-of-order input (each node once).  ``streams``: the
    :func:`stateful_streams` (filters, maps, unions, splits: nothing to report)."""
    from roses_app.algebra.time.eventtime import publishes_late
    from roses_app.algebra.time.unsupported import unsupported_on_event_time

    seen: set[Node] = set()
    for stream in streams:
        for node, reason in unsupported_on_event_time(stream.plan):
            if node in seen:
                continue
            seen.add(node)
            problems.add(node.origin.line, f"stream {stream.name!r}: {reason}")
        for node in stream.plan.walk():
            if (
                publishes_late(node)
                and node is not stream.plan
                and node.origin.stream == stream.name
            ):
                problems.add(
                    node.origin.line,
                    f"stream {stream.name!r}: late: publish sends late items to the "
                    f"stream's late feed, so the {type(node).__name__} must be the stream "
                    "itself (make it a stream of its own, and read that stream here)",
                )


__all__ = [
    "HANDLER_MODULES",
    "STREAM_KEYS",
    "XQUERY_FILE",
    "Builder",
    "OperatorContext",
    "OperatorSpec",
    "StreamPlanner",
    "XPathChecker",
    "check_event_time",
    "check_stateful_copies",
    "operator",
    "operator_names",
    "register_operator",
    "stateful_streams",
    "xquery_argument",
]
