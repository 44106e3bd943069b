"""Applying a changed feeds.yaml to a running daemon: what changed, and when to look.

:meth:`roses_app.daemon.Daemon.reload` reads the config again and, when it loads,
applies it without a restart: sources added are polled, removed ones are not (their
WebSub subscriptions end), and when a stream's plan changed the Spark queries stop
after their batch in flight and start again with the new streams, in the same JVM:
as at a restart (:func:`roses_app.spark.layout.plan_layout`), unchanged streams keep
their published items and their position, new and changed ones are computed over the
spool read so far, and a removed stream's published items are forgotten.  What needs
a restart (where the data is, the HTTP server, Spark's master and conf, the fetcher,
WebSub's, the console's but its password and the limits' settings) is logged and not
applied: ROSES goes on with the running values.  A new console password applies at
once, and ends every session of the old one.  This module works out the differences
(:func:`differences`) and watches the files (:class:`ConfigWatcher`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from roses_app.config.model import Config, Settings

log = logging.getLogger("roses_app.daemon")

# settings a running daemon cannot take: its folders and files, its HTTP server, the
# JVM and its workers, the fetcher's pools, the hubs, the console's sessions
RESTART_SETTINGS = ("data_dir", "http", "fetch", "websub", "console", "limits")
SETTLE_SECONDS = 1.0  # a file is read again this long after its last change


@dataclass(frozen=True)
class ReloadResult:
    """What a reload did (``error``: the config did not load, nothing changed)."""

    reason: str
    streams_added: tuple[str, ...] = ()
    streams_changed: tuple[str, ...] = ()
    streams_removed: tuple[str, ...] = ()
    sources_added: tuple[str, ...] = ()
    sources_changed: tuple[str, ...] = ()
    sources_removed: tuple[str, ...] = ()
    # removed streams whose published items are forgotten (as at a restart)
    forgotten: tuple[str, ...] = ()
    needs_restart: tuple[str, ...] = ()  # settings changed and not applied
    queries_restarted: bool = False
    seconds: float = 0.0
    error: str | None = None

    @property
    def changed(self) -> bool:
        return any(
            (
                self.streams_added,
                self.streams_changed,
                self.streams_removed,
                self.sources_added,
                self.sources_changed,
                self.sources_removed,
            )
        )

    def summary(self) -> str:
        """One line for the log."""
        if self.error is not None:
            return f"reload ({self.reason}) failed, the running config is kept: {self.error}"
        parts = [
            f"{what} {', '.join(names)}"
            for what, names in (
                ("streams added:", self.streams_added),
                ("changed:", self.streams_changed),
                ("removed (published items forgotten):", self.streams_removed),
                ("sources added:", self.sources_added),
                ("changed:", self.sources_changed),
                ("removed:", self.sources_removed),
            )
            if names
        ]
        done = "; ".join(parts) or "nothing changed"
        queries = ", Spark queries restarted" if self.queries_restarted else ""
        return f"reload ({self.reason}): {done}{queries} ({self.seconds:.1f}s)"


@dataclass(frozen=True)
class Differences:
    """What a new config changes of the running one."""

    config: Config  # the new config, with the settings that need a restart kept as running
    result: ReloadResult
    plans_changed: bool  # the queries must start again
    sources_changed: bool
    extra: Mapping[str, Any] = field(default_factory=dict)


def differences(old: Config, new: Config, reason: str) -> Differences:
    """The new config as it can be applied, and what it changes."""
    restart = needs_restart(old.settings, new.settings)
    for name in restart:
        log.warning(
            "settings.%s changed in %s: it needs a restart (ROSES goes on with the running "
            "value; restart it to apply this)",
            name,
            new.path,
        )
    applied = replace(new, settings=_kept(old.settings, new.settings, restart))
    streams = _compare(old.streams, applied.streams)
    sources = _compare(old.sources, applied.sources)
    plans = {name for name in streams[1] if old.streams[name].plan != applied.streams[name].plan}
    live = (old.settings.namespaces, old.settings.lateness, old.settings.spark.trigger_seconds)
    now = (new.settings.namespaces, new.settings.lateness, new.settings.spark.trigger_seconds)
    result = ReloadResult(
        reason,
        streams_added=streams[0],
        streams_changed=streams[1],
        streams_removed=streams[2],
        sources_added=sources[0],
        sources_changed=sources[1],
        sources_removed=sources[2],
        forgotten=streams[2],
        needs_restart=tuple(f"settings.{name}" for name in restart),
    )
    plans_changed = bool(streams[0] or streams[2] or plans or live != now)
    return Differences(applied, result, plans_changed, any(sources))


def needs_restart(old: Settings, new: Settings) -> list[str]:
    """The settings that changed and that a running daemon cannot take (Spark's but
    its trigger)."""
    changed = [
        name
        for name in RESTART_SETTINGS
        if getattr(old, name, None) != getattr(new, name, None)
        and not (name == "console" and _password_only(old, new))
    ]
    trigger = new.spark.trigger_seconds
    if replace(old.spark, trigger_seconds=trigger) != new.spark:
        changed.append("spark")
    return changed


def _password_only(old: Settings, new: Settings) -> bool:
    """Whether the console's settings differ in their password hash alone (the
    console reads it at each login: a new password needs no restart)."""
    if old.console is None or new.console is None:
        return False
    return replace(old.console, password_hash=new.console.password_hash) == new.console


def _kept(old: Settings, new: Settings, restart: Iterable[str]) -> Settings:
    kept = {name: getattr(old, name) for name in restart if name != "spark"}
    if "spark" in restart:
        kept["spark"] = replace(old.spark, trigger_seconds=new.spark.trigger_seconds)
    return replace(new, **kept)


def _compare(
    old: Mapping[str, object], new: Mapping[str, object]
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Names added, changed and removed (in the new order; removed in the old)."""
    added = tuple(name for name in new if name not in old)
    changed = tuple(name for name in new if name in old and old[name] != new[name])
    removed = tuple(name for name in old if name not in new)
    return added, changed, removed


def watched_files(config: Config) -> tuple[Path, ...]:
    """feeds.yaml and the subscriptions files its streams come from."""
    files = dict.fromkeys([str(config.path)])
    files.update(dict.fromkeys(stream.origin.file for stream in config.streams.values()))
    return tuple(Path(name) for name in files if name and not name.startswith("<"))


Signature = tuple[tuple[str, int, int], ...]


class ConfigWatcher:
    """Tells when the config's files changed on disk and then stayed as they are for
    ``settle`` seconds (an editor that writes twice, a copy in progress: one reload).
    Looked at once a second by the daemon's loop: a ``stat`` per file."""

    def __init__(
        self,
        paths: Iterable[Path],
        settle: float = SETTLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.paths = tuple(paths)
        self.settle = settle
        self.clock = clock
        self._applied = self._seen = self._signature()
        self._changed_at: float | None = None

    def mark(self, paths: Iterable[Path] | None = None) -> None:
        """The files as they are now are the ones read (``paths``: watch these now)."""
        if paths is not None:
            self.paths = tuple(paths)
        self._applied = self._seen = self._signature()
        self._changed_at = None

    def due(self) -> bool:
        """Whether the files changed since they were read and have settled."""
        now = self.clock()
        found = self._signature()
        if found != self._seen:
            self._seen, self._changed_at = found, now
            return False
        if found == self._applied or self._changed_at is None:
            return False
        return now - self._changed_at >= self.settle

    def _signature(self) -> Signature:
        out = []
        for path in self.paths:
            try:
                stat = os.stat(path)
            except OSError:
                out.append((str(path), -1, -1))  # gone (an editor's save): a change too
                continue
            out.append((str(path), stat.st_mtime_ns, stat.st_size))
        return tuple(out)


# -- applying it -------------------------------------------------------------------------


def reload_daemon(daemon: Any, reason: str) -> ReloadResult:
    """:meth:`roses_app.daemon.Daemon.reload` (called with its lock held)."""
    from roses_app.config.loader import load_config
    from roses_app.errors import ConfigError

    started = time.monotonic()
    daemon.watcher.mark()  # a change written from now on is seen again
    try:
        new = load_config(daemon.config.path)
    except ConfigError as exc:
        for problem in exc.problems:
            log.error("reload (%s): %s", reason, problem)
        result = ReloadResult(reason, error=str(exc), seconds=time.monotonic() - started)
        log.error("%s", result.summary())
        return result
    found = differences(daemon.config, new, reason)
    daemon.watcher.mark(watched_files(found.config))
    result = _apply(daemon, found)
    result = replace(result, seconds=time.monotonic() - started)
    log.log(logging.ERROR if result.error else logging.INFO, "%s", result.summary())
    return result


def _apply(daemon: Any, found: Differences) -> ReloadResult:
    """Sources first, then the config swapped (one reference: the HTTP server, the hub,
    /healthz and the loop read it), then the queries started again if plans changed."""
    old, new = daemon.config, found.config
    if found.sources_changed:
        daemon.scheduler.update_sources(new.sources)
        daemon.mail.update_sources(new.sources)
    daemon.spool.max_future = new.settings.max_future
    daemon.use_config(new)
    if not found.plans_changed or daemon.spark is None:
        return found.result  # (before the JVM runs: its queries start on the new config)
    try:
        daemon.restart_queries()
    except Exception as exc:  # Spark refused the new plan: back to the running one
        log.exception(
            "reload (%s): the new streams did not start; back to the old ones", found.result.reason
        )
        daemon.use_config(old)
        daemon.restart_queries()
        return replace(found.result, error=f"the new streams did not start: {exc}")
    for name in found.result.forgotten:  # (the stateless ones were, as at a restart)
        daemon.store.restart_stream(name)
    return replace(found.result, queries_restarted=True)


__all__ = [
    "RESTART_SETTINGS",
    "ConfigWatcher",
    "Differences",
    "ReloadResult",
    "differences",
    "needs_restart",
    "reload_daemon",
    "watched_files",
]
