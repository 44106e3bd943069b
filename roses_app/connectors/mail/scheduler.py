"""Running the mail sources: polls, IMAP IDLE workers and SMTP servers.

:class:`MailConnectors` is the mail counterpart of
:class:`~roses_app.connectors.scheduler.FeedScheduler`:

- Maildir and mbox sources are APScheduler interval jobs (first run right away, then
  every ``every`` plus up to ``jitter_fraction`` of it, one at a time per source,
  missed runs coalesced).
- Each IMAP source has a thread that keeps one connection: it fetches what is new,
  then waits in IDLE (when configured and offered by the server) or sleeps ``every``,
  and fetches again.  While idling it re-checks anyway every ``every`` (at most 25
  minutes).  A lost connection or any failure is logged and retried after an
  exponential backoff (:meth:`MailPoller.backoff`).  Stopping takes at most
  ``idle_tick`` seconds plus the network call in flight.
- Each SMTP source has a thread that starts its server and, when the port cannot be
  bound, retries with the same backoff.
- A config reloaded (:meth:`MailConnectors.update_sources`) stops and starts only the
  sources it adds, changes or removes: the other IMAP workers keep their connection
  (and their IDLE), the other SMTP servers their port, the other polls their schedule.

Failures never escape: each outcome is a
:class:`~roses_app.connectors.poller.PollResult` in :attr:`last_results`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor as FuturesPool
from dataclasses import dataclass
from pathlib import Path

from apscheduler.schedulers.background import BackgroundScheduler

from roses_app.config.model import MailSource
from roses_app.connectors.common import (
    PollJob,
    add_poll_job,
    describe,
    start_interval_scheduler,
)
from roses_app.connectors.mail.poller import MailPoller
from roses_app.connectors.mail.smtp import SmtpServer
from roses_app.connectors.mail.state import MailStateStore
from roses_app.connectors.poller import PollResult, Sink

log = logging.getLogger(__name__)

ResultHook = Callable[[PollResult], None]
POLLED_KINDS = ("maildir", "mbox")  # APScheduler jobs; imap and smtp: a thread each


@dataclass
class Worker:
    """The thread of one IMAP or SMTP source, with its own stop (so that one source
    changed stops it alone) and the event of its first attempt."""

    source: MailSource
    thread: threading.Thread
    stop: threading.Event
    started: threading.Event


class MailConnectors:
    """Every mail source of a config: ``start()``, ``poll_all_once()``, ``shutdown()``."""

    def __init__(
        self,
        sources: Iterable[object] | Mapping[str, object],
        state_path: str | Path | None,
        sink: Sink,
        clock: Callable[[], float] = time.time,
        data_dir: str | Path | None = None,
        *,
        max_backoff_seconds: float = 3600.0,
        jitter_fraction: float = 0.1,
        max_workers: int = 4,
        idle_tick: float = 0.5,
        imap_timeout: float = 30.0,
        imap_retry_seconds: float = 5.0,
        smtp_ready_timeout: float = 5.0,
        on_result: ResultHook | None = None,
        environ: Callable[[str], str | None] = os.environ.get,
    ) -> None:
        values = sources.values() if isinstance(sources, Mapping) else sources
        self.sources: list[MailSource] = [s for s in values if isinstance(s, MailSource)]
        if state_path is None:
            if data_dir is None:
                raise ValueError("MailConnectors needs a state_path or a data_dir")
            state_path = Path(data_dir) / "mail.sqlite"
        self.store = MailStateStore(state_path)
        self.poller = MailPoller(
            self.store,
            sink,
            clock,
            max_backoff_seconds=max_backoff_seconds,
            imap_timeout=imap_timeout,
            imap_retry_seconds=imap_retry_seconds,
            environ=environ,
        )
        self.clock = clock
        self.jitter_fraction = jitter_fraction
        self.max_workers = max(1, max_workers)
        self.idle_tick = idle_tick
        self.smtp_ready_timeout = smtp_ready_timeout
        self.on_result = on_result
        self.last_results: dict[str, tuple[float, PollResult]] = {}
        self.smtp_servers: dict[str, SmtpServer] = {}
        self._results_lock = threading.Lock()
        self._scheduler: BackgroundScheduler | None = None
        self.workers: dict[str, Worker] = {}
        self._names = {s.name for s in self.sources}  # whose results are kept
        self._on = False  # started (even with no source) and not shut down

    @property
    def polled(self) -> list[MailSource]:
        """The sources read by polls (``roses once`` reads these): imap, maildir, mbox."""
        return [s for s in self.sources if s.kind != "smtp"]

    @property
    def running(self) -> bool:
        return self._scheduler is not None or bool(self.workers)

    def start(self) -> None:
        """Start polls, IMAP workers and SMTP servers, and return."""
        if self.running:
            raise RuntimeError("MailConnectors already started")
        self._on = True
        jobs = [self._job(s) for s in self.sources if s.kind in POLLED_KINDS]
        if jobs:
            self._scheduler = start_interval_scheduler(jobs, self.max_workers, self.jitter_fraction)
        for source in self.sources:
            self._start_worker(source)
        log.info("reading %d mail source(s)", len(self.sources))

    def _job(self, source: MailSource) -> PollJob:
        return PollJob(
            f"mail:{source.name}", f"poll {source.name}", source.every_seconds, self._poll,
            [source],
        )  # fmt: skip

    def _start_worker(self, source: MailSource) -> None:
        """The thread of an IMAP or SMTP source (nothing for the others)."""
        target = {"imap": self._imap_worker, "smtp": self._smtp_worker}.get(source.kind)
        if target is None:
            return
        stop, started = threading.Event(), threading.Event()
        thread = threading.Thread(
            target=target, args=(source, stop, started), name=f"mail-{source.name}", daemon=True
        )
        self.workers[source.name] = Worker(source, thread, stop, started)
        thread.start()

    def _stop_workers(self, names: Iterable[str], wait: bool) -> None:
        """Stop the workers of ``names`` (all told first, then each awaited)."""
        stopping = [self.workers.pop(name) for name in names if name in self.workers]
        for worker in stopping:
            worker.stop.set()
        if wait:
            for worker in stopping:
                worker.thread.join(timeout=self.poller.imap_timeout + 5.0)

    def wait_ready(self, timeout: float = 10.0) -> bool:
        """Wait until each IMAP worker made its first attempt and each SMTP server made
        its first attempt to listen; True if all did in time."""
        deadline = time.monotonic() + timeout
        for worker in list(self.workers.values()):
            if not worker.started.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def poll_all_once(self, force: bool = False) -> list[PollResult]:
        """Read every IMAP, Maildir and mbox source once, in parallel (no SMTP server is
        started); results in source order (``roses once``)."""
        sources = self.polled
        if not sources:
            return []
        with FuturesPool(max_workers=min(self.max_workers, len(sources))) as pool:
            futures = [pool.submit(self._poll, source, force) for source in sources]
            return [f.result() for f in futures]

    def shutdown(self, wait: bool = True) -> None:
        """Stop polls, workers and servers; with ``wait`` let the work in flight end."""
        self._on = False
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None and scheduler.running:
            scheduler.shutdown(wait=wait)
        self._stop_workers(list(self.workers), wait)

    def update_sources(self, sources: Mapping[str, object]) -> bool:
        """Read the mail sources of ``sources`` from now on (a config reloaded): the
        poll, worker or server of each source added, changed or removed stops (its work
        in flight ends) and, unless removed, starts again with the new settings; the
        others go on untouched.  Returns whether any changed."""
        mail = [s for s in sources.values() if isinstance(s, MailSource)]
        if mail == self.sources:
            return False
        old = {s.name: s for s in self.sources}
        new = {s.name: s for s in mail}
        changed = [n for n in {**old, **new} if old.get(n) != new.get(n)]
        self.sources, self._names = mail, set(new)
        if self._on:
            self._stop_workers(changed, wait=True)
            self._update_jobs(changed, new)
            for name in changed:
                if name in new:
                    self._start_worker(new[name])
        with self._results_lock:
            for gone in [name for name in self.last_results if name not in new]:
                del self.last_results[gone]
        log.info("mail sources updated: %s started again or ended", ", ".join(changed))
        return True

    def _update_jobs(self, changed: Iterable[str], new: Mapping[str, MailSource]) -> None:
        """The polls of the maildir and mbox sources ``changed``: removed, and added
        again (run at once) when the source still is one."""
        for name in changed:
            if self._scheduler is not None and self._scheduler.get_job(f"mail:{name}"):
                self._scheduler.remove_job(f"mail:{name}")  # (a poll in flight ends)
            source = new.get(name)
            if source is None or source.kind not in POLLED_KINDS:
                continue
            if self._scheduler is None:
                self._scheduler = start_interval_scheduler(
                    [], self.max_workers, self.jitter_fraction
                )
            add_poll_job(self._scheduler, self._job(source), self.jitter_fraction)

    def close(self) -> None:
        """Shut down and close the state store."""
        self.shutdown()
        self.store.close()

    # -- the work ------------------------------------------------------------------------

    def _report(self, result: PollResult) -> PollResult:
        with self._results_lock:
            if result.source in self._names:  # (not a removed source's last poll)
                self.last_results[result.source] = (self.clock(), result)
        if result.status == "ok" and result.n_items:
            log.info("source %s: %s", result.source, result.message)
        if self.on_result is not None:
            try:
                self.on_result(result)
            except Exception:
                log.exception("source %s: the result hook failed", result.source)
        return result

    def _poll(self, source: MailSource, force: bool = False) -> PollResult:
        return self._report(self.poller.poll(source, force=force))

    def _retry_delay(self, source: MailSource) -> float:
        state = self.store.get(source.name)
        return self.poller.backoff(source, max(1, state.failures if state else 1))

    def _imap_worker(
        self, source: MailSource, stop: threading.Event, started: threading.Event
    ) -> None:
        assert source.imap is not None
        while not stop.is_set():
            try:
                with self.poller.imap_session(source) as session:
                    idle = source.imap.idle and session.can_idle
                    if source.imap.idle and not session.can_idle:
                        log.info("source %s: the server has no IDLE; polling", source.name)
                    while not stop.is_set():
                        result = self._report(self.poller.sync_imap(source, session))
                        started.set()
                        if result.status == "error":
                            break
                        if idle:
                            session.idle_wait(stop, source.every_seconds, self.idle_tick)
                        else:
                            stop.wait(source.every_seconds)
            except Exception as exc:  # connection, login, IDLE: logged, retried
                if stop.is_set():
                    break
                self._report(self.poller.fail(source, describe(exc)))
            started.set()
            if not stop.is_set():
                stop.wait(self._retry_delay(source))

    def _smtp_worker(
        self, source: MailSource, stop: threading.Event, started: threading.Event
    ) -> None:
        server = SmtpServer(
            source, self.poller, self._report, ready_timeout=self.smtp_ready_timeout
        )
        while not stop.is_set():
            try:
                server.start()
            except Exception as exc:  # port in use, bad address: logged, retried
                self._report(self.poller.fail(source, f"cannot listen: {describe(exc)}"))
                started.set()
                stop.wait(self._retry_delay(source))
                continue
            self.smtp_servers[source.name] = server
            self._report(
                PollResult(source.name, "ok", message=f"listening on {server.host}:{server.port}")
            )
            started.set()
            stop.wait()
        server.stop()
        self.smtp_servers.pop(source.name, None)
