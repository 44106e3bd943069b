"""The names of split feeds: bounded, stable, distinct, one function for URLs and files.

A split value becomes a feed of its own, ``/feeds/NAME/VALUE.rss`` and the static
export's ``feeds/NAME/VALUE.rss``; a long value is named by its beginning and a hash.
"""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import unquote, urlsplit

import feedparser
import httpx
import pytest

from roses_app.cli import main
from roses_app.config import load_config
from roses_app.errors import ConfigError
from roses_app.items import PART_NAME_BYTES, part_filename, part_name, safe_filename
from roses_app.publish import HttpServer, create_app
from roses_app.publish.catalog import Catalog
from roses_app.store import Store

LONG = "x" * 300
LONG_TWIN = "x" * 299 + "y"  # differs from LONG at its end only
MULTIBYTE = "é" * 150  # 300 bytes in UTF-8
EMOJI = "🌋" * 75  # 300 bytes, 4 to a character


@pytest.mark.parametrize(
    "value",
    [LONG, LONG_TWIN, MULTIBYTE, EMOJI, "." + LONG, "a/" * 150],
    ids=["ascii", "ascii-twin", "2-byte", "4-byte", "leading-dot", "slashes"],
)
def test_a_long_value_is_named_by_its_beginning_and_a_hash(value: str) -> None:
    name = part_name(value)
    digest = hashlib.sha256(value.encode()).hexdigest()[:16]
    assert name.endswith("~" + digest)
    beginning = name[: -len(digest) - 1]
    assert value.startswith(beginning) and beginning
    # as much of the beginning as fits
    longer = safe_filename(value[: len(beginning) + 1]) + "~" + digest
    assert len(longer) > PART_NAME_BYTES
    file = part_filename(value)
    assert len(file.encode()) <= PART_NAME_BYTES and "/" not in file
    assert not file.startswith(".")
    assert part_name(value) == name  # the same at every call


def test_short_values_keep_their_names_and_long_ones_stay_distinct() -> None:
    for short in ("sport", "a/b c", "é" * 20, "x" * 100):
        assert part_name(short) == short
    names = {part_name(v) for v in (LONG, LONG_TWIN, MULTIBYTE, "é" * 151)}
    assert len(names) == 4
    # the longest value kept as it is, and the shortest one that is not
    assert part_name("x" * PART_NAME_BYTES) == "x" * PART_NAME_BYTES
    assert part_name("x" * (PART_NAME_BYTES + 1)) != "x" * (PART_NAME_BYTES + 1)
    assert len(part_filename("x" * (PART_NAME_BYTES + 1))) <= PART_NAME_BYTES


def test_a_stream_name_longer_than_100_characters_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "feeds.yaml"
    config.write_text(
        "sources: {src: {feed: 'https://example.org/feed.rss'}}\n"
        "streams:\n"
        f"  {'s' * 101}: {{filter: {{from: src, where: 'true()'}}, publish: true}}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert f"{config}:3: stream name ssssssssssssssssssss... is 101 characters long" in str(
        caught.value
    )


def write_site(folder: Path) -> Path:
    titles = [LONG, LONG_TWIN, MULTIBYTE, "short"]
    items = "".join(
        f"<item><title>{t} rest</title><guid isPermaLink='false'>g{i}</guid></item>"
        for i, t in enumerate(titles)
    )
    (folder / "feed.xml").write_text(
        "<rss version='2.0'><channel><title>n</title><link>http://example.org/</link>"
        f"{items}</channel></rss>",
        encoding="utf-8",
    )
    config = folder / "feeds.yaml"
    config.write_text(
        "settings: {data_dir: ./data, http: {base_url: 'https://roses.example.org'}}\n"
        "sources: {news: {feed: 'file:feed.xml'}}\n"
        "streams:\n"
        "  bykind:\n"
        "    split: {from: news, by: \"substring-before(title, ' ')\"}\n"
        "    publish: true\n"
    )
    return config


@pytest.mark.spark
def test_once_publishes_split_feeds_of_300_character_values(
    tmp_path: Path, spark: object, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_site(tmp_path)
    assert main(["once", "-c", str(config)]) == 0
    assert main(["once", "-c", str(config)]) == 0  # and again: nothing left half-done
    capsys.readouterr()
    public = tmp_path / "data" / "public"
    assert (public / "index.html").is_file()
    opml = ET.parse(public / "feeds.opml")
    urls = sorted(o.get("xmlUrl") or "" for o in opml.iter("outline") if o.get("xmlUrl"))
    assert len(urls) == 4
    folder = public / "feeds" / "bykind"
    for value in (LONG, LONG_TWIN, MULTIBYTE):
        stem = part_filename(value)
        rss = feedparser.parse((folder / f"{stem}.rss").read_bytes())
        assert not rss.bozo and rss.feed.title == f"bykind — {value}"
        assert all((folder / f"{stem}.{fmt}").is_file() for fmt in ("atom", "json", "html"))
        # the URLs the OPML lists name the same feeds
        url = f"https://roses.example.org/feeds/bykind/{part_name(value)}.rss"
        assert url in {unquote(u) for u in urls}
    index = (public / "index.html").read_text("utf-8")
    assert part_name(LONG) in index and part_name(LONG_TWIN) in index
    served = serve_opml_urls(load_config(config), tmp_path / "data" / "store.sqlite", urls)
    assert served == {LONG, LONG_TWIN, MULTIBYTE, "short"}


def serve_opml_urls(config: object, store_path: Path, urls: list[str]) -> set[str]:
    """The titles' values of the feeds the server returns at the OPML's URLs' paths."""
    from roses_app.config.model import Config

    assert isinstance(config, Config)
    store = Store(store_path)
    server = HttpServer(create_app(config, store, lambda: {"ok": True}), "127.0.0.1", 0)
    server.start()
    try:
        seen = set()
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for url in urls:
                response = client.get(urlsplit(url).path)
                assert response.status_code == 200, url
                seen.add(feedparser.parse(response.content).feed.title.split(" — ", 1)[1])
        catalog = Catalog(config, store)
        assert catalog.lookup("bykind", part_name(LONG)) is not None  # unquoted too
        return seen
    finally:
        server.stop()
        store.close()
