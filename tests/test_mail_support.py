"""A real Dovecot IMAP server for the mail tests, and small helpers.

:class:`Dovecot` runs ``dovecot -F -c CONF`` with its own configuration in a fresh
folder under the system temp dir (``/tmp``, so Dovecot's unprivileged users can reach
it): IMAP on 127.0.0.1 and a free port, no SSL, plaintext login allowed, one user in a
passwd-file per user (one user per test, added on the fly),
``mail_location = maildir:~/Maildir``.  Dovecot's login process refuses to
run as root, so when the tests run as root the whole server runs as the package's
``dovecot`` user (``default_login_user`` and ``default_internal_user`` are that user
too, ``default_internal_group`` its group, and it owns the folder); otherwise it runs
as the current user, with the current user and group in those settings (the group
of the sockets it makes included: an ordinary user can give a file no other).

Mail is delivered by writing files into the Maildir (as an MTA does) or by IMAP
APPEND.  Test modules import the fixtures by their function names
(``dovecot_fixture``...) and use them by their fixture names (``dovecot``...).  The
fixtures skip their tests when Dovecot is not installed, with the command that installs
it, and fail them under CI (``system_packages.require``).
"""

from __future__ import annotations

import contextlib
import grp
import imaplib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from system_packages import require

PASSWORD = "s3cret-Pa55word-never-logged"  # a test server's password

_CONF = """\
protocols = imap
listen = 127.0.0.1
base_dir = {root}/run
state_dir = {root}/state
instance_name = roses-test-{port}
log_path = {root}/dovecot.log
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_failure_delay = 0
default_login_user = {login_user}
default_internal_user = {login_user}
default_internal_group = {login_group}
first_valid_uid = 1
mail_location = maildir:~/Maildir
mailbox_idle_check_interval = 1 secs
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root}/users/%u
}}
userdb {{
  driver = passwd-file
  args = username_format=%u {root}/users/%u
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, step: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(step)
    raise AssertionError("condition not reached in time")


class Dovecot:
    """One Dovecot instance; each test gets its own user and Maildir (:meth:`mailbox`)."""

    def __init__(self, root: Path, program: Path) -> None:
        self.root = root
        self.program = program
        self.port = free_port()
        root_user = os.geteuid() == 0
        entry = pwd.getpwnam("dovecot") if root_user else pwd.getpwuid(os.geteuid())
        self.run_as = entry.pw_name
        self.uid, self.gid = entry.pw_uid, entry.pw_gid
        (root / "run").mkdir(exist_ok=True)
        (root / "state").mkdir(exist_ok=True)
        (root / "users").mkdir(exist_ok=True)
        self.conf = root / "dovecot.conf"
        group = grp.getgrgid(self.gid).gr_name
        self.conf.write_text(
            _CONF.format(root=root, port=self.port, login_user=self.run_as, login_group=group)
        )
        self.process: subprocess.Popen[bytes] | None = None
        self._n = 0
        self._lock = threading.Lock()
        self.chown(root)

    def chown(self, path: Path) -> None:
        """Give ``path`` (and what is in it) to the user Dovecot runs as."""
        if os.geteuid() != 0:
            return
        os.chown(path, self.uid, self.gid)
        if path.is_dir():
            for dirpath, dirnames, filenames in os.walk(path):
                for name in dirnames + filenames:
                    os.chown(os.path.join(dirpath, name), self.uid, self.gid)

    def mailbox(self) -> Mailbox:
        """A new user with an empty Maildir."""
        with self._lock:
            self._n += 1
            user = f"reader{self._n}"
        home = self.root / "home" / user
        for sub in ("cur", "new", "tmp"):
            (home / "Maildir" / sub).mkdir(parents=True, exist_ok=True)
        self.chown(self.root / "home")
        users = self.root / "users" / user  # one passwd-file per user: read on first use
        users.write_text(f"{user}:{{PLAIN}}{PASSWORD}:{self.uid}:{self.gid}::{home}\n")
        self.chown(users)
        return Mailbox(self, user, home / "Maildir")

    def start(self) -> None:
        kwargs: dict[str, object] = {}
        if os.geteuid() == 0:
            kwargs = {"user": self.uid, "group": self.gid, "extra_groups": []}
        self.process = subprocess.Popen(  # type: ignore[call-overload]
            [str(self.program), "-F", "-c", str(self.conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so that stop() ends it all
            **kwargs,
        )
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"dovecot exited: {self.log()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s,
            ):
                if s.recv(64).startswith(b"* OK"):
                    return
            time.sleep(0.05)
        raise RuntimeError(f"dovecot did not start: {self.log()}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        # The master does not end the imap processes of open connections: end the
        # whole process group this server started (and nothing else).  SIGTERM first, so
        # an imap process lets go of its mailbox locks: a SIGKILLed one can leave a
        # dotlock that makes the next server's SELECT wait minutes (seen under load, where
        # the dead process is not yet reaped and so still looks alive).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        finally:
            time.sleep(0.2)  # the imap children end on the same signal
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()

    def log(self) -> str:
        path = self.root / "dovecot.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        if self.process is not None and self.process.stderr is not None and self.process.poll():
            text += self.process.stderr.read().decode(errors="replace")
        return text


class Mailbox:
    """One user of a :class:`Dovecot`: deliver, append, inspect."""

    def __init__(self, server: Dovecot, user: str, maildir: Path) -> None:
        self.server = server
        self.user = user
        self.password = PASSWORD
        self.maildir = maildir
        self._n = 0
        self._lock = threading.Lock()

    @property
    def port(self) -> int:
        return self.server.port

    def folder_dir(self, folder: str = "INBOX") -> Path:
        return self.maildir if folder == "INBOX" else self.maildir / f".{folder}"

    def deliver(self, raw: bytes, folder: str = "INBOX") -> Path:
        """Write ``raw`` into the folder's Maildir as an MTA would (tmp/, then new/)."""
        with self._lock:
            self._n += 1
            n = self._n
        base = self.folder_dir(folder)
        name = f"{int(time.time())}.M{n}P{os.getpid()}.roses-test"
        tmp = base / "tmp" / name
        tmp.write_bytes(raw)
        self.server.chown(tmp)
        target = base / "new" / name
        os.rename(tmp, target)
        return target

    @contextlib.contextmanager
    def imap(self) -> Iterator[imaplib.IMAP4]:
        client = imaplib.IMAP4("127.0.0.1", self.port, timeout=10)
        client.login(self.user, self.password)
        try:
            yield client
        finally:
            with contextlib.suppress(imaplib.IMAP4.error, OSError):
                client.logout()

    def append(self, messages: list[bytes], folder: str = "INBOX") -> None:
        with self.imap() as client:
            for raw in messages:
                typ, data = client.append(folder, "", None, raw)
                assert typ == "OK", data

    def create(self, folder: str) -> None:
        with self.imap() as client:
            typ, data = client.create(folder)
            assert typ == "OK", data

    def delete(self, folder: str) -> None:
        with self.imap() as client:
            typ, data = client.delete(folder)
            assert typ == "OK", data

    def flags(self, folder: str = "INBOX") -> list[bytes]:
        """The FETCH FLAGS lines of every message in ``folder`` (read-only)."""
        with self.imap() as client:
            client.select(folder, readonly=True)
            typ, data = client.fetch("1:*", "(FLAGS)")
            if typ != "OK" or data == [None]:
                return []
            return [d for d in data if isinstance(d, bytes)]

    def count(self, folder: str = "INBOX") -> int:
        with self.imap() as client:
            typ, data = client.select(folder, readonly=True)
            assert typ == "OK", data
            return int(data[0] or 0)


@contextlib.contextmanager
def running_dovecot() -> Iterator[Dovecot]:
    program = require("dovecot")
    root = Path(tempfile.mkdtemp(prefix="roses-dovecot-"))
    os.chmod(root, 0o755)
    server = Dovecot(root, program)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session", name="dovecot_server")
def dovecot_server_fixture() -> Iterator[Dovecot]:
    """One Dovecot for the whole run (each test uses its own user)."""
    with running_dovecot() as server:
        yield server


@pytest.fixture(name="dovecot")
def dovecot_fixture(dovecot_server: Dovecot) -> Mailbox:
    """A fresh user and Maildir on the shared Dovecot."""
    if dovecot_server.process is None or dovecot_server.process.poll() is not None:
        dovecot_server.start()  # a test stopped it
    return dovecot_server.mailbox()


@pytest.fixture(name="own_dovecot")
def own_dovecot_fixture() -> Iterator[Mailbox]:
    """A user on a Dovecot of its own (for tests that stop and start the server)."""
    with running_dovecot() as server:
        yield server.mailbox()


class ListSink:
    """A sink that remembers everything and can be told to fail."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[tuple[str, list[tuple[str, int | None]]]] = []
        self.fail = False

    def __call__(self, source: str, items: list[tuple[str, int | None]]) -> None:
        if self.fail:
            raise OSError("spool is full")
        with self.lock:
            self.batches.append((source, list(items)))

    def items(self, source: str | None = None) -> list[str]:
        with self.lock:
            return [xml for s, batch in self.batches for xml, _ in batch if source in (None, s)]

    def guids(self, source: str | None = None) -> list[str]:
        from roses_app.items import parse_item

        return [parse_item(xml).findtext("guid") or "" for xml in self.items(source)]


def message(n: int, subject: str | None = None, body: str = "Hello.", extra: str = "") -> bytes:
    """A small well-formed message with Message-ID <n@roses.test>."""
    subject = subject if subject is not None else f"Message {n}"
    return (
        f"From: Sender {n} <sender{n}@example.org>\n"
        f"To: reader@example.org\n"
        f"Subject: {subject}\n"
        f"Date: Mon, 01 Jan 2024 10:{n % 60:02d}:00 +0000\n"
        f"Message-ID: <{n}@roses.test>\n"
        f"{extra}"
        f"\n{body}\n"
    ).encode()
