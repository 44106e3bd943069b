"""The console's page shell, its policy, and the small formats its pages share.

Every page is made here on the server; its only script and style are the console's
own files (``static/console.js``, ``static/console.css``), which its
Content-Security-Policy allows and nothing else: no inline script, no ``style``
attribute, nothing from elsewhere.  All text is escaped.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from urllib.parse import quote, urlencode

from starlette.responses import Response

from roses_app.publish.sourcespage import duration

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
}
NAV = (("/console/", "Overview"), ("/console/sources", "Sources"),
       ("/console/streams", "Streams"), ("/console/editor", "Editor"))  # fmt: skip

esc = html.escape


def page(
    title: str,
    body: Iterable[str],
    *,
    csrf: str | None = None,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """A console page: ``body`` (HTML lines, escaped by their maker) in the shell;
    ``csrf``: the session's token, for the script and the logout form."""
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)} · ROSES console</title>",
        '<link rel="stylesheet" href="/console/static/console.css">',
        '<script src="/console/static/console.js" defer></script>',
    ]
    if csrf is not None:
        lines.append(f'<meta name="csrf-token" content="{esc(csrf)}">')
    lines.append("</head><body>")
    if csrf is not None:
        lines.append(_nav(csrf))
    lines += ["<main>", f"<h1>{esc(title)}</h1>", *body, "</main></body></html>"]
    content = ("\n".join(lines) + "\n").encode("utf-8")
    return Response(
        content,
        status_code=status,
        media_type="text/html; charset=utf-8",
        headers={**HEADERS, **(headers or {})},
    )


def _nav(csrf: str) -> str:
    links = "".join(f'<a href="{href}">{esc(text)}</a>' for href, text in NAV)
    logout = (
        '<form method="post" action="/console/logout" class="logout">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        '<button type="submit" id="logout-button">Log out</button></form>'
    )
    return (
        f'<header class="bar"><span class="brand">ROSES</span><nav>{links}</nav>{logout}</header>'
    )


def link(path: str, **params: str) -> str:
    """A console URL with its query (empty values left out), escaped for HTML."""
    query = urlencode({k: v for k, v in params.items() if v})
    return esc(path + ("?" + query if query else ""))


def named(path: str, name: str) -> str:
    """``/console/sources/NAME``: the name percent-quoted, escaped for HTML."""
    return esc(f"{path}/{quote(name, safe='')}")


def when(at: float | None, now: float | None = None) -> str:
    """A time as ``<time>``: UTC, and how long ago or ahead."""
    if at is None:
        return ""
    now = time.time() if now is None else now
    stamp = datetime.fromtimestamp(at, tz=UTC)
    delta = now - at
    relative = "now" if abs(delta) < 1 else (
        f"{duration(delta)} ago" if delta > 0 else f"in {duration(-delta)}")  # fmt: skip
    iso = stamp.isoformat(timespec="seconds").replace("+00:00", "Z")
    return f'<time datetime="{iso}" title="{iso}">{esc(relative)}</time>'


def table(
    headings: Iterable[str], rows: Iterable[Iterable[str]], *, cls: str = "", ident: str = ""
) -> str:
    """A table in a box that scrolls sideways on a narrow screen; cells are HTML."""
    heads = list(headings)
    head = "".join(f"<th>{esc(h)}</th>" for h in heads)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td data-label="{esc(h)}">{cell}</td>' for h, cell in zip(heads, row, strict=True)
        )
        + "</tr>"
        for row in rows
    )
    klass = (f' id="{esc(ident)}"' if ident else "") + (f' class="{esc(cls)}"' if cls else "")
    return (
        f'<div class="wide"><table{klass}><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def pager(path: str, params: Mapping[str, str], number: int, per_page: int, total: int) -> str:
    last = max(1, -(-total // per_page))
    parts = []
    if number > 1:
        parts.append(
            f'<a href="{link(path, **{**params, "page": str(number - 1)})}" rel="prev">previous</a>'
        )
    parts.append(f"page {number:,} of {last:,}")
    if number < last:
        parts.append(
            f'<a href="{link(path, **{**params, "page": str(number + 1)})}" rel="next">next</a>'
        )
    return f'<p class="pager">{" · ".join(parts)}</p>'


def notice(text: str, kind: str = "info") -> str:
    return f'<p class="notice {esc(kind)}">{esc(text)}</p>'
