"""Static export of every published feed, for ``roses once`` under cron.

The files mirror the server's URL layout, so the folder can be served by any web
server: ``feeds/NAME.rss`` (and ``.atom``, ``.json``, ``.html``), ``feeds/NAME/VALUE.atom``,
``feeds.opml`` (and ``feeds-json.opml``, listing the JSON Feeds), ``index.html``.
Each file is replaced atomically so a web server never serves half a document.
"""

from __future__ import annotations

import os
from pathlib import Path

from roses_app.config.model import Config
from roses_app.items import safe_filename
from roses_app.publish.catalog import FORMATS, Catalog, render_feed
from roses_app.publish.pages import render_index, render_opml
from roses_app.store import Store


def _write(path: Path, body: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(body)
    os.replace(tmp, path)
    return path


def export_static(config: Config, store: Store, out_dir: Path) -> list[Path]:
    """Render every feed document into ``out_dir``; returns the files written."""
    catalog = Catalog(config, store)
    written: list[Path] = []
    feeds = catalog.feeds()
    for info in feeds:
        entries = store.latest(info.stream, info.part, info.keep)
        updated = store.feed_updated(info.stream, info.part)
        for fmt in FORMATS:
            # A split value never escapes its folder: '/' and a leading '.' are quoted.
            name = f"{info.stream}/{safe_filename(info.part)}" if info.split else info.stream
            target = out_dir / "feeds" / f"{name}.{fmt}"
            written.append(_write(target, render_feed(fmt, info, entries, updated)))
    written.append(_write(out_dir / "feeds.opml", render_opml(catalog.groups())))
    written.append(_write(out_dir / "feeds-json.opml", render_opml(catalog.groups(), fmt="json")))
    written.append(
        _write(out_dir / "index.html", render_index(catalog.groups(), catalog.stats(feeds)))
    )
    return written
