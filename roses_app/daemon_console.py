"""The console's dependencies taken from a running daemon (its one place of wiring).

The daemon's parts come through :class:`~roses_app.daemon_status.DaemonStatus`, the
daemon's base class, and its ``reload`` and ``clock`` as arguments: this module never
imports :mod:`roses_app.daemon`, which imports it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from roses_app.algebra.time.lateness import split_tallies
from roses_app.config.edit import apply_stream
from roses_app.connectors.listing import one
from roses_app.daemon_reload import ReloadResult
from roses_app.daemon_status import DaemonStatus
from roses_app.publish.console.deps import ConsoleDeps, Counters, PreviewAsk
from roses_app.publish.console.history import PollHistory
from roses_app.publish.console.recent import Recent, recent_items
from roses_app.publish.console.streampages import explain_stream
from roses_app.publish.preview import Previewer, PreviewRequest, PreviewResult


def daemon_console(
    daemon: DaemonStatus,
    history: PollHistory,
    reload: Callable[[str], ReloadResult],
    clock: Callable[[], float],
) -> ConsoleDeps | None:
    """What the console of ``daemon`` reads and calls (``reload(reason)`` applies
    feeds.yaml again); None when it is off."""
    settings = daemon.config.settings.console
    if settings is None:
        return None
    spool = daemon.spool.root
    scheduler = daemon.scheduler
    previewer = Previewer(lambda: daemon.config, spool)

    def source(name: str) -> dict[str, Any] | None:
        found = scheduler.sources.get(name)
        return None if found is None else one(daemon.states, found, scheduler.live())

    def queries() -> dict[str, str]:
        return {stream: r.name for r in list(daemon.queries) for stream in r.streams}

    def counters() -> Counters:
        dropped, tallies = split_tallies(
            dict(daemon.errors.value) if daemon.errors is not None else {}
        )
        # per Spark query, not per stream (see streampages._watermark)
        return {"dropped": dropped, **tallies, "watermark": daemon.watermark_drops()}

    def recent(name: str, limit: int) -> Recent:
        return recent_items(spool, name, limit)

    def preview(ask: PreviewAsk) -> PreviewResult:
        return previewer.preview(PreviewRequest(**asdict(ask)))

    sources = daemon.source_rows()  # (shared with /sources)
    return ConsoleDeps(
        settings=settings,
        config=lambda: daemon.config,
        data_dir=daemon.config.settings.data_dir,
        store=daemon.store,
        sources=sources,
        source=source,
        history=history,
        recent=recent,
        queries=queries,
        counters=counters,
        explain=lambda name: explain_stream(daemon.config, name),
        preview=preview,
        apply=apply_stream,
        reload=reload,
        clock=clock,
    )
