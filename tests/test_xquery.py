"""XQuery mutators and reducers run by Saxon-HE over whole batches (roses_app.xmlfn)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lxml import etree

from roses_app.algebra.plan.operators import Map, XQuery
from roses_app.config import parse_config
from roses_app.errors import ConfigError, EvaluationError, ExpressionError
from roses_app.xmlfn import (
    XQueryError,
    budget,
    check_xquery,
    combine_batch,
    mutate_batch,
    reduce_batch,
)
from roses_app.xmlfn import xquery as xquery_module

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "xquery"

VOLCANO = (
    "<item><title>Volcano erupts near Grindavik</title><link>https://a.example/1</link>"
    "<description>Lava flows; scientists say the eruption may last weeks</description>"
    "<guid>g1</guid><category>iceland</category></item>"
)
FOOTBALL = (
    "<item><title>Football: World Cup final</title><link>https://a.example/2</link>"
    "<guid>g2</guid></item>"
)
PLAIN = "<item><title>Nothing to see</title></item>"


def shipped(name: str) -> XQuery:
    path = SHIPPED / name
    return XQuery(path.read_text(encoding="utf-8"), str(path), 1)


class Errors:
    def __init__(self) -> None:
        self.calls: list[tuple[str | None, Exception]] = []

    def __call__(self, xml: str | None, exc: Exception) -> None:
        self.calls.append((xml, exc))

    @property
    def messages(self) -> list[str]:
        return [str(exc) for _, exc in self.calls]


def element(xml: str | None) -> etree._Element:
    assert xml is not None
    return etree.fromstring(xml)


class CallCounter:
    """Counts Saxon query runs (wraps the prepared query processors)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.runs = 0
        original = xquery_module._call

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.runs += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(xquery_module, "_call", counting)


# -- the shipped examples ------------------------------------------------------------------


def test_tag_topics_adds_categories_from_keywords() -> None:
    out = mutate_batch(shipped("tag-topics.xq"), (), [VOLCANO, FOOTBALL, PLAIN, None])
    volcano, football, plain, none = (None if x is None else element(x) for x in out)
    assert volcano is not None and football is not None and plain is not None
    assert [c.text for c in volcano.findall("category")] == ["iceland", "science", "volcano"]
    assert volcano.findall("category")[1].get("domain") == "urn:x-roses:topics"
    assert volcano.findtext("title") == "Volcano erupts near Grindavik"  # kept
    assert [c.text for c in football.findall("category")] == ["football"]
    assert plain.findall("category") == []
    assert none is None


def test_tag_topics_does_not_repeat_a_topic() -> None:
    tagged = VOLCANO.replace("<category>iceland</category>", "<category>Volcano</category>")
    out = element(mutate_batch(shipped("tag-topics.xq"), (), [tagged])[0])
    assert [c.text for c in out.findall("category")] == ["Volcano", "science"]


def test_related_merges_two_items() -> None:
    out = combine_batch(shipped("related.xq"), (), [(VOLCANO, FOOTBALL), (FOOTBALL, None)])
    merged = element(out[0])
    assert merged.findtext("guid") == "g1"
    related = "{urn:x-roses}related"
    assert merged.findtext(f"{related}/title") == "Football: World Cup final"
    assert merged.findtext(f"{related}/link") == "https://a.example/2"
    assert element(out[1]).find(related) is None  # outer join: no $i2
    assert combine_batch(shipped("related.xq"), (), [(None, VOLCANO)]) == [None]


def test_digest_builds_one_item_per_group() -> None:
    groups = [[VOLCANO, FOOTBALL], [], [FOOTBALL, VOLCANO], [PLAIN]]
    out = reduce_batch(shipped("digest.xq"), (), groups)
    first = element(out[0])
    assert first.findtext("title") == "Digest: 2 items"
    description = first.findtext("description") or ""
    assert '<a href="https://a.example/1">Volcano erupts near Grindavik</a>' in description
    assert out[1] is None  # no items: no digest
    # the guid depends on the set of items, not their order
    assert element(out[2]).findtext("guid") == first.findtext("guid")
    assert element(out[3]).findtext("guid") != first.findtext("guid")
    assert element(out[3]).findtext("title") == "Digest: 1 item"


def test_digest_uses_the_group_key() -> None:
    out = reduce_batch(shipped("digest.xq"), (), [[VOLCANO]], extra_vars={"key": "iceland"})
    assert element(out[0]).findtext("title") == "Digest of iceland: 1 item"


@pytest.mark.parametrize(
    ("name", "variables"),
    [("tag-topics.xq", ("i",)), ("related.xq", ("i1", "i2")), ("digest.xq", ("items", "key"))],
)
def test_shipped_examples_check(name: str, variables: tuple[str, ...]) -> None:
    check_xquery(shipped(name), (), variables)


# -- batching --------------------------------------------------------------------------------


@pytest.fixture
def in_process() -> Iterator[None]:
    """Saxon in this process, as without settings.limits.item_time (with it, batches
    run in the guard's helper: tests/test_budget.py)."""
    before = budget.limit()
    budget.configure(None)
    yield
    budget.configure(before)


@pytest.mark.usefixtures("in_process")
def test_one_saxon_call_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    query = XQuery("<item>{ $i/title }<n>{ count($i/*) }</n></item>", "count.xq", 1)
    mutate_batch(query, (), [PLAIN])  # prepare outside the count
    counter = CallCounter(monkeypatch)
    out = mutate_batch(query, (), [VOLCANO, FOOTBALL, PLAIN] * 100)
    assert counter.runs == 1
    assert [element(x).findtext("n") for x in out[:3]] == ["5", "3", "1"]


@pytest.mark.usefixtures("in_process")
def test_prolog_using_i_runs_one_call_per_item(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (
        "declare variable $i external;\n"
        "declare function local:title() { string($i/title) };\n"
        "<item><t>{ local:title() }</t></item>"
    )
    query = XQuery(text, "global.xq", 1)
    counter = CallCounter(monkeypatch)
    out = mutate_batch(query, (), [VOLCANO, FOOTBALL])
    assert [element(x).findtext("t") for x in out] == [
        "Volcano erupts near Grindavik",
        "Football: World Cup final",
    ]
    assert counter.runs == 2


def test_the_seed_syntax_context_item_and_typed_i() -> None:
    seed = XQuery(
        "declare variable $i as element(item) external;\n"
        "return\n  <item>\n    { $i/title, $i/link }\n"
        "    <title-fr>{ upper-case(title) }</title-fr>\n  </item>",
        "seed.xq",
        1,
    )
    out = element(mutate_batch(seed, (), [FOOTBALL])[0])
    assert out.findtext("title-fr") == "FOOTBALL: WORLD CUP FINAL"  # `.` is the item


def test_empty_result_drops_the_item_silently() -> None:
    query = XQuery("if ($i/category) then $i else ()", "drop.xq", 1)
    errors = Errors()
    assert mutate_batch(query, (), [VOLCANO, FOOTBALL], errors) == [VOLCANO, None]
    assert errors.calls == []


def test_namespaces_predeclared_and_from_settings() -> None:
    item = (
        '<item><dc:creator xmlns:dc="http://purl.org/dc/elements/1.1/">Anna</dc:creator>'
        '<g:lat xmlns:g="http://www.w3.org/2003/01/geo/wgs84_pos#">64.1</g:lat></item>'
    )
    geo = (("geo", "http://www.w3.org/2003/01/geo/wgs84_pos#"),)
    query = XQuery("<item><a>{ string($i/dc:creator) }</a><b>{ $i/geo:lat/string() }</b></item>")
    out = element(mutate_batch(query, geo, [item])[0])
    assert (out.findtext("a"), out.findtext("b")) == ("Anna", "64.1")


def test_user_output_options_do_not_break_the_batch() -> None:
    query = XQuery(
        'declare option output:method "json";\ndeclare option output:indent "yes";\n'
        "<item>{ $i/title }</item>",
        "json.xq",
        1,
    )
    assert mutate_batch(query, (), [PLAIN]) == ["<item><title>Nothing to see</title></item>"]


def test_items_with_xml_declarations_and_many_entity_references() -> None:
    declared = '<?xml version="1.0" encoding="UTF-8"?>\n' + PLAIN
    query = XQuery("$i", "identity.xq", 1)
    assert mutate_batch(query, (), [declared]) == [PLAIN]
    # the JDK parser refuses more than 100,000 entity references in one document
    escaped = "<item><description>" + "&lt;b&gt;x&lt;/b&gt; &amp; " * 10 + "</description></item>"
    out = mutate_batch(query, (), [escaped] * 3000)
    assert out[0] == escaped and out[-1] == escaped
    # ... and the text of a CDATA section is left as it is, even in such a batch
    cdata = "<item><description><![CDATA[a &lt; b]]></description></item>"
    out = mutate_batch(query, (), [escaped] * 3000 + [cdata])
    assert element(out[-1]).findtext("description") == "a &lt; b"


# -- errors per item --------------------------------------------------------------------------


def test_a_dynamic_error_drops_only_that_item_with_file_and_line() -> None:
    query = XQuery(
        "<item>{\n  $i/title,\n  if ($i/category) then 1 idiv 0 else ()\n}</item>", "f.xq", 10
    )
    errors = Errors()
    out = mutate_batch(query, (), [PLAIN, VOLCANO, FOOTBALL], errors)
    assert out[0] is not None and out[2] is not None and out[1] is None
    assert [xml for xml, _ in errors.calls] == [VOLCANO]
    exc = errors.calls[0][1]
    assert isinstance(exc, EvaluationError)
    assert str(exc) == "f.xq:12: FOAR0001 Integer division by zero"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("if ($i/guid) then ($i, $i) else $i", "the result must be one <item> element"),
        ('if ($i/guid) then "text" else $i', 'the supplied value "text" is an atomic value'),
        ("if ($i/guid) then <entry/> else $i", "does not match"),
        ('if ($i/guid) then <item xmlns="urn:x"/> else $i', "does not match"),
        ("if ($i/guid) then map { } else $i", "is a map"),
    ],
)
def test_results_other_than_one_item_are_errors(body: str, expected: str) -> None:
    errors = Errors()
    query = XQuery(body, "shape.xq", 3)
    out = mutate_batch(query, (), [VOLCANO, PLAIN, FOOTBALL], errors)
    assert out[0] is None and out[2] is None and out[1] is not None
    assert len(errors.calls) == 2
    assert errors.messages[0].startswith("shape.xq:3: ")
    assert expected in errors.messages[0]


@pytest.mark.usefixtures("in_process")
def test_uncatchable_errors_rerun_the_batch_safely(monkeypatch: pytest.MonkeyPatch) -> None:
    # two items are written before Saxon sees the error: the fast wrapper cannot catch it
    query = XQuery('if ($i/guid = "g1") then (<item/>, <item/>) else $i', "two.xq", 1)
    mutate_batch(query, (), [PLAIN])
    counter = CallCounter(monkeypatch)
    errors = Errors()
    items = [PLAIN, VOLCANO, FOOTBALL] * 50
    out = mutate_batch(query, (), items, errors)
    assert out == [PLAIN, None, FOOTBALL] * 50
    assert len(errors.calls) == 50
    assert counter.runs == 2  # the fast call, then one safe call


@pytest.mark.usefixtures("in_process")
def test_a_query_that_keeps_failing_that_way_runs_safely(monkeypatch: pytest.MonkeyPatch) -> None:
    query = XQuery("<item>{ $i/title, 1 idiv count($i/guid) }</item>", "idiv.xq", 1)
    errors = Errors()
    for _ in range(3):  # the error starts once <item> is written: uncatchable when fast
        assert mutate_batch(query, (), [VOLCANO, PLAIN], errors)[1] is None
    counter = CallCounter(monkeypatch)
    out = mutate_batch(query, (), [VOLCANO, PLAIN, FOOTBALL], errors)
    assert out[0] is not None and out[1] is None and out[2] is not None
    assert counter.runs == 1  # straight to the safe wrapper
    assert errors.messages[-1] == "idiv.xq:1: FOAR0001 Integer division by zero"


def test_a_constant_result_of_the_wrong_kind_is_found_by_the_check() -> None:
    with pytest.raises(XQueryError, match=r"^text.xq:4: the result must be one <item> element"):
        check_xquery(XQuery('"text"', "text.xq", 4))


def test_malformed_items_are_dropped_and_the_rest_run() -> None:
    errors = Errors()
    broken = "<item><title>broken</item>"
    out = mutate_batch(XQuery("$i"), (), [PLAIN, broken, FOOTBALL], errors)
    assert out == [PLAIN, None, FOOTBALL]
    assert [xml for xml, _ in errors.calls] == [broken]
    assert isinstance(errors.calls[0][1], etree.XMLSyntaxError)


def test_type_of_declared_i_is_checked_per_item() -> None:
    query = XQuery("declare variable $i as element(entry) external;\n$i", "typed.xq", 1)
    errors = Errors()
    assert mutate_batch(query, (), [PLAIN], errors) == [None]
    assert "XPTY0004" in errors.messages[0]


# -- static checks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "variables", "message"),
    [
        ("<item>{ $i/title, }</item>", 1, ("i",), "XPST0003"),
        ('xquery version "3.1";\n\n<item>{ 1 + "a" }</item>', 3, ("i",), "XPTY0004"),
        ("<item>{\n  local:nope()\n}</item>", 2, ("i",), "XPST0017"),
        ("<item>{ $i1/title }</item>", 1, ("i",), "XPST0008 Unresolved reference to variable $i1"),
        ("<item>{ $i/title }</item>", 1, ("i1", "i2"), "XPST0008"),
        ("<item>{ foo:bar() }</item>", 1, ("i",), "XPST0081"),
        ("module namespace m = 'urn:m';", 1, ("i",), "not a library module"),
        ("declare variable $i := 1;\n$i", 1, ("i",), "$i is bound by ROSES"),
        ("\ndeclare variable $n external;\n<item/>", 2, ("i",), "external variable $n gets"),
    ],
)
def test_static_errors_name_the_file_and_line(
    text: str, line: int, variables: tuple[str, ...], message: str
) -> None:
    with pytest.raises(XQueryError) as info:
        check_xquery(XQuery(text, "user.xq", 1), (), variables)
    assert isinstance(info.value, ExpressionError)
    assert (info.value.file, info.value.line) == ("user.xq", line)
    assert message in str(info.value)
    assert str(info.value).startswith(f"user.xq:{line}: ")
    assert "urn:x-roses" not in str(info.value)


def test_inline_queries_report_the_config_line() -> None:
    with pytest.raises(XQueryError) as info:
        check_xquery(XQuery("<item>\n  { $i/title + }\n</item>", "feeds.yaml", 20))
    assert (info.value.file, info.value.line) == ("feeds.yaml", 21)


def test_an_external_variable_with_a_default_is_fine() -> None:
    check_xquery(XQuery("declare variable $n external := 3;\n<item>{ $n }</item>", "d.xq"))


def test_mutating_with_a_bad_query_raises() -> None:
    with pytest.raises(XQueryError):
        mutate_batch(XQuery("<item>{</item>", "bad.xq"), (), [PLAIN])


# -- the source rewriting --------------------------------------------------------------------


def test_masking_keeps_code_and_finds_the_prolog() -> None:
    from roses_app.xmlfn.xqsource import split_module

    text = (
        'xquery version "3.1"; (: a comment; with ; semicolons :)\n'
        'declare function local:f($t) { <p class="a;b">it\'s { $t } (: not a comment :)</p> };\n'
        "declare variable $x := ``[semi; colon `{ 1 }` ]``;\n"
        "declare variable $i as element(item) external;\n"
        "if (1 < 2) then <item>{ local:f('x;y') }</item> else ()"
    )
    module = split_module(text)
    kinds = [st.kind for st in module.statements]
    assert kinds == ["other", "other", "variable", "external"]
    assert module.statements[3].type == "element(item)"
    assert text[module.body_start :].lstrip().startswith("if (1 < 2)")
    assert len(module.masked) == len(text)
    assert module.masked.count("\n") == text.count("\n")


def test_check_and_run_a_tricky_module() -> None:
    text = (
        'declare namespace x = "urn:x";\n'
        "declare function local:label($t as xs:string) as element(label) {\n"
        "  <label note='it''s &lt;fine&gt;; really' x:a=\"{ $t }\">{ $t }; {{braces}}</label>\n"
        "};\n"
        "declare variable $sep := ';';\n"
        "<item>{ $i/title, local:label(string($i/title) || $sep) }</item>"
    )
    out = element(mutate_batch(XQuery(text, "tricky.xq"), (), [PLAIN])[0])
    assert out.findtext("label") == "Nothing to see;; {braces}"


# -- processes and threads -------------------------------------------------------------------


def test_threads_may_call_concurrently() -> None:
    query = shipped("tag-topics.xq")
    expected = mutate_batch(query, (), [VOLCANO, FOOTBALL])
    results: list[list[str | None]] = []

    def work() -> None:
        for _ in range(5):
            results.append(mutate_batch(query, (), [VOLCANO, FOOTBALL]))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 20


def test_a_forked_worker_gets_its_own_processor() -> None:
    query = XQuery("<item>{ $i/title }<pid/></item>", "fork.xq")
    expected = mutate_batch(query, (), [PLAIN])  # the parent has a processor now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: like a Spark Python worker
        try:
            out = mutate_batch(query, (), [PLAIN])
            os.write(write, (out[0] or "").encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    assert child == expected[0]


# -- feeds.yaml -------------------------------------------------------------------------------


def _stream_plan(text: str, path: Path) -> Any:
    config = parse_config(text, path)
    return config.streams["s"].plan


def test_map_xquery_file_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "conf" / "xq").mkdir(parents=True)
    (tmp_path / "conf" / "xq" / "m.xq").write_text("<item>{ $i/title }</item>\n")
    text = (
        "sources:\n  g: {feed: 'https://x.example/rss'}\n"
        "streams:\n  s:\n    map: {from: g, xquery: xq/m.xq}\n"
    )
    plan = _stream_plan(text, tmp_path / "conf" / "feeds.yaml")
    assert isinstance(plan, Map) and plan.xquery is not None and not plan.xpath
    assert plan.xquery == XQuery(
        "<item>{ $i/title }</item>\n", str(tmp_path / "conf" / "xq" / "m.xq"), 1
    )


def test_map_inline_xquery_lines(tmp_path: Path) -> None:
    text = (
        "sources:\n  g: {feed: 'https://x.example/rss'}\n"
        "streams:\n  s:\n    map:\n      from: g\n      xquery: |\n"
        "        <item>\n          { $i/title }\n        </item>\n"
    )
    plan = _stream_plan(text, tmp_path / "feeds.yaml")
    assert plan.xquery.file == str(tmp_path / "feeds.yaml")
    assert plan.xquery.line == 8
    one_line = text.replace("map:\n      from: g\n      xquery: |\n", "map: {from: g, xquery: ")
    one_line = one_line.split("xquery: ")[0] + 'xquery: "<item>{ $i/title }</item>"}\n'
    assert _stream_plan(one_line, tmp_path / "feeds.yaml").xquery.line == 5


def test_roses_check_reports_xquery_errors_with_lines(tmp_path: Path) -> None:
    (tmp_path / "bad.xq").write_text('xquery version "3.1";\n<item>{ $i/title + }</item>\n')
    text = (
        "sources:\n  g: {feed: 'https://x.example/rss'}\n"
        "streams:\n  s:\n    map: {from: g, xquery: bad.xq}\n"
        "  t:\n    map:\n      from: g\n      xquery: |\n        <item>\n"
        "          { 1 + 'a' }\n        </item>\n"
    )
    with pytest.raises(ConfigError) as info:
        parse_config(text, tmp_path / "feeds.yaml")
    problems = [(p.line, p.message) for p in info.value.problems]
    assert problems[0][0] == 5
    assert f"{tmp_path / 'bad.xq'}:2: Static error: XPST0003" in problems[0][1]
    assert problems[1][0] == 11
    assert "XPTY0004" in problems[1][1]
