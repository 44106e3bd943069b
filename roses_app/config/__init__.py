"""feeds.yaml: loading, validation and the typed model."""

from roses_app.config.model import (
    Config,
    FeedSource,
    FetchSettings,
    HttpSettings,
    Publish,
    Settings,
    SourceConfig,
    SparkSettings,
    StreamConfig,
)

__all__ = [
    "Config",
    "FeedSource",
    "FetchSettings",
    "HttpSettings",
    "Publish",
    "Settings",
    "SourceConfig",
    "SparkSettings",
    "StreamConfig",
]
