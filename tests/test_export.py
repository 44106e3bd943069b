"""``roses once``'s static export: a second run rewrites only the documents that changed."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

from roses_app.config import load_config
from roses_app.config.model import Config
from roses_app.items import MICROS
from roses_app.publish.export import export_static
from roses_app.store import OutRow, Store

T0 = 1_717_200_000 * MICROS


def item(n: int) -> str:
    return (
        f"<item><title>News {n}</title><link>https://news.example.org/{n}</link>"
        f"<guid>https://news.example.org/{n}</guid><description>Story {n}.</description></item>"
    )


def write_config(folder: Path) -> Path:
    path = folder / "feeds.yaml"
    path.write_text(
        "settings: {data_dir: ./data, http: {base_url: 'https://roses.example.org'}}\n"
        "sources: {src: {feed: 'https://news.example.org/feed.rss'}}\n"
        "streams:\n"
        "  news: {filter: {from: src, where: 'true()'}, publish: true}\n"
        "  quiet: {filter: {from: src, where: 'true()'}, publish: true}\n"
    )
    return path


def published(tmp_path: Path) -> tuple[Config, Store, Path]:
    """The config, a store where both feeds have an item, and the export folder."""
    config = load_config(write_config(tmp_path))
    store = Store(tmp_path / "store.sqlite")
    store.write_batch("q", 0, [OutRow(s, "", T0, 1, item(1)) for s in ("news", "quiet")])
    return config, store, tmp_path / "public"


def test_a_second_export_rewrites_only_the_feeds_that_changed(tmp_path: Path) -> None:
    config, store, out = published(tmp_path)
    first = export_static(config, store, out)
    names = {p.relative_to(out).as_posix() for p in first.files}
    assert {"feeds/news.rss", "feeds/quiet.atom", "feeds.opml", "index.html"} <= names
    assert first.unchanged == 0 and all(p.is_file() for p in first.files)
    before = {p: p.stat().st_mtime_ns for p in first.files}
    for path in first.files:  # an old time: a rewrite would show
        os.utime(path, ns=(T0 * 1000, T0 * 1000))

    store.write_batch("q", 1, [OutRow("news", "", T0 + MICROS, 2, item(2))])
    second = export_static(config, store, out)
    assert second.files == first.files  # the same documents, in the same order
    rewritten = {
        p.relative_to(out).as_posix() for p in second.files if p.stat().st_mtime_ns != T0 * 1000
    }
    # the news feed in every format, and the index that tells its count and time
    assert {f"feeds/news.{fmt}" for fmt in ("rss", "atom", "json", "html")} <= rewritten
    assert not any(name.startswith("feeds/quiet.") for name in rewritten)
    assert second.unchanged == len(second.files) - len(rewritten)
    assert "News 2" in (out / "feeds" / "news.rss").read_text("utf-8")
    assert "News 2" not in (out / "feeds" / "quiet.rss").read_text("utf-8")
    assert not list(out.rglob(".*.tmp")) and len(before) == len(second.files)


def test_a_document_edited_or_removed_by_hand_is_written_again(tmp_path: Path) -> None:
    config, store, out = published(tmp_path)
    first = export_static(config, store, out)
    rss = out / "feeds" / "news.rss"
    body = rss.read_bytes()
    rss.write_bytes(body.replace(b"News 1", b"News X"))  # same size, other bytes
    (out / "feeds" / "news.atom").unlink()
    second = export_static(config, store, out)
    assert rss.read_bytes() == body
    assert (out / "feeds" / "news.atom").is_file()
    assert second.unchanged == len(first.files) - 2


def test_an_empty_atom_feed_keeps_the_date_of_its_first_export(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path))
    store = Store(tmp_path / "store.sqlite")
    out = tmp_path / "public"
    export_static(config, store, out)
    atom = out / "feeds" / "quiet.atom"
    made = datetime.fromtimestamp(atom.stat().st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"<updated>{made}</updated>" in atom.read_text("utf-8")
    time.sleep(1.1)  # the next export is a second later at least
    second = export_static(config, store, out)
    assert second.unchanged == len(second.files)
    os.utime(atom, (T0 // MICROS, T0 // MICROS))  # as if first written on 2024-06-01
    export_static(config, store, out)
    assert "<updated>2024-06-01T00:00:00Z</updated>" in atom.read_text("utf-8")
