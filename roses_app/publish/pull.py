"""Answering pull queries: ``GET /streams/NAME?at=TIME`` and ``roses query``.

Any stream of the config, published or not, gives its content at a time
(:func:`roses_app.algebra.reference.pull.content_at`), computed from the spool as it is on disk
(read without its index, so a running daemon is not disturbed), as a feed document:
JSON Feed by default, RSS or Atom when asked.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from roses_app.algebra.reference.pull import (
    PullQueryError,
    UnknownStreamError,
    content_at,
    earliest_needed,
)
from roses_app.algebra.reference.registry import RefInput
from roses_app.config.model import Config, StreamConfig
from roses_app.items import MICROS, iso8601, iso_micros
from roses_app.publish.catalog import RENDERERS, ConfigSource, config_getter, render_feed
from roses_app.publish.render import FeedInfo
from roses_app.publish.sanitize import label
from roses_app.spool import wall_clock_micros
from roses_app.spoolfiles import read_spool
from roses_app.store_rows import StoredEntry, entry_guid

# what to answer for each Accept media type (the first one found in the header wins)
NAMED_STREAMS = 20  # an unknown name's message lists this many (100,000 are megabytes)
NO_SUCH_STREAM = "no such stream: its name is as in feeds.yaml (see /feeds.opml)\n"
ACCEPTED = {
    "application/rss+xml": "rss",
    "application/atom+xml": "atom",
    "application/feed+json": "json",
    "application/json": "json",
}


def parse_time(text: str) -> int:
    """An ISO-8601 time (``2026-11-22T12:00:00Z``) as µs since the epoch."""
    try:
        return iso_micros(text)
    except ValueError as exc:
        raise PullQueryError(
            "at is not an ISO-8601 time: give one such as 2026-11-22T12:00:00Z"
        ) from exc


def negotiate(accept: str, asked: str | None) -> str:
    """The format to answer: ``asked`` (a ``format`` parameter), else the Accept header."""
    if asked is not None:
        if asked not in RENDERERS:
            raise PullQueryError(f"format must be one of {', '.join(RENDERERS)}")
        return asked
    for media in (part.split(";")[0].strip() for part in accept.split(",")):
        if media in ACCEPTED:
            return ACCEPTED[media]
    return "json"


@dataclass(frozen=True)
class PullAnswer:
    info: FeedInfo
    entries: list[StoredEntry]

    def render(self, fmt: str) -> bytes:
        return render_feed(fmt, self.info, self.entries, None)


def _entry(stream: str, part: str, ts: int, seq: int, item: str) -> StoredEntry:
    """An event as a feed entry (its time as its dates)."""
    return StoredEntry(stream, part, entry_guid(item), ts, seq, item, ts / MICROS, ts / MICROS)


class PullQueries:
    """The pull queries of one config over its spool folder."""

    def __init__(self, config: ConfigSource, spool_root: Path) -> None:
        self._config = config_getter(config)  # (a reload replaces the daemon's config)
        self.spool_root = spool_root

    @property
    def config(self) -> Config:
        return self._config()

    def answer(self, name: str, at: int, part: str | None = None, base: str = "") -> PullAnswer:
        config = self.config
        stream = config.streams.get(name)
        if stream is None:
            names = list(itertools.islice(config.streams, NAMED_STREAMS))
            more = len(config.streams) - len(names)
            known = ", ".join(names) + (f" and {more:,} more" if more > 0 else "") or "none"
            raise UnknownStreamError(f"no stream named {name!r} (streams: {known})")
        settings = config.settings
        # what had arrived by ``at`` and counts then (and the next event and the
        # spool's first, whose times a message may name)
        since = earliest_needed(stream.stream, at, settings.max_future)
        inputs = [
            RefInput(e.source, e.ts, e.seq, e.item, e.published)
            for e in read_spool(self.spool_root, until=at, since=since)
        ]
        content = content_at(
            stream.stream, inputs, at, settings.namespaces, lateness=settings.lateness, show=iso8601
        )
        if part is not None and part not in content:
            content = {part: []}
        entries = [
            _entry(name, p, e.ts, e.seq, e.item or "")
            for p in sorted(content)
            if part is None or p == part
            for e in content[p]
        ]
        entries.sort(key=lambda e: (e.ts, e.seq), reverse=True)
        return PullAnswer(self._info(stream, at, part, base, len(entries)), entries)

    def endpoint(self, base: Callable[[Request], str]) -> Callable[[Request], Response]:
        """The ``GET /streams/{name}`` handler; ``base`` gives a request's server base."""

        def answer(request: Request) -> Response:
            # a plain function: Starlette runs it in a worker thread (it reads the spool)
            params = request.query_params
            try:
                at = parse_time(params["at"]) if "at" in params else wall_clock_micros()
                fmt = negotiate(request.headers.get("accept", ""), params.get("format"))
                name = request.path_params["name"]
                found = self.answer(name, at, params.get("part"), base(request))
            except UnknownStreamError:  # its message names the stream asked: not echoed
                return PlainTextResponse(NO_SUCH_STREAM, status_code=404)
            except PullQueryError as exc:
                return PlainTextResponse(f"{exc}\n", status_code=400)
            headers = {"Cache-Control": "no-cache"}
            return Response(found.render(fmt), media_type=RENDERERS[fmt][1], headers=headers)

        return answer

    def _info(
        self, stream: StreamConfig, at: int, part: str | None, base: str, count: int
    ) -> FeedInfo:
        name = stream.name
        title = label(stream.publish.title if stream.publish else "", name)
        when = iso8601(at)
        query = f"?at={quote(when)}" + (f"&part={quote(part)}" if part is not None else "")
        url = f"{base}/streams/{quote(name, safe='')}{query}"
        return FeedInfo(
            name=name,
            stream=name,
            part=part or "",
            title=f"{title} at {when}",
            description=f"The content of stream {name} at {when} (a pull query).",
            keep=count,
            rss_url=url + "&format=rss",
            atom_url=url + "&format=atom",
            html_url=url + "&format=html",
            json_url=url + "&format=json",
            index_url=f"{base}/",
        )


__all__ = [
    "ACCEPTED",
    "PullAnswer",
    "PullQueries",
    "PullQueryError",
    "UnknownStreamError",
    "negotiate",
    "parse_time",
]
