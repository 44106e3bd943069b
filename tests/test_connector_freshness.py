"""Adaptive refresh wired in: what polls teach (kept in the state) and the intervals the
scheduler then keeps, against a real HTTP server."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from test_connector_support import FeedServer, Reply, Request, rss, until

from roses_app.config.model import FeedSource, FetchSettings
from roses_app.connectors.freshness import (
    BACKLOG_WEIGHT,
    after_document,
    after_not_modified,
    at_risk,
    hints_of,
    next_interval,
    rate_of,
)
from roses_app.connectors.poller import Items
from roses_app.connectors.refresh import Hints
from roses_app.connectors.scheduler import FeedScheduler
from roses_app.connectors.state import SourceState, StateStore

T0 = 1_700_000_000.0


def items(*guids: str) -> Items:
    return [(f"<item><guid>{g}</guid></item>", None) for g in guids]


def fresh() -> SourceState:
    return SourceState("s", "http://h/f", "http://h/f")


def test_a_first_document_is_a_backlog_then_new_items_are_counted():
    first = after_document(fresh(), items("a", "b", "c"), Hints(), T0)
    assert rate_of(first).items == 0 and first.document_items == 3
    succeeded = SourceState(**{**first.__dict__, "last_success_at": T0})
    second = after_document(succeeded, items("d", "e", "a"), Hints(), T0 + 600)
    rate = rate_of(second)
    assert rate.items == 2 and rate.seconds == 600 and not rate.saturated
    third = after_not_modified(
        SourceState(**{**second.__dict__, "last_success_at": T0 + 600}),
        {"cache-control": "max-age=900"},
        T0 + 1200,
    )
    assert rate_of(third).seconds > rate_of(second).seconds  # time without news counts
    assert hints_of(third).max_age == 900


def test_hints_survive_in_the_state():
    hints = Hints(ttl=3600.0, skip_hours=frozenset({1, 2}), skip_days=frozenset({6}))
    state = after_document(fresh(), items("a"), hints, T0)
    assert hints_of(state) == hints
    assert hints_of(SourceState("s", "u", "u", hints="{not json")) == Hints()


def test_next_interval_fixed_adaptive_and_budget():
    settings = FetchSettings(min_every_seconds=60.0, max_every_seconds=3600.0)
    fixed = FeedSource("s", "http://h/f", 300.0)
    assert next_interval(fixed, None, settings, T0).seconds == 300.0
    adaptive = FeedSource("s", "http://h/f", 900.0, fixed=False)
    assert next_interval(adaptive, None, settings, T0).seconds == 900.0  # the prior
    busy = SourceState("s", "u", "u", rate_items=200.0, rate_seconds=3600.0, document_items=20)
    chosen = next_interval(adaptive, busy, settings, T0)
    assert 60.0 <= chosen.seconds < 900.0 and "items/h" in chosen.reason
    quiet = SourceState("s", "u", "u", rate_items=2.0, rate_seconds=86400.0, document_items=20)
    shared = next_interval(adaptive, quiet, settings, T0, {"s": 1234.0})
    assert shared.seconds == 1234.0 and "budget" in shared.reason
    # a share longer than the busy feed's document lasts: completeness first
    capped = next_interval(adaptive, busy, settings, T0, {"s": 1234.0})
    assert capped.seconds < 1234.0 and "would fill" in capped.reason


def test_an_older_state_file_gains_the_new_columns(tmp_path: Path):
    path = tmp_path / "sources.sqlite"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE feed_state (name TEXT PRIMARY KEY, configured_url TEXT NOT NULL, "
        "url TEXT NOT NULL, etag TEXT, last_modified TEXT, failures INTEGER NOT NULL "
        "DEFAULT 0, next_allowed_at REAL NOT NULL DEFAULT 0, strict_retry INTEGER NOT NULL "
        "DEFAULT 0, gone INTEGER NOT NULL DEFAULT 0, last_status TEXT NOT NULL DEFAULT '', "
        "last_error TEXT NOT NULL DEFAULT '', last_attempt_at REAL, last_success_at REAL, "
        "n_polls INTEGER NOT NULL DEFAULT 0, n_ok INTEGER NOT NULL DEFAULT 0, n_not_modified "
        "INTEGER NOT NULL DEFAULT 0, n_errors INTEGER NOT NULL DEFAULT 0, n_items INTEGER NOT "
        "NULL DEFAULT 0)"
    )
    db.execute("INSERT INTO feed_state (name, configured_url, url, etag) VALUES ('a','u','u','x')")
    db.commit()
    db.close()
    with StateStore(path) as store:
        state = store.get("a")
        assert state is not None and state.etag == "x" and state.doc_keys == ""
        store.put(after_document(state, items("a"), Hints(ttl=60.0), T0))
        again = store.get("a")
        assert again is not None and again.document_items == 1
        assert hints_of(again).ttl == 60.0


def _noop(polls: Sequence[tuple[str, Items]]) -> None:
    return None


def wait_for(predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    until(predicate, timeout)


def test_a_busy_feed_is_polled_more_often_and_a_quiet_one_less(
    feed_server: FeedServer, tmp_path: Path
):
    """Each poll of /busy finds a whole new document; /quiet never changes: their
    intervals part from the same start, within min_every and max_every."""
    counter = iter(range(1_000_000))

    def busy(_: Request) -> Reply:
        n = next(counter)
        return Reply(200, rss(*((f"b{n}-{k}", "x") for k in range(5)), date=None))

    feed_server.routes["/busy"] = busy
    feed_server.routes["/quiet"] = Reply(200, rss(("q", "x")), {"ETag": '"q"'})
    settings = FetchSettings(
        timeout_seconds=3.0,
        default_every_seconds=0.6,
        min_every_seconds=0.2,
        max_every_seconds=5.0,
        host_spacing_seconds=0.0,
    )
    sources = [
        FeedSource("busy", feed_server.url("/busy"), 0.6, fixed=False),
        FeedSource("quiet", feed_server.url("/quiet"), 0.6, fixed=False),
    ]
    with StateStore(tmp_path / "s.sqlite") as store:
        scheduler = FeedScheduler(store, settings, sources, _noop)
        scheduler.start()
        try:
            wait_for(lambda: len(feed_server.hits("/busy")) >= 8)
        finally:
            scheduler.shutdown()
        busy_every = scheduler.intervals["busy"]
        quiet_every = scheduler.intervals["quiet"]
    assert busy_every.seconds < 0.6 < quiet_every.seconds
    assert "pushed out" in busy_every.reason or "min_every" in busy_every.reason
    assert len(feed_server.hits("/quiet")) < len(feed_server.hits("/busy"))


def test_the_publishers_max_age_is_honoured(feed_server: FeedServer, tmp_path: Path):
    # undated: no backlog rate, the prior (0.2 s) is what max-age must override
    feed_server.routes["/f"] = Reply(
        200, rss(("a", "x"), date=None), {"Cache-Control": "max-age=3"}
    )
    settings = FetchSettings(
        timeout_seconds=3.0,
        default_every_seconds=0.2,
        min_every_seconds=0.1,
        max_every_seconds=60.0,
    )
    source = FeedSource("f", feed_server.url("/f"), 0.2, fixed=False)
    with StateStore(tmp_path / "s.sqlite") as store:
        scheduler = FeedScheduler(store, settings, [source], _noop)
        scheduler.start()
        try:
            wait_for(lambda: "f" in scheduler.last_results)
            time.sleep(1.0)
        finally:
            scheduler.shutdown()
    assert len(feed_server.hits("/f")) == 1  # not again within its 3 s
    chosen = scheduler.intervals["f"]
    assert chosen.seconds == 3.0 and "max-age" in chosen.reason


def test_a_first_document_s_dates_give_the_first_rate():
    """20 items an hour apart: about one an hour from the first poll on; 20 items over
    the month before: a quiet feed, polled rarely from its first poll on; undated items
    teach nothing (the prior stands: the default interval)."""
    hourly = [(f"<item><guid>h{k}</guid></item>", int((T0 - 3600 * k) * 1e6)) for k in range(20)]
    busy = rate_of(after_document(fresh(), hourly, Hints(), T0))
    assert busy.seconds == 19 * 3600 and busy.items == 19  # 19 gaps in 19 hours
    old = [(xml, int(p - 30 * 86400 * 1e6)) for xml, p in hourly]
    quiet = rate_of(after_document(fresh(), old, Hints(), T0))
    assert quiet.seconds == 86400 and quiet.items < 19 / 30  # a day's worth of a month
    lone = rate_of(after_document(fresh(), old[-1:], Hints(), T0))  # one item, 31 days old
    assert lone.seconds == 86400 and abs(lone.items - 1 / 31) < 0.01
    future = [(xml, int((T0 + 3600) * 1e6)) for xml, _ in hourly]
    assert rate_of(after_document(fresh(), future, Hints(), T0)).seconds == 0
    undated = rate_of(after_document(fresh(), [(xml, None) for xml, _ in hourly], Hints(), T0))
    assert undated.seconds == 0
    settings = FetchSettings(min_every_seconds=60.0, max_every_seconds=86400.0)
    adaptive = FeedSource("s", "http://h/f", 900.0, fixed=False)
    after = after_document(fresh(), hourly, Hints(), T0)
    assert next_interval(adaptive, after, settings, T0).seconds > 1800  # about an hour
    monthly = after_document(fresh(), old, Hints(), T0)
    assert next_interval(adaptive, monthly, settings, T0).seconds > 12 * 3600


def test_a_busy_feed_s_first_document_sets_a_second_poll_before_it_fills():
    """20 items 15 s apart (240 an hour: the document fills in 5 minutes): the second
    poll comes before half of it is replaced, although the dates span only 5 minutes
    against a 15-minute prior (weighed as their span alone, the prior made it a
    quarter of the rate and the second poll came after 10 minutes, 20 items lost).
    The same 20 items bunched at one date (a burst, or the build time on every item)
    are not taken for a steady rate: polled often at first, as before, but no longer
    every minute after an hour of polls that find nothing new (extrapolated to an
    hour from 3 minutes, they would have kept it at min_every for weeks)."""
    settings = FetchSettings(min_every_seconds=60.0, max_every_seconds=900.0)
    source = FeedSource("s", "http://h/f", 900.0, fixed=False)
    busy = [(f"<item><guid>b{k}</guid></item>", int((T0 - 15 * k) * 1e6)) for k in range(20)]
    state = after_document(fresh(), busy, Hints(), T0)
    assert next_interval(source, state, settings, T0).seconds <= 150  # 10 new items
    assert rate_of(state).seconds == BACKLOG_WEIGHT
    bunched = [(xml, int((T0 - 180) * 1e6)) for xml, _ in busy]
    burst = after_document(fresh(), bunched, Hints(), T0)
    assert rate_of(burst).seconds == 180 and rate_of(burst).items == 19
    at = T0
    for _ in range(60):  # a minute apart, the same document again
        burst = after_document(SourceState(**{**burst.__dict__, "last_success_at": at}),
                               bunched, Hints(), at + 60)  # fmt: skip
        at += 60
    assert next_interval(source, burst, settings, at).seconds > 200
    few = after_document(fresh(), busy[:3], Hints(), T0)  # 2 gaps: a fifth of the weight
    assert rate_of(few).seconds == BACKLOG_WEIGHT / 5


def test_a_feed_whose_document_fills_within_max_every_is_at_risk():
    """20 items in the last 20 minutes fill a 20-item document within the risk horizon
    (4 x max_every, an hour): a late poll loses items.  The same items over 20 hours
    do not, a feed never polled has no document to lose, and the default interval's
    prior alone is not a risk."""
    settings = FetchSettings(min_every_seconds=60.0, max_every_seconds=900.0)
    source = FeedSource("s", "http://h/f", 900.0, fixed=False)
    busy = [(f"<item><guid>b{k}</guid></item>", int((T0 - 60 * k) * 1e6)) for k in range(20)]
    quiet = [(xml, int(T0 * 1e6 - 3600e6 * k)) for k, (xml, _) in enumerate(busy)]
    assert at_risk(source, after_document(fresh(), busy, Hints(), T0), settings)
    assert not at_risk(source, after_document(fresh(), quiet, Hints(), T0), settings)
    assert not at_risk(source, None, settings)
    undated = after_document(fresh(), [(xml, None) for xml, _ in busy], Hints(), T0)
    assert undated.document_items == 20 and not at_risk(source, undated, settings)
