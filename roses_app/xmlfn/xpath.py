"""XPath 3.1 item functions through elementpath: compiling, evaluating, shaping results.

Expressions are compiled once per process (``functools.lru_cache``) and evaluated
against lxml elements.  The context item is the ``<item>`` element; ``$i`` is bound to
it (``$i1``/``$i2`` for the two items of a join predicate, ``$items`` to a sequence for
reducers).  The predeclared namespaces are the feed ones (dc, content, atom, media,
itunes) plus ``settings.namespaces`` of feeds.yaml.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import elementpath
from elementpath.xpath31 import XPath31Parser
from lxml import etree

from roses_app.errors import EvaluationError, ExpressionError, ItemMemoryError, ItemTimeout
from roses_app.items import FEED_NAMESPACES, safe_parser
from roses_app.xmlfn import budget

Namespaces = tuple[tuple[str, str], ...]

# matches, replace and tokenize bounded by the item's time, ranges by their length
budget.install_regex()
budget.install_range_bound()

CODEPOINT_COLLATION = "http://www.w3.org/2005/xpath-functions/collation/codepoint"

# The variables an expression may use, by the kind of function it is.
ITEM_VARIABLES: tuple[str, ...] = ("i",)
PAIR_VARIABLES: tuple[str, ...] = ("i1", "i2")
SEQUENCE_VARIABLES: tuple[str, ...] = ("items",)


def namespace_map(extra: Namespaces = ()) -> dict[str, str]:
    """The predeclared feed namespaces plus the ones feeds.yaml declares."""
    merged = dict(FEED_NAMESPACES)
    merged.update(dict(extra))
    return merged


# -- parsing items -------------------------------------------------------------------

_local = threading.local()


def thread_parser() -> etree.XMLParser:
    """This thread's safe parser (no DTD, no network); lxml parsers are not shared."""
    parser = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = safe_parser()
    return parser


def parse(xml: str | bytes, parser: etree.XMLParser | None = None) -> etree._Element:
    """Parse one serialized item with a safe parser (this thread's by default).

    A ``str`` is parsed as it is (no UTF-8 round trip); one with an encoding
    declaration, which lxml refuses as ``str``, is encoded first.  Raises
    ``lxml.etree.XMLSyntaxError`` if the item is not well-formed.
    """
    if parser is None:
        parser = thread_parser()
    if isinstance(xml, str):
        try:
            return etree.fromstring(xml, parser)
        except ValueError:
            xml = xml.encode("utf-8")
    return etree.fromstring(xml, parser)


# -- compiled expressions --------------------------------------------------------------


@dataclass(frozen=True)
class CompiledXPath:
    """An XPath 3.1 expression parsed by elementpath, ready to evaluate on items."""

    expr: str
    parser: XPath31Parser
    root_token: Any

    def _context(self, item: etree._Element | None, variables: dict[str, Any]) -> Any:
        if item is not None:
            variables.setdefault("i", item)
        return elementpath.XPathContext(item, variables=variables)

    def evaluate(self, item: etree._Element | None, **variables: Any) -> list[Any]:
        """The result as a list of lxml elements and atomic values."""
        outer = budget.arm()
        try:
            # select_results() yields lxml elements and atomic values, not node wrappers
            return list(self.root_token.select_results(self._context(item, variables)))
        except elementpath.ElementPathError as exc:
            raise EvaluationError(f"XPath {self.expr!r} failed: {exc}") from exc
        except (ItemTimeout, MemoryError) as exc:
            budget.disarm(outer)  # no tick may preempt the message naming the expression
            raise self._over_budget(exc) from exc
        finally:
            budget.disarm(outer)

    def boolean(self, item: etree._Element | None, **variables: Any) -> bool:
        """The effective boolean value of the result."""
        outer = budget.arm()
        try:
            token = self.root_token
            return bool(token.boolean_value(token.evaluate(self._context(item, variables))))
        except elementpath.ElementPathError as exc:
            raise EvaluationError(f"XPath {self.expr!r} failed: {exc}") from exc
        except (ItemTimeout, MemoryError) as exc:
            budget.disarm(outer)  # no tick may preempt the message naming the expression
            raise self._over_budget(exc) from exc
        finally:
            budget.disarm(outer)

    def _over_budget(self, exc: BaseException) -> EvaluationError:
        """What an evaluation stopped by the time or memory limit raises, naming the
        expression."""
        if isinstance(exc, ItemTimeout):
            return budget.timed_out(f"XPath {self.expr!r}")
        if isinstance(exc, ItemMemoryError):
            return ItemMemoryError(f"XPath {self.expr!r}: {exc}")
        return ItemMemoryError(
            f"XPath {self.expr!r} needed more memory than a worker may take on this item "
            "(settings.limits.worker_memory), so the item is dropped: make the expression "
            "build smaller strings and sequences, or raise the limit"
        )


@lru_cache(maxsize=1024)
def compile_xpath(
    expr: str, namespaces: Namespaces = (), variables: tuple[str, ...] = ITEM_VARIABLES
) -> CompiledXPath:
    """Compile an XPath 3.1 expression; raise ExpressionError with the parser's message.

    ``variables`` are the names the expression may refer to (``i``; ``i1``, ``i2``;
    ``items``); any other variable is a static error (XPST0008).
    """
    parser = _parser(namespaces, variables)
    return CompiledXPath(expr, parser, _parsed(parser, expr, variables))


def syntax_tree(
    expr: str, namespaces: Namespaces = (), variables: tuple[str, ...] = ITEM_VARIABLES
) -> tuple[Any, XPath31Parser]:
    """The parsed expression (root token, parser) to inspect, not to keep: it comes
    from this thread's parser for ``namespaces`` and ``variables``, reused for the
    next expression.  Building a parser costs as much as parsing a short observer,
    and a config or a presearcher has thousands.  Errors as :func:`compile_xpath`."""
    parsers: dict[tuple[Namespaces, tuple[str, ...]], XPath31Parser] = _local.__dict__.setdefault(
        "xpath_parsers", {}
    )
    parser = parsers.get((namespaces, variables))
    if parser is None:
        parser = parsers[namespaces, variables] = _parser(namespaces, variables)
    return _parsed(parser, expr, variables), parser


def _parsed(parser: XPath31Parser, expr: str, variables: tuple[str, ...]) -> Any:
    # elementpath evaluates what needs no item as it parses: its regexes have the
    # item's time limit, and a range too long to build fails it here
    outer = budget.arm()
    try:
        token = parser.parse(expr)
    except elementpath.ElementPathError as exc:
        raise ExpressionError(f"XPath syntax error in {expr!r}: {exc}") from exc
    except (EvaluationError, MemoryError) as exc:
        raise ExpressionError(f"XPath {expr!r} cannot be evaluated: {exc}") from exc
    finally:
        budget.disarm(outer)
    unknown = sorted(_free_variables(token) - set(variables))
    if unknown:
        known = ", ".join(f"${name}" for name in variables) or "none"
        detail = f"[err:XPST0008] unknown variable ${unknown[0]} (variables here: {known})"
        # the cause carries the bare message, as elementpath's errors do
        raise ExpressionError(f"XPath error in {expr!r}: {detail}") from ExpressionError(detail)
    return token


def _parser(namespaces: Namespaces, variables: tuple[str, ...]) -> XPath31Parser:
    return XPath31Parser(
        namespaces=namespace_map(namespaces),
        variable_types={name: "item()*" for name in variables},
        # the standard default, whatever the process locale: elementpath would otherwise
        # take LC_COLLATE (and its locale collations hold a global lock)
        default_collation=CODEPOINT_COLLATION,
    )


def _free_variables(token: Any) -> set[str]:
    """Variables referred to and not bound in the expression (elementpath leaves them
    to run time).  Lenient: a name bound anywhere counts as bound everywhere."""
    bound: set[str] = set()
    refs: set[str] = set()

    def walk(t: Any) -> None:
        children = list(t)
        if t.symbol in ("for", "let", "some", "every") and t.label == "expression":
            for k in range(0, len(children) - 1, 2):
                if children[k].symbol == "$":
                    bound.add(children[k].value)
                walk(children[k + 1])
            if children:
                walk(children[-1])
        elif t.symbol == "function" and t.label == "inline function":
            bound.update(c.value for c in children if c.symbol == "$")
        elif t.symbol == "$":
            refs.add(t.value)
        else:
            for child in children:
                walk(child)

    walk(token)
    return refs - bound


def check_xpath(
    expr: str, namespaces: Namespaces = (), variables: tuple[str, ...] = ITEM_VARIABLES
) -> None:
    """Raise ExpressionError if ``expr`` does not compile."""
    syntax_tree(expr, namespaces, variables)


# -- shaping results ---------------------------------------------------------------------


def _text_of(value: Any) -> str:
    if isinstance(value, etree._Element):
        return "".join(value.itertext())
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _values(result: Any) -> list[Any]:
    values = list(result) if isinstance(result, list) else [result]
    return [v for v in values if v is not None]


def to_item(result: Any) -> etree._Element | None:
    """Turn an accessor result into an item; the empty sequence is λ (None).

    One ``<item>`` element is kept as it is; anything else is wrapped in a new
    ``<item>``: elements are copied, atomic values become text.
    """
    values = _values(result)
    if not values:
        return None
    if len(values) == 1 and isinstance(values[0], etree._Element) and values[0].tag == "item":
        return _copy(values[0])
    item = etree.Element("item")
    last: etree._Element | None = None
    for value in values:
        if isinstance(value, etree._Element):
            last = _copy(value)
            item.append(last)
        elif last is None:
            item.text = (item.text or "") + _text_of(value)
        else:
            last.tail = (last.tail or "") + _text_of(value)
    return item


def _copy(element: etree._Element) -> etree._Element:
    return etree.fromstring(etree.tostring(element, with_tail=False))


def split_name(result: Any) -> str | None:
    """The output name a split function returns: the string value, or None if empty."""
    if isinstance(result, str):  # what the fast path gives: no list to build
        return result.strip() or None
    values = _values(result)
    if not values:
        return None
    name = " ".join(_text_of(v) for v in values).strip()
    return name or None


def effective_boolean(value: Any) -> bool:
    """XPath 1.0 ``boolean()`` of an lxml XPath result (bool, float, str or node list)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        return value == value and value != 0.0  # NaN is false
    if isinstance(value, str | Sequence):
        return len(value) > 0
    return bool(value)
