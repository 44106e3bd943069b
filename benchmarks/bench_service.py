#!/usr/bin/env python3
"""Benchmark: `roses run` as a service: cold start, idle CPU and item latency.

1. Cold start: `roses run -c CONFIG` on a fresh data dir, timed from the start of the
   process to /healthz answering 200 and to the first published feed served with at
   least one item (/feeds/NAME.rss), for the shipped feeds.yaml (copied with
   examples/ and xquery/ to a temporary folder, on a free port and a fresh data_dir)
   and for a generated config of --subs subscriptions (default 1,000; the items and
   subscriptions of benchmarks/bench_scale.py, 5 file: feeds of 200 items).
2. Idle CPU: once serving and settled (every query waits for data or its next trigger,
   /healthz `queries`), --settle seconds later, the CPU time the daemon's whole
   process tree (Python, the JVM, Spark's Python workers) uses over --idle seconds
   (default 60), in % of one core; and its resident memory then.
3. Latency: a local feed server (http.server on 127.0.0.1) serves a feed file to which
   --latency-items items (default 100) are added one every --interval seconds; the
   source is polled `every: --every` (default 2s) with `spark.trigger: --trigger`
   (default: the product's, 500ms); the published feed is read every 0.2 s.  Latency:
   from the moment an item is in the served file to its first sight in the published
   feed; p50 and p99.

The daemon is stopped with SIGINT each time and waited for.  Network: 127.0.0.1 only.
Figures depend on the machine; run it twice and quote the second run.

    .venv/bin/python benchmarks/bench_service.py [--quick] [--subs 1000] [--idle 60]
        [--latency-items 100] [--skip-shipped] [--skip-generated] [--skip-latency]

Backs: docs/benchmarks.md, section 'Item-to-feed latency' (spool -> published feed,
warm and all, p50/p99; idle CPU of the shipped feeds.yaml and of 1,000 subscriptions).
"""

from __future__ import annotations

import argparse
import http.server
import json
import math
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import bench_scale as scale  # the generators and `roses`
import benchlib
import proctree
from benchlib import (
    Row,
    Section,
    add_master_and_seed,
    bench_parser,
    fill_defaults,
    fmt,
    work_folder,
)

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Straight to 127.0.0.1, whatever proxy the environment names.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """(status, body); status 0 when nothing answers."""
    try:
        with OPENER.open(url, timeout=timeout) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (OSError, urllib.error.URLError):
        return 0, b""


def item_count(body: bytes) -> int:
    return body.count(b"<item>") + body.count(b"<item ")


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


# -- the daemon -------------------------------------------------------------------------


class Daemon:
    """`roses run -c CONFIG` as a subprocess in a session of its own."""

    def __init__(self, config: Path, port: int) -> None:
        self.config, self.port = config, port
        self.log = config.parent / "roses.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.started = time.monotonic()
            self.proc = subprocess.Popen(
                scale.roses_command("run", "-c", str(self.config)),
                cwd=self.config.parent,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"roses run exited with {self.proc.returncode}:\n{tail}")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def healthy(self) -> bool:
        return http_get(self.url("/healthz"))[0] == 200

    def health(self) -> dict[str, Any]:
        status, body = http_get(self.url("/healthz"))
        return json.loads(body) if status in (200, 503) and body else {}

    def stop(self, timeout: float = 120.0) -> tuple[float, int | None]:
        """SIGINT, then wait: (seconds to exit, exit code; None if it had to be killed)."""
        if self.proc is None:
            return 0.0, None
        started = time.monotonic()
        code: int | None
        try:
            self.proc.send_signal(signal.SIGINT)
            code = self.proc.wait(timeout=timeout)
            proctree.stop_tree(self.proc, grace=5.0)  # anything it left behind
        except subprocess.TimeoutExpired:
            code = None
            proctree.stop_tree(self.proc)
        self.proc = None
        return time.monotonic() - started, code


def wait_for_all(
    checks: dict[str, Callable[[], bool]], daemon: Daemon, timeout: float
) -> dict[str, float]:
    """Poll the checks every 0.25 s until each has held once: for each, the seconds
    from the daemon's start to the first time it held."""
    deadline = time.monotonic() + timeout
    times: dict[str, float] = {}
    while len(times) < len(checks):
        daemon.check_alive()
        if time.monotonic() > deadline:
            missing = ", ".join(sorted(checks.keys() - times.keys()))
            raise TimeoutError(f"still waiting for {missing} after {timeout:.0f}s ({daemon.log})")
        for name, check in checks.items():
            if name not in times and check():
                times[name] = time.monotonic() - daemon.started
        time.sleep(0.25)
    return times


# -- 1 and 2: cold start and idle CPU -----------------------------------------------------


@dataclass
class ServiceRun:
    label: str
    healthy_s: float | None = None
    first_feed_s: float | None = None
    first_feed: str = ""
    idle_cpu: float | None = None  # % of one core
    idle_rss: int | None = None
    settled_s: float | None = None  # every query waiting for its next trigger
    idle_writes: str = ""  # batches and rows written during the idle window
    stop_s: float | None = None
    exit_code: int | None = None
    note: str = ""


class FirstFeed:
    """A check that holds once one of the candidate feeds serves an item (then: found)."""

    def __init__(self, daemon: Daemon, candidates: Sequence[str]) -> None:
        self.daemon, self.candidates, self.found = daemon, candidates, ""

    def __call__(self) -> bool:
        for name in self.candidates:
            status, body = http_get(self.daemon.url(f"/feeds/{name}.rss"))
            if status == 200 and item_count(body) > 0:
                self.found = name
                return True
        return False


def busy_queries(daemon: Daemon) -> list[str]:
    """The queries that are not waiting for data or their next trigger (all if no answer).

    /healthz lists them under `queries` (or, in older versions, under `streams`), each
    with the message of Spark's query status."""
    health = daemon.health()
    queries = health.get("queries") or health.get("streams") or {"?": {}}
    return [
        name
        for name, query in queries.items()
        if not str(query.get("status") or "").startswith("Waiting")
    ]


def settle(daemon: Daemon, run: ServiceRun, args: argparse.Namespace) -> None:
    """Wait until every query has waited twice in a row (checked each second)."""
    deadline, calm = time.monotonic() + args.settle_timeout, 0
    while calm < 2 and time.monotonic() < deadline:
        daemon.check_alive()
        calm = 0 if busy_queries(daemon) else calm + 1
        time.sleep(1.0)
    if calm < 2:
        busy = busy_queries(daemon)
        more = f" and {len(busy) - 3} more" if len(busy) > 3 else ""
        run.note = f"still busy after {args.settle_timeout:.0f}s: {', '.join(busy[:3])}{more}"
    else:
        run.settled_s = time.monotonic() - daemon.started
    time.sleep(args.settle)


def measure_idle(daemon: Daemon, run: ServiceRun, args: argparse.Namespace) -> None:
    settle(daemon, run, args)
    before = daemon.health()
    t0 = time.monotonic()
    cpu = proctree.tree_cpu_over(daemon.pid, args.idle)
    t1 = time.monotonic()
    daemon.check_alive()
    run.idle_cpu = 100.0 * cpu / (t1 - t0)
    run.idle_rss = sum(proctree.rss_bytes(pid) for pid in proctree.tree_pids(daemon.pid))
    after = daemon.health()
    counts = [after.get(k, 0) - before.get(k, 0) for k in ("batches_written", "rows_written")]
    run.idle_writes = "{} / {}".format(*counts) if before and after else "-"


def cold_start(
    label: str, config: Path, port: int, candidates: Sequence[str], args: Any
) -> ServiceRun:
    """Start on a fresh data dir, time health and the first feed, measure idle, stop."""
    run = ServiceRun(label)
    daemon = Daemon(config, port)
    print(f"== {label}: roses run -c {config}", file=sys.stderr)
    try:
        daemon.start()
        check = FirstFeed(daemon, candidates)
        times = wait_for_all({"healthy": daemon.healthy, "feed": check}, daemon, args.start_timeout)
        run.healthy_s, run.first_feed = times["healthy"], check.found
        run.first_feed_s = times["feed"]
        print(f"  serving after {run.first_feed_s:.1f}s; settling", file=sys.stderr)
        measure_idle(daemon, run, args)
    except (RuntimeError, TimeoutError) as exc:
        print(f"  {exc}", file=sys.stderr)
        run.note = str(exc).splitlines()[0][:200]
    finally:
        run.stop_s, run.exit_code = daemon.stop()
    return run


def shipped_config(folder: Path, port: int) -> tuple[Path, list[str]]:
    """The shipped feeds.yaml with what it refers to, on a free port and a fresh data dir.

    The text is kept as it is (a YAML round trip would turn the key `on:` into `true:`)
    but for the port and data_dir; roses' own loader then checks the result."""
    from roses_app.algebra.plan.operators import Split
    from roses_app.config import load_config

    folder.mkdir(parents=True)
    for name in ("examples", "xquery"):
        shutil.copytree(REPO / name, folder / name)
    text = (REPO / "feeds.yaml").read_text(encoding="utf-8")
    text, found = re.subn(r"(?m)^(  http:\s*\{[^}\n]*port:\s*)\d+", rf"\g<1>{port}", text)
    if not found:
        text = re.sub(r"(?m)^settings:[ \t]*$", f"settings:\n  http: {{port: {port}}}", text)
    text = re.sub(r"(?m)^(  data_dir:).*$", rf"\g<1> {folder / 'data'}", text)
    config = folder / "feeds.yaml"
    config.write_text(text, encoding="utf-8")
    loaded = load_config(config)
    http = loaded.settings.http
    if (http.host, http.port, loaded.settings.data_dir) != ("127.0.0.1", port, folder / "data"):
        raise RuntimeError(f"could not set the port and data_dir of {config}: edit the script")
    published = [
        name
        for name, stream in loaded.streams.items()
        if stream.publish is not None and not isinstance(stream.plan, Split)
    ]
    return config, published


def generated_config(folder: Path, port: int, args: argparse.Namespace) -> tuple[Path, list[str]]:
    """bench_scale's subscriptions over 5 file: feeds; candidates: 5 that match an item."""
    from lxml import etree

    items = scale.generate_items(args.per_feed * len(scale.SOURCES), args.seed)
    feeds = scale.write_feeds(items, folder / "feeds")
    subs = scale.generate_subscriptions(args.subs, args.seed)
    settings = scale.spark_settings(folder / "data", args.master, trigger=args.service_trigger)
    settings += f"http: {{host: 127.0.0.1, port: {port}}}\n"
    config = folder / "feeds.yaml"
    subscriptions = None
    if args.subs >= args.jsonl_from:  # kept as data beside feeds.yaml, as bench_scale does
        subscriptions = scale.SUBSCRIPTIONS_FILE
        (folder / subscriptions).write_bytes(scale.subscriptions_jsonl(subs))
    config.write_text(scale.config_text(subs, feeds, settings, subscriptions), "utf-8")
    parsed = [(item.source, etree.fromstring(item.xml.encode())) for item in items]
    candidates: list[str] = []
    for sub in subs:
        test = etree.XPath(f"boolean({sub.xpath10})")
        if any(source in sub.sources and test(element) for source, element in parsed):
            candidates.append(sub.name)
            if len(candidates) == 5:
                break
    return config, candidates


# -- 3: latency from a local feed to the published feed ---------------------------------


class FeedFile:
    """A feed file on disk, newest item first, to which probe items are added."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: list[str] = []
        self._write()

    def _write(self) -> None:
        body = "\n".join(reversed(self.items))
        document = (
            '<?xml version="1.0" encoding="utf-8"?>\n<rss version="2.0"><channel>'
            "<title>Live</title><link>http://127.0.0.1/</link><description>Probes"
            f"</description>\n{body}\n</channel></rss>\n"
        )
        partial = self.path.with_suffix(".part")
        partial.write_text(document, encoding="utf-8")
        partial.replace(self.path)

    def add(self, k: int) -> float:
        """Add probe k; the time from which it is served."""
        now = format_datetime(datetime.now(UTC), usegmt=True)
        self.items.append(
            f"<item><title>Latency probe-{k}</title><link>http://127.0.0.1/probe/{k}</link>"
            f'<guid isPermaLink="false">probe-{k}</guid><description>Probe number {k}.'
            f"</description><pubDate>{now}</pubDate></item>"
        )
        self._write()
        return time.monotonic()


def feed_server(path: Path) -> http.server.ThreadingHTTPServer:
    """Serves the file at /live.xml with an ETag (If-None-Match gets 304)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/live.xml":
                self.send_error(404)
                return
            data = path.read_bytes()
            etag = f'"{zlib.crc32(data):08x}-{len(data)}"'
            if self.headers.get("If-None-Match") == etag:
                self.send_response(304)
                self.send_header("ETag", etag)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/rss+xml")
            self.send_header("ETag", etag)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Watcher(threading.Thread):
    """Reads the published feed every ``period`` s and notes when each probe first shows."""

    def __init__(self, url: str, period: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.period = period
        self.seen: dict[int, float] = {}
        self.seen_wall: dict[int, float] = {}  # the same moments, as UNIX time (the spool's)
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            status, body = http_get(self.url)
            now, wall = time.monotonic(), time.time()
            if status == 200:
                for k in re.findall(rb"probe-(\d+)", body):
                    self.seen.setdefault(int(k), now)
                    self.seen_wall.setdefault(int(k), wall)
            self.done.wait(self.period)


LATENCY_CONFIG = """\
settings:
  data_dir: {data}
  http: {{host: 127.0.0.1, port: {port}}}
  spark: {{master: "{master}", shuffle_partitions: 2{trigger}}}
sources:
  live: {{feed: "{feed}", every: {every}}}
streams:
  probes:
    filter: {{from: live, where: "contains(lower-case(title), 'latency')"}}
    publish: {{title: "Live", keep: {{count: {keep}}}}}
"""


WARMUP_SECONDS = 5.0  # probes sent in the first seconds are reported apart


@dataclass
class Latency:
    sent: int = 0
    latencies: list[float] = field(default_factory=list)
    inside: list[float] = field(default_factory=list)  # from the spool to the feed
    inside_warm: list[float] = field(default_factory=list)  # after the first WARMUP_SECONDS
    ready_s: float | None = None
    stop_s: float | None = None
    exit_code: int | None = None
    note: str = ""


def send_probes(feed: FeedFile, watcher: Watcher, args: argparse.Namespace) -> dict[int, float]:
    """Add the probes one by one, then wait for the published feed to show them all."""
    added: dict[int, float] = {}
    for k in range(args.latency_items):
        added[k] = feed.add(k)
        time.sleep(args.interval)
    deadline = time.monotonic() + args.drain
    while len(watcher.seen.keys() & added.keys()) < len(added) and time.monotonic() < deadline:
        time.sleep(0.2)
    return added


def measure_latency(folder: Path, args: argparse.Namespace) -> Latency:
    folder.mkdir(parents=True)
    result = Latency()
    feed = FeedFile(folder / "live.xml")
    server = feed_server(feed.path)
    port = free_port()
    config = folder / "feeds.yaml"
    config.write_text(
        LATENCY_CONFIG.format(
            data=folder / "data",
            port=port,
            master=args.master,
            trigger=f", trigger: {args.trigger}" if args.trigger else "",
            feed=f"http://127.0.0.1:{server.server_port}/live.xml",
            every=args.every,
            keep=args.latency_items + 10,
        ),
        "utf-8",
    )
    daemon = Daemon(config, port)
    watcher = Watcher(daemon.url("/feeds/probes.rss"))
    print(f"== latency: {args.latency_items} probes, every {args.every}", file=sys.stderr)
    try:
        daemon.start()
        ready = wait_for_all({"healthy": daemon.healthy}, daemon, args.start_timeout)
        result.ready_s = ready["healthy"]
        watcher.start()
        added = send_probes(feed, watcher, args)
        result.sent = len(added)
        seen = dict(watcher.seen)
        result.latencies = [seen[k] - at for k, at in added.items() if k in seen]
        if len(result.latencies) < result.sent:
            result.note = f"{result.sent - len(result.latencies)} probe(s) never showed"
    except (RuntimeError, TimeoutError) as exc:
        print(f"  {exc}", file=sys.stderr)
        result.note = str(exc).splitlines()[0][:200]
    finally:
        watcher.done.set()
        result.stop_s, result.exit_code = daemon.stop()
        server.shutdown()
        server.server_close()
    spooled = spool_times(folder / "data" / "spool")
    inside = {k: at - spooled[k] for k, at in sorted(watcher.seen_wall.items()) if k in spooled}
    result.inside = list(inside.values())
    # the first batches with data pay the JVM's compilation and the Python workers' start
    first_warm = math.ceil(WARMUP_SECONDS / args.interval)
    result.inside_warm = [v for k, v in inside.items() if k >= first_warm]
    return result


def spool_times(root: Path) -> dict[int, float]:
    """Probe number -> when it entered the spool (its ingest time, UNIX seconds)."""
    from roses_app.spool import Spool

    spool = Spool(root)
    try:
        return {
            int(found.group(1)): event.ts / 1e6
            for event in spool.events()
            if event.item and (found := re.search(r"probe-(\d+)", event.item))
        }
    finally:
        spool.close()


# -- report and command line ------------------------------------------------------------


def run_rows(runs: Sequence[ServiceRun]) -> list[Row]:
    return [
        {
            "config": r.label,
            "/healthz 200 s": r.healthy_s,
            "first feed served s": r.first_feed_s,
            "feed": r.first_feed,
            "settled s": r.settled_s,
            "idle CPU % of one core": r.idle_cpu,
            "idle RSS MB": round(r.idle_rss / 2**20) if r.idle_rss else None,
            "batches / rows written while idle": r.idle_writes,
            "SIGINT to exit s": r.stop_s,
            "exit code": r.exit_code,
            "note": r.note,
        }
        for r in runs
    ]


def latency_rows(latency: Latency) -> list[Row]:
    """A row per path measured: probes seen, p50, p99, max (seconds)."""
    rows: list[Row] = []
    for path, values in (
        ("local feed -> published feed", latency.latencies),
        ("spool -> published feed (read every 0.2 s)", latency.inside),
        (f"the same, warm (after the first {WARMUP_SECONDS:.0f} s)", latency.inside_warm),
    ):
        if values:
            rows.append({"path": path, "probes": latency.sent, "seen": len(values),
                         "p50 s": percentile(values, 50), "p99 s": percentile(values, 99),
                         "mean s": sum(values) / len(values), "max s": max(values)})  # fmt: skip
    return rows


def measure(work: Path, args: argparse.Namespace) -> tuple[list[Row], list[Row], list[str]]:
    """One run of every part not skipped, in `work`: (the cold starts' rows, the
    latency's rows, notes)."""
    runs: list[ServiceRun] = []
    latency = None
    if not args.skip_shipped:
        port = free_port()
        config, candidates = shipped_config(work / "shipped", port)
        runs.append(cold_start("shipped feeds.yaml", config, port, candidates, args))
    if not args.skip_generated:
        port = free_port()
        (work / "generated").mkdir(parents=True)
        config, candidates = generated_config(work / "generated", port, args)
        label = f"generated, {args.subs:,} subscriptions"
        runs.append(cold_start(label, config, port, candidates, args))
    notes = []
    latency_table: list[Row] = []
    if not args.skip_latency:
        latency = measure_latency(work / "latency", args)
        latency_table = latency_rows(latency)
        stop, code = fmt(latency.stop_s, ".1f"), fmt(latency.exit_code, "d")
        notes.append(
            f"Latency run: daemon healthy after {fmt(latency.ready_s, '.1f')}s; SIGINT to "
            f"exit {stop}s, exit code {code}." + (f"  {latency.note}" if latency.note else "")
        )
    return run_rows(runs), latency_table, notes


def report(args: argparse.Namespace, found: list[tuple[list[Row], list[Row], list[str]]]) -> None:
    """The cold starts' table and the latency's (each repeat's rows), notes, legend."""
    latency_title = (
        f"Latency (every: {args.every}, trigger: {args.trigger or 'the default'}, one probe "
        f"every {args.interval}s)"
    )
    tables: list[Section] = [
        (title, runs)
        for title, runs in (
            ("ROSES as a service (`roses run`): cold start, idle CPU", [f[0] for f in found]),
            (latency_title, [f[1] for f in found]),
        )
        if runs[0]
    ]
    if not tables:
        raise SystemExit("nothing was measured: every part was skipped or saw no probe")
    notes = [f"Spark master {args.master}.", *(n for f in found for n in f[2]), LEGEND]
    (title, first), *rest = tables
    benchlib.report(args, title, first, notes, rest)


LEGEND = """
What the figures mean:
- /healthz 200 s, first feed served s: from starting `roses run` on an empty data dir
  to /healthz answering 200 (every stream's query runs), and to the first of the
  candidate feeds (published streams; for the generated config, 5 subscriptions that
  match some item) answering 200 with at least one <item>.
- settled s: from the start to the moment every query (/healthz `queries`) waits for
  data or its next trigger, twice in a row a second apart: the first items are processed.
- idle CPU %: the CPU time of the daemon's process tree (Python, the JVM, Spark's Python
  workers) over the idle window that starts --settle s later / its length; 100 = one
  core busy.  Idle = no new item; the micro-batch triggers, heartbeats and the sources'
  polling still run.  batches / rows written while idle: /healthz counters, to tell
  whether something was still being processed.
- latency: from the moment the probe is in the served feed file to the moment the
  published feed first shows it (read every 0.2 s): the source's polling interval
  (`every:` plus up to 10% jitter), the trigger, the micro-batch and the store."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(__doc__, quick="a small smoke run (idle 10 s, 10 probes, 20 subs)")
    add = parser.add_argument
    add("--subs", type=int, help="subscriptions of the generated config (default 1,000)")
    add("--per-feed", type=int, help="items per generated feed file (default 200)")
    add("--idle", type=float, help="seconds of idle CPU measurement (default 60)")
    add("--settle", type=float, help="seconds between settling and the idle window (5)")
    add("--settle-timeout", type=float, help="seconds allowed to settle (300)")
    add("--latency-items", type=int, help="probes for the latency (default 100)")
    add("--interval", type=float, default=0.5, help="seconds between two probes (0.5)")
    add("--every", default="2s", help="the live source's polling interval (2s)")
    add(
        "--trigger",
        default="",
        help="settings.spark.trigger for the latency run (default: the product's default)",
    )
    add(
        "--service-trigger",
        default="",
        help="settings.spark.trigger for the generated "
        "config's run (default: the product's default)",
    )
    add("--drain", type=float, default=120.0, help="seconds to wait for the last probes")
    add("--start-timeout", type=float, default=900.0, help="seconds allowed to start")
    add_master_and_seed(parser)
    add("--skip-shipped", action="store_true", help="no cold start of the shipped feeds.yaml")
    add("--skip-generated", action="store_true", help="no cold start of the generated config")
    add(
        "--jsonl-from",
        type=int,
        default=100_000,
        help="from this --subs on, the subscriptions are in a subscriptions file (100,000)",
    )
    add("--skip-latency", action="store_true", help="no latency measurement")
    add("--keep", action="store_true", help="keep the working folder (configs, data, logs)")
    args = parser.parse_args(argv)
    defaults = {
        "subs": (20, 1000),
        "per_feed": (20, 200),
        "idle": (10.0, 60.0),
        "settle": (2.0, 5.0),
        "settle_timeout": (60.0, 300.0),
        "latency_items": (10, 100),
    }
    fill_defaults(args, defaults)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    proctree.exit_on_sigterm()
    found = []
    with work_folder("roses-service-", args.keep) as work:
        print(f"working in {work}", file=sys.stderr)
        for k in range(args.repeat):
            found.append(measure(work / f"run-{k}", args))
    report(args, found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
