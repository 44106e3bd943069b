"""Feed connector: fetch sources, parse them, turn entries into canonical items.

Data flow 1 of DESIGN.md: :class:`FeedScheduler` runs :meth:`Poller.poll` for every
source on a jittered interval; a poll fetches (:class:`Fetcher`, conditional GET),
parses (:func:`parse_feed`, feedparser), writes each entry as an ``<item>``
(:func:`xmlize_entry`), hands ``(source, [(xml, published µs | None), ...])`` to a
sink (the spool) and remembers validators, backoff and counters in a
:class:`StateStore`.  Nothing here imports pyspark.
"""

from roses_app.connectors.fetch import (
    Fetcher,
    FetchResult,
    HttpStatusError,
    RetryLaterError,
    parse_retry_after,
)
from roses_app.connectors.poller import Items, Poller, PollResult, PollStatus, Sink
from roses_app.connectors.scheduler import FeedScheduler
from roses_app.connectors.state import SourceState, StateStore
from roses_app.connectors.xmlize import ParsedFeed, clean_text, parse_feed, xmlize_entry

__all__ = [
    "FeedScheduler",
    "FetchResult",
    "Fetcher",
    "HttpStatusError",
    "Items",
    "ParsedFeed",
    "PollResult",
    "PollStatus",
    "Poller",
    "RetryLaterError",
    "Sink",
    "SourceState",
    "StateStore",
    "clean_text",
    "parse_feed",
    "parse_retry_after",
    "xmlize_entry",
]
