"""The console's source pages: every source's health, a page at a time, and one
source with its last polls and newest items.

The listing is ``/sources``'s (:mod:`roses_app.connectors.listing`): the same rows,
filters and sorts, here from rows kept a few seconds (:class:`~roses_app.connectors.
listing.Snapshot`), so that paging through 100,000 sources stays fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roses_app.connectors.listing import STATUSES
from roses_app.publish.console.deps import ConsoleDeps
from roses_app.publish.console.layout import duration, esc, link, named, notice, pager, table, when
from roses_app.publish.console.recent import shown
from roses_app.publish.sourcespage import COLUMNS

PATH = "/console/sources"
RECENT_ITEMS = 20
PARAMS = ("q", "status", "sort", "per_page")
# A first page waits this long for the rows (at 100,000 sources their first reading
# takes about a second); then it says they are coming instead of keeping one waiting.
FIRST_WAIT = 0.05
READING = ("The rows of the {:,} sources are being read (the daemon has just started): "
           "reload this page in a moment.")  # fmt: skip


def sources_body(deps: ConsoleDeps, params: Mapping[str, str]) -> list[str]:
    """The listing page's body (a ValueError: a bad query, said by the caller)."""
    page = deps.sources(params, first_wait=FIRST_WAIT)
    if page.get("reading"):
        return [notice(READING.format(len(deps.config().sources)))]
    kept = {k: params[k] for k in PARAMS if params.get(k)}
    now = deps.clock()
    rows = [_cells(row, now) for row in page["sources"]]
    headings = [_heading(key, title, sortable, kept) for key, title, sortable in COLUMNS]
    aged = page.get("rows_age_seconds")
    age = [] if aged is None else [f"These rows were read {aged:.0f} s ago; newer ones are coming."]
    return [
        _filter_form(kept),
        *map(notice, age),
        f'<p id="sources-total">{page["total"]:,} source(s) match.</p>',
        _table(headings, rows),
        pager(PATH, kept, page["page"], page["per_page"], page["total"]),
    ]


def _filter_form(params: Mapping[str, str]) -> str:
    status = params.get("status", "")
    options = "".join(
        f'<option value="{s}"{" selected" if s == status else ""}>{s or "any status"}</option>'
        for s in ("", *STATUSES)
    )
    return (
        f'<form method="get" action="{PATH}" class="filters" id="sources-filter">'
        f'<input name="q" value="{esc(params.get("q", ""))}" placeholder="name or URL"'
        ' aria-label="name or URL">'
        f'<select name="status" aria-label="status">{options}</select>'
        f'<input name="per_page" value="{esc(params.get("per_page", "100"))}" size="4"'
        ' aria-label="rows per page">'
        f'<input type="hidden" name="sort" value="{esc(params.get("sort", "name"))}">'
        '<button type="submit">Show</button></form>'
    )


def _heading(key: str, title: str, sortable: bool, params: Mapping[str, str]) -> str:
    if not sortable:
        return esc(title)
    current = params.get("sort", "name")
    order = f"-{key}" if current == key else key
    mark = " ▲" if current == key else " ▼" if current == f"-{key}" else ""
    return f'<a href="{link(PATH, **{**params, "sort": order, "page": ""})}">{esc(title)}{mark}</a>'


def _table(headings: list[str], rows: list[list[str]]) -> str:
    titles = [title for _, title, _ in COLUMNS]
    head = "".join(f"<th>{h}</th>" for h in headings)
    body = "".join(
        "<tr>"
        + "".join(f'<td data-label="{esc(t)}">{c}</td>' for t, c in zip(titles, row, strict=True))
        + "</tr>"
        for row in rows
    )
    return (
        '<div class="wide"><table class="rows" id="sources-table">'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def _cells(row: Mapping[str, Any], now: float) -> list[str]:
    share = row["not_modified_share"]
    return [
        f'<a href="{named(PATH, row["name"])}">{esc(row["name"])}</a>'
        f'<br><span class="meta long">{esc(row["url"])}</span>',
        f'<span class="status {esc(row["status"])}">{esc(row["status"])}</span>',
        when(row["last_poll"], now),
        when(row["next_poll"], now),
        duration(row["interval"]),
        f'<span class="long">{esc(row["why"])}</span>' if row["why"] else "",
        duration(row["lag"]),
        "" if share is None else f"{share:.0%}",
        "" if row["items_per_day"] is None else f"{row['items_per_day']:g}",
        str(row["failures"]),
        f'<span class="error long">{esc(row["last_error"])}</span>' if row["last_error"] else "",
    ]


def source_body(deps: ConsoleDeps, name: str) -> list[str] | None:
    """One source's page body; None: no such source."""
    config = deps.config()
    source = config.sources.get(name)
    if source is None:
        return None
    now = deps.clock()
    origin = source.origin
    lines = [f'<p class="meta">Defined at {esc(origin.file)}:{origin.line}.</p>']
    row = deps.source(name)
    if row is not None:
        titles = [title for _, title, _ in COLUMNS]
        cells = _cells(row, now)
        lines.append('<dl class="facts" id="source-health">')
        lines += [
            f"<dt>{esc(t)}</dt><dd>{c or '—'}</dd>" for t, c in zip(titles, cells, strict=True)
        ]
        lines.append("</dl>")
    else:
        lines.append(notice("A mail source: its health is in /healthz."))
    lines += ["<h2>Last polls</h2>", _polls(deps, name, now)]
    lines += ["<h2>Newest items</h2>", *_items(deps, name)]
    return lines


def _polls(deps: ConsoleDeps, name: str, now: float) -> str:
    polls = deps.history.recent(name)
    if not polls:
        return notice("No poll recorded yet.")
    rows = [
        [
            when(p.at, now),
            f'<span class="status {esc(p.status)}">{esc(p.status)}</span>',
            str(p.items),
            duration(p.seconds),
            duration(p.lag),
            duration(p.interval),
            f'<span class="error long">{esc(p.message)}</span>' if p.message else "",
        ]
        for p in polls
    ]
    headings = ("When", "Status", "New items", "Fetch", "Lag", "Next in", "Error")
    return table(headings, rows, cls="rows", ident="poll-history")


def _items(deps: ConsoleDeps, name: str) -> list[str]:
    recent = deps.recent(name, RECENT_ITEMS)
    if not recent.events:
        where = (
            "in the spool"
            if recent.complete
            else f"in the last {recent.scanned:,} bytes of the spool"
        )
        return [notice(f"No item of this source {where}.")]
    lines = ['<ol class="items" id="source-items">']
    for event in recent.events:
        seen = shown(event.item or "")
        title = esc(seen.title) if seen.title else '<em class="meta">(no title)</em>'
        text = f'<a href="{esc(seen.link)}" rel="noreferrer">{title}</a>' if seen.link else title
        lines.append(f'<li>{text} <span class="meta">{when(event.ts / 1e6)}</span></li>')
    lines.append("</ol>")
    return lines
