"""The config the publishing tests share: one source ``src``, a stream ``news`` of
all its items, a split stream ``topics``, and any more streams of ``src``."""

from __future__ import annotations

from pathlib import Path

from roses_app.algebra.plan.operators import Source, Split
from roses_app.config.model import Config, FeedSource, HttpSettings, Publish, Settings, StreamConfig


def publish_config(
    tmp_path: Path,
    news: Publish,
    *,
    split_by: str = "string(category)",
    more: dict[str, Publish | None] | None = None,
    port: int = 0,
    base_url: str | None = None,
) -> Config:
    """``more``: stream name -> its publish settings (None: not published)."""
    src = Source("src")
    streams = {
        "news": StreamConfig("news", src, news),
        "topics": StreamConfig("topics", Split(src, split_by), Publish("Topics")),
    }
    for name, publish in (more or {}).items():
        streams[name] = StreamConfig(name, src, publish)
    return Config(
        path=tmp_path / "feeds.yaml",
        settings=Settings(data_dir=tmp_path, http=HttpSettings("127.0.0.1", port, base_url)),
        sources={"src": FeedSource("src", "file:x.xml", 60.0)},
        streams=streams,
    )
