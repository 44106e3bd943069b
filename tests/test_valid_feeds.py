"""Every RSS 2.0, Atom 1.0 and OPML document ROSES publishes from valid input passes
the W3C Feed Validator with no error and no warning.

The inputs (``tests/data/valid``: RSS 2.0, RSS 1.0, Atom, an empty feed, items without
a date, a link or a title, items with their own source, enclosures, name-only and
e-mail authors, and the shipped sample feeds) are read by the connector, run through
identity, union, split, map, join and aggregate streams (the reference engine), stored
and exported as ``roses once`` does; the validator checks every document in one run.
The shipped ``feeds.yaml`` goes through the real ``roses once`` (marked ``e2e``).

The validator is the W3C's own code, kept in ``tests/third_party/feedvalidator`` and run
by ``tests/third_party/validate_feed.py`` (it needs html5lib and rdflib: the ``test``
extra).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from lxml import etree

from roses_app.algebra.reference.evaluator import RefInput
from roses_app.config import load_config
from roses_app.connectors.xmlize import parse_feed
from roses_app.items import MICROS
from roses_app.publish.export import export_static
from roses_app.replay import EventList, run_reference
from roses_app.store import OutRow, Store

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "valid"
VALIDATOR = REPO / "tests" / "third_party" / "validate_feed.py"
T0 = 1_716_368_400 * MICROS  # 2024-05-22T09:00:00Z
MINUTE = 60 * MICROS

# (source, file, minutes after T0): one poll each; the coast feed is polled twice
POLLS = [
    ("coast", DATA / "coast.xml", 0),
    ("tides", DATA / "observatory.rdf", 1),
    ("blog", DATA / "blog.atom", 2),
    ("lighthouse", DATA / "empty.xml", 3),
    ("worldnews", REPO / "examples/feeds/worldnews.xml", 4),
    ("bigpicture", REPO / "examples/feeds/bigpicture.xml", 5),
    ("football", REPO / "examples/feeds/football.xml", 6),
    ("observatory", REPO / "examples/feeds/volcano-observatory.xml", 7),
    ("podcast", REPO / "examples/feeds/podcast.xml", 8),
    ("coast", DATA / "coast-later.xml", 90),
]
FEED_URL = {"coast": "https://coast.example.org/feed.rss"}


def validate(files: list[Path]) -> dict[str, list[str]]:
    """Each file's messages (the known gaps left out), from one run of the validator."""
    run = subprocess.run(
        [sys.executable, str(VALIDATOR), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    messages: dict[str, list[str]] = {}
    current = ""
    for line in run.stdout.splitlines():
        if line.startswith("== "):
            current = line[3:]
            messages[current] = []
        elif line != "No errors or warnings":
            messages[current].append(line)
    assert sorted(messages) == sorted(map(str, files)), run.stdout + run.stderr
    return messages


def events() -> Iterator[RefInput]:
    """The polls as the spool makes them: one ingest time for all items of a poll."""
    seq = 0
    for source, path, minutes in POLLS:
        parsed = parse_feed(path.read_bytes(), FEED_URL.get(source, path.as_uri()))
        assert parsed.dropped == 0 and parsed.skipped == 0, path  # valid input
        for xml, _published in parsed.entries:
            seq += 1
            yield RefInput(source, T0 + minutes * MINUTE, seq, xml)
    yield RefInput("", T0 + 24 * 60 * MINUTE, seq + 1, None)  # a day later: windows close


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tests/data/valid`` republished: the files ``roses once`` would write."""
    config = load_config(DATA / "feeds.yaml")
    outputs = run_reference(config, EventList(list(events()), iso_times=True))
    root = tmp_path_factory.mktemp("valid")
    store = Store(root / "store.sqlite")
    rows = [
        OutRow(stream, part, event.ts, event.seq, event.item)
        for stream, parts in outputs.items()
        for part, evs in parts.items()
        for event in evs
        if event.item is not None
    ]
    store.write_batch("replay", 0, rows)
    export_static(config, store, root / "public")
    return root / "public"


def documents(public: Path) -> list[Path]:
    feeds = sorted((public / "feeds").rglob("*"))
    return [p for p in feeds if p.suffix in (".rss", ".atom")] + [public / "feeds.opml"]


def test_every_document_passes_the_validator(published: Path) -> None:
    files = documents(published)
    names = {str(p.relative_to(published)) for p in files}
    # every kind of stream is there, split parts and empty feeds included
    for name in ("coast-copy", "everything", "headlines", "tagged", "paired", "related"):
        assert {f"feeds/{name}.rss", f"feeds/{name}.atom"} <= names
    assert {"feeds/topics/climate.atom", "feeds/topics/media.rss", "feeds/nothing.atom"} <= names
    assert "feeds/lighthouse-copy.rss" in names and "feeds/hourly-digest.atom" in names
    problems = {name: found for name, found in validate(files).items() if found}
    assert problems == {}


def atom_entries(path: Path) -> dict[str, etree._Element]:
    ns = {"a": "http://www.w3.org/2005/Atom"}
    root = etree.parse(str(path)).getroot()
    return {e.findtext("a:title", namespaces=ns) or "": e for e in root.iterfind("a:entry", ns)}


def rss_items(path: Path) -> dict[str, etree._Element]:
    root = etree.parse(str(path)).getroot()
    return {i.findtext("guid") or "": i for i in root.iter("item")}


def test_authors_are_addresses_in_rss_and_names_in_dc_creator(published: Path) -> None:
    items = rss_items(published / "feeds/coast-copy.rss")
    dc = "{http://purl.org/dc/elements/1.1/}creator"
    surge = items["https://coast.example.org/2024/05/storm-surge"]
    assert surge.findtext("author") == "ed.tern@coast.example.org (Ed Tern)"
    assert surge.find(dc) is None
    lifeboat = items["coast-2024-05-20-lifeboat"]
    assert lifeboat.find("author") is None and lifeboat.findtext(dc) == "Mara Quill"
    ferries = items["https://weekly.example.org/ferries-summer"]
    assert [c.text for c in ferries.iter(dc)] == ["Mara Quill", "Jon Salt"]


def test_an_items_own_source_is_kept_and_names_the_feed_url(published: Path) -> None:
    items = rss_items(published / "feeds/everything.rss")
    ferries = items["https://weekly.example.org/ferries-summer"].find("source")
    assert ferries is not None and ferries.text == "Coast Weekly"
    assert ferries.get("url") == "https://weekly.example.org/feed.rss"
    surge = items["https://coast.example.org/2024/05/storm-surge"].find("source")
    assert surge is not None and surge.get("url") == "https://coast.example.org/feed.rss"
    plan = items["tag:council.example.org,2024:climate-plan"].find("source")
    assert plan is not None and plan.get("url") == "https://council.example.org/news.atom"


def test_undated_items_get_no_publication_date(published: Path) -> None:
    items = rss_items(published / "feeds/coast-copy.rss")
    webcam = items["coast-webcam-back"]
    assert webcam.find("pubDate") is None
    atom = "{http://www.w3.org/2005/Atom}"
    # its updated time is when the poll that brought it came (T0), within a millisecond
    received = webcam.findtext(f"{atom}updated") or ""
    assert received.startswith("2024-05-22T09:00:00.000") and received.endswith("Z")
    entry = atom_entries(published / "feeds/coast-copy.atom")["Harbour webcam is back online"]
    assert entry.find(f"{atom}published") is None
    assert entry.findtext(f"{atom}updated") == received
    dated = atom_entries(published / "feeds/coast-copy.atom")["Lifeboat crew honoured"]
    assert dated.findtext(f"{atom}published") == "2024-05-20T17:05:00Z"
    assert dated.findtext(f"{atom}updated") == "2024-05-20T17:05:00Z"


def test_undated_items_of_one_poll_have_distinct_updated_times(published: Path) -> None:
    atom = "{http://www.w3.org/2005/Atom}"
    entries = atom_entries(published / "feeds/headlines.atom").values()  # no dates kept
    times = [e.findtext(f"{atom}updated") for e in entries]
    assert len(times) > 40 and len(set(times)) == len(times)
    assert all(e.find(f"{atom}published") is None for e in entries)


def test_extensions_readers_do_not_know_stay_out_of_rss(published: Path) -> None:
    """The digest's roses:window and a join's roses:related stay in the store only; the
    related story is a link in the description and an atom:link rel="related"."""
    digest = (published / "feeds/hourly-digest.rss").read_text()
    assert "<item>" in digest and "urn:x-roses" not in digest
    related = rss_items(published / "feeds/related.rss")
    joined = [i for i in related.values() if "Related: " in (i.findtext("description") or "")]
    assert joined
    link = joined[0].find("{http://www.w3.org/2005/Atom}link")
    assert link is not None and link.get("rel") == "related"


def test_entries_without_link_carry_their_text_as_content(published: Path) -> None:
    atom = "{http://www.w3.org/2005/Atom}"
    entries = atom_entries(published / "feeds/coast-copy.atom")
    tides = entries["Tide tables for June"]
    assert tides.find(f"{atom}link[@rel='alternate']") is None
    content = tides.find(f"{atom}content")
    assert content is not None and "06:12" in (content.text or "")


def test_empty_atom_feed_is_dated_when_it_was_made(published: Path) -> None:
    root = etree.parse(str(published / "feeds/nothing.atom")).getroot()
    updated = root.findtext("{http://www.w3.org/2005/Atom}updated") or ""
    assert not updated.startswith("1970") and re.match(r"\d{4}-\d\d-\d\dT", updated)
    assert root.find("{http://www.w3.org/2005/Atom}entry") is None


def test_split_outlines_are_folders_of_typed_feeds(published: Path) -> None:
    body = etree.parse(str(published / "feeds.opml")).getroot().find("body")
    assert body is not None
    folder = next(o for o in body if o.get("text") == "Topics")
    assert dict(folder.attrib) == {"text": "Topics"}
    assert {o.get("type") for o in folder} == {"rss"}


@pytest.mark.e2e
def test_roses_once_on_the_shipped_config_publishes_valid_documents(tmp_path: Path) -> None:
    """``roses once -c feeds.yaml`` (Spark), then every document it wrote."""
    for name in ("examples", "xquery"):
        os.symlink(REPO / name, tmp_path / name)
    shutil.copy(REPO / "feeds.yaml", tmp_path / "feeds.yaml")
    run = subprocess.run(
        [sys.executable, "-m", "roses_app.cli", "once", "-c", str(tmp_path / "feeds.yaml")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    public = tmp_path / "data" / "public"
    files = documents(public)
    assert len(files) >= 15  # 7 streams, the split ones in parts, and the OPML
    problems = {name: found for name, found in validate(files).items() if found}
    assert problems == {}


# -- bad input ---------------------------------------------------------------------------

# What a mutator may leave in an item: unreadable dates, relative and script URIs,
# elements RSS 2.0 does not define, markup in a title that would act as HTML (markup
# that does nothing, as "<i>x</i>", is a title's text: tests/test_real_feeds.py).
MUTATED = (
    '<item><title>&lt;i onclick="alert(1)"&gt;Mutated&lt;/i&gt;</title><link>/relative/page</link>'
    "<description>Kept.</description><pubDate>soon</pubDate><score>7</score>"
    '<enclosure url="javascript:alert(1)" type="audio/mpeg" length="1"/>'
    '<source url="">Nowhere</source><guid isPermaLink="true">not-a-url</guid></item>'
)


def test_bad_input_is_published_valid(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Broken dates, invalid URIs and HTML in titles: the fields that cannot be kept
    valid are dropped (logged with the feed's URL and counted), the rest is published."""
    url = "https://broken.example.org/feed.rss"
    with caplog.at_level("WARNING", logger="roses_app.connectors.xmlize"):
        parsed = parse_feed((DATA / "bad-input.xml").read_bytes(), url)
    # two dates and a javascript: comments page; no item lost
    assert parsed.dropped == 3 and len(parsed.entries) == 3
    dropped = [r.getMessage() for r in caplog.records]
    assert all(m.startswith(url) for m in dropped) and len(dropped) == 3
    assert "'the day before yesterday'" in dropped[0]
    assert "'javascript:alert(2)' is not a web URL" in dropped[2]
    store = Store(tmp_path / "store.sqlite")
    rows = [OutRow("broken", "", T0, n, xml) for n, (xml, _) in enumerate(parsed.entries)]
    rows.append(OutRow("broken", "", T0 + MINUTE, 0, MUTATED))
    store.write_batch("q", 0, rows)
    config = load_config(write_config(tmp_path))
    export_static(config, store, tmp_path / "public")
    files = [tmp_path / "public/feeds/broken.rss", tmp_path / "public/feeds/broken.atom"]
    assert validate(files) == {str(f): [] for f in files}
    items = rss_items(files[0])
    mutated = items["not-a-url"]
    assert mutated.findtext("title") == "Mutated" and mutated.findtext("description") == "Kept."
    for gone in ("link", "pubDate", "score", "enclosure", "source"):
        assert mutated.find(gone) is None, gone
    spaced = items["https://broken.example.org/broken-2"]
    assert spaced.findtext("link") == "https://broken.example.org/a%20page%20with%20spaces"
    iri = items["https://broken.example.org/ünïcödé"]  # an identifier: kept as it is
    assert iri.findtext("link") == "https://broken.example.org/%C3%BCn%C3%AFc%C3%B6d%C3%A9"
    bold = items["broken-1"]
    assert bold.findtext("title") == "Bold claim" and bold.find("pubDate") is None


def write_config(folder: Path) -> Path:
    path = folder / "feeds.yaml"
    path.write_text(
        "settings: {data_dir: ./data, http: {base_url: 'https://roses.example.org'}}\n"
        "sources: {src: {feed: 'https://broken.example.org/feed.rss'}}\n"
        "streams: {broken: {filter: {from: src, where: 'true()'}, publish: true}}\n"
    )
    return path
