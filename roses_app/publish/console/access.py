"""Who may use the console, and how a request proves it.

* **Where from**: when ``settings.http.host`` is not a loopback address, or the
  client's is not, every request is refused unless ``settings.console.allow_remote``;
  without it, a request must also name this machine in its ``Host`` header (or
  ``base_url``'s host), so that a web page whose name an attacker points at
  127.0.0.1 (DNS rebinding) reaches no console.
* **Sessions**: a login gives a cookie signed with a key kept in
  ``DATA_DIR/console_secret.key`` (made once, mode 0600): the user, a CSRF token, the
  session's id and generation and a tag of the password hash (a new password ends
  every session), valid for ``settings.console.session`` unless ended before
  (:mod:`.revoke`: log out, log out everywhere).  HttpOnly, SameSite=Strict,
  Path=/console/, Secure when ``base_url`` is https.
* **Changes**: every POST carries the session's CSRF token (a form's ``csrf`` field or
  the ``X-CSRF-Token`` header, compared in constant time) and comes from this site
  (``Origin``, else ``Referer``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request

from roses_app.config.fields import on_this_machine
from roses_app.config.model import ConsoleSettings, HttpSettings
from roses_app.errors import RosesError
from roses_app.publish.console.revoke import RevocationError, Revocations

log = logging.getLogger(__name__)

COOKIE = "roses_console"
COOKIE_PATH = "/console/"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
KEY_BYTES = 32


class ConsoleKeyError(RosesError, OSError):
    """The console's signing key cannot be read or made."""


def signing_key(path: Path) -> bytes:
    """The key in ``path``, made (random, mode 0600) when there is none; a key file
    others could read is made private first."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _existing_key(path)
    except OSError as exc:
        raise ConsoleKeyError(f"cannot make the console's key {path}: {exc.strerror}") from exc
    key = secrets.token_bytes(KEY_BYTES)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
        fh.flush()
        os.fsync(fh.fileno())
    return key


def _existing_key(path: Path) -> bytes:
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning("console: %s could be read by others: made private (0600)", path)
            path.chmod(0o600)
        key = path.read_bytes()
    except OSError as exc:
        raise ConsoleKeyError(f"cannot read the console's key {path}: {exc.strerror}") from exc
    if len(key) < KEY_BYTES:
        raise ConsoleKeyError(
            f"the console's key {path} is damaged ({len(key)} bytes): delete it, and a new "
            "one is made at the next start (every session then ends)"
        )
    return key


@dataclass(frozen=True)
class Session:
    user: str
    csrf: str
    ident: str = ""  # what logging out ends (:mod:`.revoke`)
    expires: float = 0.0  # when the cookie expires by itself (epoch seconds)


def password_tag(password_hash: str) -> str:
    """What a cookie keeps of the password hash: enough to tell a new one."""
    return hashlib.sha256(password_hash.encode()).hexdigest()[:16]


class Sessions:
    """Signed session cookies (see the module docstring); ``password_hash()``: the
    console's hash now (a reload may change it), ``revoked``: the sessions ended."""

    def __init__(
        self,
        key: bytes,
        settings: ConsoleSettings,
        secure: bool,
        revoked: Revocations,
        password_hash: Callable[[], str] | None = None,
    ) -> None:
        self._signer = URLSafeTimedSerializer(key, salt="roses-console-session")
        self.settings = settings
        self.secure = secure
        self.revoked = revoked
        self._password_hash = password_hash or (lambda: settings.password_hash)

    def _tag(self) -> tuple[str, int]:
        """The password's tag now and the generation of sessions (a new password
        ends those of the old one, even across restarts)."""
        tag = password_tag(self._password_hash())
        return tag, self.revoked.password_seen(tag)

    def new(self, user: str) -> tuple[Session, str]:
        """A new session and its cookie value."""
        tag, generation = self._tag()
        ident = secrets.token_urlsafe(16)
        session = Session(user, secrets.token_urlsafe(32), ident,
                          time.time() + self.settings.session_seconds)  # fmt: skip
        value = self._signer.dumps(
            {"u": user, "c": session.csrf, "h": tag, "s": ident, "g": generation}
        )
        return session, value

    def read(self, request: Request) -> Session | None:
        """The request's session; None when it has none, or a forged, expired, ended
        or outdated one."""
        value = request.cookies.get(COOKIE)
        if not value:
            return None
        try:
            data, signed = self._signer.loads(
                value, max_age=int(self.settings.session_seconds), return_timestamp=True
            )
        except BadSignature:  # (SignatureExpired is one)
            return None
        if not isinstance(data, dict):
            return None
        user, csrf, ident = data.get("u"), data.get("c"), data.get("s")
        if not all(isinstance(x, str) for x in (user, csrf, ident)):
            return None
        try:
            tag, generation = self._tag()
            if data.get("h") != tag or data.get("g") != generation:
                return None
            if self.revoked.is_ended(str(ident)):
                return None
        except RevocationError as exc:  # the safe answer: no session
            log.error("console: %s", exc)
            return None
        expires = signed.timestamp() + self.settings.session_seconds
        return Session(str(user), str(csrf), str(ident), expires)

    def end(self, session: Session) -> None:
        """Log ``session`` out: its cookie is refused from now on."""
        self.revoked.end(session.ident, session.expires)

    def end_all(self) -> int:
        """Log every session out (this one too); the new generation."""
        return self.revoked.end_all()

    def cookie(self, value: str) -> dict[str, object]:
        """``Response.set_cookie`` arguments of a session cookie."""
        return {
            "key": COOKIE,
            "value": value,
            "max_age": int(self.settings.session_seconds),
            "path": COOKIE_PATH,
            "httponly": True,
            "samesite": "strict",
            "secure": self.secure,
        }


def csrf_ok(session: Session, given: str | None) -> bool:
    """Whether ``given`` is the session's CSRF token (constant time)."""
    return given is not None and hmac.compare_digest(given.encode(), session.csrf.encode())


def _origin(url: str) -> str | None:
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def same_site(request: Request, http: HttpSettings) -> bool:
    """Whether a POST comes from the console's own pages: its ``Origin`` (else its
    ``Referer``) is the site the request was made to, or ``base_url``'s."""
    sent = request.headers.get("origin")
    if sent is None or sent == "null":
        referer = request.headers.get("referer")
        sent = None if referer is None else _origin(referer)
    if sent is None:
        return False
    allowed = {f"{request.url.scheme}://{request.headers.get('host', '').lower()}"}
    if http.base_url:
        base = _origin(http.base_url)
        if base is not None:
            allowed.add(base)
    return sent.lower().rstrip("/") in allowed


def _loopback(address: str | None) -> bool:
    if not address:
        return False
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def refusal(request: Request, settings: ConsoleSettings, http: HttpSettings) -> str | None:
    """Why the console refuses this request whoever sends it (None: it does not)."""
    if settings.allow_remote:
        return None
    if not on_this_machine(http.host):
        return (
            "the console answers only when ROSES listens on a loopback address "
            f"(settings.http.host is {http.host}): set settings.console.allow_remote: "
            "true to use it from elsewhere (then serve it over https)"
        )
    client = request.client.host if request.client is not None else None
    if not _loopback(client):
        return "the console answers only to this machine (settings.console.allow_remote)"
    host = urlsplit(f"//{request.headers.get('host', '')}").hostname
    base = urlsplit(http.base_url).hostname if http.base_url else None
    if host is not None and not on_this_machine(host) and host != base:
        return "the console answers only to requests naming this machine (Host)"
    return None


def client_address(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"
