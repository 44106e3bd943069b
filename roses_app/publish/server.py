"""The HTTP server: feeds, OPML, the index and health, on Starlette + uvicorn.

Routes::

    /                              HTML index of every published feed
    /feeds.opml                    OPML 2.0 list of every published feed
    /feeds/NAME.rss | .atom        a published stream
    /feeds/NAME/VALUE.rss | .atom  one value of a split stream (VALUE percent-quoted)
    /healthz                       JSON from the health callback; 200 if ok, else 503

Feed documents carry a strong ETag (hash of the body) and Last-Modified (last change in
the store) and answer conditional requests with 304; gzip is negotiated.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from email.utils import formatdate, parsedate_to_datetime
from typing import Any
from urllib.parse import quote, unquote

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from roses_app.config.model import Config
from roses_app.publish.catalog import FORMATS, Catalog
from roses_app.publish.render import (
    ATOM_MEDIA_TYPE,
    OPML_MEDIA_TYPE,
    RSS_MEDIA_TYPE,
    render_atom,
    render_index,
    render_opml,
    render_rss,
)
from roses_app.store import Store

log = logging.getLogger(__name__)

GZIP_MINIMUM_SIZE = 256


def etag_of(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:40] + '"'


def _etag_matches(header: str, etag: str) -> bool:
    """If-None-Match uses the weak comparison (RFC 9110 13.1.2)."""
    if header.strip() == "*":
        return True
    ours = etag.removeprefix("W/")
    return any(tag.strip().removeprefix("W/") == ours for tag in header.split(","))


def _not_modified(request: Request, etag: str, updated: float | None) -> bool:
    inm = request.headers.get("if-none-match")
    if inm is not None:
        return _etag_matches(inm, etag)
    ims = request.headers.get("if-modified-since")
    if ims is None or updated is None:
        return False
    # Last-Modified has one-second granularity: a feed changed within the last second
    # could change again within the same second, so only the ETag can vouch for it.
    if time.time() - updated < 1.0:
        return False
    try:
        since = parsedate_to_datetime(ims).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return False
    return int(updated) <= since


def conditional_response(
    request: Request,
    body: bytes,
    media_type: str,
    updated: float | None = None,
) -> Response:
    """200 with ETag/Last-Modified, or 304 without a body if the client is up to date."""
    etag = etag_of(body)
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if updated is not None:
        headers["Last-Modified"] = formatdate(int(updated), usegmt=True)
    if _not_modified(request, etag, updated):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type=f"{media_type}; charset=utf-8", headers=headers)


def _request_base(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _split_feed_path(request: Request) -> tuple[str, str | None, str] | None:
    """(name, value or None, format) from the raw path, segments percent-decoded."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) else quote(request.url.path)
    root = request.scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    if not path.startswith("/feeds/"):
        return None
    rest = path[len("/feeds/") :]
    stem, dot, fmt = rest.rpartition(".")
    if not dot or fmt not in FORMATS or not stem:
        return None
    name, slash, value = stem.partition("/")
    if not name:
        return None
    return unquote(name), (unquote(value) if slash else None), fmt


def create_app(
    config: Config,
    store: Store,
    health: Callable[[], Mapping[str, Any]],
) -> Starlette:
    """The Starlette application serving the published feeds of ``config`` from ``store``."""
    catalog = Catalog(config, store)

    def index(request: Request) -> Response:
        groups = catalog.groups(_request_base(request))
        stats = catalog.stats(f for g in groups for f in g.feeds)
        body = render_index(groups, stats)
        return conditional_response(request, body, "text/html")

    def opml(request: Request) -> Response:
        body = render_opml(catalog.groups(_request_base(request)))
        return conditional_response(request, body, OPML_MEDIA_TYPE)

    def feed(request: Request) -> Response:
        parsed = _split_feed_path(request)
        info = None
        if parsed is not None:
            name, value, fmt = parsed
            info = catalog.lookup(name, value, _request_base(request))
        if parsed is None or info is None:
            return _not_found(request)
        # Read the time first: a write in between then makes Last-Modified too old (an
        # extra 200 later), never too new (a 304 that would hide the write).
        updated = store.feed_updated(info.stream, info.part)
        entries = store.latest(info.stream, info.part, info.keep)
        if fmt == "rss":
            return conditional_response(
                request, render_rss(info, entries, updated=updated), RSS_MEDIA_TYPE, updated
            )
        return conditional_response(
            request, render_atom(info, entries, updated=updated), ATOM_MEDIA_TYPE, updated
        )

    def _not_found(request: Request) -> Response:
        base = _request_base(request)
        lines = [f"No published feed at {request.url.path}.", ""]
        feeds = catalog.feeds(base)
        if feeds:
            lines.append("Published feeds:")
            lines.extend(f"  {f.title}: {f.rss_url}  {f.atom_url}" for f in feeds)
        else:
            lines.append("No feed is published yet (a stream needs `publish:` in feeds.yaml;")
            lines.append("a split stream's feeds appear once its first items are processed).")
        lines += ["", f"Index: {base}/   OPML: {base}/feeds.opml"]
        return PlainTextResponse("\n".join(lines) + "\n", status_code=404)

    def healthz(request: Request) -> Response:
        try:
            info: dict[str, Any] = dict(health())
        except Exception as exc:  # a broken probe is unhealthy, not a 500
            log.exception("health check failed")
            info = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        ok = bool(info.get("ok", info.get("status") == "ok"))
        body = json.dumps(info, default=str, sort_keys=True).encode("utf-8")
        return Response(
            body,
            status_code=200 if ok else 503,
            media_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    routes = [
        Route("/", index),
        Route("/feeds.opml", opml),
        Route("/feeds/{rest:path}", feed),
        Route("/healthz", healthz),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(GZipMiddleware, minimum_size=GZIP_MINIMUM_SIZE)],
    )
    app.state.catalog = catalog
    app.state.store = store
    return app


class HttpServer:
    """uvicorn serving an ASGI app from a background thread.

    ``start()`` returns once the socket accepts connections (``port=0`` picks a free
    port; :attr:`port` is the bound one); ``stop()`` shuts down gracefully, letting
    requests in flight finish.
    """

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 8080,
        *,
        access_log: bool = False,
        graceful_timeout: int = 5,
    ) -> None:
        self.host = host
        self._requested_port = port
        self._bound_port: int | None = None
        self._config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_config=None,  # leave the application's logging set-up alone
            access_log=access_log,
            lifespan="off",
            timeout_graceful_shutdown=graceful_timeout,
            server_header=False,
        )
        self._server = uvicorn.Server(self._config)
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    @property
    def port(self) -> int:
        if self._bound_port is None:
            raise RuntimeError("the HTTP server is not started")
        return self._bound_port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._server.started

    def _bind(self) -> socket.socket:
        """Bind the listening socket here, so that errors surface in the caller."""
        try:
            infos = socket.getaddrinfo(
                self.host or None,
                self._requested_port,
                type=socket.SOCK_STREAM,
                flags=socket.AI_PASSIVE,
            )
        except OSError as exc:
            raise OSError(f"the HTTP server cannot resolve host {self.host!r}: {exc}") from exc
        last: OSError | None = None
        for family, kind, proto, _name, addr in infos:
            sock = socket.socket(family, kind, proto)
            try:
                if hasattr(socket, "SO_REUSEADDR") and sys.platform != "win32":
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(addr)
                sock.set_inheritable(True)
                return sock
            except OSError as exc:
                sock.close()
                last = exc
        raise OSError(
            last.errno if last is not None else errno.EADDRNOTAVAIL,
            f"the HTTP server could not listen on {self.host}:{self._requested_port}: "
            f"{last.strerror if last is not None else 'no address'}"
            " (is the port in use? change settings.http.port in feeds.yaml)",
        ) from last

    def _run(self, sock: socket.socket) -> None:
        try:
            self._server.run(sockets=[sock])
        except BaseException as exc:  # SystemExit included: uvicorn exits on startup errors
            self._error = exc
            log.error("the HTTP server stopped: %r", exc)

    def start(self, timeout: float = 15.0) -> None:
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("the HTTP server was already started")
            sock = self._bind()
            self._socket = sock
            self._bound_port = int(sock.getsockname()[1])
            self._thread = threading.Thread(
                target=self._run, args=(sock,), name="roses-http", daemon=True
            )
            self._thread.start()
            deadline = time.monotonic() + timeout
            while not self._server.started:
                if not self._thread.is_alive():
                    sock.close()
                    raise OSError(f"the HTTP server on {self.url} failed to start: {self._error!r}")
                if time.monotonic() > deadline:
                    self._server.should_exit = True
                    raise TimeoutError(f"the HTTP server did not start within {timeout}s")
                time.sleep(0.01)
            log.info("serving feeds on %s", self.url)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop accepting connections, let requests in flight finish, then return."""
        with self._lock:
            thread = self._thread
            if thread is None:
                return
            self._server.should_exit = True
            thread.join(timeout)
            if thread.is_alive():
                self._server.force_exit = True
                thread.join(5.0)
            if self._socket is not None:
                self._socket.close()

    def __enter__(self) -> HttpServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
