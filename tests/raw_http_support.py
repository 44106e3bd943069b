"""A raw HTTP server on 127.0.0.1 for hostile-server tests.

Unlike ``test_connector_support.FeedServer`` (http.server, well-behaved), this one
sends each answer byte for byte as given: a broken status line, a body that does
not match its headers, or an answer dribbled one byte at a time that never ends
(``dribble``), the way a hostile or broken server does.  It records each request's
path and when each connection opened and closed (``time.monotonic()``), so a test
can tell what a client did while a dribbling answer was still going on.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest

DRIBBLE_LIMIT = 120.0  # seconds: a forgotten dribbling connection ends on its own


@dataclass(frozen=True)
class RawReply:
    data: bytes  # status line, headers, blank line, body: sent exactly so
    dribble: float | None = None  # seconds between single bytes; then "a" forever


@dataclass
class Connection:
    path: str
    opened: float
    closed: float | None = None  # still open


class RawServer:
    def __init__(self) -> None:
        self.routes: dict[str, RawReply] = {}
        self._lock = threading.Lock()
        self._connections: list[Connection] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._stopped = threading.Event()
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def connections(self, path: str | None = None) -> list[Connection]:
        with self._lock:
            return [replace(c) for c in self._connections if path is None or c.path == path]

    def closed(self, path: str, timeout: float = 5.0) -> list[Connection]:
        """The connections to ``path`` once all are closed (the client hung up on each);
        fails if one is still open after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while any(c.closed is None for c in self.connections(path)):
            if time.monotonic() > deadline:
                raise AssertionError(f"a connection to {path} is still open")
            time.sleep(0.01)
        return self.connections(path)

    def hits(self, path: str) -> int:
        return len(self.connections(path))

    def close(self) -> None:
        self._stopped.set()
        self._sock.close()

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            path = _read_request_path(conn)
            if path is None:
                return
            record = Connection(path, time.monotonic())
            with self._lock:
                self._connections.append(record)
                reply = self.routes.get(path, RawReply(_NOT_FOUND))
            try:
                if reply.dribble is None:
                    conn.sendall(reply.data)
                    conn.shutdown(socket.SHUT_WR)
                    _wait_for_close(conn, 10.0)
                else:
                    _dribble(conn, reply.data, reply.dribble)
            except OSError:
                pass  # the client hung up: that is what these tests provoke
            finally:
                with self._lock:
                    record.closed = time.monotonic()


_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found"


def _read_request_path(conn: socket.socket) -> str | None:
    conn.settimeout(10.0)
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = conn.recv(4096)
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    conn.settimeout(None)
    parts = data.split(b"\r\n", 1)[0].split()
    return parts[1].decode("latin-1").split("?", 1)[0] if len(parts) >= 2 else None


def _client_gone(conn: socket.socket, timeout: float) -> bool:
    """Wait up to ``timeout``; True as soon as the client closed or reset."""
    readable, _, _ = select.select([conn], [], [], timeout)
    if not readable:
        return False
    try:
        return conn.recv(1024) == b""
    except OSError:
        return True


def _wait_for_close(conn: socket.socket, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not _client_gone(conn, deadline - time.monotonic()):
        pass


def _dribble(conn: socket.socket, data: bytes, every: float) -> None:
    started = time.monotonic()
    position = 0
    while time.monotonic() - started < DRIBBLE_LIMIT:
        byte = data[position : position + 1] or b"a"
        position += 1
        conn.sendall(byte)
        if _client_gone(conn, every):
            return


@pytest.fixture
def raw_server() -> Iterator[RawServer]:
    server = RawServer()
    try:
        yield server
    finally:
        with contextlib.suppress(OSError):
            server.close()
