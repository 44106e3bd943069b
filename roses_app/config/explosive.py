"""``roses check``'s warnings: expressions of a valid config that are known to explode.

Every expression of every stream's plan (observers, accessors, split and grouping
keys, join conditions, XQuery mutators and reducers) is read by
:func:`roses_app.xmlfn.hazards.hazards`; each finding becomes a warning at the step's
feeds.yaml file:line, naming the stream and the step.  Warnings, not errors: the
per-item budget stops such an evaluation at run time (``settings.limits``), at the
cost of each item it meets.
"""

from __future__ import annotations

from collections.abc import Iterator

from roses_app.algebra.plan.operators import Node
from roses_app.algebra.plan.specs import XQuery
from roses_app.config.model import Config
from roses_app.errors import ConfigProblem
from roses_app.xmlfn.hazards import hazards

EXPRESSION_FIELDS = ("where", "xpath", "by", "on", "xquery", "combine", "reduce")


def expressions(node: Node) -> Iterator[tuple[str, str]]:
    """(what, text) of each expression of one plan node: what names an XQuery file."""
    for name in EXPRESSION_FIELDS:
        value = getattr(node, name, None)
        if isinstance(value, XQuery):
            yield (f"in {value.file}: " if value.file else ""), value.text
        elif isinstance(value, str) and value:
            yield "", value


def explosive(config: Config) -> list[ConfigProblem]:
    """The warnings of ``config``, sorted by line; a step shared by streams once."""
    found: dict[tuple[str, int, str], None] = {}
    for stream in config.streams.values():
        for node in stream.plan.walk():
            origin = node.origin
            where = f"stream {origin.stream!r}, step {origin.step}"
            for what, text in expressions(node):
                for hazard in hazards(text):
                    found[origin.file, origin.line, f"warning: {where}: {what}{hazard}"] = None
    return [ConfigProblem(*key) for key in sorted(found, key=lambda k: (k[0], k[1]))]
