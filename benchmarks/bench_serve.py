#!/usr/bin/env python3
"""Benchmark: the HTTP server under a burst of readers of one big feed.

A store is filled with --items generated items (the words of benchmarks/bench_scale.py,
each with a few paragraphs of content:encoded) published with keep = --items, an RSS
document of about 5 MB.  The server (create_app + HttpServer, as `roses run` has it)
runs in a child process; this process opens --clients connections at once (raw
asyncio sockets: the client must not be the bottleneck), each sending one
`GET /feeds/big.rss` with `Accept-Encoding: gzip` as feed readers do, and waits up to
--timeout seconds for each answer.  While they are in flight, /healthz is asked once.

Two modes, in the same run, each on a fresh server:

* `cached`: the server as shipped: one render per store change, served from the render
  cache (with its gzipped body);
* `per-request`: the same server with a cache that keeps nothing, so every request
  renders (and gzips) the feed again, as before the cache existed.

Printed per mode: answered / timed out / failed requests, requests/s (answered over the
burst's wall time), p50 and p99 latency of the answered ones, the /healthz latency, and
the document's size.  Network: 127.0.0.1 only.  Figures depend on the machine and on
what else runs on it.

    .venv/bin/python benchmarks/bench_serve.py [--clients 1000] [--items 2000]
        [--timeout 60] [--modes cached,per-request] [--keep-folder DIR]

Backs: docs/benchmarks.md, 'The commands' (1,000 readers of a 5 MB feed: req/s,
p50/p99, /healthz; render cache vs a render per request); no page quotes its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench_scale as scale
from benchlib import Row, bench_parser, fill_defaults, repeated, report, work_folder

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from roses_app.algebra.plan.operators import Source  # noqa: E402
from roses_app.config.model import (  # noqa: E402
    Config,
    FeedSource,
    HttpSettings,
    Publish,
    Settings,
    StreamConfig,
)
from roses_app.publish import HttpServer, create_app  # noqa: E402
from roses_app.publish.cache import Document, RenderCache, make_document  # noqa: E402
from roses_app.publish.catalog import Catalog  # noqa: E402
from roses_app.publish.render import render_rss  # noqa: E402
from roses_app.store import OutRow, Store  # noqa: E402

CONTENT_NS = "http://purl.org/rss/1.0/modules/content/"
FEED_PATH = "/feeds/big.rss"


class RenderEveryTime(RenderCache):
    """The baseline: every request renders (and gzips) the document again."""

    def get(
        self,
        key: Hashable,
        version: Hashable,
        render: Any,
        *,
        media_type: str,
        updated: float | None = None,
    ) -> Document:
        self.renders += 1
        return make_document(render(), media_type, updated)


def make_config(folder: Path, keep: int) -> Config:
    stream = StreamConfig("big", Source("src"), Publish("Big feed", "", keep_count=keep))
    return Config(
        path=folder / "feeds.yaml",
        settings=Settings(data_dir=folder, http=HttpSettings("127.0.0.1", 0)),
        sources={"src": FeedSource("src", "file:x.xml", 60.0)},
        streams={"big": stream},
    )


def fill_store(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    items = scale.generate_items(n, seed)
    paragraphs = [item.xml.split("<description>")[1].split("</description>")[0] for item in items]
    rows = []
    for item in items:
        body = "".join(f"&lt;p&gt;{p}&lt;/p&gt;" for p in rng.sample(paragraphs, 12))
        xml = item.xml.replace(
            "</item>",
            f'<content:encoded xmlns:content="{CONTENT_NS}">{body}</content:encoded></item>',
        )
        rows.append(OutRow("big", "", item.index * 1_000_000, item.index, xml))
    with Store(path) as store:
        store.write_batch("bench", 0, rows)


def serve(folder: Path, keep: int, mode: str) -> None:
    """The child process: serve until stdin closes; print the port once listening."""
    cache = RenderCache() if mode == "cached" else RenderEveryTime()
    store = Store(folder / "store.sqlite")
    app = create_app(make_config(folder, keep), store, lambda: {"ok": True}, cache=cache)
    with HttpServer(app, "127.0.0.1", 0) as server:
        print(json.dumps({"port": server.port}), flush=True)
        sys.stdin.read()  # the parent closes it (or kills us)
        print(json.dumps({"renders": cache.renders}), flush=True)


# -- the client ---------------------------------------------------------------------


@dataclass
class Answer:
    status: int  # 0: timed out, -1: failed
    seconds: float
    size: int


class _Reader(asyncio.Protocol):
    """One request, its answer counted and dropped as it comes (not kept): the client
    must cost as little as possible."""

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.head = b""
        self.size = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if len(self.head) < 64:
            self.head += data[:64]
        self.size += len(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def get(port: int, path: str, timeout: float) -> Answer:
    start = time.perf_counter()
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Accept-Encoding: gzip\r\nConnection: close\r\n\r\n"
    ).encode()
    loop = asyncio.get_running_loop()
    transport: asyncio.BaseTransport | None = None
    try:
        async with asyncio.timeout(timeout):
            transport, reader = await loop.create_connection(
                lambda: _Reader(request), "127.0.0.1", port
            )
            await reader.done  # the server closes the connection after the answer
    except TimeoutError:
        return Answer(0, time.perf_counter() - start, 0)
    except OSError:
        return Answer(-1, time.perf_counter() - start, 0)
    finally:
        if transport is not None:
            transport.close()
    status = int(reader.head.split(b" ", 2)[1]) if reader.head.startswith(b"HTTP/") else -1
    return Answer(status, time.perf_counter() - start, reader.size)


async def burst(port: int, clients: int, timeout: float) -> tuple[list[Answer], float, Answer]:
    start = time.perf_counter()
    readers = [asyncio.ensure_future(get(port, FEED_PATH, timeout)) for _ in range(clients)]
    await asyncio.sleep(0.5)  # the readers are connected and waiting
    health = await get(port, "/healthz", timeout)
    answers = await asyncio.gather(*readers)
    return answers, time.perf_counter() - start, health


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def run_mode(folder: Path, args: argparse.Namespace, mode: str) -> dict[str, Any]:
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            mode,
            "--folder",
            str(folder),
            "--items",
            str(args.items),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        port = json.loads(child.stdout.readline())["port"]
        answers, wall, health = asyncio.run(burst(port, args.clients, args.timeout))
        child.stdin.close()
        renders = json.loads(child.stdout.readline() or "{}").get("renders")
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)  # the baseline may still be rendering
        child.wait()
    ok = [a.seconds for a in answers if a.status == 200]
    sizes = {a.size for a in answers if a.status == 200}  # headers included
    return {
        "mode": mode,
        "answered": len(ok),
        "timed_out": sum(a.status == 0 for a in answers),
        "failed": sum(a.status not in (0, 200) for a in answers),
        "per_second": len(ok) / wall,
        "p50": percentile(ok, 50),
        "p99": percentile(ok, 99),
        "healthz": health.seconds if health.status == 200 else None,
        "answer_bytes": max(sizes, default=0),
        "renders": renders,
    }


def document_size(folder: Path, keep: int) -> int:
    """The size of the RSS document (one render, timed)."""
    with Store(folder / "store.sqlite") as store:
        info = Catalog(make_config(folder, keep), store).lookup("big")
        assert info is not None
        start = time.perf_counter()
        body = render_rss(info, store.latest("big", "", keep))
        print(f"one render: {time.perf_counter() - start:.2f} s", file=sys.stderr)
        return len(body)


def mode_row(r: dict[str, Any]) -> Row:
    return {
        "mode": r["mode"], "answered": r["answered"], "timed out": r["timed_out"],
        "failed": r["failed"], "req/s": r["per_second"], "p50 s": r["p50"], "p99 s": r["p99"],
        "/healthz s": r["healthz"], "renders": r["renders"], "answer MB": r["answer_bytes"] / 1e6,
    }  # fmt: skip


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--clients", type=int, help="readers at once (default 1,000; --quick 50)")
    parser.add_argument("--items", type=int, help="items of the feed (default 2,000; --quick 100)")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--modes", default="cached,per-request")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--keep-folder", default=None, help="work here and keep the files")
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--folder", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    fill_defaults(args, {"clients": (50, 1000), "items": (100, 2000)})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.clients + 64)), hard))
    if args.serve:
        serve(Path(args.folder), args.items, args.serve)
        return
    with work_folder("roses-bench-serve-", args.keep_folder is not None, args.keep_folder) as work:
        fill_store(work / "store.sqlite", args.items, args.seed)
        size = document_size(work, args.items)
        modes = args.modes.split(",")
        runs = repeated(args, lambda: [mode_row(run_mode(work, args, mode)) for mode in modes])
    report(
        args,
        f"{args.clients:,} readers of one feed at once ({args.items:,} items, "
        f"{size / 1e6:.1f} MB of RSS): render cache vs a render per request",
        runs,
    )


if __name__ == "__main__":
    main()
