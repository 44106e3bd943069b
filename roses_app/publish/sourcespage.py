"""``/sources.html``: the feed sources' health for people, a page at a time.

The same listing as ``/sources`` (:mod:`roses_app.connectors.listing`): a filter form
(text, status, rows per page), column headers that sort (a second click reverses),
and links to the previous and next pages.  Everything is escaped; no script, like
every ROSES page (the form is a plain GET to this page).
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from roses_app.publish.feedpage import STYLE

CSP = "script-src 'none'; object-src 'none'; base-uri 'none'; form-action 'self'"
PAGE_STYLE = (
    STYLE.replace("max-width:50em", "max-width:90em")
    + ".wide{overflow-x:auto}table{border-collapse:collapse;font-size:90%}"
    "th,td{text-align:left;padding:.25em .5em;border-bottom:1px solid #ddd;vertical-align:top}"
    "th a{color:inherit}.error{color:#b00}form *{margin:.2em .4em .2em 0}"
    # short values and headings whole; long ones (URLs, reasons, errors) may break
    "th,td{overflow-wrap:normal}td.long{overflow-wrap:anywhere;min-width:12em}"
    # a phone: each source a block of labelled lines instead of a row of eleven cells
    "@media (max-width:40em){table,thead,tbody,tr,th,td{display:block}"
    "thead tr{display:flex;flex-wrap:wrap}tr{border-bottom:2px solid #ccc;padding:.4em 0}"
    "td{border:0;padding:.1em 0;min-width:0}td:empty{display:none}"
    "td[data-label]:not([data-label=''])::before{"
    "content:attr(data-label) ': ';color:#555}}"
)
COLUMNS = (  # (key, heading, sortable)
    ("name", "Source", True),
    ("status", "Status", True),
    ("last_poll", "Last poll", True),
    ("next_poll", "Next poll", True),
    ("interval", "Interval", True),
    ("why", "Why", False),
    ("lag", "Lag", True),
    ("not_modified_share", "304s", True),
    ("items_per_day", "Items/day", True),
    ("failures", "Failures", True),
    ("last_error", "Last error", False),
)
LONG_KEYS = frozenset({"name", "why", "last_error"})  # cells whose text may break anywhere
LONG = ' class="long"'
STATUSES = ("", "ok", "not_modified", "error", "gone", "never")


def render_sources_page(page: Mapping[str, Any], params: Mapping[str, str]) -> bytes:
    """The HTML of one page of the listing ``page``, asked with ``params``."""
    esc = html.escape
    now = time.time()
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        "<title>ROSES sources</title>",
        f"<style>{PAGE_STYLE}</style>",
        "</head><body>",
        '<h1>Sources</h1><p><a href="/">Feeds</a> · <a href="/sources?'
        f'{esc(urlencode(dict(params)))}">this page as JSON</a></p>',
        *_form(params),
        f"<p>{page['total']:,} source(s) match.</p>",
        '<div class="wide"><table><thead><tr>',
        *(_heading(key, title, sortable, params) for key, title, sortable in COLUMNS),
        "</tr></thead><tbody>",
        *(_row(row, now) for row in page["sources"]),
        "</tbody></table></div>",
        *_pager(page, params),
        "</body></html>",
    ]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _form(params: Mapping[str, str]) -> list[str]:
    esc = html.escape
    status = params.get("status", "")
    options = "".join(
        f'<option value="{s}"{" selected" if s == status else ""}>{s or "any status"}</option>'
        for s in STATUSES
    )
    return [
        '<form method="get" action="/sources.html">',
        f'<input name="q" value="{esc(params.get("q", ""))}" placeholder="name or URL">',
        f'<select name="status">{options}</select>',
        f'<input name="per_page" value="{esc(params.get("per_page", "100"))}" size="4">',
        f'<input type="hidden" name="sort" value="{esc(params.get("sort", "name"))}">',
        '<button type="submit">Show</button></form>',
    ]


def _link(params: Mapping[str, str], **changes: str) -> str:
    query = {**params, **changes}
    return "/sources.html?" + urlencode({k: v for k, v in query.items() if v})


def _heading(key: str, title: str, sortable: bool, params: Mapping[str, str]) -> str:
    if not sortable:
        return f"<th>{html.escape(title)}</th>"
    current = params.get("sort", "name")
    order = f"-{key}" if current == key else key
    mark = " ▲" if current == key else " ▼" if current == f"-{key}" else ""
    href = html.escape(_link(params, sort=order, page="1"))
    return f'<th><a href="{href}">{html.escape(title)}{mark}</a></th>'


def _row(row: Mapping[str, Any], now: float) -> str:
    esc = html.escape
    cells = [
        f'{esc(row["name"])}<br><span class="meta">{esc(row["url"])}</span>',
        esc(row["status"]),
        _ago(row["last_poll"], now),
        _ahead(row["next_poll"], now),
        duration(row["interval"]),
        esc(row["why"] or ""),
        duration(row["lag"]),
        "" if row["not_modified_share"] is None else f"{row['not_modified_share']:.0%}",
        "" if row["items_per_day"] is None else f"{row['items_per_day']:g}",
        str(row["failures"]),
        f'<span class="error">{esc(row["last_error"])}</span>' if row["last_error"] else "",
    ]
    # every cell, empty or not, so that the columns line up (a phone hides empty ones)
    tds = (
        f'<td data-label="{html.escape(title)}"{LONG if key in LONG_KEYS else ""}>{cell}</td>'
        for (key, title, _), cell in zip(COLUMNS, cells, strict=True)
    )
    return "<tr>" + "".join(tds) + "</tr>"


def _pager(page: Mapping[str, Any], params: Mapping[str, str]) -> list[str]:
    number, per_page, total = page["page"], page["per_page"], page["total"]
    last = max(1, -(-total // per_page))
    links = []
    if number > 1:
        links.append(f'<a href="{html.escape(_link(params, page=str(number - 1)))}">previous</a>')
    links.append(f"page {number} of {last}")
    if number < last:
        links.append(f'<a href="{html.escape(_link(params, page=str(number + 1)))}">next</a>')
    return [f"<p>{' · '.join(links)}</p>"]


def _ago(at: float | None, now: float) -> str:
    return "" if at is None else f"{duration(max(0.0, now - at))} ago"


def _ahead(at: float | None, now: float) -> str:
    if at is None:
        return ""
    return "now" if at <= now else f"in {duration(at - now)}"


def duration(seconds: float | None) -> str:
    """``seconds`` in the largest unit that fits (d, h, min, s), one decimal."""
    if seconds is None:
        return ""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"
