"""The registry of feeds.yaml operators: operator key → builder of its plan node.

Handler modules (:mod:`~roses_app.config.streams_stateless` for filter, map, union and
split; :mod:`~roses_app.config.streams_time` for the operators of time) register their
builders here with :func:`register_operator`; :mod:`roses_app.config.streams` imports
them all, so importing it gives the complete registry.  Nothing here imports a
handler module or the planner: no import cycle.

A builder gets an :class:`OperatorContext` (to read its arguments, build its inputs
and check its expressions, all reporting problems at the right line) and the marked
YAML value of its key; it returns a plan node, or None when something was wrong
(already reported).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from roses_app.algebra.plan.operators import Node, Origin, XQuery
from roses_app.config.fields import Problems, Section
from roses_app.config.yamlmarks import Marked, describe

Builder = Callable[["OperatorContext", Marked], "Node | None"]


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
    """The operator keys, in registration order."""
    return tuple(_OPERATORS)


def operator(name: str) -> OperatorSpec | None:
    return _OPERATORS.get(name)


class Planner(Protocol):
    """What a builder's context uses of the stream planner
    (:class:`roses_app.config.streams.StreamPlanner`)."""

    problems: Problems
    namespaces: tuple[tuple[str, str], ...]
    lateness: int  # settings.lateness (µs): the default allowed lateness

    @property
    def file(self) -> str:
        """The file of the stream being planned."""
        ...

    def node(self, value: Marked, stream: str, step: str, *, root: bool) -> Node | None: ...

    def check_xpath(self, expr: str, line: int, field: str, variables: tuple[str, ...]) -> bool: ...


@dataclass
class OperatorContext:
    """What a builder needs: its origin, and problem-reporting readers for its arguments."""

    plans: Planner
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
