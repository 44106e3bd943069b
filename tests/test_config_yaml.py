"""YAML with line marks: values, lines, duplicates, aliases, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roses_app.config.yamlmarks import Marked, describe, load


def parse(text: str) -> tuple[Marked | None, list[tuple[int, str]]]:
    problems: list[tuple[int, str]] = []
    root = load(text, lambda line, message: problems.append((line, message)))
    return root, problems


def test_values_and_lines() -> None:
    root, problems = parse(
        "a: 1\nb:\n  - x\n  - {c: true, d: 2.5}\ne: |\n  text\nf:\ng: 2024-01-02\n"
    )
    assert problems == []
    assert root is not None and root.is_map
    assert root.plain()["a"] == 1
    assert root.plain()["b"] == ["x", {"c": True, "d": 2.5}]
    assert root.plain()["e"] == "text\n"
    assert root.plain()["f"] is None
    assert root.key_lines == {"a": 1, "b": 2, "e": 5, "f": 7, "g": 8}
    b = root.value["b"]
    assert b.is_seq and b.line == 3
    assert [item.line for item in b.value] == [3, 4]
    assert b.value[1].key_line("d") == 4
    assert root.value["e"].line == 5
    assert root.value["a"].text == "1"
    assert b.text is None


def test_keys_are_their_source_text() -> None:
    root, problems = parse("yes: 1\n8080: 2\n~: 3\n1.0: 4\n")
    assert problems == []
    assert root is not None
    assert list(root.value) == ["yes", "8080", "~", "1.0"]


def test_duplicate_keys_are_reported_with_both_lines() -> None:
    root, problems = parse("a: 1\nb:\n  x: 1\n  y: 2\n  x: 3\na: 4\n")
    assert problems == [
        (5, "duplicate key 'x' in b (first at line 3); YAML would silently keep only the last one"),
        (
            6,
            "duplicate key 'a' at the top level (first at line 1); "
            "YAML would silently keep only the last one",
        ),
    ]
    assert root is not None
    assert root.plain() == {"a": 4, "b": {"x": 3, "y": 2}}


def test_merge_keys_own_keys_win_and_are_not_duplicates() -> None:
    root, problems = parse(
        "base: &b {x: 1, y: 2}\nother: &o {y: 20, z: 30}\nm:\n  <<: [*b, *o]\n  x: 10\n"
    )
    assert problems == []
    assert root is not None
    assert root.plain()["m"] == {"x": 10, "y": 2, "z": 30}
    assert root.value["m"].key_line("x") == 5
    assert root.value["m"].key_line("y") == 1


def test_bad_merge() -> None:
    _, problems = parse("m:\n  <<: 3\n  x: 1\n")
    assert problems == [(2, "'<<' merge in m needs a mapping or a list of mappings")]


def test_aliases_share_one_value() -> None:
    root, problems = parse("a: &x {k: v}\nb: *x\n")
    assert problems == []
    assert root is not None
    assert root.value["a"] is root.value["b"]


def test_recursive_alias_is_a_problem_not_a_hang() -> None:
    root, problems = parse("a: &x [1, *x]\n")
    assert problems == [(1, "recursive YAML alias in a[1]")]
    assert root is not None


def test_complex_key() -> None:
    _, problems = parse("? [a, b]\n: 1\n")
    assert problems == [(1, "a key at the top level must be a plain name, not a list or mapping")]


def test_unknown_tag() -> None:
    _, problems = parse("a: !foo bar\nb: !!python/name:os.system x\n")
    assert [line for line, _ in problems] == [1, 2]
    assert all(m.startswith("cannot read the value of ") for _, m in problems)


def test_syntax_error_line() -> None:
    root, problems = parse("a: 1\nb: [1, 2\nc: 3\n")
    assert root is None
    assert len(problems) == 1
    line, message = problems[0]
    assert line == 3
    assert message.startswith("YAML syntax error: ")
    assert "started at line 2" in message


def test_bad_indentation() -> None:
    root, problems = parse("a:\n  b: 1\n c: 2\n")
    assert root is None
    assert problems[0][0] == 3


def test_unreadable_character() -> None:
    root, problems = parse("a: 1\nb: \x07\n")
    assert root is None
    assert problems == [
        (2, "YAML cannot read this file: special characters are not allowed (character #x0007)")
    ]


def test_empty_document() -> None:
    assert parse("") == (None, [])
    assert parse("# nothing\n") == (None, [])


def test_describe() -> None:
    assert describe(Marked("abc", 1)) == "a string ('abc')"
    assert describe(Marked("x" * 50, 1)) == f"a string ('{'x' * 37}...')"
    assert describe(Marked(3, 1)) == "a number (3)"
    assert describe(Marked(False, 1)) == "a boolean (false)"
    assert describe(Marked(None, 1)) == "an empty value"
    assert describe(Marked([], 1)) == "a list"
    assert describe(Marked({}, 1)) == "a mapping"
    assert describe(None) == "nothing"


REPO = Path(__file__).resolve().parent.parent
CONFIGS = sorted(
    p for p in REPO.glob("**/*.yaml") if ".venv" not in p.parts and ".git" not in p.parts
)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_libyaml_and_pure_python_read_every_config_alike(path: Path, monkeypatch: Any) -> None:
    from roses_app.config import yamlmarks

    assert yamlmarks.HAVE_LIBYAML  # the wheels ship libyaml: the fast path is the one run
    text = path.read_text(encoding="utf-8")
    fast_problems: list[tuple[int, str]] = []
    fast = load(text, lambda line, message: fast_problems.append((line, message)))
    monkeypatch.setattr(yamlmarks, "HAVE_LIBYAML", False)
    pure_problems: list[tuple[int, str]] = []
    pure = load(text, lambda line, message: pure_problems.append((line, message)))
    assert _flat(fast) == _flat(pure)  # values, lines of values and keys, scalars as written
    assert fast_problems == pure_problems


def _flat(marked: Marked | None) -> object:
    """A Marked tree as plain values (Marked compares by identity)."""
    if marked is None:
        return None
    value = marked.value
    if isinstance(value, dict):
        value = {key: _flat(child) for key, child in value.items()}
    elif isinstance(value, list):
        value = [_flat(child) for child in value]
    return (value, marked.line, marked.key_lines, marked.text)


def test_a_syntax_error_keeps_pyyaml_s_message_and_line() -> None:
    problems: list[tuple[int, str]] = []
    assert load("streams:\n  a: [1, 2\n  b: 3\n", lambda *p: problems.append(p)) is None
    # libyaml finds it first; the message shown is PyYAML's, which the tests above pin
    assert problems and problems[0][1].startswith("YAML syntax error: ")
    assert "while parsing a flow sequence" in problems[0][1]


def _deep(levels: int) -> str:
    """A file whose deepest value is ``levels`` deep (the top mapping is 1)."""
    return "a: " + "[" * (levels - 2) + "1" + "]" * (levels - 2) + "\n"


TRICKY = {
    "duplicate key": "streams:\n  a: 1\n  a: 2\n",
    "unknown tag": "streams: !thing {a: 1}\n",
    "bad values": (
        "a: !!int twelve\nb: !!float x\nc: !!bool maybe\nd: !!timestamp day\ne: 2024-13-45\n"
    ),
    "inline merge": "a: {<<: {x: 1, y: 2}, y: 3}\n",
    "complex key": "? [a, b]\n: 1\n",
    "anchor, no alias": "a: &one {x: 1}\nb: 2\n",
    "alias": "a: &one {x: 1}\nb: *one\n",
    "merged alias": "base: &b {x: 1}\nc: {<<: *b, y: 2}\n",
    "alias as key": "a: &k name\n*k : 2\n",
    "key as alias target": "&k name : 1\nb: *k\n",
    "recursive alias": "a: &r [1, *r]\n",
    "empty": "",
    "blank": "\n\n",
    "syntax error": "a: [1, 2\nb: 3\n",
    "199 levels": _deep(199),
    "200 levels": _deep(200),
    "201 levels": _deep(201),
}


@pytest.mark.parametrize(
    "text",
    [*TRICKY.values(), *(p.read_text(encoding="utf-8") for p in CONFIGS)],
    ids=[*TRICKY, *(str(p.relative_to(REPO)) for p in CONFIGS)],
)
def test_libyaml_s_composer_reads_files_with_no_alias_as_the_counting_composer(text: str) -> None:
    """libyaml composes a file with no alias: the same values, lines and problems as
    the composer that counts aliases and nesting, which still reads every other file."""
    from roses_app.config import yamlmarks

    fast_problems: list[tuple[int, str]] = []
    fast = load(text, lambda line, message: fast_problems.append((line, message)))
    counted_problems: list[tuple[int, str]] = []
    counted = yamlmarks._load_counted(text, lambda *problem: counted_problems.append(problem))
    assert _flat(fast) == _flat(counted)
    assert fast_problems == counted_problems


def test_only_files_with_an_alias_or_too_deep_are_composed_by_the_counting_composer(
    monkeypatch: Any,
) -> None:
    from roses_app.config import yamlmarks

    counted: list[str] = []
    real = yamlmarks._load_counted
    monkeypatch.setattr(
        yamlmarks, "_load_counted", lambda text, report: counted.append(text) or real(text, report)
    )
    shipped = (REPO / "feeds.yaml").read_text(encoding="utf-8")
    assert load(shipped, lambda *problem: None) is not None
    assert load(TRICKY["200 levels"], lambda *problem: None) is not None
    assert counted == []  # composed by libyaml
    problems: list[tuple[int, str]] = []
    for name in ("alias", "alias as key", "key as alias target", "201 levels"):
        load(TRICKY[name], lambda *problem: problems.append(problem))
    assert counted == [
        TRICKY[n] for n in ("alias", "alias as key", "key as alias target", "201 levels")
    ]
    assert len(problems) == 1 and "nested more than 200 deep" in problems[0][1]


def test_a_value_its_explicit_tag_does_not_fit_is_reported_at_its_line() -> None:
    problems: list[tuple[int, str]] = []
    tree = load(TRICKY["bad values"], lambda *problem: problems.append(problem))
    assert tree is not None and tree.value["a"].value is None
    advice = "put it in quotes to keep it as text"
    assert problems == [
        (1, f"cannot read the value of a: 'twelve' is not a valid int; {advice}"),
        (2, f"cannot read the value of b: 'x' is not a valid float; {advice}"),
        (3, f"cannot read the value of c: 'maybe' is not a valid bool; {advice}"),
        (4, f"cannot read the value of d: 'day' is not a valid timestamp; {advice}"),
        (5, f"cannot read the value of e: '2024-13-45' is not a valid timestamp; {advice}"),
    ]
