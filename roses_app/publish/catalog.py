"""Which feeds exist: the published streams of the config and the split values stored.

A stream with ``publish:`` is one feed, ``/feeds/NAME.rss|.atom|.json`` (RSS 2.0, Atom
1.0, JSON Feed 1.1) with its page for people, ``/feeds/NAME.html``.  A split stream is
one feed per value its split function returned so far, ``/feeds/NAME/VALUE.rss`` (and
the other formats) with VALUE percent-quoted (nothing safe), so new feeds appear as new
values appear.  A long value is named by its beginning and a hash of it
(:func:`~roses_app.items.part_name`), in its URL as in the static export's file names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from urllib.parse import quote, unquote

from roses_app.algebra.plan.operators import Split
from roses_app.algebra.time.eventtime import publishes_late
from roses_app.algebra.time.lateness import LATE_PART
from roses_app.config.model import Config, StreamConfig
from roses_app.items import part_name
from roses_app.publish.feedpage import HTML_MEDIA_TYPE, render_feed_page
from roses_app.publish.jsonfeed import JSON_FEED_MEDIA_TYPE, newest_date, render_json
from roses_app.publish.pages import html_anchor, part_label
from roses_app.publish.render import (
    ATOM_MEDIA_TYPE,
    RSS_MEDIA_TYPE,
    FeedGroup,
    FeedInfo,
    FeedStats,
    render_atom,
    render_rss,
)
from roses_app.publish.sanitize import label
from roses_app.publish.websub_table import hub_urls
from roses_app.store import Store, StoredEntry

# render(feed, its latest entries, updated=the store's last change) -> the document
Renderer = Callable[..., bytes]
RENDERERS: dict[str, tuple[Renderer, str]] = {
    "rss": (render_rss, RSS_MEDIA_TYPE),
    "atom": (render_atom, ATOM_MEDIA_TYPE),
    "json": (render_json, JSON_FEED_MEDIA_TYPE),
    "html": (render_feed_page, HTML_MEDIA_TYPE),
}
FORMATS = tuple(RENDERERS)


def render_feed(
    fmt: str, feed: FeedInfo, entries: Sequence[StoredEntry], updated: float | None
) -> bytes:
    """The document of ``feed`` in format ``fmt`` (a key of :data:`RENDERERS`)."""
    return RENDERERS[fmt][0](feed, entries, updated=updated)


def feed_path(stream: str, part: str | None, fmt: str) -> str:
    """The URL path of a feed document: ``/feeds/NAME.fmt`` or ``/feeds/NAME/VALUE.fmt``."""
    if part is None:
        return f"/feeds/{quote(stream, safe='')}.{fmt}"
    return f"/feeds/{quote(stream, safe='')}/{quote(part_name(part), safe='')}.{fmt}"


def feeds_of(groups: Iterable[FeedGroup]) -> list[FeedInfo]:
    """The feeds of ``groups``, in order."""
    return [feed for group in groups for feed in group.feeds]


def is_split(stream: StreamConfig) -> bool:
    return isinstance(stream.plan, Split)


# A config, or what gives the current one: a daemon's, which a reload replaces
ConfigSource = Config | Callable[[], Config]


def config_getter(config: ConfigSource) -> Callable[[], Config]:
    """``config`` as a function giving the current config."""
    if isinstance(config, Config):
        return lambda: config
    return config


class Catalog:
    """The published feeds of a config, with the split parts found in the store.

    URLs are absolute: ``settings.http.base_url`` when the user set one, else the base
    the caller passes (the server passes its configured host and bound port, never a
    request's ``Host``), else ``http://host:port``.  Titles are plain text; a split
    feed's is its stream's title and its value.
    """

    def __init__(self, config: ConfigSource, store: Store) -> None:
        self._config = config_getter(config)  # (a reload replaces the daemon's config)
        self.store = store
        # (stream, part) -> (the feed's last change, its newest item's date): the index
        # asks on every request, the items are read again only after a change
        self._newest: dict[tuple[str, str], tuple[float | None, int | None]] = {}

    @property
    def config(self) -> Config:
        return self._config()

    def base(self, server_base: str | None = None) -> str:
        http = self.config.settings.http
        if http.base_url:
            return http.base_url.rstrip("/")
        if server_base:
            return server_base.rstrip("/")
        return http.public_base

    def published(self) -> list[StreamConfig]:
        return [s for s in self.config.streams.values() if s.publish is not None]

    def _info(self, stream: StreamConfig, part: str | None, base: str) -> FeedInfo:
        publish = stream.publish
        assert publish is not None
        title = label(publish.title, stream.name)
        name = stream.name if part is None else f"{stream.name}/{part}"
        return FeedInfo(
            name=name,
            stream=stream.name,
            part=part or "",
            title=title if part is None else f"{title} — {part_label(part)}",
            description=publish.description,
            keep=publish.keep_count,
            rss_url=base + feed_path(stream.name, part, "rss"),
            atom_url=base + feed_path(stream.name, part, "atom"),
            html_url=base + feed_path(stream.name, part, "html"),
            split=part is not None,
            json_url=base + feed_path(stream.name, part, "json"),
            index_url=f"{base}/",
            hubs=hub_urls(self.config, base),
        )

    def _late_part(self, stream: StreamConfig) -> bool:
        """Whether the stream publishes its late items (a window over publication time
        with ``late: publish``) and has some: the feed ``NAME/late``."""
        if not publishes_late(stream.plan):
            return False
        return LATE_PART in self.store.parts(stream.name)

    def _parts(self, stream: StreamConfig) -> list[str]:
        # "" is the part of unsplit output; a split stream never publishes it.
        return [p for p in self.store.parts(stream.name) if p != ""]

    def groups(self, server_base: str | None = None) -> list[FeedGroup]:
        """Every published stream, in config order, with its current feeds."""
        base = self.base(server_base)
        out: list[FeedGroup] = []
        for stream in self.published():
            publish = stream.publish
            assert publish is not None
            split = is_split(stream)
            feeds = tuple(self._info(stream, p, base) for p in self._feed_parts(stream))
            out.append(
                FeedGroup(
                    stream=stream.name,
                    title=label(publish.title, stream.name),
                    description=publish.description,
                    split=split,
                    html_url=f"{base}/#{html_anchor(stream.name)}",
                    feeds=feeds,
                )
            )
        return out

    def _feed_parts(self, stream: StreamConfig) -> list[str | None]:
        """The parts of ``stream`` that are feeds now (None: the stream's own feed)."""
        if is_split(stream):
            return list(self._parts(stream))
        return [None, LATE_PART] if self._late_part(stream) else [None]

    def count(self) -> int:
        """How many feeds :meth:`feeds` would list, without making them (/healthz at
        100,000 streams)."""
        return sum(len(self._feed_parts(stream)) for stream in self.published())

    def feeds(self, server_base: str | None = None) -> list[FeedInfo]:
        """Every feed document that exists now (split parts included)."""
        return feeds_of(self.groups(server_base))

    def lookup(
        self, name: str, value: str | None = None, server_base: str | None = None
    ) -> FeedInfo | None:
        """The feed ``name`` (or part ``value`` of split stream ``name``), else None.

        ``value`` may be given as it is or still percent-quoted.
        """
        stream = self.config.streams.get(name)
        if stream is None or stream.publish is None:
            return None
        base = self.base(server_base)
        split = is_split(stream)
        if value is None:
            return None if split else self._info(stream, None, base)
        if not split:
            late = value == LATE_PART and self._late_part(stream)
            return self._info(stream, LATE_PART, base) if late else None
        parts = set(self._parts(stream))
        candidates = (value, unquote(value), unquote(unquote(value)))
        for candidate in candidates:
            if candidate in parts:
                return self._info(stream, candidate, base)
        if any("~" in c for c in candidates):  # the name of a long value?
            for part in parts:
                if part_name(part) in candidates:
                    return self._info(stream, part, base)
        return None

    def stats(self, feeds: Iterable[FeedInfo]) -> dict[str, FeedStats]:
        """Each feed's item count, last change, and the date of its newest item."""
        out: dict[str, FeedStats] = {}
        for f in feeds:
            updated = self.store.feed_updated(f.stream, f.part)
            out[f.name] = FeedStats(
                count=self.store.count(f.stream, f.part),
                updated=updated,
                newest=self._newest_date(f, updated),
            )
        return out

    def _newest_date(self, feed: FeedInfo, updated: float | None) -> int | None:
        """The latest date among the items the feed shows (their own, else ingest time)."""
        key = (feed.stream, feed.part)
        known = self._newest.get(key)
        if known is not None and known[0] == updated:
            return known[1]
        entries = self.store.latest(feed.stream, feed.part, feed.keep)
        dates = [d for d in map(newest_date, entries) if d is not None]
        newest = max(dates, default=None)
        self._newest[key] = (updated, newest)
        return newest
