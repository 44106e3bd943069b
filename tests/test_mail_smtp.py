"""Inbound SMTP sources: smtplib sends to a real aiosmtpd server on 127.0.0.1."""

from __future__ import annotations

import smtplib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_mail_support import ListSink, free_port, message, wait_for

from roses_app.config.model import MailSource, SmtpSettings
from roses_app.connectors.mail import MailConnectors, accepts
from roses_app.items import parse_item

ACCEPT = ("news@roses.local", "*@lists.roses.local")


def smtp_source(port: int, name: str = "news") -> MailSource:
    return MailSource(
        name, "smtp", 0.0, smtp=SmtpSettings(host="127.0.0.1", port=port, accept=ACCEPT)
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[MailConnectors, ListSink, int]]:
    port = free_port()
    sink = ListSink()
    mail = MailConnectors([smtp_source(port)], tmp_path / "mail.sqlite", sink, time.time)
    mail.start()
    try:
        assert mail.wait_ready(10)
        assert "news" in mail.smtp_servers
        yield mail, sink, port
    finally:
        mail.close()


def send(port: int, to: list[str], raw: bytes) -> dict[str, tuple[int, bytes]]:
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
        return client.sendmail("sender@example.org", to, raw.replace(b"\n", b"\r\n"))


def test_accepted_mail_is_an_item_at_once(server: tuple[MailConnectors, ListSink, int]) -> None:
    mail, sink, port = server
    refused = send(port, ["News@Roses.Local"], message(1, subject="Issue 1"))
    assert refused == {}
    items = sink.items("news")  # before the 250 came back
    assert len(items) == 1
    item = parse_item(items[0])
    assert item.findtext("title") == "Issue 1" and item.findtext("guid") == "1@roses.test"
    assert mail.last_results["news"][1].status == "ok"
    assert mail.last_results["news"][1].n_items == 1


def test_other_recipients_get_550(server: tuple[MailConnectors, ListSink, int]) -> None:
    _, sink, port = server
    with pytest.raises(smtplib.SMTPRecipientsRefused) as info:
        send(port, ["someone@else.org"], message(2))
    code, _ = info.value.recipients["someone@else.org"]
    assert code == 550
    refused = send(port, ["x@lists.roses.local", "no@roses.local"], message(3))
    assert list(refused) == ["no@roses.local"] and refused["no@roses.local"][0] == 550
    assert sink.guids() == ["3@roses.test"]


def test_sink_failure_answers_451(server: tuple[MailConnectors, ListSink, int]) -> None:
    mail, sink, port = server
    sink.fail = True
    with pytest.raises(smtplib.SMTPDataError) as info:
        send(port, ["news@roses.local"], message(4))
    assert info.value.smtp_code == 451
    assert mail.last_results["news"][1].status == "error"
    sink.fail = False
    send(port, ["news@roses.local"], message(4))  # the sender retries: nothing lost
    assert sink.guids() == ["4@roses.test"]


def test_accept_patterns() -> None:
    assert accepts(ACCEPT, "NEWS@roses.local")
    assert accepts(ACCEPT, "<a.b@lists.roses.local>")
    assert not accepts(ACCEPT, "news@roses.local.evil.org")
    assert not accepts(ACCEPT, "x@sub.lists.roses.local.org")
    assert accepts(["*"], "anyone@anywhere")


def test_port_in_use_is_retried_not_fatal(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        sink = ListSink()
        mail = MailConnectors(
            [smtp_source(port)],
            tmp_path / "mail.sqlite",
            sink,
            time.time,
            imap_retry_seconds=0.1,
            smtp_ready_timeout=2.0,
        )
        mail.start()
        try:
            assert mail.wait_ready(10)
            result = mail.last_results["news"][1]
            assert result.status == "error" and "cannot listen" in result.message
        finally:
            busy.close()
        wait_for(lambda: "news" in mail.smtp_servers, timeout=10)
        send(port, ["news@roses.local"], message(5))
        mail.close()
    assert sink.guids() == ["5@roses.test"]


def test_poll_all_once_starts_no_server(tmp_path: Path) -> None:
    port = free_port()
    mail = MailConnectors([smtp_source(port)], tmp_path / "mail.sqlite", ListSink(), time.time)
    assert mail.poll_all_once() == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    mail.close()
