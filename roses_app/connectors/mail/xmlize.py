"""One mail message (raw RFC 5322 bytes) -> one canonical ``<item>``.

The mapping, children in the feed connector's canonical order::

    title        Subject, RFC 2047 decoded, whitespace folded
    description  the body: the first text/html part (sanitized with nh3 when it is
                 installed, else reduced to its text), else the first text/plain part
                 (escaped, paragraphs and line breaks kept), as HTML text
    pubDate      Date (missing or unreadable: no pubDate, and the published time is
                 None, so the item is timed by its ingest time)
    guid         Message-ID without its angle brackets (isPermaLink="false");
                 missing: the SHA-256 of the raw message.  A mail source then
                 tells apart different mails that share one Message-ID
                 (:mod:`~roses_app.connectors.mail.identity`)
    author       From as ``address (Name)``, ``address`` or ``Name``
    category     the list identifier of List-Id
    enclosure*   one per attachment, inline image or attached message: url
                 ``cid:CONTENT-ID`` or ``attachment:FILE-NAME``, type and decoded length;
                 the content itself is not kept

Messages are parsed with the ``compat32`` policy, which never raises on broken MIME
(missing boundaries, bad base64, 8-bit headers: each becomes a defect), and every
charset is decoded with ``errors="replace"``: an unknown or wrong charset costs
replacement characters, never the message.  Line endings are normalized to LF first,
so a message gives the same item whether it came from a Maildir file, an mbox, IMAP
(CRLF) or SMTP.  The output depends only on the message bytes.
"""

from __future__ import annotations

import email
import hashlib
import html
import logging
import re
from email import policy
from email.message import Message
from email.parser import BytesParser
from email.utils import parseaddr, parsedate_to_datetime
from types import ModuleType
from urllib.parse import quote

import lxml.html
from lxml import etree

from roses_app.connectors.mail.charsets import decode_bytes, decode_words, unescape_8bit
from roses_app.connectors.xmlize import clean_text
from roses_app.items import micros_of, rfc822

try:  # nh3 sanitizes HTML bodies; without it they are reduced to their text
    import nh3 as _nh3
except ImportError:  # pragma: no cover - nh3 is a declared dependency
    _nh3 = None  # type: ignore[assignment]
nh3: ModuleType | None = _nh3

log = logging.getLogger(__name__)

_SPACE = re.compile(r"\s+")
_ANGLE = re.compile(r"<([^<>]*)>")
_BLANK_LINES = re.compile(r"\n[ \t]*\n+")


def normalize(raw: bytes) -> bytes:
    """``raw`` with CRLF line endings turned into LF."""
    return raw.replace(b"\r\n", b"\n")


def message_hash(raw: bytes) -> str:
    """SHA-256 (hex) of the message with LF line endings: the guid of a message without
    a Message-ID."""
    return hashlib.sha256(normalize(raw)).hexdigest()


def xmlize_message(raw: bytes) -> tuple[str, int | None]:
    """The message as a serialized ``<item>`` and its Date in µs (None when unusable)."""
    item, published = message_item(raw)
    return etree.tostring(item, encoding="unicode"), published


def message_item(raw: bytes) -> tuple[etree._Element, int | None]:
    """The message as an ``<item>`` element and its Date in µs (None when unusable)."""
    data = normalize(raw)
    try:
        msg = email.message_from_bytes(data, policy=policy.compat32)
        body = _Body(msg)
    except RecursionError:  # absurdly deep MIME nesting: headers, and the rest as text
        msg = BytesParser(policy=policy.compat32).parsebytes(data, headersonly=True)
        body = _Body(msg)
    headers = _Headers(msg)
    root = etree.Element("item")

    def add(tag: str, text: str, attrs: dict[str, str] | None = None) -> None:
        child = etree.SubElement(root, tag)
        for key, value in (attrs or {}).items():
            child.set(key, clean_text(value))
        if text:
            child.text = clean_text(text)

    title = _fold(headers.text("subject"))
    if title:
        add("title", title)

    description = body.description()
    if description.strip():
        add("description", description)

    published = _date_micros(headers.text("date"))
    if published is not None:
        add("pubDate", rfc822(published))

    guid = _message_id(headers.text("message-id")) or hashlib.sha256(data).hexdigest()
    add("guid", guid, {"isPermaLink": "false"})

    author = _author(headers.raw("from"))
    if author:
        add("author", author)

    list_id = _list_id(headers.text("list-id"))
    if list_id:
        add("category", list_id)

    for url, kind, length in body.enclosures():
        add("enclosure", "", {"url": url, "type": kind, "length": str(length)})

    return root, published


# -- headers ---------------------------------------------------------------------------


class _Headers:
    """The message's headers as text: 8-bit bytes decoded, encoded words decoded."""

    def __init__(self, msg: Message) -> None:
        self.values: dict[str, str] = {}
        for name, value in msg.raw_items():
            key = name.lower()
            if key not in self.values:  # the first occurrence counts
                self.values[key] = unescape_8bit(value if isinstance(value, str) else str(value))

    def raw(self, name: str) -> str:
        """The header as written (8-bit bytes decoded), encoded words left alone."""
        return self.values.get(name, "")

    def text(self, name: str) -> str:
        return decode_words(self.raw(name))


def _fold(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _date_micros(text: str) -> int | None:
    if not text.strip():
        return None
    try:
        when = parsedate_to_datetime(text)
        micros = micros_of(when)
        rfc822(micros)  # must be representable as a date
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        return None
    return micros


def _message_id(text: str) -> str:
    match = _ANGLE.search(text)
    value = match.group(1) if match else text
    return _SPACE.sub("", value)


def _list_id(text: str) -> str:
    match = _ANGLE.search(text)
    value = match.group(1) if match else text
    return _fold(value)


def _author(raw: str) -> str:
    """``address (Name)`` from a From header; the decoded header itself when unparsable."""
    try:
        name, address = parseaddr(raw)
    except Exception as exc:  # parseaddr has had crash bugs on hostile input
        log.debug("unparsable From header: %s", exc)
        name, address = "", ""
    name = _fold(decode_words(name)).strip("\"' ")
    address = _fold(address)
    if "@" not in address and not name:
        return _fold(decode_words(raw))
    if name and address:
        return f"{address} ({name})"
    return address or name


# -- body and attachments --------------------------------------------------------------


MAX_DEPTH = 50  # multiparts nested deeper are not looked into


def _children(msg: Message, depth: int) -> list[Message] | None:
    """The sub-parts of a multipart (None for a leaf, or beyond ``MAX_DEPTH``)."""
    if depth >= MAX_DEPTH or msg.get_content_maintype() != "multipart":
        return None
    payload = msg.get_payload()
    if not isinstance(payload, list):
        return None  # a multipart whose boundary is missing
    return [part for part in payload if isinstance(part, Message)]


def _leaves(msg: Message, path: str = "", depth: int = 0) -> list[tuple[str, Message]]:
    """The leaf parts (attached messages count as leaves) with their MIME part path."""
    children = _children(msg, depth)
    if children is None:
        return [(path or "1", msg)]
    out: list[tuple[str, Message]] = []
    for i, part in enumerate(children, start=1):
        out.extend(_leaves(part, f"{path}.{i}" if path else str(i), depth + 1))
    return out


def _is_attachment(part: Message) -> bool:
    try:
        disposition = part.get_content_disposition()
        filename = part.get_filename()
    except Exception as exc:  # malformed RFC 2231 parameters
        log.debug("unreadable Content-Disposition: %s", exc)
        return True
    return disposition == "attachment" or filename is not None


def _payload(part: Message) -> bytes:
    """The decoded content of a leaf (an attached message: the message as written)."""
    try:
        if part.is_multipart():  # message/rfc822 and other message/* with a sub-message
            return part.as_bytes(policy=policy.compat32)
        data = part.get_payload(decode=True)
    except Exception as exc:  # broken transfer encodings, unflattenable parts
        log.debug("part content unreadable: %s", exc)
        return b""
    if isinstance(data, bytes):
        return data
    return b""


_SCORE = {"text/html": 3, "text/plain": 2}


class _Body:
    """The body as display segments, and the parts that become enclosures.

    As a mail reader shows it: of a multipart/alternative the best alternative that
    has content (HTML, then plain text, then any other text); of a multipart/related
    its root part; of any other multipart (mixed, signed, report...) every inline text
    part, in order.  A multipart whose boundary is missing is shown as plain text.
    """

    def __init__(self, msg: Message) -> None:
        self.leaves = _leaves(msg)
        self.used: set[int] = set()
        self.segments = self._segments(msg, top=True)

    def _segments(
        self, part: Message, top: bool = False, depth: int = 0
    ) -> list[tuple[bool, str, Message]]:
        children = _children(part, depth)
        if children is not None:
            subtype = part.get_content_subtype()
            if subtype == "alternative":
                best: list[tuple[bool, str, Message]] = []
                best_score = 0
                for child in children:
                    segments = self._segments(child, depth=depth + 1)
                    score = max(
                        (_SCORE.get(p.get_content_type(), 1) for _, _, p in segments), default=0
                    )
                    if score > best_score:
                        best, best_score = segments, score
                return best
            if subtype == "related" and children:
                return self._segments(children[0], depth=depth + 1)
            out: list[tuple[bool, str, Message]] = []
            for child in children:
                if not _is_attachment(child):
                    out.extend(self._segments(child, depth=depth + 1))
            return out
        maintype = part.get_content_maintype()
        if maintype == "multipart" and isinstance(part.get_payload(), list):
            return []  # nested deeper than MAX_DEPTH
        if maintype == "multipart" or (maintype == "text" and (top or not _is_attachment(part))):
            text = clean_text(decode_bytes(_payload(part), _charset(part)))
            if text.strip():
                return [(part.get_content_type() == "text/html", text, part)]
        return []

    def description(self) -> str:
        out = []
        for is_html, text, part in self.segments:
            self.used.add(id(part))
            out.append(sanitize_html(text) if is_html else text_to_html(text))
        return "\n".join(s.strip() for s in out if s.strip())

    def enclosures(self) -> list[tuple[str, str, int]]:
        used = {id(part) for _, _, part in self.segments}
        out: list[tuple[str, str, int]] = []
        seen: set[str] = set()
        for path, part in self.leaves:
            maintype = part.get_content_maintype()
            if id(part) in used or maintype == "multipart":
                continue  # shown as the body, or a broken multipart (shown if chosen)
            if maintype == "text" and not _is_attachment(part):
                continue  # an alternative of the body that was not chosen, or empty
            url = _enclosure_url(part, path)
            if url in seen:
                url = f"{url}#{path}"
            seen.add(url)
            out.append((url, part.get_content_type(), len(_payload(part))))
        return out


def _charset(part: Message) -> str | None:
    try:
        return part.get_content_charset()
    except Exception as exc:  # undecodable charset parameter
        log.debug("unreadable charset parameter: %s", exc)
        return None


def _enclosure_url(part: Message, path: str) -> str:
    content_id = _message_id(unescape_8bit(str(part.get("content-id", ""))))
    if content_id:
        return "cid:" + quote(content_id, safe="@!$&'()*+,;=-._~")
    try:
        filename = part.get_filename()
    except Exception as exc:  # malformed RFC 2231 parameters
        log.debug("unreadable attachment name: %s", exc)
        filename = None
    name = _fold(decode_words(unescape_8bit(filename))) if filename else ""
    return "attachment:" + quote(clean_text(name) or f"part-{path}", safe="@!$&'()*+,;=-._~")


def sanitize_html(text: str) -> str:
    """A mail's HTML body made safe to show: nh3 when installed, else its text only."""
    if nh3 is not None:
        try:
            return str(nh3.clean(text))
        except Exception as exc:  # nh3 refused the input
            log.debug("nh3 could not clean an HTML body: %s", exc)
    try:
        document = lxml.html.document_fromstring(text) if text.strip() else None
    except (etree.ParserError, ValueError) as exc:
        log.debug("HTML body unparsable, kept as text: %s", exc)
        document = None
    plain = document.text_content() if document is not None else text
    return text_to_html(clean_text(plain))


def text_to_html(text: str) -> str:
    """Plain text as HTML: escaped, blank lines make paragraphs, newlines ``<br>``."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    if not text:
        return ""
    paragraphs = _BLANK_LINES.split(text)
    return "\n".join(
        "<p>" + "<br>\n".join(html.escape(line) for line in para.split("\n")) + "</p>"
        for para in paragraphs
        if para.strip()
    )
