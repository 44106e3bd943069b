"""The daemon's own status over HTTP: ``/healthz``, ``/metrics`` and ``/sources``.

Each runs on threads of its own (``HEALTH_THREADS``), so that it answers while every
thread of the shared pool waits for a feed's render.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from roses_app.publish.sourcespage import CSP, render_sources_page

log = logging.getLogger(__name__)

HEALTH_THREADS = 2


def healthz_endpoint(health: Callable[[], Mapping[str, Any]]) -> Callable[[Request], Any]:
    # Its own threads: the shared pool may be full of requests waiting for a render.
    limiter = anyio.CapacityLimiter(HEALTH_THREADS)

    def probe() -> dict[str, Any]:
        try:
            return dict(health())
        except Exception as exc:  # a broken probe is unhealthy, not a 500
            log.exception("health check failed")
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    async def healthz(request: Request) -> Response:
        info = await anyio.to_thread.run_sync(probe, limiter=limiter)
        ok = bool(info.get("ok", info.get("status") == "ok"))
        body = json.dumps(info, default=str, sort_keys=True).encode("utf-8")
        return Response(
            body,
            status_code=200 if ok else 503,
            media_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    return healthz


Listing = Callable[[Mapping[str, str]], Any]  # query parameters -> a page of sources


def sources_endpoint(listing: Listing, *, html: bool = False) -> Callable[[Request], Any]:
    """``GET /sources?q=&status=&sort=&page=&per_page=``: each source's health, paged
    (:mod:`roses_app.connectors.listing`), on the health check's threads; with ``html``
    the same page for people (``/sources.html``).  A bad query is a 400 saying why."""
    limiter = anyio.CapacityLimiter(HEALTH_THREADS)

    async def sources(request: Request) -> Response:
        params = dict(request.query_params)
        try:
            page = await anyio.to_thread.run_sync(listing, params, limiter=limiter)
        except ValueError as exc:
            return PlainTextResponse(f"{exc}\n", status_code=400)
        if html:
            headers = {"Cache-Control": "no-store", "Content-Security-Policy": CSP}
            body = render_sources_page(page, params)
            return Response(body, media_type="text/html; charset=utf-8", headers=headers)
        body = json.dumps(page, sort_keys=True).encode("utf-8")
        return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})

    return sources


def metrics_endpoint(exposition: Callable[[], tuple[bytes, str]]) -> Callable[[Request], Any]:
    """``GET /metrics``: the Prometheus text format, on the health check's threads."""
    limiter = anyio.CapacityLimiter(HEALTH_THREADS)

    async def metrics(request: Request) -> Response:
        body, content_type = await anyio.to_thread.run_sync(exposition, limiter=limiter)
        return Response(body, media_type=content_type, headers={"Cache-Control": "no-store"})

    return metrics
