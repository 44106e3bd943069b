"""Fetching feed documents: http(s) through httpx, ``file:`` URLs from disk.

One :class:`Fetcher` serves every source of the process (its httpx client is
thread-safe and keeps connections alive).  A fetch is one conditional GET:

* ``If-None-Match`` / ``If-Modified-Since`` from the stored validators; a 304
  comes back as a result with ``not_modified`` set and no body;
* ``Accept-Encoding: gzip, deflate``; the body is decoded while it streams, in
  bounded steps, and the size cap (``FetchSettings.max_bytes``) applies to the
  *decoded* bytes as they are produced, so a gzip bomb, even stacked
  (``Content-Encoding: gzip, gzip``), is stopped at the cap
  (:mod:`roses_app.connectors.limits`);
* redirects are followed by hand, at most :data:`MAX_REDIRECTS`.  When the chain
  starts with permanent redirects (301, 308) the last permanent target is
  reported as ``permanent_url`` so the caller can store it; a temporary one
  (302, 303, 307) ends that prefix;
* 410 comes back as a result with ``gone`` set;
* 429 and 503 raise :class:`RetryLaterError` carrying ``Retry-After`` (seconds
  or an HTTP date, turned into seconds from the injected clock);
* every other failure (other 4xx/5xx, DNS, refused, reset, TLS, timeouts, body
  too large) raises :class:`~roses_app.errors.FetchError`.

Timeout: ``timeout_seconds`` is the deadline of the whole fetch: connecting,
the headers and the body of every redirect hop.  A watchdog ends it then, even
while a server dribbles its headers one byte at a time
(:class:`~roses_app.connectors.limits.Deadline`), and it fails with
:class:`~roses_app.connectors.limits.FetchTimeoutError`.

``file:`` URLs (``file:relative/path``, ``file:/abs``, ``file:///abs``) read a
regular file, honouring the size cap (a named pipe, device or directory is
refused: reading one could block a worker forever); a ``Last-Modified``/``ETag``
made from the file's mtime and size make an unchanged file answer "not modified".
"""

from __future__ import annotations

import email.utils
import logging
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urljoin, urlsplit

import httpx

from roses_app.config.model import FetchSettings
from roses_app.connectors.limits import Deadline, FetchTimeoutError, decoded, read_capped
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


class Fetcher:
    """Conditional GETs for feed sources (see the module docstring)."""

    def __init__(
        self,
        settings: FetchSettings,
        clock: Callable[[], float] = time.time,
        *,
        base_dir: Path | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.base_dir = base_dir
        self._client = httpx.Client(
            timeout=httpx.Timeout(settings.timeout_seconds),
            # A fresh connection per fetch: the deadline's watchdog learns the
            # sockets of a fetch from its connects (polls are minutes apart anyway).
            limits=httpx.Limits(max_keepalive_connections=0),
            follow_redirects=False,
            headers={
                "User-Agent": settings.user_agent,
                "Accept": ACCEPT,
                "Accept-Encoding": "gzip, deflate",
            },
            transport=transport,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Fetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- entry point -------------------------------------------------------------

    def fetch(
        self, url: str, etag: str | None = None, last_modified: str | None = None
    ) -> FetchResult:
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if scheme == "file":
            return self._fetch_file(url, etag, last_modified)
        if scheme in ("http", "https"):
            return self._fetch_http(url, etag, last_modified)
        raise FetchError(f"unsupported URL scheme in {url!r}: use http:, https: or file:")

    # -- file: --------------------------------------------------------------------

    def _fetch_file(self, url: str, etag: str | None, last_modified: str | None) -> FetchResult:
        path = file_path_of(url, self.base_dir)
        cap = self.settings.max_bytes
        try:
            with _open_regular(path) as fh:
                st = os.fstat(fh.fileno())
                if st.st_size > cap:
                    raise FetchError(
                        f"{path}: {st.st_size} bytes is over the limit of "
                        f"{cap} bytes (fetch.max_bytes)"
                    )
                new_etag = f'"{st.st_mtime_ns:x}-{st.st_size:x}"'
                new_modified = email.utils.formatdate(st.st_mtime, usegmt=True)
                if etag is not None and etag == new_etag:
                    return FetchResult(
                        url=url, status=304, etag=new_etag, last_modified=new_modified
                    )
                body = fh.read(cap + 1)
        except FetchError:
            raise
        except OSError as exc:
            raise FetchError(f"cannot read {path}: {exc.strerror or exc}") from exc
        if len(body) > cap:
            raise FetchError(f"{path}: over the limit of {cap} bytes (fetch.max_bytes)")
        return FetchResult(
            url=url, status=200, body=body, etag=new_etag, last_modified=new_modified
        )

    # -- http(s) -----------------------------------------------------------------

    def _fetch_http(self, url: str, etag: str | None, last_modified: str | None) -> FetchResult:
        headers: dict[str, str] = {}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        current = url
        permanent_url: str | None = None
        still_permanent = True
        with Deadline(self.settings.timeout_seconds) as deadline:
            for _hop in range(MAX_REDIRECTS + 1):
                result = self._get_within(current, headers, deadline)
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

    def _get_within(
        self, url: str, headers: dict[str, str], deadline: Deadline
    ) -> FetchResult | _Redirect:
        """One GET; whatever it does after the deadline is a :class:`FetchTimeoutError`."""
        timed_out = FetchTimeoutError(
            f"timed out: {url} did not finish within {deadline.seconds:g} s "
            "(fetch.timeout covers connecting, the headers and the body); aborted"
        )
        try:
            result = self._get_once(url, headers, deadline)
        except httpx.TimeoutException as exc:
            raise timed_out from exc
        except (
            httpx.HTTPError,
            httpx.InvalidURL,
            httpx.StreamError,
            ValueError,
            OSError,
        ) as exc:
            if deadline.expired:  # the watchdog cut the connection: that is the cause
                raise timed_out from exc
            if isinstance(exc, FetchError):
                raise
            raise FetchError(f"{type(exc).__name__} fetching {url}: {exc}") from exc
        if deadline.expired:  # a close-delimited body cut short looks complete
            raise timed_out
        return result

    def _get_once(
        self, url: str, headers: dict[str, str], deadline: Deadline
    ) -> FetchResult | _Redirect:
        if urlsplit(url).scheme.lower() not in ("http", "https"):
            raise FetchError(f"redirected to a URL that is not http(s): {url}")
        with self._client.stream(
            "GET",
            url,
            headers=headers,
            timeout=httpx.Timeout(deadline.remaining()),
            extensions={"trace": deadline.trace},
        ) as response:
            status = response.status_code
            lower = {k.lower(): v for k, v in response.headers.items()}
            if status in PERMANENT_REDIRECTS or status in TEMPORARY_REDIRECTS:
                location = response.headers.get("location")
                if not location:
                    raise HttpStatusError(f"HTTP {status} without a Location from {url}", status)
                return _Redirect(status, urljoin(url, location.strip()))
            if status == 304:
                return FetchResult(
                    url=url,
                    status=304,
                    headers=lower,
                    etag=response.headers.get("etag"),
                    last_modified=response.headers.get("last-modified"),
                )
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
            return FetchResult(
                url=url,
                status=200,
                body=self._read_body(response, url),
                headers=lower,
                etag=response.headers.get("etag"),
                last_modified=response.headers.get("last-modified"),
            )

    def _read_body(self, response: httpx.Response, url: str) -> bytes:
        cap = self.settings.max_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise FetchError(
                f"{url} announces {declared} bytes, over the limit of {cap} bytes "
                "(fetch.max_bytes); raise settings.fetch.max_bytes if this feed is that large"
            )
        coding = response.headers.get("content-encoding", "")
        # iter_raw: the coded bytes, which limits.decoded undoes in bounded steps
        # (httpx's own decoder inflates a whole chunk, however large, in one call).
        raw = _counted(response.iter_raw(), cap, url)
        return read_capped(decoded(raw, coding, url), cap, url)


def _counted(chunks: Iterator[bytes], cap: int, url: str) -> Iterator[bytes]:
    """The coded bytes are capped too: no bomb of empty gzip members either."""
    total = 0
    for chunk in chunks:
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
