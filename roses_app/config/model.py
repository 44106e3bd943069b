"""Typed, frozen settings built from feeds.yaml.

Settings describe what the user asked for; runtime state (ETags, backoff, offsets)
lives elsewhere (spool, connector state) so that a config can be reloaded freely.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from roses_app.algebra.plan.operators import Node, Origin, Stream
from roses_app.dates import DEFAULT_MAX_FUTURE


@dataclass(frozen=True)
class HttpSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    # Public base URL used in links inside feeds; default http://host:port
    base_url: str | None = None

    @property
    def public_base(self) -> str:
        return (self.base_url or f"http://{self.host}:{self.port}").rstrip("/")


@dataclass(frozen=True)
class SparkSettings:
    master: str = "local[*]"
    shuffle_partitions: int = 2
    # Seconds between micro-batches of the daemon's streaming queries: an item waits for
    # half of it on average before its batch starts (an idle trigger costs one listing
    # of the spool's new files per query: ~3-5% of a core at 0.5 s).
    trigger_seconds: float = 0.5
    # While polls keep finding new items, their spool appends (each a micro-batch, ~0.3
    # core-seconds of the JVM whatever its size) are at least this far apart; 0: off.
    busy_trigger_seconds: float = 2.0
    conf: tuple[tuple[str, str], ...] = ()
    # The driver JVM's classes archived once and mapped at each start (spark/classarchive.py)
    class_archive: bool = True


@dataclass(frozen=True)
class FetchSettings:
    timeout_seconds: float = 30.0
    max_bytes: int = 20 * 1024 * 1024
    user_agent: str = "ROSES/0.1 (+https://github.com/roses)"
    default_every_seconds: float = 900.0
    max_backoff_seconds: float = 6 * 3600.0
    concurrency: int = 100  # fetches in flight at once, all hosts together
    per_host: int = 4  # fetches in flight to one host (host:port)
    host_spacing_seconds: float = 0.1  # between two fetch starts on one host
    parse_workers: int = 1  # processes that parse and xml-ize fetched documents
    max_items: int = 10_000  # entries taken from one document, its first (newest) ones
    min_every_seconds: float = 120.0  # adaptive refresh: never more often
    max_every_seconds: float = 3600.0  # adaptive refresh: never less often
    budget_per_hour: float | None = None  # adaptive refresh: polls per hour, all sources


@dataclass(frozen=True)
class WebSubSettings:
    """``settings.websub``: ROSES is the hub of its feeds; ``external_hub`` is also
    pinged (``hub.mode=publish``) when a feed changes; ``lease_seconds`` is the lease
    given when a subscriber asks none, and the longest one granted.

    Callbacks on loopback, private and other non-public addresses are refused unless
    ``allow_private_callbacks``.  Each call to a callback ends after ``timeout_seconds``;
    at most ``concurrency`` verifications, and as many deliveries, are in flight, at
    most ``per_host`` of each to one host; at most ``verify_queue`` subscription
    requests wait for their verification (a tenth of them for one host, at least
    ``per_host``): more are answered 503 with Retry-After.  One feed (its topics in all
    formats) takes at most ``max_subscriptions_per_topic`` live subscriptions, the
    callbacks of one host at most ``max_subscriptions_per_callback_host``: new ones past
    a cap are answered 403 (a renewal keeps its place)."""

    external_hub: str | None = None
    lease_seconds: float = 10 * 86400.0
    allow_private_callbacks: bool = False
    timeout_seconds: float = 10.0
    concurrency: int = 50
    per_host: int = 4
    verify_queue: int = 1000
    max_subscriptions_per_topic: int = 100_000
    max_subscriptions_per_callback_host: int = 1_000


@dataclass(frozen=True)
class LimitSettings:
    """``settings.limits``: what one expression may take on one item.  An item on which
    an expression (XPath, XQuery, a regex) runs longer than ``item_seconds`` is
    dropped by that step; ``worker_memory`` bounds each Python worker's data memory
    (RLIMIT_DATA: what it has reserved, about 1.2 GB at its start), and an item whose
    evaluation needs more is dropped.  None: no limit."""

    item_seconds: float | None = 5.0
    worker_memory: int | None = 3 * 1024**3


@dataclass(frozen=True)
class ConsoleSettings:
    """``settings.console``: the operator's web console at ``/console/`` (off when the
    section is absent or ``enabled: false``).  ``password_hash`` is the scrypt hash
    ``roses console-password`` prints (from feeds.yaml, else the environment variable
    ``ROSES_CONSOLE_PASSWORD_HASH``); ``user`` names the operator in the audit log;
    ``session_seconds`` is how long a login lasts.  When ``settings.http.host`` is not
    a loopback address the console refuses every request unless ``allow_remote``."""

    password_hash: str
    user: str = "admin"
    allow_remote: bool = False
    session_seconds: float = 12 * 3600.0


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path("data")
    http: HttpSettings = HttpSettings()
    spark: SparkSettings = SparkSettings()
    fetch: FetchSettings = FetchSettings()
    # prefix -> namespace URI, on top of the predeclared feed namespaces
    namespaces: tuple[tuple[str, str], ...] = ()
    # How late (µs) an event may come and still update windows and joins: Spark's
    # watermark delay, and what the reference evaluator holds back as undecided.
    lateness: int = 0
    # A publication date more than this (µs) after its item's ingest time is not
    # believed: the item keeps its ingest time (see roses_app.algebra.time.eventtime).
    max_future: int = DEFAULT_MAX_FUTURE
    # How often the daemon merges the spool's archived files (seconds).
    compact_every_seconds: float = 600.0
    websub: WebSubSettings = WebSubSettings()
    console: ConsoleSettings | None = None  # None: the console is off (/console/ is a 404)
    limits: LimitSettings = LimitSettings()


@dataclass(frozen=True)
class FeedSource:
    """``sources: NAME: {feed: URL, every: DURATION, categories: [...]}``; URL is
    http(s): or file:; without ``every`` the interval is adaptive.  ``categories``
    (e.g. the folders of an OPML import) are added to each of the source's items as
    ``<category>``."""

    name: str
    url: str
    every_seconds: float
    categories: tuple[str, ...] = ()
    time: str = "ingest"  # ingest | published: the items' event time (Source.time)
    origin: Origin = field(default=Origin(), compare=False)
    # ``every:`` given: polled every ``every_seconds``; else adaptive refresh, starting
    # there (settings.fetch.every) and following the feed's publication rate
    fixed: bool = True


MailKind = Literal["imap", "maildir", "mbox", "smtp"]
ImapSecurity = Literal["ssl", "starttls", "none"]


@dataclass(frozen=True)
class ImapSettings:
    """``mail: {imap: {...}}``; the password is read from ``$password_env`` at run time."""

    host: str
    user: str
    password_env: str
    port: int = 993
    security: ImapSecurity = "ssl"
    folder: str = "INBOX"
    idle: bool = True
    mark_seen: bool = False
    delete: bool = False


@dataclass(frozen=True)
class SmtpSettings:
    """``mail: {smtp: {...}}``: an inbound SMTP server; ``accept`` are fnmatch patterns."""

    host: str = "127.0.0.1"
    port: int = 2525
    accept: tuple[str, ...] = ()


@dataclass(frozen=True)
class MailSource:
    """``sources: NAME: {mail: {imap|maildir|mbox|smtp: ...}, every: DURATION}``.

    ``path`` is set for maildir and mbox (absolute), ``imap`` and ``smtp`` for theirs.
    ``every_seconds`` is the polling interval (IMAP: when IDLE is off or not offered,
    and the safety re-check while idling); it does not apply to smtp.
    """

    name: str
    kind: MailKind
    every_seconds: float
    path: Path | None = None
    imap: ImapSettings | None = None
    smtp: SmtpSettings | None = None
    time: str = "ingest"  # ingest | published: the items' event time (Source.time)
    origin: Origin = field(default=Origin(), compare=False)

    @property
    def mailbox(self) -> str:
        """What the source reads, as one string (its state restarts when this changes)."""
        if self.imap is not None:
            i = self.imap
            return f"imap://{i.user}@{i.host}:{i.port}/{i.folder}"
        if self.smtp is not None:
            return f"smtp://{self.smtp.host}:{self.smtp.port}"
        return f"{self.kind}:{self.path}"


SourceConfig = FeedSource | MailSource


@dataclass(frozen=True, slots=True)  # (one per stream, as below)
class Publish:
    """How a stream is published; ``keep_count`` items per feed document."""

    title: str
    description: str = ""
    keep_count: int = 50


@dataclass(frozen=True, slots=True)  # a hundred thousand subscriptions: 100,000
class StreamConfig:
    name: str
    plan: Node
    publish: Publish | None
    origin: Origin = field(default=Origin(), compare=False)

    @property
    def published(self) -> bool:
        return self.publish is not None

    @property
    def stream(self) -> Stream:
        """The continuous query alone, as the compiler and the evaluator take it."""
        return Stream(self.name, self.plan, self.origin)


@dataclass(frozen=True)
class Config:
    path: Path
    settings: Settings
    sources: dict[str, SourceConfig]
    streams: dict[str, StreamConfig]
