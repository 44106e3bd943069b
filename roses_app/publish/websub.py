"""WebSub (W3C Recommendation, 2018): ROSES is the hub of the feeds it publishes.

``POST /websub/hub`` (form-encoded ``hub.mode=subscribe|unsubscribe``, ``hub.topic``,
``hub.callback``, optional ``hub.lease_seconds`` and ``hub.secret``) answers 202 and
verifies the subscriber's intent in the background: a GET to the callback with
``hub.mode``, ``hub.topic``, ``hub.challenge`` (and ``hub.lease_seconds``) that must
echo the challenge with a 2xx.  Only then is the subscription recorded (or removed),
in :class:`~roses_app.publish.websub_table.SubscriptionTable`, so a restart keeps it.
A topic must be a feed document ROSES publishes (RSS, Atom or JSON Feed); anything
else is refused with 400.  A lease ends unless the subscriber subscribes again.

Content distribution: the store calls :meth:`Hub.feeds_changed` after each committed
write; for every subscriber of a changed feed the hub POSTs the feed document (the
bytes a GET of the topic returns, from the same render cache), with its Content-Type,
``Link: <hub>; rel="hub", <topic>; rel="self"`` and, when the subscriber gave a secret,
``X-Hub-Signature: sha256=HMAC(secret, body)``.  A failed delivery is retried with
exponential backoff, a bounded number of times; content newer than what is being
retried replaces it.  ``410 Gone`` ends a subscription.  With
``settings.websub.external_hub``, that hub is also pinged (``hub.mode=publish``).

Everything runs on one asyncio loop in a thread of its own (``start``/``stop``); the
store's writer only enqueues.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any

import anyio
import httpx
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from roses_app.config.model import Config
from roses_app.publish.cache import Document
from roses_app.publish.catalog import Catalog
from roses_app.publish.render import FeedInfo
from roses_app.publish.websub_intent import (
    TOPIC_FORMATS,
    HubRequestError,
    Intent,
    Topics,
    link_header,
    parse_form,
    topic_url,
    with_query,
)
from roses_app.publish.websub_table import (
    HUB_PATH,
    SIGNATURE_HEADER,
    Subscription,
    SubscriptionTable,
    hub_urls,
    sign,
    signature_ok,
)
from roses_app.store import Store

log = logging.getLogger(__name__)

__all__ = [
    "HUB_PATH",
    "TOPIC_FORMATS",
    "Hub",
    "HubRequestError",
    "hub_urls",
    "link_header",
    "sign",
    "signature_ok",
]

MAX_REQUEST_BYTES = 16 * 1024
SWEEP_SECONDS = 60.0
USER_AGENT = "ROSES-WebSub/0.1"

Renderer = Callable[[FeedInfo, str], Document]


class Hub:
    """ROSES's WebSub hub over ``store``, its subscriptions kept at ``path``.

    ``create_app(..., hub=hub)`` serves :data:`HUB_PATH` and hands the hub the feed
    renderer; ``start()`` begins listening to the store, ``stop()`` ends it.
    ``retry_delay`` doubles after each failed delivery, up to ``max_attempts`` tries.
    """

    def __init__(
        self,
        config: Config,
        store: Store,
        path: Path,
        *,
        clock: Callable[[], float] = time.time,
        retry_delay: float = 2.0,
        max_attempts: int = 5,
        timeout: float = 10.0,
    ) -> None:
        self.config = config
        self.store = store
        self.table = SubscriptionTable(path)
        self.catalog = Catalog(config, store)
        self.topics = Topics(config, self.catalog)
        self.clock = clock
        self.retry_delay = retry_delay
        self.max_attempts = max(1, max_attempts)
        self.timeout = timeout
        self.counters = dict.fromkeys(
            ("requests", "refused", "verified", "unverified", "delivered", "retries", "failed"),
            0,
        ) | {"pings": 0, "pings_failed": 0, "errors": 0}
        self._render: Renderer | None = None
        self._base: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: httpx.AsyncClient | None = None
        self._pending = 0
        self._idle = threading.Condition()
        # per subscription, on the loop only: the newest document not yet delivered
        self._latest: dict[tuple[str, str], tuple[Document, str]] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    # -- wiring --------------------------------------------------------------------

    def bind(self, render: Renderer) -> None:
        """The server's renderer: the same documents (and bytes) as its feed URLs."""
        self._render = render

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, base: str | None = None) -> None:
        """Start the hub's loop and listen to the store.  ``base``: the server's base
        URL, for the external hub's topics when ``settings.http.base_url`` is unset."""
        if self._thread is not None:
            raise RuntimeError("the WebSub hub was already started")
        self._base = base
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._loop = loop
        self._thread = threading.Thread(
            target=self._run, args=(loop, ready), name="roses-websub", daemon=True
        )
        self._thread.start()
        ready.wait()
        self.store.add_listener(self.feeds_changed)
        log.info("WebSub hub started with %d subscription(s)", len(self.table.all()))

    def _run(self, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        self._client = httpx.AsyncClient(
            timeout=self.timeout, follow_redirects=False, headers={"User-Agent": USER_AGENT}
        )
        sweeper = loop.create_task(self._sweep())
        loop.call_soon(ready.set)
        loop.run_forever()
        sweeper.cancel()
        loop.run_until_complete(asyncio.gather(sweeper, return_exceptions=True))
        loop.run_until_complete(self._client.aclose())
        loop.close()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop listening, let deliveries in flight finish (up to ``timeout``), close."""
        self.store.remove_listener(self.feeds_changed)
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            if not self.drain(timeout):
                log.warning("WebSub: stopping with deliveries still pending (they are dropped)")
            asyncio.run_coroutine_threadsafe(self._cancel_all(), loop).result(timeout)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
        self._thread = self._loop = None
        self.table.close()

    async def _cancel_all(self) -> None:
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until no verification, delivery or ping is pending; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def _submit(self, work: Coroutine[Any, Any, None]) -> None:
        loop = self._loop
        if loop is None:
            work.close()
            return
        with self._idle:
            self._pending += 1
        asyncio.run_coroutine_threadsafe(self._tracked(work), loop)

    async def _tracked(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except Exception:  # one task's failure (logged, counted), never the hub's
            self.counters["errors"] += 1
            log.exception("WebSub task failed")
        finally:
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def stats(self) -> dict[str, int]:
        """Counters since start, and the subscriptions recorded (for /healthz)."""
        return {**self.counters, "subscriptions": len(self.table.all())}

    # -- subscription requests -----------------------------------------------------

    def endpoint(self, base_of: Callable[[Request], str]) -> Callable[[Request], Any]:
        """The ``POST /websub/hub`` handler; ``base_of(request)``: the server base."""

        async def hub(request: Request) -> Response:
            ctype = request.headers.get("content-type", "").partition(";")[0].strip().lower()
            if ctype != "application/x-www-form-urlencoded":
                return PlainTextResponse(
                    "send the request as application/x-www-form-urlencoded\n", status_code=415
                )
            body = await request.body()
            self.counters["requests"] += 1
            try:
                if len(body) > MAX_REQUEST_BYTES:
                    raise HubRequestError(f"the request is over {MAX_REQUEST_BYTES} bytes")
                form = parse_form(body)
                base = base_of(request)
                intent = await anyio.to_thread.run_sync(self.topics.intent, form, base)
            except HubRequestError as exc:
                self.counters["refused"] += 1
                return PlainTextResponse(f"{exc}\n", status_code=400)
            if not self.running:
                return PlainTextResponse("the hub is not running; retry later\n", 503)
            self._submit(self._verify(intent))
            return PlainTextResponse(
                f"Accepted: {intent.mode} will be verified at {intent.callback}\n",
                status_code=202,
            )

        return hub

    async def _verify(self, intent: Intent) -> None:
        assert self._client is not None
        challenge = secrets.token_urlsafe(24)
        params = {"hub.mode": intent.mode, "hub.topic": intent.topic, "hub.challenge": challenge}
        if intent.mode == "subscribe":
            params["hub.lease_seconds"] = str(intent.lease_seconds)
        try:
            answer = await self._client.get(with_query(intent.callback, params))
            confirmed = answer.is_success and answer.text.strip() == challenge
            why = f"HTTP {answer.status_code}" if not answer.is_success else "a wrong challenge"
        except httpx.HTTPError as exc:
            confirmed, why = False, f"{type(exc).__name__}: {exc}"
        if not confirmed:
            self.counters["unverified"] += 1
            log.info("WebSub %s of %s not verified (%s)", intent.mode, intent.callback, why)
            return
        self.counters["verified"] += 1
        if intent.mode == "unsubscribe":
            self.table.remove(intent.topic, intent.callback)
        else:
            now = self.clock()
            self.table.upsert(
                Subscription(
                    intent.topic,
                    intent.callback,
                    intent.secret,
                    intent.lease_seconds,
                    now + intent.lease_seconds,
                    intent.stream,
                    intent.part,
                    intent.base,
                    now,
                )
            )
        log.info("WebSub %s verified: %s -> %s", intent.mode, intent.topic, intent.callback)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            purged = self.table.purge(self.clock())
            if purged:
                log.info("WebSub: %d subscription lease(s) expired", purged)

    # -- content distribution ------------------------------------------------------

    def feeds_changed(self, feeds: Iterable[tuple[str, str]]) -> None:
        """Store listener: new content in these (stream, part) feeds.  Only enqueues."""
        for stream, part in sorted(set(feeds)):
            self._submit(self._distribute(stream, part))
            if self.config.settings.websub.external_hub:
                self._submit(self._ping(stream, part))

    async def _distribute(self, stream: str, part: str) -> None:
        subs = self.table.for_feed(stream, part, self.clock())
        documents: dict[tuple[str, str], tuple[Document, str] | None] = {}
        for sub in subs:
            key = (sub.topic, sub.base)
            if key not in documents:
                documents[key] = await asyncio.to_thread(self._document, sub.topic, sub.base)
            doc = documents[key]
            if doc is None:
                log.info("WebSub: %s is no longer published; not delivered", sub.topic)
                continue
            asyncio.get_running_loop().create_task(self._tracked(self._deliver(sub, *doc)))
            with self._idle:
                self._pending += 1

    def _document(self, topic: str, base: str) -> tuple[Document, str] | None:
        found = self.topics.resolve(topic, base)
        if found is None or self._render is None:
            return None
        info, fmt = found
        return self._render(info, fmt), link_header(info, fmt)

    async def _deliver(self, sub: Subscription, doc: Document, links: str) -> None:
        key = (sub.topic, sub.callback)
        self._latest[key] = (doc, links)
        async with self._locks.setdefault(key, asyncio.Lock()):
            pending = self._latest.pop(key, None)
            if pending is None:
                return  # an earlier task of this subscriber already sent this content
            for attempt in range(self.max_attempts):
                if attempt:
                    self.counters["retries"] += 1
                    await asyncio.sleep(self.retry_delay * 2 ** (attempt - 1))
                    if key in self._latest:
                        return  # newer content is waiting: it replaces this one
                status = await self._post(sub, *pending)
                if status is not None and 200 <= status < 300:
                    self.counters["delivered"] += 1
                    return
                if status == 410:
                    log.info("WebSub: %s answered 410 Gone; unsubscribed", sub.callback)
                    self.table.remove(sub.topic, sub.callback)
                    return
            self.counters["failed"] += 1
            log.warning("WebSub: gave up delivering %s to %s", sub.topic, sub.callback)

    async def _post(self, sub: Subscription, doc: Document, links: str) -> int | None:
        assert self._client is not None
        headers = {"Content-Type": f"{doc.media_type}; charset=utf-8", "Link": links}
        if sub.secret:
            headers[SIGNATURE_HEADER] = sign(sub.secret, doc.body)
        try:
            answer = await self._client.post(sub.callback, content=doc.body, headers=headers)
        except httpx.HTTPError as exc:
            log.info("WebSub delivery to %s failed: %s: %s", sub.callback, type(exc).__name__, exc)
            return None
        if not answer.is_success:
            log.info("WebSub delivery to %s: HTTP %d", sub.callback, answer.status_code)
        return answer.status_code

    async def _ping(self, stream: str, part: str) -> None:
        """Tell the external hub that this feed's documents changed."""
        assert self._client is not None
        hub = self.config.settings.websub.external_hub
        base = self.catalog.base(self._base)
        info = await asyncio.to_thread(self.catalog.lookup, stream, part or None, base)
        if hub is None or info is None:
            return
        for fmt in TOPIC_FORMATS:
            form = {"hub.mode": "publish", "hub.url": topic_url(info, fmt)}
            for attempt in range(self.max_attempts):
                if attempt:
                    await asyncio.sleep(self.retry_delay * 2 ** (attempt - 1))
                try:
                    answer = await self._client.post(hub, data=form)
                    if answer.is_success:
                        self.counters["pings"] += 1
                        break
                    log.info("WebSub: the hub %s answered HTTP %d", hub, answer.status_code)
                except httpx.HTTPError as exc:
                    log.info("WebSub: cannot ping the hub %s: %s", hub, exc)
            else:
                self.counters["pings_failed"] += 1
