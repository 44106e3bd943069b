"""feeds.yaml → :class:`~roses_app.config.model.Config`, reporting every mistake at once.

``load_config(path)`` reads the file, parses it with line marks
(:mod:`roses_app.config.yamlmarks`), validates ``settings``, ``sources`` and
``streams`` (closed key sets at every level, types, durations, sizes, names, URLs,
references, cycles, XPath syntax) and builds each stream's logical plan
(:mod:`roses_app.config.streams`).  Any problem anywhere raises one
:class:`~roses_app.errors.ConfigError` holding all of them, each a
:class:`~roses_app.errors.ConfigProblem` (file, line, message) sorted by line.

``settings:`` is read by :mod:`roses_app.config.settings`, mail sources (``mail:``) by
:mod:`roses_app.config.mail`.

Relative paths (``data_dir``, ``file:`` feed URLs, maildir and mbox paths) resolve
against the directory of the config file; ``file:`` URLs are stored absolute
(``file:///...``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from urllib.parse import unquote, urlsplit

from roses_app.algebra.plan.operators import TIME_MODES, Node, Origin
from roses_app.config.fields import Problems, Section, check_name, on_this_machine
from roses_app.config.limits import MAX_CONFIG_BYTES
from roses_app.config.mail import mail_source
from roses_app.config.model import (
    Config,
    FeedSource,
    FetchSettings,
    Publish,
    Settings,
    SourceConfig,
    StreamConfig,
)
from roses_app.config.opml import opml_sources
from roses_app.config.settings import local_path, settings_section
from roses_app.config.streams import (
    StreamPlanner,
    XPathChecker,
    check_event_time,
    check_stateful_copies,
    stateful_streams,
)
from roses_app.config.subscriptions import Subscriptions, read_subscriptions
from roses_app.config.yamlmarks import Marked, describe, load
from roses_app.errors import ConfigError, ConfigProblem
from roses_app.heap import building_long_lived

TOP_KEYS = ("settings", "sources", "streams", "subscriptions")


def load_config(path: str | Path) -> Config:
    """Load and validate feeds.yaml; raise ConfigError with every problem found."""
    path = Path(path)
    try:
        size = path.stat().st_size
        data = path.read_bytes() if size <= MAX_CONFIG_BYTES else b""
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(
            [ConfigProblem(str(path), 0, f"cannot read the config file: {reason}")]
        ) from None
    if size > MAX_CONFIG_BYTES:
        message = (
            f"the config file has {size:,} bytes, more than the {MAX_CONFIG_BYTES:,} it "
            "may have: keep large sets of subscriptions in subscriptions files"
        )
        raise ConfigError([ConfigProblem(str(path), 0, message)])
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            [ConfigProblem(str(path), line, "the config file is not UTF-8 text (save it as UTF-8)")]
        ) from None
    # reading makes many small objects that all stay (nodes, values, plans, parsed
    # XPath) and few cycles: the collector walking them again and again cost a
    # config of ten thousand streams 3 of its 7 s
    with building_long_lived():
        return parse_config(text, path)


def parse_config(
    text: str, path: str | Path, *, xpath_checker: XPathChecker | None = None
) -> Config:
    """Validate config ``text`` as if read from ``path`` (which anchors relative paths)."""
    path = Path(path)
    file = str(path)
    base_dir = Path(os.path.abspath(path)).parent
    problems = Problems(file)
    if xpath_checker is None:
        # lazily: xmlfn loads lxml and elementpath; the checker keeps each observer's
        # presearch analysis, so it is parsed once per process
        from roses_app.xmlfn.presearch_terms import check_observer

        xpath_checker = check_observer

    root = load(text, problems.add)
    if root is None:
        if not problems:
            problems.add(1, "the config file is empty (expected settings, sources and streams)")
        raise ConfigError(problems.result())
    if not root.is_map:
        problems.add(
            root.line,
            "the config file must be a mapping with settings, sources and streams, "
            f"got {describe(root)}",
        )
        raise ConfigError(problems.result())
    # streams: may be left out when subscriptions files hold them
    streams_required = ("streams",) if "subscriptions" not in root.value else ()
    top = Section(
        problems,
        root,
        "the top level",
        required=("sources", *streams_required),
        optional=("settings", "streams", "subscriptions"),
        line=1,
        order=TOP_KEYS,
    )

    # an empty section (``streams:`` with nothing after it) is an empty mapping
    section = {key: top.get(key) for key in TOP_KEYS}
    section = {k: v if v is not None and v.value is not None else None for k, v in section.items()}
    settings = settings_section(problems, section["settings"], base_dir)
    sources, declared = _sources(problems, section["sources"], base_dir, settings.fetch)
    written = _stream_bodies(problems, section["streams"], declared)
    subscriptions = read_subscriptions(problems, section["subscriptions"], base_dir)
    _add_subscriptions(problems, written, subscriptions, declared)
    streams = _streams(
        problems, file, written, declared, sources, settings, xpath_checker, subscriptions.files
    )

    if problems:
        raise ConfigError(problems.result())
    return Config(
        path=Path(os.path.abspath(path)), settings=settings, sources=sources, streams=streams
    )


def format_problems(problems: Iterable[ConfigProblem]) -> str:
    """One ``file:line: message`` per line (``file: message`` when no line applies)."""
    return "\n".join(
        f"{p.file}:{p.line}: {p.message}" if p.line > 0 else f"{p.file}: {p.message}"
        for p in problems
    )


# -- settings ------------------------------------------------------------------------------


# -- sources -------------------------------------------------------------------------------


def _sources(
    problems: Problems, node: Marked | None, base_dir: Path, fetch: FetchSettings
) -> tuple[dict[str, SourceConfig], dict[str, int]]:
    """The valid sources, and the line of every declared source name (valid or not,
    so that references to a broken source do not cascade into more problems)."""
    out: dict[str, SourceConfig] = {}
    declared: dict[str, int] = {}
    if node is None:
        return out, declared
    if not node.is_map:
        problems.add(
            node.line, f"sources must be a mapping of source names to sources, got {describe(node)}"
        )
        return out, declared
    smtp_ports: dict[tuple[str, int], str] = {}
    imports: list[tuple[Marked, int]] = []
    for name, value in node.value.items():
        line = node.key_line(name)
        if name == "opml" and not value.is_map:  # an OPML import, not a source named opml
            imports.append((value, line))
            continue
        declared[name] = line
        check_name(problems, name, line, "source")
        source: SourceConfig | None
        if value.is_map and "mail" in value.value:
            source = mail_source(problems, name, value, line, base_dir, smtp_ports)
        else:
            source = _feed_source(problems, name, value, line, base_dir, fetch)
        time = _time_mode(problems, value, f"sources.{name}")
        if source is not None:
            out[name] = replace(source, time=time)
    # After the sources written out: their names and URLs come first.
    taken = set(declared)
    known_urls = {s.url for s in out.values() if isinstance(s, FeedSource)}
    for value, line in imports:
        every = fetch.default_every_seconds
        for feed in opml_sources(
            problems, value, base_dir, every, feed_url, taken=taken, known_urls=known_urls
        ):
            out[feed.name] = feed
            declared[feed.name] = line
    return out, declared


def _time_mode(problems: Problems, value: Marked, what: str) -> str:
    """The ``time:`` key of a source or stream mapping (``ingest`` when absent)."""
    found = value.value.get("time") if value.is_map else None
    if found is None:
        return "ingest"
    if found.value not in TIME_MODES:
        problems.add(
            found.line,
            f"{what}.time must be one of {', '.join(TIME_MODES)} (published: each item's "
            f"publication time is its time), got {describe(found)}",
        )
        return "ingest"
    return str(found.value)


def _feed_source(
    problems: Problems, name: str, value: Marked, line: int, base_dir: Path, fetch: FetchSettings
) -> FeedSource | None:
    what = f"sources.{name}"
    s = Section(
        problems,
        value,
        what,
        required=("feed",),
        optional=("every", "categories", "time"),
        line=line,
    )
    every = s.duration("every", fetch.default_every_seconds)
    url = None
    feed = s.string("feed", None)
    if feed is not None:
        try:
            url = feed_url(feed, base_dir)
        except ValueError as exc:
            problems.add(s.values["feed"].line, f"{what}.feed: {exc}")
    categories = _categories(problems, s.get("categories"), f"{what}.categories")
    if url is None:
        return None
    parts = urlsplit(url)
    s.check_poll_floor("every", local=parts.scheme == "file" or on_this_machine(parts.hostname))
    origin = Origin(problems.file, line, "", f"source:{name}")
    return FeedSource(name, url, every, categories, origin=origin, fixed="every" in s)


def _categories(problems: Problems, value: Marked | None, what: str) -> tuple[str, ...]:
    """``categories: [a, b]`` (one category alone: a list of one)."""
    if value is None:
        return ()
    out: list[str] = []
    for item in value.value if value.is_seq else [value]:
        if isinstance(item.value, str) and item.value.strip():
            out.append(" ".join(item.value.split()))
        else:
            problems.add(
                item.line, f"{what}: a category must be a non-empty string, got {describe(item)}"
            )
    return tuple(dict.fromkeys(out))


def feed_url(text: str, base_dir: Path) -> str:
    """A feed URL as stored: http(s) unchanged; ``file:`` made absolute (``file:///...``)."""
    text = text.strip()
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme in ("http", "https"):
        if not parts.netloc:
            raise ValueError(f"{text!r} has no host (write e.g. https://example.org/feed.xml)")
        return text
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(
                f"{text!r} is not a local file (write file:PATH or "
                "file:///ABSOLUTE/PATH; relative paths start at the config's folder)"
            )
        local = unquote(parts.path)
        if not local:
            raise ValueError(f"{text!r} names no file (write e.g. file:feeds/sample.xml)")
        return local_path(local, base_dir).as_uri()
    raise ValueError(f"a feed URL must start with http://, https:// or file:, got {text!r}")


# -- streams -------------------------------------------------------------------------------


def _stream_bodies(
    problems: Problems, node: Marked | None, declared: dict[str, int]
) -> dict[str, tuple[Marked, int]]:
    """The streams of feeds.yaml: name -> (body, line), names checked."""
    if node is None:
        return {}
    if not node.is_map:
        problems.add(
            node.line, f"streams must be a mapping of stream names to streams, got {describe(node)}"
        )
        return {}
    bodies = {}
    for name, body in node.value.items():
        line = node.key_line(name)
        check_name(problems, name, line, "stream")
        if name in declared:
            problems.add(
                line,
                f"stream {name!r} has the same name as the source at line {declared[name]}; "
                "sources and streams share one namespace (rename one of them)",
            )
        bodies[name] = (body, line)
    return bodies


def _add_subscriptions(
    problems: Problems,
    bodies: dict[str, tuple[Marked, int]],
    subscriptions: Subscriptions,
    declared: dict[str, int],
) -> None:
    """The subscriptions after feeds.yaml's streams; one whose name is taken is not."""
    for name, body in subscriptions.bodies.items():
        line = subscriptions.lines[name]
        taken = declared.get(name) or (bodies[name][1] if name in bodies else None)
        if taken is not None:
            kind = "source" if name in declared else "stream"
            with problems.at(subscriptions.files[name]):
                problems.add(
                    line,
                    f"subscription {name!r} has the same name as the {kind} at "
                    f"{problems.main}:{taken}; sources, streams and subscriptions share "
                    "one namespace (rename one of them)",
                )
            continue
        bodies[name] = (body, line)


def _streams(
    problems: Problems,
    file: str,
    written: dict[str, tuple[Marked, int]],
    declared: dict[str, int],
    sources: dict[str, SourceConfig],
    settings: Settings,
    xpath_checker: XPathChecker,
    files: dict[str, str] | None = None,
) -> dict[str, StreamConfig]:
    """Every stream's plan (``files``: the streams written in another file than
    feeds.yaml, the subscriptions')."""
    bodies = {name: body for name, (body, _) in written.items()}
    files = files if files is not None else {}
    times = {name: source.time for name, source in sources.items() if source.time != "ingest"}
    for name, body in bodies.items():
        if body.is_map and "time" in body.value:
            times[name] = _time_mode(problems, body, f"streams.{name}")
    planner = StreamPlanner(
        problems,
        list(declared),
        bodies,
        settings.namespaces,
        xpath_checker,
        times,
        settings.lateness,
        files,
    )
    out: dict[str, StreamConfig] = {}
    for name, (body, line) in written.items():
        plan: Node | None = planner.plan(name)
        problems.file = where = files.get(name, file)  # (a context manager per stream: 1 s)
        publish = _publish(problems, name, body.value.get("publish") if body.is_map else None)
        problems.file = file
        if plan is not None:
            out[name] = StreamConfig(
                name=name, plan=plan, publish=publish, origin=Origin(where, line, name, name)
            )
    stateful = stateful_streams([s.stream for s in out.values()])
    check_stateful_copies(problems, stateful, settings.namespaces)
    check_event_time(problems, stateful)
    return out


def _publish(problems: Problems, stream: str, value: Marked | None) -> Publish | None:
    if value is None:
        return None
    what = f"streams.{stream}.publish"
    if isinstance(value.value, bool):
        return Publish(title=stream) if value.value else None
    if not value.is_map:
        problems.add(
            value.line,
            f"{what} must be true, false or a mapping "
            f"(title, description, keep), got {describe(value)}",
        )
        return None
    s = Section(problems, value, what, optional=("title", "description", "keep"))
    keep = s.section("keep", optional=("count",))
    return Publish(
        title=s.string("title", stream),
        description=s.string("description", "", empty_ok=True),
        keep_count=keep.integer("count", Publish(title="").keep_count, minimum=1),
    )
