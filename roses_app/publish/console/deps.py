"""What the console needs of the daemon, as one object (tests give fakes)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from roses_app.config.model import Config, ConsoleSettings
from roses_app.publish.console.history import Poll
from roses_app.publish.console.recent import Recent
from roses_app.store import Store

KINDS = ("where", "by", "map", "stream")


@dataclass(frozen=True)
class PreviewAsk:
    """What the editor asks a preview of (the fields of
    :class:`roses_app.publish.preview.PreviewRequest`)."""

    text: str
    kind: str  # where | by | map | stream
    source: str | None = None
    name: str = "preview"
    limit: int = 10_000


class History(Protocol):
    def recent(self, source: str, limit: int = ...) -> list[Poll]: ...


class Listing(Protocol):
    """A page of the sources' listing (:class:`roses_app.connectors.listing.Snapshot`):
    ``first_wait``, how long a first page may wait for the rows to be read."""

    def __call__(
        self, params: Mapping[str, str], first_wait: float | None = None
    ) -> dict[str, Any]: ...


# dropped (per step), late, revised, unchanged (per stream), watermark (per Spark query)
Counters = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True)
class ConsoleDeps:
    """The console's view of a running ROSES.

    ``sources(params, first_wait)``: a page of the ``/sources`` listing; ``source(name)``: one
    source's row now (None: not a feed source); ``history``: its last polls;
    ``recent(source, n)``: its newest items in the spool; ``queries()``: stream ->
    the Spark query that runs it; ``counters()``: the health's tallies; ``explain``:
    a stream's plans as text; ``preview``, ``apply`` (path, name, YAML body or None
    to remove) and ``reload(reason)``: the editor's (None: not available)."""

    settings: ConsoleSettings
    config: Callable[[], Config]
    data_dir: Path
    store: Store
    sources: Listing
    source: Callable[[str], dict[str, Any] | None]
    history: History
    recent: Callable[[str, int], Recent]
    queries: Callable[[], Mapping[str, str]]
    counters: Callable[[], Counters]
    explain: Callable[[str], str]
    preview: Callable[[PreviewAsk], Any] | None = None
    apply: Callable[[Path, str, str | None], Any] | None = None
    reload: Callable[[str], Any] | None = None
    clock: Callable[[], float] = time.time

    @property
    def key_path(self) -> Path:
        return self.data_dir / "console_secret.key"

    @property
    def audit_path(self) -> Path:
        return self.data_dir / "console_audit.jsonl"
