"""``sources: {opml: FILE}``: a feed reader's subscriptions (its OPML export) as sources.

::

    sources:
      opml: subscriptions.opml        # or a list: [work.opml, home.opml]
      guardian: {feed: "https://www.theguardian.com/world/rss", every: 10m}

Every outline with an ``xmlUrl`` becomes a feed source, polled every
``settings.fetch.every``:

- its name is the outline's title (else its text, else the URL's host), in lower
  case, letters and digits with ``-`` between words (``Ars Technica`` →
  ``ars-technica``), made unique with ``-2``, ``-3``... against the sources written in
  feeds.yaml and those imported before it;
- its categories are the titles of the folders (enclosing outlines) it is in,
  outermost first, then the parts of its ``category`` attribute (OPML 2.0:
  comma-separated, ``/``-delimited paths such as ``/Tech/Linux,news``), each once;
- a feed listed twice (in two folders) is one source with the categories of both;
  a feed whose URL a source of feeds.yaml already polls is not imported again.

Paths are relative to the folder of feeds.yaml; ``file:`` URLs inside the OPML file
to the OPML file's folder.  The file is parsed by lxml without resolving external
entities, loading a DTD or using the network.  A file that cannot be read, is not
well-formed or is not OPML is a config problem; an outline that is no feed (no
``xmlUrl``, an unsupported URL) is skipped with a warning naming feeds.yaml's line and
the OPML file's line, and the others are imported.
"""

from __future__ import annotations

import json
import logging
import os
import re
import unicodedata
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from roses_app.algebra.plan.operators import Origin
from roses_app.config.fields import Problems
from roses_app.config.model import FeedSource
from roses_app.config.yamlmarks import Marked, describe
from roses_app.errors import RosesError

if TYPE_CHECKING:  # lxml is imported when a file is read: config loads without it
    from lxml import etree

log = logging.getLogger(__name__)

MAX_BYTES = 10 * 1024 * 1024  # an export of thousands of feeds is well under 1 MB
MAX_NAME = 40
_NOT_NAME = re.compile(r"[^a-z0-9]+")
_SPACE = re.compile(r"\s+")

UrlOf = Callable[[str, Path], str]  # (xmlUrl as written, OPML folder) -> URL; ValueError


class OpmlError(RosesError, ValueError):
    """An OPML file cannot be read, is not well-formed XML, or is not OPML."""

    def __init__(self, message: str, line: int = 0) -> None:
        self.line = line
        super().__init__(message)


@dataclass(frozen=True)
class ImportedFeed:
    """One feed of an OPML file, as a source: ``line`` is its outline's line."""

    name: str
    url: str
    categories: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class Imported:
    """The feeds of an OPML file, and the outlines skipped: ``(line, why)``."""

    shown: str  # the path as the user wrote it
    feeds: tuple[ImportedFeed, ...]
    skipped: tuple[tuple[int, str], ...]


def import_opml(
    path: Path,
    url_of: UrlOf,
    *,
    taken: Collection[str] = (),
    known_urls: Collection[str] = (),
    shown: str | None = None,
) -> Imported:
    """The feeds of the OPML file at ``path`` (named ``shown`` in messages): names
    unique against ``taken``, URLs made by ``url_of`` (relative ``file:`` URLs against
    the file's folder), feeds at ``known_urls`` left out.  Raises :class:`OpmlError`
    for the file as a whole."""
    shown = str(path) if shown is None else shown
    body = _body(path, shown)
    base_dir = Path(os.path.abspath(path)).parent
    names = set(taken)
    by_url: dict[str, ImportedFeed] = {}
    skipped: list[tuple[int, str]] = []
    listed = 0  # outlines that are feeds
    for outline, folders in _outlines(body):
        line = outline.sourceline or 0
        title = _title(outline)
        xml_url = _attribute(outline, "xmlurl")
        if not xml_url:
            if len(outline) == 0:
                what = f"outline {title!r}" if title else "an outline"
                skipped.append((line, f"{what} has no xmlUrl and no outlines in it: no feed"))
            continue
        try:
            url = url_of(xml_url, base_dir)
        except ValueError as exc:
            skipped.append((line, f"outline {title or xml_url!r}: {exc}"))
            continue
        categories = _categories(folders, _attribute(outline, "category"))
        listed += 1
        if url in known_urls:
            continue
        if url in by_url:
            feed = by_url[url]
            merged = _unique(feed.categories + categories)
            by_url[url] = ImportedFeed(feed.name, feed.url, merged, feed.line)
            continue
        name = _unique_name(source_name(title, url), names)
        names.add(name)
        by_url[url] = ImportedFeed(name, url, categories, line)
    if not listed and not skipped:
        skipped.append((body.sourceline or 0, "no outline has an xmlUrl: no feed to import"))
    return Imported(shown, tuple(by_url.values()), tuple(skipped))


def opml_sources(
    problems: Problems,
    node: Marked,
    base_dir: Path,
    every: float,
    url_of: UrlOf,
    *,
    taken: set[str],
    known_urls: set[str],
) -> list[FeedSource]:
    """The feed sources of ``sources.opml`` (a path or a list of paths, relative to
    ``base_dir``); ``taken`` and ``known_urls`` grow with each source."""
    entries = node.value if node.is_seq else [node]
    if node.is_seq and not entries:
        problems.add(node.line, "sources.opml must list at least one OPML file")
    out: list[FeedSource] = []
    for entry in entries:
        if not isinstance(entry.value, str) or not entry.value.strip():
            problems.add(
                entry.line,
                "sources.opml must be the path of an OPML file (e.g. subscriptions.opml) "
                f"or a list of them, got {describe(entry)}",
            )
            continue
        path = Path(os.path.normpath(base_dir / Path(entry.value.strip()).expanduser()))
        try:
            imported = import_opml(
                path, url_of, taken=taken, known_urls=known_urls, shown=entry.value.strip()
            )
        except OpmlError as exc:
            problems.add(entry.line, f"sources.opml: {exc}")
            continue
        for line, why in imported.skipped:
            log.warning(
                "%s:%d: sources.opml: %s:%d: %s; skipped",
                problems.file,
                entry.line,
                imported.shown,
                line,
                why,
            )
        for feed in imported.feeds:
            taken.add(feed.name)
            known_urls.add(feed.url)
            origin = Origin(str(path), feed.line, "", f"source:{feed.name}")
            out.append(
                FeedSource(feed.name, feed.url, every, feed.categories, origin=origin, fixed=False)
            )
    return out


def sources_block(imported: Imported) -> str:
    """The ``sources:`` block of feeds.yaml that lists the feeds of ``imported``."""
    lines = [
        f"# {len(imported.feeds)} feeds from {imported.shown} (roses import)",
        "sources:",
    ]
    for feed in imported.feeds:
        fields = [f"feed: {_quoted(feed.url)}"]
        if feed.categories:
            fields.append(f"categories: [{', '.join(_quoted(c) for c in feed.categories)}]")
        lines.append(f"  {feed.name}: {{{', '.join(fields)}}}")
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    """A YAML double-quoted scalar (a JSON string is one)."""
    return json.dumps(text, ensure_ascii=False)


def _body(path: Path, shown: str) -> etree._Element:
    """The ``<body>`` of the OPML file at ``path``."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise OpmlError(f"cannot read {shown}: {reason}") from exc
    if len(data) > MAX_BYTES:
        raise OpmlError(
            f"{shown} is larger than {MAX_BYTES // (1024 * 1024)} MB: not a list of subscriptions"
        )
    # imported here: loading a config that imports no OPML file needs no lxml
    from lxml import etree

    from roses_app.items import safe_parser

    try:
        root = etree.fromstring(data, safe_parser())
    except etree.XMLSyntaxError as exc:
        line = exc.lineno or 0
        raise OpmlError(
            f"{shown}:{line}: not valid XML ({exc.msg}); export the subscriptions "
            "again from the feed reader",
            line,
        ) from exc
    if _local(root) != "opml":
        raise OpmlError(
            f"{shown}:{root.sourceline}: not an OPML file (its root element is "
            f"<{_local(root)}>, expected <opml>)",
            root.sourceline or 0,
        )
    body = next((c for c in root if _local(c) == "body"), None)
    if body is None:
        raise OpmlError(f"{shown}: the OPML file has no <body>, so no outlines", 0)
    return body


def _outlines(body: etree._Element) -> Iterator[tuple[etree._Element, tuple[str, ...]]]:
    """Every outline in document order, with the titles of the outlines around it."""
    stack: list[tuple[etree._Element, tuple[str, ...]]] = [(body, ())]
    while stack:
        parent, folders = stack.pop()
        children = [c for c in parent if _local(c) == "outline"]
        inner = folders if parent is body else (*folders, _title(parent))
        inner = tuple(f for f in inner if f)
        for child in reversed(children):
            stack.append((child, inner))
        if parent is not body:
            yield parent, folders


def _local(element: etree._Element) -> str:
    """The element's name without namespace, in lower case ("" for a comment)."""
    tag = element.tag
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


def _attribute(element: etree._Element, name: str) -> str:
    """An attribute by name in any case (exports write xmlUrl, xmlurl or XMLURL)."""
    for key, value in element.attrib.items():
        if str(key).lower() == name:
            return _SPACE.sub(" ", str(value)).strip()
    return ""


def _title(outline: etree._Element) -> str:
    return _attribute(outline, "title") or _attribute(outline, "text")


def _categories(folders: tuple[str, ...], attribute: str) -> tuple[str, ...]:
    parts = [part.strip() for path in attribute.split(",") for part in path.split("/")]
    return _unique(folders + tuple(p for p in parts if p))


def _unique(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


def source_name(title: str, url: str) -> str:
    """A source name from a feed's title (else its URL): ``a-z``, ``0-9`` and ``-``."""
    name = _slug(title)
    if not name:
        parts = urlsplit(url)
        host = (parts.hostname or "").removeprefix("www.")
        name = _slug(host) or _slug(Path(parts.path).stem)
    return name or "feed"


def _slug(text: str) -> str:
    ascii_text = "".join(
        c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)
    )
    name = _NOT_NAME.sub("-", ascii_text.lower()).strip("-")
    if len(name) > MAX_NAME:  # cut at the end of a word
        cut = name[: MAX_NAME + 1].rsplit("-", 1)[0]
        name = cut if len(cut) >= MAX_NAME // 2 else name[:MAX_NAME].rstrip("-")
    return name


def _unique_name(name: str, taken: Collection[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}-{n}", n + 1
    return candidate
