"""The output store: idempotent batches, guid identity, ordering, concurrency."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from roses_app.errors import StoreError
from roses_app.items import content_hash
from roses_app.store import OutRow, Store, entry_guid


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def item(n: int | str, title: str | None = None, *, guid: bool = True, link: bool = True) -> str:
    parts = [f"<title>{title or f'Item {n}'}</title>"]
    if link:
        parts.append(f"<link>https://example.org/{n}</link>")
    if guid:
        parts.append(f'<guid isPermaLink="false">g-{n}</guid>')
    return "<item>" + "".join(parts) + "</item>"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[Store]:
    s = Store(tmp_path / "out" / "store.sqlite", clock=clock)
    yield s
    s.close()


def test_guid_link_or_hash() -> None:
    assert entry_guid(item(1)) == "g-1"
    assert entry_guid(item(1, guid=False)) == "https://example.org/1"
    bare = item(1, guid=False, link=False)
    assert entry_guid(bare) == content_hash(bare)


def test_write_and_latest_order(store: Store) -> None:
    rows = [
        OutRow("s", "", ts, seq, item(f"{ts}-{seq}"))
        for ts, seq in [(10, 0), (30, 0), (20, 1), (20, 0), (30, 1)]
    ]
    assert store.write_batch("q", 0, rows) is True
    got = [(e.ts, e.seq) for e in store.latest("s", "", 10)]
    assert got == [(30, 1), (30, 0), (20, 1), (20, 0), (10, 0)]
    assert [(e.ts, e.seq) for e in store.latest("s", "", 2)] == [(30, 1), (30, 0)]
    assert store.count("s", "") == 5
    assert store.latest("other", "", 10) == []
    assert store.feed_updated("other", "") is None
    assert [e.ts for e in store.between("s", "", 20, 30)] == [20, 20]


def test_replayed_batch_changes_nothing(store: Store, clock: Clock) -> None:
    rows = [OutRow("s", "", 1, 0, item(1)), OutRow("s", "", 2, 0, item(2))]
    assert store.write_batch("q", 7, rows) is True
    before = store.latest("s", "", 10)
    updated = store.feed_updated("s", "")
    clock.t += 100
    changed = [OutRow("s", "", 3, 0, item(1, "changed")), OutRow("s", "", 4, 0, item(4))]
    assert store.write_batch("q", 7, changed) is False
    assert store.latest("s", "", 10) == before
    assert store.feed_updated("s", "") == updated
    assert store.batch_applied("q", 7)
    assert not store.batch_applied("q", 8)
    assert not store.batch_applied("other", 7)
    assert store.last_batch("q") == 7
    assert store.last_batch("nope") is None
    # the same batch id of another query is another batch
    assert store.write_batch("other", 7, changed) is True
    assert store.count("s", "") == 3


def test_same_guid_replaces_in_place(store: Store, clock: Clock) -> None:
    store.write_batch(
        "q", 0, [OutRow("s", "", 100, 0, item(1, "v1")), OutRow("s", "", 50, 0, item(2))]
    )
    created = store.latest("s", "", 10)[0]
    clock.t += 10
    store.write_batch("q", 1, [OutRow("s", "", 200, 3, item(1, "v2"))])
    entries = store.latest("s", "", 10)
    assert len(entries) == 2
    first = entries[0]
    assert (first.guid, first.ts, first.seq) == ("g-1", 200, 3)
    assert "v2" in first.item
    assert first.created_at == created.created_at
    assert first.updated_at == clock.t
    assert store.feed_updated("s", "") == clock.t
    # an older event written later (an outer join's lonely row, decided after its
    # enriched pair was published) does not replace the newer version
    clock.t += 10
    store.write_batch("q", 2, [OutRow("s", "", 150, 0, item(1, "v3"))])
    first = store.latest("s", "", 1)[0]
    assert (first.ts, first.seq) == (200, 3) and "v2" in first.item
    assert first.updated_at == clock.t - 10


def test_same_guid_within_one_batch_newest_wins(store: Store) -> None:
    store.write_batch(
        "q", 0, [OutRow("s", "", 9, 0, item(1, "new")), OutRow("s", "", 5, 0, item(1, "old"))]
    )
    [entry] = store.latest("s", "", 10)
    assert entry.ts == 9 and "new" in entry.item


def test_identical_rewrite_does_not_touch_updated(store: Store, clock: Clock) -> None:
    row = OutRow("s", "", 1, 0, item(1))
    store.write_batch("q", 0, [row])
    t0 = store.feed_updated("s", "")
    clock.t += 60
    assert store.write_batch("q", 1, [row]) is True
    assert store.feed_updated("s", "") == t0


def test_parts_and_isolation(store: Store) -> None:
    store.write_batch(
        "q", 0, [OutRow("t", "sport", 1, 0, item(1)), OutRow("t", "other", 2, 0, item(1))]
    )
    assert store.parts("t") == ["other", "sport"]
    assert store.count("t", "sport") == 1 and store.count("t", "other") == 1
    store.write_batch("q", 1, [OutRow("t", "a/b c", 3, 0, item(3))])
    assert store.parts("t") == ["a/b c", "other", "sport"]
    assert store.streams() == ["t"]
    # the names read once are kept as streams come and go
    store.write_batch("q", 2, [OutRow("b", "", 4, 0, item(4))])
    assert store.streams() == ["b", "t"]
    store.restart_streams(["t"])
    assert store.streams() == ["b"]
    assert Store(store.path).streams() == ["b"]  # what the file says


def test_malformed_item_is_dropped_not_fatal(store: Store) -> None:
    assert store.write_batch(
        "q", 0, [OutRow("s", "", 1, 0, "<item><title>x</item>"), OutRow("s", "", 2, 0, item(2))]
    )
    assert store.count("s", "") == 1


def test_persists_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with Store(path) as s:
        s.write_batch("q", 0, [OutRow("s", "", 1, 0, item(1))])
    with Store(path) as s:
        assert s.count("s", "") == 1
        assert s.write_batch("q", 0, [OutRow("s", "", 2, 0, item(2))]) is False


def test_closed_store_raises(tmp_path: Path) -> None:
    s = Store(tmp_path / "s.sqlite")
    s.close()
    with pytest.raises(StoreError):
        s.latest("s", "", 1)


def test_concurrent_writer_and_readers(store: Store) -> None:
    errors: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        try:
            for b in range(50):
                store.write_batch(
                    "q", b, [OutRow("s", "", b * 10 + i, 0, item(f"{b}-{i}")) for i in range(10)]
                )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    def reader() -> None:
        try:
            while not done.is_set():
                entries = store.latest("s", "", 20)
                # a batch is all or nothing
                assert store.count("s", "") % 10 == 0
                assert entries == sorted(entries, key=lambda e: (e.ts, e.seq), reverse=True)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert store.count("s", "") == 500
