"""Read new messages of one mail source, hand them to the sink once, remember.

:meth:`MailPoller.poll` reads a Maildir, an mbox or an IMAP folder (connecting,
syncing and logging out) and never raises; the IMAP IDLE workers and the SMTP
servers use :meth:`MailPoller.sync_imap` and :meth:`MailPoller.receive` with the
same bookkeeping.  Results are :class:`~roses_app.connectors.poller.PollResult`
(``ok``, ``skipped_backoff`` or ``error``), like the feed connector's.

Each message is xml-ized (:func:`~roses_app.connectors.mail.xmlize.message_item`),
given its guid (its Message-ID, told apart from other mails of the source that share
it: :mod:`~roses_app.connectors.mail.identity`) and handed to the sink unless this
source already handed over the same Maildir file or the same item (``i:`` + hash of
the item, which holds the guid): so a restart, an IMAP UIDVALIDITY change or an mbox
rewritten in place never yields an item twice.
Messages go to the sink in batches; after each accepted batch the new read position
(IMAP UID, mbox offset) and the seen keys are committed in one transaction.  When the
sink raises, nothing of that batch is remembered: the same messages are read again
next time, and none is lost.

A failure is logged with the source name (never with a password) and counted; the
next scheduled poll waits ``every``, then twice that, ... up to ``max_backoff_seconds``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from lxml import etree

from roses_app.config.model import MailSource
from roses_app.connectors.common import SourceLocks, backoff_delay, describe
from roses_app.connectors.mail.identity import identify
from roses_app.connectors.mail.imap import ImapSession
from roses_app.connectors.mail.maildir import read_maildir
from roses_app.connectors.mail.mbox import read_mbox
from roses_app.connectors.mail.state import MailState, MailStateStore
from roses_app.connectors.mail.xmlize import message_item
from roses_app.connectors.poller import PollResult, Sink
from roses_app.errors import RosesError
from roses_app.items import content_hash

log = logging.getLogger(__name__)

RawMessage = tuple[str | None, bytes]  # (reader key such as "f:NAME", or None; raw bytes)


class MailSourceError(RosesError, OSError):
    """A mail source cannot be read now (missing password, not a mailbox, server error)."""


class _Run:
    """One pass over one source: dedup, sink, commit, count."""

    def __init__(self, poller: MailPoller, source: MailSource, state: MailState) -> None:
        self.poller = poller
        self.source = source
        self.state = state
        self.seen = poller.seen_keys(source)
        self.n_items = 0
        self.n_unreadable = 0

    def deliver(self, messages: list[RawMessage], **position: Any) -> int:
        """Hand the unseen ``messages`` to the sink, then commit them and ``position``
        (new values of :class:`MailState` fields); raises when the sink does."""
        items: list[tuple[str, int | None]] = []
        keys: list[str] = []
        guids: dict[str, str] = {}  # guids first held in this batch -> digest
        for reader_key, raw in messages:
            if reader_key is not None and (reader_key in self.seen or reader_key in keys):
                continue
            if reader_key is not None:
                keys.append(reader_key)
            item = self.item(raw, guids)
            if item is None:
                continue
            item_key = "i:" + content_hash(item[0])
            if item_key in self.seen or item_key in keys:
                continue
            keys.append(item_key)
            items.append(item)
        if items:
            self.poller.sink(self.source.name, items)
        state = replace(self.state, **position, n_items=self.state.n_items + len(items))
        self.poller.store.commit(state, keys, guids)
        self.seen.update(keys)
        self.state = state
        self.n_items += len(items)
        return len(items)

    def item(self, raw: bytes, guids: dict[str, str]) -> tuple[str, int | None] | None:
        """The message as an item with its guid (:func:`identify`), or None when it
        cannot be written (counted and logged); a guid first held is added to
        ``guids``."""
        name = self.source.name
        try:
            element, published = message_item(raw)
            guid, digest, new = identify(
                element, raw, lambda g: guids.get(g) or self.poller.store.guid_owner(name, g)
            )
        except Exception as exc:  # a bug on hostile input must not stop the source
            self.n_unreadable += 1
            log.warning(
                "source %s: a message cannot be written as an item (%s: %s); skipped",
                name,
                type(exc).__name__,
                exc,
            )
            return None
        if new:
            guids[guid] = digest
        return etree.tostring(element, encoding="unicode"), published


class MailPoller:
    """Reads mail sources; at most one pass per source at a time (thread-safe)."""

    def __init__(
        self,
        store: MailStateStore,
        sink: Sink,
        clock: Callable[[], float],
        *,
        max_backoff_seconds: float = 3600.0,
        batch_size: int = 100,
        imap_timeout: float = 30.0,
        imap_retry_seconds: float = 5.0,
        backoff_tolerance: float = 0.1,
        environ: Callable[[str], str | None] = os.environ.get,
    ) -> None:
        self.store = store
        self.sink = sink
        self.clock = clock
        self.max_backoff_seconds = max_backoff_seconds
        self.batch_size = max(1, batch_size)
        self.imap_timeout = imap_timeout
        self.imap_retry_seconds = imap_retry_seconds
        self.backoff_tolerance = backoff_tolerance
        self.environ = environ
        self.lock_for = SourceLocks()
        self._seen: dict[str, tuple[str, set[str]]] = {}

    def seen_keys(self, source: MailSource) -> set[str]:
        """The source's seen keys, cached (call with the source's lock held)."""
        cached = self._seen.get(source.name)
        if cached is None or cached[0] != source.mailbox:
            cached = (source.mailbox, self.store.seen_keys(source.name))
            self._seen[source.name] = cached
        return cached[1]

    # -- polling ---------------------------------------------------------------------------

    def poll(self, source: MailSource, force: bool = False) -> PollResult:
        """Read ``source`` once (IMAP: connect, sync, log out); never raises."""
        with self.lock_for(source.name):
            try:
                return self._poll(source, force)
            except Exception as exc:  # the state store itself failed, or a bug
                log.exception("source %s: poll failed unexpectedly", source.name)
                return PollResult(source.name, "error", message=describe(exc))

    def _poll(self, source: MailSource, force: bool) -> PollResult:
        now = self.clock()
        state = self.store.load(source.name, source.mailbox)
        if not force and state.next_allowed_at > 0:
            slack = self.backoff_tolerance * self.backoff(source, 1)
            if now + slack < state.next_allowed_at:
                return PollResult(
                    source.name,
                    "skipped_backoff",
                    message=f"backing off after {state.failures} failure(s); next attempt in "
                    f"{state.next_allowed_at - now:.0f} s",
                    next_allowed_at=state.next_allowed_at,
                )
        run = _Run(self, source, replace(state, last_attempt_at=now, n_polls=state.n_polls + 1))
        try:
            if source.kind == "maildir" and source.path is not None:
                read_maildir(source.path, run.seen, run.deliver, self.batch_size)
            elif source.kind == "mbox" and source.path is not None:
                read_mbox(
                    source.path,
                    run.state.mbox_offset,
                    run.state.mbox_tail,
                    run.deliver,
                    self.batch_size,
                )
            elif source.kind == "imap":
                with self.imap_session(source) as session:
                    self._sync(source, session, run)
            else:
                raise MailSourceError(f"{source.kind} sources are not polled")
        except Exception as exc:
            return self._fail(source, run, describe(exc))
        return self._succeeded(source, run)

    # -- IMAP ------------------------------------------------------------------------------

    def password(self, source: MailSource) -> str:
        assert source.imap is not None
        variable = source.imap.password_env
        password = self.environ(variable)
        if password is None:
            raise MailSourceError(
                f"the environment variable {variable} is not set: put the IMAP password of "
                f"{source.imap.user} on {source.imap.host} in it before starting ROSES"
            )
        return password

    @contextmanager
    def imap_session(self, source: MailSource) -> Iterator[ImapSession]:
        """A connected, logged-in session (logged out on exit)."""
        assert source.imap is not None
        session = ImapSession(source.imap, timeout=self.imap_timeout)
        try:
            session.connect(self.password(source))
            yield session
        finally:
            session.close()

    def sync_imap(self, source: MailSource, session: ImapSession) -> PollResult:
        """Fetch what is new in the folder over an open session; never raises (after
        an ``error`` result, the caller should reconnect)."""
        with self.lock_for(source.name):
            now = self.clock()
            state = self.store.load(source.name, source.mailbox)
            run = _Run(self, source, replace(state, last_attempt_at=now, n_polls=state.n_polls + 1))
            try:
                self._sync(source, session, run)
            except Exception as exc:
                return self._fail(source, run, describe(exc))
            return self._succeeded(source, run)

    def _sync(self, source: MailSource, session: ImapSession, run: _Run) -> None:
        assert source.imap is not None
        uidvalidity, uidnext = session.select()
        last_uid = run.state.last_uid
        if run.state.uidvalidity is not None and run.state.uidvalidity != uidvalidity:
            log.warning(
                "source %s: UIDVALIDITY of %s changed (%s -> %s): reading the folder again; "
                "messages already seen are not repeated",
                source.name,
                source.imap.folder,
                run.state.uidvalidity,
                uidvalidity,
            )
            last_uid = 0
        run.state = replace(run.state, uidvalidity=uidvalidity, last_uid=last_uid)
        if uidnext is not None and uidnext - 1 <= last_uid:
            return  # nothing new
        uids = session.new_uids(last_uid)
        for start in range(0, len(uids), self.batch_size):
            chunk = uids[start : start + self.batch_size]
            fetched = session.fetch(chunk)
            run.deliver([(None, raw) for _, raw in fetched], last_uid=chunk[-1])
            session.after_delivery(chunk)

    # -- SMTP ------------------------------------------------------------------------------

    def receive(self, source: MailSource, raw: bytes) -> int:
        """Hand one message received by the SMTP server over; raises when the sink does."""
        with self.lock_for(source.name):
            now = self.clock()
            state = self.store.load(source.name, source.mailbox)
            run = _Run(self, source, replace(state, last_attempt_at=now))
            try:
                run.deliver([(None, raw)])
            except Exception as exc:
                self._fail(source, run, describe(exc), count_failure=False)
                raise
            self._succeeded(source, run)
            return run.n_items

    # -- bookkeeping -----------------------------------------------------------------------

    def _succeeded(self, source: MailSource, run: _Run) -> PollResult:
        state = run.state
        if state.failures:
            log.info("source %s: recovered after %d failure(s)", source.name, state.failures)
        self.store.put(
            replace(
                state,
                failures=0,
                next_allowed_at=0.0,
                last_status="ok",
                last_error="",
                last_success_at=state.last_attempt_at,
                n_ok=state.n_ok + 1,
            )
        )
        message = f"{run.n_items} items"
        if run.n_unreadable:
            message += f" ({run.n_unreadable} unreadable messages skipped)"
        return PollResult(source.name, "ok", n_items=run.n_items, message=message)

    def _fail(
        self, source: MailSource, run: _Run, message: str, *, count_failure: bool = True
    ) -> PollResult:
        result = self.fail(
            source,
            message,
            attempt_at=run.state.last_attempt_at,
            n_polls=run.state.n_polls,
            count_failure=count_failure,
        )
        return replace(result, n_items=run.n_items)

    def fail(
        self,
        source: MailSource,
        message: str,
        *,
        attempt_at: float | None = None,
        n_polls: int | None = None,
        count_failure: bool = True,
    ) -> PollResult:
        """Record and log a failure of ``source``; the result says when to try again."""
        state = self.store.load(source.name, source.mailbox)  # what the batches committed
        now = self.clock()
        failures = state.failures + 1 if count_failure else state.failures
        delay = self.backoff(source, failures) if count_failure else 0.0
        next_allowed_at = now + delay if count_failure else state.next_allowed_at
        self.store.put(
            replace(
                state,
                last_attempt_at=now if attempt_at is None else attempt_at,
                n_polls=state.n_polls if n_polls is None else n_polls,
                failures=failures,
                next_allowed_at=next_allowed_at,
                last_status="error",
                last_error=message,
                n_errors=state.n_errors + 1,
            )
        )
        if count_failure:
            log.warning(
                "source %s: %s (failure %d in a row; next attempt in %.0f s)",
                source.name,
                message,
                failures,
                delay,
            )
        else:
            log.warning("source %s: %s", source.name, message)
        return PollResult(source.name, "error", message=message, next_allowed_at=next_allowed_at)

    def backoff(self, source: MailSource, failures: int) -> float:
        """Seconds to wait after ``failures`` failures in a row: ``every`` doubled each
        time (IMAP: from at most ``imap_retry_seconds``, so a lost connection comes back
        soon), capped at ``max_backoff_seconds``."""
        base = source.every_seconds if source.every_seconds > 0 else 60.0
        if source.kind in ("imap", "smtp"):
            base = min(base, self.imap_retry_seconds)
        return backoff_delay(base, failures, self.max_backoff_seconds)
