"""Mail text decoding: 8-bit header bytes, RFC 2047 encoded words and body charsets.

Mail is read the way mail readers read it: a charset that is missing, unknown or
wrong costs replacement characters (or a Windows-1252 reading of the bytes that are
not UTF-8), never the message.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import email.charset
import logging
import re

log = logging.getLogger(__name__)


def unescape_8bit(value: str) -> str:
    """compat32 keeps 8-bit header bytes as surrogate escapes: decode them (UTF-8, else
    Windows-1252)."""
    try:
        data = value.encode("ascii", "surrogateescape")
    except UnicodeEncodeError:
        return value  # already text
    return decode_bytes(data, None)


def _cp1252_fallback(exc: UnicodeError) -> tuple[str, int]:
    """Codec error handler: bytes that are not UTF-8 are read as Windows-1252."""
    if isinstance(exc, UnicodeDecodeError):
        return exc.object[exc.start : exc.end].decode("cp1252", errors="replace"), exc.end
    raise exc


codecs.register_error("roses-cp1252", _cp1252_fallback)

_ENCODED_WORD = re.compile(r"=\?([^?\s]*)\?([bBqQ])\?([^?\s]*)\?=")
_BETWEEN_WORDS = re.compile(r"\A[ \t\r\n]+\Z")
_QP_ESCAPE = re.compile(rb"=([0-9A-Fa-f]{2})")
# What a mail's charset label says, read the way mail readers (and browsers) do.
_LABELS = {
    "iso-8859-1": "cp1252",
    "latin-1": "cp1252",
    "latin1": "cp1252",
    "us-ascii": "cp1252",
    "ascii": "cp1252",
    "iso8859-1": "cp1252",
}


def decode_words(text: str) -> str:
    """RFC 2047 encoded words decoded, one by one: a word that cannot be decoded stays
    as written, the others are decoded anyway; whitespace between two words goes."""
    if "=?" not in text:
        return text
    out: list[str] = []
    position = 0
    previous_was_word = False
    for match in _ENCODED_WORD.finditer(text):
        between = text[position : match.start()]
        decoded = _decode_word(match.group(1), match.group(2), match.group(3))
        if not (previous_was_word and decoded is not None and _BETWEEN_WORDS.match(between)):
            out.append(between)
        out.append(match.group(0) if decoded is None else decoded)
        previous_was_word = decoded is not None
        position = match.end()
    out.append(text[position:])
    return "".join(out)


def _decode_word(charset: str, encoding: str, payload: str) -> str | None:
    charset = charset.split("*", 1)[0]  # RFC 2231 language suffix
    data = payload.encode("ascii", "surrogateescape")
    if encoding in "bB":
        try:
            raw = base64.b64decode(data + b"=" * (-len(data) % 4), validate=True)
        except (binascii.Error, ValueError):
            return None
    else:
        raw = _QP_ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), data.replace(b"_", b" "))
    return decode_bytes(raw, charset)


def decode_bytes(data: bytes, charset: str | None) -> str:
    """``data`` in the declared ``charset``; undecodable bytes become U+FFFD.  UTF-8,
    an undeclared or an unknown charset: UTF-8 where it is valid, Windows-1252 for the
    bytes where it is not (the usual mislabelled mail); ISO-8859-1 and US-ASCII are
    read as Windows-1252 (its superset, as mail readers do)."""
    codec = _text_codec(charset)
    if codec is not None and codec != "utf-8":
        try:
            return data.decode(codec, errors="replace")
        except Exception as exc:  # a codec that fails on its own (e.g. malformed utf-7)
            log.debug("charset %s failed (%s); reading UTF-8", charset, exc)
    return data.decode("utf-8", errors="roses-cp1252")


def _text_codec(charset: str | None) -> str | None:
    if not charset:
        return None
    name = charset.strip().strip("\"'").lower()
    if name in ("", "unknown-8bit", "x-unknown", "unknown", "default"):
        return None
    name = _LABELS.get(name, email.charset.ALIASES.get(name, name))
    try:
        info = codecs.lookup(name)
    except (LookupError, ValueError):
        return None
    if not getattr(info, "_is_text_encoding", True):
        return None  # base64_codec, zlib_codec, ...: not a charset
    return info.name
