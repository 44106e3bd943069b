"""Durations and byte sizes as people write them in feeds.yaml.

Durations: ``500ms``, ``90s``, ``10m``, ``2h``, ``1d``, ``1w``, compounds in decreasing
unit order (``1h30m``, ``2m30s``), decimals (``1.5h``), or a plain number of seconds.
Sizes: ``20MB``, ``512KB``, ``1GB``, ``100B`` (K/M/G are powers of 1024, ``KiB`` etc.
also accepted), or a plain number of bytes.

Both functions raise ``ValueError`` with a message meant for the user.
"""

from __future__ import annotations

import math
import re

DURATION_HINT = "use e.g. 90s, 10m, 2h, 1d, 1h30m"
SIZE_HINT = "use e.g. 512KB, 20MB, 1GB, or a number of bytes"

_DURATION_UNITS: dict[str, float] = {
    "w": 7 * 86400.0,
    "d": 86400.0,
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 0.001,
    "us": 0.000001,
}
_UNIT_ORDER = list(_DURATION_UNITS)
_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ms|us|[wdhms])")
_NUMBER = re.compile(r"\d+(?:\.\d+)?|\.\d+")

_SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1024**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*([a-z]*)")


def parse_duration(value: object) -> float:
    """Seconds in ``value`` (``"1h30m"`` → 5400.0; ``90`` → 90.0); ValueError if malformed."""
    if isinstance(value, bool):
        raise ValueError(f"bad duration {value!r} ({DURATION_HINT})")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_duration_text(value.strip(), value)
    else:
        raise ValueError(f"bad duration {value!r} ({DURATION_HINT})")
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise ValueError(f"bad duration {value!r}: it must be a finite, non-negative time")
    return seconds


def _parse_duration_text(text: str, original: str) -> float:
    if _NUMBER.fullmatch(text):
        return float(text)
    pos = 0
    total = 0.0
    last_rank = -1
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        rank = _UNIT_ORDER.index(match.group(2))
        if rank <= last_rank:
            raise ValueError(
                f"bad duration {original!r}: write units from largest to smallest, "
                f"each once ({DURATION_HINT})"
            )
        last_rank = rank
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"bad duration {original!r} ({DURATION_HINT})")
    return total


def parse_size(value: object) -> int:
    """Bytes in ``value`` (``"20MB"`` → 20971520; ``4096`` → 4096); ValueError if malformed."""
    if isinstance(value, bool):
        raise ValueError(f"bad size {value!r} ({SIZE_HINT})")
    if isinstance(value, int):
        size = value
    elif isinstance(value, float) and value.is_integer():
        size = int(value)
    elif isinstance(value, str):
        match = _SIZE.fullmatch(value.strip().lower())
        if match is None or match.group(2) not in _SIZE_UNITS:
            raise ValueError(f"bad size {value!r} ({SIZE_HINT})")
        size = int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])
    else:
        raise ValueError(f"bad size {value!r} ({SIZE_HINT})")
    if size < 0:
        raise ValueError(f"bad size {value!r}: it must not be negative")
    return size


def format_duration(seconds: float) -> str:
    """The shortest compound form of ``seconds``: 5400 → ``"1h30m"``, 0.5 → ``"500ms"``."""
    if seconds == 0:
        return "0s"
    parts: list[str] = []
    rest = round(seconds * 1000)
    for unit in _UNIT_ORDER:
        size = round(_DURATION_UNITS[unit] * 1000)
        if size == 0:
            continue  # below a millisecond: not shown
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
