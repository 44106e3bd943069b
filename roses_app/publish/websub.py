"""WebSub (W3C Recommendation, 2018): ROSES is the hub of the feeds it publishes.

``POST /websub/hub`` (form-encoded ``hub.mode=subscribe|unsubscribe``, ``hub.topic``,
``hub.callback``, optional ``hub.lease_seconds`` and ``hub.secret``) answers 202 and
verifies the subscriber's intent in the background: a GET to the callback with
``hub.mode``, ``hub.topic``, ``hub.challenge`` (and ``hub.lease_seconds``) that must
echo the challenge with a 2xx.  Only then is the subscription recorded (or removed),
in :class:`~roses_app.publish.websub_table.SubscriptionTable`, so a restart keeps it.
A topic must be a feed document ROSES publishes (RSS, Atom or JSON Feed); anything
else is refused with 400, as is a callback on a non-public address (see
:mod:`~roses_app.publish.websub_client`).  A lease ends unless the subscriber
subscribes again.

New subscriptions are capped per topic (a feed, in all its formats) and per callback
host: past ``settings.websub.max_subscriptions_per_topic`` or
``max_subscriptions_per_callback_host`` a request is answered 403 and its callback is
never called (see :meth:`Hub._capped`).

Verification is bounded: at most ``settings.websub.verify_queue`` requests wait for
it (fewer for one host), more are answered 503 with ``Retry-After``; at most
``concurrency`` are in flight (``per_host`` to one host), each call within
``timeout``.  Content distribution (:mod:`~roses_app.publish.websub_delivery`) has
limits of its own, so neither can starve the other.

Everything runs on one asyncio loop in a thread of its own (``start``/``stop``); the
store's writer and the HTTP server only hand work over.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from roses_app.config.model import Config
from roses_app.errors import StoreError
from roses_app.publish.catalog import Catalog, ConfigSource, config_getter
from roses_app.publish.websub_client import (
    Slots,
    callback_client,
    check_callback,
    exchange,
    host_of,
)
from roses_app.publish.websub_delivery import Deliveries, Renderer
from roses_app.publish.websub_intent import (
    TOPIC_FORMATS,
    HubRequestError,
    Intent,
    Topics,
    link_header,
    parse_form,
    with_query,
)
from roses_app.publish.websub_table import (
    HUB_PATH,
    Capped,
    Caps,
    Subscription,
    SubscriptionTable,
    hub_urls,
    sign,
    signature_ok,
)
from roses_app.publish.websub_work import HubWork
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
IO_THREADS = 8  # the loop's threads for SQLite and name resolution
CLOSE_SECONDS = 3.0  # to close the clients' connections when stopping


class Hub(HubWork):
    """ROSES's WebSub hub over ``store``, its subscriptions kept at ``path``.

    ``create_app(..., hub=hub)`` serves :data:`HUB_PATH` and hands the hub the feed
    renderer; ``start()`` begins listening to the store, ``stop()`` ends it.
    ``retry_delay`` doubles after each failed delivery, up to ``max_attempts`` tries.
    """

    def __init__(
        self,
        config: ConfigSource,
        store: Store,
        path: Path,
        *,
        clock: Callable[[], float] = time.time,
        retry_delay: float = 2.0,
        max_attempts: int = 5,
    ) -> None:
        super().__init__()
        self._config = config_getter(config)  # its feeds: a reload replaces them
        self.settings = self.config.settings.websub  # (a change needs a restart)
        self.store = store
        self.table = SubscriptionTable(path)
        self.catalog = Catalog(config, store)
        self.topics = Topics(self.config, self.catalog)
        self.clock = clock
        self.deadline = self.settings.timeout_seconds
        self.host_queue = max(self.settings.per_host, self.settings.verify_queue // 10)
        self._call_seconds = 0.0  # a verification's recent time (none yet: retry soon)
        self.counters |= dict.fromkeys(
            ("requests", "refused", "busy", "verified", "unverified", "delivered", "retries"),
            0,
        ) | dict.fromkeys(("failed", "callbacks_refused", "pings", "pings_failed"), 0)
        self.counters |= {"capped_topic": 0, "capped_callback_host": 0}
        self.caps = Caps(
            self.settings.max_subscriptions_per_topic,
            self.settings.max_subscriptions_per_callback_host,
        )
        self.deliveries = Deliveries(self, retry_delay=retry_delay, max_attempts=max_attempts)
        self._base: str | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None

    @property
    def config(self) -> Config:
        return self._config()

    # -- wiring --------------------------------------------------------------------

    def bind(self, render: Renderer) -> None:
        """The server's renderer: the same documents (and bytes) as its feed URLs."""
        self.deliveries.render = render

    @property
    def base(self) -> str | None:
        """The server's base URL given to :meth:`start` (for the external hub's topics)."""
        return self._base

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, base: str | None = None) -> None:
        """Start the hub's loop and listen to the store.  ``base``: the server's base
        URL, for the external hub's topics when ``settings.http.base_url`` is unset."""
        if self._thread is not None:
            raise RuntimeError("the WebSub hub was already started")
        self._base = base
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="roses-websub", daemon=True
        )
        self._thread.start()
        ready.wait()
        self.store.add_listener(self.feeds_changed)
        log.info("WebSub hub started with %d subscription(s)", self.table.count())

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        loop.set_default_executor(ThreadPoolExecutor(IO_THREADS, "roses-websub-io"))
        try:
            loop.run_until_complete(self._main(loop, ready))
        except Exception:  # logged: the server goes on without its hub
            log.exception("the WebSub hub stopped on an error; restart ROSES to serve it")
        finally:
            ready.set()
            loop.close()  # its executor is not waited for (a name may be resolving)

    async def _main(self, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        s = self.settings
        guarded = not s.allow_private_callbacks
        self._verify_client = callback_client(
            connections=s.concurrency, keepalive=0, deadline=self.deadline, guarded=guarded
        )
        self._verify_lane = asyncio.Semaphore(s.concurrency)
        self._verify_slots = Slots(s.per_host)
        self._stopping = asyncio.Event()
        clients = [self._verify_client, *self.deliveries.open()]
        sweeper = loop.create_task(self._sweep())
        self._loop = loop
        ready.set()
        try:
            await self._stopping.wait()
        finally:
            await asyncio.sleep(0)  # work handed over just before the stop: cancelled too
            tasks = [sweeper, *self._tasks]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._close(clients)

    @staticmethod
    async def _close(clients: list[Any]) -> None:
        try:
            async with asyncio.timeout(CLOSE_SECONDS):
                for client in clients:
                    await client.aclose()
        except TimeoutError:
            log.warning("WebSub: connections still closing after %g s; left", CLOSE_SECONDS)

    def stop(self, grace: float = 1.0, timeout: float = 10.0) -> None:
        """Stop listening; work still pending after ``grace`` seconds (verifications,
        deliveries, their retries) is cancelled, and its connections closed."""
        self.store.remove_listener(self.feeds_changed)
        loop, thread, stopping = self._loop, self._thread, self._stopping
        if loop is not None and thread is not None and stopping is not None:
            if not self.drain(grace):
                log.info("WebSub: stopping; %d task(s) not over are cancelled", self._pending)
            try:
                loop.call_soon_threadsafe(stopping.set)
            except RuntimeError:  # the loop already ended, on an error it logged
                log.debug("WebSub: the hub's loop had already ended")
            thread.join(timeout)
            if thread.is_alive():
                log.warning("WebSub: the hub did not end within %g s; left behind", timeout)
        self._thread = self._loop = self._stopping = None
        self.table.close()

    def stats(self) -> dict[str, int]:
        """Counters since start, what waits, and the subscriptions (for /healthz)."""
        with self._idle:
            stats = {**self.counters, "verifications_waiting": self._waiting}
            stats["pending"] = self._pending
        try:
            stats["subscriptions"] = self.table.count()
        except StoreError as exc:  # closed by a stop meanwhile: the rest still holds
            log.debug("WebSub: no subscription count: %s", exc)
        return stats

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
            except HubRequestError as exc:
                self.counters["refused"] += 1
                return PlainTextResponse(f"{exc}\n", status_code=400)
            if not self.running:
                return PlainTextResponse("the hub is not running; retry later\n", 503)
            return await self._accept(form, base_of(request))

        return hub

    async def _accept(self, form: dict[str, str], base: str) -> Response:
        """Queue the verification the request ``form`` asks, unless too many wait (503,
        answered first: it costs least) or the request is refused (400)."""
        host = host_of(form.get("hub.callback", ""))
        busy = self._admit(host)
        if busy is not None:
            self.counters["busy"] += 1
            text, seconds = busy
            return PlainTextResponse(
                f"{text}; retry after {seconds} s\n", 503, headers={"Retry-After": str(seconds)}
            )
        queued = False
        try:
            intent = await anyio.to_thread.run_sync(self.topics.intent, form, base)
            if not self.settings.allow_private_callbacks:
                await check_callback(intent.callback, self.deadline)
            capped = await anyio.to_thread.run_sync(self._capped, intent)
            if capped is not None:
                # 403, not 429: WebSub (5.1.2) lets a hub refuse a request with any 4xx
                # and says no more; 429 asks to retry later, after Retry-After, which
                # brings nothing while the places are taken (for leases of days). The
                # spec's denial (5.2, a GET with hub.mode=denied) is not sent: calling
                # the callback is what the cap spares.
                return PlainTextResponse(
                    capped.message(self.caps, intent.topic, intent.callback) + "\n", 403
                )
            queued = self._hand_over(self._verification(intent, host))
        except HubRequestError as exc:
            self.counters["refused"] += 1
            return PlainTextResponse(f"{exc}\n", status_code=400)
        finally:
            if not queued:
                self._done(host)
        if not queued:
            return PlainTextResponse("the hub is stopping; retry later\n", 503)
        return PlainTextResponse(
            f"Accepted: {intent.mode} will be verified at {intent.callback}\n", status_code=202
        )

    def _admit(self, host: str) -> tuple[str, int] | None:
        """Count one more request waiting for verification; or, when too many wait,
        why not and in how many seconds to retry: when the queue ahead should have
        gone at the verifications' recent pace, at most one call's deadline (by when
        a slot has freed); answering 503 again costs little, idle slots cost more."""
        s = self.settings
        with self._idle:
            at_host = self._waiting_at.get(host, 0)
            if self._waiting >= s.verify_queue:
                retry = self._retry(self._waiting, s.concurrency)
                return f"{self._waiting} subscription requests wait for verification", retry
            if at_host >= self.host_queue:
                retry = self._retry(at_host, s.per_host)
                return f"{at_host} subscription requests for callbacks at {host} wait", retry
            self._waiting += 1
            self._waiting_at[host] = at_host + 1
            self._pending += 1
        return None

    def _retry(self, ahead: int, lanes: int) -> int:
        pace = ahead / lanes * self._call_seconds
        return max(1, min(math.ceil(pace), math.ceil(self.deadline)))

    async def _verification(self, intent: Intent, host: str) -> None:
        try:
            async with self._verify_slots.hold(host, self._verify_lane):
                await self._verify(intent)
        except Exception:  # this request's failure (logged, counted), never the hub's
            self.counters["errors"] += 1
            log.exception("WebSub verification of %s failed", intent.callback)
        finally:
            self._done(host)

    def _capped(self, intent: Intent) -> Capped | None:
        """The cap a new subscription of ``intent`` would pass (counted, logged)."""
        if intent.mode != "subscribe":
            return None
        capped = self.table.over_cap(self._subscription(intent), self.caps, self.clock())
        self._count_capped(intent, capped)
        return capped

    def _count_capped(self, intent: Intent, capped: Capped | None) -> None:
        if capped is not None:
            self.counters[f"capped_{capped.which}"] += 1
            log.info("WebSub subscription of %s to %s refused: %s is reached",
                     intent.callback, intent.topic, capped.setting)  # fmt: skip

    async def _verify(self, intent: Intent) -> None:
        # places may have been taken since the request was answered: checked again
        # before calling the callback, and when recorded (in one transaction)
        if await asyncio.to_thread(self._capped, intent) is not None:
            return
        challenge = secrets.token_urlsafe(24)
        params = {"hub.mode": intent.mode, "hub.topic": intent.topic, "hub.challenge": challenge}
        if intent.mode == "subscribe":
            params["hub.lease_seconds"] = str(intent.lease_seconds)
        url = with_query(intent.callback, params)
        started = time.monotonic()
        answer = await exchange(self._verify_client, "GET", url, self.deadline)
        self._call_seconds += 0.1 * (time.monotonic() - started - self._call_seconds)
        echoed = answer.body.decode("utf-8", "replace").strip() == challenge
        if not (answer.ok and echoed):
            self.counters["unverified"] += 1
            self.counters["callbacks_refused"] += int(answer.refused)
            why = answer.why() if not answer.ok else "a wrong challenge"
            log.info("WebSub %s of %s not verified (%s)", intent.mode, intent.callback, why)
            return
        self.counters["verified"] += 1
        if intent.mode == "unsubscribe":
            await asyncio.to_thread(self.table.remove, intent.topic, intent.callback)
            self.deliveries.forget(intent.topic, intent.callback)
        else:
            sub = self._subscription(intent)
            capped = await asyncio.to_thread(self.table.upsert, sub, self.caps)
            self._count_capped(intent, capped)
            if capped is not None:
                return
        log.info("WebSub %s verified: %s -> %s", intent.mode, intent.topic, intent.callback)

    def _subscription(self, intent: Intent) -> Subscription:
        now = self.clock()
        return Subscription(
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

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(60.0)
            try:
                purged = await asyncio.to_thread(self.table.purge, self.clock())
            except StoreError as exc:  # tried again at the next sweep
                log.warning("WebSub: %s", exc)
                continue
            if purged:
                log.info("WebSub: %d subscription lease(s) expired", purged)

    # -- content distribution ------------------------------------------------------

    def feeds_changed(self, feeds: Iterable[tuple[str, str]]) -> None:
        """Store listener: new content in these (stream, part) feeds.  Only hands over."""
        for stream, part in sorted(set(feeds)):
            self.submit(self.deliveries.distribute(stream, part))
            if self.config.settings.websub.external_hub:
                self.submit(self.deliveries.ping(stream, part))
