"""Live preview: what an expression or a stream would publish, over the spool's last items.

The web console asks, at each keystroke, what a filter's observer, a split function,
a map's accessor or a whole stream would give.  :meth:`Previewer.preview` answers:

1. the request is checked as ``roses check`` checks a stream (:mod:`.preview_check`),
   its problems located in the request's text (line and column); with problems there
   is nothing to evaluate;
2. the last ``limit`` items of the sources the stream reads are taken from the spool
   (:mod:`.preview_tail`: read once and kept, with each item's tree, between requests;
   the spool is read without its index, so a running daemon is not disturbed);
3. when the stream is a filter (or a split of one) over sources as they are (unions and
   filters of them), the items its observer cannot be true on are dropped by the
   presearcher's necessary condition of the observer (:func:`roses_app.xmlfn.
   presearch_terms.condition`: in each clause, one term must occur in its field's
   values), tested on each item's field values as the presearcher reads them (read
   once per item and field, and kept with the item): a keyword observer over 10,000
   items leaves a handful to evaluate, for a few milliseconds.  (One observer needs no
   index: the presearcher's Aho-Corasick scan serves many at once.)
4. the stream is evaluated by the reference engine (:func:`roses_app.algebra.reference.evaluator.
   evaluate_stream`) over those items (a window, a join or an aggregate too, with the
   heartbeats among them, and ``settings.lateness``): what Spark would publish from
   them.

An item an expression fails on at run time is dropped, as the engines drop it; the
preview counts them (``failed``, and the first message) instead of logging each.  An
expression is stopped on an item past ``settings.limits.item_time`` as in Spark's
workers, and a whole preview past :data:`PREVIEW_SECONDS` (the items left are dropped
at once: a stalling observer over 10,000 items would take 10,000 limits).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from lxml import etree

from roses_app.algebra.plan.operators import Filter, Node, Source, Split, Stream, Union
from roses_app.algebra.reference.evaluator import evaluate_stream
from roses_app.algebra.reference.registry import RefEvent, RefInput
from roses_app.algebra.time.eventtime import stateless
from roses_app.config.model import Config
from roses_app.items import Event, iso8601, micros_of
from roses_app.publish.preview_check import check_request
from roses_app.publish.preview_tail import SpoolTail, Window
from roses_app.xmlfn import budget
from roses_app.xmlfn.presearch_terms import condition
from roses_app.xmlfn.xpath import parse

MAX_ITEMS = 100  # items shown, newest first
MAX_LIMIT = 100_000  # items a preview reads at most
PREVIEW_SECONDS = 10.0  # the evaluations of one preview together
ERROR_LOGGER = "roses_app.xmlfn.batch"  # where the engines log an item dropped on failure


@dataclass(frozen=True)
class PreviewRequest:
    text: str  # a where/by expression, a map's xpath, or a whole stream's YAML body
    kind: str  # "where" | "by" | "map" | "stream"
    source: str | None = None  # the from: of where/by/map: a source or stream name
    name: str = "preview"  # the stream's name for kind="stream"
    limit: int = 10_000  # preview over the last N spooled items (of the relevant sources)


@dataclass(frozen=True)
class PreviewProblem:
    message: str  # what `roses check` would say
    line: int | None  # 1-based, in `text`
    column: int | None  # 1-based, in `text` (the position in the expression where known)


@dataclass(frozen=True)
class PreviewItem:
    source: str
    title: str
    link: str
    published: str | None  # ISO 8601
    part: str | None  # the split value (kind="by" or a split stream)
    xml: str  # the output item


@dataclass(frozen=True)
class PreviewResult:
    problems: tuple[PreviewProblem, ...]
    items: tuple[PreviewItem, ...]  # at most 100 (newest first)
    matched: int  # outputs over the scanned items
    scanned: int  # items read from the spool
    per_source: Mapping[str, int]  # matched per source
    split_values: Mapping[str, int]  # value -> count (splits)
    seconds: float
    failed: int = 0  # items dropped because an expression failed on them at run time
    failure: str | None = None  # the first such failure's message
    complete: bool = False  # the spool holds no older item of the sources read
    presearched: bool = False  # items the observer cannot be true on were skipped
    evaluated: int = 0  # items the reference engine evaluated (after the presearcher)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["per_source"] = dict(self.per_source)
        out["split_values"] = dict(self.split_values)
        out["extra"] = dict(self.extra)
        out["seconds"] = round(self.seconds, 4)
        return out


class _Failures(logging.Filter):
    """Counts, and keeps out of the log, the items dropped by the threads previewing
    (the engines log each one: a broken expression over 10,000 items, each keystroke)."""

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()

    def start(self) -> None:
        self._local.count, self._local.first = 0, None

    def stop(self) -> tuple[int, str | None]:
        found = (self._local.count, self._local.first)
        del self._local.count
        return found

    def filter(self, record: logging.LogRecord) -> bool:
        count = getattr(self._local, "count", None)
        if count is None:
            return True
        self._local.count = count + 1
        if self._local.first is None:
            self._local.first = record.getMessage()
        return False


_failures = _Failures()
logging.getLogger(ERROR_LOGGER).addFilter(_failures)


class Previewer:
    """Previews against the config ``config()`` returns (the daemon's current one) and
    the spool at ``spool_root``; thread-safe."""

    def __init__(self, config: Callable[[], Config], spool_root: Path) -> None:
        self.config = config
        self.tail = SpoolTail(spool_root)

    def preview(self, request: PreviewRequest) -> PreviewResult:
        started = time.perf_counter()
        config = self.config()
        checked = check_request(config, request.text, request.kind, request.source, request.name)
        if checked.stream is None:
            problems = tuple(PreviewProblem(p.message, p.line, p.column) for p in checked.problems)
            return PreviewResult(problems, (), 0, 0, {}, {}, time.perf_counter() - started)
        stream = checked.stream
        limit = max(1, min(MAX_LIMIT, request.limit))
        window = self.tail.last(sources_of(stream.plan), limit)
        events, presearched = self._candidates(stream, window, config)
        inputs = [RefInput(e.source, e.ts, e.seq, e.item, e.published) for e in events]
        settings = config.settings
        _failures.start()
        try:
            with budget.within(PREVIEW_SECONDS):
                parts = evaluate_stream(
                    stream, inputs, settings.namespaces, lateness=settings.lateness
                )
        finally:
            failed, failure = _failures.stop()
        return _result(
            stream,
            window,
            parts,
            time.perf_counter() - started,
            failed=failed,
            failure=failure,
            complete=window.complete,
            presearched=presearched,
            evaluated=sum(1 for e in events if e.item is not None),
        )

    def _candidates(
        self, stream: Stream, window: Window, config: Config
    ) -> tuple[Sequence[Event], bool]:
        """The window's events the stream needs: for a filter over the sources' items
        as they are, only those its observer may be true on; for a stateless stream,
        no heartbeat."""
        events: Sequence[Event] = window.events
        if stateless(stream.plan):
            events = [e for e in events if e.item is not None]
        where = _presearchable(stream.plan)
        found = None if where is None else condition(where, config.settings.namespaces)
        if found is None:
            return events, False
        items = list(events)  # (a filter: a stateless stream, no heartbeat)
        for clause in found.clauses:  # each clause: one of its terms occurs, or no match
            kept: set[int] = set()
            for term in clause:
                texts = self.tail.field_texts(items, term.field, term.lowered)
                text = term.text
                kept.update(
                    k for k, found_in in enumerate(texts) if found_in is None or text in found_in
                )
            items = [item for k, item in enumerate(items) if k in kept]
        return items, True


def sources_of(plan: Node) -> frozenset[str]:
    """The sources a plan reads."""
    return frozenset(node.name for node in plan.walk() if isinstance(node, Source))


def _presearchable(plan: Node) -> str | None:
    """The observer whose presearch may drop input items: the stream's filter (below
    its split), when what it filters is the sources' items themselves."""
    node = plan.input if isinstance(plan, Split) else plan
    if isinstance(node, Filter) and _items_as_spooled(node.input):
        return node.where
    return None


def _items_as_spooled(node: Node) -> bool:
    if isinstance(node, Source):
        return True
    if isinstance(node, Union):
        return all(_items_as_spooled(child) for child in node.inputs)
    return isinstance(node, Filter) and _items_as_spooled(node.input)


def _result(
    stream: Stream,
    window: Window,
    parts: Mapping[str, list[RefEvent]],
    seconds: float,
    **more: Any,
) -> PreviewResult:
    seqs = {event.seq for _, events in parts.items() for event in events}
    by_seq = {event.seq: event for event in window.events if event.seq in seqs}
    split = isinstance(stream.plan, Split)
    outputs = [(part, event) for part, events in parts.items() for event in events]
    per_source: Counter[str] = Counter()
    for _, event in outputs:
        found = by_seq.get(event.seq)
        if found is not None and found.source:
            per_source[found.source] += 1
    values = Counter({part: len(events) for part, events in parts.items()}) if split else {}
    newest = sorted(outputs, key=lambda pair: (pair[1].ts, pair[1].seq), reverse=True)
    shown = tuple(
        _item(part, event, by_seq.get(event.seq), split) for part, event in newest[:MAX_ITEMS]
    )
    return PreviewResult(
        problems=(),
        items=shown,
        matched=len(outputs),
        scanned=window.items,
        per_source=dict(per_source),
        split_values=dict(values),
        seconds=seconds,
        **more,
    )


def _item(part: str, event: RefEvent, input_event: Event | None, split: bool) -> PreviewItem:
    xml = event.item or ""
    title = link = ""
    published = None
    try:
        tree = parse(xml)
    except (etree.XMLSyntaxError, ValueError):
        tree = None
    if tree is not None:
        title = " ".join((tree.findtext("title") or "").split())
        link = (tree.findtext("link") or "").strip()
        published = _iso(tree.findtext("pubDate"))
    if published is None and input_event is not None and input_event.published is not None:
        published = iso8601(input_event.published)
    source = input_event.source if input_event is not None else ""
    return PreviewItem(source, title, link, published, part if split or part else None, xml)


def _iso(rfc822: str | None) -> str | None:
    if not rfc822:
        return None
    try:
        return iso8601(micros_of(parsedate_to_datetime(rfc822.strip())))
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


__all__ = [
    "MAX_ITEMS",
    "MAX_LIMIT",
    "PreviewItem",
    "PreviewProblem",
    "PreviewRequest",
    "PreviewResult",
    "Previewer",
]
