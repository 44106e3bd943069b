#!/usr/bin/env python3
"""A local feed farm: N synthetic RSS 2.0 feeds served on 127.0.0.1, for polling benchmarks.

The feeds are spread over H "hosts", H listening ports (default max(1, N // 500)), each
a plain asyncio HTTP/1.1 server with keep-alive; feed i is `http://127.0.0.1:PORT/f/i.xml`.

* Publication: feed i publishes items in real time, a Poisson process of rate λ_i from
  the farm's start.  The rates are heavy-tailed: lognormal with σ = 2.83, scaled so the
  mean is 0.25 items per feed-hour (times --rate-mult), so that about 17% of the feeds
  carry about 97% of the items (`FeedFarm.describe()` gives the actual shares).  The gaps
  come from a hash of (seed, feed, item number): the same seed gives the same items at
  the same offsets from the start.  Each item has a guid `f<i>-<k>`, a title, a link, a
  pubDate (its real publication time) and a short description.
* History: as a real feed has, each feed starts with the last 20 items it published
  before the farm's start (the same Poisson process run backwards from the start; guids
  `f<i>-h<j>`), so that a first poll finds a dated backlog.  `--no-history` starts every
  feed empty.  `FeedFarm.published` leaves the history out: it was never new.
* Documents: the last 20 items, newest first, rendered once per change; `ETag` and
  `Last-Modified`, and `304 Not Modified` for a matching `If-None-Match` or
  `If-Modified-Since`.  A feed with no item yet is a valid empty channel.
* Each answer waits a latency drawn from a lognormal clipped to 30-400 ms.
* About 2% of the feeds are broken: half answer 500, half never answer (the connection
  is held open until the client closes it or the farm stops).
* Records: for each feed every item it published (guid, publication time) and the times
  of the requests it received, with the counts of 200, 304 and 500 answers.

In a benchmark: `farm = FeedFarm(FarmConfig(feeds=1000)); farm.start()`, the URLs from
`farm.url(i)`, then `farm.stop()` and `farm.published(until)` (the farm runs in a thread
of its own with its own event loop).  Standalone, for trying a client by hand:

    .venv/bin/python benchmarks/feedfarm.py --feeds 1000 --port-base 18100 [--hosts H]
        [--rate-mult 10] [--seed 42] [--host-skew 0] [--duration SECONDS] [--no-history]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import math
import random
import resource
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.utils import formatdate, parsedate_to_datetime
from typing import Any

ITEMS_PER_DOCUMENT = 20
MEAN_RATE_PER_HOUR = 0.25
SIGMA = 2.83
BROKEN_FRACTION = 0.02
FEEDS_PER_HOST = 500
IDLE_SECONDS = 300.0  # a keep-alive connection idle that long is closed
WORDS = (
    "river",
    "harbour",
    "market",
    "signal",
    "garden",
    "comet",
    "ledger",
    "orbit",
    "meadow",
    "lantern",
    "forest",
    "quarry",
    "bridge",
    "violet",
    "summit",
    "canyon",
    "beacon",
)


@dataclass
class FarmConfig:
    feeds: int
    hosts: int | None = None  # None: max(1, feeds // 500)
    rate_mult: float = 1.0
    seed: int = 42
    host_skew: float = 0.0  # feeds per host ∝ 1/rank^skew; 0: uniform
    port_base: int = 0  # 0: free ports chosen by the system
    latency_ms: tuple[float, float] = (30.0, 400.0)
    broken_fraction: float = BROKEN_FRACTION
    history: bool = True  # each feed starts with the 20 items it published before


@dataclass(slots=True)
class Feed:
    """One feed: its publication process, its cached document and its request log."""

    index: int
    host: int
    rate: float  # items per second
    broken: str  # "", "error" (answers 500) or "hang" (never answers)
    next_at: float  # time of its next publication
    items: list[tuple[str, float]] = field(default_factory=list)  # (guid, published)
    history: int = 0  # how many of `items` (the first ones) predate the farm's start
    requests: list[float] = field(default_factory=list)  # arrival times
    ok: int = 0
    not_modified: int = 0
    failed: int = 0
    document: bytes = b""
    rendered: int = -1  # the item count `document` shows
    etag: str = ""
    modified: str = ""  # Last-Modified
    modified_at: int = 0  # the same, in whole seconds


@dataclass
class Request:
    method: str
    target: str
    version: str
    headers: dict[str, str]


def unit_hash(*parts: int) -> float:
    """A uniform number in (0, 1) fixed by the parts."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2.0**64


def heavy_tailed_rates(n: int, seed: int, rate_mult: float) -> list[float]:
    """Items per hour: lognormal (σ = SIGMA), scaled so that their mean is exactly
    MEAN_RATE_PER_HOUR x rate_mult."""
    rng = random.Random(seed)
    raw = [rng.lognormvariate(0.0, SIGMA) for _ in range(n)]
    scale = MEAN_RATE_PER_HOUR * rate_mult * n / sum(raw) if n else 0.0
    return [r * scale for r in raw]


def host_of_each(n: int, hosts: int, skew: float, seed: int) -> list[int]:
    """The host of each feed: round-robin, or by weights 1/rank^skew."""
    if skew <= 0:
        return [i % hosts for i in range(n)]
    weights = [1.0 / (h + 1) ** skew for h in range(hosts)]
    return random.Random(seed + 1).choices(range(hosts), weights, k=n)


def broken_feeds(n: int, fraction: float, seed: int) -> dict[int, str]:
    """round(n x fraction) feeds, half answering 500, half never answering."""
    chosen = random.Random(seed + 2).sample(range(n), round(n * fraction))
    return {i: ("error" if k % 2 == 0 else "hang") for k, i in enumerate(chosen)}


def top_share(rates: Sequence[float], fraction: float) -> float:
    """The share of the items the top `fraction` of the feeds carry (by rate)."""
    ordered = sorted(rates, reverse=True)
    total = sum(ordered)
    return sum(ordered[: max(1, round(len(ordered) * fraction))]) / total if total else 0.0


def http_date(t: float) -> str:
    return formatdate(t, usegmt=True)


def render_item(feed: Feed, k: int, guid: str, published: float, base: str) -> str:
    a, b = WORDS[(feed.index + k) % len(WORDS)], WORDS[(feed.index * 7 + k * 3) % len(WORDS)]
    return (
        f"<item><title>Feed {feed.index} item {k}: {a} {b}</title>"
        f"<link>{base}/i/{feed.index}/{k}</link>"
        f'<guid isPermaLink="false">{guid}</guid><pubDate>{http_date(published)}</pubDate>'
        f"<description>Item {k} of synthetic feed {feed.index}, about the {a} and the "
        f"{b}.</description></item>"
    )


def render_document(feed: Feed, base: str, epoch: float) -> None:
    """Render the feed's last items into its cached document, ETag and Last-Modified."""
    count = len(feed.items)
    start = max(0, count - ITEMS_PER_DOCUMENT)
    items = [
        render_item(feed, k, *feed.items[k], base=base) for k in range(count - 1, start - 1, -1)
    ]
    feed.document = (
        '<?xml version="1.0" encoding="utf-8"?>\n<rss version="2.0"><channel>'
        f"<title>Synthetic feed {feed.index}</title><link>{base}/</link>"
        f"<description>Feed {feed.index} of the local feed farm</description>\n"
        + "\n".join(items)
        + "\n</channel></rss>\n"
    ).encode()
    newest = feed.items[-1][1] if count else epoch
    feed.rendered, feed.etag = count, f'"f{feed.index}-{count}"'
    feed.modified, feed.modified_at = http_date(newest), int(newest)


def not_modified(feed: Feed, headers: dict[str, str]) -> bool:
    """Whether the request's validators match the feed's current document."""
    tags = headers.get("if-none-match")
    if tags is not None:
        values = {t.strip().removeprefix("W/") for t in tags.split(",")}
        return "*" in values or feed.etag in values
    since = headers.get("if-modified-since")
    if since is None:
        return False
    try:
        return feed.modified_at <= parsedate_to_datetime(since).timestamp()
    except (TypeError, ValueError, IndexError):
        return False


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request of the connection (its body read and dropped); None at its end."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or 0)
    if length:
        await reader.readexactly(length)
    return Request(method, target, version, headers)


def keeps_alive(request: Request) -> bool:
    connection = request.headers.get("connection", "").lower()
    if request.version == "HTTP/1.0":
        return "keep-alive" in connection
    return "close" not in connection


def response(status: str, headers: Sequence[tuple[str, str]], body: bytes, keep: bool) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers)]
    lines.append(f"Content-Length: {len(body)}")
    lines.append("Connection: " + ("keep-alive" if keep else "close"))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class FeedFarm:
    """N feeds over H ports of 127.0.0.1, served from a thread with its own event loop."""

    def __init__(self, config: FarmConfig) -> None:
        self.config = config
        n = config.feeds
        self.host_count = config.hosts or max(1, n // FEEDS_PER_HOST)
        self.rates_per_hour = heavy_tailed_rates(n, config.seed, config.rate_mult)
        hosts = host_of_each(n, self.host_count, config.host_skew, config.seed)
        broken = broken_feeds(n, config.broken_fraction, config.seed)
        self.epoch = 0.0
        self.feeds = [
            Feed(i, hosts[i], rate / 3600.0, broken.get(i, ""), math.inf)
            for i, rate in enumerate(self.rates_per_hour)
        ]
        self.ports: list[int] = []
        self._rng = random.Random(config.seed + 3)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._final_cpu = 0.0  # the thread's CPU time when it stopped
        self.running = False

    # -- publication ------------------------------------------------------------------

    def _gap(self, feed: Feed, k: int) -> float:
        """Seconds from item k-1 (or the start) to item k of the feed."""
        if feed.rate <= 0:
            return math.inf
        return -math.log(unit_hash(self.config.seed, feed.index, k)) / feed.rate

    def _add_history(self, feed: Feed) -> None:
        """The feed's last ITEMS_PER_DOCUMENT items before the start (a Poisson process
        looks the same run backwards), oldest first."""
        at, past = self.epoch, []
        for j in range(ITEMS_PER_DOCUMENT):
            at += math.log(unit_hash(self.config.seed, feed.index, -1 - j)) / feed.rate
            past.append((f"f{feed.index}-h{j}", at))
        feed.items[:0] = reversed(past)
        feed.history = len(past)

    def advance(self, feed: Feed, now: float) -> None:
        """Publish the feed's items due by `now`."""
        while feed.next_at <= now:
            k = len(feed.items) - feed.history
            feed.items.append((f"f{feed.index}-{k}", feed.next_at))
            feed.next_at += self._gap(feed, k + 1)

    def published(self, until: float) -> list[tuple[int, str, float]]:
        """(feed, guid, publication time) of every item published by `until`; call it
        once the farm has stopped."""
        if self.running:
            raise RuntimeError("FeedFarm.published: stop the farm first")
        found: list[tuple[int, str, float]] = []
        for feed in self.feeds:
            self.advance(feed, until)
            found.extend((feed.index, g, t) for g, t in feed.items[feed.history :] if t <= until)
        return found

    # -- the servers ------------------------------------------------------------------

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[self.feeds[i].host]}/f/{i}.xml"

    def start(self) -> None:
        """Open the ports and start publishing; returns once every port listens.  Raises
        this process's limit of open files to its hard limit (one per connection)."""
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        with contextlib.suppress(ValueError, OSError):  # an unlimited hard limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        self._thread = threading.Thread(target=self._run, name="feedfarm", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise RuntimeError(f"the feed farm could not start: {self._error}")

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._open())
        except OSError as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    async def _open(self) -> None:
        for h in range(self.host_count):
            port = self.config.port_base + h if self.config.port_base else 0
            server = await asyncio.start_server(
                functools.partial(self._connection, h), "127.0.0.1", port, backlog=1024
            )
            self._servers.append(server)
            self.ports.append(server.sockets[0].getsockname()[1])
        self.epoch = time.time()
        for feed in self.feeds:
            feed.next_at = self.epoch + self._gap(feed, 0)
            if self.config.history and feed.rate > 0:
                self._add_history(feed)
        self.running = True

    def cpu_seconds(self) -> float:
        """CPU time of the farm's thread so far."""
        if self._thread is None or self._thread.ident is None or not self._thread.is_alive():
            return self._final_cpu
        return time.clock_gettime(time.pthread_getcpuclockid(self._thread.ident))

    def stop(self) -> None:
        """Close every port and connection (hanging ones too) and end the thread."""
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            self.running = False
            return
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    async def _close(self) -> None:
        self._final_cpu = time.thread_time()
        self.running = False
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()

    # -- one connection ---------------------------------------------------------------

    async def _connection(
        self, host: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                async with asyncio.timeout(IDLE_SECONDS):
                    request = await read_request(reader)
                if request is None or not await self._answer(host, request, reader, writer):
                    break
        except (OSError, ValueError, TimeoutError, asyncio.LimitOverrunError):
            pass  # a client gone, a malformed request, an idle connection
        except asyncio.CancelledError:
            pass  # the farm stops (ended quietly: 3.11's streams log a cancelled handler)
        finally:
            self._tasks.discard(task)
            writer.close()

    def _route(self, host: int, target: str) -> Feed | None:
        path = target.split("?", 1)[0]
        if not (path.startswith("/f/") and path.endswith(".xml")):
            return None
        number = path[3:-4]
        if not number.isdigit() or int(number) >= len(self.feeds):
            return None
        feed = self.feeds[int(number)]
        return feed if feed.host == host else None

    def _latency(self) -> float:
        low, high = self.config.latency_ms
        median = math.sqrt(low * high) * 0.8
        return min(high, max(low, self._rng.lognormvariate(math.log(median), 0.6))) / 1000.0

    async def _answer(
        self,
        host: int,
        request: Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        """Answer one request; whether the connection stays open."""
        keep = keeps_alive(request)
        feed = self._route(host, request.target)
        if feed is None or request.method not in ("GET", "HEAD"):
            status = "404 Not Found" if feed is None else "405 Method Not Allowed"
            writer.write(response(status, [("Content-Type", "text/plain")], b"no\n", keep))
            await writer.drain()
            return keep
        feed.requests.append(time.time())
        await asyncio.sleep(self._latency())
        if feed.broken == "hang":
            while await reader.read(65536):
                pass  # until the client gives up
            return False
        writer.write(self._feed_response(feed, request, keep))
        await writer.drain()
        return keep

    def _feed_response(self, feed: Feed, request: Request, keep: bool) -> bytes:
        if feed.broken == "error":
            feed.failed += 1
            return response("500 Internal Server Error", [], b"broken\n", keep)
        self.advance(feed, time.time())
        if feed.rendered != len(feed.items):
            render_document(feed, f"http://127.0.0.1:{self.ports[feed.host]}", self.epoch)
        validators = [("ETag", feed.etag), ("Last-Modified", feed.modified)]
        if not_modified(feed, request.headers):
            feed.not_modified += 1
            return response("304 Not Modified", validators, b"", keep)
        feed.ok += 1
        body = b"" if request.method == "HEAD" else feed.document
        headers = [("Content-Type", "application/rss+xml; charset=utf-8"), *validators]
        return response("200 OK", headers, body, keep)

    # -- reports ----------------------------------------------------------------------

    def describe(self) -> str:
        rates = self.rates_per_hour
        broken = [f.broken for f in self.feeds if f.broken]
        mean = sum(rates) / len(rates) if rates else 0.0
        return (
            f"feed farm: {len(rates):,} feeds on {self.host_count} port(s), mean "
            f"{mean:.3f} items per feed-hour, the top 17% of the feeds carry "
            f"{100 * top_share(rates, 0.17):.1f}% of the items (top 1%: "
            f"{100 * top_share(rates, 0.01):.1f}%), busiest feed {max(rates, default=0):.1f}/h; "
            f"broken: {broken.count('error')} answer 500, {broken.count('hang')} never answer"
        )

    def request_summary(self) -> str:
        requests = sum(len(f.requests) for f in self.feeds)
        ok, unchanged = sum(f.ok for f in self.feeds), sum(f.not_modified for f in self.feeds)
        failed = sum(f.failed for f in self.feeds)
        items = sum(len(f.items) for f in self.feeds)
        return (
            f"{requests:,} requests: {ok:,} x 200, {unchanged:,} x 304, {failed:,} x 500, "
            f"the rest unanswered; {items:,} items published so far (in the feeds asked)"
        )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--feeds", type=int, default=1000, help="number of feeds (default 1,000)")
    add("--hosts", type=int, help="number of ports (default max(1, feeds // 500))")
    add("--port-base", type=int, default=18100, help="first port (default 18100; 0: any)")
    add("--rate-mult", type=float, default=1.0, help="publication rates x this (default 1)")
    add("--seed", type=int, default=42)
    add("--host-skew", type=float, default=0.0, help="feeds per host ∝ 1/rank^S (0: uniform)")
    add("--duration", type=float, default=0.0, help="seconds to run (default: until Ctrl-C)")
    add("--no-history", dest="history", action="store_false", help="start every feed empty")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    config = FarmConfig(
        args.feeds,
        args.hosts,
        args.rate_mult,
        args.seed,
        args.host_skew,
        args.port_base,
        history=args.history,
    )
    farm = FeedFarm(config)
    try:
        farm.start()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(farm.describe())
    where = "port of index i % H" if args.host_skew <= 0 else "ports by weight"
    print(f"ports {farm.ports[0]}..{farm.ports[-1]} (feed i: the {where}); e.g. {farm.url(0)}")
    print("Ctrl-C stops it" if not args.duration else f"stops in {args.duration:g}s", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        time.sleep(args.duration or 1e9)
    farm.stop()
    print(farm.request_summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
