"""Static export of every published feed, for ``roses once`` under cron.

The files mirror the server's URL layout, so the folder can be served by any web
server: ``feeds/NAME.rss`` (and ``.atom``, ``.json``, ``.html``), ``feeds/NAME/VALUE.atom``
(a long VALUE: its beginning and a hash of it),
``feeds.opml`` (and ``feeds-json.opml``, listing the JSON Feeds), ``index.html``.
Each file is replaced atomically so a web server never serves half a document.  A
file whose bytes would not change is left alone: a cron run rewrites the feeds that
changed, not every feed of every subscription (creating a file cost 0.2 ms here,
reading one back under 0.1 ms), and its time stays the one of its last change.  An
Atom feed with no entry is dated when its document was first written (the file's
time), not at each export.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from roses_app.config.model import Config
from roses_app.items import part_filename
from roses_app.publish.catalog import FORMATS, Catalog, feeds_of, render_feed
from roses_app.publish.pages import render_index, render_opml
from roses_app.store import Store


@dataclass
class Exported:
    """The files of an export; ``unchanged``: how many already held their bytes."""

    files: list[Path] = field(default_factory=list)
    unchanged: int = 0
    _folders: set[Path] = field(default_factory=set, repr=False)

    def write(self, path: Path, body: bytes, dated: float | None = None) -> None:
        """Write ``body`` to ``path`` unless it holds it; ``dated``: the file's time."""
        self.files.append(path)
        folder = path.parent
        if folder not in self._folders:  # once per folder, not once per file
            folder.mkdir(parents=True, exist_ok=True)
            self._folders.add(folder)
        try:
            same = path.stat().st_size == len(body) and path.read_bytes() == body
        except FileNotFoundError:
            same = False
        if same:
            self.unchanged += 1
            return
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(body)
        if dated is not None:
            os.utime(tmp, (dated, dated))
        os.replace(tmp, path)


def _first_written(path: Path) -> float:
    """When the document at ``path`` was first written (now, if it was not), to the
    second as Atom dates it."""
    try:
        return float(int(path.stat().st_mtime))
    except FileNotFoundError:
        return float(int(time.time()))


def export_static(config: Config, store: Store, out_dir: Path) -> Exported:
    """Render every feed document into ``out_dir``."""
    catalog = Catalog(config, store)
    exported = Exported()
    groups = catalog.groups()  # once: each call asks the store for every stream's parts
    feeds = feeds_of(groups)
    for info in feeds:
        entries = store.latest(info.stream, info.part, info.keep)
        updated = store.feed_updated(info.stream, info.part)
        for fmt in FORMATS:
            # A split value never escapes its folder ('/' and a leading '.' are quoted),
            # and a long one is named by its beginning and a hash (its URL names it so).
            name = f"{info.stream}/{part_filename(info.part)}" if info.split else info.stream
            target = out_dir / "feeds" / f"{name}.{fmt}"
            if fmt == "atom" and updated is None and not entries:  # Atom dates it
                dated = _first_written(target)
                exported.write(target, render_feed(fmt, info, entries, dated), dated)
            else:
                exported.write(target, render_feed(fmt, info, entries, updated))
    exported.write(out_dir / "feeds.opml", render_opml(groups))
    exported.write(out_dir / "feeds-json.opml", render_opml(groups, fmt="json"))
    exported.write(out_dir / "index.html", render_index(groups, catalog.stats(feeds)))
    return exported
