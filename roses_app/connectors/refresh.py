"""Adaptive refresh: poll each feed about as often as it publishes (pure: no I/O).

A fixed ``every`` is wrong both ways: a feed that publishes once a week is fetched a
thousand times for nothing, and one that publishes forty items an hour into a
twenty-item document loses items between two polls.  Following the refresh
strategies of the ROSES project (Horincar et al.: estimate each feed's publication
rate online, poll where it buys freshness) and what Miniflux (``entry_frequency``)
and NewsBlur do, the connector keeps a small decayed rate estimate per feed and
derives the next interval from it.  Nothing here fetches, sleeps or keeps state:
the scheduler stores a :class:`Rate` per feed and calls these functions.

The API (times in seconds, rates in items per second)::

    hints_from(feed, body, headers, now) -> Hints       # refresh_hints
        feed: feedparser's parsed.feed (or {}), body: the document's bytes,
        headers: the response's, lower-case names; never raises
    observe(rate, elapsed, new_items, document_items, *, half_life=7 days) -> Rate
        after each successful poll (a 304: new_items=0); not after a feed's first
        poll, whose items are its backlog, not a rate
    per_second(rate, prior_every) -> float
    choose(rate, hints, *, default_every, min_every, max_every, document_items)
        -> Interval(seconds, reason)
    defer(last_poll, interval, hints) -> Interval       # skipHours / skipDays
    next_poll_at(last_poll, interval, hints) -> float
    budgeted(rates, budget_per_hour, *, min_every, max_every) -> list[float]

:func:`choose` aims at one new item per poll (``1 / rate``) but polls before half a
document's worth of items can arrive (a quarter after a poll that found only new
items); the publisher's ``<ttl>``, HTTP max-age and ``sy:updatePeriod`` are a lower
bound (never poll more often than asked) up to ``max_every``; the result is clamped
to ``[min_every, max_every]`` and its ``reason`` says which rule decided.
:func:`budgeted` shares a global number of polls per hour between feeds so that
the items' expected delay is least.  Bad configuration (``min_every <= 0``,
``max_every < min_every``, a non-positive half-life or prior) raises
:class:`ValueError`; odd measurements (negative or non-finite) count as zero.
"""

from __future__ import annotations

import math
import sys
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import accumulate

from roses_app.connectors.refresh_hints import Hints, hints_from

__all__ = [
    "Hints",
    "Interval",
    "Rate",
    "before_pushed_out",
    "budgeted",
    "choose",
    "defer",
    "hints_from",
    "next_poll_at",
    "observe",
    "per_second",
]

WEEK = 7 * 86400.0
# A saturated poll's count is a lower bound; counted twice, repeated saturated polls
# raise the estimate geometrically until a poll sees an old item again.
SATURATION_FACTOR = 2.0
DOCUMENT_SHARE = 0.5  # poll before this share of the document can be replaced
SATURATED_SHARE = 0.25  # ... and this share after a poll that found only new items
_HOURS = frozenset(range(24))
_DAYS = frozenset(range(7))


@dataclass(frozen=True)
class Rate:
    """A feed's publication rate, as decayed sums (store one per feed)."""

    items: float = 0.0  # decayed count of new items seen
    seconds: float = 0.0  # decayed time observed
    saturated: bool = False  # the last poll found only new items: some may be lost


@dataclass(frozen=True)
class Interval:
    """The time to wait before the next poll, and why (for logs and pages)."""

    seconds: float
    reason: str


def observe(
    rate: Rate, elapsed: float, new_items: int, document_items: int, *, half_life: float = WEEK
) -> Rate:
    """``rate`` after a successful poll ``elapsed`` seconds after the previous one.

    Both sums decay by ``2 ** (-elapsed / half_life)`` first, so the estimate follows
    a feed whose rhythm changes; for polls at a steady interval their ratio is an
    unbiased estimate of a steady rate.  When every item of the document is new
    (``new_items >= document_items > 0``) more may have been pushed out unseen: the
    poll counts :data:`SATURATION_FACTOR` times, so the estimate (and with
    :func:`choose` the polling rate) rises until polls overlap again."""
    if not half_life > 0:
        raise ValueError(f"half_life must be > 0, not {half_life}")
    elapsed = elapsed if 0 < elapsed < math.inf else 0.0
    new = max(0, new_items)
    saturated = 0 < document_items <= new
    counted = new * SATURATION_FACTOR if saturated else float(new)
    decay = 0.5 ** (elapsed / half_life)
    return Rate(
        items=_finite(rate.items) * decay + counted,
        seconds=_finite(rate.seconds) * decay + elapsed,
        saturated=saturated,
    )


def per_second(rate: Rate, prior_every: float) -> float:
    """The smoothed rate: the observations plus a prior of one item per
    ``prior_every`` seconds, worth ``prior_every`` seconds of observation.  A new feed
    is polled at the default interval; a silent one drifts slowly toward rare polls
    (its rate tends to ``1 / (prior_every + 1.44 half-lives)``), never to zero."""
    if not prior_every > 0 or prior_every == math.inf:
        raise ValueError(f"prior_every must be a positive number of seconds, not {prior_every}")
    seconds = _finite(rate.seconds) + prior_every
    return (_finite(rate.items) + 1.0) / seconds if seconds < math.inf else 0.0


def _finite(value: float) -> float:
    """A non-negative sum as stored; NaN and negatives (a corrupt state) count as 0."""
    return value if value >= 0 else 0.0


# -- one feed's interval ---------------------------------------------------------------


def choose(
    rate: Rate,
    hints: Hints,
    *,
    default_every: float,
    min_every: float,
    max_every: float,
    document_items: int,
) -> Interval:
    """The interval until the next poll (see the module's docstring for the rules).

    For a given ``hints``, ``document_items`` and ``rate.saturated``, a higher rate
    never gives a longer interval."""
    _check_bounds(min_every, max_every)
    lam = per_second(rate, default_every)
    per_hour = _number(lam * 3600.0)
    seconds = 1.0 / lam if lam > 0 else math.inf
    reason = f"rate {per_hour} items/h: about one new item per poll"
    before_lost = before_pushed_out(rate, document_items, default_every)
    if before_lost is not None and before_lost < seconds:
        seconds = before_lost
        reason = (
            f"document holds {document_items} item{'' if document_items == 1 else 's'} "
            f"at {per_hour}/h: polled before they are pushed out"
        )
        if rate.saturated:
            reason += " (the last poll found only new items)"
    floor, why = publisher_floor(hints)
    if floor is not None and seconds < floor:
        if floor >= max_every:
            return Interval(max_every, f"max_every ({why} is longer)")
        seconds, reason = floor, why
    if seconds < min_every:
        return Interval(min_every, f"min_every (the rule gave {_duration(seconds)}: {reason})")
    if seconds > max_every:
        return Interval(max_every, f"max_every (the rule gave {_duration(seconds)}: {reason})")
    return Interval(seconds, reason)


def before_pushed_out(rate: Rate, document_items: int, prior_every: float) -> float | None:
    """The longest interval that polls before a share of the document can be replaced
    by new items (a quarter after a poll that found only new ones); None without a
    document or a rate."""
    lam = per_second(rate, prior_every)
    if document_items <= 0 or lam <= 0:
        return None
    share = SATURATED_SHARE if rate.saturated else DOCUMENT_SHARE
    return share * document_items / lam


def publisher_floor(hints: Hints) -> tuple[float | None, str]:
    """The longest of the publisher's "not more often than" hints, and its words."""
    said = [
        (hints.ttl, f"<ttl> {_number((hints.ttl or 0) / 60)} min"),
        (hints.max_age, f"HTTP max-age {_number(hints.max_age or 0)} s"),
        (hints.update_period, f"sy:updatePeriod every {_duration(hints.update_period or 0)}"),
    ]
    valid = [(value, why) for value, why in said if value is not None and 0 < value < math.inf]
    if not valid:
        return None, ""
    return max(valid, key=lambda pair: pair[0])


def _check_bounds(min_every: float, max_every: float) -> None:
    if not 0 < min_every <= max_every < math.inf:
        raise ValueError(
            f"need 0 < min_every <= max_every < inf, not min_every={min_every}, "
            f"max_every={max_every}"
        )


def _number(value: float) -> str:
    """Two significant digits for people: 0.012, 2.4, 40, 1200."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def _duration(seconds: float) -> str:
    if seconds == math.inf:
        return "forever"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{_number(seconds / size)} {unit}"
    return f"{_number(seconds)} s"


# -- skipHours / skipDays --------------------------------------------------------------


def next_poll_at(last_poll: float, interval: Interval, hints: Hints) -> float:
    """When to poll next: ``last_poll + interval``, moved out of skipped hours/days."""
    return last_poll + defer(last_poll, interval, hints).seconds


def defer(last_poll: float, interval: Interval, hints: Hints) -> Interval:
    """``interval``, or a longer one ending at the first hour (UTC) after it that
    ``<skipHours>`` and ``<skipDays>`` allow.  A list that skips every hour (or every
    day) is ignored: obeying it would mean never polling again."""
    hours = hints.skip_hours if len(hints.skip_hours & _HOURS) < 24 else frozenset()
    days = hints.skip_days if len(hints.skip_days & _DAYS) < 7 else frozenset()
    at = last_poll + interval.seconds
    if not (hours or days) or not math.isfinite(at):
        return interval
    moved, rules = at, set()
    for _ in range(24 * 8):  # an allowed hour comes within a week and a day
        hour, day = int(moved // 3600) % 24, (int(moved // 86400) + 3) % 7  # 1970-01-01: Thu
        if hour not in hours and day not in days:
            break
        rules.add("skipDays" if day in days else "skipHours")
        moved = (moved // 3600 + 1) * 3600
    if moved == at:
        return interval
    rule = "/".join(sorted(rules))
    try:
        when = datetime.fromtimestamp(moved, UTC)
    except (OverflowError, ValueError, OSError):  # beyond year 9999
        return Interval(moved - last_poll, f"{rule}: next poll deferred")
    on = "" if int(moved // 86400) == int(at // 86400) else f"{when:%A} "
    return Interval(moved - last_poll, f"{rule}: next poll at {on}{when:%H:%M} UTC")


# -- a global budget ---------------------------------------------------------------------


def budgeted(
    rates: Sequence[float], budget_per_hour: float, *, min_every: float, max_every: float
) -> list[float]:
    """One interval per feed that spends ``budget_per_hour`` polls per hour in all.

    An item of a feed polled every ``T`` waits ``T / 2`` on average, so the expected
    delay of all items is ``sum(rate * T) / 2``; under ``sum(3600 / T) = budget`` it
    is least (Lagrange, and the clamped water-filling for the bounds) at
    ``T = c / sqrt(rate)`` clamped to ``[min_every, max_every]``.  ``c`` is found by
    bisection on sorted square roots and prefix sums (O(n log n) in all, O(log n) per
    step), keeping the spend at or under the budget.  A feed with rate 0 gets
    ``max_every``.  When even all feeds at ``min_every`` spend less than the budget,
    or all at ``max_every`` more, that clamp is the answer."""
    _check_bounds(min_every, max_every)
    big = sys.float_info.max
    roots = [math.sqrt(min(r, big)) if r > 0 else 0.0 for r in rates]  # NaN, < 0: 0
    ordered = sorted(root for root in roots if root > 0)
    c = _budget_constant(ordered, len(roots) - len(ordered), budget_per_hour, min_every, max_every)
    return [max_every if q == 0.0 else min(max(c / q, min_every), max_every) for q in roots]


def _budget_constant(
    roots: list[float], idle: int, budget: float, min_every: float, max_every: float
) -> float:
    """The ``c`` whose clamped intervals spend at most ``budget`` (0: all at
    ``min_every``; infinity: all at ``max_every``)."""
    prefix = list(accumulate(roots, initial=0.0))
    fixed = 3600.0 * idle / max_every
    n = len(roots)

    def spend(c: float) -> float:
        at_max = bisect_left(roots, c / max_every)  # c / root > max_every
        at_min = bisect_right(roots, c / min_every)  # from here c / root < min_every
        middle = prefix[at_min] - prefix[at_max]
        return fixed + 3600.0 * (at_max / max_every + (n - at_min) / min_every + middle / c)

    if not budget > 0 or not roots or budget <= fixed + 3600.0 * n / max_every:
        return math.inf
    if budget >= fixed + 3600.0 * n / min_every:
        return 0.0
    low, high = roots[0] * min_every, roots[-1] * max_every  # spend(low) > budget >= spend(high)
    for _ in range(200):
        middle = math.sqrt(low) * math.sqrt(high)  # no overflow at the extremes
        if not low < middle < high:
            break
        if spend(middle) > budget:
            low = middle
        else:
            high = middle
    return high
