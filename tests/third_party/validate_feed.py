"""The W3C Feed Validator, run offline on RSS, Atom or OPML files.

``feedvalidator/`` is the code behind validator.w3.org/feed (its licence:
``feedvalidator/LICENSE``), kept here unchanged so that the tests need nothing beside
the clone; it needs lxml, html5lib and rdflib (the ``test`` extra)::

    python tests/third_party/validate_feed.py FILE... [--base URL]

Per file: ``== FILE``, then each message at the level the online validator shows, or
``No errors or warnings``; the exit status is 1 when any file has a message.  The
default base is the document's own ``rel="self"`` link, so a local file is checked as
if it were served there.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import feedvalidator
from feedvalidator import compatibility
from feedvalidator.formatter.text_plain import Formatter

DEFAULT_BASE = "http://127.0.0.1:8080/"


def self_link(data: bytes) -> str:
    """Where the document says it lives (its ``rel="self"`` link)."""
    for tag in re.findall(rb"<[^>]*link[^>]*>", data[:20000]):
        if re.search(rb"""rel=["']self["']""", tag):
            found = re.search(rb"""href=["']([^"']+)["']""", tag)
            if found:
                return found.group(1).decode("utf-8", "replace")
    return DEFAULT_BASE


def messages(data: bytes, base: str | None) -> list[str]:
    try:
        logged = feedvalidator.validateString(
            data, firstOccurrenceOnly=1, base=base or self_link(data)
        )["loggedEvents"]
    except feedvalidator.logging.ValidationFailure as failure:
        logged = [failure.event]
    return list(Formatter(compatibility.AA(logged)))


def main(args: list[str]) -> int:
    base = None
    if "--base" in args:
        at = args.index("--base")
        base = args[at + 1]
        del args[at : at + 2]
    bad = 0
    for path in args:
        found = messages(Path(path).read_bytes(), base)
        print(f"== {path}")
        print("\n".join(found) if found else "No errors or warnings")
        bad += bool(found)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
