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
import shutil
import subprocess
import sys
import tarfile
import time
import warnings
from collections import Counter
from pathlib import Path

import feedparser
import pytest
from system_packages import skip_unless

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
        extract(tar, members, CACHE)
    (tests / ".complete").touch()
    return tests


def extract(
    tar: tarfile.TarFile,
    members: list[tarfile.TarInfo],
    folder: Path,
    *,
    data_filter: bool = hasattr(tarfile, "data_filter"),
) -> None:
    """Extract ``members`` of ``tar`` into ``folder``, nothing outside it: with tarfile's
    ``data`` filter where this Python has it (3.11.4 on; Debian 12's 3.11.2 has not),
    else member by member, only folders and regular files (no link, no device) whose
    path stays inside ``folder``; a member that breaks this raises ``tarfile.TarError``."""
    if data_filter:
        tar.extractall(folder, members=members, filter="data")
        return
    root = folder.resolve()
    for member in members:
        target = (root / member.name).resolve()
        if member.name.startswith("/") or not target.is_relative_to(root) or target == root:
            raise tarfile.TarError(f"{member.name!r} would be written outside {root}")
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
        elif member.isfile():
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None  # a regular file has its data
            with source, open(target, "wb") as out:  # mode: the umask's, as the filter does
                shutil.copyfileobj(source, out)
        else:
            raise tarfile.TarError(f"{member.name!r} is no folder or regular file: not extracted")


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


def archive_of(folder: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    path = folder / "test.tar"
    with tarfile.open(path, "w") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o4755  # setuid: never kept
    return info


@pytest.mark.parametrize(
    "data_filter", [False, pytest.param(True, marks=skip_unless(
        hasattr(tarfile, "data_filter"),
        "tarfile's data filter is new in Python 3.11.4 (an older one extracts member by "
        "member, the case above)",
        "to test it as well, make the venv with a later Python: pip install uv && uv python "
        "install 3.12 && rm -rf .venv && uv venv --seed --python 3.12 .venv, then scripts/test"))],
    ids=["member by member", "data filter"],
)  # fmt: skip
def test_extract_writes_files_inside_the_folder_and_nothing_outside(
    tmp_path: Path, data_filter: bool
) -> None:
    good = [(entry("pkg/tests", tarfile.DIRTYPE), b""), (entry("pkg/tests/a.xml"), b"<a/>")]
    with tarfile.open(archive_of(tmp_path, good)) as tar:
        extract(tar, tar.getmembers(), tmp_path / "out", data_filter=data_filter)
    written = tmp_path / "out" / "pkg" / "tests" / "a.xml"
    assert written.read_bytes() == b"<a/>" and not written.stat().st_mode & 0o4000
    hostile = {
        "up": [(entry("pkg/../../escaped.xml"), b"x")],
        "absolute": [(entry(str(tmp_path / "absolute.xml")), b"x")],
        "symlink out": [(entry("pkg/link", tarfile.SYMTYPE, "/etc/passwd"), b"")],
        "hard link out": [(entry("pkg/hard", tarfile.LNKTYPE, "../../escaped.xml"), b"")],
    }
    refused = []
    for name, members in hostile.items():
        folder = tmp_path / name
        folder.mkdir()
        with tarfile.open(archive_of(folder, members)) as tar:
            try:
                extract(tar, tar.getmembers(), folder / "out", data_filter=data_filter)
            except tarfile.TarError:
                refused.append(name)
    assert not (tmp_path / "escaped.xml").exists() and not (tmp_path / "absolute.xml").exists()
    assert not list(tmp_path.glob("*/out/pkg/link")) and not list(tmp_path.glob("*/out/pkg/hard"))
    # the filter extracts an absolute name inside the folder; member by member refuses it
    assert refused == [n for n in hostile if data_filter is False or n != "absolute"]
