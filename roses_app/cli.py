"""The ``roses`` command: run, once, check, explain, replay."""

from __future__ import annotations

import argparse
import errno
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from roses_app.config import format_problems, load_config
from roses_app.config.model import Config
from roses_app.errors import ConfigError, RosesError

log = logging.getLogger("roses")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("py4j", "httpx", "httpcore", "apscheduler", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _load(path: str) -> Config:
    return load_config(Path(path))


def cmd_check(args: argparse.Namespace) -> int:
    config = _load(args.config)
    print(f"{args.config}: OK ({len(config.sources)} sources, {len(config.streams)} streams)")
    return EXIT_OK


def _print_logical(config: Config, names: Sequence[str]) -> None:
    """Each stream's plan as written, then as rewritten; sub-plans shared by several
    streams (computed once) are marked in both."""
    from roses_app.algebra.explain import Sharing, format_plan
    from roses_app.algebra.rewrite import rewrite_streams, summary

    written = [stream.stream for stream in config.streams.values()]
    applied: dict[str, list[str]] = {}
    rewritten = {
        s.name: s for s in rewrite_streams(written, config.settings.namespaces, applied=applied)
    }
    before = Sharing.of({s.name: s.plan for s in written})
    after = Sharing.of({name: s.plan for name, s in rewritten.items()})
    for name in names:
        text = format_plan(config.streams[name].plan, sharing=before)
        new = format_plan(rewritten[name].plan, sharing=after)
        print(f"== stream {name}: logical plan")
        print(text)
        if new == text:
            print(f"== stream {name}: rewritten plan: unchanged (no rule applies)")
            continue
        print(f"== stream {name}: rewritten plan (rules: {summary(applied[name])})")
        print(new)


def cmd_explain(args: argparse.Namespace) -> int:
    config = _load(args.config)
    names = args.streams or list(config.streams)
    unknown = [n for n in names if n not in config.streams]
    if unknown:
        print(
            f"unknown stream(s): {', '.join(unknown)} (known: {', '.join(config.streams)})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    _print_logical(config, names)
    if args.logical_only:
        return EXIT_OK
    from roses_app.algebra.explain import format_global
    from roses_app.spark.runner import Engine, query_frames
    from roses_app.spark.session import build_session
    from roses_app.store import Store

    settings = config.settings
    spark = build_session(settings.spark, settings.data_dir / "cache")
    log_dir = settings.data_dir / "spool" / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    with Store(settings.data_dir / "store.sqlite") as store:
        engine = Engine(spark, settings.namespaces, log_dir, settings.data_dir, store)
        layout, frames = query_frames(engine, [s.stream for s in config.streams.values()])
    print("== the global plan (every stream; equal sub-plans are one node)")
    print(format_global(layout.plan, layout.queries()))
    for qid, frame in frames:
        print(f"== Spark query {qid}: its plan")
        frame.explain(extended=True)
    return EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    from roses_app.replay import replay

    config = _load(args.config)
    started = time.perf_counter()
    written = replay(config, Path(args.events), Path(args.out), args.engine)
    elapsed = time.perf_counter() - started
    print(
        f"replayed with {args.engine}: {len(written)} output file(s) in {args.out} ({elapsed:.1f}s)"
    )
    return EXIT_OK


def cmd_once(args: argparse.Namespace) -> int:
    from roses_app.daemon import Daemon

    config = _load(args.config)
    daemon = Daemon(config)
    try:
        summary = daemon.once(Path(args.export) if args.export else None)
    finally:
        daemon.close()
    print(" ".join(f"{k}={v}" for k, v in summary.items()))
    failing = summary["failed_sources"] + summary["sources_in_backoff"]
    return EXIT_FAILED if failing and args.strict else EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from roses_app.daemon import Daemon

    config = _load(args.config)
    stop = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        log.info("received %s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        Daemon(config).run(stop)
    except KeyboardInterrupt:
        # Starting Spark replaces our SIGINT handler with pyspark's, which raises this;
        # Daemon.run has shut everything down (its finally) before it reaches here.
        log.info("interrupted: stopped")
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise
        print(f"roses: {exc.strerror}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="roses", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("-c", "--config", default="feeds.yaml", help="the feeds.yaml to use")
        return p

    command("run", "run the daemon: poll sources, run the queries, serve the feeds").set_defaults(
        func=cmd_run
    )
    once = command("once", "poll every source once, process everything, write the feeds, exit")
    once.add_argument("--export", help="folder for the static feed files (default DATA_DIR/public)")
    once.add_argument(
        "--strict", action="store_true", help="exit 1 when a source failed or is backing off"
    )
    once.set_defaults(func=cmd_once)
    command("check", "check feeds.yaml and report every mistake").set_defaults(func=cmd_check)
    explain = command("explain", "print the logical plan of streams, rewritten, and Spark's plan")
    explain.add_argument("streams", nargs="*", help="stream names (default: all)")
    explain.add_argument("--logical-only", action="store_true", help="do not start Spark")
    explain.set_defaults(func=cmd_explain)
    rep = command("replay", "evaluate the streams on a finite event list")
    rep.add_argument("--events", required=True, help="JSON Lines: {source, ts, item} per line")
    rep.add_argument("--out", required=True, help="output folder: STREAM.jsonl, STREAM/VALUE.jsonl")
    rep.add_argument("--engine", choices=("spark", "reference"), default="spark")
    rep.set_defaults(func=cmd_replay)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(format_problems(exc.problems), file=sys.stderr)
        print(
            f"{len(exc.problems)} problem(s) in {args.config}; nothing was started.",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except RosesError as exc:
        print(f"roses: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
