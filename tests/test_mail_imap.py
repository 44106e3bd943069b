"""IMAP sources against a real Dovecot: fetch, restart, IDLE, UIDVALIDITY, flags,
passwords, lost connections."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from test_mail_support import (  # noqa: F401  (the *_fixture are fixtures)
    PASSWORD,
    ListSink,
    Mailbox,
    dovecot_fixture,
    dovecot_server_fixture,
    free_port,
    message,
    own_dovecot_fixture,
    wait_for,
)

from roses_app.config.model import ImapSettings, MailSource
from roses_app.connectors.mail import MailConnectors, MailPoller, MailStateStore
from roses_app.items import parse_item

ENV = "ROSES_TEST_IMAP_PASSWORD"


def imap_source(
    server: Mailbox,
    *,
    name: str = "inbox",
    folder: str = "INBOX",
    idle: bool = True,
    every: float = 60.0,
    mark_seen: bool = False,
    delete: bool = False,
    port: int | None = None,
    password_env: str = ENV,
) -> MailSource:
    settings = ImapSettings(
        host="127.0.0.1",
        user=server.user,
        password_env=password_env,
        port=port or server.port,
        security="none",
        folder=folder,
        idle=idle,
        mark_seen=mark_seen,
        delete=delete,
    )
    return MailSource(name, "imap", every, imap=settings)


def environ(name: str) -> str | None:
    return PASSWORD if name == ENV else None


def poller(path: Path, sink: ListSink) -> MailPoller:
    return MailPoller(MailStateStore(path / "mail.sqlite"), sink, time.time, environ=environ)


def connectors(
    path: Path, sources: list[MailSource], sink: ListSink, **kw: object
) -> MailConnectors:
    return MailConnectors(
        sources,
        path / "mail.sqlite",
        sink,
        time.time,
        idle_tick=0.2,
        imap_retry_seconds=0.1,
        imap_timeout=5.0,
        environ=environ,
        **kw,  # type: ignore[arg-type]
    )


def test_fetch_items_and_nothing_is_marked_seen(dovecot: Mailbox, tmp_path: Path) -> None:
    for n in range(3):
        dovecot.deliver(message(n))
    sink = ListSink()
    p = poller(tmp_path, sink)
    source = imap_source(dovecot)
    result = p.poll(source)
    assert result.status == "ok", result.message
    assert result.n_items == 3
    assert sink.guids() == ["0@roses.test", "1@roses.test", "2@roses.test"]
    item = parse_item(sink.items()[0])
    assert item.findtext("title") == "Message 0"
    assert item.findtext("author") == "sender0@example.org (Sender 0)"
    assert sink.batches[0][1][0][1] is not None  # published from Date
    assert all(b"\\Seen" not in f for f in dovecot.flags())
    assert p.poll(source).n_items == 0  # nothing new
    state = p.store.get("inbox")
    assert state is not None and state.last_uid == 3 and state.uidvalidity


def test_restart_fetches_only_new_mail(dovecot: Mailbox, tmp_path: Path) -> None:
    source = imap_source(dovecot)
    dovecot.append([message(1), message(2)])
    first = ListSink()
    p = poller(tmp_path, first)
    assert p.poll(source).n_items == 2
    p.store.close()
    dovecot.append([message(3)])
    dovecot.deliver(message(4))
    second = ListSink()
    p2 = poller(tmp_path, second)  # a new process: state from SQLite only
    assert p2.poll(source).n_items == 2
    assert second.guids() == ["3@roses.test", "4@roses.test"]
    assert sorted(first.guids() + second.guids()) == [f"{n}@roses.test" for n in (1, 2, 3, 4)]


def test_sink_failure_loses_nothing(dovecot: Mailbox, tmp_path: Path) -> None:
    dovecot.append([message(1), message(2)])
    sink = ListSink()
    p = poller(tmp_path, sink)
    source = imap_source(dovecot)
    sink.fail = True
    result = p.poll(source)
    assert result.status == "error" and "spool is full" in result.message
    assert p.poll(source).status == "skipped_backoff"
    sink.fail = False
    assert p.poll(source, force=True).n_items == 2
    assert sink.guids() == ["1@roses.test", "2@roses.test"]


def test_uidvalidity_change_resyncs_without_duplicates(dovecot: Mailbox, tmp_path: Path) -> None:
    dovecot.create("News")
    dovecot.append([message(1), message(2)], folder="News")
    sink = ListSink()
    p = poller(tmp_path, sink)
    source = imap_source(dovecot, folder="News")
    assert p.poll(source).n_items == 2
    before = p.store.get("inbox")
    assert before is not None
    # The folder is deleted and made again: new UIDVALIDITY, UIDs start at 1 again.
    dovecot.delete("News")
    dovecot.create("News")
    dovecot.append([message(1), message(2), message(3)], folder="News")
    result = p.poll(source)
    assert result.status == "ok", result.message
    after = p.store.get("inbox")
    assert after is not None and after.uidvalidity != before.uidvalidity
    assert after.last_uid == 3
    assert sink.guids() == ["1@roses.test", "2@roses.test", "3@roses.test"]


def test_mark_seen_and_delete_only_when_configured(dovecot: Mailbox, tmp_path: Path) -> None:
    dovecot.append([message(1), message(2)])
    sink = ListSink()
    p = poller(tmp_path, sink)
    assert p.poll(imap_source(dovecot, name="seen", mark_seen=True)).n_items == 2
    assert all(b"\\Seen" in f for f in dovecot.flags())
    assert dovecot.count() == 2
    assert p.poll(imap_source(dovecot, name="deleting", delete=True)).n_items == 2
    assert dovecot.count() == 0


def test_idle_delivers_new_mail_within_seconds(dovecot: Mailbox, tmp_path: Path) -> None:
    dovecot.deliver(message(1))
    sink = ListSink()
    mail = connectors(tmp_path, [imap_source(dovecot, every=600.0)], sink)
    mail.start()
    try:
        assert mail.wait_ready(10)
        wait_for(lambda: len(sink.items()) == 1)
        time.sleep(0.3)  # the worker is idling now
        dropped = time.monotonic()
        dovecot.deliver(message(2))
        wait_for(lambda: len(sink.items()) == 2, timeout=5.0)
        assert time.monotonic() - dropped < 5.0
        wait_for(lambda: last_status(mail) == "ok")  # recorded just after the sink returns
        stopping = time.monotonic()
    finally:
        mail.shutdown()
    assert time.monotonic() - stopping < 3.0  # a short IDLE step: a prompt stop
    assert sink.guids() == ["1@roses.test", "2@roses.test"]
    mail.store.close()


def test_polling_without_idle(dovecot: Mailbox, tmp_path: Path) -> None:
    sink = ListSink()
    mail = connectors(tmp_path, [imap_source(dovecot, idle=False, every=0.3)], sink)
    mail.start()
    try:
        dovecot.deliver(message(1))
        wait_for(lambda: len(sink.items()) == 1, timeout=5.0)
    finally:
        mail.shutdown()
        mail.store.close()


def last_status(mail: MailConnectors) -> str:
    """The status of the inbox's last pass ("" before the first one ends)."""
    last = mail.last_results.get("inbox")
    return "" if last is None else last[1].status


def test_lost_connection_is_retried_with_backoff(own_dovecot: Mailbox, tmp_path: Path) -> None:
    box = own_dovecot
    sink = ListSink()
    mail = connectors(tmp_path, [imap_source(box, every=600.0)], sink)
    box.deliver(message(1))
    mail.start()
    try:
        wait_for(lambda: len(sink.items()) == 1)
        box.server.stop()  # the connection breaks while idling
        wait_for(lambda: last_status(mail) == "error", timeout=30.0)
        state = mail.store.get("inbox")
        assert state is not None and state.failures >= 1
        box.deliver(message(2))
        box.server.start()
        # generous: the retry waits out its backoff, and a loaded machine is slow
        wait_for(lambda: len(sink.items()) == 2, timeout=45.0)
        wait_for(lambda: last_status(mail) == "ok", timeout=30.0)
    finally:
        mail.shutdown()
    state = mail.store.get("inbox")
    assert state is not None and state.failures == 0 and state.n_errors >= 1
    assert sink.guids() == ["1@roses.test", "2@roses.test"]
    mail.store.close()


def test_backoff_doubles(tmp_path: Path) -> None:
    sink = ListSink()
    p = MailPoller(
        MailStateStore(tmp_path / "m.sqlite"),
        sink,
        time.time,
        environ=environ,
        imap_retry_seconds=2.0,
        max_backoff_seconds=10.0,
    )
    closed = MailSource(
        "x",
        "imap",
        300.0,
        imap=ImapSettings("127.0.0.1", "u", ENV, port=free_port(), security="none"),
    )
    delays = []
    for _ in range(5):
        result = p.poll(closed, force=True)
        assert result.status == "error"
        delays.append(round(result.next_allowed_at - time.time()))
    assert delays == [2, 4, 8, 10, 10]


def test_missing_password_is_a_clear_error_not_a_crash(
    dovecot: Mailbox, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sink = ListSink()
    source = imap_source(dovecot, password_env="ROSES_TEST_UNSET_VARIABLE")
    mail = connectors(tmp_path, [source], sink)
    mail.start()
    try:
        assert mail.wait_ready(10)
    finally:
        mail.shutdown()
    _, result = mail.last_results["inbox"]
    assert result.status == "error"
    assert "ROSES_TEST_UNSET_VARIABLE is not set" in result.message
    assert "ROSES_TEST_UNSET_VARIABLE is not set" in caplog.text
    mail.store.close()


def test_password_never_logged(
    dovecot: Mailbox, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    dovecot.deliver(message(1))
    sink = ListSink()
    p = poller(tmp_path, sink)
    assert p.poll(imap_source(dovecot)).status == "ok"
    # a wrong password: the server refuses; the message quotes its answer only
    wrong = "Wr0ng-" + PASSWORD
    p2 = MailPoller(
        MailStateStore(tmp_path / "other.sqlite"), sink, time.time, environ=lambda _: wrong
    )
    result = p2.poll(imap_source(dovecot, name="wrong"))
    assert result.status == "error" and "login failed" in result.message
    state = p2.store.get("wrong")
    assert state is not None
    for text in (caplog.text, result.message, state.last_error):
        assert PASSWORD not in text
        assert wrong not in text
