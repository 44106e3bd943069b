"""Mail message -> canonical item, data-driven.

Each ``tests/data/mail/NAME.eml`` has a sibling ``NAME.expected.xml``: the item the
message must give (pretty-printed; compared without the indentation).  Run with
``ROSES_REGEN_MAIL=1`` to rewrite the expectations after a deliberate change, and
review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lxml import etree

from roses_app.connectors.mail.xmlize import (
    decode_bytes,
    decode_words,
    message_hash,
    text_to_html,
    xmlize_message,
)
from roses_app.items import parse_item, rfc822

MAIL = Path(__file__).resolve().parent / "data" / "mail"
CASES = sorted(MAIL.glob("*.eml"))
ORDER = ["title", "link", "description", "pubDate", "guid", "author", "category", "enclosure"]


def canonical(xml: str | bytes) -> bytes:
    parser = etree.XMLParser(remove_blank_text=True, resolve_entities=False, no_network=True)
    data = xml.encode() if isinstance(xml, str) else xml
    return etree.tostring(etree.fromstring(data, parser))


def check_item(xml: str, published: int | None) -> etree._Element:
    """Well-formed, canonical order, pubDate iff published."""
    item = parse_item(xml)
    assert item.tag == "item"
    tags = [child.tag for child in item]
    assert tags == sorted(tags, key=ORDER.index), tags
    assert item.findtext("guid"), "every mail item has a guid"
    if published is None:
        assert item.find("pubDate") is None
    else:
        assert item.findtext("pubDate") == rfc822(published)
    return item


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_message_gives_the_expected_item(path: Path) -> None:
    xml, published = xmlize_message(path.read_bytes())
    check_item(xml, published)
    expected = path.with_suffix(".expected.xml")
    if os.environ.get("ROSES_REGEN_MAIL"):
        pretty = etree.tostring(etree.fromstring(canonical(xml)), pretty_print=True)
        expected.write_bytes(pretty)
    assert canonical(xml) == canonical(expected.read_bytes())


def test_every_case_has_an_expectation() -> None:
    assert len(CASES) >= 8
    for path in CASES:
        assert path.with_suffix(".expected.xml").exists(), path


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_line_endings_do_not_matter(path: Path) -> None:
    raw = path.read_bytes()
    crlf = raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    assert xmlize_message(crlf) == xmlize_message(raw)
    assert message_hash(crlf) == message_hash(raw)


def test_mapping_details() -> None:
    xml, published = xmlize_message((MAIL / "plain_encoded_words.eml").read_bytes())
    item = check_item(xml, published)
    assert item.findtext("title") == "Café news: € 5 off (folded)"
    assert item.findtext("author") == "renee@example.org (Renée Dupré)"
    assert item.findtext("guid") == "caf-1@example.org"
    assert item.find("guid").get("isPermaLink") == "false"  # type: ignore[union-attr]
    assert item.findtext("category") == "cafe-news.example.org"
    assert published == 1704184200 * 1_000_000  # 09:30 +0100
    description = item.findtext("description") or ""
    assert "café est à 5 €" in description
    assert "&lt;aujourd&#x27;hui&gt; &amp; demain" in description  # text is escaped HTML


def test_html_is_preferred_and_sanitized() -> None:
    xml, _ = xmlize_message((MAIL / "html_alternative.eml").read_bytes())
    description = parse_item(xml).findtext("description") or ""
    assert "Digest – week 12" in description  # windows-1252 en dash
    assert '<a href="https://example.com/a"' in description
    for bad in ("<script", "alert(", "onclick", "onload", "javascript:", "<style", "plain text"):
        assert bad not in description


def test_attachments_are_metadata_only() -> None:
    xml, _ = xmlize_message((MAIL / "attachments.eml").read_bytes())
    item = parse_item(xml)
    enclosures = [(e.get("url"), e.get("type"), e.get("length")) for e in item.iter("enclosure")]
    assert enclosures == [
        ("cid:chart@example.org", "image/png", "108"),
        ("attachment:R%C3%A9sum%C3%A9%20final.pdf", "application/pdf", str(9 + 1024)),
        ("attachment:notes.txt", "text/plain", "12"),
        ("attachment:part-4", "message/rfc822", enclosures[3][2]),
    ]
    assert "Forwarded body" not in xml and "PDF-1.4" not in xml


def test_missing_message_id_and_date() -> None:
    raw = (MAIL / "no_date_no_message_id.eml").read_bytes()
    xml, published = xmlize_message(raw)
    assert published is None
    assert parse_item(xml).findtext("guid") == message_hash(raw)
    _, published = xmlize_message((MAIL / "broken_date.eml").read_bytes())
    assert published is None


def test_charsets_never_crash() -> None:
    assert decode_bytes(b"caf\xc3\xa9", None) == "café"
    assert decode_bytes(b"caf\xe9", None) == "café"  # undeclared, not UTF-8: Windows-1252
    assert decode_bytes(b"caf\xe9 na\xc3\xafve", "utf-8") == "café naïve"  # byte by byte
    assert decode_bytes(b"caf\xe9", "no-such-charset") == "café"
    assert decode_bytes(b"5 \x80", "iso-8859-1") == "5 €"  # read as Windows-1252
    assert decode_bytes(b"aGk=", "base64_codec") == "aGk="  # not a text encoding
    assert decode_bytes(b"\x1b$B\xff\xff", "iso-2022-jp") == "\ufffd\ufffd"
    assert decode_bytes(b"+AGk-", "utf-7") == "i"
    assert decode_bytes(b"+AGk", "utf-7")  # malformed: replaced, no exception
    assert decode_words("=?utf-8?b?w6k=?= =?utf-8?b?broken!!?= =?x-unknown?q?a=41_b?=") == (
        "é =?utf-8?b?broken!!?= aA b"
    )
    assert decode_words("=?utf-8?q?a?=  \n =?utf-8?q?b?=") == "ab"  # RFC 2047 6.2
    assert decode_words("x =?utf-8*fr?q?caf=C3=A9?= y") == "x café y"
    xml, _ = xmlize_message((MAIL / "wrong_charsets.eml").read_bytes())
    item = parse_item(xml)
    assert item.findtext("title") == "Café raw utf-8 and é latin-1 in a header"
    description = item.findtext("description") or ""
    assert "latin-1: café" in description and "naïve" in description
    assert "à bientôt" in description


def test_iso_2022_jp() -> None:
    xml, _ = xmlize_message((MAIL / "iso2022jp.eml").read_bytes())
    item = parse_item(xml)
    assert item.findtext("title") == "こんにちは"
    assert item.findtext("author") == "jp@example.jp (日本語)"
    assert "こんにちは" in (item.findtext("description") or "")


def test_text_to_html() -> None:
    assert text_to_html("a <b>\nc\n\n\nd & e") == "<p>a &lt;b&gt;<br>\nc</p>\n<p>d &amp; e</p>"
    assert text_to_html("  \n ") == ""


def test_output_depends_only_on_the_message() -> None:
    raw = (MAIL / "no_date_no_message_id.eml").read_bytes()
    assert xmlize_message(raw) == xmlize_message(bytes(raw))


@pytest.mark.parametrize("levels", [60, 2000])
def test_absurd_nesting_still_gives_an_item(levels: int) -> None:
    deep = b"".join(
        b'Content-Type: multipart/mixed; boundary="b%d"\n\n--b%d\n' % (i, i) for i in range(levels)
    )
    raw = b"From: x@example.org\nSubject: deep\n" + deep + b"Content-Type: text/plain\n\nx\n"
    xml, published = xmlize_message(raw)
    item = check_item(xml, published)
    assert item.findtext("title") == "deep"
    assert item.findtext("guid") == message_hash(raw)
