"""Observers, accessors and split functions over batches (roses_app.xmlfn)."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading

import pytest
from lxml import etree

from roses_app.errors import EvaluationError, ExpressionError
from roses_app.xmlfn import (
    check_xpath,
    compile_xpath,
    filter_batch,
    map_batch,
    namespace_map,
    observe2_batch,
    split_batch,
    to_item,
    uses_fast_path,
)

VOLCANO = (
    "<item><title>Volcano erupts</title><link>https://a.example/1</link>"
    "<guid>g-volcano</guid><category>iceland</category><category>volcano</category>"
    '<dc:creator xmlns:dc="http://purl.org/dc/elements/1.1/">Anna</dc:creator></item>'
)
FOOTBALL = "<item><title>Football</title><link>https://a.example/2</link></item>"
BROKEN = "<item><title>broken</item>"


class Errors:
    """An on_error hook that records what it gets."""

    def __init__(self) -> None:
        self.calls: list[tuple[str | None, Exception]] = []

    def __call__(self, xml: str | None, exc: Exception) -> None:
        self.calls.append((xml, exc))


@pytest.mark.parametrize("fast", [True, False])
def test_filter_keeps_matching_items_and_drops_failures(fast: bool) -> None:
    errors = Errors()
    expr = "category = 'volcano'"
    assert uses_fast_path(expr)
    kept = filter_batch(expr, (), [VOLCANO, FOOTBALL, None, BROKEN], errors, fast=fast)
    assert kept == [True, False, False, False]
    assert [xml for xml, _ in errors.calls] == [BROKEN]
    assert isinstance(errors.calls[0][1], etree.XMLSyntaxError)


def test_filter_dynamic_error_drops_only_that_item() -> None:
    errors = Errors()
    # one title: fine; two titles: XPTY0004 in XPath 3.1
    two_titles = "<item><title>a</title><title>b</title></item>"
    expr = "lower-case(title) = 'a'"
    kept = filter_batch(expr, (), ["<item><title>A</title></item>", two_titles], errors)
    assert kept == [True, False]
    assert errors.calls[0][0] == two_titles
    assert isinstance(errors.calls[0][1], EvaluationError)
    assert "XPTY0004" in str(errors.calls[0][1])


def test_default_hook_logs_a_warning_with_the_guid(caplog: pytest.LogCaptureFixture) -> None:
    bad = "<item><guid>g-7</guid><title>a</title><title>b</title></item>"
    with caplog.at_level(logging.WARNING, logger="roses_app.xmlfn"):
        assert filter_batch("lower-case(title) = 'a'", (), [bad]) == [False]
    assert "dropped an item (guid 'g-7')" in caplog.text


def test_a_failing_hook_does_not_escape(caplog: pytest.LogCaptureFixture) -> None:
    def hook(xml: str | None, exc: Exception) -> None:
        raise RuntimeError("hook bug")

    with caplog.at_level(logging.ERROR, logger="roses_app.xmlfn"):
        assert filter_batch("title", (), [BROKEN, VOLCANO], hook) == [False, True]
    assert "error hook" in caplog.text


def test_static_errors_raise_expression_error() -> None:
    with pytest.raises(ExpressionError, match="XPST0003"):
        filter_batch("title[", (), [VOLCANO])
    with pytest.raises(ExpressionError, match="XPST0081"):
        check_xpath("foo:bar")
    with pytest.raises(ExpressionError, match="XPST0008"):
        check_xpath("$i1/title")  # a one-item function has no $i1


@pytest.mark.parametrize("fast", [True, False])
def test_map_accessor_shapes(fast: bool) -> None:
    out = map_batch("title | link", (), [VOLCANO, "<item/>", None], fast=fast)
    assert out[0] == ("<item><title>Volcano erupts</title><link>https://a.example/1</link></item>")
    assert out[1:] == [None, None]  # empty result: λ
    assert map_batch(".", (), [FOOTBALL], fast=fast) == [FOOTBALL]


def test_map_with_a_31_expression_and_atomic_results() -> None:
    out = map_batch("upper-case(title)", (), [FOOTBALL])
    assert out == ["<item>FOOTBALL</item>"]
    out = map_batch("(title, count(category))", (), [VOLCANO])
    assert out == ["<item><title>Volcano erupts</title>2</item>"]


def test_to_item_copies_elements_without_their_tail() -> None:
    item = etree.fromstring("<item><a>1</a>tail<b/></item>")
    assert etree.tostring(to_item(item[0])) == b"<item><a>1</a></item>"


@pytest.mark.parametrize("fast", [True, False])
def test_split_names(fast: bool) -> None:
    names = split_batch("string(category[1])", (), [VOLCANO, FOOTBALL, BROKEN], fast=fast)
    assert names == ["iceland", None, None]


def test_split_with_if_then_else() -> None:
    expr = "if (contains(lower-case(title), 'football')) then 'sport' else 'other'"
    assert not uses_fast_path(expr, "string")
    assert split_batch(expr, (), [VOLCANO, FOOTBALL]) == ["other", "sport"]


def test_namespaces_predeclared_and_from_settings() -> None:
    assert set(namespace_map()) >= {"dc", "content", "atom", "media", "itunes"}
    assert filter_batch("dc:creator = 'Anna'", (), [VOLCANO, FOOTBALL]) == [True, False]
    geo = (("geo", "http://www.w3.org/2003/01/geo/wgs84_pos#"),)
    item = '<item><g:lat xmlns:g="http://www.w3.org/2003/01/geo/wgs84_pos#">64.1</g:lat></item>'
    for fast in (True, False):
        assert filter_batch("geo:lat", geo, [item, FOOTBALL], fast=fast) == [True, False]


def test_i_is_the_item() -> None:
    assert filter_batch("$i/title = 'Football'", (), [VOLCANO, FOOTBALL]) == [False, True]
    assert filter_batch("$i is .", (), [VOLCANO]) == [True]


def test_items_variable_compiles_for_reducers() -> None:
    compiled = compile_xpath("count($items) > 1", (), ("items",))
    items = [etree.fromstring(VOLCANO), etree.fromstring(FOOTBALL)]
    assert compiled.boolean(items[0], items=items) is True


@pytest.mark.parametrize("fast", [True, False])
def test_two_item_observer(fast: bool) -> None:
    same_link = VOLCANO.replace("Volcano erupts", "Other title")
    pairs = [(VOLCANO, same_link), (VOLCANO, FOOTBALL), (VOLCANO, None), (None, VOLCANO)]
    errors = Errors()
    out = observe2_batch("$i1/link = $i2/link", (), [*pairs, (VOLCANO, BROKEN)], errors, fast=fast)
    assert out == [True, False, False, False, False]
    assert errors.calls[0][0] == BROKEN  # the hook gets the item that does not parse


def test_two_item_observer_context_is_the_first_item() -> None:
    assert observe2_batch("title = $i2/title", (), [(VOLCANO, VOLCANO)]) == [True]


def test_encoding_declarations_and_bytes_like_input() -> None:
    declared = '<?xml version="1.0" encoding="UTF-8"?>' + FOOTBALL
    assert filter_batch("title = 'Football'", (), [declared]) == [True]


def test_threads_share_the_caches() -> None:
    results: list[list[bool]] = []

    def work() -> None:
        for _ in range(50):
            results.append(filter_batch("category = 'volcano'", (), [VOLCANO, FOOTBALL]))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [[True, False]] * 200


def test_the_algebra_does_not_import_the_xml_engines() -> None:
    code = (
        "import sys, roses_app.algebra, roses_app.algebra.plan.operators\n"
        "bad = [m for m in ('lxml', 'elementpath', 'saxonche', 'pyspark') if m in sys.modules]\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_xmlfn_loads_saxon_only_when_an_xquery_runs() -> None:
    code = "import sys, roses_app.xmlfn\nassert 'saxonche' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_process_locale_does_not_change_string_semantics() -> None:
    code = (
        "import locale\n"
        "locale.setlocale(locale.LC_ALL, 'C.UTF-8')\n"
        "from roses_app.xmlfn import filter_batch\n"
        "items = ['<item><title>b</title></item>', '<item><title>B</title></item>']\n"
        "for _ in range(3):\n"
        "    assert filter_batch(\"contains(lower-case(title), 'b')\", (), items) == [True] * 2\n"
        "    assert filter_batch(\"title < 'a'\", (), items) == [False, True]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
