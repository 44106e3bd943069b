"""The presearcher: necessary conditions of observers, and matching items with them.

Unit tests pin what ``condition`` understands and when a condition is exact; the
property tests check the one thing that matters, on random observers and items: the
observers accepted, plus the candidates that evaluate true, are exactly the observers
``filter_batch`` finds true (with the lxml fast path on and off).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from roses_app.xmlfn import filter_batch
from roses_app.xmlfn.presearch import (
    SEPARATOR,
    Presearcher,
    Term,
    analyse,
    condition,
    field_reader,
    irregular,
)
from roses_app.xmlfn.xpath import compile_xpath, parse

DC = "{http://purl.org/dc/elements/1.1/}creator"
NS = (("x", "urn:x"),)
DATA = Path(__file__).resolve().parent / "data" / "xmlfn"


def quiet(xml: str | None, exc: Exception) -> None:
    """The items observers fail on are expected here: no warning per item."""


def terms(*specs: tuple[str, bool, str]) -> frozenset[Term]:
    return frozenset(Term(*spec) for spec in specs)


# -- what condition() understands ----------------------------------------------------------

UNDERSTOOD = [
    ("contains(lower-case(string(.)), 'volcano')", terms((".", True, "volcano")), True),
    ("contains(., 'x')", terms((".", False, "x")), True),
    ("contains($i, 'x')", terms((".", False, "x")), True),
    ("starts-with(string(), 'Ab')", terms((".", False, "Ab")), True),
    ("ends-with(lower-case($i), 'z')", terms((".", True, "z")), True),
    ("contains(title, 'x')", terms(("title", False, "x")), False),
    ("contains($i/title, 'x')", terms(("title", False, "x")), False),
    ("contains(string(./title), 'x')", terms(("title", False, "x")), False),
    ("contains(lower-case(title[1]), 'x')", terms(("title[1]", True, "x")), True),
    ("title = 'a'", terms(("title", False, "a")), True),
    ("'a' = title", terms(("title", False, "a")), True),
    ("category = ('a', 'b')", terms(("category", False, "a"), ("category", False, "b")), True),
    ("lower-case(title) = 'a'", terms(("title", True, "a")), False),
    ("title eq 'a'", terms(("title", False, "a")), False),
    (". eq 'a'", terms((".", False, "a")), True),
    ("dc:creator = 'Ann'", terms((DC, False, "Ann")), True),
    ("Q{http://purl.org/dc/elements/1.1/}creator = 'Ann'", terms((DC, False, "Ann")), True),
    ("x:tag = 'v'", terms(("{urn:x}tag", False, "v")), True),
    ("enclosure/@url = 'u'", terms(("enclosure/@url", False, "u")), True),
    ("contains(enclosure/@url, 'mp3')", terms(("enclosure/@url", False, "mp3")), False),
    ("contains(@lang, 'en')", terms(("@lang", False, "en")), True),
    ("(category)[1] = 'c'", terms(("category[1]", False, "c")), True),
    ("fn:contains(., 'x')", terms((".", False, "x")), True),
    ("boolean((contains(., 'x')))", terms((".", False, "x")), True),
    # and: the more selective side (fewer terms, then a longer shortest term)
    ("contains(., 'ab') and contains(title, 'abc')", terms(("title", False, "abc")), False),
    ("category = ('a', 'b') and contains(., 'q')", terms((".", False, "q")), True),
    ("matches(., 'x') and contains(., 'y')", terms((".", False, "y")), False),
    ("not(contains(., 'x')) and contains(., 'y')", terms((".", False, "y")), True),
    ("contains(., 'x') or title = 'y'", terms((".", False, "x"), ("title", False, "y")), True),
    (
        "contains(., 'x') or contains(title, 'y')",
        terms((".", False, "x"), ("title", False, "y")),
        False,
    ),
    ("false()", frozenset(), True),
]


@pytest.mark.parametrize(("expr", "expected", "exact"), UNDERSTOOD)
def test_understood(expr: str, expected: frozenset[Term], exact: bool) -> None:
    found = condition(expr, NS)
    assert found is not None
    assert found.terms == expected
    assert found.exact is exact


NOT_UNDERSTOOD = [
    "not(contains(., 'x'))",
    "matches(title, 'x')",
    "string-length(title) > 3",
    "contains(., 'x') or matches(., 'y')",
    "contains(., '')",
    "title = ''",
    "title = ('a', '')",
    "contains(., 'x', 'http://www.w3.org/2005/xpath-functions/collation/codepoint')",
    "contains('abc', .)",
    "contains(upper-case(.), 'X')",
    "contains(lower-case(lower-case(.)), 'x')",
    "title != 'a'",
    "title eq ('a', 'b')",
    "*:title = 'a'",
    "a/b[1] = 'a'",
    "title[2] = 'a'",
    "//title = 'a'",
    "contains(../title, 'a')",
    "exists(title)",
    "true()",
]


@pytest.mark.parametrize("expr", NOT_UNDERSTOOD)
def test_not_understood(expr: str) -> None:
    assert condition(expr, NS) is None


def test_exact_without_condition() -> None:
    # no necessary condition, but the truth is known from the terms found
    assert analyse("not(contains(., 'x'))")[0] is None
    assert analyse("not(contains(., 'x'))")[1] is not None
    assert analyse("not(contains(title, 'x'))") == (None, None)


def test_default_namespace() -> None:
    found = condition("title = 'a' and @lang = 'en'", (("", "urn:d"),))
    assert found is not None
    assert found.terms in (terms(("{urn:d}title", False, "a")), terms(("@lang", False, "en")))
    both = condition("title = 'a' or @lang = 'en'", (("", "urn:d"),))
    assert both is not None
    assert both.terms == terms(("{urn:d}title", False, "a"), ("@lang", False, "en"))


# -- the assumptions the exact conditions rest on ----------------------------------------


@pytest.mark.parametrize("text", ["İstanbul", "STRASSE ß ẞ", "ΟΔΟΣ Σ ΣΑΣ.", "ǅ ﬃ Ω K"])
def test_lower_case_is_str_lower(text: str) -> None:
    item = etree.Element("item")
    etree.SubElement(item, "title").text = text
    [value] = compile_xpath("lower-case(title)").evaluate(item)
    assert value == text.lower()


STRING_VALUES = [
    # (item, whether elementpath's string values differ from lxml's)
    ("<item>a<title>T &amp; <![CDATA[<b>]]>&#931;</title>\n tail<b>x</b>w</item>", False),
    ("<item><title>one</title><title>two</title><category>c</category></item>", False),
    ("<item/>", False),
    ("<item>s<b>x<c>y</c>z</b>w<title>t<i>i<u>u</u></i>\n</title></item>", True),
    ("<item>a<!--c-->b<title>t<?pi x?>u</title></item>", True),
    ("<item>a<!--c--><title>t<!--c--></title></item>", False),
]


@pytest.mark.parametrize(("xml", "differ"), STRING_VALUES)
def test_string_values(xml: str, differ: bool) -> None:
    """lxml's string value comes first; elementpath's follows where it differs."""
    item = parse(xml)
    assert not irregular(item)
    [slow] = compile_xpath("string(.)").evaluate(item)
    fast = item.xpath("string()")
    values, ambiguous = field_reader(".")(item, True)
    assert values == ([fast, slow] if differ else [fast]) and ambiguous is differ
    assert field_reader(".")(item, False) == ([fast], False)
    titles, _ = field_reader("title")(item, True)
    lxml_titles = [title.xpath("string()") for title in item.findall("title")]
    assert titles[: len(lxml_titles)] == lxml_titles
    assert set(compile_xpath("title ! string(.)").evaluate(item)) <= set(titles)


def test_elementpath_order_quirk() -> None:
    """The two engines really disagree there; the presearcher leaves it to evaluation."""
    xml = "<item><b>x<c>y</c>z</b>w</item>"
    assert filter_batch("contains(., 'xw')", (), [xml], fast=False) == [True]
    assert filter_batch("contains(., 'xw')", (), [xml], fast=True) == [False]
    observers = {"xw": "contains(., 'xw')", "yz": "contains(., 'yz')", "q": "contains(., 'q')"}
    assert Presearcher(observers).match(parse(xml)) == (set(), {"xw", "yz"})


@pytest.mark.parametrize(
    "xml", ["<!--zz--><item>a</item>", '<!DOCTYPE item [<!ENTITY e "zz">]><item>a&e;b</item>']
)
def test_irregular_items_make_everything_a_candidate(xml: str) -> None:
    item = parse(xml)
    assert irregular(item)
    presearcher = Presearcher({"x": "contains(., 'zz')", "y": "contains(., 'q')"})
    assert presearcher.match(item) == (set(), {"x", "y"})


def test_match_and_stats() -> None:
    observers = {
        "volcano": "contains(lower-case(string(.)), 'volcano')",
        "sport": "category = 'sport'",
        "title": "contains(title, 'Lava')",
        "long": "string-length(title) > 3",
        "quiet": "not(contains(., 'x'))",
    }
    presearcher = Presearcher(observers)
    item = parse("<item><title>Lava</title><description>VOLCANO</description></item>")
    assert presearcher.match(item) == ({"volcano", "quiet"}, {"title", "long"})
    other = parse("<item><category>sports</category><category>sport</category>x</item>")
    assert presearcher.match(other) == ({"sport"}, {"long"})
    assert presearcher.stats() == {
        "observers": 5,
        "indexed": 3,
        "always_candidates": 2,
        "exact": 3,
        "terms": 4,
        "fields": 3,
    }


def test_anchors_respect_value_boundaries() -> None:
    presearcher = Presearcher(
        {"eq": "category = 'ab'", "start": "starts-with(., 'b')", "end": "ends-with(., 'a')"}
    )
    item = parse("<item><category>xab</category><category>aby</category><t>b</t></item>")
    assert presearcher.match(item) == (set(), set())
    item = parse("<item><category>xab</category><category>ab</category>a</item>")
    assert presearcher.match(item) == ({"eq", "end"}, set())


# -- equivalence with filter_batch -----------------------------------------------------------


def check_equivalent(observers: list[str], xmls: list[str]) -> None:
    """accepted ∪ (candidates that evaluate true) == the observers true on each item."""
    presearcher = Presearcher(dict(enumerate(observers)), NS)
    matches = [presearcher.match(parse(xml)) for xml in xmls]
    for accepted, open_ in matches:
        assert not accepted & open_
    for fast in (True, False):
        for key, expr in enumerate(observers):
            truth = filter_batch(expr, NS, xmls, quiet, fast=fast)
            candidates = [j for j, m in enumerate(matches) if key in m[1]]
            evaluated = filter_batch(expr, NS, [xmls[j] for j in candidates], quiet, fast=fast)
            outcome = dict.fromkeys(range(len(xmls)), False)
            outcome.update({j: True for j, m in enumerate(matches) if key in m[0]})
            outcome.update(zip(candidates, evaluated, strict=True))
            assert list(outcome.values()) == truth, (expr, fast)


def test_corpus() -> None:
    """The fast path's corpus of edge-case items and expressions."""
    root = etree.parse(str(DATA / "items.xml")).getroot()
    xmls = [etree.tostring(item, encoding="unicode", with_tail=False) for item in root]
    lines = (DATA / "expressions.txt").read_text(encoding="utf-8").splitlines()
    exprs = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    observers = [expr for expr in exprs if "$i1" not in expr and "$items" not in expr]
    check_equivalent(observers, xmls)


ALPHABET = "aAbB ßsSΣσςİiı\u0307é&<'"
FIELDS = [
    ".",
    "$i",
    "string(.)",
    "string()",
    "string($i)",
    "title",
    "$i/title",
    "./title",
    "string(title)",
    "title[1]",
    "(category)[1]",
    "category",
    "description",
    "dc:creator",
    "x:tag",
    "Q{urn:x}tag",
    "enclosure/@url",
    "@lang",
]

texts = st.text(alphabet=ALPHABET, max_size=5)
literals = st.text(alphabet=ALPHABET, max_size=3).map(lambda s: "'" + s.replace("'", "''") + "'")
fields = st.sampled_from(FIELDS) | st.sampled_from(FIELDS).map(lambda f: f"lower-case({f})")


@st.composite
def leaves(draw: st.DrawFn) -> str:
    field, literal = draw(fields), draw(literals)
    forms = [
        f"contains({field}, {literal})",
        f"starts-with({field}, {literal})",
        f"ends-with({field}, {literal})",
        f"{field} = {literal}",
        f"{literal} = {field}",
        f"{field} = ({literal}, {draw(literals)})",
        f"{field} eq {literal}",
        f"matches({field}, {literal})",
        f"string-length({field}) > 3",
        f"{field} != {literal}",
        "count(category) > 1",
        "true()",
        "false()",
    ]
    return draw(st.sampled_from(forms))


observers = st.recursive(
    leaves(),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda ab: f"({ab[0]}) and ({ab[1]})"),
        st.tuples(inner, inner).map(lambda ab: f"({ab[0]}) or ({ab[1]})"),
        inner.map(lambda a: f"not({a})"),
        inner.map(lambda a: f"boolean({a})"),
    ),
    max_leaves=4,
)


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;")


@st.composite
def contents(draw: st.DrawFn) -> str:
    """Random text, escaped, as character references, CDATA or cut by a comment."""
    text = draw(texts)
    way = draw(st.sampled_from(["plain", "plain", "refs", "cdata", "comment", "nested"]))
    if way == "refs":
        return "".join(f"&#{ord(c)};" for c in text)
    if way == "cdata":
        return f"<![CDATA[{text}]]>"
    if way == "comment":
        return f"{escape(text[:2])}<!--c-->{escape(text[2:])}"
    if way == "nested":  # elementpath puts <b>'s tail before its children's text
        return f"<b>{escape(text[:1])}<i>{escape(text[1:3])}</i></b>{escape(text[3:])}"
    return escape(text)


@st.composite
def items(draw: st.DrawFn) -> str:
    parts: list[str] = []
    for tag, most in [("title", 2), ("description", 1), ("category", 3), ("dc:creator", 1)]:
        parts += [f"<{tag}>{draw(contents())}</{tag}>" for _ in range(draw(st.integers(0, most)))]
    parts += [f"<x:tag>{draw(contents())}</x:tag>" for _ in range(draw(st.integers(0, 1)))]
    for _ in range(draw(st.integers(0, 2))):
        url = escape(draw(texts)).replace("'", "&apos;")
        parts.append(f"<enclosure url='{url}'/>")
    parts = draw(st.permutations(parts))
    lang = draw(st.sampled_from(["", " lang='en'", " lang='aß'"]))
    namespaces = 'xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:x="urn:x"'
    before = draw(st.sampled_from(["", "", "", "", "<!--c-->"]))  # an irregular item
    return f"{before}<item {namespaces}{lang}>{draw(contents())}{''.join(parts)}</item>"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(observers, min_size=1, max_size=6), st.lists(items(), min_size=1, max_size=4))
def test_presearch_equals_evaluation(exprs: list[str], xmls: list[str]) -> None:
    check_equivalent(exprs, xmls)


def test_no_term_holds_the_separator() -> None:
    assert SEPARATOR == "\x00"
    assert condition("contains(., 'a\x00b')") is None
    assert condition("title = ('a', 'b\x00')") is None


@settings(max_examples=50, deadline=None)
@given(st.lists(texts, max_size=4))
def test_field_values(values: list[str]) -> None:
    titles = "".join(f"<title>{escape(value)}</title>" for value in values)
    item = parse(f"<item>{titles}<title2>x</title2></item>")
    assert field_reader("title")(item, True) == (values, False)
    assert field_reader("title[1]")(item, False) == (values[:1], False)
