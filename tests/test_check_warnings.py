"""`roses check` warns about expressions known to explode (issue 43, must-have 1): the
bombs of the issue warn at their feeds.yaml line with their stream and step, and the
exit status stays 0 (the run-time budget stops them); ordinary expressions, and every
example of the docs, do not warn."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_budget import STALLING
from test_readme_examples import BLOCKS

from roses_app.cli import main
from roses_app.config import load_config, parse_config
from roses_app.config.explosive import explosive
from roses_app.xmlfn.hazards import hazards, tokens
from roses_app.xmlfn.hazards_regex import regex_hazard

REPO = Path(__file__).resolve().parent.parent

# what each bomb of issue 43 (tests/test_budget.py's STALLING) is warned as
KINDS = {
    "regex": "nested quantifiers",
    "alternation": "alternation whose branches can start alike",
    "loops": "10,000,000,000 iterations for each item",
    "string": "1 to 100000000 inside string-join() builds 100,000,000 items",
    "string within the range bound": "1 to 9000000 inside string-join() builds 9,000,000",
}

ORDINARY = [
    "contains(lower-case(string(.)), 'volcano')",
    "category = ('iceland', 'volcano')",
    r"matches(title, '^vol\w+\s', 'i')",
    r"matches(title, '(\d+,)*\d+')",
    r"matches(link, '^(https?://)?([\w.-]+)(/.*)?$')",
    r"matches(title, '(\s|^)volcano(\s|$)')",
    r"tokenize(string(.), '\s*,\s*')",
    r"replace(title, '(\d+)-(\d+)', '$2-$1') != ''",
    r"count(analyze-string(title, '([a-z]+\.)*com')/*) > 0",
    r"matches(title, '(\p{L}+\s)+')",
    "matches(title, '(a+)+', 'q')",  # q: plain text, no regex
    "some $c in category satisfies $c = 'news'",
    "count(for $i in 1 to 100 return $i) = 100",
    "(for $a in 1 to 1000 return $a), (for $b in 1 to 1000 return $b)",
    "string-join(for $i in 1 to 10 return 'x') != ''",
    "(: matches(title, '(a+)+') and 1 to 100000000 :) true()",
]


def check(tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """`roses check` of a config with a control stream and ``where``: (stdout, stderr)."""
    (tmp_path / "feeds.yaml").write_text(
        "sources:\n  s: {feed: 'file:x.xml'}\nstreams:\n"
        "  control:\n    filter: {from: s, where: 'true()'}\n    publish: true\n"
        f"  bomb:\n    filter:\n      from: s\n      where: {where!r}\n    publish: true\n"
    )
    assert main(["check", "-c", str(tmp_path / "feeds.yaml")]) == 0
    out, err = capsys.readouterr()
    return out, err


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_bomb_of_the_issue_warns(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expr = STALLING[name][0]
    out, err = check(tmp_path, expr, capsys)
    assert "OK (1 sources, 2 streams, 1 warning)" in out
    [warning] = err.splitlines()
    assert warning.startswith(f"{tmp_path / 'feeds.yaml'}:8: warning: stream 'bomb', step ")
    assert "bomb/filter" in warning and KINDS[name] in warning
    assert "settings.limits.item_time" in warning


@pytest.mark.parametrize("where", ORDINARY)
def test_ordinary_expressions_do_not_warn(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, err = check(tmp_path, where, capsys)
    assert err == "" and "OK (1 sources, 2 streams)" in out


def test_the_shipped_config_and_every_docs_example_do_not_warn(tmp_path: Path) -> None:
    assert explosive(load_config(REPO / "feeds.yaml")) == []
    shutil.copytree(REPO / "xquery", tmp_path / "xquery")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    (tmp_path / "subscriptions.jsonl").write_text("")
    checked = 0
    for name, block in BLOCKS.items():
        if "streams:" not in block:
            continue
        config = parse_config(block, tmp_path / "feeds.yaml")
        assert explosive(config) == [], name
        checked += 1
    assert checked >= 5


def test_an_xquery_file_and_other_steps_are_read(tmp_path: Path) -> None:
    (tmp_path / "xquery").mkdir()
    (tmp_path / "xquery" / "loops.xq").write_text(
        "(: a mutator over $i :)\n"
        "<item>{ $i/*, <n>{ count(for $a in 1 to 10000, $b in 1 to 10000 return $a) }</n> }"
        "</item>\n"
    )
    text = (
        "sources:\n  s: {feed: 'file:x.xml'}\nstreams:\n"
        "  mapped:\n    map: {from: s, xquery: xquery/loops.xq}\n    publish: true\n"
        "  topics:\n    split: {from: mapped, by: \"replace(title, '(.*)*', 'x')\"}\n"
        "    publish: true\n"
    )
    warnings = explosive(parse_config(text, tmp_path / "feeds.yaml"))
    assert [(w.line, w.message.split(":")[0]) for w in warnings] == [
        (5, "warning"),
        (8, "warning"),
    ]
    assert "stream 'mapped', step mapped/map: in " in warnings[0].message
    assert "loops.xq" in warnings[0].message and "100,000,000 iterations" in warnings[0].message
    assert "stream 'topics', step topics/split" in warnings[1].message
    assert "'(.*)*' given to replace()" in warnings[1].message


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("^(a+)+$", "nested"),
        (r"^(\w|\w\w)*$", "alternation"),
        ("(.*)*", "nested"),
        (r"(\w+\s?)*$", "nested"),
        ("([^,]+,?)*", "nested"),
        ("((ab)+)*", "nested"),
        ("(a|a)*", "alternation"),
        ("(a*){10}", "nested"),
        (r"(\d+,)*", None),  # the comma separates the runs of digits
        (r"(\.\w+)+$", None),
        ("(a+){2}", None),  # twice: polynomial at worst
        (r"[a-z-[aeiou]]+", None),
        ("(foo|bar)+", None),
        ("(a+", None),  # does not parse: the processor reports it
    ],
)
def test_regex_shapes(pattern: str, why: str | None) -> None:
    found = regex_hazard(pattern)
    assert (found is None) if why is None else (why in (found or ""))


def test_the_arrow_and_prefixed_names_are_read() -> None:
    assert hazards("title => fn:matches('(a+)+$')")
    assert hazards("fn:tokenize(title, '(x|x)+')")
    assert not hazards("title => matches('(a+)+$', 'q')")


def test_tokens_survive_unclosed_text() -> None:
    # an XQuery element's text with an apostrophe: no crash, no warning made up
    assert [t.kind for t in tokens("<t>it's</t>")][:3] == ["op", "name", "op"]
    assert hazards("<t>it's (a+)+</t>") == []
