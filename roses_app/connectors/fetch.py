"""Fetching feed documents: http(s) through httpx, ``file:`` URLs from disk.

One :class:`Fetcher` serves every source of the process (its httpx client is
thread-safe and keeps connections alive).  A fetch is one conditional GET:

* ``If-None-Match`` / ``If-Modified-Since`` from the stored validators; a 304
  comes back as a result with ``not_modified`` set and no body;
* ``Accept-Encoding: gzip, deflate``; the body is decoded while it streams and
  the size cap (``FetchSettings.max_bytes``) applies to the *decoded* bytes, so a
  gzip bomb is stopped too;
* redirects are followed by hand, at most :data:`MAX_REDIRECTS`.  When the chain
  starts with permanent redirects (301, 308) the last permanent target is
  reported as ``permanent_url`` so the caller can store it; a temporary one
  (302, 303, 307) ends that prefix;
* 410 comes back as a result with ``gone`` set;
* 429 and 503 raise :class:`RetryLaterError` carrying ``Retry-After`` (seconds
  or an HTTP date, turned into seconds from the injected clock);
* every other failure (other 4xx/5xx, DNS, refused, reset, TLS, timeouts, body
  too large) raises :class:`~roses_app.errors.FetchError`.

Timeouts: ``timeout_seconds`` bounds the connect and each read; the whole fetch
(redirects and body) must also finish within ``TOTAL_TIMEOUT_FACTOR`` times
that, so a server trickling one byte at a time cannot hold a worker forever.

``file:`` URLs (``file:relative/path``, ``file:/abs``, ``file:///abs``) read the
file, honouring the size cap; a ``Last-Modified``/``ETag`` made from the file's
mtime and size make an unchanged file answer "not modified".
"""

from __future__ import annotations

import email.utils
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import httpx

from roses_app.config.model import FetchSettings
from roses_app.errors import FetchError

log = logging.getLogger(__name__)

MAX_REDIRECTS = 5
TOTAL_TIMEOUT_FACTOR = 4.0
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
        timeout = httpx.Timeout(settings.timeout_seconds)
        self._client = httpx.Client(
            timeout=timeout,
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
        try:
            with path.open("rb") as fh:
                st = os.fstat(fh.fileno())
                if st.st_size > self.settings.max_bytes:
                    raise FetchError(
                        f"{path}: {st.st_size} bytes is over the limit of "
                        f"{self.settings.max_bytes} bytes (fetch.max_bytes)"
                    )
                new_etag = f'"{st.st_mtime_ns:x}-{st.st_size:x}"'
                new_modified = email.utils.formatdate(st.st_mtime, usegmt=True)
                if etag is not None and etag == new_etag:
                    return FetchResult(
                        url=url, status=304, etag=new_etag, last_modified=new_modified
                    )
                body = fh.read(self.settings.max_bytes + 1)
        except FetchError:
            raise
        except OSError as exc:
            raise FetchError(f"cannot read {path}: {exc.strerror or exc}") from exc
        if len(body) > self.settings.max_bytes:
            raise FetchError(
                f"{path}: over the limit of {self.settings.max_bytes} bytes (fetch.max_bytes)"
            )
        return FetchResult(
            url=url, status=200, body=body, etag=new_etag, last_modified=new_modified
        )

    # -- http(s) -----------------------------------------------------------------

    def _fetch_http(self, url: str, etag: str | None, last_modified: str | None) -> FetchResult:
        started = time.monotonic()
        deadline = started + self.settings.timeout_seconds * TOTAL_TIMEOUT_FACTOR
        headers: dict[str, str] = {}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        current = url
        permanent_url: str | None = None
        still_permanent = True
        for _hop in range(MAX_REDIRECTS + 1):
            try:
                result = self._get_once(current, headers, deadline)
            except httpx.TimeoutException as exc:
                raise FetchError(
                    f"timed out after {self.settings.timeout_seconds:g} s "
                    f"({type(exc).__name__}) fetching {current}"
                ) from exc
            except FetchError:
                raise
            except (
                httpx.HTTPError,
                httpx.InvalidURL,
                httpx.StreamError,
                ValueError,
                OSError,
            ) as exc:
                raise FetchError(f"{type(exc).__name__} fetching {current}: {exc}") from exc
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

    def _get_once(
        self, url: str, headers: dict[str, str], deadline: float
    ) -> FetchResult | _Redirect:
        if urlsplit(url).scheme.lower() not in ("http", "https"):
            raise FetchError(f"redirected to a URL that is not http(s): {url}")
        with self._client.stream("GET", url, headers=headers) as response:
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
            body = self._read_capped(response, url, deadline)
            return FetchResult(
                url=url,
                status=200,
                body=body,
                headers=lower,
                etag=response.headers.get("etag"),
                last_modified=response.headers.get("last-modified"),
            )

    def _read_capped(self, response: httpx.Response, url: str, deadline: float) -> bytes:
        cap = self.settings.max_bytes
        declared = response.headers.get("content-length", "")
        encoded = response.headers.get("content-encoding", "identity").lower()
        if declared.isdigit() and encoded in ("", "identity") and int(declared) > cap:
            raise FetchError(
                f"{url} announces {declared} bytes, over the limit of {cap} bytes (fetch.max_bytes)"
            )
        chunks: list[bytes] = []
        total = 0
        for chunk in response.iter_bytes():
            total += len(chunk)
            if total > cap:
                raise FetchError(f"{url} sent more than {cap} bytes (fetch.max_bytes); aborted")
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise FetchError(
                    f"{url} did not finish within "
                    f"{self.settings.timeout_seconds * TOTAL_TIMEOUT_FACTOR:g} s; aborted"
                )
        return b"".join(chunks)


@dataclass(frozen=True)
class _Redirect:
    status: int
    location: str
