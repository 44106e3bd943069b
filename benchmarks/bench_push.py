#!/usr/bin/env python3
"""Benchmark: WebSub latency through `roses run`, push in and push out.

The benchmark is a publisher with a WebSub hub and a subscriber of ROSES's own hub:

1. it serves a feed that names its hub (``<atom:link rel="hub">``); ROSES polls it once,
   subscribes through the hub, and the hub verifies ROSES's callback;
2. it subscribes to ROSES's hub for the published feed ``probes`` (a filter of that
   source), and ROSES verifies the benchmark's callback;
3. it adds --probes items one every --interval seconds, each pushed at once to ROSES's
   callback, signed with the secret ROSES chose, as a hub does.

For each probe it notes: push -> the published feed shows it (read every 0.1 s),
push -> ROSES's hub delivers it to the benchmark's callback, and spool -> delivery
(inside ROSES: the spool entry's ingest time to the delivery). p50 and p99 of each.
The source is polled rarely (fetch.min_every 30m), so what arrives comes by push.

    .venv/bin/python benchmarks/bench_push.py [--probes 60] [--interval 0.5] [--trigger 0.5s]

Network: 127.0.0.1 only. Figures depend on the machine: run twice, quote the second.

Backs: docs/benchmarks.md, section 'Item-to-feed latency' (the rows pushed by a
source's hub: to the published feed, delivered by ROSES's hub; spool -> delivered).
"""

from __future__ import annotations

import argparse
import math
import re
import secrets
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import httpx
from bench_service import Daemon, Watcher, free_port, percentile, spool_times, wait_for_all
from benchlib import Row, bench_parser, fill_defaults, report, work_folder

from roses_app.websub_signature import sign

CONFIG = """\
settings:
  data_dir: {data}
  http: {{host: 127.0.0.1, port: {port}, base_url: "http://127.0.0.1:{port}"}}
  spark: {{master: "{master}", shuffle_partitions: 2{trigger}}}
  fetch: {{min_every: 30m, max_every: 1h}}
  websub: {{allow_private_callbacks: true}}  # the benchmark's callback is on 127.0.0.1
sources:
  live: {{feed: "{feed}"}}
streams:
  probes:
    filter: {{from: live, where: "contains(lower-case(title), 'probe')"}}
    publish: {{title: "Probes", keep: {{count: {keep}}}}}
"""


class Publisher:
    """The feed, its hub, and a subscriber's callback, on one local HTTP server."""

    def __init__(self) -> None:
        self.items: list[tuple[int, str]] = []
        self.roses_subscription: dict[str, str] | None = None  # ROSES's subscribe form
        self.roses_verified = threading.Event()
        self.challenge = ""
        self.our_verified = threading.Event()
        self.delivered: dict[int, float] = {}  # probe -> when ROSES's hub delivered it
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def document(self) -> bytes:
        now = format_datetime(datetime.now(UTC), usegmt=True)
        items = "".join(
            f"<item><title>probe-{k}</title><link>{self.base}/p/{k}</link>"
            f"<guid>{self.base}/p/{k}</guid><pubDate>{at}</pubDate></item>"
            for k, at in reversed(self.items[-20:])
        )
        return (
            '<?xml version="1.0"?><rss version="2.0" '
            'xmlns:atom="http://www.w3.org/2005/Atom"><channel><title>Live</title>'
            f"<link>{self.base}/</link><description>probes</description>"
            f'<atom:link rel="hub" href="{self.base}/hub"/>'
            f'<atom:link rel="self" href="{self.base}/feed.xml"/>'
            f"<lastBuildDate>{now}</lastBuildDate>{items}</channel></rss>"
        ).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def reply(self, status: int, body: bytes = b"", kind: str = "text/plain") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                if path == "/feed.xml":
                    self.reply(200, owner.document(), "application/rss+xml")
                elif path == "/callback":  # ROSES's hub verifies our subscription
                    form = {k: v[-1] for k, v in parse_qs(query).items()}
                    owner.our_verified.set()
                    self.reply(200, form.get("hub.challenge", "").encode())
                else:
                    self.reply(404)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path == "/hub":  # ROSES subscribes to our feed
                    form = {k: v[-1] for k, v in parse_qs(body.decode()).items()}
                    self.reply(202)
                    threading.Thread(target=owner.verify, args=(form,), daemon=True).start()
                elif self.path == "/callback":  # ROSES's hub delivers its feed
                    at = time.time()
                    self.reply(200)
                    with owner.lock:
                        for k in re.findall(rb"probe-(\d+)", body):
                            owner.delivered.setdefault(int(k), at)
                else:
                    self.reply(404)

        return Handler

    def verify(self, form: dict[str, str]) -> None:
        challenge = secrets.token_hex(8)
        query = {"hub.mode": "subscribe", "hub.topic": form["hub.topic"],
                 "hub.challenge": challenge, "hub.lease_seconds": "3600"}  # fmt: skip
        answer = httpx.get(f"{form['hub.callback']}?{urlencode(query)}", timeout=10)
        if answer.status_code == 200 and answer.text == challenge:
            self.roses_subscription = form
            self.roses_verified.set()

    def push(self, k: int, client: httpx.Client) -> float:
        """Add probe ``k`` and push the document to ROSES; when it was pushed."""
        form = self.roses_subscription
        assert form is not None
        self.items.append((k, format_datetime(datetime.now(UTC), usegmt=True)))
        body = self.document()
        headers = {
            "Content-Type": "application/rss+xml",
            "X-Hub-Signature": sign(form["hub.secret"], body),
            "Link": f'<{self.base}/hub>; rel="hub", <{self.base}/feed.xml>; rel="self"',
        }
        at = time.time()
        answer = client.post(form["hub.callback"], content=body, headers=headers)
        if answer.status_code >= 300:
            raise RuntimeError(f"ROSES answered {answer.status_code} to a push")
        return at

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def subscribe_to_roses(daemon: Daemon, publisher: Publisher) -> None:
    form = {"hub.mode": "subscribe", "hub.topic": daemon.url("/feeds/probes.rss"),
            "hub.callback": f"{publisher.base}/callback"}  # fmt: skip
    answer = httpx.post(daemon.url("/websub/hub"), data=form, timeout=10)
    if answer.status_code != 202:
        raise RuntimeError(f"ROSES's hub answered {answer.status_code}: {answer.text[:200]}")
    if not publisher.our_verified.wait(60):
        raise RuntimeError("ROSES's hub never verified the benchmark's subscription")


def run(folder: Path, args: argparse.Namespace) -> dict[str, dict[int, float]]:
    publisher = Publisher()
    port = free_port()
    trigger = f", trigger: {args.trigger}" if args.trigger else ""
    config = folder / "feeds.yaml"
    config.write_text(CONFIG.format(
        data=folder / "data", port=port, master=args.master, trigger=trigger,
        feed=f"{publisher.base}/feed.xml", keep=args.probes + 10,
    ), "utf-8")  # fmt: skip
    daemon = Daemon(config, port)
    watcher = Watcher(daemon.url("/feeds/probes.rss"), period=0.1)
    pushed: dict[int, float] = {}
    try:
        daemon.start()
        wait_for_all({"healthy": daemon.healthy}, daemon, args.start_timeout)
        if not publisher.roses_verified.wait(120):
            raise RuntimeError("ROSES never subscribed through the benchmark's hub")
        subscribe_to_roses(daemon, publisher)
        watcher.start()
        with httpx.Client(timeout=10) as client:
            for k in range(args.probes):
                pushed[k] = publisher.push(k, client)
                time.sleep(args.interval)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            len(watcher.seen_wall) < len(pushed) or len(publisher.delivered) < len(pushed)
        ):
            time.sleep(0.2)
    finally:
        watcher.done.set()
        daemon.stop()
        publisher.close()
    spooled = spool_times(folder / "data" / "spool")
    delivered, seen = publisher.delivered, watcher.seen_wall
    return {
        "push -> published feed": {k: seen[k] - t for k, t in pushed.items() if k in seen},
        "push -> delivered by ROSES's hub": {
            k: delivered[k] - t for k, t in pushed.items() if k in delivered
        },
        "spool -> delivered (inside ROSES)": {
            k: delivered[k] - spooled[k] for k in pushed if k in delivered and k in spooled
        },
    }


def figure_rows(figures: dict[str, dict[int, float]], args: argparse.Namespace) -> list[Row]:
    """A row per path and probes (all, warm): seen, p50, p99, max (seconds)."""
    first_warm = math.ceil(args.warmup / args.interval)
    rows: list[Row] = []
    for label, by_probe in figures.items():
        for which, values in (
            ("all", list(by_probe.values())),
            ("warm", [v for k, v in by_probe.items() if k >= first_warm]),
        ):
            expected = args.probes if which == "all" else args.probes - first_warm
            rows.append({
                "path": label, "probes": which, "seen": len(values), "of": expected,
                "p50 s": percentile(values, 50) if values else None,
                "p99 s": percentile(values, 99) if values else None,
                "max s": max(values) if values else None,
            })  # fmt: skip
    return rows


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = bench_parser(__doc__)
    add = parser.add_argument
    add("--probes", type=int, help="probes (default 60; --quick 8)")
    add("--interval", type=float, help="seconds between probes (default 0.5; --quick 0.3)")
    add("--warmup", type=float, help="seconds not counted as warm (default 5; --quick 1)")
    add("--trigger", default="", help="settings.spark.trigger (default: ROSES's)")
    add("--master", default="local[*]")
    add("--start-timeout", type=float, default=180.0)
    add("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    fill_defaults(args, {"probes": (8, 60), "interval": (0.3, 0.5), "warmup": (1.0, 5.0)})
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    found = []
    with work_folder("roses-bench-push-", args.keep) as work:
        for k in range(args.repeat):
            folder = work / f"run-{k}"
            folder.mkdir()
            found.append(run(folder, args))
    trigger = args.trigger or "the default"
    slow = {k: round(v, 2) for k, v in found[-1]["push -> delivered by ROSES's hub"].items()}
    report(
        args,
        "WebSub latency through `roses run`",
        [figure_rows(figures, args) for figures in found],
        notes=[
            f"{args.probes} probes, one every {args.interval} s, spark.trigger {trigger}; warm: "
            f"the probes after the first {args.warmup} s (the first batches with data pay the "
            f"JVM's compilation and the Python workers' start); Spark master {args.master}.",
            f"push -> delivered, by probe (the last run): {slow}",
        ],
    )
    every = all(len(v) == args.probes for figures in found for v in figures.values())
    return 0 if every else 1


if __name__ == "__main__":
    sys.exit(main())
