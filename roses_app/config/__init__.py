"""feeds.yaml: loading, validation and the typed model."""

from roses_app.config.durations import parse_duration, parse_size
from roses_app.config.loader import format_problems, load_config, parse_config
from roses_app.config.model import (
    Config,
    FeedSource,
    FetchSettings,
    HttpSettings,
    ImapSettings,
    MailSource,
    Publish,
    Settings,
    SmtpSettings,
    SourceConfig,
    SparkSettings,
    StreamConfig,
)

__all__ = [
    "Config",
    "FeedSource",
    "FetchSettings",
    "HttpSettings",
    "ImapSettings",
    "MailSource",
    "Publish",
    "Settings",
    "SmtpSettings",
    "SourceConfig",
    "SparkSettings",
    "StreamConfig",
    "format_problems",
    "load_config",
    "parse_config",
    "parse_duration",
    "parse_size",
]
