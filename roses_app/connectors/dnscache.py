"""DNS answers cached for the fetcher: many feeds of one host cost one look-up.

httpx resolves a host name at every new connection (a thread-pool ``getaddrinfo``).
With thousands of feeds on a few hundred hosts, polled every few minutes, that is
most of the look-ups of a busy daemon for the same few answers.  :class:`CachingBackend`
wraps httpcore's network backend: it resolves a name once per ``ttl`` (concurrent
connections to one host share the pending look-up) and connects to the addresses
found, in order.  TLS is unchanged: httpcore gives the host name, not the address, as
the certificate's expected name (SNI).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

import httpcore

DNS_TTL = 300.0  # seconds an answer is reused (resolvers' answers are usually longer)


class CachingBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend with host names resolved once per ``ttl``."""

    def __init__(
        self,
        inner: httpcore.AsyncNetworkBackend,
        ttl: float = DNS_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.ttl = ttl
        self.clock = clock
        self.lookups = 0  # look-ups actually made (for tests and metrics)
        self._answers: dict[tuple[str, int], tuple[float, list[str]]] = {}
        self._pending: dict[tuple[str, int], asyncio.Future[list[str]]] = {}

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        last: Exception | None = None
        for address in await self.resolve(host, port):
            try:
                return await self.inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc  # try the host's next address
        assert last is not None  # resolve() never answers an empty list
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return await self.inner.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        )

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)

    async def resolve(self, host: str, port: int) -> list[str]:
        """The addresses of ``host`` (an address is its own answer)."""
        if _is_address(host):
            return [host]
        key = (host, port)
        cached = self._answers.get(key)
        if cached is not None and cached[0] > self.clock():
            return cached[1]
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._lookup(host, port))
            self._pending[key] = pending
            pending.add_done_callback(lambda _: self._pending.pop(key, None))
        return await asyncio.shield(pending)

    async def _lookup(self, host: str, port: int) -> list[str]:
        self.lookups += 1
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        if not addresses:
            raise httpcore.ConnectError(f"cannot resolve {host}: no address")
        self._answers[(host, port)] = (self.clock() + self.ttl, addresses)
        return addresses


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True
