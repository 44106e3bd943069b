"""Push in: ROSES subscribes to the WebSub hubs its feeds name (W3C WebSub, 2018).

A polled document that names a hub (``<atom:link rel="hub">`` or an HTTP ``Link: <…>;
rel="hub"``) is subscribed through it, when ``settings.http.base_url`` says where the
hub can reach ROSES: a POST to the hub with ``hub.mode=subscribe``, the feed's topic
(its ``rel="self"`` URL, else the URL polled), a callback on ROSES's own server
(``/websub/callback/TOKEN``, a random token per source) and always a secret.  Then:

* the hub verifies the intent with a GET to the callback: only a token ROSES gave, for
  the topic it asked, is confirmed (the challenge echoed); ``hub.mode=denied`` is
  recorded;
* the hub POSTs new content to the callback: accepted only with a valid
  ``X-Hub-Signature`` (HMAC of the body with the secret), else answered 2xx, as the
  specification asks, and ignored (counted, logged); the document's items go to the
  spool as a poll's would;
* a lease is renewed before it ends (a tenth of it before, at least an hour); a
  subscription the hub does not verify is asked again later, each time twice later;
* while pushes arrive the source is polled rarely (a safety net, :func:`is_pushed`);
  when they stop, its polls come back to their interval;
* a source that left the config is unsubscribed (``hub.mode=unsubscribe``, confirmed
  when the hub verifies it) and forgotten: its hub stops sending, and a push that still
  comes finds no token (404, which tells the hub to drop it).

Subscriptions live in ``DATA_DIR/websub_in.sqlite`` (with their secrets).
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from urllib.parse import quote

import httpx

from roses_app.connectors.common import SqliteStore, describe
from roses_app.websub_signature import signature_ok

log = logging.getLogger(__name__)

CALLBACK_PATH = "/websub/callback/"
LEASE_ASKED = 10 * 86400  # what ROSES asks; the hub decides
LEASE_ASSUMED = 86400.0  # a verification without hub.lease_seconds
RETRY_AFTER = 3600.0  # a subscription not verified is asked again, then twice later...
RETRY_MAX = 86400.0
LEAVING = "leaving"  # the status of a subscription being ended
QUIET_FACTOR = 3.0  # pushes have stopped after this many of the feed's own intervals
SAFETY_FACTOR = 6.0  # a pushed source is polled this many times less often...
SAFETY_MAX = 86400.0  # ... at most a day apart

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pushes (
    source        TEXT PRIMARY KEY,
    hub           TEXT NOT NULL,
    topic         TEXT NOT NULL,
    token         TEXT NOT NULL UNIQUE,
    secret        TEXT NOT NULL,
    status        TEXT NOT NULL,
    lease_expires REAL NOT NULL DEFAULT 0,
    asked_at      REAL NOT NULL DEFAULT 0,
    retry_at      REAL NOT NULL DEFAULT 0,
    verified_at   REAL NOT NULL DEFAULT 0,
    last_push_at  REAL NOT NULL DEFAULT 0,
    pushes        INTEGER NOT NULL DEFAULT 0,
    refused       INTEGER NOT NULL DEFAULT 0
)
"""
_LINK = re.compile(r"<([^>]*)>\s*((?:;\s*[^;,]*)*)")
_REL = re.compile(r'rel\s*=\s*"?([^";]*)"?', re.IGNORECASE)


@dataclass(frozen=True)
class Push:
    """One source's subscription; ``status``: asked, verified, denied, failed or
    leaving (unsubscribing: a source no longer in the config)."""

    source: str
    hub: str
    topic: str
    token: str
    secret: str
    status: str
    lease_expires: float = 0.0
    asked_at: float = 0.0
    retry_at: float = 0.0  # when to ask again (not verified, failed, or renewal)
    verified_at: float = 0.0
    last_push_at: float = 0.0
    pushes: int = 0
    refused: int = 0  # deliveries without a valid signature


_COLUMNS = [f.name for f in fields(Push)]


class PushTable(SqliteStore):
    """The subscriptions, by source and by token."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, _SCHEMA)

    def get(self, source: str) -> Push | None:
        return self._one("source", source)

    def by_token(self, token: str) -> Push | None:
        return self._one("token", token)

    def _one(self, key: str, value: str) -> Push | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM pushes WHERE {key} = ?", (value,)
            ).fetchone()
        return None if row is None else Push(*row)

    def all(self) -> list[Push]:
        with self._lock:
            rows = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM pushes").fetchall()
        return [Push(*row) for row in rows]

    def delete(self, source: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM pushes WHERE source = ?", (source,))

    def put(self, push: Push) -> None:
        values = [getattr(push, c) for c in _COLUMNS]
        marks = ", ".join("?" for _ in _COLUMNS)
        with self._lock:
            self._db.execute(
                f"INSERT OR REPLACE INTO pushes ({', '.join(_COLUMNS)}) VALUES ({marks})", values
            )


def link_rel(header: str | None, rel: str) -> str | None:
    """The first URL of an HTTP ``Link`` header with relation ``rel``."""
    for match in _LINK.finditer(header or ""):
        for found in _REL.finditer(match.group(2)):
            if rel in found.group(1).lower().split():
                return match.group(1).strip() or None
    return None


def is_pushed(push: Push | None, now: float, interval: float) -> bool:
    """Whether pushes stand in for polls now: the subscription is verified and its
    lease runs, and a push came (or the verification did) within a few of the
    feed's own intervals."""
    if push is None or push.status != "verified" or push.lease_expires <= now:
        return False
    last = max(push.last_push_at, push.verified_at)
    return now - last <= QUIET_FACTOR * interval


def safety_interval(interval: float) -> float:
    return min(SAFETY_MAX, max(interval, interval * SAFETY_FACTOR))


class Subscriber:
    """Subscribes through hubs and answers them (see the module docstring).

    ``subscribe``-side coroutines run on the connector's loop; the callback side
    (:meth:`verify`, :meth:`receive`) is called by the HTTP server's threads.
    """

    def __init__(
        self,
        table: PushTable,
        base_url: str,
        clock: Callable[[], float],
        *,
        user_agent: str = "ROSES",
        timeout: float = 30.0,
    ) -> None:
        self.table = table
        self.base_url = base_url.rstrip("/")
        self.clock = clock
        self.user_agent = user_agent
        self.timeout = timeout
        self._client: httpx.AsyncClient | None = None
        # read at each interval choice and each push: kept in memory, written through
        self._lock = threading.Lock()
        self._by_source = {push.source: push for push in table.all()}
        self._by_token = {push.token: push for push in self._by_source.values()}

    def callback_url(self, token: str) -> str:
        return f"{self.base_url}{CALLBACK_PATH}{quote(token)}"

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    # -- subscribing (the connector's loop) ------------------------------------------

    def get(self, source: str) -> Push | None:
        return self._by_source.get(source)

    def knows(self, token: str) -> bool:
        return token in self._by_token

    def wants(self, source: str, hub: str, topic: str) -> bool:
        """Whether a poll's document calls for a new subscription (renewals and
        retries are :meth:`due_renewals`'s)."""
        push = self._by_source.get(source)
        return push is None or push.hub != hub or push.topic != topic

    def _put(self, push: Push) -> None:
        with self._lock:
            old = self._by_source.get(push.source)
            if old is not None:
                self._by_token.pop(old.token, None)
            self._by_source[push.source] = push
            self._by_token[push.token] = push
            self.table.put(push)

    async def subscribe(self, source: str, hub: str, topic: str) -> Push:
        """Ask ``hub`` for ``topic``'s content at this source's callback.

        The request is recorded before it is sent: the hub may verify it before it
        even answers the POST."""
        old = self._by_source.get(source)
        if old is not None and old.hub == hub and old.topic == topic:
            push = old
        else:
            token, secret = secrets.token_urlsafe(18), secrets.token_hex(32)
            push = Push(source, hub, topic, token, secret, "asked")
        now = self.clock()
        retry = RETRY_AFTER
        if push.status in ("asked", "failed") and push.asked_at > 0:  # not verified: back off
            retry = min(RETRY_MAX, max(RETRY_AFTER, 2 * (push.retry_at - push.asked_at)))
        status = "verified" if push.status == "verified" else "asked"
        self._put(replace(push, status=status, asked_at=now, retry_at=now + retry))
        form = {
            "hub.mode": "subscribe",
            "hub.topic": topic,
            "hub.callback": self.callback_url(push.token),
            "hub.secret": push.secret,
            "hub.lease_seconds": str(LEASE_ASKED),
        }
        try:
            response = await self._http().post(hub, data=form)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            log.warning(
                "source %s: the hub %s refused the subscription: %s", source, hub, describe(exc)
            )
            current = self._by_source[source]
            if current.status == "asked":  # not verified meanwhile
                self._put(replace(current, status="failed"))
        else:
            log.info("source %s: asked %s for %s; awaiting its verification", source, hub, topic)
        return self._by_source[source]

    def due_renewals(self) -> list[Push]:
        """Verified leases ending soon and subscriptions to ask again."""
        now = self.clock()
        pushes = list(self._by_source.values())
        return [p for p in pushes if p.status not in ("denied", LEAVING) and p.retry_at <= now]

    def orphans(self, sources: Collection[str]) -> list[Push]:
        """Subscriptions of sources no longer in ``sources``, not being ended yet."""
        pushes = list(self._by_source.values())
        return [p for p in pushes if p.source not in sources and p.status != LEAVING]

    def _forget(self, push: Push) -> None:
        with self._lock:
            if self._by_source.get(push.source) is push:
                del self._by_source[push.source]
            self._by_token.pop(push.token, None)
            self.table.delete(push.source)

    async def unsubscribe(self, push: Push) -> None:
        """End ``push`` (its source left the config): ask its hub to stop; forgotten
        when the hub verifies, or at once if it refuses or cannot be reached (its lease
        then ends by itself, and its pushes meet a 404)."""
        leaving = replace(push, status=LEAVING, retry_at=self.clock() + RETRY_AFTER)
        self._put(leaving)
        if push.status in ("denied", "failed"):  # nothing to end at the hub
            self._forget(leaving)
            return
        form = {"hub.mode": "unsubscribe", "hub.topic": push.topic,
                "hub.callback": self.callback_url(push.token)}  # fmt: skip
        try:
            response = await self._http().post(push.hub, data=form)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            log.warning("source %s is no longer in the config; its hub %s did not take the "
                        "unsubscription (%s): forgotten, its lease ends by itself",
                        push.source, push.hub, describe(exc))  # fmt: skip
            self._forget(leaving)
        else:
            log.info("source %s is no longer in the config: asked %s to stop pushing %s",
                     push.source, push.hub, push.topic)  # fmt: skip

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self.timeout, headers={"User-Agent": self.user_agent}
            )
        return self._client

    # -- the callback (the HTTP server's threads) ------------------------------------

    def verify(self, token: str, params: Mapping[str, str]) -> tuple[int, str]:
        """A hub's verification GET: (status code, body)."""
        push = self._by_token.get(token)
        if push is None:
            return 404, "unknown subscription\n"
        mode = params.get("hub.mode", "")
        if mode == "denied":
            log.warning(
                "source %s: the hub %s denied the subscription (%s)",
                push.source,
                push.hub,
                params.get("hub.reason", "no reason given"),
            )
            self._put(replace(push, status="denied"))
            return 200, "ok\n"
        wanted = "unsubscribe" if push.status == LEAVING else "subscribe"
        if mode != wanted or params.get("hub.topic") != push.topic:
            return 404, "not a subscription ROSES asked for\n"
        challenge = params.get("hub.challenge", "")
        if not challenge:
            return 400, "hub.challenge is missing\n"
        if push.status == LEAVING:
            self._forget(push)
            log.info("source %s: the hub %s ended the subscription", push.source, push.hub)
            return 200, challenge
        now = self.clock()
        lease = _lease(params.get("hub.lease_seconds"))
        renew = now + max(60.0, lease - max(3600.0, 0.1 * lease))  # before the lease ends
        self._put(
            replace(
                push, status="verified", verified_at=now, lease_expires=now + lease, retry_at=renew
            )
        )
        log.info(
            "source %s: the hub %s verified the subscription for %.0f s",
            push.source,
            push.hub,
            lease,
        )
        return 200, challenge

    def receive(self, token: str, body: bytes, signature: str | None) -> Push | None:
        """A hub's content POST: the subscription it is for when the signature is valid."""
        push = self._by_token.get(token)
        if push is None or push.status == LEAVING:
            return None
        if not signature_ok(push.secret, body, signature):
            log.warning(
                "source %s: a push without a valid X-Hub-Signature was ignored", push.source
            )
            self._put(replace(push, refused=push.refused + 1))
            return None
        pushed = replace(push, last_push_at=self.clock(), pushes=push.pushes + 1)
        self._put(pushed)
        return pushed


def _lease(text: str | None) -> float:
    if text is not None and text.strip().isdigit() and len(text.strip()) <= 10:
        return float(max(60, int(text.strip())))
    return LEASE_ASSUMED
