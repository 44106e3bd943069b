"""Fetching feed documents: http(s) through httpx's async client, ``file:`` from disk.

One :class:`AsyncFetcher` serves every source of the process: fetches are coroutines,
so hundreds of servers are waited on at once by one thread, and its connection pools
(one per host: :mod:`roses_app.connectors.hostpool`) keep connections to a host alive
between fetches (many feeds share a host), speak
HTTP/2 where a server offers it (TLS with ALPN) and resolves each host name once per
few minutes (:mod:`roses_app.connectors.dnscache`).  :class:`Fetcher` is the same
fetcher for synchronous callers (``roses fetch``, previews, tests).  A fetch is one
conditional GET:

* ``If-None-Match`` / ``If-Modified-Since`` from the stored validators; a 304
  comes back as a result with ``not_modified`` set and no body;
* ``Accept-Encoding: gzip, deflate``; the size cap (``FetchSettings.max_bytes``)
  applies to the coded bytes as they stream and to the *decoded* bytes as they are
  produced, in bounded steps, so a gzip bomb, even stacked
  (``Content-Encoding: gzip, gzip``), is stopped at the cap
  (:mod:`roses_app.connectors.limits`);
* redirects are followed by hand, at most :data:`MAX_REDIRECTS`, to http(s) only.
  When the chain starts with permanent redirects (301, 308) the last permanent
  target is reported as ``permanent_url`` so the caller can store it; a temporary
  one (302, 303, 307) ends that prefix;
* 410 comes back as a result with ``gone`` set;
* 429 and 503 raise :class:`RetryLaterError` carrying ``Retry-After`` (seconds
  or an HTTP date, turned into seconds from the injected clock);
* every other failure (other 4xx/5xx, DNS, refused, reset, TLS, timeouts, body
  too large) raises :class:`~roses_app.errors.FetchError`.

Timeout: ``timeout_seconds`` is the deadline of the whole fetch: connecting, the
headers and the body of every redirect hop.  The fetch's coroutine is cancelled then
(``asyncio.timeout``), even while a server dribbles its headers one byte at a time,
and it fails with :class:`~roses_app.connectors.limits.FetchTimeoutError`; its
connection is closed, never returned to the pool.  A server that never answers holds
one fetch, never a thread.

``file:`` URLs (``file:relative/path``, ``file:/abs``, ``file:///abs``) read a
regular file, honouring the size cap (a named pipe, device or directory is
refused: reading one could block forever); a ``Last-Modified``/``ETag``
made from the file's mtime and size make an unchanged file answer "not modified".
"""

from __future__ import annotations

import asyncio
import email.utils
import io
import logging
import os
import stat
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urljoin, urlsplit

import httpx
from httpcore._backends.auto import AutoBackend  # httpcore's own default backend

from roses_app.config.model import FetchSettings
from roses_app.connectors.dnscache import CachingBackend
from roses_app.connectors.hostpool import HostPools
from roses_app.connectors.limits import FetchTimeoutError, codings, decoded, read_capped
from roses_app.connectors.loopthread import LoopThread
from roses_app.errors import FetchError

log = logging.getLogger(__name__)

MAX_REDIRECTS = 5
PERMANENT_REDIRECTS = frozenset({301, 308})
TEMPORARY_REDIRECTS = frozenset({302, 303, 307})
ACCEPT = (
    "application/rss+xml, application/atom+xml, application/rdf+xml;q=0.9, "
    "application/xml;q=0.8, text/xml;q=0.8, */*;q=0.5"
)


class HttpStatusError(FetchError):
    """The server answered with an error status we do not handle otherwise."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class RetryLaterError(HttpStatusError):
    """429 or 503: try again, after ``retry_after`` seconds when the server said so."""

    def __init__(self, message: str, status: int, retry_after: float | None) -> None:
        super().__init__(message, status)
        self.retry_after = retry_after


@dataclass(frozen=True)
class FetchResult:
    """The outcome of one fetch that did not fail."""

    url: str  # the URL finally answered (after redirects)
    status: int  # 200 (also for files), 304 or 410
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names
    etag: str | None = None
    last_modified: str | None = None
    permanent_url: str | None = None  # store this URL from now on

    @property
    def not_modified(self) -> bool:
        return self.status == 304

    @property
    def gone(self) -> bool:
        return self.status == 410


def parse_retry_after(value: str | None, now: float) -> float | None:
    """``Retry-After`` as seconds from ``now``: delta-seconds or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return float(int(value))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


def file_path_of(url: str, base_dir: Path | None = None) -> Path:
    """The local path of a ``file:`` URL; relative paths are relative to ``base_dir``."""
    rest = url[len("file:") :]
    if rest.startswith("//"):
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise FetchError(f"file URL with a remote host is not supported: {url}")
        path = Path(unquote(parts.path))
    else:
        path = Path(unquote(rest))
    if not path.is_absolute():
        path = (base_dir or Path.cwd()) / path
    return path


class AsyncFetcher:
    """Conditional GETs for feed sources, as coroutines (see the module docstring).

    Use it on one event loop; :meth:`aclose` on that loop when done.
    """

    def __init__(
        self,
        settings: FetchSettings,
        clock: Callable[[], float] = time.time,
        *,
        base_dir: Path | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.base_dir = base_dir
        self.dns: CachingBackend | None = None
        if transport is None:
            transport, self.dns = _pooled_transport(settings)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(settings.timeout_seconds),
            follow_redirects=False,
            headers={
                "User-Agent": settings.user_agent,
                "Accept": ACCEPT,
                "Accept-Encoding": "gzip, deflate",
            },
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def fetch(
        self, url: str, etag: str | None = None, last_modified: str | None = None
    ) -> FetchResult:
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if scheme == "file":
            return await asyncio.to_thread(
                fetch_file, url, etag, self.settings.max_bytes, self.base_dir
            )
        if scheme in ("http", "https"):
            return await self._fetch_http(url, etag, last_modified)
        raise FetchError(f"unsupported URL scheme in {url!r}: use http:, https: or file:")

    async def _fetch_http(
        self, url: str, etag: str | None, last_modified: str | None
    ) -> FetchResult:
        headers: dict[str, str] = {}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        seconds = self.settings.timeout_seconds
        try:
            async with asyncio.timeout(seconds):
                return await self._follow(url, headers)
        except TimeoutError as exc:
            if isinstance(exc, FetchTimeoutError):
                raise
            raise FetchTimeoutError(
                f"timed out: {url} did not finish within {seconds:g} s "
                "(fetch.timeout covers connecting, the headers and the body); aborted"
            ) from exc

    async def _follow(self, url: str, headers: dict[str, str]) -> FetchResult:
        """The GET of ``url`` and of each redirect after it."""
        current = url
        permanent_url: str | None = None
        still_permanent = True
        for _hop in range(MAX_REDIRECTS + 1):
            result = await self._get(current, headers)
            if isinstance(result, _Redirect):
                if result.status in PERMANENT_REDIRECTS and still_permanent:
                    permanent_url = result.location
                else:
                    still_permanent = False
                current = result.location
                continue
            if permanent_url is not None:
                result = replace(result, permanent_url=permanent_url)
            return result
        raise FetchError(f"more than {MAX_REDIRECTS} redirects starting at {url}")

    async def _get(self, url: str, headers: dict[str, str]) -> FetchResult | _Redirect:
        """One GET; transport failures become :class:`FetchError`."""
        if urlsplit(url).scheme.lower() not in ("http", "https"):
            raise FetchError(f"redirected to a URL that is not http(s): {url}")
        try:
            async with self._client.stream("GET", url, headers=headers) as response:
                return await self._answer(response, url)
        except httpx.TimeoutException as exc:
            raise FetchTimeoutError(f"timed out: {url}: {exc or type(exc).__name__}") from exc
        except FetchError:
            raise
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, ValueError, OSError) as exc:
            raise FetchError(f"{type(exc).__name__} fetching {url}: {exc}") from exc

    async def _answer(self, response: httpx.Response, url: str) -> FetchResult | _Redirect:
        status = response.status_code
        lower = {k.lower(): v for k, v in response.headers.items()}
        if status in PERMANENT_REDIRECTS or status in TEMPORARY_REDIRECTS:
            location = response.headers.get("location")
            if not location:
                raise HttpStatusError(f"HTTP {status} without a Location from {url}", status)
            return _Redirect(status, urljoin(url, location.strip()))
        etag = response.headers.get("etag")
        last_modified = response.headers.get("last-modified")
        if status == 304:
            return FetchResult(url, 304, b"", lower, etag, last_modified)
        if status == 410:
            return FetchResult(url=url, status=410, headers=lower)
        if status in (429, 503):
            retry_after = parse_retry_after(response.headers.get("retry-after"), self.clock())
            hint = f", Retry-After {retry_after:g} s" if retry_after is not None else ""
            raise RetryLaterError(
                f"HTTP {status} {response.reason_phrase} from {url}{hint}", status, retry_after
            )
        if not 200 <= status < 300:
            raise HttpStatusError(f"HTTP {status} {response.reason_phrase} from {url}", status)
        body = await self._read_body(response, url)
        return FetchResult(url, 200, body, lower, etag, last_modified)

    async def _read_body(self, response: httpx.Response, url: str) -> bytes:
        cap = self.settings.max_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise FetchError(
                f"{url} announces {declared} bytes, over the limit of {cap} bytes "
                "(fetch.max_bytes); raise settings.fetch.max_bytes if this feed is that large"
            )
        # aiter_raw: the coded bytes, at most the cap of them; limits.decoded then
        # undoes the codings in bounded steps (httpx's own decoder inflates a whole
        # chunk, however large, in one call).
        coding = response.headers.get("content-encoding", "")
        if not codings(coding, url):  # written as it comes: the body is held once
            body = io.BytesIO()
            async for chunk in _counted(response.aiter_raw(), cap, url):
                body.write(chunk)
            return body.getvalue()  # the buffer itself, not a copy (CPython)
        raw = [chunk async for chunk in _counted(response.aiter_raw(), cap, url)]
        return read_capped(decoded(raw, coding, url), cap, url)


def _http2() -> bool:
    try:
        import h2  # noqa: F401  (httpx needs it for http2=True)
    except ImportError:
        return False
    return True


def _pooled_transport(
    settings: FetchSettings,
) -> tuple[httpx.AsyncBaseTransport, CachingBackend | None]:
    """A pool per host (see :mod:`hostpool`) with keep-alive, HTTP/2 where h2 is
    installed, and one network backend wrapped in the DNS cache for all of them."""
    dns = CachingBackend(AutoBackend())
    pools = HostPools(
        settings.per_host,
        max_pools=2 * settings.concurrency,
        http2=_http2(),
        network_backend=dns,
    )
    return pools, dns


def single_pool_transport(settings: FetchSettings) -> httpx.AsyncHTTPTransport:
    """One httpcore pool for every host (what :func:`_pooled_transport` replaced: the
    baseline of ``benchmarks/bench_fetch.py``)."""
    return httpx.AsyncHTTPTransport(
        http2=_http2(),
        limits=httpx.Limits(
            max_connections=settings.concurrency * 2,
            max_keepalive_connections=settings.concurrency,
            keepalive_expiry=60.0,
        ),
    )


def fetch_file(url: str, etag: str | None, cap: int, base_dir: Path | None = None) -> FetchResult:
    """A ``file:`` URL's document; "not modified" when its mtime and size did not change."""
    path = file_path_of(url, base_dir)
    try:
        with _open_regular(path) as fh:
            st = os.fstat(fh.fileno())
            if st.st_size > cap:
                raise FetchError(
                    f"{path}: {st.st_size} bytes is over the limit of {cap} bytes (fetch.max_bytes)"
                )
            new_etag = f'"{st.st_mtime_ns:x}-{st.st_size:x}"'
            new_modified = email.utils.formatdate(st.st_mtime, usegmt=True)
            if etag is not None and etag == new_etag:
                return FetchResult(url=url, status=304, etag=new_etag, last_modified=new_modified)
            body = fh.read(cap + 1)
    except FetchError:
        raise
    except OSError as exc:
        raise FetchError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(body) > cap:
        raise FetchError(f"{path}: over the limit of {cap} bytes (fetch.max_bytes)")
    return FetchResult(url=url, status=200, body=body, etag=new_etag, last_modified=new_modified)


class Fetcher:
    """:class:`AsyncFetcher` for synchronous callers: each :meth:`fetch` runs on a loop
    of the fetcher's own (in a thread), so several threads may fetch at once."""

    def __init__(
        self,
        settings: FetchSettings,
        clock: Callable[[], float] = time.time,
        *,
        base_dir: Path | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self._loop = LoopThread("roses-fetcher")
        self.fetcher = AsyncFetcher(settings, clock, base_dir=base_dir, transport=transport)

    def fetch(
        self, url: str, etag: str | None = None, last_modified: str | None = None
    ) -> FetchResult:
        return self._loop.run(self.fetcher.fetch(url, etag, last_modified))

    def close(self) -> None:
        if not self._loop.loop.is_closed():
            self._loop.run(self.fetcher.aclose())
            self._loop.close()

    def __enter__(self) -> Fetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _counted(chunks: AsyncIterator[bytes], cap: int, url: str) -> AsyncIterator[bytes]:
    """The coded bytes are capped too: no bomb of empty gzip members either."""
    total = 0
    async for chunk in chunks:
        total += len(chunk)
        if total > cap:
            raise FetchError(
                f"{url} sent more than {cap} bytes (fetch.max_bytes) before decoding; aborted"
            )
        yield chunk


_KINDS = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
)


def _open_regular(path: Path) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file, else refuse.

    O_NONBLOCK: opening a named pipe would otherwise wait for a writer, forever;
    the type is checked on the opened descriptor, so a swap in between is caught.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise FetchError(
                f"{path} is {kind}, not a regular file: a file: source must name a feed "
                "document on disk"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@dataclass(frozen=True)
class _Redirect:
    status: int
    location: str
