"""``/websub/callback/TOKEN``: where the hubs of ROSES's sources verify and deliver.

``GET`` is a hub verifying a subscription ROSES asked for (the challenge is echoed, or
404 for a token or topic ROSES does not know); ``POST`` is content: read up to
``fetch.max_bytes``, its signature checked by the subscriber, and its items handed to
the feed connector.  A delivery with a bad signature is answered 202 like any other
(WebSub asks subscribers to acknowledge and ignore it) and counted; an unknown token
gets 404, so that its hub drops the subscription.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

log = logging.getLogger(__name__)

CALLBACK_ROUTE = "/websub/callback/{token}"


class PushTaker(Protocol):
    """The subscriber's side of the callback (``roses_app.connectors.websub_in``)."""

    def verify(self, token: str, params: Mapping[str, str]) -> tuple[int, str]: ...

    def receive(self, token: str, body: bytes, signature: str | None) -> Any: ...

    def knows(self, token: str) -> bool: ...


PushHandler = Callable[[str, bytes, Mapping[str, str]], None]  # source, body, headers


def callback_endpoint(
    taker: PushTaker, handle: PushHandler, max_bytes: int
) -> Callable[[Request], Any]:
    async def callback(request: Request) -> Response:
        token = request.path_params["token"]
        if request.method == "GET":
            status, text = taker.verify(token, dict(request.query_params))
            return PlainTextResponse(text, status_code=status)
        if not taker.knows(token):
            return PlainTextResponse("unknown subscription\n", status_code=404)
        body = await _capped(request, max_bytes)
        if body is None:
            return PlainTextResponse(f"more than {max_bytes} bytes\n", status_code=413)
        push = taker.receive(token, body, request.headers.get("x-hub-signature"))
        if push is not None:  # else a bad signature: acknowledged, ignored (logged)
            headers = {k.lower(): v for k, v in request.headers.items()}
            handle(push.source, body, headers)
        return PlainTextResponse("accepted\n", status_code=202)

    return callback


async def _capped(request: Request, max_bytes: int) -> bytes | None:
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            return None
        parts.append(chunk)
    return b"".join(parts)
