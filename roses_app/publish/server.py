"""The HTTP server: feeds, OPML, the index and health, on Starlette + uvicorn.

Routes::

    /                                 HTML index of every published feed
    /feeds.opml                       OPML 2.0 list of every published feed
    /feeds-json.opml                  the same, listing their JSON Feed documents
    /feeds/NAME.rss | .atom | .json   a published stream (RSS 2.0, Atom 1.0, JSON Feed 1.1)
    /feeds/NAME.html                  its page: the latest items, subscribe links
    /feeds/NAME/VALUE.rss ... .html   one value of a split stream (VALUE percent-quoted)
    /healthz                          JSON from the health callback; 200 if ok, else 503
    /sources?q=&status=&sort=&page=   each feed source's health, paged JSON (the daemon's)
    /sources.html                     the same, a page for people (sortable, filterable)
    /console/...                      the operator's console (settings.console; off: 404)

Documents are rendered once per change in the store and served from a
:class:`~roses_app.publish.cache.RenderCache` (with their gzipped body); they carry a
strong ETag (hash of the body) and Last-Modified (last change in the store) and answer
conditional requests with 304.  ``/healthz`` runs on threads of its own, so that it
answers while every other thread waits for a render.

Absolute links (feeds, OPML, index) use ``settings.http.base_url``, else the configured
host and the port the server listens on: never a request's ``Host`` header, which
anyone can set.  Every response carries ``X-Content-Type-Options: nosniff`` and HTML
pages their Content-Security-Policy (:mod:`.headers`); a 404 says where the feeds are
listed, not what was asked for (nothing of a request is reflected).
"""

from __future__ import annotations

import errno
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
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from roses_app.config.model import Config
from roses_app.publish.cache import Document, RenderCache, etag_of
from roses_app.publish.catalog import (
    FORMATS,
    RENDERERS,
    Catalog,
    ConfigSource,
    config_getter,
    feeds_of,
    render_feed,
)
from roses_app.publish.console import ConsoleDeps, console_mount
from roses_app.publish.headers import HeadersApp
from roses_app.publish.httplog import HTTP_LOGGER, quiet_uvicorn
from roses_app.publish.pages import render_index, render_opml
from roses_app.publish.pull import PullQueries
from roses_app.publish.render import OPML_MEDIA_TYPE, FeedInfo
from roses_app.publish.status import (
    healthz_endpoint,
    metrics_endpoint,
    sources_endpoint,
)
from roses_app.publish.websub import HUB_PATH, TOPIC_FORMATS, Hub, link_header
from roses_app.publish.websub_callback import (
    CALLBACK_ROUTE,
    PushHandler,
    PushTaker,
    callback_endpoint,
)
from roses_app.store import Store

log = logging.getLogger(HTTP_LOGGER)

__all__ = ["HttpServer", "create_app", "etag_of"]

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


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


def accepts_gzip(header: str) -> bool:
    """True when an Accept-Encoding header allows gzip (``gzip;q=0`` refuses it)."""
    for part in header.split(","):
        coding, _, params = part.partition(";")
        if coding.strip().lower() not in ("gzip", "x-gzip", "*"):
            continue
        name, _, value = params.strip().partition("=")
        if name.strip().lower() != "q":
            return True
        try:
            return float(value) > 0
        except ValueError:
            return False
    return False


def document_response(request: Request, doc: Document) -> Response:
    """200 with ETag/Last-Modified (gzipped if the client accepts it), or 304."""
    headers = {"ETag": doc.etag, "Cache-Control": "no-cache", "Vary": "Accept-Encoding"}
    if doc.updated is not None:
        headers["Last-Modified"] = formatdate(int(doc.updated), usegmt=True)
    if _not_modified(request, doc.etag, doc.updated):
        return Response(status_code=304, headers=headers)
    body = doc.body
    if doc.gzipped is not None and accepts_gzip(request.headers.get("accept-encoding", "")):
        body = doc.gzipped
        headers["Content-Encoding"] = "gzip"
    return Response(body, media_type=f"{doc.media_type}; charset=utf-8", headers=headers)


def server_base(config: Config, request: Request) -> str:
    """``base_url``, else ``http://HOST:PORT`` of the configured host and the port the
    connection came in on (the bound one when the configured port is 0).  With a
    wildcard host (0.0.0.0, ::), the local address the connection came in on."""
    http = config.settings.http
    if http.base_url:
        return http.base_url.rstrip("/")
    server = request.scope.get("server") or (http.host, http.port)
    host = http.host if http.host not in WILDCARD_HOSTS else str(server[0])
    port = server[1] if server[1] is not None else http.port
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}"


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


class _Pages:
    """The request handlers of the documents: each served from the render cache."""

    def __init__(self, config: ConfigSource, store: Store, documents: RenderCache) -> None:
        self._config = config_getter(config)  # (a reload replaces the daemon's config)
        self.store = store
        self.catalog = Catalog(config, store)
        self.documents = documents

    @property
    def config(self) -> Config:
        return self._config()

    def index(self, request: Request) -> Response:
        groups = self.catalog.groups(server_base(self.config, request))
        stats = self.catalog.stats(feeds_of(groups))
        version = (tuple(groups), tuple(sorted(stats.items())))
        doc = self.documents.get(
            "index", version, lambda: render_index(groups, stats), media_type="text/html"
        )
        return document_response(request, doc)

    def opml(self, request: Request) -> Response:
        # /feeds.opml lists the RSS documents, /feeds-json.opml the JSON Feed ones
        fmt = "json" if request.url.path.endswith("-json.opml") else "rss"
        groups = tuple(self.catalog.groups(server_base(self.config, request)))
        doc = self.documents.get(
            ("opml", fmt),
            groups,
            lambda: render_opml(groups, fmt=fmt),
            media_type=OPML_MEDIA_TYPE,
        )
        return document_response(request, doc)

    def feed(self, request: Request) -> Response:
        parsed = _split_feed_path(request)
        info = None
        if parsed is not None:
            name, value, fmt = parsed
            info = self.catalog.lookup(name, value, server_base(self.config, request))
        if parsed is None or info is None:
            return self.not_found(request)
        response = document_response(request, self.document(info, fmt))
        if fmt in TOPIC_FORMATS:  # WebSub discovery (the documents say it too)
            response.headers["Link"] = link_header(info, fmt)
        return response

    def document(self, info: FeedInfo, fmt: str) -> Document:
        """``info`` in format ``fmt``, from the render cache; the WebSub hub sends the
        same document to subscribers."""
        # The version is read before the entries: a write in between gives a document
        # newer than its version (one more render later), never an older one.
        updated = self.store.feed_updated(info.stream, info.part)
        media_type = RENDERERS[fmt][1]

        def rendered() -> bytes:
            entries = self.store.latest(info.stream, info.part, info.keep)
            return render_feed(fmt, info, entries, updated)

        return self.documents.get(
            (info, fmt), updated, rendered, media_type=media_type, updated=updated
        )

    def not_found(self, request: Request, exc: Exception | None = None) -> Response:
        """The 404 of every path: where to look, and nothing of the request (the path
        is not echoed: a reflected text is a phishing page's or a sniffer's material)."""
        del exc
        base = server_base(self.config, request)
        lines = [
            "Not found.",
            "",
            f"Every published feed is listed at {base}/ (OPML: {base}/feeds.opml).",
            "A stream is published with `publish:` in feeds.yaml; the feeds of a split",
            "stream appear once its first items are processed.",
        ]
        return PlainTextResponse("\n".join(lines) + "\n", status_code=404)


def create_app(
    config: ConfigSource,
    store: Store,
    health: Callable[[], Mapping[str, Any]],
    *,
    cache: RenderCache | None = None,
    metrics: Callable[[], tuple[bytes, str]] | None = None,
    hub: Hub | None = None,
    pull: PullQueries | None = None,
    sources: Callable[[Mapping[str, str]], Any] | None = None,
    pushes: tuple[PushTaker, PushHandler, int] | None = None,
    console: ConsoleDeps | None = None,
) -> Starlette:
    """The Starlette application serving the published feeds of ``config`` from ``store``
    (``config`` may be a function giving the current config: a daemon's, which a reload
    replaces; new streams are served and removed ones answer 404 from then on).

    ``cache``: where rendered documents are kept (a new one by default); ``metrics``:
    what ``/metrics`` serves (body, content type), e.g. ``Metrics.exposition``;
    ``hub``: the WebSub hub served at ``POST /websub/hub`` (started by the caller);
    ``pull``: the pull queries served at ``GET /streams/NAME?at=TIME``; ``sources``:
    the listing served at ``GET /sources`` (query parameters in, a page out);
    ``pushes``: the WebSub subscriber, what takes pushed documents and their size cap,
    served at ``/websub/callback/TOKEN``; ``console``: what the operator's console at
    ``/console/`` reads and calls (None: no console, ``/console/`` is a 404).
    """
    pages = _Pages(config, store, cache if cache is not None else RenderCache())
    current = config_getter(config)
    routes: list[BaseRoute] = [
        Route("/", pages.index),
        Route("/feeds.opml", pages.opml),
        Route("/feeds-json.opml", pages.opml),
        Route("/feeds/{rest:path}", pages.feed),
        Route("/healthz", healthz_endpoint(health)),
    ]
    if metrics is not None:
        routes.append(Route("/metrics", metrics_endpoint(metrics)))
    if sources is not None:
        routes.append(Route("/sources", sources_endpoint(sources)))
        routes.append(Route("/sources.html", sources_endpoint(sources, html=True)))
    if pushes is not None:
        endpoint = callback_endpoint(*pushes)
        routes.append(Route(CALLBACK_ROUTE, endpoint, methods=["GET", "POST"]))
    if pull is not None:
        routes.append(Route("/streams/{name}", pull.endpoint(lambda r: server_base(current(), r))))
    if console is not None:
        routes.append(console_mount(console))
    if hub is not None:
        hub.bind(pages.document)
        endpoint = hub.endpoint(lambda request: server_base(current(), request))
        routes.append(Route(HUB_PATH, endpoint, methods=["POST"]))
    # No gzip middleware: documents are gzipped once, in the cache; the rest is small.
    app = HeadersApp(routes=routes, exception_handlers={404: pages.not_found})
    app.state.catalog = pages.catalog
    app.state.store = store
    app.state.render_cache = pages.documents
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
        quiet_uvicorn()
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
            log.info("listening on %s", self.url)

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
