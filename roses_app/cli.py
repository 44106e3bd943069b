"""The ``roses`` command: run, once, check, explain, replay, query, import, fetch,
console-password."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from roses_app.config import format_problems, load_config
from roses_app.config.model import Config
from roses_app.errors import ConfigError, RosesError
from roses_app.heap import no_collection_at_exit

log = logging.getLogger("roses")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # the shell's code for a command ended by Ctrl-C
DESCRIPTION = (
    "ROSES, a continuous query engine for RSS/Atom feeds and mail: describe sources and "
    "streams in feeds.yaml, and ROSES publishes each stream as a feed."
)


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # (uvicorn's loggers are set up by roses_app.publish.httplog)
    for noisy in ("py4j", "httpx", "httpcore", "apscheduler"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _load(path: str) -> Config:
    from roses_app.xmlfn import budget

    config = load_config(Path(path))
    # expressions evaluated here (roses query, replay's reference engine) have the limit
    # Spark's workers get
    budget.configure(config.settings.limits.item_seconds)
    return config


def cmd_check(args: argparse.Namespace) -> int:
    from roses_app.config.explosive import explosive

    config = _load(args.config)
    # warnings (on stderr, as `roses import` says what it skipped): the config is valid,
    # and the run-time budget stops these expressions; the exit status stays 0
    warnings = explosive(config)
    for warning in warnings:
        print(warning, file=sys.stderr)
    counts = [f"{len(config.sources)} sources", f"{len(config.streams)} streams"]
    if warnings:
        counts.append(f"{len(warnings)} warning{'s' * (len(warnings) != 1)}")
    print(f"{args.config}: OK ({', '.join(counts)})")
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    from roses_app.config.loader import feed_url
    from roses_app.config.opml import import_opml, sources_block

    imported = import_opml(Path(args.opml), feed_url, shown=args.opml)
    for line, why in imported.skipped:
        print(f"{args.opml}:{line}: {why}; skipped", file=sys.stderr)
    print(sources_block(imported), end="")
    return EXIT_OK


def cmd_fetch(args: argparse.Namespace) -> int:
    from roses_app.config.model import FetchSettings
    from roses_app.connectors.preview import format_preview, preview

    settings, base_dir = FetchSettings(), None
    if args.config is not None:  # its fetch settings, and file: paths relative to it
        config = _load(args.config)
        settings, base_dir = config.settings.fetch, config.path.parent
    print(format_preview(preview(args.url, settings, base_dir=base_dir)), end="")
    return EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    from roses_app.cli_explain import explain

    return explain(_load(args.config), args.streams, every=args.all, spark=not args.logical_only)


def cmd_console_password(args: argparse.Namespace) -> int:
    """Print the scrypt hash of a password for ``settings.console.password_hash``."""
    import getpass

    from roses_app.config.console import hash_password

    if args.stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("console password: ")
        if getpass.getpass("again: ") != password:
            print("roses: the two passwords differ; nothing printed", file=sys.stderr)
            return EXIT_FAILED
    if len(password) < 8:
        print("roses: a console password needs at least 8 characters", file=sys.stderr)
        return EXIT_FAILED
    print(hash_password(password))
    if args.config is not None:
        _end_console_sessions(_load(args.config).settings.data_dir)
    return EXIT_OK


def _end_console_sessions(data_dir: Path) -> None:
    """Log out every session of the console over ``data_dir`` (a running daemon
    refuses their cookies at once)."""
    from roses_app.publish.console.revoke import Revocations

    if not data_dir.is_dir():  # no daemon ran there: no session to end
        return
    generation = Revocations.of(data_dir).end_all()
    print(f"roses: every console session over {data_dir} ended (generation {generation})",
          file=sys.stderr)  # fmt: skip


def cmd_replay(args: argparse.Namespace) -> int:
    from roses_app.replay import replay
    from roses_app.spark.progress import TerminalProgress

    config = _load(args.config)
    started = time.perf_counter()
    progress = TerminalProgress()
    try:
        written = replay(config, Path(args.events), Path(args.out), args.engine, progress)
    finally:
        progress.close()
    elapsed = time.perf_counter() - started
    print(
        f"replayed with {args.engine}: {len(written)} output file(s) in {args.out} ({elapsed:.1f}s)"
    )
    return EXIT_OK


def cmd_once(args: argparse.Namespace) -> int:
    from roses_app.daemon import Daemon
    from roses_app.spark.progress import TerminalProgress

    config = _load(args.config)
    daemon = Daemon(config)
    progress = TerminalProgress()
    try:
        summary = daemon.once(Path(args.export) if args.export else None, progress)
    finally:
        progress.close()
        daemon.close()
    print(" ".join(f"{k}={v}" for k, v in summary.items()))
    failing = summary["failed_sources"] + summary["sources_in_backoff"]
    return EXIT_FAILED if failing and args.strict else EXIT_OK


def stop_on_signals(stop: threading.Event) -> None:
    """SIGINT (Ctrl-C) and SIGTERM (systemd, kill) ask the daemon to stop cleanly; a
    second one ends the process at once (what was not committed is done again at
    the next start, as after a crash)."""

    def request_stop(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            log.warning("received %s again: exiting now, without finishing the batch", name)
            logging.shutdown()
            os._exit(EXIT_FAILED)
        log.info("received %s: stopping (send it again to exit at once)", name)
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)


def reload_on_hangup(reload: threading.Event) -> None:
    """SIGHUP (``kill -HUP PID``, ``systemctl reload roses``) asks the daemon to read
    feeds.yaml again and apply it without a restart: the handler only sets ``reload``,
    the daemon's loop does the work."""

    def request_reload(_signum: int, _frame: object) -> None:
        reload.set()

    signal.signal(signal.SIGHUP, request_reload)


def cmd_query(args: argparse.Namespace) -> int:
    """A stream's content at a time, from the spool (a running daemon is not disturbed)."""
    from roses_app.publish.pull import PullQueries, parse_time
    from roses_app.spool import wall_clock_micros

    config = _load(args.config)
    at = parse_time(args.at) if args.at else wall_clock_micros()
    queries = PullQueries(config, config.settings.data_dir / "spool")
    answer = queries.answer(args.stream, at, args.part, config.settings.http.public_base)
    sys.stdout.buffer.write(answer.render(args.format))
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from roses_app.config.explosive import explosive
    from roses_app.daemon import Daemon

    config = _load(args.config)
    for warning in explosive(config):  # what `roses check` warns about, for the log
        log.warning("%s", warning)
    stop, reload = threading.Event(), threading.Event()
    stop_on_signals(stop)
    reload_on_hangup(reload)
    try:
        Daemon(config).run(stop, reload)
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise
        print(f"roses: {exc.strerror}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="roses", description=DESCRIPTION)
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
    explain = command(
        "explain", "summarize the plans and queries; print streams' plans, rewritten, and Spark's"
    )
    explain.add_argument("streams", nargs="*", help="stream names (default: a summary)")
    explain.add_argument(
        "--all", action="store_true", help="every stream's plans and every global plan node"
    )
    explain.add_argument("--logical-only", action="store_true", help="do not start Spark")
    explain.set_defaults(func=cmd_explain)
    rep = command("replay", "evaluate the streams on a finite event list")
    rep.add_argument("--events", required=True, help="JSON Lines: {source, ts, item} per line")
    rep.add_argument("--out", required=True, help="output folder: STREAM.jsonl, STREAM/VALUE.jsonl")
    rep.add_argument("--engine", choices=("spark", "reference"), default="spark")
    rep.set_defaults(func=cmd_replay)
    query = command("query", "print a stream's content at a time (a pull query), as a feed")
    query.add_argument("stream", help="the stream (published or not)")
    query.add_argument("--at", help="ISO-8601 time, e.g. 2026-11-22T12:00:00Z (default: now)")
    query.add_argument("--part", help="one value of a split stream (default: every value)")
    query.add_argument("--format", choices=("json", "rss", "atom", "html"), default="json")
    query.set_defaults(func=cmd_query)
    imp = sub.add_parser(
        "import", help="print the feeds.yaml sources: block of a feed reader's OPML export"
    )
    imp.add_argument("opml", help="the OPML file (subscriptions exported by a feed reader)")
    imp.set_defaults(func=cmd_import)
    fetch = sub.add_parser("fetch", help="print the items ROSES makes of one feed (for filters)")
    fetch.add_argument("url", help="an http(s) or file: URL, or a local path")
    fetch.add_argument("-c", "--config", help="use the fetch settings of this feeds.yaml")
    fetch.set_defaults(func=cmd_fetch)
    console = sub.add_parser(
        "console-password",
        help="print the hash of a password for settings.console.password_hash",
    )
    console.add_argument(
        "--stdin", action="store_true", help="read the password from standard input's first line"
    )
    console.add_argument(
        "-c", "--config",
        help="also log out every console session of this feeds.yaml's daemon (a new "
        "password should end the old one's sessions)",
    )  # fmt: skip
    console.set_defaults(func=cmd_console_password)
    return parser


def interrupt_quietly(_signum: int, _frame: object) -> None:
    """Ctrl-C in once, replay, explain: end now.  Spark, torn down under a running
    batch, has pages of traces to say about it that tell the user nothing: they are
    silenced (the JVM's stderr and the log), then the command unwinds."""
    session = sys.modules.get("roses_app.spark.session")  # loaded: a JVM may run
    if session is not None:
        session.silence_jvm()
    logging.disable(logging.CRITICAL)
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    previous = None
    if threading.current_thread() is threading.main_thread():  # run installs its own
        previous = signal.signal(signal.SIGINT, interrupt_quietly)
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
    except KeyboardInterrupt:
        # once, replay, explain: Ctrl-C ends them; nothing half-done is kept (the
        # store applies whole micro-batches only), so a later run starts over cleanly
        print("roses: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def entry() -> int:
    """The ``roses`` program: :func:`main`, then an exit without the collector's
    last pass over the objects the command made."""
    code = main()
    no_collection_at_exit()
    return code


if __name__ == "__main__":
    sys.exit(entry())
