#!/usr/bin/env python3
"""Benchmark: WebSub round trip on 127.0.0.1, store write → delivery received.

Starts the ROSES HTTP server with its hub over a fresh data folder (a real Store),
a subscriber (an HTTP server on 127.0.0.1 that echoes the challenge and checks the
HMAC signature of each delivery), subscribes it to an Atom feed with a secret, then
--rounds times writes one new item to the store and times until the subscriber has
the signed feed document.  Prints the median, 90th percentile and maximum.

    .venv/bin/python benchmarks/bench_websub.py [--rounds 200]

Backs: docs/benchmarks.md, 'The commands' (WebSub round trip, p50 and p90); no page
quotes its figures (the latencies through `roses run` are bench_push.py's).
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from benchlib import Row, bench_parser, fill_defaults, repeated, report

from roses_app.algebra.plan.operators import Source
from roses_app.config.model import (
    Config,
    FeedSource,
    HttpSettings,
    Publish,
    Settings,
    StreamConfig,
    WebSubSettings,
)
from roses_app.publish import HttpServer, create_app
from roses_app.publish.websub import HUB_PATH, Hub, signature_ok
from roses_app.store import OutRow, Store

SECRET = "bench secret"


def subscriber(received: list[threading.Event]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            body = query["hub.challenge"][0].encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            ok = signature_ok(SECRET, body, self.headers.get("X-Hub-Signature"))
            self.send_response(204 if ok else 403)
            self.end_headers()
            if ok:
                received[-1].set()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


def run(rounds: int, folder: Path) -> list[float]:
    config = Config(
        path=folder / "feeds.yaml",
        settings=Settings(
            data_dir=folder,
            http=HttpSettings("127.0.0.1", 0),
            # the benchmark's subscriber is on 127.0.0.1
            websub=WebSubSettings(allow_private_callbacks=True),
        ),
        sources={"src": FeedSource("src", "file:x.xml", 60.0)},
        streams={"news": StreamConfig("news", Source("src"), Publish("News"))},
    )
    store = Store(folder / "store.sqlite")
    hub = Hub(config, store, folder / "websub.sqlite")
    server = HttpServer(create_app(config, store, lambda: {"ok": True}, hub=hub), port=0)
    server.start()
    hub.start(server.url)
    received = [threading.Event()]
    sub = subscriber(received)
    callback = f"http://127.0.0.1:{sub.server_address[1]}/cb"
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{server.url}/feeds/news.atom",
        "hub.callback": callback,
        "hub.secret": SECRET,
    }
    assert httpx.post(server.url + HUB_PATH, data=form).status_code == 202
    assert hub.drain(30) and hub.table.all(), "the subscription was not verified"
    times = []
    for n in range(rounds):
        received.append(threading.Event())
        item = f"<item><title>Story {n}</title><guid>urn:x:{n}</guid></item>"
        started = time.perf_counter()
        store.write_batch("bench", n, [OutRow("news", "", 1_700_000_000_000_000 + n, 0, item)])
        if not received[-1].wait(30):
            raise SystemExit(f"round {n}: no delivery within 30 s")
        times.append(time.perf_counter() - started)
    hub.stop()
    server.stop()
    sub.shutdown()
    store.close()
    return times


def measure(rounds: int) -> list[Row]:
    with tempfile.TemporaryDirectory() as folder:
        ms = sorted(t * 1000 for t in run(rounds, Path(folder)))
    p90 = ms[int(0.9 * (len(ms) - 1))]
    return [{"rounds": len(ms), "p50 ms": statistics.median(ms), "p90 ms": p90, "max ms": ms[-1]}]


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--rounds", type=int, help="round trips (default 200; --quick 20)")
    args = parser.parse_args()
    fill_defaults(args, {"rounds": (20, 200)})
    report(
        args,
        "WebSub round trip on 127.0.0.1: store write -> signed delivery received",
        repeated(args, lambda: measure(args.rounds)),
    )


if __name__ == "__main__":
    main()
