"""What a poll teaches about a feed's rhythm, kept in its state, and its next interval.

The glue between a poll (:mod:`roses_app.connectors.poller`) and the pure rules of
:mod:`roses_app.connectors.refresh`:

* after a document: how many of its items were not in the previous document (their
  short hashes are kept in the state, so a restart keeps counting right), the rate
  estimate updated with that count (a feed's first document is a backlog: its items'
  publication dates give the first estimate), and the publisher's hints (``<ttl>``,
  ``sy:updatePeriod``, ``skipHours``/``skipDays``, HTTP max-age);
* after a 304: no new item, for the time since the last success; HTTP max-age from
  the answer, the document's hints kept;
* the next interval: ``every:`` when the source fixes it, else the adaptive rule, or a
  global budget's share when ``settings.fetch.budget`` is set, moved out of the
  publisher's skipped hours and days.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, replace

from roses_app.config.model import FeedSource, FetchSettings
from roses_app.connectors.refresh import (
    Hints,
    Interval,
    Rate,
    before_pushed_out,
    choose,
    defer,
    observe,
    per_second,
)
from roses_app.connectors.state import SourceState
from roses_app.items import MICROS

Items = list[tuple[str, int | None]]
DAY = 86400.0
WEEK = 7 * DAY
KEY_BYTES = 6  # of an item's hash: 48 bits, collisions negligible within one feed


def item_keys(items: Items) -> list[str]:
    """Short, stable hashes of a document's items (by their whole XML)."""
    return [hashlib.blake2b(xml.encode(), digest_size=KEY_BYTES).hexdigest() for xml, _ in items]


def after_document(state: SourceState, items: Items, hints: Hints, now: float) -> SourceState:
    """``state`` (before this poll) updated with a fetched document's lesson."""
    keys = item_keys(items)
    rate = rate_of(state)
    if state.doc_keys and state.last_success_at is not None:
        seen = set(state.doc_keys.split())
        new = sum(1 for key in keys if key not in seen)
        rate = observe(rate, now - state.last_success_at, new, len(keys))
    elif rate.seconds == 0:
        rate = backlog_rate(items, now)
    return _with(state, rate, hints, len(keys), " ".join(keys))


def backlog_rate(items: Items, now: float) -> Rate:
    """A first estimate from a feed's first document: its items' publication dates
    (as Miniflux and NewsBlur do), so that a busy feed is polled often from its second
    poll on, not after a few polls have taught it, and a quiet one rarely.  The n dated
    items, over the span s from the oldest of them to now, count as n - 1 items in s
    (one item: one in its age), weighed as s within [:func:`backlog_weight`, a day]
    (dates spread over at least half of s; else as s, a day at most): a day at most,
    so that what polls see soon outweighs it.  No date teaches nothing
    (the prior stands).  Dates in the future are ignored; old ones count: twenty items
    over a year say the feed is quiet."""
    dates = sorted(p / MICROS for _, p in items if p is not None and p / MICROS <= now)
    if not dates:
        return Rate()
    span = max(now - dates[0], 1.0)
    gaps = max(len(dates) - 1, 1)
    # dates bunched together (a burst, or every item stamped with the build time) say
    # nothing of a steady rate: only dates spread over the span are extrapolated
    spread = dates[-1] - dates[0] >= span / 2
    weight = min(max(span, backlog_weight(gaps) if spread else 0.0), DAY)
    return Rate(items=gaps * weight / span, seconds=weight)


# A document of BACKLOG_GAPS dated items or more weighs at least BACKLOG_WEIGHT seconds
# of observation, fewer items proportionally less.  Weighed as their span alone, the
# dates of a busy feed lost to the prior (one item per default interval, worth that
# interval): 20 items of the last 5 minutes against a 12-minute prior gave a quarter of
# the rate, and a second poll after 30 more items had pushed the document out.
BACKLOG_WEIGHT = 3600.0
BACKLOG_GAPS = 10


def backlog_weight(gaps: int) -> float:
    """The least weight (seconds) of a first document's ``gaps`` + 1 dated items."""
    return BACKLOG_WEIGHT * min(1.0, gaps / BACKLOG_GAPS)


def after_not_modified(state: SourceState, headers: Mapping[str, str], now: float) -> SourceState:
    """``state`` updated after a 304: nothing new since the last success."""
    from roses_app.connectors.refresh_hints import http_max_age

    rate = rate_of(state)
    if state.last_success_at is not None and state.doc_keys:
        rate = observe(rate, now - state.last_success_at, 0, state.document_items)
    hints = replace(hints_of(state), max_age=http_max_age(headers, now))
    return _with(state, rate, hints, state.document_items, state.doc_keys)


def _with(state: SourceState, rate: Rate, hints: Hints, n: int, keys: str) -> SourceState:
    return replace(
        state,
        rate_items=rate.items,
        rate_seconds=rate.seconds,
        rate_saturated=rate.saturated,
        document_items=n,
        doc_keys=keys,
        hints=dump_hints(hints),
    )


def rate_of(state: SourceState) -> Rate:
    return Rate(state.rate_items, state.rate_seconds, state.rate_saturated)


def dump_hints(hints: Hints) -> str:
    if hints == Hints():
        return ""
    values = asdict(hints)
    values["skip_hours"] = sorted(hints.skip_hours)
    values["skip_days"] = sorted(hints.skip_days)
    return json.dumps({k: v for k, v in values.items() if v not in (None, [])})


def hints_of(state: SourceState) -> Hints:
    """The hints kept in ``state`` (none when absent or unreadable)."""
    if not state.hints:
        return Hints()
    try:
        values = json.loads(state.hints)
        return Hints(
            ttl=_seconds(values.get("ttl")),
            max_age=_seconds(values.get("max_age")),
            update_period=_seconds(values.get("update_period")),
            skip_hours=frozenset(int(h) for h in values.get("skip_hours", []) if 0 <= int(h) < 24),
            skip_days=frozenset(int(d) for d in values.get("skip_days", []) if 0 <= int(d) < 7),
        )
    except (ValueError, TypeError, AttributeError):
        return Hints()


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and value > 0 else None


def next_interval(
    source: FeedSource,
    state: SourceState | None,
    settings: FetchSettings,
    now: float,
    budget: Mapping[str, float] | None = None,
) -> Interval:
    """How long until ``source``'s next poll, and why."""
    if source.fixed:
        every = source.every_seconds if source.every_seconds > 0 else settings.default_every_seconds
        return Interval(every, "every: in feeds.yaml")
    state = state or SourceState(source.name, source.url, source.url)
    hints = hints_of(state)
    prior = source.every_seconds or settings.default_every_seconds
    if budget is not None and source.name in budget:
        chosen = _shared(budget[source.name], state, prior, settings)
    else:
        chosen = choose(
            rate_of(state),
            hints,
            default_every=prior,
            min_every=settings.min_every_seconds,
            max_every=settings.max_every_seconds,
            document_items=state.document_items,
        )
    return defer(now, chosen, hints)


# A feed is at risk when its document fills with new items within this many max_every:
# a backlog that long (the first round of 100,000 new feeds takes ten minutes and
# more) overflows it.  Its smoothed rate starts below the true one (the prior still
# weighs a first document's dates down by up to a fifth, and by more after a few
# quiet polls), hence more than one max_every.
RISK_HORIZON = 4.0


def at_risk(source: FeedSource, state: SourceState | None, settings: FetchSettings) -> bool:
    """Whether a late poll of ``source`` loses items: at its estimated rate its document
    fills with new items within RISK_HORIZON times ``max_every`` (a busy feed).  Under
    a backlog such a poll goes first (see :mod:`~roses_app.connectors.pollqueue`); a
    feed never polled has no document yet and is not at risk (its first poll catches
    what it holds)."""
    if state is None or state.document_items <= 0:
        return False
    lam = per_second(rate_of(state), source.every_seconds or settings.default_every_seconds)
    return lam > 0 and state.document_items / lam <= RISK_HORIZON * settings.max_every_seconds


def _shared(seconds: float, state: SourceState, prior: float, settings: FetchSettings) -> Interval:
    """The budget's share, unless the document would fill with new items before then:
    completeness first (that feed spends a little more than its share)."""
    bound = before_pushed_out(rate_of(state), state.document_items, prior)
    if bound is not None and bound < seconds:
        return Interval(
            max(settings.min_every_seconds, bound),
            f"its document ({state.document_items} items) would fill with new ones within "
            "its share of settings.fetch.budget: polled before",
        )
    return Interval(seconds, "share of settings.fetch.budget for its rate")
