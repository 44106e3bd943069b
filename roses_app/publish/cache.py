"""Rendered documents, kept until what they are rendered from changes.

A document is asked for by ``key`` (which document: a feed and a format, the index,
the OPML list) and ``version`` (what it is rendered from, e.g. the time of the feed's
last change in the store).  The first request for a new version renders it; requests
that come while it renders wait for that render instead of starting their own, and at
most ``max_renders`` renders run at once.  So a burst of requests for a big feed costs
one render, not one per request, and leaves the server's threads (and ``/healthz``)
free.  The gzipped body and the ETag are computed once, with the render.

Only the newest version of each key is kept, and the documents kept are bounded in
bytes (least recently used go first).
"""

from __future__ import annotations

import gzip
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass

MAX_RENDERS = 2  # the renders are CPU-bound: more than the cores only slows them all
MAX_BYTES = 256 * 1024 * 1024
GZIP_MINIMUM_SIZE = 256
GZIP_LEVEL = 6  # zlib's default: most of level 9's gain for a third of its time


def etag_of(body: bytes) -> str:
    """A strong ETag: a hash of the body (renders are pure, so equal bodies hash equal)."""
    return '"' + hashlib.sha256(body).hexdigest()[:40] + '"'


@dataclass(frozen=True)
class Document:
    """A rendered document, ready to be sent as it is or gzipped."""

    body: bytes
    gzipped: bytes | None  # None: too small to be worth it
    etag: str
    media_type: str
    updated: float | None  # the Last-Modified time, None if unknown

    @property
    def size(self) -> int:
        return len(self.body) + len(self.gzipped or b"")


def make_document(body: bytes, media_type: str, updated: float | None) -> Document:
    # mtime=0: the gzipped bytes are a function of the body, like the ETag.
    gzipped = (
        gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)
        if len(body) >= GZIP_MINIMUM_SIZE
        else None
    )
    return Document(body, gzipped, etag_of(body), media_type, updated)


class RenderCache:
    """Thread-safe cache of rendered documents; see the module doc.

    :attr:`renders` counts the documents rendered so far (a render that failed too).
    """

    def __init__(self, *, max_renders: int = MAX_RENDERS, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.renders = 0
        self._slots = threading.BoundedSemaphore(max_renders)
        self._lock = threading.Lock()
        self._docs: OrderedDict[Hashable, tuple[Hashable, Document]] = OrderedDict()
        self._bytes = 0
        self._pending: dict[tuple[Hashable, Hashable], Future[Document]] = {}

    def get(
        self,
        key: Hashable,
        version: Hashable,
        render: Callable[[], bytes],
        *,
        media_type: str,
        updated: float | None = None,
    ) -> Document:
        """The document ``key`` at ``version``: cached, being rendered, or rendered now."""
        with self._lock:
            cached = self._docs.get(key)
            if cached is not None and cached[0] == version:
                self._docs.move_to_end(key)
                return cached[1]
            future = self._pending.get((key, version))
            owner = future is None
            if future is None:
                future = self._pending[(key, version)] = Future()
        if not owner:
            return future.result()  # raises what the render raised
        try:
            with self._slots:
                with self._lock:
                    self.renders += 1
                document = make_document(render(), media_type, updated)
        except BaseException as exc:
            with self._lock:
                del self._pending[(key, version)]
            future.set_exception(exc)
            raise
        with self._lock:
            del self._pending[(key, version)]
            self._store(key, version, document)
        future.set_result(document)
        return document

    def _store(self, key: Hashable, version: Hashable, document: Document) -> None:
        """Keep ``document`` as the version of ``key``; evict beyond the byte budget."""
        old = self._docs.pop(key, None)
        if old is not None:
            self._bytes -= old[1].size
        self._docs[key] = (version, document)
        self._bytes += document.size
        while self._bytes > self.max_bytes and len(self._docs) > 1:
            _, (_, evicted) = self._docs.popitem(last=False)
            self._bytes -= evicted.size

    def __len__(self) -> int:
        with self._lock:
            return len(self._docs)
