"""A daily digest over publication time, through the daemon: items of a feed come
out of order, the digest of each day is published once the day is over, published
again in place when a late item changes it, and items later than the lateness go to
the stream's late feed (seed 001).  And a join over publication time: a late item
within the lateness still finds its partner, one beyond it is counted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest

from roses_app.config import load_config

CONFIG = """
settings: {data_dir: ./data}
sources:
  wire: {feed: "file:wire.xml", time: published}
streams:
  daily:
    aggregate:
      from: {window: {from: wire, time: 1d, every: 1d}}
      reduce: xquery/digest.xq
      lateness: 7d
      late: publish
    publish: {title: "Daily digest"}
"""


def feed(items: list[tuple[str, datetime | None]]) -> str:
    entries = "".join(
        f"<item><title>{title}</title><link>https://example.org/{title}</link>"
        f"<guid>https://example.org/{title}</guid>"
        + (f"<pubDate>{format_datetime(when)}</pubDate>" if when else "")
        + "</item>"
        for title, when in items
    )
    return (
        "<rss version='2.0'><channel><title>Wire</title><link>https://example.org/</link>"
        f"<description>w</description>{entries}</channel></rss>"
    )


def link(title: str) -> str:
    """How an item's link appears in a digest (escaped HTML in its description)."""
    return f'https://example.org/{title}"'


def once(folder: Path) -> dict[str, Any]:
    from roses_app.daemon import Daemon

    daemon = Daemon(load_config(folder / "feeds.yaml"))
    try:
        daemon.once()
        entries = {
            part: {e.guid: e.item for e in daemon.store.latest("daily", part, 50)}
            for part in ("", "late")
        }
        return {"entries": entries, "health": daemon.health()}
    finally:
        daemon.close()


@pytest.mark.spark
def test_a_late_item_updates_its_day_in_place_and_a_too_late_one_goes_to_the_late_feed(
    tmp_path: Path, spark: object
) -> None:
    repo = Path(__file__).resolve().parents[1]
    (tmp_path / "xquery").mkdir()
    (tmp_path / "xquery" / "digest.xq").write_text((repo / "xquery" / "digest.xq").read_text())
    (tmp_path / "feeds.yaml").write_text(CONFIG)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)

    def day(n: int, hour: int) -> datetime:
        return today - timedelta(days=n) + timedelta(hours=hour)

    # newest first, as feeds list them; one placeholder date (1970): ingest time
    first = [("c", day(1, 9)), ("b", day(2, 9)), ("a", day(3, 9))]
    first.append(("x", datetime(1970, 1, 1, tzinfo=UTC)))
    (tmp_path / "wire.xml").write_text(feed(first))
    run = once(tmp_path)  # its heartbeat (now) closes the three days
    digests = run["entries"][""]
    assert len(digests) == 3
    day2 = next(g for g, item in digests.items() if link("b") in item)
    assert "1 item" in digests[day2]
    assert run["entries"]["late"] == {}
    assert run["health"]["implausible_dates_per_source"] == {"wire": 1}
    before = dict(digests)

    # b2 is two days old (within the lateness of 7 days); z is 20 days old: too late
    second = [("b2", day(2, 11)), ("z", day(20, 9)), *first]
    (tmp_path / "wire.xml").write_text(feed(second))
    run = once(tmp_path)
    digests = run["entries"][""]
    assert set(digests) == set(before)  # the same three guids: replaced in place
    assert "2 items" in digests[day2] and link("b2") in digests[day2]
    assert all(digests[g] == before[g] for g in before if g != day2)
    late = run["entries"]["late"]
    assert list(late) == ["https://example.org/z"]  # the item itself
    assert run["health"]["late_items_per_stream"] == {"daily": 1}

    # the published documents, the late feed included, are valid feeds
    from roses_app.daemon import Daemon
    from roses_app.publish.export import export_static

    daemon = Daemon(load_config(tmp_path / "feeds.yaml"))
    try:
        written = export_static(daemon.config, daemon.store, tmp_path / "public").files
    finally:
        daemon.close()
    names = {p.relative_to(tmp_path / "public").as_posix() for p in written}
    assert {"feeds/daily.rss", "feeds/daily/late.rss"} <= names
    from test_valid_feeds import validate

    docs = [tmp_path / "public" / n for n in sorted(names) if n.endswith((".rss", ".atom"))]
    assert validate(docs) == {str(d): [] for d in docs}


def published(folder: Path, streams: list[str]) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """One ``roses once`` of the daemon in ``folder``: the items each stream's feed
    holds, newest first, and ``/healthz``."""
    from roses_app.daemon import Daemon

    daemon = Daemon(load_config(folder / "feeds.yaml"))
    try:
        daemon.once()
        feeds = {s: [e.item for e in daemon.store.latest(s, "", 50)] for s in streams}
        return feeds, daemon.health()
    finally:
        daemon.close()


TWO_SOURCES = """
settings: {data_dir: ./data}
sources:
  wire: {feed: "file:wire.xml", time: published}
  blog: {feed: "file:blog.xml", time: published}
streams:
"""
JOIN_CONFIG = (
    TWO_SOURCES
    + """  related:
    join:
      left: {window: {from: wire, time: 3d}}
      right: {window: {from: blog, time: 3d}}
      on: "$i1/title = $i2/title"
      lateness: 7d
    publish: {title: "Wire stories the blog covered"}
"""
)


@pytest.mark.spark
def test_a_join_over_publication_time_pairs_a_late_item_and_counts_a_too_late_one(
    tmp_path: Path, spark: object
) -> None:
    (tmp_path / "feeds.yaml").write_text(JOIN_CONFIG)
    now = datetime.now(UTC)

    def ago(days: int) -> datetime:
        return now - timedelta(days=days)

    def run() -> tuple[list[str], dict[str, Any]]:
        feeds, health = published(tmp_path, ["related"])
        return feeds["related"], health

    (tmp_path / "wire.xml").write_text(feed([("volcano", ago(2)), ("storm", ago(2))]))
    (tmp_path / "blog.xml").write_text(feed([("volcano", ago(1))]))
    items, _ = run()
    assert len(items) == 1 and items[0].startswith("<item><title>volcano</title>")
    # the blog's story on the storm is older than the last item seen, within the
    # lateness: it still meets the wire's; one 20 days old is too late
    (tmp_path / "blog.xml").write_text(
        feed([("storm", ago(3)), ("flood", ago(20)), ("volcano", ago(1))])
    )
    items, health = run()
    assert len(items) == 2 and any(i.startswith("<item><title>storm</title>") for i in items)
    assert health["late_items_per_stream"] == {"related": 1}
    # counted by ROSES's join, which sees it first: Spark's watermark drops nothing
    assert [q["rows_dropped_by_watermark"] for q in health["queries"].values()] == [0, 0]


OPTIMISTIC_CONFIG = (
    TWO_SOURCES
    + """  early:
    join:
      kind: left
      left: {window: {from: wire, time: 3d}}
      right: {window: {from: blog, time: 3d}}
      on: "$i1/title = $i2/title"
      lateness: 7d
      report: optimistic
    publish: {title: "Wire stories, with the blog's when it has one"}
  uncovered:
    diff:
      left: wire
      right: {window: {from: blog, time: 3d}}
      on: "$i1/title = $i2/title"
      lateness: 7d
      report: optimistic
    publish: {title: "Wire stories the blog has not covered"}
"""
)


@pytest.mark.spark
def test_optimistic_results_are_published_at_once_and_taken_back_in_place(
    tmp_path: Path, spark: object
) -> None:
    (tmp_path / "feeds.yaml").write_text(OPTIMISTIC_CONFIG)
    now = datetime.now(UTC)

    def run() -> tuple[dict[str, list[str]], dict[str, Any]]:
        return published(tmp_path, ["early", "uncovered"])

    (tmp_path / "wire.xml").write_text(feed([("storm", now - timedelta(days=2))]))
    (tmp_path / "blog.xml").write_text(feed([("other", now - timedelta(days=1))]))
    feeds, _ = run()
    # nothing can tell yet whether the blog will cover the storm: published at once
    alone = "<item><title>storm</title>"
    assert [i[: len(alone)] for i in feeds["early"]] == [alone]
    assert [i[: len(alone)] for i in feeds["uncovered"]] == [alone]
    # the blog's story on the storm comes late (older than the last item seen, within
    # the lateness): the same entries change in place
    (tmp_path / "blog.xml").write_text(
        feed([("storm", now - timedelta(days=3)), ("other", now - timedelta(days=1))])
    )
    feeds, health = run()
    assert len(feeds["early"]) == 1 and "<roses:related" in feeds["early"][0]
    assert len(feeds["uncovered"]) == 1
    assert feeds["uncovered"][0].startswith("<item><title>Withdrawn: storm</title>")
    assert '<guid isPermaLink="false">https://example.org/storm</guid>' in feeds["uncovered"][0]
    assert health["revised_windows_per_stream"] == {"early": 1, "uncovered": 1}


GROUPING_CONFIG = (
    TWO_SOURCES
    + """  threads:
    grouping:
      from: wire
      by: "'all'"
      window: 2
      lateness: 7d
      report: optimistic
      reduce: "<item><title>{ string-join($items/title, ' then ') }</title></item>"
    publish: {title: "Each wire story after the one before it"}
  counted:
    grouping:
      from: wire
      by: "'all'"
      window: 2
      lateness: 7d
      report: optimistic
      reduce: "<item><title>{ count($items) } to { $items[last()]/title/string() }</title></item>"
"""
)


@pytest.mark.spark
def test_a_late_item_revises_the_grouping_results_after_it_in_place(
    tmp_path: Path, spark: object
) -> None:
    (tmp_path / "feeds.yaml").write_text(GROUPING_CONFIG)
    now = datetime.now(UTC)
    stories = [("storm", now - timedelta(days=2)), ("flood", now - timedelta(days=1))]
    (tmp_path / "wire.xml").write_text(feed(stories))
    (tmp_path / "blog.xml").write_text(feed([]))

    def titles(items: list[str]) -> list[str]:
        return [i.split("<title>")[1].split("</title>")[0] for i in items]

    feeds, _ = published(tmp_path, ["threads", "counted"])
    assert titles(feeds["threads"]) == ["storm then flood", "storm"]  # newest first
    # the quake comes late (between the two, within the lateness): its result is new,
    # and the flood's changes in place (same entry, revision 1); the flood's count
    # does not change, so that stream publishes nothing again
    stories.append(("quake", now - timedelta(hours=36)))
    (tmp_path / "wire.xml").write_text(feed(stories))
    feeds, health = published(tmp_path, ["threads", "counted"])
    assert titles(feeds["threads"]) == ["quake then flood", "storm then quake", "storm"]
    assert 'revision="1"' in feeds["threads"][0]
    assert titles(feeds["counted"]) == ["2 to flood", "2 to quake", "1 to storm"]
    assert health["revised_windows_per_stream"] == {"threads": 1}
    assert health["unchanged_windows_per_stream"] == {"counted": 1}


CHAINED_CONFIG = (
    JOIN_CONFIG.replace("lateness: 7d", "lateness: 4d")
    + """  daily_pairs:
    aggregate:
      from: {window: {from: related, time: 1d, every: 1d}}
      reduce: "<item><title>{count($items)} pairs</title></item>"
    publish: {title: "Stories covered, per day"}
"""
)


@pytest.mark.spark
def test_a_daily_count_of_join_results_waits_for_the_join_and_survives_a_restart(
    tmp_path: Path, spark: object
) -> None:
    """The join publishes its pairs at once; the daily count reads them once the
    join's clock is its lateness (4 days) past them.  The pairs held then live in the
    state across a restart, and a later clock (an item dated tomorrow) releases them."""
    (tmp_path / "feeds.yaml").write_text(CHAINED_CONFIG)
    now = datetime.now(UTC)

    def at(days: float) -> datetime:
        return now + timedelta(days=days)

    def run() -> tuple[dict[str, list[str]], dict[str, Any]]:
        return published(tmp_path, ["related", "daily_pairs"])

    # a and c are 6 and 5 days old, b 4 days less 2 hours: the join's clock (now)
    # decides a and c; c, a day after a, closes a's day
    wire = [("b", at(-4 + 1 / 12)), ("c", at(-5)), ("a", at(-6))]
    blog = [(title, when + timedelta(minutes=5)) for title, when in wire]
    (tmp_path / "wire.xml").write_text(feed(wire))
    (tmp_path / "blog.xml").write_text(feed(blog))
    feeds, health = run()
    assert len(feeds["related"]) == 3
    assert len(feeds["daily_pairs"]) == 1 and "<title>1 pairs</title>" in feeds["daily_pairs"][0]
    assert health["late_items_per_stream"] == {}

    # a restart, and a story dated 20 hours from now: the clock moves past b by more
    # than the lateness, b is released and closes c's day (with c, held across it)
    (tmp_path / "wire.xml").write_text(feed([("d", at(20 / 24)), *wire]))
    (tmp_path / "blog.xml").write_text(feed([("d", at(20 / 24)), *blog]))
    feeds, health = run()
    assert len(feeds["related"]) == 4
    counts = feeds["daily_pairs"]
    assert len(counts) == 2 and all("<title>1 pairs</title>" in item for item in counts)
    assert len({item.split("<guid")[1] for item in counts}) == 2  # two days, once each
