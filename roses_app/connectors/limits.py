"""What keeps a hostile server from filling the daemon's memory (the fetch's deadline is
:mod:`roses_app.connectors.fetch`'s ``asyncio.timeout``).

:func:`decoded` undoes a ``Content-Encoding`` chain (``gzip``, ``deflate``, several
stacked: ``gzip, gzip``) one bounded step at a time: each layer's output is made
``STEP`` bytes at a time (zlib's ``max_length``) and only as the next layer asks
for it, so a 2 KB response hiding gigabytes of zeros never produces more than
the size cap (checked by :func:`read_capped`) plus a few steps.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from roses_app.errors import FetchError

STEP = 64 * 1024  # bytes a decompressor may produce per call
MAX_CODINGS = 4  # content codings a response may stack; servers use one


class FetchTimeoutError(FetchError, TimeoutError):
    """A fetch did not finish (connect, headers and body) within ``fetch.timeout``."""


# -- content codings -----------------------------------------------------------------


def codings(header: str, url: str) -> list[str]:
    """The codings a ``Content-Encoding`` value names, in the order they were applied."""
    names = [part.strip().lower() for part in header.split(",") if part.strip()]
    names = [name for name in names if name != "identity"]
    if len(names) > MAX_CODINGS:
        raise FetchError(
            f"{url} stacks {len(names)} content codings ({header}); at most "
            f"{MAX_CODINGS} are accepted"
        )
    for name in names:
        if name not in ("gzip", "x-gzip", "deflate"):
            raise FetchError(
                f"{url} sent Content-Encoding {name!r}, which ROSES did not ask for "
                "(it accepts gzip and deflate)"
            )
    return names


def decoded(raw: Iterable[bytes], header: str, url: str) -> Iterator[bytes]:
    """The body under ``Content-Encoding: header``, decoded lazily in bounded steps."""
    chunks: Iterable[bytes] = raw
    for name in reversed(codings(header, url)):
        chunks = _layer(chunks, name, url)
    return iter(chunks)


def _decompressor(name: str, first: bytes) -> Any:
    if name == "deflate" and not _zlib_header(first):
        return zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, as some servers send
    return zlib.decompressobj(zlib.MAX_WBITS if name == "deflate" else 16 + zlib.MAX_WBITS)


def _zlib_header(data: bytes) -> bool:
    return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


def _layer(chunks: Iterable[bytes], name: str, url: str) -> Iterator[bytes]:
    """Undo one coding; a gzip body may hold several members (RFC 1952), one after another."""
    d: Any = None
    try:
        for chunk in chunks:
            pending, more = chunk, bool(chunk)
            while more:
                if d is None or (d.eof and pending):
                    d = _decompressor(name, pending)
                out = d.decompress(pending, STEP)
                pending = d.unused_data if d.eof else d.unconsumed_tail
                if out:
                    yield out
                # on while input is left, or while a full step says zlib holds more
                more = bool(pending) or (len(out) == STEP and not d.eof)
        if d is not None and not d.eof:
            tail = d.flush()  # no input is left: what remains is at most a window
            if tail:
                yield tail
    except zlib.error as exc:
        raise FetchError(f"{url}: the {name} body is corrupt ({exc})") from exc


def read_capped(chunks: Iterable[bytes], cap: int, url: str, what: str = "sent") -> bytes:
    """Join ``chunks``, refusing as soon as they exceed ``cap`` bytes."""
    # a BytesIO's value is its buffer, where a join of parts would be a second copy
    body = io.BytesIO()
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > cap:
            raise FetchError(
                f"{url} {what} more than {cap} bytes (fetch.max_bytes); aborted. Raise "
                "settings.fetch.max_bytes if this feed is really that large"
            )
        body.write(chunk)
    return body.getvalue()
