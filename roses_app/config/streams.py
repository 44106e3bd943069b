"""``streams:`` of feeds.yaml → logical plans, through a registry of operators.

An operator node is a mapping with exactly one operator key; its value holds the
operator's arguments, among them its inputs (``from:``, ``union:`` items...), each
either another operator node or a bare name.  A bare name is a source (a
:class:`~roses_app.algebra.plan.Source` leaf) or another stream, whose plan is inlined:
finished plans only have Source leaves.  References are resolved depth-first, so cycles
are found and reported once, with the whole path.

The set of operators is closed but extensible: a later operator (window, join...) is a
builder function registered with :func:`register_operator`.  A builder gets an
:class:`OperatorContext` (to read its arguments, build its inputs and check its
expressions, all reporting problems at the right line) and the marked YAML value of its
key; it returns a plan node, or None when something was wrong (already reported).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from roses_app.algebra.plan import Filter, Map, Node, Origin, Source, Split, Union, XQuery
from roses_app.config.fields import NAME_RE, Problems, Section, did_you_mean, listing
from roses_app.config.yamlmarks import Marked, describe

Builder = Callable[["OperatorContext", Marked], "Node | None"]
# (expression, namespaces, variables) -> None, or raises ExpressionError
XPathChecker = Callable[[str, tuple[tuple[str, str], ...], tuple[str, ...]], None]

# Keys a stream mapping may hold besides its one operator key.
STREAM_KEYS: tuple[str, ...] = ("publish",)


@dataclass(frozen=True)
class OperatorSpec:
    """One operator of feeds.yaml: its key, how to build it, where it may appear."""

    name: str
    build: Builder
    root_only: bool = False


_OPERATORS: dict[str, OperatorSpec] = {}


def register_operator(name: str, build: Builder, *, root_only: bool = False) -> None:
    """Make ``name:`` an operator key of feeds.yaml (``root_only``: only at a stream's root)."""
    _OPERATORS[name] = OperatorSpec(name, build, root_only)


def operator_names() -> tuple[str, ...]:
    return tuple(_OPERATORS)


def operator(name: str) -> OperatorSpec | None:
    return _OPERATORS.get(name)


@dataclass
class OperatorContext:
    """What a builder needs: its origin, and problem-reporting readers for its arguments."""

    plans: StreamPlanner
    name: str
    origin: Origin

    @property
    def line(self) -> int:
        return self.origin.line

    @property
    def problems(self) -> Problems:
        return self.plans.problems

    def problem(self, line: int, message: str) -> None:
        self.problems.add(line, message)

    def arguments(
        self, value: Marked, *, required: Sequence[str] = (), optional: Sequence[str] = ()
    ) -> Section:
        """The operator's argument mapping, with a closed set of keys."""
        return Section(
            self.problems, value, self.name, required=required, optional=optional, line=self.line
        )

    def input(self, value: Marked | None, slot: str = "") -> Node | None:
        """Build an input node (bare name or operator mapping); ``slot`` extends the step id,
        e.g. ``"[0]"`` for the first item of a list, ``".left"`` for a named input."""
        if value is None:
            return None
        return self.plans.node(value, self.origin.stream, f"{self.origin.step}{slot}", root=False)

    def xpath(self, args: Section, key: str, *, variables: tuple[str, ...] = ("i",)) -> str | None:
        """A required XPath expression argument, syntax-checked; None if missing or bad."""
        value = args.get(key)
        if value is None:
            return None
        field = f"{self.name}.{key}"
        if not isinstance(value.value, str):
            self.problem(
                value.line, f"{field} must be an XPath expression (a string), got {describe(value)}"
            )
            return None
        expr = value.value
        if not expr.strip():
            self.problem(value.line, f"{field} must not be empty (an XPath expression)")
            return None
        return expr if self.plans.check_xpath(expr, value.line, field, variables) else None


class StreamPlanner:
    """Builds the plan of every stream, resolving and inlining references."""

    def __init__(
        self,
        problems: Problems,
        file: str,
        sources: Sequence[str],
        bodies: dict[str, Marked],
        namespaces: tuple[tuple[str, str], ...],
        xpath_checker: XPathChecker,
    ) -> None:
        self.problems = problems
        self.file = file
        self.sources = set(sources)
        self.bodies = bodies
        self.known = [*sources, *(n for n in bodies if n not in self.sources)]
        self.namespaces = namespaces
        self.xpath_checker = xpath_checker
        self.plans: dict[str, Node | None] = {}
        self.stack: list[str] = []

    # -- streams ---------------------------------------------------------------------

    def plan(self, name: str) -> Node | None:
        """The plan of stream ``name`` (built once); None if it has problems."""
        if name in self.plans:
            return self.plans[name]
        self.stack.append(name)
        try:
            plan = self.node(self.bodies[name], name, name, root=True)
        finally:
            self.stack.pop()
        self.plans[name] = plan
        return plan

    def reference(self, name: str, line: int, stream: str, step: str, root: bool) -> Node | None:
        if name in self.sources:
            return Source(name, origin=Origin(self.file, line, stream, f"{step}/source:{name}"))
        if name not in self.bodies:
            self.problems.add(
                line,
                f"stream {stream!r} refers to unknown source or stream {name!r}"
                f"{did_you_mean(name, self.known)} (known: {listing(self.known)})",
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
            if key in _OPERATORS:
                found.append(key)
            else:
                self.problems.add(
                    value.key_line(key),
                    f"unknown operator {key!r} (expected one of: {expected})"
                    + did_you_mean(key, [*ops, *extra]),
                )
        if not found:
            if all(k in extra or k in _OPERATORS for k in value.value):
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
        spec = _OPERATORS[name]
        line = value.key_line(name)
        if spec.root_only and not root:
            self.problems.add(
                line,
                f"{name} is only allowed at the root of a stream (make it a stream of its own)",
            )
            return None
        origin = Origin(self.file, line, stream, f"{step}/{name}")
        return spec.build(OperatorContext(self, name, origin), value.value[name])

    # -- expressions -----------------------------------------------------------------

    def check_xpath(self, expr: str, line: int, field: str, variables: tuple[str, ...]) -> bool:
        from roses_app.errors import ExpressionError

        try:
            self.xpath_checker(expr, self.namespaces, variables)
        except ExpressionError as exc:
            detail = str(exc.__cause__ or exc)
            if "XPST0081" in detail:
                detail += " (declare the prefix under settings.namespaces)"
            self.problems.add(line, f"XPath syntax error in {field}: {detail}")
            return False
        return True


# -- the operators of algebra v1 ---------------------------------------------------------


def _unary(node_type: type[Filter | Map | Split], key: str) -> Builder:
    """The builder of ``{from: INPUT, KEY: XPATH}`` operators (filter, map, split)."""

    def build(ctx: OperatorContext, value: Marked) -> Node | None:
        args = ctx.arguments(value, required=("from", key))
        source = ctx.input(args.get("from"))
        expr = ctx.xpath(args, key)
        if source is None or expr is None:
            return None
        return node_type(source, expr, origin=ctx.origin)

    return build


def _union(ctx: OperatorContext, value: Marked) -> Node | None:
    if not value.is_seq:
        ctx.problem(value.line, f"union must be a list of inputs, got {describe(value)}")
        return None
    if not value.value:
        ctx.problem(value.line, "union needs at least one input")
        return None
    inputs = [ctx.input(item, f"[{i}]") for i, item in enumerate(value.value)]
    if any(i is None for i in inputs):
        return None
    return Union(tuple(i for i in inputs if i is not None), origin=ctx.origin)


# A single line ending in one of these is an XQuery file; anything else is inline text.
XQUERY_FILE = re.compile(r"[^\n]*\.(?:xq|xqy|xquery|xql)", re.IGNORECASE)


def xquery_argument(
    ctx: OperatorContext, args: Section, key: str, *, variables: tuple[str, ...] = ("i",)
) -> XQuery | None:
    """An XQuery argument: a file (relative to the config's folder) or inline text.

    The query is compiled by Saxon (through ``roses_app.xmlfn``, loaded lazily); a
    mistake is reported at the file's line (for a file: at the feeds.yaml line, with
    FILE:LINE in the message) or at the feeds.yaml line of the inline text.
    ``variables`` are the external variables the operator binds (``i``; ``i1``, ``i2``;
    ``items``).  None if missing or bad (already reported).
    """
    value = args.get(key)
    if value is None:
        return None
    field = f"{ctx.name}.{key}"
    if not isinstance(value.value, str) or not value.value.strip():
        got = describe(value) if not isinstance(value.value, str) else "empty text"
        ctx.problem(
            value.line,
            f"{field} must be an XQuery file (e.g. xquery/tag-topics.xq) or XQuery text, got {got}",
        )
        return None
    text = value.value
    written = text.strip()
    if XQUERY_FILE.fullmatch(written):
        path = os.path.normpath(os.path.join(os.path.dirname(ctx.plans.file), written))
        try:
            with open(os.path.expanduser(path), encoding="utf-8") as source:
                query = XQuery(source.read(), path, 1)
        except FileNotFoundError:
            ctx.problem(
                value.line,
                f"{field}: XQuery file {written!r} not found (looked for {path}; "
                "a relative path starts at the config file's folder)",
            )
            return None
        except (OSError, UnicodeDecodeError) as exc:
            reason = "it is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else exc
            ctx.problem(value.line, f"{field}: cannot read XQuery file {path}: {reason}")
            return None
    else:
        # a block scalar (``|``) starts on the line after its key
        query = XQuery(text, ctx.plans.file, value.line + (1 if "\n" in text.rstrip() else 0))
    from roses_app.errors import ExpressionError
    from roses_app.xmlfn import XQueryError, check_xquery  # lazily: loads Saxon

    try:
        check_xquery(query, ctx.plans.namespaces, variables)
    except XQueryError as exc:
        if query.file == ctx.plans.file:
            ctx.problem(exc.line, f"XQuery error in {field}: {exc.detail}")
        else:
            ctx.problem(value.line, f"XQuery error in {field}: {exc}")
        return None
    except ExpressionError as exc:
        ctx.problem(value.line, f"XQuery error in {field}: {exc}")
        return None
    return query


def _map(ctx: OperatorContext, value: Marked) -> Node | None:
    """``map: {from: INPUT, xpath: ACCESSOR}`` or ``map: {from: INPUT, xquery: MUTATOR}``."""
    args = ctx.arguments(value, required=("from",), optional=("xpath", "xquery"))
    source = ctx.input(args.get("from"))
    if args.ok and ("xpath" in args) == ("xquery" in args):
        ctx.problem(
            args.line,
            "map takes either xpath (an accessor) or xquery (a mutator: an xquery/*.xq file "
            "or XQuery text)" + (", not both" if "xpath" in args else ""),
        )
        return None
    if "xquery" in args:
        query = xquery_argument(ctx, args, "xquery")
        if source is None or query is None:
            return None
        return Map(source, xquery=query, origin=ctx.origin)
    expr = ctx.xpath(args, "xpath")
    if source is None or expr is None:
        return None
    return Map(source, expr, origin=ctx.origin)


register_operator("filter", _unary(Filter, "where"))
register_operator("map", _map)
register_operator("union", _union)
register_operator("split", _unary(Split, "by"), root_only=True)


# The operators of time (windows, joins, delta, aggregation...) register themselves.
from roses_app.config import streams_time  # noqa: E402, F401
