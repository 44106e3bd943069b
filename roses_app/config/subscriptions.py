"""``subscriptions:`` of feeds.yaml: filter streams kept as data, one per line.

```yaml
subscriptions: subscriptions.jsonl      # or a list of files (relative to feeds.yaml)
```

Each line of such a file is one JSON object, a filter stream as a stored-query engine
registers a query:

```json
{"name": "volcano", "from": "guardian", "where": "contains(title, 'Iceland')", "publish": true}
```

``from`` is a source or stream name, or a list of them (their union); ``publish`` is
optional, as a stream's (true, or ``{"title": ..., "description": ..., "keep":
{"count": N}}``).  Each line becomes the stream body feeds.yaml would write, with the
line's marks, so the streams are planned, checked and reported as feeds.yaml's are
(``FILE:LINE: message``); a line with a mistake is reported and the others are read
on.  orjson reads a hundred thousand lines in a fraction of the time a YAML parser
takes over the same streams written in feeds.yaml.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from roses_app.config.fields import Problems, check_name
from roses_app.config.limits import MAX_CONFIG_BYTES
from roses_app.config.settings import local_path
from roses_app.config.yamlmarks import Marked, describe

KEYS = ("name", "from", "where", "publish")


@dataclass
class Subscriptions:
    """The streams of the subscriptions files: their bodies (as feeds.yaml's), the
    file and line of each."""

    bodies: dict[str, Marked] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)


def read_subscriptions(problems: Problems, node: Marked | None, base_dir: Path) -> Subscriptions:
    """The subscriptions of the files ``subscriptions:`` names (a path or a list)."""
    found = Subscriptions()
    if node is None:
        return found
    for entry in node.value if node.is_seq else [node]:
        if not isinstance(entry.value, str) or not entry.value.strip():
            problems.add(
                entry.line,
                "subscriptions must be a file (e.g. subscriptions.jsonl) or a list of "
                f"files, got {describe(entry)}",
            )
            continue
        path = local_path(entry.value.strip(), base_dir)
        text = _read(problems, path, entry)
        if text is not None:
            shown = _shown(entry.value.strip(), problems.main, path)
            with problems.at(shown):
                _read_lines(problems, text, shown, found)
    return found


def _shown(written: str, config: str, path: Path) -> str:
    """The file as messages name it: beside the config file as that one is named."""
    if Path(written).expanduser().is_absolute():
        return str(path)
    return os.path.normpath(os.path.join(os.path.dirname(config), written))


def _read(problems: Problems, path: Path, entry: Marked) -> bytes | None:
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            problems.add(
                entry.line,
                f"subscriptions file {path} has {size:,} bytes, more than the "
                f"{MAX_CONFIG_BYTES:,} of a config file (the limit of feeds.yaml): "
                "split it into several files",
            )
            return None
        return path.read_bytes()
    except OSError as exc:
        problems.add(entry.line, f"cannot read subscriptions file {path}: {exc.strerror or exc}")
        return None


def _read_lines(problems: Problems, text: bytes, file: str, found: Subscriptions) -> None:
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            problems.add(number, f"not a JSON object: {exc}")
            continue
        body = _body(problems, record, number)
        if body is None:
            continue
        name = record["name"]
        if name in found.bodies:
            where = f"{found.files[name]}:{found.lines[name]}"
            problems.add(number, f"subscription {name!r} is already at {where} (rename one)")
            continue
        found.bodies[name] = body
        found.files[name] = file
        found.lines[name] = number


def _body(problems: Problems, record: Any, line: int) -> Marked | None:
    """The stream body ``{filter: {from: ..., where: ...}, publish: ...}`` of one
    line, or None (reported) when the line is not a subscription."""
    if not isinstance(record, dict):
        problems.add(line, f"a subscription is a JSON object ({', '.join(KEYS)})")
        return None
    unknown = [key for key in record if key not in KEYS]
    missing = [key for key in KEYS[:3] if key not in record]
    if unknown or missing:
        what = [f"unknown key(s) {', '.join(map(repr, unknown))}"] if unknown else []
        what += [f"missing key(s) {', '.join(map(repr, missing))}"] if missing else []
        problems.add(line, f"{'; '.join(what)} (a subscription has: {', '.join(KEYS)})")
        return None
    name, sources, where = record["name"], record["from"], record["where"]
    if not isinstance(name, str) or not check_name(problems, name, line, "subscription"):
        if not isinstance(name, str):
            problems.add(line, f"name must be a string, got {_json(name)}")
        return None
    if isinstance(sources, list) and len(sources) == 1:
        sources = sources[0]
    if not (isinstance(sources, str) or _names(sources)):
        problems.add(
            line, f"from must be a source or stream name or a list of them, got {_json(sources)}"
        )
        return None
    if isinstance(sources, str):
        reads = Marked(sources, line, text=sources)
    else:
        reads = _marked({"union": sources}, line)
    args = {"from": reads, "where": Marked(where, line, text=str(where))}
    body = {"filter": Marked(args, line, dict.fromkeys(args, line))}
    if "publish" in record:
        body["publish"] = _marked(record["publish"], line)
    return Marked(body, line, dict.fromkeys(body, line))


def _names(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)


def _marked(value: Any, line: int) -> Marked:
    """A JSON value as the marked YAML value of the same shape, all on ``line``."""
    if isinstance(value, dict):
        items = {str(k): _marked(v, line) for k, v in value.items()}
        return Marked(items, line, dict.fromkeys(items, line))
    if isinstance(value, list):
        return Marked([_marked(v, line) for v in value], line)
    return Marked(value, line, text=value if isinstance(value, str) else None)


def _json(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= 40 else text[:37] + "..."
