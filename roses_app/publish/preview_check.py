"""The stream a preview request stands for, checked as ``roses check`` checks a stream.

A request is an observer (``where``), a split function (``by``) or an accessor
(``map``) over a source or stream of the config, or a whole stream's YAML body.  It is
planned by the config loader's own planner (:class:`~roses_app.config.streams.
StreamPlanner`), against the config's sources and its streams' plans as they are (a
stream it names is not planned again), with the same checks and messages.  Each
problem is located in the request's ``text``: a YAML body's problems at their line;
an XPath error at the line and column elementpath gives inside the expression,
moved to where the expression stands in the text when it is written there as it is
(plain or quoted without escapes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roses_app.algebra.plan.operators import Node, Origin, Stream
from roses_app.config.fields import Problems, check_name
from roses_app.config.loader import _publish, _time_mode
from roses_app.config.model import Config, Publish
from roses_app.config.streams import (
    StreamPlanner,
    check_event_time,
    check_stateful_copies,
    stateful_streams,
)
from roses_app.config.yamlmarks import Marked, load
from roses_app.errors import ConfigProblem, ExpressionError

KINDS = {"where": ("filter", "where"), "by": ("split", "by"), "map": ("map", "xpath")}
STREAM = "stream"
EXAMPLE = "filter: {from: SOURCE, where: XPATH}"


@dataclass(frozen=True)
class Located:
    """A problem of the request: ``roses check``'s message, its place in the text."""

    message: str
    line: int | None
    column: int | None


@dataclass(frozen=True)
class Checked:
    """The request's stream (None when it has problems), and its problems."""

    stream: Stream | None
    publish: Publish | None
    problems: tuple[Located, ...]


class _Positions:
    """The XPath checker of the loader, noting where elementpath found each error."""

    def __init__(self) -> None:
        from roses_app.xmlfn.presearch_terms import check_observer

        self.check = check_observer
        self.found: dict[str, tuple[int, int] | None] = {}

    def __call__(
        self, expr: str, namespaces: tuple[tuple[str, str], ...], variables: tuple[str, ...]
    ) -> None:
        try:
            self.check(expr, namespaces, variables)
        except ExpressionError as exc:
            token = getattr(exc.__cause__, "token", None)
            position = getattr(token, "position", None)
            found = (int(position[0]), int(position[1])) if position else None
            self.found[expr] = found
            raise


class _Planner(StreamPlanner):
    """The loader's planner over the config's sources and streams' plans as they are."""

    def __init__(self, problems: Problems, config: Config, name: str, body: Marked) -> None:
        bodies = dict.fromkeys(config.streams, body)  # (a name must only be known)
        bodies[name] = body
        times = {n: s.time for n, s in config.sources.items() if s.time != "ingest"}
        if body.is_map and "time" in body.value:
            times[name] = _time_mode(problems, body, f"streams.{name}")
        settings = config.settings
        self.checker = _Positions()
        super().__init__(
            problems,
            list(config.sources),
            bodies,
            settings.namespaces,
            self.checker,
            times,
            settings.lateness,
        )
        self.plans.update({n: s.plan for n, s in config.streams.items() if n != name})

    def reference(self, name: str, line: int, stream: str, step: str, root: bool) -> Node | None:
        plan = super().reference(name, line, stream, step, root)
        if plan is not None:
            self._measure(plan)
        return plan

    def _measure(self, node: Node) -> int:
        """A plan's depth in operators, noted as the planner notes the plans it makes
        (a stream read by name counts with its whole plan)."""
        known = self.depths.get(id(node))
        if known is not None:
            return known[0]
        depth = 1 + max((self._measure(child) for child in node.children()), default=0)
        self.depths[id(node)] = (depth, node)
        return depth


def check_request(config: Config, text: str, kind: str, source: str | None, name: str) -> Checked:
    """The request's stream and its problems, located in ``text``."""
    problems = Problems(str(config.path))  # (an XQuery file is found beside the config)
    if kind not in (*KINDS, STREAM):
        message = f"kind must be one of {', '.join((*KINDS, STREAM))}, got {kind!r}"
        return Checked(None, None, (Located(message, None, None),))
    if kind != STREAM and not source:
        message = f"{KINDS[kind][0]}.from: give the source or stream the expression reads"
        return Checked(None, None, (Located(message, None, None),))
    body = _body(text, kind, source, problems)
    check_name(problems, name, 0, "stream")
    if body is None:
        if not problems:
            problems.add(1, f"the stream is empty: write an operator, e.g. {EXAMPLE}")
        return _result(None, None, problems, text, kind, {})
    planner = _Planner(problems, config, name, body)
    plan = planner.plan(name)
    publish = None
    if kind == STREAM:
        publish = _publish(problems, name, body.value.get("publish") if body.is_map else None)
    stream = None
    if plan is not None:
        stream = Stream(name, plan, Origin(str(config.path), 1, name, name))
        stateful = stateful_streams([stream])
        check_stateful_copies(problems, stateful, config.settings.namespaces)
        check_event_time(problems, stateful)
    return _result(stream, publish, problems, text, kind, planner.checker.found)


def _body(text: str, kind: str, source: str | None, problems: Problems) -> Marked | None:
    """The stream's body as the loader reads it (lines of ``text``)."""
    if kind == STREAM:
        return load(text, problems.add)
    operator, key = KINDS[kind]
    arguments: dict[str, Any] = {"from": Marked(source, 1, text=source), key: Marked(text, 1)}
    inner = Marked(arguments, 1, key_lines=dict.fromkeys(arguments, 1))
    return Marked({operator: inner}, 1, key_lines={operator: 1})


def _result(
    stream: Stream | None,
    publish: Publish | None,
    problems: Problems,
    text: str,
    kind: str,
    found: dict[str, tuple[int, int] | None],
) -> Checked:
    located = tuple(_locate(p, text, kind, found) for p in problems.result())
    return Checked(None if located else stream, publish, located)


def _locate(
    problem: ConfigProblem, text: str, kind: str, found: dict[str, tuple[int, int] | None]
) -> Located:
    """The problem at its place in ``text``."""
    message = problem.message
    if message.startswith("XPath"):
        for expr, position in found.items():
            at = text.find(expr) if expr else -1
            if at < 0 or (kind == STREAM and _line_of(text, at) - problem.line not in (0, 1)):
                continue
            if position is None:
                line = _line_of(text, at)
                return Located(message, line if "\n" not in expr else None, None)
            line, column = position
            offset = _offset(expr, line, column)
            return Located(message, _line_of(text, at + offset), _column_of(text, at + offset))
    if kind == STREAM:
        return Located(message, problem.line if problem.line > 0 else None, None)
    about_text = message.startswith("XPath") or f".{KINDS[kind][1]}" in message
    return Located(message, 1 if about_text and "\n" not in text else None, None)


def _offset(expr: str, line: int, column: int) -> int:
    """The index in ``expr`` of its 1-based ``line`` and ``column``."""
    lines = expr.split("\n")
    before = sum(len(text) + 1 for text in lines[: max(0, line - 1)])
    return min(len(expr), before + max(0, column - 1))


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _column_of(text: str, index: int) -> int:
    return index - (text.rfind("\n", 0, index) + 1) + 1


__all__ = ["KINDS", "STREAM", "Checked", "Located", "check_request"]
