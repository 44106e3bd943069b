"""The documentation site: it builds with ``mkdocs build --strict`` (no broken link or
anchor, every page in the navigation), and its feeds.yaml reference documents every
setting, every source and publish key and every operator with each of its arguments,
as the code reads them (a test that fails naming what is missing, as datasette checks
its documentation).

The keys are not listed here: they are recorded from the code, by watching every
:class:`~roses_app.config.fields.Section` (a mapping of feeds.yaml with a closed set of
keys) that the loader makes while reading configs that use every section.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import system_packages

from roses_app.config import fields, parse_config

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "docs" / "reference.md"
INSTALL = f"{REPO}/.venv/bin/pip install -e '{REPO}[test]' (scripts/test does it)"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        system_packages.skip_missing("mkdocs and mkdocs-material are not installed", INSTALL)
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "reference" / "index.html").is_file()


# -- the reference documents every key ---------------------------------------------------

# a config that makes the loader read every section that depends on what is written:
# every kind of source and a published stream (the operators come from the reference's
# own operator table, each example with its placeholders filled in)
EVERY_SECTION = """
sources:
  feed: {feed: "https://example.org/a.rss"}
  letters: {mail: {maildir: /tmp/maildir}}
  inbox: {mail: {imap: {host: imap.example.org, user: me, password_env: ROSES_IMAP}}}
  smtp: {mail: {smtp: {host: 127.0.0.1, port: 2525, accept: ["news@roses.local"]}}}
streams:
  published:
    filter: {from: feed, where: "true()"}
    publish: {title: T, keep: {count: 5}}
"""


def recorded_sections() -> dict[str, set[str]]:
    """Section name (``settings.fetch``, ``sources.NAME.mail.imap``,
    ``streams.NAME.publish``, ``join``...) → the keys the code accepts there."""
    import test_readme_examples as examples

    seen: dict[str, set[str]] = {}
    original = fields.Section.__init__

    def watching(self: fields.Section, problems, node, what, **kwargs) -> None:  # type: ignore[no-untyped-def]
        original(self, problems, node, what, **kwargs)
        order = kwargs.get("order")
        keys = order or [*kwargs.get("required", ()), *kwargs.get("optional", ())]
        name = re.sub(r"^(sources|streams)\.[^.]+", r"\1.NAME", what)
        seen.setdefault(name, set()).update(keys)

    fields.Section.__init__ = watching  # type: ignore[method-assign]
    try:
        parse_config(EVERY_SECTION, REPO / "feeds.yaml")
        for example in examples.EXAMPLES:
            text = f"{examples.SOURCES}streams:\n  s:\n    {examples.filled_in(example)}\n"
            parse_config(text, REPO / "feeds.yaml")
    finally:
        fields.Section.__init__ = original  # type: ignore[method-assign]
    seen["feeds.yaml"] = seen.pop("the top level")
    return seen


def headed_sections(text: str) -> Iterator[tuple[str, str]]:
    """(the first code span of a heading, the text under it up to the next heading)."""
    parts = re.split(r"^(#{1,6} .*)$", text, flags=re.MULTILINE)
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        code = re.search(r"`([^`]+)`", heading)
        if code:
            yield code.group(1), body


def documented_keys(body: str) -> set[str]:
    """The keys of a section's table: the code span that starts each row."""
    return set(re.findall(r"^\| `([^`]+)` \|", body, re.MULTILINE))


def test_the_sections_were_recorded() -> None:
    sections = recorded_sections()
    from roses_app.config.operator_registry import operator_names

    assert {"settings", "settings.fetch", "sources.NAME.mail.imap", "join"} <= set(sections)
    assert set(operator_names()) - {"union"} <= set(sections)  # union: a list, no keys


def test_the_reference_documents_every_setting_source_key_and_operator() -> None:
    from roses_app.config.operator_registry import operator_names

    documented = dict(headed_sections(REFERENCE.read_text(encoding="utf-8")))
    missing: list[str] = []
    for name in operator_names():
        if name not in documented:
            missing.append(f"operator {name} (a heading ### `{name}`)")
    for section, keys in sorted(recorded_sections().items()):
        if section not in documented:
            missing.append(f"{section} (a heading with `{section}` and a table of its keys)")
            continue
        in_table = documented_keys(documented[section])
        missing += [f"{section}.{key}" for key in sorted(keys - in_table)]
    assert not missing, (
        "docs/reference.md does not document (a table row | `KEY` | under the heading "
        "of its section):\n  " + "\n  ".join(missing)
    )


def test_the_reference_documents_no_key_the_code_does_not_read() -> None:
    sections = recorded_sections()
    documented = dict(headed_sections(REFERENCE.read_text(encoding="utf-8")))
    extra = [
        f"{section}.{key}"
        for section, keys in sections.items()
        if section in documented
        for key in sorted(documented_keys(documented[section]) - keys)
    ]
    assert not extra, "docs/reference.md documents keys that do not exist: " + ", ".join(extra)
