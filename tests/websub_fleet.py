"""A fleet of WebSub subscribers on one asyncio HTTP server (127.0.0.1): callback
``/cb/N`` for each of N subscribers answers the hub's verification (echoes
``hub.challenge``) and records every delivery it gets: when each subscriber first saw
each change (an item titled ``change-K`` in the delivered feed document).  Also
subscribes them all to a topic through a hub, over a few kept-alive connections,
retrying after the ``Retry-After`` of a 503 as a subscriber should.

Used by tests/test_websub_fleet.py and benchmarks/bench_hub.py (10,000 subscribers of one
feed through `roses run`).  One thread runs the loop; a plain HTTP/1.1 parser keeps the
fleet's own cost low (it shares the machine with the daemon it measures)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode, urlsplit

T = TypeVar("T")
CHANGE = re.compile(rb"change-(\d+)")


class FleetError(AssertionError):
    """The hub answered a subscription request with something else than 202 or 503."""


@dataclass
class Record:
    """What the fleet's callbacks got (only the loop's thread writes it)."""

    verified: dict[int, float] = field(default_factory=dict)  # subscriber -> time.time()
    # change -> subscriber -> when it first got a document with that change
    seen: dict[int, dict[int, float]] = field(default_factory=dict)
    deliveries: Counter[int] = field(default_factory=Counter)  # subscriber -> POSTs
    bad: Counter[str] = field(default_factory=Counter)  # requests it could not place


class Fleet:
    """``n`` subscribers' callbacks on one server; ``start()``, ``close()``."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.record = Record()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self.port = 0

    def start(self) -> Fleet:
        self._thread.start()
        self._server = self.run(asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=4096))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def run(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``work`` on the fleet's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout)

    def callback(self, i: int) -> str:
        return f"http://127.0.0.1:{self.port}/cb/{i}"

    def got(self, change: int) -> int:
        """How many subscribers have got ``change`` so far."""
        return len(self.record.seen.get(change, {}))

    def close(self) -> None:
        server = self._server
        if server is not None:
            server.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    # -- the callbacks ---------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, _, rest = head.partition(b"\r\n")
                method, target, _ = line.split(b" ", 2)
                length = 0
                for header in rest.split(b"\r\n"):
                    if header[:15].lower() == b"content-length:":
                        length = int(header[15:])
                body = await reader.readexactly(length) if length else b""
                status, payload = self._answer(method, target.decode("latin-1"), body)
                writer.write(
                    b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s"
                    % (status, len(payload), payload)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the hub closed its connection (between requests, as it may)
        finally:
            writer.close()

    def _answer(self, method: bytes, target: str, body: bytes) -> tuple[int, bytes]:
        path, _, query = target.partition("?")
        number = path.removeprefix("/cb/")
        if not number.isdigit() or int(number) >= self.n:
            self.record.bad[f"{method.decode()} {path}"] += 1
            return 404, b""
        i = int(number)
        if method == b"GET":
            form = {k: v[-1] for k, v in parse_qs(query).items()}
            if form.get("hub.mode") == "subscribe":
                self.record.verified.setdefault(i, time.time())
            return 200, form.get("hub.challenge", "").encode()
        at = time.time()
        self.record.deliveries[i] += 1
        for k in {int(m) for m in CHANGE.findall(body)}:
            self.record.seen.setdefault(k, {}).setdefault(i, at)
        return 204, b""

    # -- subscribing -----------------------------------------------------------------

    def subscribe_all(self, hub: str, topic: str, connections: int = 8) -> Counter[int]:
        """Subscribe every callback to ``topic`` at ``hub`` (a URL); the statuses the
        hub answered, in all (503s retried after their Retry-After)."""
        return self.run(self._subscribe_all(hub, topic, connections))

    async def _subscribe_all(self, hub: str, topic: str, connections: int) -> Counter[int]:
        todo: asyncio.Queue[int] = asyncio.Queue()
        for i in range(self.n):
            todo.put_nowait(i)
        statuses: Counter[int] = Counter()
        workers = [self._subscriber(hub, topic, todo, statuses) for _ in range(connections)]
        await asyncio.gather(*workers)
        return statuses

    async def _subscriber(
        self, hub: str, topic: str, todo: asyncio.Queue[int], statuses: Counter[int]
    ) -> None:
        parts = urlsplit(hub)
        connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while not todo.empty():
                i = todo.get_nowait()
                form = {"hub.mode": "subscribe", "hub.topic": topic,
                        "hub.callback": self.callback(i)}  # fmt: skip
                if connection is None:
                    connection = await asyncio.open_connection(parts.hostname, parts.port)
                try:
                    status, retry = await _post_form(*connection, parts, urlencode(form))
                except (asyncio.IncompleteReadError, ConnectionError):
                    # the server ended a kept-alive connection idle past its timeout
                    # (while this one waited out a Retry-After): again on a new one
                    connection[1].close()
                    connection = None
                    todo.put_nowait(i)
                    continue
                statuses[status] += 1
                if status == 503:
                    await asyncio.sleep(retry)  # the hub's queue is full: again later
                    todo.put_nowait(i)
                elif status != 202:
                    raise FleetError(f"the hub answered {status} to subscriber {i}")
        finally:
            if connection is not None:
                connection[1].close()


async def _post_form(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hub: Any, form: str
) -> tuple[int, float]:
    """POST ``form`` to ``hub`` (urlsplit parts); (status, Retry-After seconds or 1)."""
    body = form.encode()
    writer.write(
        f"POST {hub.path} HTTP/1.1\r\nHost: {hub.netloc}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    status = int(head.split(" ", 2)[1])
    headers = {
        k.strip().lower(): v.strip()
        for k, _, v in (h.partition(":") for h in head.split("\r\n")[1:] if h)
    }
    await reader.readexactly(int(headers.get("content-length", "0")))
    retry = headers.get("retry-after", "1")
    return status, float(retry) if retry.isdigit() else 1.0
