"""Mail identity, data-driven: two different mails that share a Message-ID are two
items; one mail seen twice is one item.

``tests/data/mail/identity/*.eml``, read in name order by a real reader (Maildir,
mbox, IMAP on Dovecot) into a real spool, must give exactly the items of
``expected.xml``, in order: there, 01, 03 and 05 share a Message-ID (03 and 05 are
other mails: a corrected issue and a tool that reuses ids), and 04 is 01 delivered a
second time (other transport headers, CRLF).  Reading everything again, even in
another order, from another copy of the mailbox or after a restart, adds nothing.
Run with ``ROSES_REGEN_MAIL=1`` to rewrite ``expected.xml`` after a deliberate
change, and review the diff: published guids must not change by accident.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from lxml import etree
from test_mail_support import (  # noqa: F401  (the *_fixture are fixtures)
    Mailbox,
    dovecot_fixture,
    dovecot_server_fixture,
)

from roses_app.config.model import ImapSettings, MailSource
from roses_app.connectors.mail import MailPoller, MailStateStore
from roses_app.connectors.mail.identity import claim_guid
from roses_app.spool import Spool

CASE = Path(__file__).resolve().parent / "data" / "mail" / "identity"
MESSAGES = [path.read_bytes() for path in sorted(CASE.glob("*.eml"))]
ENV = "ROSES_TEST_IDENTITY_PASSWORD"


def canonical(xml: str | bytes) -> bytes:
    parser = etree.XMLParser(remove_blank_text=True, resolve_entities=False, no_network=True)
    data = xml.encode() if isinstance(xml, str) else xml
    return etree.tostring(etree.fromstring(data, parser))


def spooled(spool: Spool) -> list[bytes]:
    return [canonical(event.item) for event in spool.events() if event.item is not None]


def check_expected(items: list[bytes]) -> None:
    path = CASE / "expected.xml"
    if os.environ.get("ROSES_REGEN_MAIL"):
        root = etree.Element("items")
        root.extend(etree.fromstring(item) for item in items)
        path.write_bytes(etree.tostring(root, pretty_print=True))
    expected = [etree.tostring(item) for item in etree.fromstring(canonical(path.read_bytes()))]
    assert items == expected


def write_maildir(path: Path, messages: list[bytes]) -> MailSource:
    for sub in ("cur", "new", "tmp"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    for n, raw in enumerate(messages):
        (path / "new" / f"{1715000000 + n}.M{n}.host").write_bytes(raw)
    return MailSource("letters", "maildir", 60.0, path=path)


def mbox_entry(raw: bytes) -> bytes:
    """The message as an mbox keeps it: LF, ``From `` lines quoted, a blank line after."""
    body = raw.replace(b"\r\n", b"\n").replace(b"\nFrom ", b"\n>From ")
    return b"From sender@example.org Mon May  6 08:00:00 2024\n" + body.rstrip(b"\n") + b"\n\n"


def write_mbox(path: Path, messages: list[bytes]) -> MailSource:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(mbox_entry(raw) for raw in messages))
    return MailSource("letters", "mbox", 60.0, path=path)


WRITERS = {"maildir": (write_maildir, "Maildir"), "mbox": (write_mbox, "letters.mbox")}


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_local_mailbox_gives_the_expected_items(tmp_path: Path, kind: str) -> None:
    write, name = WRITERS[kind]
    spool = Spool(tmp_path / "spool")
    state = tmp_path / "mail.sqlite"
    poller = MailPoller(MailStateStore(state), spool.append, time.time)
    result = poller.poll(write(tmp_path / "first" / name, MESSAGES))
    assert result.status == "ok" and result.n_items == 5, result.message
    first = spooled(spool)
    check_expected(first)

    # Another copy of the mailbox, its mails in reverse order: the source's state
    # starts over (another mailbox), so every mail is read again, and each gets the
    # guid it got the first time: the spool keeps them once.
    copy = write(tmp_path / "copy" / name, MESSAGES[::-1])
    result = poller.poll(copy)
    assert result.status == "ok", result.message
    assert spooled(spool) == first
    poller.store.close()

    # After a restart, a third delivery of the first mail adds nothing either.
    restarted = MailPoller(MailStateStore(state), spool.append, time.time)
    write(tmp_path / "copy" / name, [*MESSAGES[::-1], MESSAGES[3]])
    assert restarted.poll(copy).status == "ok"
    assert spooled(spool) == first


def test_imap_gives_the_same_items(dovecot: Mailbox, tmp_path: Path) -> None:
    for raw in MESSAGES:
        dovecot.deliver(raw)
    spool = Spool(tmp_path / "spool")
    poller = MailPoller(
        MailStateStore(tmp_path / "mail.sqlite"),
        spool.append,
        time.time,
        environ=lambda name: dovecot.password if name == ENV else None,
    )
    settings = ImapSettings(
        "127.0.0.1", dovecot.user, ENV, port=dovecot.port, security="none", idle=False
    )
    result = poller.poll(MailSource("letters", "imap", 60.0, imap=settings))
    assert result.status == "ok" and result.n_items == 5, result.message
    check_expected(spooled(spool))


def test_a_guid_taken_by_another_mail_is_never_shared() -> None:
    held = {"id@x": "a" * 64, "id@x#" + "b" * 16: "c" * 64}
    assert claim_guid("id@x", "a" * 64, held.get) == ("id@x", False)
    assert claim_guid("id@x", "d" * 64, held.get) == ("id@x#" + "d" * 16, True)
    # A mail whose Message-ID is literally another's disambiguated guid pushes it to
    # the full digest.
    assert claim_guid("id@x", "b" * 64, held.get) == ("id@x#" + "b" * 64, True)
    assert claim_guid("new@x", "e" * 64, held.get) == ("new@x", True)
