"""The connector over feedparser's own test suite (~2,200 feed files).

The feedparser sdist of the installed version is downloaded at test time with pip
into ``.cache/feedparser-sdist`` (kept between runs) and its ``tests/`` folder is
extracted next to it.  Every ``.xml`` file goes through ``parse_feed`` with the HTTP
headers its ``Header:`` comments declare (as feedparser's own test server sends
them): nothing may crash (a FeedParseError for a document that is no feed is
allowed and counted), and every entry feedparser returns must become a
well-formed ``<item>``.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tarfile
import time
import warnings
from collections import Counter
from pathlib import Path

import feedparser
import pytest

from roses_app.connectors.xmlize import parse_feed
from roses_app.errors import FeedParseError
from roses_app.items import parse_item

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "feedparser-sdist"
VERSION = feedparser.__version__
HEADER = re.compile(rb"^Header:\s+([^:]+):(.+)$", re.MULTILINE)


def corpus_dir() -> Path:
    tests = CACHE / f"feedparser-{VERSION}" / "tests"
    if (tests / ".complete").exists():
        return tests
    archive = CACHE / f"feedparser-{VERSION}.tar.gz"
    if not archive.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             f"feedparser=={VERSION}", "-d", str(CACHE)],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if proc.returncode != 0 or not archive.exists():
            pytest.fail(
                f"cannot download the feedparser {VERSION} sdist (PyPI must be reachable):"
                f" {proc.stderr[-500:]}"
            )
    prefix = f"feedparser-{VERSION}/tests/"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        tar.extractall(CACHE, members=members, filter="data")
    (tests / ".complete").touch()
    return tests


def test_feedparser_corpus_never_crashes_and_every_entry_is_an_item():
    root = corpus_dir()
    files = sorted(root.rglob("*.xml"))
    assert len(files) > 2000, f"only {len(files)} files in {root}"
    stats: Counter[str] = Counter()
    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # feedparser's own DeprecationWarnings
        for path in files:
            body = path.read_bytes()
            headers = {k.decode().strip(): v.decode().strip() for k, v in HEADER.findall(body)}
            url = "http://127.0.0.1:8097/" + path.relative_to(root.parent).as_posix()
            try:
                parsed = parse_feed(body, url, headers)
            except FeedParseError:
                stats["not a feed"] += 1
                continue
            stats["feeds"] += 1
            stats[f"format {parsed.version or '?'}"] += 1
            stats["bozo"] += parsed.bozo
            assert parsed.skipped == 0, path
            lowered = {k.lower(): v for k, v in headers.items()}
            raw = feedparser.parse(io.BytesIO(body), response_headers=lowered)
            assert len(parsed.entries) == len(raw.entries), path  # none dropped
            for xml, published in parsed.entries:
                item = parse_item(xml)  # well-formed, or this raises
                assert item.tag == "item", path
                assert published is None or isinstance(published, int)
                stats["items"] += 1
    elapsed = time.monotonic() - started
    print(f"\nfeedparser {VERSION} corpus: {len(files)} files in {elapsed:.1f} s: {dict(stats)}")
    assert stats["items"] > 1000
    assert stats["not a feed"] < 50  # fragments and deliberately broken documents only
    assert elapsed < 60
