"""Every reader (Maildir, mbox, IMAP, SMTP) over a corpus of real and broken mail.

The corpus: the messages of CPython's ``test/test_email/data`` (shipped with Python,
or with Debian's libpython3.11-testsuite), the messages of ``tests/data/mail`` and
broken MIME built here.  No reader may crash or lose a message; every message must
become one well-formed item, and the same item whichever reader brought it (the mbox
reader sees the message as the mbox stores it: ``From `` lines quoted).
"""

from __future__ import annotations

import random
import smtplib
import sys
import sysconfig
import time
from pathlib import Path

import pytest
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
from roses_app.connectors.mail.xmlize import xmlize_message

MAIL = Path(__file__).resolve().parent / "data" / "mail"
ENV = "ROSES_TEST_CORPUS_PASSWORD"


def cpython_email_data() -> Path | None:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (
        Path(sysconfig.get_paths()["stdlib"]) / "test" / "test_email" / "data",
        Path("/usr/lib") / version / "test" / "test_email" / "data",
        Path("/usr/lib/python3.11/test/test_email/data"),
    ):
        if len(list(candidate.glob("msg_*.txt"))) >= 47:
            return candidate
    return None


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
    data = cpython_email_data()
    if data is None:
        pytest.fail("CPython's test_email data is missing: apt-get install libpython3.11-testsuite")
    messages = [(p.name, p.read_bytes()) for p in sorted(data.glob("msg_*.txt"))]
    messages += [(p.name, p.read_bytes()) for p in sorted(MAIL.glob("*.eml"))]
    return messages + broken_messages()


def as_in_mbox(raw: bytes) -> bytes:
    """The message as an mbox keeps it: ``From `` lines quoted, a final newline."""
    body = raw.replace(b"\r\n", b"\n")
    body = b">" + body if body.startswith(b"From ") else body
    body = body.replace(b"\nFrom ", b"\n>From ")
    return body if body.endswith(b"\n") else body + b"\n"


def expected(messages: list[tuple[str, bytes]], mbox: bool = False) -> set[str]:
    out = set()
    for _, raw in messages:
        xml, published = xmlize_message(as_in_mbox(raw) if mbox else raw)
        check_item(xml, published)
        out.add(xml)
    return out


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
    assert set(sink.items("maildir")) == expected(messages)
    assert len(sink.items("maildir")) == len(expected(messages))
    assert set(sink.items("mbox")) == expected(messages, mbox=True)


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
    assert set(sink.items("imap")) == expected(served)
    assert len(sink.items("imap")) == len(expected(messages))


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
    assert set(sink.items("smtp")) == {xmlize_message(wire)[0] for wire in sent}
    assert len(set(sink.items("smtp"))) == len(expected(messages))
