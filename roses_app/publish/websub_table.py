"""WebSub subscriptions kept in SQLite (``DATA_DIR/websub.sqlite``) and
the hub URLs feeds advertise (here, so that the catalog can import them).

A subscription is keyed by (topic, callback), as the WebSub Recommendation asks: a
subscriber that subscribes again renews its lease and may change its secret.  The
table survives restarts; expired leases are purged by the hub and never delivered to.
Secrets are stored as given: the hub needs them to sign every delivery.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from roses_app.config.model import Config
from roses_app.errors import StoreError
from roses_app.websub_signature import SIGNATURE_HEADER, sign, signature_ok

__all__ = ["HUB_PATH", "SIGNATURE_HEADER", "Subscription", "SubscriptionTable", "host_of",
           "hub_urls", "sign", "signature_ok"]  # fmt: skip

HUB_PATH = "/websub/hub"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS subscriptions (
    topic         TEXT    NOT NULL,
    callback      TEXT    NOT NULL,
    secret        TEXT,
    lease_seconds INTEGER NOT NULL,
    expires_at    REAL    NOT NULL,
    stream        TEXT    NOT NULL,
    part          TEXT    NOT NULL,
    base          TEXT    NOT NULL,
    created_at    REAL    NOT NULL,
    host          TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (topic, callback)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS subscriptions_feed ON subscriptions (stream, part);
"""
# after the host column exists (tables written before the caps have none: it is added);
# both cover what the caps count (live ones), so counting reads no row
_CAP_INDEXES = """
CREATE INDEX IF NOT EXISTS subscriptions_feed_lease ON subscriptions (stream, part, expires_at);
CREATE INDEX IF NOT EXISTS subscriptions_host ON subscriptions (host, expires_at);
"""

_COLUMNS = "topic, callback, secret, lease_seconds, expires_at, stream, part, base, created_at"


def host_of(url: str) -> str:
    """The host of a callback URL, as the hub counts and bounds them (its calls in
    flight, its subscriptions): the name in lower case, without the port."""
    return (urlsplit(url).hostname or "").lower()


def hub_urls(config: Config, base: str) -> tuple[str, ...]:
    """The hubs a feed served under ``base`` advertises: ROSES, then the external one."""
    own = base.rstrip("/") + HUB_PATH
    external = config.settings.websub.external_hub
    return (own, external) if external and external != own else (own,)


@dataclass(frozen=True)
class Caps:
    """How many live subscriptions one feed (``per_topic``: its RSS, Atom and JSON
    topics together, whatever base they were asked under) and one callback host may
    have (``settings.websub.max_subscriptions_per_topic``, ``..._per_callback_host``)."""

    per_topic: int
    per_callback_host: int


@dataclass(frozen=True)
class Capped:
    """A cap a new subscription would pass: ``which`` ("topic" or "callback_host"),
    and how many subscriptions hold its places now."""

    which: str
    count: int

    @property
    def setting(self) -> str:
        return f"settings.websub.max_subscriptions_per_{self.which}"

    def message(self, caps: Caps, topic: str, callback: str) -> str:
        """What the hub answers a request stopped by this cap."""
        if self.which == "topic":
            what = f"per topic: {topic} has {self.count:,}"
            cap = caps.per_topic
        else:
            what = f"per callback host: {host_of(callback)} has {self.count:,}"
            cap = caps.per_callback_host
        return (
            f"this hub takes at most {cap:,} subscriptions {what} ({self.setting} on the "
            "hub's side); unsubscribe some first or use another hub"
        )


@dataclass(frozen=True)
class Subscription:
    """One verified subscription: ``topic`` is the feed URL, ``(stream, part)`` its
    feed in the store, ``base`` the server base the topic was resolved against."""

    topic: str
    callback: str
    secret: str | None
    lease_seconds: int
    expires_at: float
    stream: str
    part: str
    base: str
    created_at: float


class SubscriptionTable:
    """The subscriptions, safe to use from any thread (one connection, one lock)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), check_same_thread=False)
            with self._conn:
                self._conn.executescript(_SCHEMA)
                self._add_hosts(self._conn)
                self._conn.executescript(_CAP_INDEXES)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the WebSub subscriptions {self.path}: {exc}") from exc

    @staticmethod
    def _add_hosts(conn: sqlite3.Connection) -> None:
        """A table from before the subscription caps: its host column, filled in."""
        columns = {row[1] for row in conn.execute("PRAGMA table_info(subscriptions)")}
        if "host" in columns:
            return
        conn.execute("ALTER TABLE subscriptions ADD COLUMN host TEXT NOT NULL DEFAULT ''")
        rows = conn.execute("SELECT topic, callback FROM subscriptions").fetchall()
        conn.executemany(
            "UPDATE subscriptions SET host = ? WHERE topic = ? AND callback = ?",
            [(host_of(callback), topic, callback) for topic, callback in rows],
        )

    @contextmanager
    def _locked(self, what: str) -> Iterator[sqlite3.Connection]:
        try:
            with self._lock, self._conn:  # one transaction, committed on exit
                yield self._conn
        except sqlite3.Error as exc:
            raise StoreError(f"cannot {what} in {self.path}: {exc}") from exc

    def upsert(self, sub: Subscription, caps: Caps | None = None) -> Capped | None:
        """Add a subscription, or renew it (new lease, secret and base).  With ``caps``,
        a new one is added only if its feed and its callback's host have fewer live
        subscriptions than they allow, counted in the same transaction (two requests
        verified at once cannot both take the last place); else which cap stops it."""
        with self._locked("record a WebSub subscription") as conn:
            if caps is not None:
                capped = self._over(conn, sub, caps, sub.created_at)
                if capped is not None:
                    return capped
            conn.execute(
                f"INSERT INTO subscriptions({_COLUMNS}, host)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(topic, callback) DO UPDATE SET secret = excluded.secret,"
                " lease_seconds = excluded.lease_seconds, expires_at = excluded.expires_at,"
                " stream = excluded.stream, part = excluded.part, base = excluded.base",
                (
                    sub.topic,
                    sub.callback,
                    sub.secret,
                    sub.lease_seconds,
                    sub.expires_at,
                    sub.stream,
                    sub.part,
                    sub.base,
                    sub.created_at,
                    host_of(sub.callback),
                ),
            )
        return None

    def over_cap(self, sub: Subscription, caps: Caps, now: float) -> Capped | None:
        """Which cap a new subscription ``sub`` would pass, if any (a renewal: none)."""
        with self._locked("count WebSub subscriptions") as conn:
            return self._over(conn, sub, caps, now)

    @staticmethod
    def _over(conn: sqlite3.Connection, sub: Subscription, caps: Caps, now: float) -> Capped | None:
        renewal = conn.execute(
            "SELECT 1 FROM subscriptions WHERE topic = ? AND callback = ? AND expires_at > ?",
            (sub.topic, sub.callback, now),
        ).fetchone()
        if renewal is not None:
            return None  # it holds its place already: a renewal never counts twice
        (feed,) = conn.execute(
            "SELECT count(*) FROM subscriptions WHERE stream = ? AND part = ? AND expires_at > ?",
            (sub.stream, sub.part, now),
        ).fetchone()
        if feed >= caps.per_topic:
            return Capped("topic", int(feed))
        host = host_of(sub.callback)
        (at_host,) = conn.execute(
            "SELECT count(*) FROM subscriptions WHERE host = ? AND expires_at > ?", (host, now)
        ).fetchone()
        if at_host >= caps.per_callback_host:
            return Capped("callback_host", int(at_host))
        return None

    def remove(self, topic: str, callback: str) -> bool:
        with self._locked("remove a WebSub subscription") as conn:
            cur = conn.execute(
                "DELETE FROM subscriptions WHERE topic = ? AND callback = ?", (topic, callback)
            )
        return cur.rowcount > 0

    def for_feed(self, stream: str, part: str, now: float) -> list[Subscription]:
        """The subscriptions to a feed whose lease has not expired at ``now``."""
        with self._locked("read WebSub subscriptions") as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM subscriptions"
                " WHERE stream = ? AND part = ? AND expires_at > ? ORDER BY topic, callback",
                (stream, part, now),
            ).fetchall()
        return [Subscription(*r) for r in rows]

    def all(self) -> list[Subscription]:
        with self._locked("read WebSub subscriptions") as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM subscriptions ORDER BY topic, callback"
            ).fetchall()
        return [Subscription(*r) for r in rows]

    def count(self) -> int:
        """How many subscriptions are recorded (expired ones until purged)."""
        with self._locked("count WebSub subscriptions") as conn:
            (n,) = conn.execute("SELECT count(*) FROM subscriptions").fetchone()
        return int(n)

    def purge(self, now: float) -> int:
        """Forget the subscriptions whose lease ended; how many."""
        with self._locked("purge expired WebSub subscriptions") as conn:
            cur = conn.execute("DELETE FROM subscriptions WHERE expires_at <= ?", (now,))
        return cur.rowcount

    def close(self) -> None:
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._conn.close()
