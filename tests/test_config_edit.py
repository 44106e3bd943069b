"""apply_stream: one stream of feeds.yaml changed, every other byte kept, checked first."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from roses_app.config import load_config
from roses_app.config.edit import KEEP_BACKUPS, apply_stream
from roses_app.errors import ConfigError, RosesError

ROOT = Path(__file__).resolve().parent.parent
NEW_FILTER = (
    "filter: {from: worldnews, where: \"contains(lower-case(title), 'quake')\"}  # alerts\n"
    "publish: {title: Quakes}\n"
)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """The shipped feeds.yaml (comments, flow mappings, blank lines) and its xquery/."""
    shutil.copytree(ROOT / "xquery", tmp_path / "xquery")
    path = tmp_path / "feeds.yaml"
    shutil.copy(ROOT / "feeds.yaml", path)
    return path


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def line_of(lines: list[str], start: str) -> int:
    return next(i for i, line in enumerate(lines) if line.startswith(start))


def test_replacing_a_stream_keeps_every_other_byte(config: Path) -> None:
    before = lines_of(config)
    start = line_of(before, "  topics:")
    end = line_of(before, "  # Map with an XPath accessor")  # the next stream's comment
    applied = apply_stream(config, "topics", NEW_FILTER)
    after = lines_of(config)
    assert after[: start + 1] == before[: start + 1]  # the key line stays too
    assert after[-(len(before) - end) :] == before[end:]
    middle = after[start + 1 : len(after) - (len(before) - end)]
    assert middle == [
        "    filter: {from: worldnews, where: \"contains(lower-case(title), 'quake')\"} # alerts\n",
        "    publish: {title: Quakes}\n",
        "\n",
    ]
    assert (applied.stream, applied.removed, applied.path) == ("topics", False, config)
    assert applied.backup.read_text() == "".join(before)
    loaded = load_config(config)
    assert loaded.streams["topics"].publish is not None
    assert loaded.streams["topics"].publish.title == "Quakes"
    assert list(loaded.streams)[1] == "topics"  # its place in the order


def test_a_new_stream_goes_after_the_last_one_and_the_file_is_otherwise_unchanged(
    config: Path,
) -> None:
    before = config.read_text()
    apply_stream(config, "quakes", NEW_FILTER)
    after = config.read_text()
    assert after.startswith(before)
    assert after[len(before) :] == (
        "  quakes:\n"
        "    filter: {from: worldnews, where: \"contains(lower-case(title), 'quake')\"} # alerts\n"
        "    publish: {title: Quakes}\n"
    )
    assert list(load_config(config).streams)[-1] == "quakes"


def test_removing_a_stream_takes_out_its_lines_only(config: Path) -> None:
    before = lines_of(config)
    comment = line_of(before, "  # Map with an XPath accessor")  # it introduces the stream
    end = line_of(before, "  # Map with an XQuery mutator")
    applied = apply_stream(config, "volcano-headlines", None)
    assert applied.removed
    assert lines_of(config) == before[: comment - 1] + before[end - 1 :]
    assert "volcano-headlines" not in load_config(config).streams


def test_the_key_line_and_its_comment_stay_and_crlf_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "feeds.yaml"
    text = (
        "sources:\r\n"
        '  a: {feed: "file:a.xml", every: 1m}   # the only source\r\n'
        "streams:\r\n"
        "  one:        # the first stream\r\n"
        "    filter: {from: a, where: \"title = 'x'\"}\r\n"
        "  two: a      # a view\r\n"
        "# the end\r\n"
    )
    path.write_bytes(text.encode())
    apply_stream(path, "one", "union: [a, two]\npublish: true\n")
    assert path.read_bytes().decode() == text.replace(
        "    filter: {from: a, where: \"title = 'x'\"}\r\n",
        "    union: [a, two]\r\n    publish: true\r\n",
    )
    apply_stream(path, "two", 'filter: {from: a, where: "true()"}')
    assert '  two:\r\n    filter: {from: a, where: "true()"}\r\n# the end\r\n' in (
        path.read_bytes().decode()
    )


def test_a_broken_stream_is_refused_at_its_line_and_nothing_is_written(config: Path) -> None:
    before = config.read_bytes()
    mtime = config.stat().st_mtime_ns
    start = line_of(lines_of(config), "  topics:") + 1
    body = 'filter: {from: worldnews, where: "contains(title, "}\npublish: true\n'
    with pytest.raises(ConfigError) as caught:
        apply_stream(config, "topics", body)
    assert isinstance(caught.value, RosesError)
    [problem] = caught.value.problems
    assert (problem.file, problem.line) == (str(config), start + 1)
    assert "XPath syntax error in filter.where" in problem.message
    assert f"{config}:{start + 1}: XPath syntax error" in str(caught.value)
    assert config.read_bytes() == before and config.stat().st_mtime_ns == mtime
    assert list(config.parent.glob("feeds.yaml.bak-*")) == []

    with pytest.raises(ConfigError) as caught:  # unknown source: the loader's message
        apply_stream(config, "new", "filter: {from: nowhere, where: 'true()'}")
    [problem] = caught.value.problems
    assert "unknown source or stream 'nowhere'" in problem.message
    assert problem.line == len(lines_of(config)) + 2  # where the new stream would be
    with pytest.raises(ConfigError) as caught:  # not YAML
        apply_stream(config, "new", "filter: {from: a\n  where: [")
    assert "YAML syntax error in the body of stream 'new'" in str(caught.value)
    with pytest.raises(ConfigError, match="no stream 'absent' to remove"):
        apply_stream(config, "absent", None)
    assert config.read_bytes() == before


def test_backups_keep_each_version_and_only_the_last_ten(config: Path) -> None:
    versions = [config.read_text()]
    for n in range(KEEP_BACKUPS + 2):
        apply_stream(config, "counter", f'filter: {{from: worldnews, where: "{n} = {n}"}}')
        versions.append(config.read_text())
    backups = sorted(config.parent.glob("feeds.yaml.bak-*"), key=lambda p: p.stat().st_mtime_ns)
    assert len(backups) == KEEP_BACKUPS
    assert [b.read_text() for b in backups] == versions[-KEEP_BACKUPS - 1 : -1]
    assert not list(config.parent.glob(".feeds.yaml.*.tmp"))


def test_the_first_stream_of_a_config_without_streams(tmp_path: Path) -> None:
    path = tmp_path / "feeds.yaml"
    path.write_text('sources:\n  a: {feed: "file:a.xml"}\nsubscriptions: []\n')
    apply_stream(path, "first", 'filter: {from: a, where: "true()"}\n')
    assert path.read_text().endswith(
        'subscriptions: []\nstreams:\n  first:\n    filter: {from: a, where: "true()"}\n'
    )
    assert list(load_config(path).streams) == ["first"]
