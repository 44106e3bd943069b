"""Test support for the feed connector: a scriptable HTTP server on 127.0.0.1.

Each test sets ``server.routes[path]`` to a :class:`Reply` or to a function of the
:class:`Request` returning one; every request is recorded in ``server.requests``.
(No tests here; the module is named for the connector test files' pattern.)
"""

from __future__ import annotations

import contextlib
import gzip
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class Request:
    path: str
    headers: dict[str, str]  # lower-case names


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before the status line
    trickle: float | None = None  # seconds between 1-byte writes of the body
    gzip: bool = False  # gzip the body and say so
    content_length: bool = True  # False: no Content-Length, close the connection


Route = Reply | Callable[[Request], Reply]


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a real server's backlog: the fetcher connects many at once

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients hang up on purpose here (timeouts, size caps)


class FeedServer:
    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # as real servers do: no 40 ms stall on keep-alive

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                request = Request(self.path, {k.lower(): v for k, v in self.headers.items()})
                with server._lock:
                    server.requests.append(request)
                    route = server.routes.get(self.path.split("?", 1)[0])
                reply = Reply(404, b"not found") if route is None else route
                if callable(reply):
                    reply = reply(request)
                with contextlib.suppress(ConnectionError):
                    self._send(reply)

            def _send(self, reply: Reply) -> None:
                if reply.delay:
                    time.sleep(reply.delay)
                body = reply.body
                headers = dict(reply.headers)
                if reply.gzip:
                    body = gzip.compress(body)
                    headers["Content-Encoding"] = "gzip"
                self.send_response(reply.status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if reply.content_length:
                    self.send_header("Content-Length", str(len(body)))
                else:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                if reply.trickle is not None:
                    for i in range(len(body)):
                        self.wfile.write(body[i : i + 1])
                        self.wfile.flush()
                        time.sleep(reply.trickle)
                else:
                    self.wfile.write(body)

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def hits(self, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path.split("?", 1)[0] == path]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def feed_server() -> Iterator[FeedServer]:
    server = FeedServer()
    try:
        yield server
    finally:
        server.close()


def conditional(
    body: bytes,
    *,
    etag: str | None = None,
    last_modified: str | None = None,
    content_type: str = "application/rss+xml; charset=utf-8",
) -> Callable[[Request], Reply]:
    """A route answering 304 when the request's validators match."""

    def route(request: Request) -> Reply:
        headers = {"Content-Type": content_type}
        if etag:
            headers["ETag"] = etag
        if last_modified:
            headers["Last-Modified"] = last_modified
        if (etag and request.headers.get("if-none-match") == etag) or (
            last_modified and request.headers.get("if-modified-since") == last_modified
        ):
            return Reply(304, b"", {k: v for k, v in headers.items() if k != "Content-Type"})
        return Reply(200, body, headers)

    return route


OLD_DATE = "Tue, 10 Jun 2003 04:00:00 GMT"


def rss(*items: tuple[str, str], title: str = "Test feed", date: str | None = OLD_DATE) -> bytes:
    """A small RSS 2.0 document; each item is (guid, title), dated ``date`` (None: no
    pubDate; the default, in 2003, makes the feed look quiet to adaptive refresh)."""
    parts = [
        '<?xml version="1.0" encoding="utf-8"?>',
        '<rss version="2.0"><channel>',
        f"<title>{title}</title><link>http://example.org/</link>",
    ]
    for guid, item_title in items:
        parts.append(
            f'<item><title>{item_title}</title><guid isPermaLink="false">{guid}</guid>'
            f"<link>http://example.org/{guid}</link>"
            + (f"<pubDate>{date}</pubDate>" if date else "")
            + "</item>"
        )
    parts.append("</channel></rss>")
    return "".join(parts).encode("utf-8")


def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait for ``predicate`` to hold (checked every 20 ms); fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


class FakeClock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
