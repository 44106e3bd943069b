"""``settings.console`` and the console's password hash format.

The console's password is never written anywhere: feeds.yaml (or the environment
variable ``ROSES_CONSOLE_PASSWORD_HASH``) holds its scrypt hash, which
``roses console-password`` prints::

    scrypt$N$r$p$SALT$HASH

``N`` (a power of two), ``r`` and ``p`` are scrypt's cost parameters, ``SALT`` and
``HASH`` URL-safe base64 without padding (16 and 32 bytes).  The defaults (N 2^15,
r 8, p 1) take about 0.1 s and 32 MB a login; larger ones are accepted up to the
bounds below, so that a hash cannot make each login take minutes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass

from roses_app.config.fields import Problems, Section
from roses_app.config.model import ConsoleSettings

ENVIRONMENT = "ROSES_CONSOLE_PASSWORD_HASH"
CONSOLE_KEYS = ("enabled", "user", "password_hash", "allow_remote", "session")
DEFAULT_N, DEFAULT_R, DEFAULT_P = 2**15, 8, 1
MAX_N, MAX_R, MAX_P = 2**20, 32, 16
SALT_BYTES, HASH_BYTES = 16, 32
FORMAT = "scrypt$N$r$p$SALT$HASH (what `roses console-password` prints)"
_USER = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


@dataclass(frozen=True)
class PasswordHash:
    """A parsed ``scrypt$N$r$p$SALT$HASH``."""

    n: int
    r: int
    p: int
    salt: bytes
    digest: bytes


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    if not re.fullmatch(r"[A-Za-z0-9_-]+", text):
        raise ValueError("not URL-safe base64")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def parse_password_hash(text: str) -> PasswordHash:
    """The parts of a hash; a ValueError says what is wrong with it."""
    parts = text.strip().split("$")
    if len(parts) != 6 or parts[0] != "scrypt":
        raise ValueError(f"a password hash is {FORMAT}")
    try:
        n, r, p = (int(part) for part in parts[1:4])
        salt, digest = _unb64(parts[4]), _unb64(parts[5])
    except ValueError as exc:
        raise ValueError(f"a password hash is {FORMAT}: {exc}") from exc
    if n < 2 or n > MAX_N or n & (n - 1):
        raise ValueError(f"scrypt's N must be a power of two from 2 to {MAX_N}, got {n}")
    if not 1 <= r <= MAX_R or not 1 <= p <= MAX_P:
        raise ValueError(f"scrypt's r must be 1 to {MAX_R} and p 1 to {MAX_P}")
    if len(salt) < 8 or len(digest) < 16:
        raise ValueError("the salt must have at least 8 bytes and the hash 16")
    return PasswordHash(n, r, p, salt, digest)


def _scrypt(password: str, n: int, r: int, p: int, salt: bytes, size: int) -> bytes:
    # scrypt needs 128·r·N bytes (plus p·128·r): allow twice that
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=256 * r * (n + p) + 2**20,
        dklen=size,
    )  # fmt: skip


def hash_password(
    password: str, *, n: int = DEFAULT_N, r: int = DEFAULT_R, p: int = DEFAULT_P
) -> str:
    """The hash of ``password`` in the format above, with a new random salt."""
    salt = os.urandom(SALT_BYTES)
    digest = _scrypt(password, n, r, p, salt, HASH_BYTES)
    return f"scrypt${n}${r}${p}${_b64(salt)}${_b64(digest)}"


def verify_password(password: str, stored: PasswordHash) -> bool:
    """Whether ``password`` has the hash ``stored`` (compared in constant time)."""
    digest = _scrypt(password, stored.n, stored.r, stored.p, stored.salt, len(stored.digest))
    return hmac.compare_digest(digest, stored.digest)


def console_section(problems: Problems, c: Section) -> ConsoleSettings | None:
    """``settings.console`` (None: absent, or ``enabled: false``); every mistake at its
    line.  Without ``password_hash`` the environment variable's is taken."""
    if c.node is None:
        return None
    enabled = c.boolean("enabled", True)
    user = c.string("user", "admin")
    if not _USER.fullmatch(user):
        problems.add(
            c.values["user"].line,
            "settings.console.user must be 1 to 64 letters, digits or _ . @ -",
        )
    allow_remote = c.boolean("allow_remote", False)
    session = c.duration("session", 12 * 3600.0)
    written = c.string("password_hash", None)
    line = c.values["password_hash"].line if written is not None else c.line
    found = written if written is not None else os.environ.get(ENVIRONMENT)
    if not enabled:
        return None
    if found is None:
        problems.add(
            line,
            "settings.console needs password_hash (or the environment variable "
            f"{ENVIRONMENT}): make one with `roses console-password`",
        )
        return None
    try:
        parse_password_hash(found)
    except ValueError as exc:
        where = "settings.console.password_hash" if written is not None else ENVIRONMENT
        problems.add(line, f"{where}: {exc}")
        return None
    return ConsoleSettings(found.strip(), user, allow_remote, session)
