"""The lxml fast path gives exactly the results of elementpath, or is not taken.

``tests/data/xmlfn/items.xml`` is a corpus of items full of edge cases and
``expressions.txt`` a corpus of expressions.  For every expression and every result
kind (observer, accessor, split) the fast path accepts, the batch functions give the
same result on every item with the fast path on and off.  ``differ.txt`` lists XPath
1.0 expressions that lxml evaluates differently: the fast path must refuse each, and
the test shows that lxml really gives another result on some item.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lxml import etree

from roses_app.xmlfn import filter_batch, map_batch, split_batch, uses_fast_path, why_not_fast
from roses_app.xmlfn.fastpath import lxml_xpath
from roses_app.xmlfn.xpath import effective_boolean, parse, split_name, to_item

DATA = Path(__file__).resolve().parent / "data" / "xmlfn"
KINDS = ("boolean", "nodes", "string")
BATCH: dict[str, Callable[..., list[Any]]] = {
    "boolean": filter_batch,
    "nodes": map_batch,
    "string": split_batch,
}


def _corpus() -> list[str]:
    root = etree.parse(str(DATA / "items.xml")).getroot()
    return [etree.tostring(item, encoding="unicode", with_tail=False) for item in root]


def _lines(name: str) -> list[str]:
    lines = (DATA / name).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


ITEMS = _corpus()
EXPRESSIONS = _lines("expressions.txt")
DIFFER = [tuple(line.split(": ", 1)) for line in _lines("differ.txt")]


def _quiet(xml: str | None, exc: Exception) -> None:
    """Errors are expected here: an erroring item is dropped by both paths."""


def _results(expr: str, kind: str, fast: bool) -> list[Any]:
    return BATCH[kind](expr, (), ITEMS, _quiet, fast=fast)


def _lxml_result(expr: str, kind: str, xml: str) -> Any:
    """What the fast path would give for ``xml`` if it took ``expr`` (errors drop)."""
    item = parse(xml)
    try:
        value = lxml_xpath(expr)(item, i=item)
    except etree.XPathError:
        return None if kind != "boolean" else False
    if kind == "boolean":
        return effective_boolean(value)
    if kind == "nodes":
        new = to_item(value)
        return None if new is None else etree.tostring(new, encoding="unicode")
    return split_name(value)


def test_the_corpora_are_big_enough() -> None:
    assert len(ITEMS) >= 15
    assert len(EXPRESSIONS) >= 100
    assert len(DIFFER) >= 20


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_fast_path_agrees_with_elementpath_on_every_item(expr: str) -> None:
    for kind in KINDS:
        if not uses_fast_path(expr, kind):
            continue
        fast = _results(expr, kind, True)
        slow = _results(expr, kind, False)
        # the fast results are lxml's, not elementpath's under another name
        assert fast == [_lxml_result(expr, kind, xml) for xml in ITEMS], (expr, kind)
        for xml, f, s in zip(ITEMS, fast, slow, strict=True):
            assert f == s, f"{kind} {expr!r} on {xml}: lxml {f!r}, elementpath {s!r}"


def test_a_good_share_of_the_corpus_takes_the_fast_path() -> None:
    accepted = {kind: [e for e in EXPRESSIONS if uses_fast_path(e, kind)] for kind in KINDS}
    assert len(accepted["boolean"]) >= 60
    assert len(accepted["nodes"]) >= 25
    assert len(accepted["string"]) >= 25


@pytest.mark.parametrize(("kind", "expr"), DIFFER)
def test_expressions_lxml_gets_wrong_do_not_take_the_fast_path(kind: str, expr: str) -> None:
    assert not uses_fast_path(expr, kind), why_not_fast(expr, kind)
    lxml_says = [_lxml_result(expr, kind, xml) for xml in ITEMS]
    elementpath_says = _results(expr, kind, False)
    assert lxml_says != elementpath_says, f"{expr!r} gives the same on every item"


@pytest.mark.parametrize(
    ("expr", "kind"),
    [
        ("contains(title[1], 'volcano')", "boolean"),
        ("category = 'iceland'", "boolean"),
        ("title[contains(., 'Volcano')] or category = 'volcano'", "boolean"),
        ("count(category) > 1", "boolean"),
        ("dc:creator", "nodes"),
        (".", "nodes"),
        ("title | link", "nodes"),
        ("string(category[1])", "string"),
        ("contains(lower-case(title[1]), 'volcano')", "boolean"),
        ("lower-case(category[1])", "string"),
        ("guid/@isPermaLink = 'false'", "boolean"),
        ("$i/title", "nodes"),
    ],
)
def test_common_expressions_take_the_fast_path(expr: str, kind: str) -> None:
    assert uses_fast_path(expr, kind), why_not_fast(expr, kind)


@pytest.mark.parametrize(
    ("expr", "kind", "reason"),
    [
        ("lower-case(title) = 'x'", "boolean", "arguments of lower-case"),
        ("lower-case(true()) = 'true'", "boolean", "arguments of lower-case"),
        ("(title, link)", "nodes", "not XPath 1.0"),
        ("if (title) then 'a' else 'b'", "string", "not XPath 1.0"),
        ("for $c in category return $c", "nodes", "not XPath 1.0"),
        ("title eq 'x'", "boolean", "not XPath 1.0"),
        ("'it''s' = title", "boolean", "not XPath 1.0"),
        ("round(1.5) = 2", "boolean", "round"),
        ("substring(title[1], 1, 3) = 'Vol'", "boolean", "substring"),
        ("1 div 2 > 0", "boolean", "div"),
        ("1.5 > count(a)", "boolean", "decimal"),
        ("count(category)", "nodes", "number"),
        ("../title", "boolean", ".."),
        ("/item", "boolean", "absolute"),
        ("//title", "boolean", "absolute"),
        ("preceding-sibling::x", "boolean", "axis"),
        ("name(*[1]) = 'dc:creator'", "boolean", "name"),
        ("@href", "nodes", "attribute result"),
        ("title/text()", "string", "text result"),
        ("$other", "boolean", "variable"),
        ("price * 2 > 1", "boolean", "multiplication"),
        ("-count(a) < 0", "boolean", "unary minus"),
    ],
)
def test_expressions_outside_the_whitelist_do_not(expr: str, kind: str, reason: str) -> None:
    assert not uses_fast_path(expr, kind), reason


def test_observer_accessor_and_split_aliases() -> None:
    assert uses_fast_path("title", "observer")
    assert uses_fast_path("title", "accessor")
    assert uses_fast_path("string(title[1])", "split")
    with pytest.raises(ValueError, match="unknown result kind"):
        uses_fast_path("title", "number")


def test_two_item_predicates_agree_on_pairs() -> None:
    from roses_app.xmlfn import observe2_batch

    pairs = [(a, b) for a in ITEMS[:8] for b in ITEMS[:8]] + [(ITEMS[0], None), (None, ITEMS[0])]
    for expr in (
        "$i1/link = $i2/link",
        "$i1/category = $i2/category",
        "count($i1/category) > count($i2/category)",
        "$i1/title[1] = $i2/title[1] and $i2",
        "lower-case($i1/title[1]) = lower-case($i2/title[1])",
    ):
        fast = observe2_batch(expr, (), pairs, _quiet)
        slow = observe2_batch(expr, (), pairs, _quiet, fast=False)
        assert fast == slow, expr
        assert fast[-1] is False  # no $i1: λ
