"""Maildir and mbox sources: each message once, restarts, rewrites, read-only,
failures and backoff, and the polling jobs of MailConnectors."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
from test_mail_support import ListSink, message, wait_for

from roses_app.config.model import MailSource
from roses_app.connectors.mail import MailConnectors, MailPoller, MailStateStore
from roses_app.connectors.mail.mbox import SETTLE


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def make_maildir(path: Path) -> Path:
    for sub in ("cur", "new", "tmp"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    return path


def drop(maildir: Path, name: str, raw: bytes, sub: str = "new") -> Path:
    target = maildir / sub / name
    target.write_bytes(raw)
    return target


def mbox_entry(raw: bytes) -> bytes:
    body = raw.replace(b"\nFrom ", b"\n>From ")
    if not body.endswith(b"\n"):
        body += b"\n"
    return b"From sender@example.org Mon Jan  1 00:00:00 2024\n" + body + b"\n"


def snapshot(path: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``path``: size, mtime and content hash."""
    out = {}
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            full = Path(dirpath) / name
            st = full.stat()
            digest = hashlib.sha256(full.read_bytes()).hexdigest()
            out[str(full.relative_to(path))] = (st.st_size, st.st_mtime_ns, digest)
    return out


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def new_poller(tmp_path: Path, sink: ListSink, clock: FakeClock) -> MailPoller:
    return MailPoller(MailStateStore(tmp_path / "state" / "mail.sqlite"), sink, clock)


def test_maildir_each_message_once_across_restarts_and_renames(
    tmp_path: Path, clock: FakeClock
) -> None:
    box = make_maildir(tmp_path / "Maildir")
    drop(box, "1700000001.M1.host", message(1))
    drop(box, "1700000002.M2.host:2,S", message(2), sub="cur")
    drop(box, ".hidden", message(99))
    (box / "tmp" / "1700000003.M3.host").write_bytes(message(98))  # being delivered
    source = MailSource("letters", "maildir", 60.0, path=box)
    sink = ListSink()
    p = new_poller(tmp_path, sink, clock)
    before = snapshot(box)
    result = p.poll(source)
    assert result.status == "ok" and result.n_items == 2, result.message
    assert sink.guids() == ["1@roses.test", "2@roses.test"]
    assert snapshot(box) == before  # never modified
    # a mail client reads message 1: new/ -> cur/ with flags; not a new message
    os.rename(box / "new" / "1700000001.M1.host", box / "cur" / "1700000001.M1.host:2,S")
    drop(box, "1700000004.M4.host", message(4))
    assert p.poll(source).n_items == 1
    p.store.close()
    restarted = new_poller(tmp_path, sink, clock)
    drop(box, "1700000005.M5.host", message(5))
    assert restarted.poll(source).n_items == 1
    assert sink.guids() == [f"{n}@roses.test" for n in (1, 2, 4, 5)]


def test_maildir_same_content_twice_is_one_item(tmp_path: Path, clock: FakeClock) -> None:
    box = make_maildir(tmp_path / "Maildir")
    drop(box, "1.a", message(1))
    drop(box, "2.b", message(1))
    sink = ListSink()
    assert (
        new_poller(tmp_path, sink, clock).poll(MailSource("m", "maildir", 60.0, path=box)).n_items
        == 1
    )


def test_missing_mailbox_is_an_error_with_backoff(tmp_path: Path, clock: FakeClock) -> None:
    source = MailSource("gone", "maildir", 60.0, path=tmp_path / "nowhere")
    sink = ListSink()
    p = new_poller(tmp_path, sink, clock)
    result = p.poll(source)
    assert result.status == "error" and "does not exist" in result.message
    assert result.next_allowed_at == clock.now + 60.0
    clock.now += 30
    assert p.poll(source).status == "skipped_backoff"
    clock.now += 30
    second = p.poll(source)
    assert second.status == "error" and second.next_allowed_at == clock.now + 120.0
    make_maildir(tmp_path / "nowhere")
    clock.now += 120
    assert p.poll(source).status == "ok"
    state = p.store.get("gone")
    assert state is not None and state.failures == 0 and state.n_errors == 2
    not_a_maildir = MailSource("plain", "maildir", 60.0, path=tmp_path)
    assert "not a Maildir" in p.poll(not_a_maildir).message


def test_sink_failure_loses_nothing(tmp_path: Path, clock: FakeClock) -> None:
    box = make_maildir(tmp_path / "Maildir")
    for n in range(5):
        drop(box, f"17000000{n:02d}.M{n}.host", message(n))
    sink = ListSink()
    p = MailPoller(MailStateStore(tmp_path / "s.sqlite"), sink, clock, batch_size=2)
    source = MailSource("m", "maildir", 60.0, path=box)
    calls = 0

    def flaky(name: str, items: list[tuple[str, int | None]]) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("disk full")
        sink(name, items)

    p.sink = flaky
    result = p.poll(source)
    assert result.status == "error" and result.n_items == 2  # the first batch got through
    assert p.poll(source, force=True).n_items == 3
    assert sink.guids() == [f"{n}@roses.test" for n in range(5)]


def test_mbox_appends_rewrites_and_partial_messages(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "archive.mbox"
    path.write_bytes(mbox_entry(message(1)) + mbox_entry(message(2, body="From here on\nok")))
    old = time.time() - 2 * SETTLE
    os.utime(path, (old, old))
    source = MailSource("archive", "mbox", 60.0, path=path)
    sink = ListSink()
    p = new_poller(tmp_path, sink, clock)
    before = snapshot(tmp_path / "archive.mbox")
    assert p.poll(source).n_items == 2
    assert snapshot(tmp_path / "archive.mbox") == before
    assert p.poll(source).n_items == 0
    state = p.store.get("archive")
    assert state is not None and state.mbox_offset == path.stat().st_size

    # appended: only the new one is read, from the remembered offset
    with path.open("ab") as f:
        f.write(mbox_entry(message(3)))
        f.write(b"From sender@example.org Mon Jan  1 00:00:00 2024\nSubject: partial")
    assert p.poll(source).n_items == 1  # the last one is still being written
    with path.open("ab") as f:
        f.write(b"\nMessage-ID: <4@roses.test>\n\nNow complete.\n")
    assert p.poll(source).n_items == 1
    assert sink.guids() == [f"{n}@roses.test" for n in (1, 2, 3, 4)]
    assert "From here on" in sink.items()[1]  # a From line inside a body stays in it

    # rewritten in place (a client expunged message 1): nothing is repeated
    path.write_bytes(mbox_entry(message(2, body="From here on\nok")) + mbox_entry(message(5)))
    assert p.poll(source).n_items == 1
    assert sink.guids()[-1] == "5@roses.test"


def test_mbox_without_final_newline_is_read_once_settled(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "a.mbox"
    path.write_bytes(
        b"From x Mon Jan  1 00:00:00 2024\nSubject: last\nMessage-ID: <z@x>\n\nno newline"
    )
    sink = ListSink()
    p = new_poller(tmp_path, sink, clock)
    source = MailSource("a", "mbox", 60.0, path=path)
    assert p.poll(source).n_items == 0
    old = time.time() - 2 * SETTLE
    os.utime(path, (old, old))
    assert p.poll(source).n_items == 1


def test_not_an_mbox(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("just some text\n")
    p = new_poller(tmp_path, ListSink(), clock)
    result = p.poll(MailSource("n", "mbox", 60.0, path=path))
    assert result.status == "error" and "not an mbox" in result.message


def test_state_restarts_when_the_mailbox_changes(tmp_path: Path, clock: FakeClock) -> None:
    a = make_maildir(tmp_path / "a")
    b = make_maildir(tmp_path / "b")
    drop(a, "1.x", message(1))
    drop(b, "1.x", message(1))
    sink = ListSink()
    p = new_poller(tmp_path, sink, clock)
    assert p.poll(MailSource("m", "maildir", 60.0, path=a)).n_items == 1
    assert p.poll(MailSource("m", "maildir", 60.0, path=b)).n_items == 1  # another mailbox
    state = p.store.get("m")
    assert state is not None and state.mailbox == f"maildir:{b}" and state.n_items == 2


def test_connectors_poll_maildir_and_mbox_on_schedule(tmp_path: Path) -> None:
    box = make_maildir(tmp_path / "Maildir")
    mbox = tmp_path / "box.mbox"
    mbox.write_bytes(mbox_entry(message(10)))
    sources = {
        "letters": MailSource("letters", "maildir", 0.2, path=box),
        "archive": MailSource("archive", "mbox", 0.2, path=mbox),
    }
    sink = ListSink()
    mail = MailConnectors(sources, None, sink, time.time, tmp_path / "data")
    assert [s.name for s in mail.polled] == ["letters", "archive"]
    once = mail.poll_all_once()
    assert [(r.source, r.status, r.n_items) for r in once] == [
        ("letters", "ok", 0),
        ("archive", "ok", 1),
    ]
    assert (tmp_path / "data" / "mail.sqlite").exists()
    mail.start()
    try:
        drop(box, "1.x", message(1))
        wait_for(lambda: len(sink.items("letters")) == 1)
        with mbox.open("ab") as f:
            f.write(mbox_entry(message(11)))
        wait_for(lambda: len(sink.items("archive")) == 2)
        assert set(mail.last_results) == {"letters", "archive"}
    finally:
        mail.shutdown()
    assert not mail.running
    mail.close()


def test_read_mbox_resumes_at_the_offset(tmp_path: Path) -> None:
    from roses_app.connectors.mail.mbox import read_mbox

    path = tmp_path / "r.mbox"
    path.write_bytes(mbox_entry(message(1)) + mbox_entry(message(2)))
    calls: list[tuple[list[bytes], int, str]] = []

    def deliver(batch: list[tuple[None, bytes]], mbox_offset: int, mbox_tail: str) -> None:
        calls.append(([raw for _, raw in batch], mbox_offset, mbox_tail))

    assert read_mbox(path, 0, "", deliver, batch_size=1) == 2
    assert [c[0] for c in calls] == [[message(1)], [message(2)]]
    assert calls[0][1] == len(mbox_entry(message(1)))
    offset, tail = calls[-1][1], calls[-1][2]
    assert offset == path.stat().st_size
    with path.open("ab") as f:
        f.write(mbox_entry(message(3)))
    calls.clear()
    assert read_mbox(path, offset, tail, deliver) == 1
    assert calls[0][0] == [message(3)]
    calls.clear()
    assert read_mbox(path, offset, "another tail", deliver) == 3  # changed: from the start
