"""Changing one stream of feeds.yaml: add, replace or remove it, and nothing else.

:func:`apply_stream` is what the web console's "apply" does.  The file is read with
ruamel.yaml's round-trip loader, which knows where every key of the file is; the
stream's lines are replaced by the new body, rendered by ruamel.yaml's round-trip
dumper (the body's own comments, quotes and flow mappings kept), and every other byte
of the file is left as it was: comments, blank lines, order, quoting, flow mappings
and line endings of the rest of the file do not move.  (A ``streams:`` written as one
flow mapping, ``streams: {a: ..., b: ...}``, has no lines of its own per stream: it is
dumped again whole, by the same round-trip dumper.)

Nothing is written unless the new file loads: it is checked by the real loader
(:func:`~roses_app.config.loader.parse_config`, every problem at feeds.yaml's
file:line, as ``roses check`` says them), then written atomically (a temporary file
beside it, fsynced, renamed over it), after a copy of the old file is kept as
``feeds.yaml.bak-YYYYmmddTHHMMSS`` (the last :data:`KEEP_BACKUPS`).
"""

from __future__ import annotations

import io
import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from roses_app.config.limits import MAX_CONFIG_BYTES
from roses_app.config.loader import parse_config
from roses_app.errors import ConfigError, ConfigProblem

KEEP_BACKUPS = 10
BACKUP_INFIX = ".bak-"
BOM = "\ufeff"
_lock = threading.Lock()  # one change of a file at a time in this process


@dataclass(frozen=True)
class Applied:
    """What :func:`apply_stream` did: the file, the copy of it before, the stream."""

    path: Path  # feeds.yaml
    backup: Path  # the copy of the file before the change
    stream: str
    removed: bool


def apply_stream(path: Path, name: str, body_yaml: str | None) -> Applied:
    """Set stream ``name`` of the config at ``path`` to ``body_yaml`` (its YAML body,
    e.g. ``"filter: {from: guardian, where: \\"...\\"}\\npublish: true"``), or remove
    it (``None``).  Raises :class:`~roses_app.errors.ConfigError` (file:line of each
    problem) and writes nothing when the result would not load."""
    path = Path(path)
    with _lock:
        raw = _read(path)
        bom = raw.startswith(BOM)
        text = raw.removeprefix(BOM)
        new_text = _changed(text, path, name, body_yaml)
        if len(new_text.encode("utf-8")) > MAX_CONFIG_BYTES:
            message = (
                f"with this change the config file would be more than {MAX_CONFIG_BYTES:,} bytes"
            )
            raise ConfigError([ConfigProblem(str(path), 0, message + ": use a subscriptions file")])
        parse_config(new_text, path)  # every problem at its file:line; nothing written
        backup = _backup(path, raw)
        _write_atomically(path, (BOM if bom else "") + new_text)
        _prune_backups(path)
    return Applied(path, backup, name, body_yaml is None)


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
        raise ConfigError(
            [ConfigProblem(str(path), 0, f"cannot read the config file to change it: {why}")]
        ) from exc


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold a long expression onto the next line
    return yaml


def _load(yaml: YAML, text: str, file: str, first_line: int, what: str) -> Any:
    """``text`` loaded round-trip; a syntax error at ``file``:(its line + ``first_line``)."""
    try:
        return yaml.load(text)
    except YAMLError as exc:
        mark = exc.problem_mark if isinstance(exc, MarkedYAMLError) else None
        line = first_line + (mark.line if mark is not None else 0)
        problem = exc.problem if isinstance(exc, MarkedYAMLError) and exc.problem else str(exc)
        raise ConfigError(
            [ConfigProblem(file, line, f"YAML syntax error in {what}: {problem}")]
        ) from exc


# -- where the stream is, and its new lines ------------------------------------------------


@dataclass(frozen=True)
class _Place:
    """The lines a stream takes (``start`` to ``end``, 0-based, end excluded), its
    key's column, and the indentation step of the file."""

    start: int
    end: int
    column: int
    step: int


def _changed(text: str, path: Path, name: str, body_yaml: str | None) -> str:
    """The config text with stream ``name`` set to ``body_yaml`` (None: removed)."""
    yaml = _yaml()
    doc = _load(yaml, text, str(path), 1, "the config file")
    if not isinstance(doc, CommentedMap):
        raise ConfigError(
            [ConfigProblem(str(path), 1, "the config file must be a mapping with streams")]
        )
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    streams = doc.get("streams")
    if isinstance(streams, CommentedMap) and streams.fa.flow_style():
        return _dumped_whole(yaml, doc, path, name, body_yaml, text)
    if body_yaml is None:
        if not isinstance(streams, CommentedMap) or name not in streams:
            line = doc.lc.key("streams")[0] + 1 if "streams" in doc else 1
            known = ", ".join(streams) if isinstance(streams, CommentedMap) else "none"
            message = f"there is no stream {name!r} to remove (streams: {known or 'none'})"
            raise ConfigError([ConfigProblem(str(path), line, message)])
        place = _place(doc, streams, name, lines)
        return "".join(lines[: _with_its_comment(lines, place)] + lines[place.end :])
    if not isinstance(streams, CommentedMap) or not streams:
        return _first_stream(yaml, doc, lines, path, name, body_yaml, newline)
    if name in streams:
        place = _place(doc, streams, name, lines)
    else:  # after the last stream
        last = _place(doc, streams, list(streams)[-1], lines)
        place = _Place(last.end, last.end, last.column, last.step)
    rendered = _rendered(yaml, name, body_yaml, place, str(path), newline)
    start = place.start
    if (
        name in streams
        and _bare_key_line(lines[start], name)
        and rendered[0].rstrip() == (" " * place.column + _key_text(yaml, name) + ":")
    ):
        start += 1  # the key line stays, with its comment
        rendered = rendered[1:]
    if start > 0 and not lines[start - 1].endswith(("\n", "\r")):
        lines[start - 1] += newline
    return "".join(lines[:start] + rendered + lines[place.end :])


def _place(doc: CommentedMap, streams: CommentedMap, name: str, lines: list[str]) -> _Place:
    """Where stream ``name`` is: from its key's line to the next key of ``streams``
    (or the next key of the top level, or the end), less the blank lines and the
    comments at its key's indentation or less that end it (they introduce what
    follows)."""
    names = list(streams)
    start, column = streams.lc.key(name)
    index = names.index(name)
    if index + 1 < len(names):
        end = streams.lc.key(names[index + 1])[0]
    else:
        tops = list(doc)
        after = tops.index("streams") + 1
        end = doc.lc.key(tops[after])[0] if after < len(tops) else len(lines)
    while end > start + 1 and _introduces_next(lines[end - 1], column):
        end -= 1
    top = doc.lc.key("streams")[1]
    return _Place(start, end, column, column - top if column > top else 2)


def _with_its_comment(lines: list[str], place: _Place) -> int:
    """Where a removed stream's lines start: with the comment lines right above its
    key that introduce it, and a blank line before them when one follows it too."""
    start = place.start
    while (
        start > 0 and lines[start - 1].strip() and _introduces_next(lines[start - 1], place.column)
    ):
        start -= 1
    blank_after = place.end >= len(lines) or not lines[place.end].strip()
    if start > 0 and start < place.start and not lines[start - 1].strip() and blank_after:
        start -= 1
    return start


def _introduces_next(line: str, column: int) -> bool:
    stripped = line.strip()
    indent = len(line) - len(line.lstrip(" "))
    return not stripped or (stripped.startswith("#") and indent <= column)


def _bare_key_line(line: str, name: str) -> bool:
    """Whether the line is the key alone (maybe with a comment): ``  name:  # ...``."""
    found = re.match(r"\s*(\S.*?):(\s+#.*)?\s*$", line)
    return found is not None and found.group(1).strip("'\"") == name


def _key_text(yaml: YAML, name: str) -> str:
    out = io.StringIO()
    yaml.dump({name: None}, out)
    return out.getvalue().split(":")[0]


def _rendered(
    yaml: YAML, name: str, body_yaml: str, place: _Place, file: str, newline: str
) -> list[str]:
    """The lines of ``name: BODY`` at the stream keys' column (ruamel.yaml round-trip:
    the body's comments, quotes and flow mappings as written)."""
    body = _load(yaml, body_yaml, file, place.start + 1, f"the body of stream {name!r}")
    entry = CommentedMap()
    entry[name] = body
    step = place.step
    yaml.indent(mapping=step, sequence=step + 2, offset=step)
    out = io.StringIO()
    yaml.dump(entry, out)
    pad = " " * place.column
    return [(pad + line if line.strip() else "") + newline for line in out.getvalue().splitlines()]


def _first_stream(
    yaml: YAML,
    doc: CommentedMap,
    lines: list[str],
    path: Path,
    name: str,
    body_yaml: str,
    newline: str,
) -> str:
    """The text with the first stream of an empty or absent ``streams:``."""
    head = ["streams:" + newline]
    if "streams" not in doc:  # a config of subscriptions only: streams: at the end
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += newline
        at = len(lines)
    else:  # ``streams:`` (kept as written, with its comment) or ``streams: {}``
        at = doc.lc.key("streams")[0]
        if _bare_key_line(lines[at], "streams"):
            head = [lines[at] if lines[at].endswith(("\n", "\r")) else lines[at] + newline]
    place = _Place(at + 1, at + 1, 2, 2)
    rendered = _rendered(yaml, name, body_yaml, place, str(path), newline)
    rest = lines[at + 1 :] if "streams" in doc else []
    return "".join(lines[:at] + head + rendered + rest)


def _dumped_whole(
    yaml: YAML, doc: CommentedMap, path: Path, name: str, body_yaml: str | None, text: str
) -> str:
    """A flow-style ``streams:`` changed in the document, dumped again whole."""
    streams = doc["streams"]
    if body_yaml is None:
        if name not in streams:
            raise ConfigError(
                [ConfigProblem(str(path), doc.lc.key("streams")[0] + 1, f"no stream {name!r}")]
            )
        del streams[name]
    else:
        line = doc.lc.key("streams")[0] + 1
        streams[name] = _load(yaml, body_yaml, str(path), line, f"the body of stream {name!r}")
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue().replace("\n", "\r\n") if "\r\n" in text else out.getvalue()


# -- writing ---------------------------------------------------------------------------------


def _backup(path: Path, raw: str) -> Path:
    """A copy of the file as it was, named by the time (``-N`` when taken twice in a
    second)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    backup = path.with_name(f"{path.name}{BACKUP_INFIX}{stamp}")
    n = 1
    while backup.exists():
        n += 1
        backup = path.with_name(f"{path.name}{BACKUP_INFIX}{stamp}-{n}")
    _write_atomically(backup, raw)
    return backup


def _prune_backups(path: Path) -> None:
    """Keep the last :data:`KEEP_BACKUPS` copies (by the time they were made)."""
    copies = sorted(
        path.parent.glob(f"{glob_escape(path.name)}{BACKUP_INFIX}*"),
        key=lambda p: (p.stat().st_mtime_ns, p.name),
    )
    for old in copies[:-KEEP_BACKUPS]:
        old.unlink(missing_ok=True)


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, fsync it, rename it over
    ``path`` (its permissions kept) and fsync the folder: the file is whole, old or new."""
    folder = path.parent
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        why = exc.strerror or str(exc)
        message = f"cannot write {path.name}: {why} (check the folder's permissions and space)"
        raise ConfigError([ConfigProblem(str(path), 0, message)]) from exc


__all__ = ["KEEP_BACKUPS", "Applied", "apply_stream"]
