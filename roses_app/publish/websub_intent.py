"""WebSub subscription requests: which topics exist, and what a request asks.

A topic is the URL of a feed document ROSES publishes (RSS, Atom or JSON Feed) under
the server's base URL; a request names one, a callback (an http(s) URL, whose address
:mod:`~roses_app.publish.websub_client` checks), an optional lease (granted up to
``settings.websub.lease``: the hub chooses it, WebSub 5.1) and an optional secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import httpx

from roses_app.config.model import Config
from roses_app.errors import RosesError
from roses_app.publish.catalog import Catalog
from roses_app.publish.render import FeedInfo

TOPIC_FORMATS = ("rss", "atom", "json")  # the feed documents one can subscribe to
MAX_SECRET_BYTES = 199  # "MUST be less than 200 bytes"


class HubRequestError(RosesError, ValueError):
    """A subscription request the hub refuses (answered 400 with this message)."""


def topic_url(info: FeedInfo, fmt: str) -> str:
    return {"rss": info.rss_url, "atom": info.atom_url, "json": info.json_url}.get(fmt, "")


def link_header(info: FeedInfo, fmt: str) -> str:
    """``Link`` of a feed document: its hubs and itself (WebSub section 4)."""
    links = [f'<{hub}>; rel="hub"' for hub in info.hubs]
    return ", ".join([*links, f'<{topic_url(info, fmt)}>; rel="self"'])


def with_query(url: str, params: dict[str, str]) -> str:
    """``url`` with ``params`` added to the query it may already have."""
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, urlencode(params)) if q)
    return parts._replace(query=query, fragment="").geturl()


LEASE_DIGITS = 10  # 9,999,999,999 s, over 300 years: more is no lease anyone means


def parse_lease(text: str, longest: int) -> int:
    """``hub.lease_seconds`` → the lease granted: what was asked, at most ``longest``
    (also when none was asked).  Only 1 to ``LEASE_DIGITS`` ASCII digits make a lease
    (no sign, space or other digit: ``int`` would take ``²``, ``+5`` and ``1_0``)."""
    text = text.strip()
    if not text:
        return longest
    if not (text.isascii() and text.isdigit() and len(text) <= LEASE_DIGITS):
        raise HubRequestError(
            f"hub.lease_seconds must be a whole number of seconds, 1 to {LEASE_DIGITS} "
            "digits 0-9 (e.g. 86400), or left out for the hub's longest lease"
        )
    if int(text) == 0:
        raise HubRequestError("hub.lease_seconds must be more than 0 (or left out)")
    return min(int(text), longest)


def _reason(exc: Exception) -> str:
    """Why a URL was refused, without the URL (httpx and urllib say what is wrong
    with it, and some of them quote it)."""
    return "a port out of range" if "port" in str(exc).lower() else type(exc).__name__


def check_callback_url(callback: str) -> None:
    """A callback must be an http(s) URL with a host (and a port, if any, that exists)."""
    parts = urlsplit(callback)
    try:
        parts.port  # noqa: B018 -- raises ValueError for a port out of range
        httpx.URL(callback)
    except (ValueError, httpx.InvalidURL) as exc:
        raise HubRequestError(f"hub.callback is not a valid URL ({_reason(exc)})") from exc
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise HubRequestError("hub.callback must be an http(s) URL with a host")


def parse_form(body: bytes) -> dict[str, str]:
    """A form-encoded body; a repeated field keeps its last value."""
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HubRequestError(f"the request body is not a form: {exc}") from exc
    return {k: v[-1] for k, v in parsed.items()}


@dataclass(frozen=True)
class Intent:
    """A checked subscription request, to verify with the subscriber."""

    mode: str
    topic: str
    callback: str
    lease_seconds: int
    secret: str | None
    stream: str
    part: str
    base: str


class Topics:
    """The topics of the feeds ``catalog`` publishes, and the requests about them."""

    def __init__(self, config: Config, catalog: Catalog) -> None:
        self.config = config
        self.catalog = catalog

    def resolve(self, topic: str, base: str | None) -> tuple[FeedInfo, str] | None:
        """The published feed document at URL ``topic`` under ``base``, and its format."""
        prefix = self.catalog.base(base) + "/feeds/"
        if not topic.startswith(prefix) or any(c in topic for c in "?#"):
            return None
        stem, dot, fmt = topic[len(prefix) :].rpartition(".")
        if not dot or fmt not in TOPIC_FORMATS:
            return None
        name, slash, value = stem.partition("/")
        info = self.catalog.lookup(unquote(name), unquote(value) if slash else None, base)
        if info is None or topic_url(info, fmt) != topic:
            return None
        return info, fmt

    def intent(self, form: dict[str, str], base: str) -> Intent:
        """Check a subscription request; raise :class:`HubRequestError` if refused."""
        mode = form.get("hub.mode", "")
        if mode not in ("subscribe", "unsubscribe"):
            raise HubRequestError("hub.mode must be subscribe or unsubscribe")
        callback = form.get("hub.callback", "")
        check_callback_url(callback)
        topic = form.get("hub.topic", "")
        found = self.resolve(topic, base)
        if found is None:
            raise HubRequestError(
                "hub.topic is not a feed this hub publishes "
                f"(subscribe to a feed URL listed at {self.catalog.base(base)}/feeds.opml)"
            )
        secret = form.get("hub.secret") or None
        if secret is not None and len(secret.encode("utf-8")) > MAX_SECRET_BYTES:
            raise HubRequestError("hub.secret must be less than 200 bytes")
        longest = max(1, int(self.config.settings.websub.lease_seconds))
        lease = parse_lease(form.get("hub.lease_seconds", ""), longest)
        info, _fmt = found
        return Intent(
            mode=mode,
            topic=topic,
            callback=callback,
            lease_seconds=lease,
            secret=secret,
            stream=info.stream,
            part=info.part,
            base=self.catalog.base(base),
        )
