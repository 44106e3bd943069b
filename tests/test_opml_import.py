"""OPML import, data-driven: ``sources: {opml: FILE}`` and ``roses import FILE``.

``tests/data/opml``: feed readers' exports (``feedly.opml`` as Feedly writes one,
with folders, a feed in two folders, a ``category`` attribute, non-ASCII titles,
title clashes and outlines that are no feed; ``newsboat.opml`` written by
``newsboat -e``), each next to what ``roses import`` prints (``.expected``, and
``.expected.stderr`` for the outlines skipped); ``feeds.yaml``, a config that mixes an
import with sources of its own, next to the sources it gives (``feeds.expected``);
``bad.yaml``, OPML files that are missing, broken, not OPML or hostile, next to the
problems ``roses check`` reports (``bad.expected``, " ... " standing for any text).
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roses_app.cli import main
from roses_app.config import FeedSource, load_config, parse_config
from roses_app.config.model import FetchSettings, MailSource
from roses_app.config.opml import source_name
from roses_app.connectors.poller import Poller
from roses_app.connectors.state import StateStore
from roses_app.errors import ConfigError
from roses_app.items import parse_item, serialize

DATA = Path(__file__).resolve().parent / "data" / "opml"
EXPORTS = sorted(p.stem for p in DATA.glob("*.opml") if (DATA / f"{p.stem}.expected").exists())
REPO = Path(__file__).resolve().parent.parent


def feed_sources(sources: dict[str, object]) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(name, s.url, s.categories) for name, s in sources.items() if isinstance(s, FeedSource)]


def test_every_export_has_expectations() -> None:
    assert EXPORTS == ["feedly", "newsboat"]


@pytest.mark.parametrize("name", EXPORTS)
def test_roses_import_prints_the_sources_block(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(DATA)
    assert main(["import", f"{name}.opml"]) == 0
    out, err = capsys.readouterr()
    assert out == (DATA / f"{name}.expected").read_text()
    stderr = DATA / f"{name}.expected.stderr"
    assert err == (stderr.read_text() if stderr.exists() else "")


@pytest.mark.parametrize("name", EXPORTS)
def test_the_printed_block_and_the_import_give_the_same_sources(name: str, tmp_path: Path) -> None:
    """Pasting what ``roses import`` prints into feeds.yaml is the same as
    ``sources: {opml: FILE}``."""
    streams = "streams:\n  s: {union: [lwn-net]}\n"
    shutil.copy(DATA / f"{name}.opml", tmp_path / "subscriptions.opml")
    imported = parse_config("sources:\n  opml: subscriptions.opml\n" + streams, tmp_path / "a.yaml")
    block = (DATA / f"{name}.expected").read_text()
    pasted = parse_config(block + streams, tmp_path / "b.yaml")
    assert feed_sources(imported.sources) == feed_sources(pasted.sources)
    assert len(imported.sources) == block.count("{feed: ")


def test_a_config_mixing_an_import_and_its_own_sources(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="roses_app.config.opml"):
        config = load_config(DATA / "feeds.yaml")
    got = [
        f"{name} {url} {json.dumps(list(categories))}"
        for name, url, categories in feed_sources(config.sources)
    ]
    assert got == (DATA / "feeds.expected").read_text().splitlines()
    assert config.sources["guardian"].every_seconds == 600.0  # its own, not the OPML's copy
    imported = config.sources["hacker-news"]
    assert isinstance(imported, FeedSource)
    assert imported.every_seconds == config.settings.fetch.default_every_seconds
    assert (imported.origin.file, imported.origin.line) == (str(DATA / "feedly.opml"), 11)
    assert isinstance(config.sources["letters"], MailSource)  # a mail source beside them
    # Each outline skipped is reported with the line in feeds.yaml and in the OPML file.
    prefix = f"{DATA / 'feeds.yaml'}:5: sources.opml: "
    warnings = [r.getMessage() for r in caplog.records]
    expected = (DATA / "feedly.expected.stderr").read_text().splitlines()
    assert warnings == [prefix + line for line in expected]


def test_roses_check_on_a_config_using_an_import() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "roses_app.cli", "check", "-c", str(DATA / "feeds.yaml")],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{DATA / 'feeds.yaml'}: OK (13 sources, 2 streams)"
    assert "feeds.yaml:5: sources.opml: feedly.opml:29: outline 'Read later'" in done.stderr


def _matches(expected: str, actual: str) -> bool:
    """``expected`` equals ``actual``, where each " ... " in it stands for any text."""
    parts = expected.split(" ... ")
    if len(parts) == 1:
        return actual == expected
    if not (actual.startswith(parts[0]) and actual.endswith(parts[-1])):
        return False
    position = len(parts[0])
    for part in parts[1:-1]:
        position = actual.find(part, position)
        if position < 0:
            return False
        position += len(part)
    return position <= len(actual) - len(parts[-1])


def test_bad_opml_files_are_reported_and_the_rest_goes_on() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(DATA / "bad.yaml")
    got = [f"{p.line}: {p.message}" for p in caught.value.problems]
    expected = (DATA / "bad.expected").read_text().splitlines()
    assert len(got) == len(expected), "\n".join(got)
    for want, actual in zip(expected, got, strict=True):
        assert _matches(want, actual), f"{want!r} != {actual!r}"
    # newsboat.opml, after the broken files, was imported: the stream's references to
    # its feeds are no problem; nothing of /etc/passwd reached a message.
    assert not any("unknown" in line or "root:" in line for line in got)


def test_roses_import_of_a_broken_file_fails_with_its_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(DATA)
    assert main(["import", "broken.opml"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("roses: broken.opml:7: not valid XML (")


@pytest.mark.parametrize(
    ("title", "url", "name"),
    [
        ("Ars Technica", "https://feeds.arstechnica.com/arstechnica/index", "ars-technica"),
        ("Café Crème — Déjà vu", "https://x.org/rss", "cafe-creme-deja-vu"),
        ("", "https://www.lwn.net/headlines/rss", "lwn-net"),
        ("日本語", "https://www3.nhk.or.jp/rss/news/cat0.xml", "www3-nhk-or-jp"),
        ("", "file:///srv/feeds/big-picture.xml", "big-picture"),
        ("!!!", "file:///", "feed"),
    ],
)
def test_source_names(title: str, url: str, name: str) -> None:
    assert source_name(title, url) == name


def test_imported_items_carry_the_folders_as_categories(tmp_path: Path) -> None:
    """A source imported from a folder polls its feed (here a local file, relative to
    the OPML file), and each item is the feed's item with the folders and categories
    of the outline after its own categories (those it already has, once)."""
    (tmp_path / "exports").mkdir()
    shutil.copy(REPO / "examples" / "feeds" / "bigpicture.xml", tmp_path / "exports")
    shutil.copy(REPO / "examples" / "feeds" / "bigpicture.xml", tmp_path / "plain.xml")
    (tmp_path / "exports" / "subscriptions.opml").write_text(
        '<opml version="2.0"><body><outline text="Photos &amp; Art">'
        '<outline type="rss" text="The Big Picture" xmlUrl="file:bigpicture.xml"'
        ' category="iceland,/Travel/North"/></outline></body></opml>'
    )
    config = parse_config(
        "sources:\n  opml: exports/subscriptions.opml\n"
        "  plain: {feed: 'file:plain.xml'}\n"
        "streams: {s: {union: [plain, the-big-picture]}}\n",
        tmp_path / "feeds.yaml",
    )
    source, plain = config.sources["the-big-picture"], config.sources["plain"]
    assert isinstance(source, FeedSource) and isinstance(plain, FeedSource)
    assert source.categories == ("Photos & Art", "iceland", "Travel", "North")
    got: dict[str, list[str]] = {"plain": [], "the-big-picture": []}
    poller = Poller(
        StateStore(tmp_path / "state.sqlite"),
        FetchSettings(),
        lambda: 1_700_000_000.0,
        lambda name, items: got[name].extend(xml for xml, _ in items),
    )
    assert poller.poll(plain).status == "ok" and poller.poll(source).status == "ok"
    assert len(got["plain"]) == len(got["the-big-picture"]) > 0
    own_iceland = 0
    for before, after in zip(got["plain"], got["the-big-picture"], strict=True):
        own = [c.text for c in parse_item(before).findall("category")]
        own_iceland += "iceland" in own
        item = parse_item(after)
        added = [c for c in source.categories if c not in own]
        assert [c.text for c in item.findall("category")] == own + added
        for category in item.findall("category")[len(own) :]:
            item.remove(category)  # without what was added: the feed's item
        assert serialize(item) == before
    assert own_iceland > 0  # some items had it already: it is not repeated


def test_a_source_named_opml_is_still_a_source(tmp_path: Path) -> None:
    config = parse_config(
        "sources:\n  opml: {feed: 'https://example.org/opml-news.rss', categories: OPML}\n"
        "streams: {s: opml}\n",
        tmp_path / "feeds.yaml",
    )
    assert feed_sources(config.sources) == [
        ("opml", "https://example.org/opml-news.rss", ("OPML",))
    ]
