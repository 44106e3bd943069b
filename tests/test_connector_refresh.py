"""Adaptive refresh (roses_app.connectors.refresh): hints, rate estimate, intervals, budget."""

from __future__ import annotations

import io
import itertools
import math
import random
import subprocess
import sys
import time
from calendar import timegm
from pathlib import Path

import feedparser
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roses_app.connectors.refresh import (
    WEEK,
    Hints,
    Interval,
    Rate,
    budgeted,
    choose,
    defer,
    hints_from,
    next_poll_at,
    observe,
    per_second,
)

REPO = Path(__file__).resolve().parent.parent
HOUR, DAY = 3600.0, 86400.0
BOUNDS = {"default_every": HOUR, "min_every": 60.0, "max_every": DAY}


def utc(text: str) -> float:
    """'2024-01-05 23:30' (UTC) as a timestamp."""
    return float(timegm(time.strptime(text, "%Y-%m-%d %H:%M")))


def hints_of(body: bytes, headers: dict[str, str] | None = None, now: float = 0.0) -> Hints:
    """Hints as the poller would get them: feedparser's feed dict plus the body."""
    feed = feedparser.parse(io.BytesIO(body)).feed
    return hints_from(feed, body, headers or {}, now)


RSS = b"""<?xml version="1.0" encoding="utf-8"?>
<rss version="2.0" xmlns:sy="http://purl.org/rss/1.0/modules/syndication/">
<channel><title>t</title><link>http://example.org/</link><description>d</description>
<ttl>60</ttl>
<sy:updatePeriod>hourly</sy:updatePeriod><sy:updateFrequency>2</sy:updateFrequency>
<skipHours><hour>0</hour><hour>1</hour><hour>23</hour></skipHours>
<skipDays><day>Saturday</day><day>Sunday</day></skipDays>
<item><title>a</title><guid>urn:a</guid></item>
</channel></rss>"""

ATOM = b"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title>t</title><id>urn:f</id>
<updated>2024-01-01T00:00:00Z</updated>
<entry><title>ttl skipHours</title><id>urn:e</id><updated>2024-01-01T00:00:00Z</updated>
<summary>Seattle shuttle: no hints here</summary></entry></feed>"""

RSS1 = b"""<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"
 xmlns="http://purl.org/rss/1.0/" xmlns:syn="http://purl.org/rss/1.0/modules/syndication/">
<channel rdf:about="http://example.org/"><title>t</title><link>http://example.org/</link>
<description>d</description><syn:updatePeriod> Daily </syn:updatePeriod>
<syn:updateFrequency>4</syn:updateFrequency></channel></rdf:RDF>"""


def rss(channel: str) -> bytes:
    return (
        '<?xml version="1.0"?><rss version="2.0" '
        'xmlns:sy="http://purl.org/rss/1.0/modules/syndication/"><channel><title>t</title>'
        f"{channel}<item><title>a</title><guid>urn:a</guid></item></channel></rss>"
    ).encode()


# -- hints -----------------------------------------------------------------------------


def test_rss_hints_from_feedparser_and_body() -> None:
    assert hints_of(RSS) == Hints(
        ttl=3600.0,
        max_age=None,
        update_period=1800.0,
        skip_hours=frozenset({0, 1, 23}),
        skip_days=frozenset({5, 6}),
    )


def test_feedparser_flattens_skiphours_so_the_body_is_read() -> None:
    feed = feedparser.parse(io.BytesIO(RSS)).feed
    assert (feed["ttl"], feed["sy_updateperiod"], feed["sy_updatefrequency"]) == (
        "60",
        "hourly",
        "2",
    )
    assert feed.get("skiphours") == "" and feed.get("hour") == "23"  # only the last hour
    # Without the body, no skip lists; with only the body, the same hints as above.
    assert hints_from(feed, b"", {}, 0.0).skip_hours == frozenset()
    assert hints_from({}, RSS, {}, 0.0) == hints_of(RSS)


def test_atom_without_hints_and_words_in_text_are_not_elements() -> None:
    assert hints_of(ATOM) == Hints()


def test_rss1_syndication_module() -> None:
    assert hints_of(RSS1).update_period == DAY / 4
    assert hints_from({}, RSS1, {}, 0.0).update_period == DAY / 4


def test_utf16_document() -> None:
    body = RSS.replace(b' encoding="utf-8"', b"").decode().encode("utf-16")
    hints = hints_from({}, body, {}, 0.0)
    assert hints.skip_days == frozenset({5, 6}) and hints.ttl == 3600.0


@pytest.mark.parametrize(
    ("channel", "expected"),
    [
        ("<ttl>soon</ttl>", Hints()),
        ("<ttl>-5</ttl>", Hints()),
        ("<ttl>0</ttl>", Hints()),
        ("<ttl>1e9</ttl>", Hints()),
        ("<ttl> 15 </ttl>", Hints(ttl=900.0)),
        ("<sy:updatePeriod>fortnightly</sy:updatePeriod>", Hints()),
        ("<sy:updatePeriod>weekly</sy:updatePeriod><sy:updateFrequency>0</sy:updateFrequency>",
         Hints(update_period=WEEK)),
        ("<sy:updateFrequency>2</sy:updateFrequency>", Hints(update_period=DAY / 2)),
        ("<skipHours><hour>25</hour><hour>-1</hour><hour>x</hour><hour>24</hour>"
         "<hour>7</hour></skipHours>", Hints(skip_hours=frozenset({0, 7}))),
        ("<skipDays><day>Caturday</day><day> monday </day><day>7</day></skipDays>",
         Hints(skip_days=frozenset({0}))),
    ],
)  # fmt: skip
def test_junk_values_are_ignored_one_by_one(channel: str, expected: Hints) -> None:
    assert hints_of(rss(channel)) == expected
    assert hints_from({}, rss(channel), {}, 0.0) == expected


def test_skip_lists_inside_an_item_are_not_the_channels() -> None:
    body = RSS.replace(b"<skipHours>", b"<item><skipHours>").replace(
        b"</skipHours>", b"</skipHours></item>"
    )
    assert hints_of(body).skip_hours == frozenset()


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not xml at all: skipHours",
        b"<rss><channel><skipHours><hour>3</hour><hour>4",  # truncated: recovered
        b"\xff\xfe\x00garbage skipDays \x00\x00",
        # billion laughs: the entities are not expanded
        b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaaaaaaaa">'
        b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;">]>'
        b"<rss><channel><skipDays><day>&c;</day></skipDays></channel></rss>",
        # an external entity is not read
        b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/hostname">]>'
        b"<rss><channel><skipHours><hour>&x;</hour></skipHours></channel></rss>",
    ],
)
def test_hostile_or_broken_bodies_never_raise(body: bytes) -> None:
    hints = hints_from({}, body, {}, 0.0)
    assert hints.skip_hours <= {3, 4} and hints.skip_days == frozenset()


def test_truncated_document_keeps_what_it_has() -> None:
    body = b"<rss><channel><skipHours><hour>3</hour><hour>4"
    assert hints_from({}, body, {}, 0.0).skip_hours == frozenset({3, 4})


@given(st.binary(max_size=300), st.sampled_from([b"skipHours", b"skipDays", b"<ttl", b""]))
def test_arbitrary_bytes_never_raise(junk: bytes, marker: bytes) -> None:
    hints = hints_from({"ttl": junk.decode("latin-1")}, junk + marker + junk, {}, 0.0)
    assert hints.skip_hours <= set(range(24)) and hints.skip_days <= set(range(7))
    assert hints.ttl is None or hints.ttl > 0


@pytest.mark.parametrize(
    ("cache_control", "expected"),
    [
        ("max-age=600", 600.0),
        ("public, max-age=600, must-revalidate", 600.0),
        ("s-maxage=300", 300.0),
        ("max-age=600, s-maxage=300", 600.0),
        ("MAX-AGE=60", 60.0),
        ('max-age="120"', 120.0),
        ("max-age=600, max-age=5", 600.0),  # the first one (RFC 9111 4.2.1)
        ('no-cache="Set-Cookie, X-Foo", max-age=60', 60.0),  # qualified: not for the body
        ("no-cache", None),
        ("max-age=600, no-cache", None),
        ("no-store, max-age=600", None),
        ("max-age=0", None),
        ("max-age=-1", None),
        ("max-age=abc", None),
        ("max-age=1e3", None),
        ("max-age=6 00", None),
        ("max-age=", None),
        ("=,,;;\"'", None),
        ("", None),
        ("x" * 100_000, None),
    ],
)
def test_cache_control(cache_control: str, expected: float | None) -> None:
    assert hints_from({}, b"", {"cache-control": cache_control}, 0.0).max_age == expected


def test_expires_minus_date() -> None:
    date = "Mon, 01 Jan 2024 00:00:00 GMT"
    headers = {"date": date, "expires": "Mon, 01 Jan 2024 01:00:00 GMT"}
    assert hints_from({}, b"", headers, 0.0).max_age == 3600.0
    # no Date (or a junk one): the clock's now
    now = utc("2024-01-01 00:30")
    for date_header in ({}, {"date": "yesterday"}):
        only = {**date_header, "expires": headers["expires"]}
        assert hints_from({}, b"", only, now).max_age == 1800.0
    # max-age wins; junk max-age falls back to Expires; no-cache voids both
    assert hints_from({}, b"", {**headers, "cache-control": "max-age=60"}, 0).max_age == 60.0
    assert hints_from({}, b"", {**headers, "cache-control": "max-age=x"}, 0).max_age == 3600.0
    assert hints_from({}, b"", {**headers, "cache-control": "no-cache"}, 0).max_age is None
    for expires in ("0", "-1", "Mon, 01 Jan 2023 00:00:00 GMT", "Mon, 99 Foo 2024"):
        assert hints_from({}, b"", {"date": date, "expires": expires}, 0).max_age is None


# -- the rate estimate -------------------------------------------------------------------


def test_a_new_feed_starts_at_the_default_interval() -> None:
    assert per_second(Rate(), HOUR) == 1 / HOUR
    interval = choose(Rate(), Hints(), document_items=20, **BOUNDS)
    assert interval == Interval(HOUR, "rate 1 items/h: about one new item per poll")


def test_decay_halves_old_observations_per_half_life() -> None:
    rate = observe(Rate(items=10.0, seconds=HOUR), WEEK, 0, 20)
    assert rate == Rate(items=5.0, seconds=HOUR / 2 + WEEK, saturated=False)


def test_odd_measurements_count_as_nothing() -> None:
    rate = Rate(items=3.0, seconds=HOUR)
    for elapsed in (-5.0, math.nan, math.inf, 0.0):
        assert observe(rate, elapsed, -2, 20) == Rate(3.0, HOUR, False)
    assert per_second(Rate(items=math.nan, seconds=-1.0), HOUR) == 1 / HOUR
    with pytest.raises(ValueError):
        observe(rate, 1.0, 0, 0, half_life=0.0)
    with pytest.raises(ValueError):
        per_second(rate, 0.0)


def simulate(
    per_hour: float, hours: float, document: int = 20, seed: int = 1
) -> tuple[Rate, list[Interval]]:
    """Poisson arrivals polled with choose(); the document keeps the last ``document``
    items, so a poll sees at most that many new ones."""
    rng = random.Random(seed)
    rate, now, intervals = Rate(), 0.0, []
    arrival = rng.expovariate(per_hour / HOUR)
    while now < hours * HOUR:
        interval = choose(rate, Hints(), document_items=document, **BOUNDS)
        intervals.append(interval)
        now += interval.seconds
        arrived = 0
        while arrival <= now:
            arrived += 1
            arrival += rng.expovariate(per_hour / HOUR)
        rate = observe(rate, interval.seconds, min(arrived, document), document)
    return rate, intervals


def test_a_feed_publishing_ten_an_hour_converges_near_ten_an_hour() -> None:
    rate, intervals = simulate(10.0, hours=21 * 24)
    assert 9.0 <= per_second(rate, HOUR) * HOUR <= 11.0
    assert 300 <= intervals[-1].seconds <= 420  # about one new item per poll
    assert intervals[-1].reason.startswith("rate ")


def test_a_silent_feeds_interval_grows_toward_max_every() -> None:
    rate, seconds = Rate(), []
    for _ in range(200):
        interval = choose(rate, Hints(), document_items=20, **BOUNDS)
        seconds.append(interval.seconds)
        rate = observe(rate, interval.seconds, 0, 20)
    assert seconds == sorted(seconds) and seconds[0] == HOUR
    assert seconds[5] > 2 * HOUR
    assert interval.seconds == DAY and interval.reason.startswith("max_every")


def test_saturation_raises_the_estimate_and_shortens_the_interval() -> None:
    history = Rate(items=5.0, seconds=10 * HOUR)
    full = observe(history, HOUR, 3, 3)
    same_count = observe(history, HOUR, 3, 4)  # three new items, one old: an exact count
    assert full.saturated and not same_count.saturated
    assert per_second(full, HOUR) > per_second(same_count, HOUR)
    saturated = choose(full, Hints(), document_items=3, **BOUNDS)
    not_saturated = choose(Rate(full.items, full.seconds), Hints(), document_items=3, **BOUNDS)
    assert saturated.seconds < not_saturated.seconds
    assert "found only new items" in saturated.reason


def test_a_one_item_feed_does_not_stay_at_its_lower_bound() -> None:
    """Every poll of a one-item document that sees a new item is censored: counted at
    face value, the estimate would never exceed one item per interval."""
    rate, intervals = simulate(30.0, hours=48, document=1)
    assert 24.0 <= per_second(rate, HOUR) * HOUR <= 60.0  # censored: erring on the high side
    assert intervals[-1].seconds <= 4 * 60


# -- choose ------------------------------------------------------------------------------


def rate_per_hour(per_hour: float, *, saturated: bool = False) -> Rate:
    """A rate whose smoothed value (prior 1/h) is exactly ``per_hour``, over 10 h."""
    return Rate(items=per_hour * 11 - 1, seconds=10 * HOUR, saturated=saturated)


def test_choose_reasons() -> None:
    def pick(rate: Rate, hints: Hints | None = None, document: int = 20) -> Interval:
        return choose(rate, hints or Hints(), document_items=document, **BOUNDS)

    assert pick(rate_per_hour(2.4)) == Interval(
        1500.0, "rate 2.4 items/h: about one new item per poll"
    )
    assert pick(rate_per_hour(2.4), document=1) == Interval(
        750.0, "document holds 1 item at 2.4/h: polled before they are pushed out"
    )
    saturated = choose(
        rate_per_hour(40, saturated=True), Hints(), document_items=2, **{**BOUNDS, "min_every": 1}
    )
    assert saturated == Interval(
        45.0,  # 2 items * 0.25 / (40/h)
        "document holds 2 items at 40/h: polled before they are pushed out "
        "(the last poll found only new items)",
    )
    two = pick(rate_per_hour(40, saturated=True), document=2)
    assert two.seconds == 60.0 and two.reason.startswith("min_every (the rule gave 45 s: document")
    assert pick(rate_per_hour(2.4), Hints(ttl=7200.0)) == Interval(7200.0, "<ttl> 120 min")
    assert pick(rate_per_hour(2.4), Hints(ttl=600.0, max_age=1800.0)) == Interval(
        1800.0, "HTTP max-age 1800 s"
    )
    assert pick(rate_per_hour(2.4), Hints(update_period=DAY / 4)) == Interval(
        DAY / 4, "sy:updatePeriod every 6 h"
    )
    assert pick(rate_per_hour(2.4), Hints(ttl=600.0)).reason.startswith("rate 2.4")  # < 1/rate
    assert pick(rate_per_hour(2.4), Hints(update_period=WEEK)) == Interval(
        DAY, "max_every (sy:updatePeriod every 7 d is longer)"
    )
    fast = pick(rate_per_hour(400))
    assert fast.seconds == 60.0 and fast.reason == (
        "min_every (the rule gave 9 s: rate 400 items/h: about one new item per poll)"
    )
    slow = pick(Rate(items=0.0, seconds=30 * DAY))
    assert slow.seconds == DAY and slow.reason.startswith(
        "max_every (the rule gave 30 d: rate 0.0014"
    )


def test_choose_rejects_impossible_bounds() -> None:
    for low, high in ((0.0, DAY), (DAY, HOUR), (60.0, math.inf), (math.nan, DAY)):
        with pytest.raises(ValueError):
            choose(Rate(), Hints(), default_every=HOUR, min_every=low, max_every=high,
                   document_items=1)  # fmt: skip


seconds_st = st.floats(min_value=1.0, max_value=1e8, allow_nan=False)
hint_st = st.none() | seconds_st
hints_st = st.builds(Hints, ttl=hint_st, max_age=hint_st, update_period=hint_st)
bounds_st = st.tuples(seconds_st, seconds_st).map(sorted)


@given(
    items=st.floats(min_value=0, max_value=1e9),
    more=st.floats(min_value=0, max_value=1e9),
    seconds=st.floats(min_value=0, max_value=1e10),
    saturated=st.booleans(),
    hints=hints_st,
    bounds=bounds_st,
    default=seconds_st,
    document=st.integers(min_value=0, max_value=1000),
)
def test_choose_stays_in_bounds_and_a_higher_rate_never_waits_longer(
    items: float,
    more: float,
    seconds: float,
    saturated: bool,
    hints: Hints,
    bounds: list[float],
    default: float,
    document: int,
) -> None:
    low, high = bounds
    kwargs = {"default_every": default, "min_every": low, "max_every": high}
    slower = choose(Rate(items, seconds, saturated), hints, document_items=document, **kwargs)
    faster = choose(
        Rate(items + more, seconds, saturated), hints, document_items=document, **kwargs
    )
    for interval in (slower, faster):
        assert low <= interval.seconds <= high and interval.reason
    assert faster.seconds <= slower.seconds


# -- skipHours / skipDays ------------------------------------------------------------------

NIGHT = Hints(skip_hours=frozenset({22, 23, 0, 1, 2, 3, 4, 5}))
WEEKEND = Hints(skip_days=frozenset({5, 6}))


def test_skip_hours_across_midnight() -> None:
    last = utc("2024-01-01 21:00")  # a Monday
    interval = defer(last, Interval(2 * HOUR, "r"), NIGHT)
    assert last + interval.seconds == utc("2024-01-02 06:00")
    assert interval.reason == "skipHours: next poll at Tuesday 06:00 UTC"
    same_day = defer(utc("2024-01-02 01:00"), Interval(HOUR, "r"), NIGHT)
    assert same_day.reason == "skipHours: next poll at 06:00 UTC"
    assert next_poll_at(last, Interval(30 * 60, "r"), NIGHT) == utc("2024-01-01 21:30")
    assert defer(last, Interval(30 * 60, "r"), NIGHT) == Interval(30 * 60, "r")


def test_skip_days_and_both() -> None:
    friday = utc("2024-01-05 23:30")
    assert next_poll_at(friday, Interval(HOUR, "r"), WEEKEND) == utc("2024-01-08 00:00")
    assert defer(friday, Interval(HOUR, "r"), WEEKEND).reason == (
        "skipDays: next poll at Monday 00:00 UTC"
    )
    both = Hints(skip_hours=NIGHT.skip_hours, skip_days=frozenset({6}))
    saturday = utc("2024-01-06 23:00")
    interval = defer(saturday, Interval(2 * HOUR, "r"), both)
    assert saturday + interval.seconds == utc("2024-01-08 06:00")
    assert interval.reason == "skipDays/skipHours: next poll at Monday 06:00 UTC"


def test_skipping_everything_is_ignored() -> None:
    last = utc("2024-01-06 12:00")
    everything = Hints(skip_hours=frozenset(range(24)), skip_days=frozenset(range(7)))
    assert next_poll_at(last, Interval(HOUR, "r"), everything) == last + HOUR
    all_hours = Hints(skip_hours=frozenset(range(24)), skip_days=frozenset({5}))
    assert next_poll_at(last, Interval(HOUR, "r"), all_hours) == utc("2024-01-07 00:00")


@given(
    last=st.floats(min_value=0, max_value=4e9),
    seconds=st.floats(min_value=0, max_value=1e7),
    hours=st.frozensets(st.integers(0, 23)),
    days=st.frozensets(st.integers(0, 6)),
)
def test_next_poll_is_the_first_allowed_hour(
    last: float, seconds: float, hours: frozenset[int], days: frozenset[int]
) -> None:
    hints = Hints(skip_hours=hours, skip_days=days)
    at, moved = last + seconds, next_poll_at(last, Interval(seconds, "r"), hints)
    skip_h = hours if len(hours) < 24 else frozenset()
    skip_d = days if len(days) < 7 else frozenset()

    def skipped(t: float) -> bool:
        return int(t // HOUR) % 24 in skip_h or (int(t // DAY) + 3) % 7 in skip_d

    assert at <= moved <= at + 8 * DAY and not skipped(moved)
    if moved > at:
        assert moved % HOUR == 0 and skipped(at)
        assert all(skipped(t) for t in range(int(at // HOUR + 1) * 3600, int(moved), 3600))


# -- the global budget ---------------------------------------------------------------------


def spend(intervals: list[float]) -> float:
    return sum(HOUR / t for t in intervals)


def delay(rates: list[float], intervals: list[float]) -> float:
    return sum(r * t / 2 for r, t in zip(rates, intervals, strict=True))


def test_budget_goes_as_one_over_square_root() -> None:
    rates = [4 / HOUR, 1 / HOUR, 0.0]
    intervals = budgeted(rates, 4.0, min_every=60.0, max_every=DAY)
    assert intervals[2] == DAY
    assert intervals[1] == pytest.approx(2 * intervals[0])
    assert spend(intervals) == pytest.approx(4.0)
    assert intervals[0] == pytest.approx(HOUR * 1.5 / (4 - 1 / 24))  # 1/T0 + 1/(2 T0) = the rest


def test_budget_that_cannot_be_met_gives_the_clamp() -> None:
    rates = [1 / HOUR, 2 / HOUR, 0.0, math.nan, -1.0]
    assert budgeted(rates, 1e9, min_every=60.0, max_every=DAY) == [60.0, 60.0, DAY, DAY, DAY]
    assert budgeted(rates, 0.001, min_every=60.0, max_every=DAY) == [DAY] * 5
    assert budgeted(rates, math.nan, min_every=60.0, max_every=DAY) == [DAY] * 5
    assert budgeted([], 10.0, min_every=60.0, max_every=DAY) == []
    assert budgeted([math.inf, 1.0], 1e9, min_every=60.0, max_every=DAY) == [60.0, 60.0]


rates_st = st.lists(
    st.one_of(st.just(0.0), st.floats(min_value=1e-7, max_value=1.0)), min_size=1, max_size=60
)


@settings(max_examples=300)
@given(
    rates=rates_st,
    bounds=st.tuples(st.floats(1.0, 1e4), st.floats(1.0, 1e3)),
    share=st.floats(0, 1),
)
def test_budgeted_within_bounds_spends_the_budget_and_beats_uniform(
    rates: list[float], bounds: tuple[float, float], share: float
) -> None:
    low, high = bounds[0], bounds[0] * bounds[1]
    most, least = spend([low] * len(rates)), spend([high] * len(rates))
    budget = least + share * (most - least)
    intervals = budgeted(rates, budget, min_every=low, max_every=high)
    assert all(low <= t <= high for t in intervals)
    assert all(t == high for t, r in zip(intervals, rates, strict=True) if r == 0)
    spent = spend(intervals)
    if any(rates):  # all-zero rates: every feed at max_every whatever the budget
        assert spent <= budget * (1 + 1e-9)
        if budget < spend([low if r else high for r in rates]):
            assert spent >= budget * (1 - 1e-6)
    uniform = HOUR * len(rates) / spent  # one interval for all, the same spend
    if low <= uniform <= high:
        assert delay(rates, intervals) <= delay(rates, [uniform] * len(rates)) * (1 + 1e-9)


@given(rates=rates_st, budget=st.floats(0.01, 1e4))
def test_a_faster_feed_never_gets_a_longer_budget_interval(
    rates: list[float], budget: float
) -> None:
    intervals = budgeted(rates, budget, min_every=60.0, max_every=DAY)
    pairs = sorted(zip(rates, intervals, strict=True))
    assert all(a[1] >= b[1] for a, b in itertools.pairwise(pairs))


def test_budgeted_is_fast_for_100k_feeds() -> None:
    rng = random.Random(7)
    rates = [rng.expovariate(HOUR) if rng.random() < 0.9 else 0.0 for _ in range(100_000)]
    started = time.perf_counter()
    intervals = budgeted(rates, 20_000.0, min_every=60.0, max_every=DAY)
    took = time.perf_counter() - started
    assert spend(intervals) == pytest.approx(20_000.0, rel=1e-9)
    assert took < 2.0  # ~0.08 s on one core; the bound only catches a quadratic turn


# -- imports -------------------------------------------------------------------------------


def test_the_module_needs_neither_httpx_nor_pyspark() -> None:
    """``roses_app.connectors/__init__`` imports the fetcher (httpx); the refresh modules
    themselves, loaded without that package init, import neither."""
    code = (
        "import sys, types\n"
        "import roses_app\n"
        "pkg = types.ModuleType('roses_app.connectors')\n"
        f"pkg.__path__ = [{str(REPO / 'roses_app' / 'connectors')!r}]\n"
        "sys.modules['roses_app.connectors'] = pkg\n"
        "import roses_app.connectors.refresh\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('httpx', 'pyspark'))\n"
        "assert not bad, bad\n"
        "assert 'roses_app.connectors.fetch' not in sys.modules\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    plain = "import sys, roses_app.connectors.refresh; print('pyspark' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True, cwd=REPO)
    assert done.stdout == "False\n", done.stderr
