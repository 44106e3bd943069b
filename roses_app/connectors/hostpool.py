"""A connection pool per host for the fetcher.

httpcore keeps one list of connections per pool and scans all of it at every request
and every response end, checking each idle connection's socket (a system call) and,
for each, counting the idle ones again: with the fetcher's hundreds of keep-alive
connections to hundreds of hosts, that scan was most of the daemon's CPU per poll.
:class:`HostPools` gives each origin (scheme, host, port) a transport of its own,
bounded to a few connections (the poll queue already keeps at most ``per_host``
fetches on one host), so a scan looks at those few.  The pools of the hosts least
recently used are closed beyond ``max_pools`` (when nothing of theirs is in flight).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Callable

import httpcore
import httpx

Origin = tuple[str, str, int]


class _Counted(httpx.AsyncByteStream):
    """A response body that tells its pool when it is closed (the fetch is over)."""

    def __init__(self, stream: httpx.AsyncByteStream, done: Callable[[], None]) -> None:
        self._stream = stream
        self._done: Callable[[], None] | None = done

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            if self._done is not None:
                self._done()
                self._done = None


class HostPools(httpx.AsyncBaseTransport):
    """Routes each request to its origin's own :class:`httpx.AsyncHTTPTransport`."""

    def __init__(
        self,
        per_host: int,
        max_pools: int,
        *,
        http2: bool,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
        keepalive_expiry: float = 60.0,
    ) -> None:
        self.limits = httpx.Limits(
            # redirects and a slow close may briefly need one more than the queue's bound
            max_connections=per_host + 2,
            max_keepalive_connections=per_host,
            keepalive_expiry=keepalive_expiry,
        )
        self.max_pools = max(1, max_pools)
        self.http2 = http2
        self.network_backend = network_backend  # shared: one DNS cache for all hosts
        # one TLS context for all: making one loads the CA bundle (milliseconds)
        self.ssl_context = httpx.create_ssl_context()
        self._pools: OrderedDict[Origin, httpx.AsyncHTTPTransport] = OrderedDict()
        self._in_flight: dict[Origin, int] = {}

    def __len__(self) -> int:
        return len(self._pools)

    def _new(self) -> httpx.AsyncHTTPTransport:
        transport = httpx.AsyncHTTPTransport(
            verify=self.ssl_context, http2=self.http2, limits=self.limits
        )
        pool = getattr(transport, "_pool", None)
        if self.network_backend is not None and pool is not None:
            pool._network_backend = self.network_backend
        return transport

    async def _pool_of(self, origin: Origin) -> httpx.AsyncHTTPTransport:
        pool = self._pools.get(origin)
        if pool is not None:
            self._pools.move_to_end(origin)
            return pool
        pool = self._pools[origin] = self._new()
        for old in list(self._pools):
            if len(self._pools) <= self.max_pools:
                break
            if self._in_flight.get(old, 0) == 0 and old != origin:
                await self._pools.pop(old).aclose()
        return pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        pool = await self._pool_of(origin)
        self._in_flight[origin] = self._in_flight.get(origin, 0) + 1
        try:
            response = await pool.handle_async_request(request)
        except BaseException:
            self._release(origin)
            raise
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        response.stream = _Counted(stream, lambda: self._release(origin))
        return response

    def _release(self, origin: Origin) -> None:
        left = self._in_flight.get(origin, 1) - 1
        if left > 0:
            self._in_flight[origin] = left
        else:
            self._in_flight.pop(origin, None)

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), OrderedDict()
        for pool in pools:
            await pool.aclose()
