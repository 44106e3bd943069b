"""A document of more entries than settings.fetch.max_items is cut before feedparser
reads it (roses_app/connectors/entrycut.py): the first entries are taken as a whole
parse would take them, and feedparser never sees the rest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import feedparser
import pytest
from lxml import etree

from roses_app.config import parse_config
from roses_app.config.model import FetchSettings
from roses_app.connectors import xmlize
from roses_app.connectors.entrycut import cut_entries
from roses_app.connectors.xmlize import parse_feed
from roses_app.errors import ConfigError
from roses_app.items import parse_item

URL = "https://example.org/feed"


def rss(n: int, title: str = "item {k}", encoding: str = "utf-8", tail: str = "") -> bytes:
    items = "".join(
        f"<item><title>{title.format(k=k)}</title><guid>g{k}</guid></item>\n" for k in range(n)
    )
    text = (
        f'<?xml version="1.0" encoding="{encoding}"?>\n<rss version="2.0"><channel>'
        f"<title>T</title><link>https://example.org/</link>{items}{tail}</channel></rss>\n"
    )
    return text.encode(encoding)


def atom(n: int) -> bytes:
    entries = "".join(
        f"<entry><id>urn:e{k}</id><title>e{k}</title><updated>2024-01-01T00:00:00Z</updated>"
        "</entry>"
        for k in range(n)
    )
    return (
        '<feed xmlns="http://www.w3.org/2005/Atom"><id>urn:f</id><title>F</title>'
        f"<updated>2024-01-01T00:00:00Z</updated>{entries}</feed>"
    ).encode()


def rdf(n: int) -> bytes:
    """RSS 1.0: items beside the channel, under a prefixed root."""
    items = "".join(
        f'<item rdf:about="https://example.org/{k}"><title>r{k}</title>'
        f"<link>https://example.org/{k}</link></item>"
        for k in range(n)
    )
    return (
        '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
        'xmlns="http://purl.org/rss/1.0/"><channel rdf:about="https://example.org/">'
        f"<title>R</title><link>https://example.org/</link></channel>{items}</rdf:RDF>"
    ).encode()


def guids(body: bytes, max_items: int) -> list[str]:
    """The guids taken (made absolute against URL: their last segment)."""
    entries = parse_feed(body, URL, {}, max_items).entries
    return [(parse_item(xml).findtext("guid") or "").rpartition("/")[2] for xml, _ in entries]


@pytest.mark.parametrize(
    ("body", "tag"),
    [(rss(25), "item"), (atom(25), "{http://www.w3.org/2005/Atom}entry"), (rdf(25), None)],
    ids=["rss", "atom", "rdf"],
)
def test_a_cut_document_is_well_formed_with_the_first_entries(body: bytes, tag: str | None):
    cut = cut_entries(body, 10)
    assert cut.entries == 25
    root = etree.fromstring(cut.body)  # well-formed: the open elements are closed again
    name = tag or "{http://purl.org/rss/1.0/}item"
    assert len(list(root.iter(name))) == 10
    assert cut.body.startswith(body[:200])


@pytest.mark.parametrize("body", [rss(25), atom(25), rdf(25)], ids=["rss", "atom", "rdf"])
def test_the_first_entries_are_the_ones_a_whole_parse_takes(body: bytes) -> None:
    whole = parse_feed(body, URL, {}, 1000)
    cut = parse_feed(body, URL, {}, 10)
    assert cut.entries == whole.entries[:10]
    assert (cut.left_out, whole.left_out, cut.title) == (15, 0, whole.title)


def test_feedparser_never_reads_the_entries_past_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[int] = []
    parse = feedparser.parse

    def counting(stream: Any, **kwargs: Any) -> Any:
        result = parse(stream, **kwargs)
        seen.append(len(result.entries))
        return result

    monkeypatch.setattr(xmlize.feedparser, "parse", counting)
    parsed = parse_feed(rss(20_000), URL, {}, 100)
    assert seen == [100] and len(parsed.entries) == 100 and parsed.left_out == 19_900


@pytest.mark.parametrize("make", [rss, atom, rdf], ids=["rss", "atom", "rdf"])
def test_feedparser_reads_a_document_in_parts_of_parse_chunk_entries(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = make(50)
    whole = parse_feed(body, URL, {}, 30)
    seen: list[int] = []
    parse = feedparser.parse

    def counting(stream: Any, **kwargs: Any) -> Any:
        result = parse(stream, **kwargs)
        seen.append(len(result.entries))
        return result

    monkeypatch.setattr(xmlize.feedparser, "parse", counting)
    monkeypatch.setattr(xmlize, "PARSE_CHUNK", 7)
    parts = parse_feed(body, URL, {}, 30)
    assert seen == [7, 7, 7, 7, 2]
    assert parts == whole and len(parts.entries) == 30 and parts.left_out == 20


def test_what_the_channel_says_after_its_entries_is_read_from_the_last_part(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub = (
        '<atom:link xmlns:atom="http://www.w3.org/2005/Atom" rel="hub" href="https://h.example/"/>'
    )
    monkeypatch.setattr(xmlize, "PARSE_CHUNK", 4)
    parsed = parse_feed(rss(10, tail=hub), URL, {}, 100)
    assert parsed.hub == "https://h.example/" and len(parsed.entries) == 10


@pytest.mark.parametrize("n", [8, 40])
def test_a_document_in_a_file_is_parsed_as_its_bytes(tmp_path: Path, n: int) -> None:
    from roses_app.connectors.poller import parse_document, parse_document_file

    body = rss(n, tail="<ttl>90</ttl>")
    path = tmp_path / "doc.xml"
    path.write_bytes(body)
    with open(path, "rb") as stream:
        assert parse_feed(stream, URL, {}, 20) == parse_feed(body, URL, {}, 20)
    from_file = parse_document_file(str(path), URL, {}, ("c",), 20)
    assert from_file == parse_document(body, URL, {}, ("c",), 20)
    assert from_file.hints.ttl == 90 * 60.0


def test_a_document_within_the_limit_is_left_as_it_is() -> None:
    body = rss(10)
    cut = cut_entries(body, 10)
    assert cut.body is body and cut.entries == 10


def test_an_encoding_expat_does_not_know_is_cut_all_the_same() -> None:
    body = rss(30, title="Новость {k}", encoding="windows-1251")
    cut = cut_entries(body, 5)
    assert cut.entries == 30 and cut.body.count(b"<item>") == 5
    titles = [parse_item(xml).findtext("title") for xml, _ in parse_feed(body, URL, {}, 5).entries]
    assert titles == [f"Новость {k}" for k in range(5)]


@pytest.mark.parametrize("encoding", ["shift_jis", "gb18030", "big5"])
def test_a_multi_byte_encoding_is_cut_all_the_same(encoding: str) -> None:
    body = rss(30, title="新聞 {k}", encoding=encoding)
    assert cut_entries(body, 5).body.count(b"<item>") == 5
    titles = [parse_item(xml).findtext("title") for xml, _ in parse_feed(body, URL, {}, 5).entries]
    assert titles == [f"新聞 {k}" for k in range(5)]


def test_a_stateful_encoding_is_not_cut() -> None:
    body = rss(30, title="新聞 {k}", encoding="iso-2022-jp")
    assert cut_entries(body, 5).body is body
    assert guids(body, 5) == [f"g{k}" for k in range(5)]


def test_items_nested_in_an_item_are_not_entries() -> None:
    nested = "<x:related xmlns:x='urn:x'><x:item>a</x:item><x:item>b</x:item></x:related>"
    body = rss(6, title="t{k}" + nested)
    assert cut_entries(body, 3).entries == 6
    assert guids(body, 3) == ["g0", "g1", "g2"]


@pytest.mark.parametrize(
    "body",
    [
        rss(30).replace(b"<title>item 2</title>", b"<title>item 2<br></title>"),
        rss(30, encoding="utf-16"),  # closing tags would need its encoding
    ],
    ids=["not well-formed before the cut", "utf-16"],
)
def test_a_document_expat_cannot_cut_is_parsed_whole_then_limited(body: bytes) -> None:
    cut = cut_entries(body, 5)
    assert cut.body is body and cut.entries is None
    assert guids(body, 5) == [f"g{k}" for k in range(5)]


def test_a_document_not_well_formed_past_the_cut_is_cut() -> None:
    body = rss(30)[:-30] + b"<broken"  # feedparser would have to recover the whole
    cut = cut_entries(body, 5)
    assert cut.body.count(b"<item>") == 5 and etree.fromstring(cut.body) is not None
    assert cut.entries is not None and 5 < cut.entries <= 30  # counted up to the error
    assert guids(body, 5) == [f"g{k}" for k in range(5)]


def test_channel_elements_after_the_entries_go_with_the_rest() -> None:
    hub = (
        '<atom:link xmlns:atom="http://www.w3.org/2005/Atom" rel="hub" href="https://h.example/"/>'
    )
    assert parse_feed(rss(3, tail=hub), URL, {}, 5).hub == "https://h.example/"
    assert parse_feed(rss(6, tail=hub), URL, {}, 5).hub is None  # documented


def test_max_items_is_a_fetch_setting(tmp_path: Path) -> None:
    rest = (
        "sources:\n  a: {feed: 'https://example.org/a'}\n"
        "streams:\n  s: {filter: {from: a, where: 'true()'}}\n"
    )

    def fetch(value: str) -> FetchSettings:
        text = f"settings:\n  fetch: {{{value}}}\n{rest}"
        return parse_config(text, tmp_path / "feeds.yaml").settings.fetch

    assert fetch("max_items: 50").max_items == 50
    assert fetch("").max_items == xmlize.MAX_ENTRIES == 10_000
    with pytest.raises(ConfigError, match=r"feeds.yaml:2: .*max_items"):
        fetch("max_items: 0")
