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
import threading
import time
from collections.abc import Callable, Mapping, Sequence
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


def rows_of(
    store: StateStore, sources: Mapping[str, FeedSource], live: Live
) -> list[dict[str, Any]]:
    """Every source's row, in the order of ``sources``."""
    stored = {row[0]: row for row in store.rows(_COLUMNS)}
    return [_row(source, stored.get(name), live) for name, source in sources.items()]


def one(store: StateStore, source: FeedSource, live: Live) -> dict[str, Any]:
    """One source's row, read now."""
    state = store.get(source.name)
    if state is None:
        return _row(source, None, live)
    s = state
    stored = (s.name, s.url, s.last_status, s.last_error, s.last_attempt_at, s.n_polls,
              s.n_not_modified, s.n_errors, s.failures, s.rate_items, s.rate_seconds)  # fmt: skip
    return _row(source, stored, live)


def page_of(
    rows: Sequence[dict[str, Any]],
    query: Query,
    ordered: Callable[[str, bool], Sequence[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """The page of ``rows`` that ``query`` asks for; ``ordered(key, descending)``, when
    given, returns ``rows`` sorted (a caller that keeps them sorts once)."""
    key = "failures" if query.sort == "errors" else query.sort
    chosen: Sequence[dict[str, Any]]
    if ordered is None:  # filtered first: fewer rows to sort
        chosen = sort_rows(_matching(rows, query), key, query.descending)
    else:
        chosen = _matching(ordered(key, query.descending), query)
    start = (query.page - 1) * query.per_page
    return {
        "total": len(chosen),
        "page": query.page,
        "per_page": query.per_page,
        "sources": list(chosen[start : start + query.per_page]),
    }


def _matching(rows: Sequence[dict[str, Any]], query: Query) -> Sequence[dict[str, Any]]:
    if query.text:
        text = query.text
        rows = [r for r in rows if text in r["name"].lower() or text in r["url"]]
    if query.status is not None:
        rows = [r for r in rows if r["status"] == query.status]
    return rows


def sort_rows(rows: Sequence[dict[str, Any]], key: str, descending: bool) -> list[dict[str, Any]]:
    """``rows`` by ``key`` (ties, and missing values, by name; missing values last
    whichever way)."""
    by_name = sorted(rows, key=lambda r: r["name"])
    present = [r for r in by_name if r[key] is not None]
    absent = [r for r in by_name if r[key] is None]  # never polled: last whichever way
    present.sort(key=lambda r: r[key], reverse=descending)
    return present + absent


class Snapshot:
    """Pages of the listing from rows kept a while, each order sorted once: at
    100,000 sources reading and building every row takes most of a second, a page of
    kept rows milliseconds.  Rows older than ``max_age`` seconds are read again in a
    thread while the kept ones serve.  Rows older than ``STALE`` times that (the
    console left alone a while) are read again too, and the page waits up to ``WAIT``
    seconds for them; past that it is made from the kept rows, which say their age
    (``rows_age_seconds``), so no page waits for a whole reading.  With no rows yet,
    the page waits for them, or at most ``first_wait`` seconds when asked: then it
    is empty and says ``"reading": true`` (a page for people that comes at once)."""

    STALE = 6
    WAIT = 0.15

    def __init__(
        self,
        rows: Callable[[], list[dict[str, Any]]],
        max_age: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._build = rows
        self.max_age = max_age
        self.clock = clock
        self._lock = threading.Lock()  # the kept rows, orders and reading thread
        self._building = threading.Lock()  # one reading at a time
        self._rows: list[dict[str, Any]] = []
        self._orders: dict[tuple[str, bool], list[dict[str, Any]]] = {}
        self._at: float | None = None
        self._reading: threading.Thread | None = None

    def __call__(
        self, params: Mapping[str, str], first_wait: float | None = None
    ) -> dict[str, Any]:
        """The page ``params`` ask for (a ValueError: a bad query)."""
        query = parse_query(params)
        age = None if self._at is None else self.clock() - self._at
        if age is None and first_wait is None:
            self._rebuild()
        elif age is None:
            self._read_in_thread().join(first_wait)
            if self._at is None:
                return {"total": 0, "page": query.page, "per_page": query.per_page,
                        "sources": [], "reading": True}  # fmt: skip
        elif age > self.max_age:
            reading = self._read_in_thread()
            if age > self.max_age * self.STALE:
                reading.join(self.WAIT)
        with self._lock:
            page = page_of(self._rows, query, self._ordered)
            at = self._at
        if at is not None and (kept := self.clock() - at) > self.max_age:
            page["rows_age_seconds"] = round(kept, 1)
        return page

    def warm(self) -> None:
        """Read the rows now, in a thread, so that the first page (a daemon just
        started) comes as fast as the next ones."""
        if self._at is None:
            self._read_in_thread()

    def _read_in_thread(self) -> threading.Thread:
        """The thread reading the rows: the one at work, else a new one."""
        with self._lock:
            if self._reading is None or not self._reading.is_alive():
                self._reading = threading.Thread(target=self._rebuild, name="listing", daemon=True)
                self._reading.start()
            return self._reading

    def _rebuild(self) -> None:
        with self._building:
            at = self.clock()
            if self._at is not None and at - self._at <= self.max_age:
                return  # another thread just did
            rows = self._build()
            with self._lock:
                self._rows, self._orders, self._at = rows, {}, at

    def _ordered(self, key: str, descending: bool) -> list[dict[str, Any]]:
        found = self._orders.get((key, descending))
        if found is None:
            found = self._orders[(key, descending)] = sort_rows(self._rows, key, descending)
        return found


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
