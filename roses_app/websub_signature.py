"""WebSub's ``X-Hub-Signature``: what a hub signs a delivery with, and what a subscriber
checks (ROSES is both: the hub of its feeds, a subscriber of its sources' hubs)."""

from __future__ import annotations

import hmac

SIGNATURE_HEADER = "X-Hub-Signature"
# the digests a subscriber may meet in X-Hub-Signature (WebSub section 8)
SIGNATURE_METHODS = ("sha1", "sha256", "sha384", "sha512")


def sign(secret: str, body: bytes, method: str = "sha256") -> str:
    """The ``X-Hub-Signature`` value of ``body``: ``METHOD=hex HMAC(secret, body)``."""
    digest = hmac.new(secret.encode("utf-8"), body, method).hexdigest()
    return f"{method}={digest}"


def signature_ok(secret: str, body: bytes, header: str | None) -> bool:
    """What a subscriber checks: ``header`` is a valid signature of ``body``.

    A missing header, an unknown method or a wrong digest is refused; the digests are
    compared in constant time.
    """
    if not header:
        return False
    method, sep, digest = header.strip().partition("=")
    method = method.strip().lower()
    if not sep or method not in SIGNATURE_METHODS:
        return False
    expected = sign(secret, body, method).partition("=")[2]
    return hmac.compare_digest(expected, digest.strip().lower())
