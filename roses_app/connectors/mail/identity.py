"""The guid of a mail's item: its Message-ID, told apart when two mails share one.

A Message-ID should name one message, but newsletter tools, list software and resent
mail reuse them, and two different mails with one guid publish as one item (the later
replacing the earlier).  So a mail is known by its Message-ID *and* a digest of what
makes it this mail: its Date, From and Subject headers as written (whitespace folded)
and its body bytes (MIME parts and attachments included), with LF line endings.
Transport headers that differ between two copies of one mail (Received, Delivered-To,
Return-Path, Status) and CRLF are not in it, so two copies of one mail have one
digest; and it is computed from the message, not from its item, so a later change in
how mail is xml-ized does not change it.

The first mail of a source seen with a Message-ID keeps it as its guid, so guids
published before this rule existed stay as they were; another mail with the same
Message-ID gets ``MESSAGE-ID#`` and the first 16 hex digits of its digest (the whole
digest if a mail already holds that too).  Which digest holds which guid is remembered
per source (:meth:`~roses_app.connectors.mail.state.MailStateStore.guid_owner`), so a
mail read again (after a restart, a UIDVALIDITY change, an mbox rewrite, or from a
second copy) gets the guid it got the first time.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from email import policy
from email.parser import BytesParser

from lxml import etree

from roses_app.connectors.mail.xmlize import normalize

_SPACE = re.compile(r"\s+")

Owner = Callable[[str], str | None]  # guid -> the digest of the mail holding it, or None


def mail_digest(raw: bytes) -> str:
    """SHA-256 (hex) of the message's Date, From and Subject and of its body."""
    data = normalize(raw)
    if data.startswith(b"\n"):  # no headers at all
        head, body = b"", data[1:]
    else:
        head, _, body = data.partition(b"\n\n")
    headers = BytesParser(policy=policy.compat32).parsebytes(head + b"\n", headersonly=True)
    first: dict[str, str] = {}
    for name, value in headers.raw_items():
        first.setdefault(name.lower(), str(value))
    digest = hashlib.sha256()
    for name in ("date", "from", "subject"):
        text = _SPACE.sub(" ", first.get(name, "")).strip()
        # compat32 keeps 8-bit header bytes as surrogate escapes: back to those bytes
        digest.update(text.encode("utf-8", "surrogateescape") + b"\0")
    digest.update(body)
    return digest.hexdigest()


def claim_guid(base: str, digest: str, owner: Owner) -> tuple[str, bool]:
    """The guid of the mail with ``digest`` whose guid would be ``base``, and whether
    it is new (to be remembered as held by ``digest``)."""
    candidates = (base, f"{base}#{digest[:16]}", f"{base}#{digest}")
    for guid in candidates:
        held = owner(guid)
        if held is None:
            return guid, True
        if held == digest:
            return guid, False
    # Only a mail whose Message-ID is literally BASE#DIGEST can hold the last one.
    return candidates[-1], False


def identify(item: etree._Element, raw: bytes, owner: Owner) -> tuple[str, str, bool]:
    """Set the guid of ``item``, xml-ized from the message ``raw``, as
    :func:`claim_guid` says; return the guid, the mail's digest and whether the guid
    is newly held."""
    guid_element = item.find("guid")
    if guid_element is None:
        raise ValueError("a mail item has no guid (xmlize_message always writes one)")
    digest = mail_digest(raw)
    guid, new = claim_guid(guid_element.text or "", digest, owner)
    guid_element.text = guid
    return guid, digest, new
