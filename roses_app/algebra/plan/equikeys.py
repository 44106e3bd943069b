"""Equi-join keys of a two-item observer: ``$i1/PATH = $i2/PATH2`` [``and`` ...].

A join predicate of that form can only hold for a pair whose items share a key: a
string value of a node ``PATH`` selects in ``$i1`` equal to one ``PATH2`` selects in
``$i2`` (``=`` is existential, and untyped nodes compare as strings by codepoint, in
XPath 1.0 as in 3.1; ``eq`` needs one value each side, which then are equal).  So
an engine may pair only the items sharing a key (a hash join) and then evaluate the
whole predicate on those candidates: the result is exactly the same as evaluating it
on every pair.

This module only reads the expression's text (no lxml, no elementpath, no Spark): a
small tokenizer, and a deliberately narrow grammar.  Anything it is not sure about
gives no key, which only costs speed.  Key values are computed by
:func:`roses_app.xmlfn.keys.key_strings_batch`.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

_NAME = r"[A-Za-z_\u00C0-\uFFFF][\w.\-\u00B7\u00C0-\uFFFF]*"
_TOKEN = re.compile(
    rf"""\s*(?:
      (?P<string>"(?:[^"]|"")*"|'(?:[^']|'')*')
    | (?P<comment>\(:)
    | (?P<var>\$(?:{_NAME}:)?{_NAME})
    | (?P<name>(?:{_NAME}:)?(?:{_NAME}|\*)|\*)
    | (?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)
    | (?P<op>//|::|!=|<=|>=|\|\||=>|[/()\[\]{{}},@=<>+\-|!.?:;#])
    )""",
    re.VERBOSE,
)

# A keyword in these positions opens an expression an ``and`` may belong to
# (``every $x in ... satisfies a and b``): no conjunct can be taken out of it.
_FLOW_KEYWORDS = {"for", "let", "some", "every", "if", "then", "else", "return", "satisfies"}
_STOP_WORDS = _FLOW_KEYWORDS | {"or"}
# After these an ``and`` or ``or`` is a name test (``$i1/and``), not an operator.
_NAME_CONTEXT = {"/", "//", "@", "::"}

_STEP = rf"(?:@?(?:(?:{_NAME}:)?(?:{_NAME}|\*)|\*)|text\(\))"
_RELATIVE = re.compile(rf"{_STEP}(?:/{{1,2}}{_STEP})*")
_ON_VARIABLE = re.compile(rf"\$(?P<var>i1|i2)(?P<path>(?:/{{1,2}}{_STEP})+)")
_PATH_OPS = {"/", "//", "@", "(", ")"}


@dataclass(frozen=True)
class Token:
    kind: str
    text: str


@dataclass(frozen=True)
class EquiKey:
    """Relative paths whose string values must share a value for the predicate to hold:
    ``left`` on ``$i1`` (the left item), ``right`` on ``$i2``."""

    left: str
    right: str


def tokenize(expr: str) -> list[Token] | None:
    """The expression's tokens; None when it holds anything the tokenizer skips
    (comments, characters it does not know)."""
    tokens: list[Token] = []
    position, end = 0, len(expr.rstrip())
    while position < end:
        found = _TOKEN.match(expr, position)
        if found is None or found.lastgroup is None or found.lastgroup == "comment":
            return None
        tokens.append(Token(found.lastgroup, found.group(found.lastgroup)))
        position = found.end()
    return tokens


def _is_keyword(tokens: Sequence[Token], index: int, words: set[str]) -> bool:
    """True if the name at ``index`` is one of ``words`` used as a keyword, not as a
    name test (``$i1/or``)."""
    token = tokens[index]
    if token.kind != "name" or token.text not in words:
        return False
    return index == 0 or tokens[index - 1].text not in _NAME_CONTEXT


def _is_operator(tokens: Sequence[Token], index: int, word: str) -> bool:
    """A binary operator (``and``, ``eq``): a keyword with an operand before it."""
    return index > 0 and _is_keyword(tokens, index, {word})


def _outer_parentheses(tokens: Sequence[Token]) -> bool:
    """True if the first and last tokens are one pair of parentheses around it all."""
    if len(tokens) < 2 or tokens[0].text != "(" or tokens[-1].text != ")":
        return False
    depth = 0
    for index, token in enumerate(tokens):
        depth += token.text in "([{" and token.kind == "op"
        depth -= token.text in ")]}" and token.kind == "op"
        if depth == 0 and index < len(tokens) - 1:
            return False
    return True


def conjuncts(tokens: Sequence[Token]) -> list[list[Token]] | None:
    """The top-level ``and`` operands (parentheses around one are opened); None when the
    expression is not a plain conjunction (a top-level ``or``, ``if``, ``some``...)."""
    while _outer_parentheses(tokens):
        tokens = tokens[1:-1]
    parts: list[list[Token]] = [[]]
    depth = 0
    for index, token in enumerate(tokens):
        if token.kind == "op" and token.text in "([{":
            depth += 1
        elif token.kind == "op" and token.text in ")]}":
            depth -= 1
        elif depth == 0 and _is_operator(tokens, index, "and"):
            parts.append([])
            continue
        elif depth == 0 and (token.text == "," or _is_keyword(tokens, index, _STOP_WORDS)):
            return None  # a sequence, an ``or``, or an ``and`` inside ``if``/``every``...
        parts[-1].append(token)
    if depth != 0 or not all(parts):
        return None
    out: list[list[Token]] = []
    for part in parts:
        if _outer_parentheses(part):
            inner = conjuncts(part)
            if inner is None:
                continue  # an operand we cannot open gives no key, but others may
            out.extend(inner)
        else:
            out.append(part)
    return out


def _operand(tokens: Sequence[Token]) -> tuple[str, str] | None:
    """``$i1/PATH``, ``$i2/PATH`` or a relative PATH (on the context item, ``$i1``), as
    (variable, path relative to that item)."""
    words = ("name", "var")
    if any(a.kind in words and b.kind in words for a, b in pairwise(tokens)):
        return None  # ``a to b``, ``a div b``: two words, never one step
    if any(t.kind not in words and t.text not in _PATH_OPS for t in tokens):
        return None  # ``-``, ``.``, predicates, literals...: not in the grammar
    text = "".join(t.text for t in tokens)
    found = _ON_VARIABLE.fullmatch(text)
    if found is not None:
        path = found.group("path")
        return found.group("var"), f".{path}" if path.startswith("//") else path[1:]
    if _RELATIVE.fullmatch(text):
        return "i1", text
    return None


def _comparison(tokens: Sequence[Token]) -> int | None:
    """The position of the one ``=`` or ``eq`` of a conjunct, if it has exactly one."""
    found = [
        index
        for index, token in enumerate(tokens)
        if (token.kind == "op" and token.text == "=") or _is_operator(tokens, index, "eq")
    ]
    return found[0] if len(found) == 1 else None


def _key_of(tokens: Sequence[Token]) -> EquiKey | None:
    middle = _comparison(tokens)
    if middle is None:
        return None
    left, right = _operand(tokens[:middle]), _operand(tokens[middle + 1 :])
    if left is None or right is None or left[0] == right[0]:
        return None
    if left[0] == "i2":
        left, right = right, left
    return EquiKey(left[1], right[1])


def equi_key(on: str) -> EquiKey | None:
    """The first ``$i1/PATH = $i2/PATH2`` conjunct of a join predicate, if any."""
    tokens = tokenize(on)
    for part in (conjuncts(tokens) if tokens else None) or []:
        key = _key_of(part)
        if key is not None:
            return key
    return None


# -- pairing by key (the reference evaluator's hash join) ------------------------------

Bounds = Callable[[int], tuple[int, int] | None]


def keyed_pairs(
    probe_times: Sequence[int],
    probe_keys: Sequence[Sequence[str]],
    build_times: Sequence[int],
    build_keys: Sequence[Sequence[str]],
    bounds: Bounds,
) -> set[tuple[int, int]]:
    """Pairs (probe index, build index) sharing a key, the build event's time within
    ``bounds(probe time)`` (inclusive; None: nothing).  ``build_times`` is sorted."""
    index: dict[str, tuple[list[int], list[int]]] = {}
    for j, keys in enumerate(build_keys):
        for key in keys:
            times, positions = index.setdefault(key, ([], []))
            times.append(build_times[j])
            positions.append(j)
    pairs: set[tuple[int, int]] = set()
    for i, keys in enumerate(probe_keys):
        found = bounds(probe_times[i]) if keys else None
        if found is None:
            continue
        low, high = found
        for key in keys:
            times, positions = index.get(key, ([], []))
            first, last = bisect_left(times, low), bisect_right(times, high)
            pairs.update((i, positions[k]) for k in range(first, last))
    return pairs
