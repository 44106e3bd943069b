"""The program an XQuery helper process runs (:mod:`roses_app.xmlfn.xqpool` starts it,
:mod:`roses_app.xmlfn.xqguard` too): load Saxon, say "ready", then evaluate the shares
that come in on one pipe (:func:`roses_app.xmlfn.xquery.serve_share`) and send each
reply out on the other, until the caller closes the pipe."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from roses_app.xmlfn import xquery
from roses_app.xmlfn.xqpool import Reply, portable

log = logging.getLogger(__name__)


def serve(requests: Connection, replies: Connection, handle: Callable[[Any], Reply]) -> None:
    """Answer requests until the caller closes the pipe."""
    replies.send("ready")
    while True:
        try:
            request = requests.recv()
        except EOFError:
            return
        try:
            results, dropped = handle(request)
        except Exception as exc:  # the caller evaluates the share itself
            log.exception("XQuery helper failed on a share")
            replies.send(("failed", f"{type(exc).__name__}: {exc}"))
            continue
        replies.send(("ok", results, [(xml, portable(e)) for xml, e in dropped]))


def main(argv: list[str]) -> None:
    """A helper's life; ``argv[1]``, ``argv[2]``: the requests' and replies' pipes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the caller; EOF ends us
    logging.basicConfig(level=logging.WARNING)
    requests = Connection(int(argv[1]), writable=False)
    replies = Connection(int(argv[2]), readable=False)
    xquery.load_saxon()
    serve(requests, replies, xquery.serve_share)
