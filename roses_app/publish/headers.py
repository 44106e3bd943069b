"""Headers every response of the HTTP server carries, set in one place.

* ``X-Content-Type-Options: nosniff``: browsers take a document for what its
  Content-Type says, so a feed or a plain-text answer holding text from the web is never
  sniffed into a page that runs.
* ``Content-Security-Policy`` on HTML pages: the policy the pages carry in a ``<meta>``
  too (:data:`roses_app.publish.feedpage.CSP`), since a header also covers what comes
  before the ``<meta>`` and cannot be cut off with the markup, plus ``frame-ancestors
  'none'``, which only a header can say: no other site frames ROSES's pages.  A response
  with a policy of its own (``/sources.html``) keeps it.
* ``X-Frame-Options: DENY`` on every response: the same frame policy for browsers that
  read no ``frame-ancestors``, and for what is not a page.

:class:`HeadersApp` is the Starlette application with this middleware outermost, so
that even the answer to an unexpected error has the headers.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from roses_app.publish.feedpage import CSP

PAGE_CSP = f"{CSP}; frame-ancestors 'none'"


class SecurityHeaders:
    """ASGI middleware adding the headers above to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["X-Content-Type-Options"] = "nosniff"
                headers.setdefault("X-Frame-Options", "DENY")  # for browsers without CSP 2
                html = headers.get("content-type", "").startswith("text/html")
                if html and "content-security-policy" not in headers:
                    headers["Content-Security-Policy"] = PAGE_CSP
            await send(message)

        await self.app(scope, receive, send_with_headers)


class HeadersApp(Starlette):
    """Starlette with :class:`SecurityHeaders` outside its own error handling."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())
