"""Every feed source's health as one listing: filtered, sorted and paged (``/sources``).

At 100,000 sources neither ``/healthz`` nor a metrics label per source can say how
each one is doing; this listing can, a page at a time.  What the state store keeps
(status, last poll, errors, 304s, the rate estimate) is read with SQL; what only the
running scheduler knows (the next poll, the interval and why, the last lag) is joined
from memory.  One row::

    {"name", "url", "status", "last_poll", "next_poll", "interval", "why", "lag",
     "polls", "not_modified_share", "items_per_day", "failures", "last_error"}

Times are UNIX seconds (``null``: not yet); ``status`` is the last poll's outcome
(``ok``, ``not_modified``, ``error``, ``gone``) or ``never``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from roses_app.config.model import FeedSource
from roses_app.connectors.refresh import Interval
from roses_app.connectors.state import StateStore

SORTS = ("name", "status", "last_poll", "next_poll", "interval", "lag", "polls", "errors",
         "items_per_day", "not_modified_share")  # fmt: skip
STATUSES = ("ok", "not_modified", "error", "gone", "never")
MAX_PER_PAGE = 1000


@dataclass(frozen=True)
class Query:
    """What ``/sources`` was asked (bad values are refused by :func:`parse_query`)."""

    text: str = ""  # in the name or the URL, any case
    status: str | None = None
    sort: str = "name"
    descending: bool = False
    page: int = 1
    per_page: int = 100


def parse_query(params: Mapping[str, str]) -> Query:
    """``?q=&status=&sort=[-]KEY&page=&per_page=``; a ValueError says what is wrong."""
    sort = params.get("sort", "name")
    descending = sort.startswith("-")
    sort = sort.lstrip("-")
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)} (- first: descending)")
    status = params.get("status") or None
    if status is not None and status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}")
    page, per_page = _whole(params, "page", 1), _whole(params, "per_page", 100)
    if per_page > MAX_PER_PAGE:
        raise ValueError(f"per_page is at most {MAX_PER_PAGE}")
    return Query(params.get("q", "").lower(), status, sort, descending, page, per_page)


def _whole(params: Mapping[str, str], key: str, default: int) -> int:
    text = params.get(key)
    if text is None:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{key} must be a whole number from 1")
    return int(text)


@dataclass(frozen=True)
class Live:
    """What the running scheduler knows of the sources."""

    next_poll: Callable[[str], float | None]
    intervals: Mapping[str, Interval]
    lags: Callable[[str], float | None]


_COLUMNS = ("name, url, last_status, last_error, last_attempt_at, n_polls, n_not_modified, "
            "n_errors, failures, rate_items, rate_seconds")  # fmt: skip


def listing(
    store: StateStore, sources: Mapping[str, FeedSource], live: Live, query: Query
) -> dict[str, Any]:
    """The page of sources ``query`` asks for, with the number of matches."""
    stored = {row[0]: row for row in store.rows(_COLUMNS)}
    rows = [_row(source, stored.get(name), live) for name, source in sources.items()]
    if query.text:
        rows = [r for r in rows if query.text in r["name"].lower() or query.text in r["url"]]
    if query.status is not None:
        rows = [r for r in rows if r["status"] == query.status]
    key = "failures" if query.sort == "errors" else query.sort
    rows.sort(key=lambda r: r["name"])  # ties (and missing values) by name
    present = [r for r in rows if r[key] is not None]
    absent = [r for r in rows if r[key] is None]  # never polled: last whichever way
    present.sort(key=lambda r: r[key], reverse=query.descending)
    rows = present + absent
    start = (query.page - 1) * query.per_page
    return {
        "total": len(rows),
        "page": query.page,
        "per_page": query.per_page,
        "sources": rows[start : start + query.per_page],
    }


def _row(source: FeedSource, stored: tuple[Any, ...] | None, live: Live) -> dict[str, Any]:
    chosen = live.intervals.get(source.name)
    row: dict[str, Any] = {
        "name": source.name,
        "url": source.url,
        "status": "never",
        "last_poll": None,
        "next_poll": live.next_poll(source.name),
        "interval": None if chosen is None else round(chosen.seconds, 3),
        "why": None if chosen is None else chosen.reason,
        "lag": live.lags(source.name),
        "polls": 0,
        "not_modified_share": None,
        "items_per_day": None,
        "failures": 0,
        "last_error": "",
    }
    if stored is None:
        return row
    _, _, status, error, last, polls, not_modified, _errors, failures, items, seconds = stored
    row.update(
        status=status or "never",
        last_poll=last,
        polls=polls,
        not_modified_share=round(not_modified / polls, 3) if polls else None,
        items_per_day=round(items / seconds * 86400.0, 2) if seconds > 0 else None,
        failures=failures,
        last_error=error,
    )
    if row["items_per_day"] is not None and not math.isfinite(row["items_per_day"]):
        row["items_per_day"] = None
    return row
