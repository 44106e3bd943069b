"""Collecting config problems, and reading typed fields out of marked YAML mappings.

Every reader reports what is wrong (file:line, an actionable message) and returns a
default so that validation goes on: the user sees all mistakes of the file at once.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from roses_app.config.durations import DURATION_HINT, SIZE_HINT, parse_duration, parse_size
from roses_app.config.yamlmarks import Marked, describe
from roses_app.errors import ConfigProblem

T = TypeVar("T")
N = TypeVar("N", int, float)

NAME_RE = re.compile(r"[A-Za-z0-9_-]+")
# Names become file names (``feeds/NAME.atom``, and its temporary twin): well under the
# 255 bytes of a file name.
NAME_MAX = 100
# The shortest interval between two polls of a source (``every``, ``fetch.min_every``):
# more often hammers the server and fills the log (``every: 1ms`` once made 837 polls
# and 6 MB of log in 100 s).  A source on this machine (a file, a mailbox, a server on
# localhost) may be polled every second.
POLL_FLOOR_SECONDS = 10.0
LOCAL_POLL_FLOOR_SECONDS = 1.0
_POLLED = {True: "the machine", False: "its server", None: "the servers"}


class Problems:
    """The mistakes found in a config file (and the files it names: see :meth:`at`),
    in the order found."""

    def __init__(self, file: str) -> None:
        self.main = file
        self.file = file  # where the lines of :meth:`add` are
        self.items: list[ConfigProblem] = []

    def add(self, line: int, message: str) -> None:
        self.items.append(ConfigProblem(self.file, line, message))

    @contextmanager
    def at(self, file: str) -> Iterator[None]:
        """Lines of :meth:`add` are lines of ``file`` within the block."""
        outer, self.file = self.file, file
        try:
            yield
        finally:
            self.file = outer

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def result(self) -> list[ConfigProblem]:
        """The problems without repeats, by file and line (stable within a line)."""
        seen: set[ConfigProblem] = set()
        unique = []
        for problem in self.items:
            if problem not in seen:
                seen.add(problem)
                unique.append(problem)
        # the config file's first, then each other file's, by line
        return sorted(unique, key=lambda p: (p.file != self.main, p.file, p.line))


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` when a choice is close to ``word``, else ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def listing(names: Sequence[str], limit: int = 20) -> str:
    """Names for a message, comma-separated, at most ``limit`` of them."""
    if not names:
        return "none"
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f", ... ({len(names) - limit} more)"


def check_name(problems: Problems, name: str, line: int, kind: str) -> bool:
    """Names become URL path segments and file names: letters, digits, ``_`` and ``-``
    only, :data:`NAME_MAX` characters at most."""
    if not NAME_RE.fullmatch(name):
        problems.add(
            line,
            f"invalid {kind} name {name!r}: use only letters, digits, '_' and '-' "
            "(the name becomes part of feed URLs)",
        )
        return False
    if len(name) > NAME_MAX:
        problems.add(
            line,
            f"{kind} name {name[:20]}... is {len(name)} characters long: use at most "
            f"{NAME_MAX} (the name becomes part of feed URLs and file names)",
        )
        return False
    return True


def on_this_machine(host: str | None) -> bool:
    """Whether ``host`` (of a URL, an IMAP server) is this machine: localhost or a
    loopback address."""
    if not host:
        return False
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Section:
    """A mapping of feeds.yaml with a closed set of keys, read field by field.

    ``what`` names it in messages (``settings.http``, ``publish``, ``filter``...).
    A value that is not a mapping is reported once and then reads as empty.
    """

    def __init__(
        self,
        problems: Problems,
        node: Marked | None,
        what: str,
        *,
        required: Sequence[str] = (),
        optional: Sequence[str] = (),
        line: int | None = None,
        order: Sequence[str] | None = None,
    ) -> None:
        self.problems = problems
        self.what = what
        self.node = node
        self.line = line if line is not None else (node.line if node is not None else 0)
        self.ok = node is not None and node.is_map
        self.values: dict[str, Marked] = node.value if self.ok and node is not None else {}
        allowed = list(order) if order is not None else [*required, *optional]
        if node is not None and not self.ok:
            keys = f" (keys: {', '.join(allowed)})" if allowed else ""
            problems.add(node.line, f"{what} must be a mapping{keys}, got {describe(node)}")
            return
        for key in self.values:
            if key not in allowed:
                problems.add(
                    self.key_line(key),
                    f"unknown key {key!r} in {what} (expected: {', '.join(allowed)})"
                    + did_you_mean(key, allowed),
                )
        for key in required:
            if node is not None and key not in self.values:
                problems.add(self.line, f"missing required key {key!r} in {what}")

    def __contains__(self, key: str) -> bool:
        return key in self.values

    def get(self, key: str) -> Marked | None:
        return self.values.get(key)

    def key_line(self, key: str) -> int:
        if self.node is None:
            return self.line
        return self.node.key_line(key)

    def field(self, key: str) -> str:
        return f"{self.what}.{key}"

    def bad(self, key: str, expected: str) -> None:
        value = self.values[key]
        self.problems.add(
            value.line, f"{self.field(key)} must be {expected}, got {describe(value)}"
        )

    def string(self, key: str, default: T, *, empty_ok: bool = False) -> str | T:
        value = self.values.get(key)
        if value is None:
            return default
        if not isinstance(value.value, str):
            self.bad(key, "a string")
            return default
        if not empty_ok and not value.value.strip():
            self.problems.add(value.line, f"{self.field(key)} must not be empty")
            return default
        return value.value

    def integer(
        self, key: str, default: T, *, minimum: int | None = None, maximum: int | None = None
    ) -> int | T:
        value = self.values.get(key)
        if value is None:
            return default
        v = value.value
        if isinstance(v, bool) or not isinstance(v, int):
            self.bad(key, "a whole number")
            return default
        if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
            if maximum is None:
                bound = "a positive whole number" if minimum == 1 else f"at least {minimum}"
            else:
                bound = f"between {minimum} and {maximum}"
            self.problems.add(value.line, f"{self.field(key)} must be {bound}, got {v}")
            return default
        return v

    def boolean(self, key: str, default: T) -> bool | T:
        value = self.values.get(key)
        if value is None:
            return default
        if not isinstance(value.value, bool):
            self.bad(key, "true or false")
            return default
        return value.value

    def duration(self, key: str, default: T, *, positive: bool = True) -> float | T:
        hint = f"a duration ({DURATION_HINT})"
        rule = "must be longer than zero" if positive else None
        return self._parsed(key, default, parse_duration, hint, rule)

    def check_poll_floor(self, key: str, *, local: bool | None = None) -> bool:
        """Whether the polling interval ``key`` is no shorter than the floor
        (:data:`POLL_FLOOR_SECONDS`, or :data:`LOCAL_POLL_FLOOR_SECONDS` for a source on
        this machine; ``local`` None: the bound of every source, ``fetch.min_every``);
        reported with what to write when it is.  True when it is absent or no duration
        (:meth:`duration` reports that)."""
        value = self.values.get(key)
        if value is None:
            return True
        try:
            seconds = parse_duration(value.value)
        except ValueError:
            return True
        floor = LOCAL_POLL_FLOOR_SECONDS if local else POLL_FLOOR_SECONDS
        if seconds <= 0 or seconds >= floor:
            return True
        if local is None:
            rule = f"no source is polled more often than every {floor:g}s"
        else:
            where = "on this machine" if local else "on another machine"
            rule = f"a source {where} is polled at most every {floor:g}s"
        local_hint = " (a file, a mailbox or a server on localhost: 1s or longer)"
        self.problems.add(
            value.line,
            f"{self.field(key)}: {value.value} is too often: {rule} (more often hammers "
            f"{_POLLED[local]} and fills the log); write "
            f"{key}: {floor:g}s or longer{local_hint if local is False else ''}",
        )
        return False

    def size(self, key: str, default: T, *, positive: bool = True) -> int | T:
        hint = f"a size ({SIZE_HINT})"
        rule = "must be larger than zero" if positive else None
        return self._parsed(key, default, parse_size, hint, rule)

    def _parsed(
        self,
        key: str,
        default: T,
        parse: Callable[[str | int | float], N],
        expected: str,
        not_positive: str | None,
    ) -> N | T:
        """A scalar read with ``parse``; mistakes are recorded, ``default`` returned."""
        value = self.values.get(key)
        if value is None:
            return default
        if isinstance(value.value, bool) or not isinstance(value.value, str | int | float):
            self.bad(key, expected)
            return default
        try:
            parsed = parse(value.value)
        except ValueError as exc:
            self.problems.add(value.line, f"{exc} in {self.field(key)}")
            return default
        if not_positive is not None and parsed <= 0:
            self.problems.add(value.line, f"{self.field(key)} {not_positive}")
            return default
        return parsed

    def section(
        self, key: str, *, required: Sequence[str] = (), optional: Sequence[str] = ()
    ) -> Section:
        """A nested closed mapping (empty when absent)."""
        return Section(
            self.problems,
            self.values.get(key),
            self.field(key),
            required=required,
            optional=optional,
            line=self.key_line(key) if key in self.values else self.line,
        )

    def string_map(self, key: str) -> list[tuple[str, str, int]]:
        """An open mapping of name -> scalar (as text): ``[(name, text, line)]``."""
        value = self.values.get(key)
        if value is None:
            return []
        if not value.is_map:
            self.bad(key, "a mapping")
            return []
        out = []
        for name, item in value.value.items():
            text = _scalar_text(item.value)
            if text is None:
                self.problems.add(
                    item.line,
                    f"{self.field(key)}.{name} must be a string, number or boolean, "
                    f"got {describe(item)}",
                )
                continue
            out.append((name, text, item.line))
        return out


def _scalar_text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None
