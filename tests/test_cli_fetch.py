"""``roses fetch URL``: the items of one feed, as the connector makes them, on stdout."""

from __future__ import annotations

import re
import time
from pathlib import Path

from lxml import etree
from test_connector_support import FeedServer, Reply, rss

from roses_app.cli import main
from roses_app.config.model import FeedSource, FetchSettings
from roses_app.connectors.poller import Poller
from roses_app.connectors.preview import format_preview, preview
from roses_app.connectors.state import StateStore
from roses_app.items import MICROS, parse_item

BODY = rss(("a", "Volcano erupts"), ("b", "Football final"), title="Test -- feed")
PUBLISHED = 1055217600 * MICROS  # the pubDate of rss()'s items
TIMES = re.compile(r"<!-- item (\d) of 2; ts (\d+); published 2003-06-10T04:00:00Z = (\d+) µs -->")


def items_of(output: str) -> list[etree._Element]:
    """The printed items, each parsed back (comments dropped)."""
    blocks = re.findall(r"^<item\b.*?^</item>$", output, flags=re.MULTILINE | re.DOTALL)
    return [parse_item(block) for block in blocks]


def test_fetch_prints_each_item_with_its_times(feed_server: FeedServer, capsys):
    feed_server.routes["/feed"] = Reply(
        200, BODY, {"Content-Type": "application/rss+xml"}, gzip=True
    )
    before = time.time()
    assert main(["fetch", feed_server.url("/feed")]) == 0
    out = capsys.readouterr().out
    # "--" cannot stand in an XML comment
    assert out.startswith(f'<!-- {feed_server.url("/feed")}: "Test - - feed" (rss20), 2 item(s); ')
    items = items_of(out)
    assert [i.findtext("title") for i in items] == ["Volcano erupts", "Football final"]
    assert [i.findtext("guid") for i in items] == ["a", "b"]
    assert all(i.findtext("source") == "Test -- feed" for i in items)
    times = TIMES.findall(out)
    assert [n for n, _, _ in times] == ["1", "2"]
    assert {int(published) for _, _, published in times} == {PUBLISHED}
    (ts,) = {int(ts) for _, ts, _ in times}  # one ingest time per fetch, as in the spool
    assert before * MICROS <= ts <= time.time() * MICROS
    assert "\n  <title>Volcano erupts</title>\n" in out  # pretty-printed


def test_fetch_prints_what_the_poller_spools(tmp_path: Path, capsys):
    feed = tmp_path / "feed.xml"
    feed.write_bytes(BODY)
    assert main(["fetch", str(feed)]) == 0  # a plain local path
    printed = [etree.tostring(i, encoding="unicode") for i in items_of(capsys.readouterr().out)]
    spooled: list[tuple[str, int | None]] = []
    with StateStore(":memory:") as store:
        poller = Poller(store, FetchSettings(), time.time, lambda _, items: spooled.extend(items))
        assert poller.poll(FeedSource("local", feed.as_uri(), 60.0)).status == "ok"
        poller.close()
    # the same items; pretty printing only adds whitespace between elements
    assert [re.sub(r">\s+<", "><", p) for p in printed] == [xml for xml, _ in spooled]


def test_fetch_reports_what_a_poll_would_refuse(feed_server: FeedServer, tmp_path: Path, capsys):
    feed_server.routes["/page"] = Reply(200, b"<html><body>hello</body></html>", gzip=True)
    assert main(["fetch", feed_server.url("/page")]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "not an RSS/Atom feed" in captured.err


CONFIG = """
settings: {fetch: {max_bytes: MAX}}
sources: {local: {feed: "file:feed.xml"}}
streams: {all: {filter: {from: local, where: "true()"}}}
"""


def test_fetch_uses_the_settings_and_folder_of_a_config(tmp_path: Path, capsys):
    (tmp_path / "feed.xml").write_bytes(BODY)
    config = tmp_path / "feeds.yaml"
    config.write_text(CONFIG.replace("MAX", "1MB"))
    # file: paths are relative to the config, as for its sources
    assert main(["fetch", "-c", str(config), "file:feed.xml"]) == 0
    assert len(items_of(capsys.readouterr().out)) == 2
    config.write_text(CONFIG.replace("MAX", "100"))
    assert main(["fetch", "-c", str(config), "file:feed.xml"]) == 1
    assert "over the limit of 100 bytes (fetch.max_bytes)" in capsys.readouterr().err


def test_a_recovered_document_says_so(tmp_path: Path):
    feed = tmp_path / "cut.xml"
    feed.write_bytes(BODY[: BODY.index(b"</item>") + 7])
    text = format_preview(preview(str(feed), FetchSettings()))
    assert "<!-- not well-formed, recovered: " in text
    assert [i.findtext("title") for i in items_of(text)] == ["Volcano erupts"]
