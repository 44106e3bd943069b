"""How ROSES's WebSub hub calls subscribers' callbacks: only public addresses, each
call within a deadline, a bounded number at once.

A callback is a URL anyone may give the hub, which then sends it a GET (verification)
and POSTs (content).  Left free, that is a server-side request forgery: the hub
would call ``127.0.0.1``, the host's private network or a cloud's metadata address
for whoever asks.  So, unless ``settings.websub.allow_private_callbacks``:

* a subscription request is refused (400) when its callback's host resolves to any
  loopback, unspecified, private, link-local, multicast, reserved or otherwise
  non-global address (:func:`check_callback`);
* every connection is checked again when it is made (:class:`GuardedBackend`): the
  name is resolved, every address checked, and the connection made to a checked
  address, so a DNS answer that changed since (DNS rebinding) cannot slip through.

:func:`exchange` makes one call within a total deadline and always closes the
response; :class:`Slots` bounds how many calls are in flight, in all and per host.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpcore
import httpx

from roses_app.publish.websub_intent import HubRequestError
from roses_app.publish.websub_table import host_of

__all__ = ["Answer", "CallbackRefused", "Slots", "callback_client", "check_callback",
           "exchange", "host_of", "refusal"]  # fmt: skip

USER_AGENT = "ROSES-WebSub/0.1"
MAX_ANSWER_BYTES = 4096  # of a callback's answer: a challenge is far shorter
ALLOW_HINT = (
    "set settings.websub.allow_private_callbacks: true to allow callbacks on your own network"
)


class CallbackRefused(HubRequestError, httpcore.ConnectError):
    """A callback whose address the hub does not call.  A :class:`HubRequestError`
    (answered 400) at subscription; an ``httpcore.ConnectError`` when a connection is
    refused, so that httpx reports it as a failed connection (its cause is this)."""


def refusal(address: str) -> str | None:
    """Why the hub does not call ``address`` (an IP address), or None: it may."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    for why, flag in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("reserved", ip.is_reserved),
        ("private", ip.is_private),
    ):
        if flag:
            return why
    return None if ip.is_global else "not globally routable"


async def public_addresses(host: str, port: int, timeout: float) -> list[str]:
    """The addresses of ``host``, all of them public; :class:`CallbackRefused` if any
    is not (a name with one private address is refused whole), OSError if none."""
    try:
        with anyio.fail_after(timeout):
            found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except TimeoutError as exc:
        raise OSError(f"resolving {host} took more than {timeout:g} s") from exc
    except socket.gaierror as exc:
        raise OSError(f"{host} cannot be resolved ({exc.strerror})") from exc
    addresses = list(dict.fromkeys(str(sockaddr[0]) for *_, sockaddr in found))
    for address in addresses:
        why = refusal(address)
        if why is not None:  # (the answer to a request: its host is not echoed)
            raise CallbackRefused(
                f"the callback's host is a {why} address, which this hub does not "
                f"call: give a callback on a public address, or {ALLOW_HINT}"
            )
    if not addresses:
        raise OSError(f"{host} has no address")
    return addresses


async def check_callback(url: str, timeout: float) -> None:
    """Refuse (:class:`HubRequestError`) a callback the hub would not call."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    try:
        await public_addresses(host, port, timeout)
    except OSError as exc:
        raise HubRequestError(
            "hub.callback's host cannot be resolved now: give a host name that resolves"
        ) from exc


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's connections, made only to public addresses (checked as they are made)."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await public_addresses(host, port, timeout or 30.0)
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        failed: httpcore.ConnectError | None = None
        for address in addresses:  # the checked address, never the name again
            try:
                return await self.inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except httpcore.ConnectError as exc:
                failed = exc
        assert failed is not None  # public_addresses returns at least one
        raise failed

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise CallbackRefused(f"a callback is never a Unix socket ({path})")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class _GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport over a connection pool that uses :class:`GuardedBackend`
    (httpx takes no network backend: its pool is replaced, the rest is httpx's)."""

    def __init__(self, limits: httpx.Limits) -> None:
        super().__init__(limits=limits, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(),
        )


def callback_client(
    *, connections: int, keepalive: int, deadline: float, guarded: bool
) -> httpx.AsyncClient:
    """A client for callbacks: a pool as large as the calls in flight (so that a pool
    timeout means a bug, and is a failed call anyway), no proxy from the environment
    (the address checked is the one connected to), no redirects (to elsewhere)."""
    limits = httpx.Limits(
        max_connections=connections, max_keepalive_connections=keepalive, keepalive_expiry=5.0
    )
    transport = _GuardedTransport(limits) if guarded else None
    return httpx.AsyncClient(
        timeout=httpx.Timeout(deadline),
        limits=limits,
        transport=transport,
        trust_env=False,
        follow_redirects=False,
        headers={"User-Agent": USER_AGENT},
    )


@dataclass(frozen=True)
class Answer:
    """What a call got: ``status`` (None: no answer, why in ``error``), the answer's
    first bytes, and whether the callback's address was refused (no use retrying)."""

    status: int | None
    body: bytes = b""
    error: str = ""
    refused: bool = False

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def why(self) -> str:
        return self.error if self.status is None else f"HTTP {self.status}"


async def exchange(
    client: httpx.AsyncClient, method: str, url: str, deadline: float, **kwargs: Any
) -> Answer:
    """One call, over within ``deadline`` seconds all told (connecting, sending, the
    answer's first :data:`MAX_ANSWER_BYTES`), its connection released or closed."""
    try:
        async with asyncio.timeout(deadline):
            async with client.stream(method, url, **kwargs) as response:
                body = b""
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) >= MAX_ANSWER_BYTES:
                        break  # the rest is not read: the connection is closed
                return Answer(response.status_code, body[:MAX_ANSWER_BYTES])
    except TimeoutError:
        return Answer(None, error=f"no answer within {deadline:g} s")
    except httpx.HTTPError as exc:
        refused = isinstance(exc.__cause__, CallbackRefused)
        return Answer(None, error=f"{type(exc).__name__}: {exc}", refused=refused)
    except httpx.InvalidURL as exc:
        return Answer(None, error=f"invalid URL: {exc}", refused=True)


class Slots:
    """At most ``per_host`` calls in flight to one host, and at most what a lane's
    semaphore allows in all; one waiting for its host holds no slot of the lane, so
    a host that never answers delays only its own calls.  On one event loop."""

    def __init__(self, per_host: int) -> None:
        self.per_host = per_host
        self._hosts: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @asynccontextmanager
    async def hold(self, host: str, lane: asyncio.Semaphore) -> AsyncIterator[None]:
        semaphore, users = self._hosts.get(host, (asyncio.Semaphore(self.per_host), 0))
        self._hosts[host] = (semaphore, users + 1)
        try:
            async with semaphore, lane:
                yield
        finally:
            semaphore, users = self._hosts[host]
            if users == 1:
                del self._hosts[host]  # kept only while in use: hosts come and go
            else:
                self._hosts[host] = (semaphore, users - 1)

    def __len__(self) -> int:
        return len(self._hosts)
