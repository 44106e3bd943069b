"""The documentation's feeds.yaml examples load as written, as ``roses check`` loads a
file: the operator table of docs/reference.md (its placeholders X, Y, XPATH, XQ...
filled in, nothing else changed) and the complete YAML blocks of README.md and of every
page of docs/.

A ```yaml block is a whole feeds.yaml when it starts with ``settings:``, ``sources:`` or
``streams:`` (a block of sources alone gets ``streams: {}``); any other block (one that
starts with a stream's body, or is indented in a list) is a fragment, and not loaded.

A time in feeds.yaml may be written unquoted, as the README does: YAML reads
``2024-01-01T00:00:00Z`` as a timestamp, ``2024-01-01`` as a date.
"""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from roses_app.algebra.plan.operators import Aggregate, TimeWindow, Window
from roses_app.config import load_config, parse_config
from roses_app.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
REFERENCE = REPO / "docs" / "reference.md"
# the pages whose YAML examples are checked: the front page and the site's
PAGES = (README, *sorted((REPO / "docs").glob("*.md")))

SOURCES = (
    "sources:\n"
    "  a: {feed: 'https://example.org/a.rss'}\n"
    "  b: {feed: 'https://example.org/b.rss'}\n"
    "  c: {feed: 'https://example.org/c.rss'}\n"
)
# placeholder of the operator table -> a value (markdown escapes '|' as '\|')
PLACEHOLDERS = (
    (r"^NAME$", "a"),
    (r"FILE\.xq or inline text", "xquery/tag-topics.xq"),
    (r"combine: XQ\b", "combine: xquery/related.xq"),
    (r"\bXQ\b", "xquery/digest.xq"),
    (r"\bXPATH\b", '"true()"'),
    (r"(\w+)(\\\|\w+)+", r"\1"),  # kind: inner\|left\|full -> inner
    (r"\bX\b", "a"),
    (r"\bY\b", "b"),
    (r"\bN\b", "5"),
    (r"\[a, b, \.\.\.\]", "[a, b, c]"),
)


def operator_examples() -> list[str]:
    """The code of the first cell of each row of the reference's operator table;
    ``{...}`` (the same arguments as the example before it) written out."""
    lines = REFERENCE.read_text(encoding="utf-8").splitlines()
    table = lines.index("| operator | meaning |")
    examples: list[str] = []
    for line in lines[table + 2 :]:
        if not line.startswith("|"):
            break
        for code in re.findall(r"`([^`]+)`", line[2:].split(" | ")[0]):
            if code.endswith("{...}"):
                before = examples[-1]
                code = code.replace("{...}", before[before.index("{") :])
            examples.append(code)
    return examples


def filled_in(example: str) -> str:
    for pattern, value in PLACEHOLDERS:
        example = re.sub(pattern, value, example)
    return example


EXAMPLES = operator_examples()


def test_the_operator_table_was_found() -> None:
    assert len(EXAMPLES) >= 20
    assert "window: {from: X, time: 1d, every: 1d, start: 2024-01-01T00:00:00Z}" in EXAMPLES


@pytest.mark.parametrize("example", EXAMPLES)
def test_each_example_of_the_operator_table_loads_as_written(example: str) -> None:
    text = f"{SOURCES}streams:\n  s:\n    {filled_in(example)}\n"
    config = parse_config(text, REPO / "feeds.yaml")
    assert "s" in config.streams


def yaml_blocks() -> dict[str, str]:
    """The ```yaml blocks of the pages that are whole feeds.yaml files (not fragments),
    by ``PAGE#N`` (N: the block's rank among the page's YAML blocks, from 1)."""
    found: dict[str, str] = {}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        blocks = re.findall(r"^```yaml\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
        for n, block in enumerate(blocks, 1):
            if re.match(r"(settings|sources|streams):", block):
                found[f"{page.relative_to(REPO)}#{n}"] = block
    return found


BLOCKS = yaml_blocks()


def test_the_yaml_blocks_were_found() -> None:
    pages = {name.split("#")[0] for name in BLOCKS}
    assert {"README.md", "docs/reference.md", "docs/operators.md"} <= pages, pages
    assert len(BLOCKS) >= 10


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_each_yaml_block_of_the_docs_passes_roses_check(name: str, tmp_path: Path) -> None:
    block = BLOCKS[name]
    # the files the examples name, relative to their feeds.yaml
    shutil.copytree(REPO / "xquery", tmp_path / "xquery")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    (tmp_path / "subscriptions.jsonl").write_text("")
    if not re.search(r"^streams:", block, re.MULTILINE):  # e.g. the mail sources' block
        block += "streams: {}\n"
    (tmp_path / "feeds.yaml").write_text(block, encoding="utf-8")
    config = load_config(tmp_path / "feeds.yaml")  # what `roses check` does
    assert config.sources


def window_start(start: str, tmp_path: Path) -> int:
    text = (
        f"{SOURCES}streams:\n  s:\n    aggregate:\n"
        f"      from: {{window: {{from: a, time: 1d, every: 1d, start: {start}}}}}\n"
        "      reduce: xquery/digest.xq\n"
    )
    plan = parse_config(text, REPO / "feeds.yaml").streams["s"].plan
    assert isinstance(plan, Aggregate) and isinstance(plan.input, Window)
    assert isinstance(plan.input.spec, TimeWindow)
    return plan.input.spec.start


def test_a_time_is_the_same_quoted_or_not(tmp_path: Path) -> None:
    new_year = int(datetime(2024, 1, 1, tzinfo=UTC).timestamp()) * 1_000_000
    for written in (
        "2024-01-01T00:00:00Z",  # a YAML timestamp
        '"2024-01-01T00:00:00Z"',  # a string
        "2024-01-01T00:00:00",  # naive: UTC, as YAML says
        '"2024-01-01T00:00:00"',
        "2024-01-01",  # a YAML date: its midnight, UTC
        '"2024-01-01"',
        "2024-01-01T01:00:00+01:00",
        "2024-01-01 00:00:00",  # YAML's other timestamp form
    ):
        assert window_start(written, tmp_path) == new_year, written
    half = new_year + 500_000
    assert window_start("2024-01-01T00:00:00.5Z", tmp_path) == half
    assert window_start("1d", tmp_path) == 86_400 * 1_000_000  # a duration after the epoch


def test_a_bad_time_is_reported_at_its_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        window_start('"2024-13-45T00:00:00Z"', tmp_path)
    assert "feeds.yaml:8: window.start '2024-13-45T00:00:00Z' is not an ISO-8601 time" in str(
        caught.value
    )
