"""The presearcher: necessary conditions of observers, and matching items with them.

Unit tests pin what ``condition`` understands and when a condition is exact (always,
or on items where a field has at most one value); the property tests check the one
thing that matters, on random observers and items: the observers accepted, plus the
candidates that evaluate true, are exactly the observers ``filter_batch`` finds true
(with the lxml fast path on and off), with the index nested or flat.
"""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from roses_app.xmlfn import filter_batch, presearch
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
# PRESEARCH_EXAMPLES=1500 for a longer run of the equivalence property test
EXAMPLES = int(os.environ.get("PRESEARCH_EXAMPLES", "120"))


def quiet(xml: str | None, exc: Exception) -> None:
    """The items observers fail on are expected here: no warning per item."""


def terms(*specs: tuple[str, bool, str]) -> frozenset[Term]:
    return frozenset(Term(*spec) for spec in specs)


# -- what condition() understands ----------------------------------------------------------

EXACT, SINGLE, OPEN = "exact", "single", "open"  # SINGLE: where the field has <= 1 value

UNDERSTOOD = [
    ("contains(lower-case(string(.)), 'volcano')", terms((".", True, "volcano")), EXACT),
    ("contains(., 'x')", terms((".", False, "x")), EXACT),
    ("contains($i, 'x')", terms((".", False, "x")), EXACT),
    ("starts-with(string(), 'Ab')", terms((".", False, "Ab")), EXACT),
    ("ends-with(lower-case($i), 'z')", terms((".", True, "z")), EXACT),
    ("contains(title, 'x')", terms(("title", False, "x")), SINGLE),
    ("contains($i/title, 'x')", terms(("title", False, "x")), SINGLE),
    ("contains(string(./title), 'x')", terms(("title", False, "x")), SINGLE),
    ("contains(lower-case(title), 'x')", terms(("title", True, "x")), SINGLE),
    ("starts-with(description, 'x')", terms(("description", False, "x")), SINGLE),
    ("contains(lower-case(title[1]), 'x')", terms(("title[1]", True, "x")), EXACT),
    ("title = 'a'", terms(("title", False, "a")), EXACT),
    ("'a' = title", terms(("title", False, "a")), EXACT),
    ("category = ('a', 'b')", terms(("category", False, "a"), ("category", False, "b")), EXACT),
    ("lower-case(title) = 'a'", terms(("title", True, "a")), SINGLE),
    ("string(title) = ('a', 'b')", terms(("title", False, "a"), ("title", False, "b")), SINGLE),
    ("title eq 'a'", terms(("title", False, "a")), SINGLE),
    (". eq 'a'", terms((".", False, "a")), EXACT),
    ("dc:creator = 'Ann'", terms((DC, False, "Ann")), EXACT),
    ("Q{http://purl.org/dc/elements/1.1/}creator = 'Ann'", terms((DC, False, "Ann")), EXACT),
    ("x:tag = 'v'", terms(("{urn:x}tag", False, "v")), EXACT),
    ("enclosure/@url = 'u'", terms(("enclosure/@url", False, "u")), EXACT),
    ("contains(enclosure/@url, 'mp3')", terms(("enclosure/@url", False, "mp3")), SINGLE),
    ("contains(@lang, 'en')", terms(("@lang", False, "en")), EXACT),
    ("(category)[1] = 'c'", terms(("category[1]", False, "c")), EXACT),
    ("fn:contains(., 'x')", terms((".", False, "x")), EXACT),
    ("boolean((contains(., 'x')))", terms((".", False, "x")), EXACT),
    # and: the more selective side first (fewer terms, then a longer shortest term)
    ("contains(., 'ab') and contains(title, 'abc')", terms(("title", False, "abc")), SINGLE),
    ("category = ('a', 'b') and contains(., 'q')", terms((".", False, "q")), EXACT),
    ("matches(., 'x') and contains(., 'y')", terms((".", False, "y")), OPEN),
    ("not(contains(., 'x')) and contains(., 'y')", terms((".", False, "y")), EXACT),
    ("contains(title, '') and contains(., 'y')", terms((".", False, "y")), SINGLE),
    ("contains(., 'x') or title = 'y'", terms((".", False, "x"), ("title", False, "y")), EXACT),
    (
        "contains(., 'x') or contains(title, 'y')",
        terms((".", False, "x"), ("title", False, "y")),
        SINGLE,
    ),
    ("false()", frozenset(), EXACT),
]


@pytest.mark.parametrize(("expr", "expected", "exact"), UNDERSTOOD)
def test_understood(expr: str, expected: frozenset[Term], exact: str) -> None:
    found = condition(expr, NS)
    assert found is not None
    assert found.terms == expected
    assert found.terms == (found.clauses[0] if found.clauses else frozenset())
    assert found.exact is (exact == EXACT)
    assert (found.formula is not None) is (exact != OPEN)
    assert bool(found.singles) is (exact == SINGLE)


def test_clauses() -> None:
    """A conjunction keeps a clause of each side, the most selective first."""
    found = condition("contains(., 'ab') and contains(title, 'abc') and matches(., 'q')")
    assert found is not None
    assert found.clauses == (terms(("title", False, "abc")), terms((".", False, "ab")))
    found = condition("(contains(., 'a') and contains(., 'bb')) or category = 'c'")
    assert found is not None
    assert set(found.clauses) == {
        terms((".", False, "bb"), ("category", False, "c")),
        terms((".", False, "a"), ("category", False, "c")),
    }
    wide = " and ".join(f"contains(., '{w}')" for w in ("a", "bb", "ccc", "dddd"))
    found = condition(wide)
    assert found is not None
    assert [min(c).text for c in found.clauses] == ["dddd", "ccc", "bb"]


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
    # ... where the item has at most one title
    terms_, formula = analyse("not(contains(title, 'x'))")
    assert terms_ is None and formula is not None
    assert presearch.single_fields(formula) == {"title"}
    assert analyse("not(matches(title, 'x'))") == (None, None)


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
        "never": "false() and contains(., 'x')",
    }
    presearcher = Presearcher(observers)
    item = parse("<item><title>Lava</title><description>VOLCANO</description></item>")
    assert presearcher.match(item) == ({"volcano", "quiet", "title"}, {"long"})
    other = parse("<item><category>sports</category><category>sport</category>x</item>")
    assert presearcher.match(other) == ({"sport"}, {"long"})
    assert presearcher.stats() == {
        "observers": 6,
        "never": 1,
        "indexed": 3,
        "always_candidates": 1,
        "exact": 4,
        "exact_if_single": 1,
        "closures": 0,
        "terms": 4,
        "fields": 3,
    }


def test_observers_checked_in_feeds_yaml_are_not_parsed_again(tmp_path: Path) -> None:
    """Reading the config keeps each observer's analysis: a presearcher built in the
    same process, or in a worker that got them shipped, parses nothing."""
    from roses_app.config.loader import load_config
    from roses_app.xmlfn import presearch_terms, xpath_shapes

    where = "contains(lower-case(title), 'lava') and not(category = 'ice')"
    config = tmp_path / "feeds.yaml"
    config.write_text(
        "sources: {news: {feed: 'http://127.0.0.1:1/news.xml'}}\n"
        f'streams: {{lava: {{filter: {{from: news, where: "{where}"}}}}}}\n'
    )
    presearch_terms.forget()
    load_config(config)
    item = parse("<item><title>Lava flow</title><category>fire</category></item>")
    shipped = presearch_terms.shipped([where], ())
    parsed = AssertionError("parsed")
    with (
        mock.patch.object(presearch_terms, "syntax_tree", side_effect=parsed),
        mock.patch.object(xpath_shapes, "syntax_tree", side_effect=parsed),
    ):
        assert Presearcher({"lava": where}).match(item) == ({"lava"}, set())
        presearch_terms.forget()  # a worker: nothing known until it is shipped
        presearch_terms.remember("program", shipped)
        assert Presearcher({"lava": where}).match(item) == ({"lava"}, set())
        presearch_terms.forget()
        presearch_terms.remember("program", shipped)  # once per program: not again
        with pytest.raises(AssertionError, match="parsed"):
            Presearcher({"lava": where})
    presearch_terms._remembered.discard("program")
    assert Presearcher({"lava": where}).match(item) == ({"lava"}, set())


SINGLE_VALUED = {
    "contains": "contains(lower-case(title), 'lava')",
    "starts": "starts-with(description, 'Hot')",
    "eq": "title eq 'Lava'",
    "lower": "lower-case(title) = 'lava'",
    "not": "not(contains(description, 'cold'))",
    "empty": "contains(title, '')",
    "both": "contains(lower-case(title), 'lava') and not(contains(lower-case(.), 'ice'))",
}


@pytest.mark.parametrize(
    ("titles", "accepted", "candidates"),
    [
        ([], {"not", "empty"}, set()),  # no title: the empty sequence, no error
        (["Lava"], {"contains", "eq", "lower", "not", "empty", "both"}, set()),
        (["Ice"], {"not", "empty"}, set()),
        # two titles: XPTY0004 where a title is read; a candidate if its terms are found
        (["Lava", "Lava"], {"not"}, {"contains", "eq", "lower", "empty", "both"}),
        (["Ice", "Lava flow"], {"not"}, {"contains", "empty", "both"}),
        (["Ice", "Ice"], {"not"}, {"empty"}),
    ],
)
def test_exact_where_single_valued(
    titles: list[str], accepted: set[str], candidates: set[str]
) -> None:
    presearcher = Presearcher(SINGLE_VALUED)
    xml = "".join(f"<title>{t}</title>" for t in titles) + "<description>Hot</description>"
    item = parse(f"<item>{xml}</item>")
    starts = {"starts"}  # one description: exact
    assert presearcher.match(item) == (accepted | starts, candidates)
    check_equivalent(list(SINGLE_VALUED.values()), [f"<item>{xml}</item>"])
    # two descriptions: the observers reading it are not exact
    two = parse(f"<item>{xml}<description>cold</description></item>")
    found, open_ = presearcher.match(two)
    assert not {"starts", "not"} & found and {"starts", "not"} <= open_


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
    """accepted ∪ (candidates that evaluate true) == the observers true on each item,
    with the index as it is built, with every two-clause observer nested, and with
    postings looked up however few the observers (``FEW``: else checked one by one)."""
    keyed = dict(enumerate(observers))
    presearchers = [Presearcher(keyed, NS)]
    for nest_min, few in [(1, 0), (presearch.NEST_MIN, 0)]:
        with mock.patch.multiple(presearch, NEST_MIN=nest_min, FEW=few):
            presearchers.append(Presearcher(keyed, NS))
    results = [[p.match(parse(xml)) for xml in xmls] for p in presearchers]
    for matches in results:
        for accepted, open_ in matches:
            assert not accepted & open_
    for fast in (True, False):
        for key, expr in enumerate(observers):
            truth = filter_batch(expr, NS, xmls, quiet, fast=fast)
            for matches in results:
                # a candidate is evaluated: its outcome is the truth
                outcome = [
                    key in accepted or (key in open_ and true)
                    for (accepted, open_), true in zip(matches, truth, strict=True)
                ]
                assert outcome == truth, (expr, fast)


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

# words shared by texts and literals, so that conjunctions often hold or half hold
WORDS = ["a", "Ab", "ßs", "ΣΑΣ", "İi", "é&", "b a"]
texts = st.text(alphabet=ALPHABET, max_size=5) | st.lists(st.sampled_from(WORDS), max_size=3).map(
    "".join
)
literals = (st.text(alphabet=ALPHABET, max_size=3) | st.sampled_from(WORDS)).map(
    lambda s: "'" + s.replace("'", "''") + "'"
)
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
    # 0, 1 and 2 titles and descriptions: leaves reading them are exact only with <= 1
    for tag, most in [("title", 2), ("description", 2), ("category", 3), ("dc:creator", 1)]:
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


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(observers, min_size=1, max_size=6), st.lists(items(), min_size=1, max_size=4))
def test_presearch_equals_evaluation(exprs: list[str], xmls: list[str]) -> None:
    check_equivalent(exprs, xmls)


def test_many_observers() -> None:
    """Enough observers sharing terms for nested groups and postings per pid."""
    words = ["lava", "ice", "ash", "sea", "fire", "rock", "mud"]
    observers = []
    for i, (w1, w2) in enumerate((a, b) for a in words for b in words if a != b):
        observers += [
            f"contains(lower-case(.), '{w1}')",
            f"contains(lower-case(title), '{w1}') and not(contains(lower-case(.), '{w2}'))",
            f"contains(lower-case(.), '{w1}') and contains(lower-case(.), '{w2}')",
            f"(contains(., '{w1}') or contains(., '{w2}')) and category = 'c0'",
            f"contains(., '{w1}') and contains(title, '{w2}') and category = 'c{i % 2}'",
            f"contains(., '{w1}') and contains(title, '{w2}') and not(contains(., 'z'))",
            f"contains(., '{w1}') and matches(., '{w2}')",
            # not a conjunction of clauses and negated terms: a closure
            f"contains(., '{w1}') and (contains(title, '{w2}') or not(contains(., 'ash')))",
        ]
    xmls = [
        "<item><title>Lava and ice</title><category>c0</category>fire sea</item>",
        "<item><title>ash</title><title>sea</title><category>c1</category>lava</item>",
        "<item><title>ash mud</title><category>c1</category>lava rock</item>",
        "<item><title>fire</title><description>ice z</description><category>c1</category>"
        "<category>c0</category></item>",
        "<item>ash<!--c-->lava ice sea</item>",
        "<item><title>sea <b>fire</b></title><category>c0</category></item>",
        "<item/>",
    ]
    check_equivalent(observers, xmls)
    searcher = Presearcher(dict(enumerate(observers)))
    assert any(group.nested for group in searcher._groups)
    assert searcher.stats()["closures"] == len(observers) // 8


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
