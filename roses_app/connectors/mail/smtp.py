"""Inbound SMTP (aiosmtpd): newsletters mailed straight to ROSES become items.

The server listens on the source's host and port and accepts a recipient only when
its address matches one of the source's ``accept`` patterns (shell-style ``*`` and
``?``, case-insensitive: ``news@roses.local``, ``*@lists.roses.local``); any other
recipient gets ``550``.  Each accepted message is xml-ized and handed to the sink
before the server answers ``250``; when that fails the answer is ``451`` (try again
later), so a sending MTA keeps the message and retries: nothing is lost.  Lines up to
1 MiB are taken (RFC 5321 says 1000 bytes; newsletters' HTML often ignores that).

There is no authentication and no TLS: listen on 127.0.0.1 behind the local MTA, or
keep ``accept`` narrow.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import socket
from collections.abc import Callable
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP

from roses_app.config.model import MailSource
from roses_app.connectors.common import describe
from roses_app.connectors.mail.poller import MailPoller
from roses_app.connectors.poller import PollResult

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 32 * 1024 * 1024
MAX_LINE_BYTES = 1024 * 1024


class _LenientSMTP(SMTP):
    # RFC 5321 allows 1000 bytes a line, but newsletters' HTML often has longer lines and
    # MTAs pass them on; ROSES is the final destination, so it takes them.
    line_length_limit = MAX_LINE_BYTES


class _Controller(Controller):
    def factory(self) -> SMTP:
        return _LenientSMTP(self.handler, **self.SMTP_kwargs)


def accepts(patterns: tuple[str, ...] | list[str], address: str) -> bool:
    """Whether ``address`` matches one of ``patterns`` (fnmatch, case-insensitive)."""
    address = address.strip().strip("<>").lower()
    return any(fnmatch.fnmatchcase(address, p.strip().strip("<>").lower()) for p in patterns)


class _Handler:
    def __init__(
        self, source: MailSource, poller: MailPoller, report: Callable[[PollResult], object]
    ) -> None:
        assert source.smtp is not None
        self.source = source
        self.patterns = source.smtp.accept
        self.poller = poller
        self.report = report

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]
    ) -> str:
        if not accepts(self.patterns, address):
            log.info("source %s: refused recipient %s", self.source.name, address)
            return "550 5.1.1 Recipient not accepted here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        raw = envelope.original_content or envelope.content or b""
        if isinstance(raw, str):
            raw = raw.encode("utf-8", "surrogateescape")
        loop = asyncio.get_running_loop()
        try:
            n_items = await loop.run_in_executor(None, self.poller.receive, self.source, raw)
        except Exception as exc:  # the sink failed: the sender must retry
            message = describe(exc)
            self.report(PollResult(self.source.name, "error", message=message))
            return "451 4.3.0 Message not stored, try again later"
        self.report(
            PollResult(self.source.name, "ok", n_items=n_items, message=f"received {n_items} items")
        )
        return "250 OK"


class SmtpServer:
    """The SMTP server of one ``mail: {smtp: ...}`` source."""

    def __init__(
        self,
        source: MailSource,
        poller: MailPoller,
        report: Callable[[PollResult], object],
        *,
        ready_timeout: float = 5.0,
    ) -> None:
        assert source.smtp is not None
        self.source = source
        self.host = source.smtp.host
        self.port = source.smtp.port
        self.handler = _Handler(source, poller, report)
        self.ready_timeout = ready_timeout
        self.controller: Controller | None = None

    @property
    def running(self) -> bool:
        return self.controller is not None

    def start(self) -> None:
        """Listen; raises OSError (port in use...) or TimeoutError when it cannot."""
        if self.controller is not None:
            return
        _check_bindable(self.host, self.port)  # aiosmtpd would only time out
        controller = _Controller(
            self.handler,
            hostname=self.host,
            port=self.port,
            ready_timeout=self.ready_timeout,
            data_size_limit=MAX_MESSAGE_BYTES,
            enable_SMTPUTF8=True,
            ident="ROSES",
        )
        try:
            controller.start()
        except BaseException:
            self._stop(controller)
            raise
        self.controller = controller
        log.info(
            "source %s: SMTP server listening on %s:%d", self.source.name, self.host, self.port
        )

    def stop(self) -> None:
        controller, self.controller = self.controller, None
        if controller is not None:
            self._stop(controller)

    @staticmethod
    def _stop(controller: Controller) -> None:
        try:
            controller.stop(no_assert=True)
        except Exception as exc:  # stopping a server that never started
            log.debug("SMTP server stop: %s", describe(exc))
        loop = controller.loop
        if not loop.is_running() and not loop.is_closed():
            loop.close()


def _check_bindable(host: str, port: int) -> None:
    """Raise OSError now when ``host:port`` cannot be listened on."""
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
