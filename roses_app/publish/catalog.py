"""Which feeds exist: the published streams of the config and the split values stored.

A stream with ``publish:`` is one feed, ``/feeds/NAME.rss|.atom``.  A split stream is one
feed per value its split function returned so far, ``/feeds/NAME/VALUE.rss|.atom`` with
VALUE percent-quoted (nothing safe), so new feeds appear as new values appear.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import quote, unquote

from roses_app.algebra.plan import Split
from roses_app.config.model import Config, StreamConfig
from roses_app.publish.render import FeedGroup, FeedInfo, FeedStats, html_anchor
from roses_app.store import Store

FORMATS = ("rss", "atom")


def feed_path(stream: str, part: str | None, fmt: str) -> str:
    """The URL path of a feed document: ``/feeds/NAME.fmt`` or ``/feeds/NAME/VALUE.fmt``."""
    if part is None:
        return f"/feeds/{quote(stream, safe='')}.{fmt}"
    return f"/feeds/{quote(stream, safe='')}/{quote(part, safe='')}.{fmt}"


def is_split(stream: StreamConfig) -> bool:
    return isinstance(stream.plan, Split)


class Catalog:
    """The published feeds of a config, with the split parts found in the store.

    URLs are absolute: ``settings.http.base_url`` when the user set one, else the base
    the caller passes (the server passes the request's), else ``http://host:port``.
    """

    def __init__(self, config: Config, store: Store) -> None:
        self.config = config
        self.store = store
        self._configured_base = config.settings.http.base_url
        self._default_base = config.settings.http.public_base

    def base(self, request_base: str | None = None) -> str:
        if self._configured_base:
            return self._configured_base.rstrip("/")
        if request_base:
            return request_base.rstrip("/")
        return self._default_base

    def published(self) -> list[StreamConfig]:
        return [s for s in self.config.streams.values() if s.publish is not None]

    def _info(self, stream: StreamConfig, part: str | None, base: str) -> FeedInfo:
        publish = stream.publish
        assert publish is not None
        title = publish.title.strip() or stream.name
        name = stream.name if part is None else f"{stream.name}/{part}"
        return FeedInfo(
            name=name,
            stream=stream.name,
            part=part or "",
            title=title if part is None else f"{title} — {part}",
            description=publish.description,
            keep=publish.keep_count,
            rss_url=base + feed_path(stream.name, part, "rss"),
            atom_url=base + feed_path(stream.name, part, "atom"),
            html_url=f"{base}/#{html_anchor(name)}",
            split=part is not None,
        )

    def _parts(self, stream: StreamConfig) -> list[str]:
        # "" is the part of unsplit output; a split stream never publishes it.
        return [p for p in self.store.parts(stream.name) if p != ""]

    def groups(self, request_base: str | None = None) -> list[FeedGroup]:
        """Every published stream, in config order, with its current feeds."""
        base = self.base(request_base)
        out: list[FeedGroup] = []
        for stream in self.published():
            publish = stream.publish
            assert publish is not None
            split = is_split(stream)
            parts: Iterable[str | None] = self._parts(stream) if split else [None]
            feeds = tuple(self._info(stream, p, base) for p in parts)
            out.append(
                FeedGroup(
                    stream=stream.name,
                    title=publish.title.strip() or stream.name,
                    description=publish.description,
                    split=split,
                    html_url=f"{base}/#{html_anchor(stream.name)}",
                    feeds=feeds,
                )
            )
        return out

    def feeds(self, request_base: str | None = None) -> list[FeedInfo]:
        """Every feed document that exists now (split parts included)."""
        return [f for g in self.groups(request_base) for f in g.feeds]

    def lookup(
        self, name: str, value: str | None = None, request_base: str | None = None
    ) -> FeedInfo | None:
        """The feed ``name`` (or part ``value`` of split stream ``name``), else None.

        ``value`` may be given as it is or still percent-quoted.
        """
        stream = self.config.streams.get(name)
        if stream is None or stream.publish is None:
            return None
        base = self.base(request_base)
        split = is_split(stream)
        if value is None:
            return None if split else self._info(stream, None, base)
        if not split:
            return None
        parts = set(self._parts(stream))
        for candidate in (value, unquote(value), unquote(unquote(value))):
            if candidate in parts:
                return self._info(stream, candidate, base)
        return None

    def stats(self, feeds: Iterable[FeedInfo]) -> dict[str, FeedStats]:
        return {
            f.name: FeedStats(
                count=self.store.count(f.stream, f.part),
                updated=self.store.feed_updated(f.stream, f.part),
            )
            for f in feeds
        }
