"""The seed's item functions: observers, accessors and split functions in XPath 3.1.

Expressions are compiled once per process (``functools.lru_cache``) and evaluated with
elementpath against lxml elements.  The context item is the ``<item>`` element and
``$i`` is bound to it.  Batch helpers take lists of serialized items so a Spark
worker makes one call per Arrow batch, not one per row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import elementpath
from elementpath.xpath31 import XPath31Parser
from lxml import etree

from roses_app.errors import EvaluationError, ExpressionError
from roses_app.items import FEED_NAMESPACES, parse_item, serialize

log = logging.getLogger(__name__)

Namespaces = tuple[tuple[str, str], ...]


def namespace_map(extra: Namespaces = ()) -> dict[str, str]:
    """The predeclared feed namespaces plus the ones feeds.yaml declares."""
    merged = dict(FEED_NAMESPACES)
    merged.update(dict(extra))
    return merged


@dataclass(frozen=True)
class CompiledXPath:
    expr: str
    parser: XPath31Parser
    root_token: Any

    def evaluate(self, item: etree._Element, **variables: Any) -> Any:
        variables.setdefault("i", item)
        context = elementpath.XPathContext(item, variables=variables)
        try:
            # select_results() yields lxml elements and atomic values, not node wrappers
            return list(self.root_token.select_results(context))
        except elementpath.ElementPathError as exc:
            raise EvaluationError(f"XPath {self.expr!r} failed: {exc}") from exc

    def boolean(self, item: etree._Element, **variables: Any) -> bool:
        variables.setdefault("i", item)
        context = elementpath.XPathContext(item, variables=variables)
        try:
            return bool(self.root_token.boolean_value(self.root_token.evaluate(context)))
        except elementpath.ElementPathError as exc:
            raise EvaluationError(f"XPath {self.expr!r} failed: {exc}") from exc


@lru_cache(maxsize=1024)
def compile_xpath(
    expr: str, namespaces: Namespaces = (), variables: tuple[str, ...] = ("i",)
) -> CompiledXPath:
    """Compile an XPath 3.1 expression; raise ExpressionError with the parser's message."""
    parser = XPath31Parser(
        namespaces=namespace_map(namespaces),
        variable_types={name: "item()*" for name in variables},
    )
    try:
        token = parser.parse(expr)
    except elementpath.ElementPathError as exc:
        raise ExpressionError(f"XPath syntax error in {expr!r}: {exc}") from exc
    return CompiledXPath(expr, parser, token)


def check_xpath(
    expr: str, namespaces: Namespaces = (), variables: tuple[str, ...] = ("i",)
) -> None:
    """Raise ExpressionError if ``expr`` does not compile."""
    compile_xpath(expr, namespaces, variables)


def _text_of(value: Any) -> str:
    if isinstance(value, etree._Element):
        return "".join(value.itertext())
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def to_item(result: Any) -> etree._Element | None:
    """Turn an accessor result into an item; the empty sequence is λ (None).

    One ``<item>`` element is kept as it is; anything else is wrapped in a new
    ``<item>``: elements are copied, atomic values become text.
    """
    values = list(result) if isinstance(result, list) else [result]
    values = [v for v in values if v is not None]
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
    return etree.fromstring(etree.tostring(element))


def split_name(result: Any) -> str | None:
    """The output name a split function returns: the string value, or None if empty."""
    values = list(result) if isinstance(result, list) else [result]
    values = [v for v in values if v is not None]
    if not values:
        return None
    name = " ".join(_text_of(v) for v in values).strip()
    return name or None


def _each(
    xmls: Iterable[str | None],
    fn: Callable[[etree._Element], Any],
    what: str,
) -> list[Any]:
    """Apply ``fn`` to each parsed item; a failing item yields None and is logged."""
    out: list[Any] = []
    for xml in xmls:
        if xml is None:
            out.append(None)
            continue
        try:
            out.append(fn(parse_item(xml)))
        except (EvaluationError, etree.XMLSyntaxError) as exc:
            log.warning("%s dropped an item: %s", what, exc)
            out.append(None)
    return out


def filter_batch(expr: str, namespaces: Namespaces, xmls: Sequence[str | None]) -> list[bool]:
    """Observer over a batch: True keeps the item; errors drop it (False)."""
    compiled = compile_xpath(expr, namespaces)
    return [bool(v) for v in _each(xmls, compiled.boolean, f"filter {expr!r}")]


def map_batch(expr: str, namespaces: Namespaces, xmls: Sequence[str | None]) -> list[str | None]:
    """Accessor over a batch: the new item, or None when the result is empty or fails."""
    compiled = compile_xpath(expr, namespaces)

    def apply(item: etree._Element) -> str | None:
        new = to_item(compiled.evaluate(item))
        return None if new is None else serialize(new)

    return list(_each(xmls, apply, f"map {expr!r}"))


def split_batch(expr: str, namespaces: Namespaces, xmls: Sequence[str | None]) -> list[str | None]:
    """Split function over a batch: the output name, or None (item goes nowhere)."""
    compiled = compile_xpath(expr, namespaces)
    return list(_each(xmls, lambda item: split_name(compiled.evaluate(item)), f"split {expr!r}"))
