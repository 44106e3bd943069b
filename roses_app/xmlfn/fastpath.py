"""The lxml fast path: XPath 3.1 expressions that libxml2's XPath 1.0 engine gives alike.

lxml's C XPath engine is 20-30 times faster than elementpath, but it implements XPath
1.0, whose semantics differ from 3.1 in many corners.  An expression runs on lxml only
when a static, conservative analysis proves that, for the result the caller needs,
both engines agree on every item:

``boolean``
    observers (filter, join predicates): the effective boolean value;
``nodes``
    accessors (map): the selected elements, or a string or boolean value;
``string``
    split functions: the string value of the result.

The expression is parsed with elementpath's ``XPath1Parser`` (so it must be XPath 1.0
syntax) and its token tree is walked with a tiny type system: every subexpression is
a node-set (noting whether it holds at most one node per context node, and whether
only elements), a string, a number or a boolean.  Only these constructs pass:

* steps on the child, attribute, self, descendant and descendant-or-self axes with
  name tests, ``*``, ``text()`` and ``node()``; ``.``, ``//`` inside a path, ``|``,
  predicates; ``$i``, ``$i1``, ``$i2`` (one element each) and ``$items``.  Not ``/`` or
  ``//`` at the start, ``..``, reverse or sibling axes: the item is the root of a tree
  fragment and the two engines see that root differently;
* string literals, integer literals below 10^15 (1.0 numbers are doubles, 3.1 integers
  are exact; decimal and double literals are not the same numbers);
* ``and``, ``or``; ``=`` and ``!=`` between strings and node-sets, or between two
  numbers, or two booleans (a node compared with a number or a boolean is converted
  with different rules, and 3.1 raises where 1.0 gives NaN or false); ``<``, ``<=``,
  ``>``, ``>=`` between numbers only (1.0 turns strings into numbers, 3.1 compares
  strings); binary ``+`` and ``-`` of numbers.  Not ``div`` or ``mod`` (division by
  zero: infinity or NaN in 1.0, an error for 3.1 integers), not ``*``, not unary minus;
* functions whose 1.0 and 3.1 definitions agree on the argument kinds allowed:
  ``not``, ``boolean``, ``true``, ``false``, ``contains``, ``starts-with``,
  ``substring-before``, ``substring-after``, ``string``, ``concat``,
  ``normalize-space``, ``translate``, ``string-length``, ``count``, ``position``,
  ``last``, ``local-name``, ``namespace-uri``; and 3.1's ``lower-case`` and
  ``upper-case``, which lxml runs as extension functions (Python's ``str.lower`` and
  ``str.upper``, as elementpath does).  A node-set passed where a string is
  expected must hold at most one node (``title[1]``, ``@href``, ``.``): 1.0 takes the
  first node, 3.1 raises XPTY0004 for two.  Never ``number``, ``sum``, ``round``,
  ``floor``, ``ceiling``, ``substring`` (number parsing and rounding differ), ``name``
  (prefixes), ``lang`` or ``id``.

Strings compare by codepoint in both (elementpath is given the codepoint collation
whatever the process locale).  A number never becomes a string or an accessor/split
result (lxml gives ``3.0`` for 3, and formats large and fractional numbers differently
from 3.1).  Anything else (``lower-case``, sequences, ``if``, ``for``, ``eq``, ...) is
not XPath 1.0 and runs on elementpath.  The analysis is decided once per expression
and cached; compiled ``lxml.etree.XPath`` objects are cached per thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import elementpath
from elementpath import XPath1Parser
from lxml import etree

from roses_app.xmlfn.xpath import ITEM_VARIABLES, Namespaces, namespace_map

# XPath 3.1 functions lxml runs as Python extension functions: one call costs a few
# microseconds, against about fifty for elementpath to build its tree of the item
_CASE_FUNCTIONS: dict[str, Callable[[str], str]] = {
    "lower-case": str.lower,
    "upper-case": str.upper,
}

ResultKind = Literal["boolean", "nodes", "string"]
RESULT_KINDS: tuple[str, ...] = ("boolean", "nodes", "string")
_ALIASES = {"observer": "boolean", "accessor": "nodes", "split": "string"}

_MAX_INTEGER = 10**15


class NotFast(Exception):
    """The expression (or a part of it) may evaluate differently in XPath 1.0."""


@dataclass(frozen=True)
class Static:
    """The static type of a subexpression."""

    kind: str  # "nodes", "string", "number" or "boolean"
    single: bool = False  # nodes: at most one node per context node
    elements: bool = False  # nodes: only element nodes


STRING = Static("string")
NUMBER = Static("number")
BOOLEAN = Static("boolean")
ELEMENTS = Static("nodes", elements=True)

_SINGLE_VARIABLES = {"i", "i1", "i2"}
_SEQUENCE_VARIABLES = {"items"}
_FORWARD_AXES = {"child", "attribute", "self", "descendant", "descendant-or-self"}


# -- argument kinds ----------------------------------------------------------------------


def _any(t: Static) -> bool:
    return True


def _stringish(t: Static) -> bool:
    """Converted to a string alike: a string, or at most one node."""
    return t.kind == "string" or (t.kind == "nodes" and t.single)


def _stringish_or_boolean(t: Static) -> bool:
    return _stringish(t) or t.kind == "boolean"


def _nodes(t: Static) -> bool:
    return t.kind == "nodes"


def _single_node(t: Static) -> bool:
    return t.kind == "nodes" and t.single


ArgCheck = Callable[[Static], bool]


@dataclass(frozen=True)
class _Function:
    args: tuple[ArgCheck, ...]
    result: Static
    optional: int = 0  # how many trailing arguments may be left out
    variadic: bool = False  # the last argument kind repeats


_FUNCTIONS: dict[str, _Function] = {
    "not": _Function((_any,), BOOLEAN),
    "boolean": _Function((_any,), BOOLEAN),
    "true": _Function((), BOOLEAN),
    "false": _Function((), BOOLEAN),
    "contains": _Function((_stringish, _stringish), BOOLEAN),
    "starts-with": _Function((_stringish, _stringish), BOOLEAN),
    "substring-before": _Function((_stringish, _stringish), STRING),
    "substring-after": _Function((_stringish, _stringish), STRING),
    "string": _Function((_stringish_or_boolean,), STRING, optional=1),
    "concat": _Function((_stringish_or_boolean, _stringish_or_boolean), STRING, variadic=True),
    "normalize-space": _Function((_stringish,), STRING, optional=1),
    "translate": _Function((_stringish, _stringish, _stringish), STRING),
    "string-length": _Function((_stringish,), NUMBER, optional=1),
    "count": _Function((_nodes,), NUMBER),
    "position": _Function((), NUMBER),
    "last": _Function((), NUMBER),
    "local-name": _Function((_single_node,), STRING, optional=1),
    "namespace-uri": _Function((_single_node,), STRING, optional=1),
    **{name: _Function((_stringish,), STRING) for name in _CASE_FUNCTIONS},
}


class _Parser(XPath1Parser):
    """XPath 1.0's grammar plus the 3.1 functions of ``_CASE_FUNCTIONS``, for the
    static analysis only (this parser never evaluates)."""

    symbol_table = {**XPath1Parser.symbol_table}  # noqa: RUF012 (elementpath's own pattern)


def _not_evaluated(self: Any, context: Any = None) -> Any:
    raise self.missing_context()  # keeps the parser from folding constants


for _name in _CASE_FUNCTIONS:
    _Parser.function(_name, nargs=1).evaluate = _not_evaluated  # type: ignore[method-assign]


# -- the walk ----------------------------------------------------------------------------


def _children(token: Any) -> list[Any]:
    return list(token)


def _node_test(token: Any) -> Static:
    """A node test on the child (or self/descendant) axis."""
    symbol = token.symbol
    if symbol in ("(name)", ":") or (symbol == "*" and len(token) == 0):
        return ELEMENTS
    if token.label == "kind test" and symbol in ("text", "node") and len(token) == 0:
        return Static("nodes")
    raise NotFast(f"node test {symbol!r}")


def _attribute_test(token: Any) -> Static:
    if token.symbol in ("(name)", ":"):
        return Static("nodes", single=True)
    if token.symbol == "*" and len(token) == 0:
        return Static("nodes")
    raise NotFast(f"attribute test {token.symbol!r}")


def _function(token: Any, context_elements: bool) -> Static:
    spec = _FUNCTIONS.get(token.symbol)
    if spec is None:
        raise NotFast(f"function {token.symbol}()")
    args = [_type(arg, context_elements) for arg in _children(token)]
    count = len(spec.args)
    if spec.variadic:
        ok = len(args) >= count
        checks = [*spec.args, *[spec.args[-1]] * (len(args) - count)]
    else:
        ok = count - spec.optional <= len(args) <= count
        checks = list(spec.args[: len(args)])
    if not ok or not all(check(arg) for check, arg in zip(checks, args, strict=True)):
        raise NotFast(f"arguments of {token.symbol}()")
    return spec.result


def _comparison(token: Any, left: Static, right: Static) -> Static:
    if token.symbol in ("=", "!="):
        textual = {"string", "nodes"}
        if left.kind in textual and right.kind in textual:
            return BOOLEAN
        if left.kind == right.kind and left.kind in ("number", "boolean"):
            return BOOLEAN
        raise NotFast(f"{left.kind} {token.symbol} {right.kind}")
    if left.kind == right.kind == "number":
        return BOOLEAN
    raise NotFast(f"{left.kind} {token.symbol} {right.kind}")


def _type(token: Any, context_elements: bool) -> Static:
    symbol = token.symbol
    arity = len(token)
    label = token.label
    if symbol == "(string)":
        return STRING
    if symbol == "(integer)":
        if abs(int(token.value)) >= _MAX_INTEGER:
            raise NotFast("large integer")
        return NUMBER
    if symbol in ("(name)", ":") or (symbol == "*" and arity == 0):
        return ELEMENTS
    if symbol == ".":
        return Static("nodes", single=True, elements=context_elements)
    if symbol == "$":
        if token.value in _SINGLE_VARIABLES:
            return Static("nodes", single=True, elements=True)
        if token.value in _SEQUENCE_VARIABLES:
            return ELEMENTS
        raise NotFast(f"variable ${token.value}")
    if symbol == "@":
        return _attribute_test(token[0])
    if label == "axis":
        if symbol not in _FORWARD_AXES:
            raise NotFast(f"{symbol} axis")
        if symbol == "attribute":
            return _attribute_test(token[0])
        test = _node_test(token[0])
        if symbol == "self":
            return Static("nodes", single=True, elements=test.elements)
        return Static("nodes", elements=test.elements)
    if label == "kind test":
        return _node_test(token)
    if symbol == "(" and arity == 1:
        return _type(token[0], context_elements)
    if symbol in ("/", "//") and arity == 2:
        left = _type(token[0], context_elements)
        right = _type(token[1], left.elements)
        if left.kind != "nodes" or right.kind != "nodes":
            raise NotFast("path over non-nodes")
        single = symbol == "/" and left.single and right.single
        return Static("nodes", single=single, elements=right.elements)
    if symbol == "[" and arity == 2:
        base = _type(token[0], context_elements)
        if base.kind != "nodes":
            raise NotFast("predicate on non-nodes")
        predicate = _type(token[1], base.elements)
        single = base.single or predicate.kind == "number"
        return Static("nodes", single=single, elements=base.elements)
    if symbol == "|" and arity == 2:
        left, right = (_type(t, context_elements) for t in token)
        if left.kind != "nodes" or right.kind != "nodes":
            raise NotFast("union of non-nodes")
        return Static("nodes", elements=left.elements and right.elements)
    if symbol in ("and", "or") and arity == 2:
        for child in token:
            _type(child, context_elements)
        return BOOLEAN
    if symbol in ("=", "!=", "<", "<=", ">", ">=") and arity == 2:
        left, right = (_type(t, context_elements) for t in token)
        return _comparison(token, left, right)
    if symbol in ("+", "-") and arity == 2:
        left, right = (_type(t, context_elements) for t in token)
        if left.kind == right.kind == "number":
            return NUMBER
        raise NotFast(f"arithmetic on {left.kind} and {right.kind}")
    if label == "function":
        return _function(token, context_elements)
    raise NotFast(f"{label} {symbol!r}")


def _result_ok(static: Static, kind: str) -> bool:
    if kind == "boolean":
        return True
    # accessors and split functions: elements, strings and booleans are shaped alike
    if static.kind == "nodes":
        return static.elements
    return static.kind in ("string", "boolean")


def why_not_fast(
    expr: str,
    kind: str = "boolean",
    namespaces: Namespaces = (),
    variables: tuple[str, ...] = ITEM_VARIABLES,
) -> str | None:
    """None if ``expr`` takes the lxml fast path for ``kind``, else the reason it does not."""
    kind = _ALIASES.get(kind, kind)
    if kind not in RESULT_KINDS:
        raise ValueError(f"unknown result kind {kind!r} (expected one of {RESULT_KINDS})")
    ns = namespace_map(namespaces)
    try:
        token = _Parser(namespaces=ns).parse(expr)
    except elementpath.ElementPathError as exc:
        return f"not XPath 1.0: {exc}"
    try:
        static = _type(token, True)
    except NotFast as exc:
        return str(exc)
    if not _result_ok(static, kind):
        return f"a {static.kind} result is shaped differently as a {kind} result"
    try:
        etree.XPath(expr, namespaces=ns, extensions=_extensions(expr))
    except etree.XPathError as exc:  # e.g. 3.1 string escapes ('it''s')
        return f"lxml does not compile it: {exc}"
    return None


@lru_cache(maxsize=1024)
def uses_fast_path(
    expr: str,
    kind: str = "boolean",
    namespaces: Namespaces = (),
    variables: tuple[str, ...] = ITEM_VARIABLES,
) -> bool:
    """True if ``expr`` runs on lxml's XPath 1.0 engine for a ``kind`` result.

    ``kind`` is ``boolean`` (observer), ``nodes`` (accessor) or ``string`` (split);
    ``observer``, ``accessor`` and ``split`` are accepted too.
    """
    return why_not_fast(expr, kind, namespaces, variables) is None


def _string_value(arg: Any) -> str:
    """An extension function's argument as the string XPath 1.0 ``string()`` gives
    (the analysis lets through a string or at most one node)."""
    if isinstance(arg, str):
        return arg
    if not arg:
        return ""
    node = arg[0]
    if isinstance(node, str):
        return node
    if len(node) == 0:  # no child (comments, instructions and entities count): its text
        return node.text or ""
    return str(lxml_xpath("string()")(node))


def _extension(function: Callable[[str], str]) -> Callable[[Any, Any], str]:
    def call(_context: Any, arg: Any) -> str:
        return function(_string_value(arg))

    return call


_EXTENSIONS = {(None, name): _extension(fn) for name, fn in _CASE_FUNCTIONS.items()}


def _extensions(expr: str) -> dict[tuple[None, str], Callable[[Any, Any], str]] | None:
    """The extension functions ``expr`` may call (lxml registers those it is given on
    every evaluation, so an expression that calls none gets none)."""
    used = {key: fn for key, fn in _EXTENSIONS.items() if key[1] in expr}
    return used or None


_compiled = threading.local()


def lxml_xpath(expr: str, namespaces: Namespaces = ()) -> etree.XPath:
    """``expr`` compiled by lxml, once per thread (``smart_strings`` off: plain str)."""
    cache: dict[tuple[str, Namespaces], etree.XPath] | None = getattr(_compiled, "cache", None)
    if cache is None:
        cache = _compiled.cache = {}
    key = (expr, namespaces)
    compiled = cache.get(key)
    if compiled is None:
        if len(cache) > 1024:
            cache.clear()
        compiled = cache[key] = etree.XPath(
            expr,
            namespaces=namespace_map(namespaces),
            smart_strings=False,
            extensions=_extensions(expr),
        )
    return compiled


def fast_xpath(
    expr: str, kind: str, namespaces: Namespaces = (), variables: tuple[str, ...] = ITEM_VARIABLES
) -> etree.XPath | None:
    """The lxml XPath to run ``expr`` with, or None when it must run on elementpath.

    For a ``boolean`` result it is ``boolean(EXPR)``: lxml then returns a bool without
    building Python objects for the nodes (XPath 1.0 ``boolean()`` is the effective
    boolean value of every result the fast path accepts).
    """
    if uses_fast_path(expr, kind, namespaces, variables):
        kind = _ALIASES.get(kind, kind)
        return lxml_xpath(f"boolean({expr})" if kind == "boolean" else expr, namespaces)
    return None
