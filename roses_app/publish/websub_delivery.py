"""WebSub content distribution: what ROSES's hub sends its subscribers.

The store calls :meth:`Hub.feeds_changed` after each committed write; for every
subscriber of a changed feed the hub POSTs the feed document (the bytes a GET of the
topic returns, from the same render cache), with its Content-Type,
``Link: <hub>; rel="hub", <topic>; rel="self"`` and, when the subscriber gave a secret,
``X-Hub-Signature: sha256=HMAC(secret, body)``.  ``410 Gone`` ends a subscription.
With ``settings.websub.external_hub``, that hub is also pinged (``hub.mode=publish``).

Bounds, so that callbacks that never answer cannot stop the others:

* one task per subscription at most: content that comes while one is sent waits, and
  newer content replaces it (a subscriber gets the newest document, not every one);
* each POST ends within ``settings.websub.timeout``; a failed one is retried with a
  backoff doubling from ``retry_delay``, ``max_attempts`` tries in all, then dropped
  (counted ``failed``, logged);
* at most ``concurrency`` POSTs in flight, ``per_host`` to one host; a subscription
  whose last delivery failed goes through a lane of its own, a quarter as wide, so
  that dead callbacks hold up only each other.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import httpx

from roses_app.config.model import WebSubSettings
from roses_app.publish.cache import Document
from roses_app.publish.catalog import Catalog
from roses_app.publish.render import FeedInfo
from roses_app.publish.websub_client import (
    USER_AGENT,
    Answer,
    Slots,
    callback_client,
    exchange,
    host_of,
)
from roses_app.publish.websub_intent import TOPIC_FORMATS, Topics, link_header, topic_url
from roses_app.publish.websub_table import (
    SIGNATURE_HEADER,
    Subscription,
    SubscriptionTable,
    sign,
)

log = logging.getLogger("roses_app.publish.websub")

Renderer = Callable[[FeedInfo, str], Document]
Key = tuple[str, str]  # a subscription: (topic, callback)


class DeliveringHub(Protocol):
    """What deliveries use of their hub (:class:`roses_app.publish.websub.Hub`,
    which imports this module: named here by its parts, not imported back)."""

    settings: WebSubSettings
    table: SubscriptionTable
    catalog: Catalog
    topics: Topics
    clock: Callable[[], float]
    deadline: float
    counters: dict[str, int]

    @property
    def base(self) -> str | None: ...

    def spawn(self, work: Coroutine[Any, Any, None]) -> None: ...


class Deliveries:
    """The hub's content distribution; everything but :meth:`forget` (also on the
    loop) runs as tasks on the hub's loop."""

    def __init__(self, hub: DeliveringHub, *, retry_delay: float, max_attempts: int) -> None:
        self.hub = hub
        self.retry_delay = retry_delay
        self.max_attempts = max(1, max_attempts)
        self.render: Renderer | None = None
        self._latest: dict[Key, tuple[Subscription, Document, str]] = {}
        self._delivering: set[Key] = set()  # those with a task sending their content
        self._failing: set[Key] = set()  # those whose last delivery failed

    def open(self) -> list[httpx.AsyncClient]:
        """On the hub's loop, as it starts: the clients (the hub closes them)."""
        s = self.hub.settings
        slow = max(1, s.concurrency // 4)
        self._lane = asyncio.Semaphore(s.concurrency)
        self._slow_lane = asyncio.Semaphore(slow)
        self._slots = Slots(s.per_host)
        self._client = callback_client(
            connections=s.concurrency + slow,
            keepalive=s.concurrency,
            deadline=s.timeout_seconds,
            guarded=not s.allow_private_callbacks,
        )
        # the external hub is the operator's choice (it may well be on their network)
        self._ping_client = httpx.AsyncClient(
            timeout=s.timeout_seconds, follow_redirects=False, headers={"User-Agent": USER_AGENT}
        )
        return [self._client, self._ping_client]

    def forget(self, topic: str, callback: str) -> None:
        """An unsubscribed subscription: its failures are not remembered."""
        self._failing.discard((topic, callback))

    async def distribute(self, stream: str, part: str) -> None:
        hub = self.hub
        subs = await asyncio.to_thread(hub.table.for_feed, stream, part, hub.clock())
        documents: dict[tuple[str, str], tuple[Document, str] | None] = {}
        for sub in subs:
            key = (sub.topic, sub.base)
            if key not in documents:
                documents[key] = await asyncio.to_thread(self._document, sub.topic, sub.base)
            doc = documents[key]
            if doc is None:
                log.info("WebSub: %s is no longer published; not delivered", sub.topic)
                continue
            self._offer(sub, *doc)

    def _document(self, topic: str, base: str) -> tuple[Document, str] | None:
        found = self.hub.topics.resolve(topic, base)
        if found is None or self.render is None:
            return None
        info, fmt = found
        return self.render(info, fmt), link_header(info, fmt)

    def _offer(self, sub: Subscription, doc: Document, links: str) -> None:
        key = (sub.topic, sub.callback)
        self._latest[key] = (sub, doc, links)
        if key not in self._delivering:  # else its task sends this next
            self._delivering.add(key)
            self.hub.spawn(self._deliver_all(key))

    async def _deliver_all(self, key: Key) -> None:
        try:
            while (latest := self._latest.pop(key, None)) is not None:
                await self._deliver(key, *latest)
        finally:
            self._delivering.discard(key)

    async def _deliver(self, key: Key, sub: Subscription, doc: Document, links: str) -> None:
        counters = self.hub.counters
        answer = Answer(None)
        for attempt in range(self.max_attempts):
            if attempt:
                counters["retries"] += 1
                await asyncio.sleep(self.retry_delay * 2 ** (attempt - 1))
                if key in self._latest:
                    return  # newer content is waiting: it replaces this one
            answer = await self._post(key, sub, doc, links)
            if answer.ok:
                self._failing.discard(key)
                counters["delivered"] += 1
                return
            self._failing.add(key)
            if answer.status == 410:
                log.info("WebSub: %s answered 410 Gone; unsubscribed", sub.callback)
                await asyncio.to_thread(self.hub.table.remove, sub.topic, sub.callback)
                self.forget(sub.topic, sub.callback)
                return
            if answer.refused:
                counters["callbacks_refused"] += 1
                break  # its address is refused: trying again changes nothing
        counters["failed"] += 1
        log.warning(
            "WebSub: dropped the delivery of %s to %s after %d attempt(s) (last: %s)",
            sub.topic,
            sub.callback,
            attempt + 1,
            answer.why(),
        )

    async def _post(self, key: Key, sub: Subscription, doc: Document, links: str) -> Answer:
        headers = {"Content-Type": f"{doc.media_type}; charset=utf-8", "Link": links}
        if sub.secret:
            headers[SIGNATURE_HEADER] = sign(sub.secret, doc.body)
        lane = self._slow_lane if key in self._failing else self._lane
        async with self._slots.hold(host_of(sub.callback), lane):
            answer = await exchange(
                self._client,
                "POST",
                sub.callback,
                self.hub.deadline,
                content=doc.body,
                headers=headers,
            )
        if not answer.ok:
            log.info("WebSub delivery to %s failed: %s", sub.callback, answer.why())
        return answer

    async def ping(self, stream: str, part: str) -> None:
        """Tell the external hub that this feed's documents changed."""
        hub = self.hub.settings.external_hub
        base = self.hub.catalog.base(self.hub.base)
        info = await asyncio.to_thread(self.hub.catalog.lookup, stream, part or None, base)
        if hub is None or info is None:
            return
        for fmt in TOPIC_FORMATS:
            form = {"hub.mode": "publish", "hub.url": topic_url(info, fmt)}
            for attempt in range(self.max_attempts):
                if attempt:
                    await asyncio.sleep(self.retry_delay * 2 ** (attempt - 1))
                answer = await exchange(
                    self._ping_client, "POST", hub, self.hub.deadline, data=form
                )
                if answer.ok:
                    self.hub.counters["pings"] += 1
                    break
                log.info("WebSub: cannot ping the hub %s: %s", hub, answer.why())
            else:
                self.hub.counters["pings_failed"] += 1
