"""Text rendering of logical plans for ``roses explain``."""

from __future__ import annotations

from roses_app.algebra.plan import Filter, Map, Node, Source, Split, Union


def describe(node: Node) -> str:
    """One line for one node: the operator and its parameters."""
    if isinstance(node, Source):
        return f"Source {node.name}"
    if isinstance(node, Filter):
        return f"Filter σ where {node.where!r}"
    if isinstance(node, Map):
        if node.xquery is not None:
            return f"Map μ xquery {node.xquery}"
        return f"Map μ xpath {node.xpath!r}"
    if isinstance(node, Union):
        return f"Union ∪ of {len(node.inputs)}"
    if isinstance(node, Split):
        return f"Split Ψ by {node.by!r}"
    return type(node).__name__


def format_plan(node: Node, indent: str = "") -> str:
    """The plan as an indented tree, each node with the feeds.yaml line it came from."""
    where = f"  [{node.origin.file}:{node.origin.line}]" if node.origin.line else ""
    lines = [f"{indent}{describe(node)}{where}"]
    for child in node.children():
        lines.append(format_plan(child, indent + "  "))
    return "\n".join(lines)
