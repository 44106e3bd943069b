"""WebSub push in, the feed scheduler's part (its base class): subscribing through the
hubs polled documents name, renewing leases, ending the subscriptions of sources that
left the config, and taking pushed documents as polls (see :mod:`.websub_in`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from roses_app.config.model import FeedSource
from roses_app.connectors.committer import Committer
from roses_app.connectors.common import describe
from roses_app.connectors.loopthread import LoopThread
from roses_app.connectors.parsepool import ParsePool
from roses_app.connectors.pollqueue import PollQueue, host_of
from roses_app.connectors.refresh import Interval
from roses_app.connectors.state import SourceState
from roses_app.connectors.websub_in import Subscriber

log = logging.getLogger("roses_app.connectors.scheduler")


class PushIn:
    """What the scheduler does for WebSub (see the module docstring)."""

    sources: dict[str, FeedSource]
    subscriber: Subscriber | None
    parser: ParsePool
    committer: Committer
    queue: PollQueue
    clock: Callable[[], float]
    pushes: int  # documents pushed in and accepted
    _thread: LoopThread | None
    _chores: set[asyncio.Task[Any]]
    _interval: Callable[[FeedSource, SourceState | None, float], Interval]  # the scheduler's

    def _document(self, source: str, hub: str | None, topic: str) -> None:
        """A poll fetched a document: subscribe through the hub it names, once."""
        if self.subscriber is not None and hub and self.subscriber.wants(source, hub, topic):
            self._chore(self.subscriber.subscribe(source, hub, topic))

    async def _renew(self) -> None:
        """The APScheduler job: leases ending soon, subscriptions not verified."""
        if self.subscriber is None:
            return
        for push in self.subscriber.due_renewals():
            if push.source in self.sources:
                self._chore(self.subscriber.subscribe(push.source, push.hub, push.topic))
        self._unsubscribe_orphans()

    def _unsubscribe_orphans(self) -> None:
        """End the WebSub subscriptions of sources no longer in the config."""
        if self.subscriber is not None:
            for push in self.subscriber.orphans(self.sources):
                self._chore(self.subscriber.unsubscribe(push))

    def _chore(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    def pushed(self, source: str, body: bytes, headers: Mapping[str, str]) -> None:
        """A hub delivered ``source``'s document (called from the HTTP server's thread):
        its items go to the spool as a poll's would, and the poll moves out."""
        thread = self._thread
        if thread is None or source not in self.sources:
            return
        asyncio.run_coroutine_threadsafe(self._take_push(source, body, headers), thread.loop)

    async def _take_push(self, source: str, body: bytes, headers: Mapping[str, str]) -> None:
        feed = self.sources.get(source)
        if feed is None:  # removed from the config meanwhile
            return
        try:
            parsed = await self.parser.parse(body, feed.url, headers, feed.categories)
            await self.committer.commit(source, parsed.items, None)
        except Exception as exc:  # a broken push: logged and counted, never fatal
            log.warning("source %s: a pushed document was not taken: %s", source, describe(exc))
            return
        self.pushes += 1
        log.info("source %s: %d item(s) pushed by its hub", source, len(parsed.items))
        due = self.queue.due_at(source)
        if due is not None:  # pushes stand in for polls now: the next one moves out
            interval = self._interval(feed, None, self.clock())
            self.queue.schedule(
                source,
                host_of(feed.url),
                max(due, self.clock() + interval.seconds),
                slack=interval.seconds,
            )
