"""Poll one feed source: fetch, parse, xml-ize, hand the items over, remember.

:meth:`Poller.poll` never raises.  Every outcome is a :class:`PollResult` and is
recorded in the :class:`~roses_app.connectors.state.StateStore`:

``ok``
    The document was fetched and parsed and its items were accepted by the sink
    (the sink is not called for a feed without entries).  The new validators
    (ETag, Last-Modified) are stored and any backoff is cleared.
``not_modified``
    The server answered 304 (or a ``file:`` source did not change).
``skipped_backoff``
    An earlier failure put the source in backoff and its time has not come;
    nothing was fetched.  ``force=True`` polls anyway.
``gone``
    The server answered 410 Gone, now or before: the source is not polled any
    more until its URL in ``feeds.yaml`` changes (or the state is reset).
``error``
    Fetching, parsing or the sink failed.  The failure is logged with the source
    name and counted; the next attempt waits ``every``, then twice that, four
    times, ... up to ``fetch.max_backoff_seconds``; a ``Retry-After`` from the
    server (429, 503) decides the wait instead (capped the same way).

When the sink raises, nothing about the document is recorded as seen (the
validators stay as they were), so the same items are fetched again next time
and none is lost.  A permanent redirect updates the stored URL whatever happens
next.

Time comes from the injected ``clock`` (seconds), so tests drive it.  Because the
scheduler adds a random jitter to its runs, a run that comes up to
``backoff_tolerance`` times ``every`` before the end of an exponential backoff may go
ahead; a server's ``Retry-After`` is honoured exactly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from roses_app.config.model import FeedSource, FetchSettings
from roses_app.connectors.categories import add_categories
from roses_app.connectors.common import SourceLocks, backoff_delay, describe
from roses_app.connectors.fetch import AsyncFetcher, FetchResult, RetryLaterError
from roses_app.connectors.freshness import after_document, after_not_modified
from roses_app.connectors.limits import FetchTimeoutError
from roses_app.connectors.loopthread import LoopThread
from roses_app.connectors.refresh_hints import Hints, hints_from
from roses_app.connectors.state import SourceState, StateStore
from roses_app.connectors.websub_in import link_rel
from roses_app.connectors.xmlize import ParsedFeed, parse_feed

log = logging.getLogger(__name__)

PollStatus = Literal["ok", "not_modified", "skipped_backoff", "gone", "error"]
Items = list[tuple[str, int | None]]
Sink = Callable[[str, Items], None]


@dataclass(frozen=True)
class PollResult:
    source: str
    status: PollStatus
    n_items: int = 0
    message: str = ""
    next_allowed_at: float = 0.0  # clock seconds; 0 = no backoff
    fetch_seconds: float | None = None  # wall time of the fetch; None: nothing fetched
    timed_out: bool = False  # the fetch hit its deadline (fetch.timeout)
    lag_seconds: float = 0.0  # how long after its due time the poll started
    state: SourceState | None = None  # as recorded by a successful poll
    interval_seconds: float | None = None  # until the next poll (set by the scheduler)
    interval_reason: str = ""


# The publisher's polling hints (ttl, skipHours, ...) are channel elements, read from
# the start of the document: a 50 MB document is not parsed whole for them.
HINTS_BYTES = 1 << 20


@dataclass(frozen=True)
class Parsed:
    """A fetched document parsed: the feed, and its entries as items with the source's
    categories added (what :func:`parse_document` gives, in a worker process or not)."""

    feed: ParsedFeed
    items: Items
    hints: Hints  # the publisher's wishes about polling (ttl, skipHours, max-age, ...)


def parse_document(
    body: bytes,
    url: str,
    headers: Mapping[str, str],
    categories: tuple[str, ...],
    max_items: int | None = None,
) -> Parsed:
    """Parse and xml-ize a document, its first ``max_items`` entries (picklable both
    ways: runs in parse workers)."""
    feed = parse_feed(body, url, headers, max_items)
    hints = hints_from({}, body[:HINTS_BYTES], headers, time.time())
    return Parsed(feed, add_categories(feed.entries, categories), hints)


def parse_document_file(
    path: str,
    url: str,
    headers: Mapping[str, str],
    categories: tuple[str, ...],
    max_items: int | None = None,
) -> Parsed:
    """:func:`parse_document` of the document in the file ``path`` (how a large one
    reaches a parse worker: read a part at a time, never whole)."""
    with open(path, "rb") as stream:
        feed = parse_feed(stream, url, headers, max_items)
        stream.seek(0)
        head = stream.read(HINTS_BYTES)
    hints = hints_from({}, head, headers, time.time())
    return Parsed(feed, add_categories(feed.entries, categories), hints)


ParseStep = Callable[[bytes, str, Mapping[str, str], tuple[str, ...]], Awaitable[Parsed]]
# Hand the items over and record the state, in this order; the state is recorded
# only once the items are safe.  Items are empty when only the state changed.
CommitStep = Callable[[str, Items, SourceState], Awaitable[None]]
# A document was fetched: its source, the WebSub hub it names (if any), its topic.
DocumentHook = Callable[[str, str | None, str], None]


class AsyncPoller:
    """Polls feed sources as coroutines; how documents are parsed and how items and
    state are committed is given (:mod:`roses_app.connectors.engine` parses in worker
    processes and commits many polls at once; :class:`Poller` does both in line)."""

    def __init__(
        self,
        state_store: StateStore,
        fetch_settings: FetchSettings,
        clock: Callable[[], float],
        fetcher: AsyncFetcher,
        parse: ParseStep,
        commit: CommitStep,
        *,
        backoff_tolerance: float = 0.1,
        on_document: DocumentHook | None = None,
        on_fetched: Callable[[str], None] | None = None,
    ) -> None:
        self.state_store = state_store
        self.settings = fetch_settings
        self.clock = clock
        self.fetcher = fetcher
        self.parse = parse
        self.commit = commit
        self.backoff_tolerance = backoff_tolerance
        self.on_document = on_document
        self.on_fetched = on_fetched  # a source's fetch ended (its slot is free)

    def interval(self, source: FeedSource) -> float:
        every = source.every_seconds
        return every if every > 0 else self.settings.default_every_seconds

    async def poll(self, source: FeedSource, force: bool = False) -> PollResult:
        """Poll ``source`` once; never raises (but is cancelled as any coroutine)."""
        try:
            return await self._poll(source, force)
        except Exception as exc:  # the state store itself failed, or a bug
            log.exception("source %s: poll failed unexpectedly", source.name)
            return PollResult(source.name, "error", message=f"{type(exc).__name__}: {exc}")

    # -- the steps ---------------------------------------------------------------------

    async def _poll(self, source: FeedSource, force: bool) -> PollResult:
        name = source.name
        now = self.clock()
        state = self.state_store.load(name, source.url)
        if state.gone:
            return PollResult(
                name,
                "gone",
                message=f"{state.url} is gone (HTTP 410); change the source's URL to poll again",
            )
        if not force and state.next_allowed_at > 0:
            slack = 0.0 if state.strict_retry else self.backoff_tolerance * self.interval(source)
            if now + slack < state.next_allowed_at:
                wait = state.next_allowed_at - now
                return PollResult(
                    name,
                    "skipped_backoff",
                    message=f"backing off after {state.failures} failure(s); "
                    f"next attempt in {wait:.0f} s",
                    next_allowed_at=state.next_allowed_at,
                )
        state = replace(state, last_attempt_at=now, n_polls=state.n_polls + 1)

        started = time.monotonic()
        try:
            try:
                result = await self.fetcher.fetch(state.url, state.etag, state.last_modified)
            finally:
                if self.on_fetched is not None:
                    self.on_fetched(name)
        except RetryLaterError as exc:
            failed = await self._fail(source, state, now, str(exc), retry_after=exc.retry_after)
            return replace(failed, fetch_seconds=time.monotonic() - started)
        except Exception as exc:
            failed = await self._fail(source, state, now, describe(exc))
            return replace(
                failed,
                fetch_seconds=time.monotonic() - started,
                timed_out=isinstance(exc, FetchTimeoutError),
            )
        return await self._handle(source, state, now, result, time.monotonic() - started)

    async def _handle(
        self, source: FeedSource, state: SourceState, now: float, result: FetchResult, took: float
    ) -> PollResult:
        """What a fetch that did not fail means: moved, gone, unchanged or new items."""
        name = source.name
        if result.permanent_url and result.permanent_url != state.url:
            log.info(
                "source %s: moved permanently from %s to %s; using the new URL from now on",
                name,
                state.url,
                result.permanent_url,
            )
            state = replace(state, url=result.permanent_url)

        if result.gone:
            message = f"{result.url} is gone (HTTP 410); not polling it any more"
            log.warning("source %s: %s", name, message)
            gone = replace(state, gone=True, last_status="gone", last_error=message)
            await self.commit(name, [], gone)
            return PollResult(name, "gone", message=message, fetch_seconds=took)

        if result.not_modified:
            unchanged = self._succeeded(
                after_not_modified(state, result.headers, now),
                now,
                status="not_modified",
                etag=result.etag or state.etag,
                last_modified=result.last_modified or state.last_modified,
                n_not_modified=state.n_not_modified + 1,
            )
            await self.commit(name, [], unchanged)
            return PollResult(name, "not_modified", fetch_seconds=took, state=unchanged)

        try:
            done = await self.parse(result.body, result.url, result.headers, source.categories)
        except Exception as exc:
            failed = await self._fail(source, state, now, describe(exc))
            return replace(failed, fetch_seconds=took)
        parsed, items = done.feed, done.items
        if self.on_document is not None:
            links = result.headers.get("link")
            hub = parsed.hub or link_rel(links, "hub")
            self.on_document(name, hub, parsed.self_url or link_rel(links, "self") or result.url)
        if parsed.skipped:
            log.warning("source %s: %d entries could not be written as items", name, parsed.skipped)
        if parsed.left_out:
            taken = len(parsed.entries) + parsed.skipped
            log.warning(
                "source %s: the document has %d entries: the first %d are taken, the other "
                "%d left out (a feed lists its newest first; later polls take new ones)",
                name,
                taken + parsed.left_out,
                taken,
                parsed.left_out,
            )
        if parsed.dropped:
            log.warning("source %s: %d invalid fields dropped from its items", name, parsed.dropped)

        succeeded = self._succeeded(
            after_document(state, items, done.hints, now),
            now,
            status="ok",
            etag=result.etag,
            last_modified=result.last_modified,
            n_ok=state.n_ok + 1,
            n_items=state.n_items + len(items),
        )
        try:
            await self.commit(name, items, succeeded)
        except Exception as exc:
            log.exception("source %s: the sink refused %d items", name, len(items))
            why = f"sink failed ({describe(exc)}); items will be refetched"
            return replace(await self._fail(source, state, now, why), fetch_seconds=took)
        message = f"{len(items)} items"
        if parsed.bozo:
            message += f" (feed is not well-formed, recovered: {parsed.bozo_message})"
        return PollResult(name, "ok", len(items), message, fetch_seconds=took, state=succeeded)

    def _succeeded(
        self,
        state: SourceState,
        now: float,
        *,
        status: str,
        etag: str | None,
        last_modified: str | None,
        n_ok: int | None = None,
        n_not_modified: int | None = None,
        n_items: int | None = None,
    ) -> SourceState:
        if state.failures:
            log.info("source %s: recovered after %d failure(s)", state.name, state.failures)
        return replace(
            state,
            etag=etag,
            last_modified=last_modified,
            failures=0,
            next_allowed_at=0.0,
            strict_retry=False,
            last_status=status,
            last_error="",
            last_success_at=now,
            n_ok=state.n_ok if n_ok is None else n_ok,
            n_not_modified=state.n_not_modified if n_not_modified is None else n_not_modified,
            n_items=state.n_items if n_items is None else n_items,
        )

    async def _fail(
        self,
        source: FeedSource,
        state: SourceState,
        now: float,
        message: str,
        *,
        retry_after: float | None = None,
    ) -> PollResult:
        failures = state.failures + 1
        cap = self.settings.max_backoff_seconds
        if retry_after is not None:
            delay = min(max(retry_after, 0.0), cap)
        else:
            delay = backoff_delay(self.interval(source), failures, cap)
        next_allowed_at = now + delay
        await self.commit(
            source.name,
            [],
            replace(
                state,
                failures=failures,
                next_allowed_at=next_allowed_at,
                strict_retry=retry_after is not None,
                last_status="error",
                last_error=message,
                n_errors=state.n_errors + 1,
            ),
        )
        log.warning(
            "source %s: %s (failure %d in a row; next attempt in %.0f s)",
            source.name,
            message,
            failures,
            delay,
        )
        return PollResult(source.name, "error", message=message, next_allowed_at=next_allowed_at)


class Poller:
    """:class:`AsyncPoller` for synchronous callers (``roses fetch``, tests): parses in
    line and hands items to ``sink`` then the state to ``state_store``, one poll at a
    time per source (thread-safe across sources)."""

    def __init__(
        self,
        state_store: StateStore,
        fetch_settings: FetchSettings,
        clock: Callable[[], float],
        sink: Sink,
        *,
        base_dir: Path | None = None,
        backoff_tolerance: float = 0.1,
    ) -> None:
        self.state_store = state_store
        self.settings = fetch_settings
        self.sink = sink
        self._loop = LoopThread("roses-poller")
        fetcher = AsyncFetcher(fetch_settings, clock, base_dir=base_dir)
        self.core = AsyncPoller(
            state_store,
            fetch_settings,
            clock,
            fetcher,
            self._parse_in_line,
            self._commit,
            backoff_tolerance=backoff_tolerance,
        )
        self._lock_for = SourceLocks()

    def interval(self, source: FeedSource) -> float:
        return self.core.interval(source)

    def poll(self, source: FeedSource, force: bool = False) -> PollResult:
        """Poll ``source`` once; never raises."""
        with self._lock_for(source.name):
            return self._loop.run(self.core.poll(source, force))

    async def _parse_in_line(
        self, body: bytes, url: str, headers: Mapping[str, str], categories: tuple[str, ...]
    ) -> Parsed:
        return parse_document(body, url, headers, categories, self.settings.max_items)

    async def _commit(self, name: str, items: Items, state: SourceState) -> None:
        if items:
            self.sink(name, items)
        self.state_store.put(state)

    def close(self) -> None:
        if not self._loop.loop.is_closed():
            self._loop.run(self.core.fetcher.aclose())
            self._loop.close()
