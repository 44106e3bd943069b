"""Observers that differ only in their string literals share one parse.

A config of keyword subscriptions holds a hundred thousand observers written in a
few dozen shapes (``contains(lower-case(title), '...') and ...``): elementpath took
a config of 100,000 of them 15 s to parse one by one.  Here an observer's string
literals are cut out (its *shape*: the text with each literal replaced by a marker
literal), the shape is parsed once, and each observer gets a copy of the shape's
token tree (:class:`Tok`) with its own literals put back, which the presearcher's
analysis reads as it reads elementpath's tokens.

A literal's text cannot make an expression wrong, or change what it means, where
it is only compared or searched for: a shape is used only when every token of its
tree is one of :data:`SAFE_SYMBOLS` (tests, comparisons, paths, ``lower-case``...).
Any other shape (``matches`` checks its pattern, ``xs:date`` its text), a shape that
does not parse (the observer's own parse then reports its mistake in its words)
and an observer with a comment (whose text may hold quotes) are parsed as they are.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from roses_app.errors import ExpressionError
from roses_app.xmlfn.xpath import Namespaces, syntax_tree

# XPath string literals: a doubled quote inside is one quote
LITERAL = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")
MARKER = "\ue000"  # a private-use character: the marker literals are '\ue000N'
STRING = "(string)"

# (symbol, arities): the tokens a shape may hold; None: any number of children
SAFE_SYMBOLS: dict[str, frozenset[int] | None] = {
    "and": None,
    "or": None,
    "=": None,
    "!=": None,
    "eq": None,
    "ne": None,
    ",": None,
    "(": None,
    "/": None,
    "[": None,
    "@": None,
    ":": None,
    ".": None,
    "$": None,
    STRING: None,
    "(name)": None,
    "(integer)": None,
    "child": None,
    "attribute": None,
    "contains": frozenset({2}),
    "starts-with": frozenset({2}),
    "ends-with": frozenset({2}),
    "lower-case": frozenset({1}),
    "upper-case": frozenset({1}),
    "string": frozenset({0, 1}),
    "normalize-space": frozenset({0, 1}),
    "not": frozenset({1}),
    "boolean": frozenset({1}),
    "exists": frozenset({1}),
    "empty": frozenset({1}),
    "true": frozenset({0}),
    "false": frozenset({0}),
}
MAX_SHAPES = 10_000  # beyond, the memo starts again


@dataclass(frozen=True, slots=True)
class Tok:
    """A parsed token as the analysis reads it: symbol, label, value, children."""

    symbol: str
    label: Any  # a str, or elementpath's MultiLabel
    value: Any
    children: tuple[Tok, ...]

    def __len__(self) -> int:
        return len(self.children)

    def __getitem__(self, index: int) -> Tok:
        return self.children[index]

    def __iter__(self) -> Iterator[Tok]:
        return iter(self.children)

    def filled(self, literals: Sequence[str]) -> Tok:
        """This tree with each marker literal replaced by the observer's literal."""
        if self.symbol == STRING and isinstance(self.value, str) and self.value[:1] == MARKER:
            return Tok(STRING, self.label, literals[int(self.value[1:])], ())
        if not self.children:
            return self
        return Tok(self.symbol, self.label, self.value, tuple(c.filled(literals) for c in self))


@dataclass(frozen=True)
class Shape:
    tree: Tok
    parser: Any  # the XPath31Parser it was parsed with (namespaces, default namespace)


_shapes: dict[tuple[str, Namespaces], Shape | None] = {}


def split_literals(expr: str) -> tuple[str, list[str]] | None:
    """The expression's shape (each literal replaced by a marker literal) and its
    literals' values; None when it has a comment or holds the marker character."""
    if "(:" in expr or MARKER in expr:
        return None
    literals: list[str] = []

    def marker(found: re.Match[str]) -> str:
        text = found.group()
        quote = text[0]
        literals.append(text[1:-1].replace(quote * 2, quote))
        return f"'{MARKER}{len(literals) - 1}'"

    return LITERAL.sub(marker, expr), literals


def parsed_shape(template: str, namespaces: Namespaces = ()) -> Shape | None:
    """The parse of an item observer's shape (from :func:`split_literals`: ``$i``
    its one variable), parsed once; None: parse the observer as it is (see above)."""
    key = (template, namespaces)
    if key in _shapes:
        return _shapes[key]
    shape = _shape(template, namespaces)
    if len(_shapes) >= MAX_SHAPES:
        _shapes.clear()
    _shapes[key] = shape
    return shape


def forget_shapes() -> None:
    """Forget the shapes parsed (tests: as a new process starts)."""
    _shapes.clear()


def _shape(template: str, namespaces: Namespaces) -> Shape | None:
    try:
        token, parser = syntax_tree(template, namespaces)
    except ExpressionError:
        return None
    tree = _snapshot(token)
    return Shape(tree, parser) if tree is not None else None


def _snapshot(token: Any) -> Tok | None:
    """The token tree as :class:`Tok` values; None if a token is not safe."""
    symbol = str(token.symbol)
    if symbol not in SAFE_SYMBOLS:
        return None
    arities = SAFE_SYMBOLS[symbol]
    if arities is not None and (token.label != "function" or len(token) not in arities):
        return None
    children = []
    for child in token:
        snapshot = _snapshot(child)
        if snapshot is None:
            return None
        children.append(snapshot)
    # the label as it is: elementpath's MultiLabel equals each of its names ("function")
    return Tok(symbol, token.label, token.value, tuple(children))
