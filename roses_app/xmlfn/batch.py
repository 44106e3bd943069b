"""Observers, accessors and split functions over whole batches of serialized items.

A Spark worker (or the reference evaluator) makes one call per batch, not one per
row.  Each function picks its engine once per expression: lxml's XPath 1.0 when
:mod:`roses_app.xmlfn.fastpath` proves the result is the same, elementpath's XPath
3.1 otherwise.

Errors: an expression that does not compile raises ExpressionError (feeds.yaml is
checked before anything runs, so this is a bug, not data).  A failure on one item
(malformed XML, a dynamic error) never escapes: the item is dropped (filter: False;
map and split: None) and ``on_error(item_xml, exception)`` is called; the default
hook logs a warning.  A ``None`` input (λ) gives False/None without calling the hook.
After :data:`~roses_app.xmlfn.budget.STRIKES` items past the time limit, the batch's
other items are dropped unevaluated (:class:`~roses_app.xmlfn.budget.Strikes`).
``fast=False`` turns the lxml fast path off (tests and benchmarks compare the two).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from lxml import etree

from roses_app.xmlfn import budget
from roses_app.xmlfn.fastpath import fast_xpath
from roses_app.xmlfn.xpath import (
    ITEM_VARIABLES,
    PAIR_VARIABLES,
    Namespaces,
    compile_xpath,
    effective_boolean,
    parse,
    split_name,
    thread_parser,
    to_item,
)

log = logging.getLogger(__name__)

OnError = Callable[[str | None, Exception], None]
T = TypeVar("T")


def logging_hook(what: str) -> OnError:
    """The default error hook: a warning naming the function and the item's guid."""

    def hook(xml: str | None, exc: Exception) -> None:
        log.warning("%s dropped an item%s: %s", what, guid_note(xml), exc)

    return hook


def guid_note(xml: str | None) -> str:
    """`` (guid 'x')`` for a log line about an item, or why there is none to show."""
    if not xml:
        return ""
    try:
        element = parse(xml)
    except (etree.XMLSyntaxError, ValueError):
        return " (not well-formed XML)"
    guid = (element.findtext("guid") or element.findtext("link") or "").strip()
    return f" (guid {guid!r})" if guid else ""


def report(on_error: OnError | None, what: str, xml: str | None, exc: Exception) -> None:
    """Call the error hook; a hook that fails is logged, never raised."""
    hook = on_error or logging_hook(what)
    try:
        hook(xml, exc)
    except Exception:
        log.exception("the error hook of %s failed", what)


def each(
    xmls: Sequence[str | None],
    fn: Callable[[etree._Element], T],
    empty: T,
    what: str,
    on_error: OnError | None,
) -> list[T]:
    """``fn`` of each parsed item; a None input or a failing item gives ``empty``."""
    out: list[T] = []
    append = out.append
    parser = thread_parser()
    fromstring = etree.fromstring
    strikes = budget.Strikes()
    with budget.watching():  # an item past settings.limits.item_seconds is dropped
        for xml in xmls:
            if xml is None:
                append(empty)
                continue
            try:
                strikes.check()
                try:
                    item = fromstring(xml, parser)
                except ValueError:  # a str with an encoding declaration
                    item = parse(xml, parser)
                append(fn(item))
            except Exception as exc:
                strikes.record(exc)
                report(on_error, what, xml, exc)
                append(empty)
    return out


def _selector(
    expr: str, kind: str, namespaces: Namespaces, fast: bool
) -> Callable[[etree._Element], Any] | None:
    """item -> lxml's raw result, when ``expr`` takes the fast path (and ``fast``)."""
    xpath = fast_xpath(expr, kind, namespaces, ITEM_VARIABLES) if fast else None
    if xpath is None:
        return None
    if "$" not in expr:  # no variable: spare lxml the keyword arguments
        return xpath

    def select(item: etree._Element) -> Any:
        return xpath(item, i=item)

    return select


def _serialize(element: etree._Element | None) -> str | None:
    return None if element is None else etree.tostring(element, encoding="unicode")


def observer_fn(
    expr: str, namespaces: Namespaces, *, fast: bool = True
) -> Callable[[etree._Element], bool]:
    """The observer as a function of a parsed item (it may raise on a bad item)."""
    select = _selector(expr, "boolean", namespaces, fast)
    if select is None:
        return compile_xpath(expr, namespaces).boolean
    lxml_select = select

    def observe(item: etree._Element) -> bool:
        return effective_boolean(lxml_select(item))

    return observe


def accessor_fn(
    expr: str, namespaces: Namespaces, *, fast: bool = True
) -> Callable[[etree._Element], etree._Element | None]:
    """The accessor as a function of a parsed item: the new item, or None (λ)."""
    select = _selector(expr, "nodes", namespaces, fast) or compile_xpath(expr, namespaces).evaluate

    def access(item: etree._Element) -> etree._Element | None:
        return to_item(select(item))

    return access


def splitter_fn(
    expr: str, namespaces: Namespaces, *, fast: bool = True
) -> Callable[[etree._Element], str | None]:
    """The split function of a parsed item: the output name, or None (nowhere)."""
    select = _selector(expr, "string", namespaces, fast) or compile_xpath(expr, namespaces).evaluate

    def name(item: etree._Element) -> str | None:
        return split_name(select(item))

    return name


def filter_batch(
    expr: str,
    namespaces: Namespaces,
    xmls: Sequence[str | None],
    on_error: OnError | None = None,
    *,
    fast: bool = True,
) -> list[bool]:
    """Observer over a batch: True keeps the item; a failing item is dropped (False)."""
    compile_xpath(expr, namespaces)  # a compile error is raised, never per item
    fn = observer_fn(expr, namespaces, fast=fast)
    return each(xmls, fn, False, f"filter {expr!r}", on_error)


def map_batch(
    expr: str,
    namespaces: Namespaces,
    xmls: Sequence[str | None],
    on_error: OnError | None = None,
    *,
    fast: bool = True,
) -> list[str | None]:
    """Accessor over a batch: the new item, or None when the result is empty or fails."""
    compile_xpath(expr, namespaces)
    access = accessor_fn(expr, namespaces, fast=fast)

    def apply(item: etree._Element) -> str | None:
        return _serialize(access(item))

    return each(xmls, apply, None, f"map {expr!r}", on_error)


def split_batch(
    expr: str,
    namespaces: Namespaces,
    xmls: Sequence[str | None],
    on_error: OnError | None = None,
    *,
    fast: bool = True,
) -> list[str | None]:
    """Split function over a batch: the output name, or None (the item goes nowhere)."""
    compile_xpath(expr, namespaces)
    return each(xmls, splitter_fn(expr, namespaces, fast=fast), None, f"split {expr!r}", on_error)


def observe2_batch(
    expr: str,
    namespaces: Namespaces,
    pairs: Sequence[tuple[str | None, str | None]],
    on_error: OnError | None = None,
    *,
    fast: bool = True,
) -> list[bool]:
    """Two-item observer (join and semijoin predicates) over a batch of pairs.

    ``$i1`` and ``$i2`` are the two items; the context item is ``$i1``.  A None
    ``$i1`` gives False; a None ``$i2`` is the empty sequence.  A failing pair gives
    False and ``on_error`` gets the XML of the item that does not parse, else ``$i1``'s.
    """
    compiled = compile_xpath(expr, namespaces, PAIR_VARIABLES)
    xpath = fast_xpath(expr, "boolean", namespaces, PAIR_VARIABLES) if fast else None
    what = f"predicate {expr!r}"
    out: list[bool] = []
    with budget.watching():
        _observe2_each(pairs, compiled, xpath, what, on_error, out)
    return out


def _observe2_each(
    pairs: Sequence[tuple[str | None, str | None]],
    compiled: Any,
    xpath: Any,
    what: str,
    on_error: OnError | None,
    out: list[bool],
) -> None:
    strikes = budget.Strikes()
    for xml1, xml2 in pairs:
        if xml1 is None:
            out.append(False)
            continue
        failing: str | None = xml1
        try:
            strikes.check()
            first = parse(xml1)
            failing = xml2
            second: Any = [] if xml2 is None else parse(xml2)
            failing = xml1
            if xpath is not None:
                out.append(effective_boolean(xpath(first, i1=first, i2=second)))
            else:
                out.append(compiled.boolean(first, i1=first, i2=second))
        except Exception as exc:
            strikes.record(exc)
            report(on_error, what, failing, exc)
            out.append(False)


__all__ = [
    "ITEM_VARIABLES",
    "OnError",
    "accessor_fn",
    "filter_batch",
    "map_batch",
    "observe2_batch",
    "observer_fn",
    "split_batch",
    "splitter_fn",
]
