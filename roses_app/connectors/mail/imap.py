"""One IMAP connection to one folder (IMAPClient), as the mail poller needs it.

The folder is opened read-only (EXAMINE) unless the source may mark messages seen
or delete them, and messages are fetched with ``BODY.PEEK[]``, so reading never
sets ``\\Seen``.  :meth:`ImapSession.idle_wait` waits in IDLE for new mail in short
steps, so that a stop request is noticed within ``tick`` seconds; IDLE is renewed
before the server's 30-minute limit.

The password is given to :meth:`ImapSession.connect` and to IMAPClient only, and
IMAPClient redacts LOGIN in its own debug log; errors raised here quote the server's
answer, never the command.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from typing import Any

from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientError

from roses_app.config.model import ImapSettings
from roses_app.errors import RosesError

log = logging.getLogger(__name__)

SEEN = b"\\Seen"
IDLE_RENEW_SECONDS = 25 * 60.0  # RFC 2177: servers may drop an IDLE after 30 minutes


class ImapError(RosesError, OSError):
    """The IMAP server refused something or the connection broke."""


class ImapSession:
    def __init__(self, settings: ImapSettings, timeout: float = 30.0) -> None:
        self.settings = settings
        self.timeout = timeout
        self.client: IMAPClient | None = None
        self.capabilities: set[bytes] = set()

    @property
    def where(self) -> str:
        s = self.settings
        return f"{s.user}@{s.host}:{s.port}"

    @property
    def can_idle(self) -> bool:
        return b"IDLE" in self.capabilities

    @property
    def writable(self) -> bool:
        return self.settings.mark_seen or self.settings.delete

    def connect(self, password: str) -> None:
        s = self.settings
        context = ssl.create_default_context()
        try:
            client = IMAPClient(
                s.host,
                port=s.port,
                ssl=s.security == "ssl",
                ssl_context=context,
                timeout=self.timeout,
            )
        except (OSError, IMAPClientError) as exc:
            raise ImapError(f"cannot connect to {s.host}:{s.port}: {_reason(exc)}") from None
        self.client = client
        try:
            if s.security == "starttls":
                client.starttls(context)
            client.login(s.user, password)
            self.capabilities = {bytes(c).upper() for c in client.capabilities()}
        except (OSError, IMAPClientError) as exc:
            self.close()
            raise ImapError(f"{self.where}: login failed: {_reason(exc)}") from None

    def close(self) -> None:
        client, self.client = self.client, None
        if client is None:
            return
        try:
            client.logout()
        except (OSError, IMAPClientError) as exc:  # the connection is gone anyway
            log.debug("%s: logout failed: %s", self.where, _reason(exc))
            try:
                client.shutdown()
            except (OSError, IMAPClientError):
                log.debug("%s: socket already closed", self.where)

    def _client(self) -> IMAPClient:
        if self.client is None:
            raise ImapError(f"{self.where}: not connected")
        return self.client

    def select(self) -> tuple[int, int | None]:
        """Open the folder; its (UIDVALIDITY, UIDNEXT or None)."""
        try:
            info = self._client().select_folder(self.settings.folder, readonly=not self.writable)
        except (OSError, IMAPClientError) as exc:
            raise ImapError(
                f"{self.where}: cannot open folder {self.settings.folder!r}: {_reason(exc)}"
            ) from None
        uidvalidity = info.get(b"UIDVALIDITY")
        if not isinstance(uidvalidity, int):
            raise ImapError(f"{self.where}: the server gave no UIDVALIDITY")
        uidnext = info.get(b"UIDNEXT")
        return uidvalidity, uidnext if isinstance(uidnext, int) else None

    def new_uids(self, last_uid: int) -> list[int]:
        """UIDs above ``last_uid``, ascending."""
        uids = self._call("search", ["UID", f"{last_uid + 1}:*"])
        return sorted(uid for uid in uids if isinstance(uid, int) and uid > last_uid)

    def fetch(self, uids: list[int]) -> list[tuple[int, bytes]]:
        """The raw messages of ``uids`` still in the folder, in UID order."""
        data = self._call("fetch", uids, [b"BODY.PEEK[]"])
        out = []
        for uid in uids:
            raw = data.get(uid, {}).get(b"BODY[]")
            if isinstance(raw, bytes):
                out.append((uid, raw))
            elif isinstance(raw, str):
                out.append((uid, raw.encode("utf-8", "surrogateescape")))
        return out

    def after_delivery(self, uids: list[int]) -> None:
        """Mark ``uids`` seen and/or delete them, as configured."""
        if not uids:
            return
        if self.settings.mark_seen:
            self._call("add_flags", uids, [SEEN], True)
        if self.settings.delete:
            self._call("delete_messages", uids, True)
            if b"UIDPLUS" in self.capabilities:
                self._call("uid_expunge", uids)
            else:
                self._call("expunge")

    def idle_wait(self, stop: threading.Event, seconds: float, tick: float = 0.5) -> bool:
        """Wait in IDLE up to ``seconds`` (and at most 25 minutes) for new mail or
        ``stop``; True when the server announced new messages."""
        client = self._client()
        self._call("idle")
        deadline = time.monotonic() + min(seconds, IDLE_RENEW_SECONDS)
        announced = False
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                started = time.monotonic()
                responses = client.idle_check(timeout=tick)
                for response in responses:
                    if _is_bye(response):
                        raise ImapError(f"{self.where}: the server closed the connection")
                    if len(response) >= 2 and response[1] in (b"EXISTS", b"RECENT"):
                        announced = True
                if announced:
                    break
                if not responses and time.monotonic() - started < tick / 4:
                    break  # woke up early with nothing: maybe end of stream; check below
        finally:
            try:
                client.idle_done()
            except (OSError, IMAPClientError) as exc:
                raise ImapError(f"{self.where}: connection lost: {_reason(exc)}") from None
        return announced

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self._client(), method)(*args)
        except (OSError, IMAPClientError) as exc:
            raise ImapError(f"{self.where}: {method} failed: {_reason(exc)}") from None


def _is_bye(response: Any) -> bool:
    return isinstance(response, tuple) and bool(response) and response[0] == b"BYE"


def _reason(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
