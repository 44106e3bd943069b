"""The ``settings:`` section of feeds.yaml → :class:`~roses_app.config.model.Settings`
(every mistake reported with its line), and the path and URL checks the other
sections share."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from roses_app.config.console import CONSOLE_KEYS, console_section
from roses_app.config.fields import Problems, Section
from roses_app.config.model import (
    FetchSettings,
    HttpSettings,
    LimitSettings,
    Settings,
    SparkSettings,
    WebSubSettings,
)
from roses_app.config.yamlmarks import Marked

_NCNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def settings_section(problems: Problems, node: Marked | None, base_dir: Path) -> Settings:
    d = Settings()
    s = Section(
        problems,
        node,
        "settings",
        optional=(
            "data_dir",
            "http",
            "spark",
            "fetch",
            "namespaces",
            "lateness",
            "max_future",
            "spool",
            "websub",
            "console",
            "limits",
        ),
    )

    data_dir = s.string("data_dir", None)
    data_path = local_path(data_dir if data_dir is not None else str(d.data_dir), base_dir)

    http = _http(problems, s.section("http", optional=("host", "port", "base_url")), d)
    sp = s.section(
        "spark",
        optional=(
            "master",
            "shuffle_partitions",
            "trigger",
            "busy_trigger",
            "conf",
            "class_archive",
        ),
    )
    spark = SparkSettings(
        master=sp.string("master", d.spark.master),
        shuffle_partitions=sp.integer("shuffle_partitions", d.spark.shuffle_partitions, minimum=1),
        trigger_seconds=sp.duration("trigger", d.spark.trigger_seconds),
        busy_trigger_seconds=sp.duration(
            "busy_trigger", d.spark.busy_trigger_seconds, positive=False
        ),
        conf=tuple((k, v) for k, v, _ in sp.string_map("conf")),
        class_archive=sp.boolean("class_archive", d.spark.class_archive),
    )
    fetch = _fetch(problems, s.section("fetch", optional=FETCH_KEYS), d.fetch)
    namespaces = _namespaces(problems, s)
    lateness = s.duration("lateness", 0.0, positive=False)
    max_future = s.duration("max_future", d.max_future / 1_000_000)
    spool_section = s.section("spool", optional=("compact_every",))
    compact_every = spool_section.duration("compact_every", d.compact_every_seconds)
    websub = _websub(problems, s.section("websub", optional=WEBSUB_KEYS), d.websub)
    console = console_section(problems, s.section("console", optional=CONSOLE_KEYS))
    limits = _limits(s.section("limits", optional=("item_time", "worker_memory")), d.limits)
    return Settings(
        data_dir=data_path,
        http=http,
        spark=spark,
        fetch=fetch,
        namespaces=namespaces,
        lateness=round(lateness * 1_000_000),
        max_future=round(max_future * 1_000_000),
        compact_every_seconds=compact_every,
        websub=websub,
        console=console,
        limits=limits,
    )


# the least settings.limits.worker_memory may be: a worker reserves about 1.2 GB of data
# memory as it starts (Arrow's allocator 1 GB of it), so less would fail every task
MIN_WORKER_MEMORY = 1536 * 1024**2


def _limits(section: Section, d: LimitSettings) -> LimitSettings:
    """settings.limits; 0 turns a limit off."""
    seconds = section.duration("item_time", d.item_seconds, positive=False)
    memory = section.size("worker_memory", d.worker_memory, positive=False)
    if memory and memory < MIN_WORKER_MEMORY:
        section.problems.add(
            section.values["worker_memory"].line,
            f"settings.limits.worker_memory must be at least 1.5GB (a Python worker "
            f"reserves about 1.2 GB as it starts), or 0 for no limit; got {memory:,} bytes",
        )
        memory = d.worker_memory
    return LimitSettings(item_seconds=seconds or None, worker_memory=memory or None)


FETCH_KEYS = (
    "timeout",
    "max_bytes",
    "user_agent",
    "every",
    "max_backoff",
    "concurrency",
    "per_host",
    "host_spacing",
    "parse_workers",
    "max_items",
    "min_every",
    "max_every",
    "budget",
)


def _fetch(problems: Problems, f: Section, d: FetchSettings) -> FetchSettings:
    """settings.fetch; the adaptive bounds must be in order (min_every <= every <= max_every
    is not required: ``every`` is the fixed sources' default and adaptive ones' start)."""
    min_every = f.duration("min_every", d.min_every_seconds)
    f.check_poll_floor("min_every")
    max_every = f.duration("max_every", d.max_every_seconds)
    if min_every > max_every:
        problems.add(
            f.values["min_every"].line if "min_every" in f.values else f.line,
            f"settings.fetch.min_every ({min_every:g} s) is longer than max_every "
            f"({max_every:g} s): make min_every the shorter one",
        )
    budget = f.values.get("budget")
    return FetchSettings(
        timeout_seconds=f.duration("timeout", d.timeout_seconds),
        max_bytes=f.size("max_bytes", d.max_bytes),
        user_agent=f.string("user_agent", d.user_agent),
        default_every_seconds=f.duration("every", d.default_every_seconds),
        max_backoff_seconds=f.duration("max_backoff", d.max_backoff_seconds),
        concurrency=f.integer("concurrency", d.concurrency, minimum=1, maximum=10_000),
        per_host=f.integer("per_host", d.per_host, minimum=1, maximum=1_000),
        host_spacing_seconds=f.duration("host_spacing", d.host_spacing_seconds, positive=False),
        parse_workers=f.integer("parse_workers", d.parse_workers, minimum=1, maximum=64),
        max_items=f.integer("max_items", d.max_items, minimum=1, maximum=1_000_000),
        min_every_seconds=min_every,
        max_every_seconds=max_every,
        budget_per_hour=None
        if budget is None
        else float(f.integer("budget", 0, minimum=1, maximum=100_000_000)),
    )


def _http(problems: Problems, h: Section, d: Settings) -> HttpSettings:
    return HttpSettings(
        host=h.string("host", d.http.host),
        port=h.integer("port", d.http.port, minimum=0, maximum=65535),
        base_url=_url(problems, h, "base_url", "settings.http"),
    )


def _url(problems: Problems, section: Section, key: str, where: str) -> str | None:
    """An optional http:// or https:// URL (None: absent, or a mistake, reported)."""
    url = section.string(key, None)
    if url is not None and not is_http_url(url):
        problems.add(
            section.values[key].line,
            f"{where}.{key} must be an http:// or https:// URL, got {url!r}",
        )
        return None
    return url


def _namespaces(problems: Problems, s: Section) -> tuple[tuple[str, str], ...]:
    """settings.namespaces: prefix -> URI, each mistake told with its line."""
    namespaces = []
    for prefix, uri, line in s.string_map("namespaces"):
        if not _NCNAME.fullmatch(prefix) or prefix.lower().startswith("xml"):
            problems.add(
                line,
                f"invalid namespace prefix {prefix!r} in settings.namespaces "
                "(use a name such as geo or media2, not starting with xml)",
            )
        elif not uri.strip():
            problems.add(line, f"settings.namespaces.{prefix} must be a namespace URI, not empty")
        else:
            namespaces.append((prefix, uri))
    return tuple(namespaces)


WEBSUB_KEYS = (
    "external_hub",
    "lease",
    "allow_private_callbacks",
    "timeout",
    "concurrency",
    "per_host",
    "verify_queue",
    "max_subscriptions_per_topic",
    "max_subscriptions_per_callback_host",
)


def _websub(problems: Problems, w: Section, d: WebSubSettings) -> WebSubSettings:
    return WebSubSettings(
        external_hub=_url(problems, w, "external_hub", "settings.websub"),
        lease_seconds=w.duration("lease", d.lease_seconds),
        allow_private_callbacks=w.boolean("allow_private_callbacks", d.allow_private_callbacks),
        timeout_seconds=w.duration("timeout", d.timeout_seconds),
        concurrency=w.integer("concurrency", d.concurrency, minimum=1, maximum=10_000),
        per_host=w.integer("per_host", d.per_host, minimum=1, maximum=1_000),
        verify_queue=w.integer("verify_queue", d.verify_queue, minimum=1, maximum=1_000_000),
        max_subscriptions_per_topic=w.integer(
            "max_subscriptions_per_topic", d.max_subscriptions_per_topic, minimum=1
        ),
        max_subscriptions_per_callback_host=w.integer(
            "max_subscriptions_per_callback_host",
            d.max_subscriptions_per_callback_host,
            minimum=1,
        ),
    )


def local_path(text: str, base_dir: Path) -> Path:
    """A path of the config, relative to its folder, made absolute and normal."""
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    return Path(os.path.normpath(path))


def is_http_url(text: str) -> bool:
    """Whether ``text`` is an http:// or https:// URL with a host."""
    parts = urlsplit(text)
    return parts.scheme.lower() in ("http", "https") and bool(parts.netloc)
