"""Every reader (Maildir, mbox, IMAP, SMTP) over a corpus of real and broken mail.

The corpus: the messages of CPython's ``test/test_email/data`` (shipped with Python,
or with Debian's libpython3.11-testsuite), the messages of ``tests/data/mail`` and
broken MIME built here.  No reader may crash or lose a message; every message must
become one well-formed item, and the same item whichever reader brought it (the mbox
reader sees the message as the mbox stores it: ``From `` lines quoted).  The corpus
has different messages that share a Message-ID (msg_01, msg_03, msg_14...; msg_04 and
msg_44 differ only in how their attachments are named): each is its own item, with
its own guid.
"""

from __future__ import annotations

import random
import smtplib
import time
from pathlib import Path

from lxml import etree
from system_packages import require
from test_mail_support import (  # noqa: F401  (the *_fixture are fixtures)
    ListSink,
    Mailbox,
    dovecot_fixture,
    dovecot_server_fixture,
    free_port,
)
from test_mail_xmlize import check_item

from roses_app.config.model import ImapSettings, MailSource, SmtpSettings
from roses_app.connectors.mail import MailConnectors, MailPoller, MailStateStore
from roses_app.connectors.mail.identity import mail_digest
from roses_app.connectors.mail.xmlize import xmlize_message

MAIL = Path(__file__).resolve().parent / "data" / "mail"
ENV = "ROSES_TEST_CORPUS_PASSWORD"


def broken_messages() -> list[tuple[str, bytes]]:
    """Hostile and broken MIME, built here."""
    rng = random.Random(20240101)
    deep = b"".join(
        b'Content-Type: multipart/mixed; boundary="b%d"\n\n--b%d\n' % (i, i) for i in range(60)
    )
    base = b"From: x@example.org\nSubject: broken\nMessage-ID: <%s@broken>\n"
    cases = {
        "empty": b"",
        "blank_lines": b"\n\n\n",
        "headers_only": b"From: a@b\nSubject: no body separator",
        "no_headers": b"just a body line\nand another\n",
        "garbage": bytes(rng.randrange(256) for _ in range(3000)),
        "truncated_base64": base % b"t" + b'Content-Type: multipart/mixed; boundary="q"\n\n--q\n'
        b"Content-Type: image/png\nContent-Transfer-Encoding: base64\n\niVBORw0KGgoAAA",
        "deep_nesting": base % b"d" + deep + b"Content-Type: text/plain\n\ndeep\n",
        "very_deep_nesting": base % b"v" + deep * 25 + b"Content-Type: text/plain\n\ndeep\n",
        "boundary_never_seen": base % b"n"
        + b'Content-Type: multipart/mixed; boundary="nowhere"\n\n--elsewhere\n\ntext\n',
        "nul_bytes": base % b"z" + b"X-Nul: a\x00b\n\nbody\x00with NUL\n",
        "rfc2231_mess": base % b"r" + b"Content-Type: multipart/mixed; boundary=m\n\n--m\n"
        b"Content-Type: application/x-y; name*0*=utf-8''%E2%82; name*2=tail; name*1*=zz'%FF\n"
        b"Content-Disposition: attachment; filename*=''\n\nx\n--m--\n",
        "bad_qp": base % b"q" + b"Content-Transfer-Encoding: quoted-printable\n\n=ZZ=4=\n=E9t=E9\n",
        "utf16_odd": base % b"u" + b"Content-Type: text/plain; charset=utf-16\n\nabc\n",
        "empty_charset": base % b"e" + b'Content-Type: text/html; charset=""\n\n<p>x</p>\n',
        "absurd_dates": base % b"a" + b"Date: Mon, 1 Jan 99999 00:00:00 +9999\n\nx\n",
        "empty_rfc822": base % b"m" + b"Content-Type: multipart/mixed; boundary=m\n\n--m\n"
        b"Content-Type: message/rfc822\n\n--m--\n",
        "digest_garbage": base % b"g"
        + b"Content-Type: multipart/digest; boundary=g\n\n--g\n\n\x01\x02\n--g\n--g--\n",
        "eight_bit_from": b"From: \xff\xfe\xfd <\xe9@x>\nSubject: \xc3\n\nx\n",
        "bare_cr": b"From: cr@x\rSubject: bare CR\r\rbody\r",
        "mbox_from_line": base % b"f" + b"\nFrom the beginning\n\nFrom here too\n",
        "dot_lines": base % b"p" + b"\n.\n..\n.x\nend\n",
        "long_encoded_words": base % b"w"
        + b"X-Long: "
        + b" ".join(b"=?utf-8?q?%d?=" % i for i in range(150))
        + b"\n\nx\n",
    }
    return sorted(cases.items())


def corpus() -> list[tuple[str, bytes]]:
    data = require("cpython-email-data")
    messages = [(p.name, p.read_bytes()) for p in sorted(data.glob("msg_*.txt"))]
    messages += [(p.name, p.read_bytes()) for p in sorted(MAIL.glob("*.eml"))]
    return messages + broken_messages()


def as_in_mbox(raw: bytes) -> bytes:
    """The message as an mbox keeps it: ``From `` lines quoted, a final newline."""
    body = raw.replace(b"\r\n", b"\n")
    body = b">" + body if body.startswith(b"From ") else body
    body = body.replace(b"\nFrom ", b"\n>From ")
    return body if body.endswith(b"\n") else body + b"\n"


Mail = tuple[str, bytes]  # (Message-ID guid, the item without its guid)


def expected(messages: list[tuple[str, bytes]], mbox: bool = False) -> tuple[set[Mail], int]:
    """What the items of ``messages`` show (Message-ID and the rest of the item), and
    how many different mails there are (Message-ID and digest)."""
    shown, mails = set(), set()
    for _, raw in messages:
        data = as_in_mbox(raw) if mbox else raw
        xml, published = xmlize_message(data)
        check_item(xml, published)
        shown.add(mail_of(xml))
        mails.add((mail_of(xml)[0], mail_digest(data)))
    return shown, len(mails)


def mail_of(xml: str) -> Mail:
    """The Message-ID (a guid without the ``#DIGEST`` that tells mails sharing a
    Message-ID apart) and the rest of the item."""
    item = etree.fromstring(xml)
    guid = item.find("guid")
    assert guid is not None and guid.text
    item.remove(guid)
    return guid.text.split("#", 1)[0], etree.tostring(item)


def published(items: list[str]) -> tuple[set[Mail], int]:
    """What a source's items show, and how many there are; each has its own guid."""
    guids = [etree.fromstring(xml).findtext("guid") for xml in items]
    assert len(set(guids)) == len(guids), "two items with one guid"
    return {mail_of(xml) for xml in items}, len(items)


def test_corpus_is_complete() -> None:
    messages = corpus()
    assert sum(name.startswith("msg_") for name, _ in messages) >= 47
    assert len(messages) >= 47 + 8 + 20


def test_maildir_and_mbox_read_the_whole_corpus(tmp_path: Path) -> None:
    messages = corpus()
    box = tmp_path / "Maildir"
    for sub in ("cur", "new", "tmp"):
        (box / sub).mkdir(parents=True)
    mbox = tmp_path / "corpus.mbox"
    with mbox.open("wb") as f:
        for i, (name, raw) in enumerate(messages):
            (box / "new" / f"{1700000000 + i}.M{i}.{name}").write_bytes(raw)
            f.write(b"From corpus@roses.test Mon Jan  1 00:00:00 2024\n" + as_in_mbox(raw) + b"\n")
    sink = ListSink()
    p = MailPoller(MailStateStore(tmp_path / "mail.sqlite"), sink, time.time, batch_size=16)
    for source in (
        MailSource("maildir", "maildir", 60.0, path=box),
        MailSource("mbox", "mbox", 60.0, path=mbox),
    ):
        result = p.poll(source)
        assert result.status == "ok", result.message
        assert "unreadable" not in result.message
    assert published(sink.items("maildir")) == expected(messages)
    assert published(sink.items("mbox")) == expected(messages, mbox=True)


def test_imap_reads_the_whole_corpus(dovecot: Mailbox, tmp_path: Path) -> None:
    messages = corpus()
    for _, raw in messages:
        dovecot.deliver(raw)
    sink = ListSink()
    p = MailPoller(
        MailStateStore(tmp_path / "mail.sqlite"),
        sink,
        time.time,
        batch_size=16,
        environ=lambda name: dovecot.password if name == ENV else None,
    )
    settings = ImapSettings(
        "127.0.0.1", dovecot.user, ENV, port=dovecot.port, security="none", idle=False
    )
    result = p.poll(MailSource("imap", "imap", 60.0, imap=settings))
    assert result.status == "ok", result.message
    # Dovecot serves what the Maildir holds, except that IMAP has no NUL: 0x80 instead.
    served = [(name, raw.replace(b"\x00", b"\x80")) for name, raw in messages]
    assert published(sink.items("imap")) == expected(served)


def test_smtp_receives_the_whole_corpus(tmp_path: Path) -> None:
    messages = corpus()
    port = free_port()
    source = MailSource(
        "smtp", "smtp", 0.0, smtp=SmtpSettings("127.0.0.1", port, ("corpus@roses.test",))
    )
    sink = ListSink()
    mail = MailConnectors([source], tmp_path / "mail.sqlite", sink, time.time)
    mail.start()
    try:
        assert mail.wait_ready(10)
        sent = []
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
            for _, raw in messages:
                wire = raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
                if not wire.endswith(b"\r\n"):
                    wire += b"\r\n"  # as an MTA sends it
                assert client.sendmail("sender@roses.test", ["corpus@roses.test"], wire) == {}
                sent.append(wire)
    finally:
        mail.close()
    assert published(sink.items("smtp")) == expected([("", wire) for wire in sent])
