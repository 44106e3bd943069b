"""The console's stream pages: the global plan's picture and the list of streams,
and one stream with its definition, plans, counters, chart and newest items."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

from roses_app.algebra.plan.operators import Split
from roses_app.algebra.planner.explain import format_plan
from roses_app.config.model import Config, StreamConfig
from roses_app.publish.console.chart import DAYS, hourly_svg
from roses_app.publish.console.deps import ConsoleDeps
from roses_app.publish.console.layout import esc, named, notice, pager, table, when
from roses_app.publish.console.plansvg import plan_svg_soon, streams_by_source
from roses_app.publish.console.recent import shown

PATH = "/console/streams"
PER_PAGE = 100
RECENT_ITEMS = 20
DEFINITION_LINES = 200
FIRST_WAIT = 0.05  # for the plan's summary (about a second at 100,000 streams)


def streams_body(deps: ConsoleDeps, params: Mapping[str, str]) -> list[str]:
    config = deps.config()
    queries = deps.queries()
    now = deps.clock()

    def stored(name: str) -> float | None:
        return sum(deps.store.hourly(name, now - 86400.0).values()) / 24.0

    def polled(name: str) -> float | None:
        row = deps.source(name)
        per_day = None if row is None else row["items_per_day"]
        return None if per_day is None else per_day / 24.0

    picture = plan_svg_soon(config, queries, polled, stored, FIRST_WAIT) or notice(
        f"The plan of {len(config.streams):,} streams is being summarised for its picture "
        "(the daemon has just started, or feeds.yaml changed): reload this page in a moment."
    )
    names = _chosen(config, params)
    number = _page_number(params)
    shown_names = names[(number - 1) * PER_PAGE : number * PER_PAGE]
    rows = [_row(config.streams[name], queries) for name in shown_names]
    kept = {k: params[k] for k in ("q", "source") if params.get(k)}
    return [
        '<div class="picture">',
        picture,
        "</div>",
        '<h2>Streams</h2><form method="get" action="/console/streams" class="filters">'
        f'<input name="q" value="{esc(params.get("q", ""))}" placeholder="stream name"'
        ' aria-label="stream name">'
        f'<input name="source" value="{esc(params.get("source", ""))}" placeholder="reads source"'
        ' aria-label="reads source"><button type="submit">Show</button></form>',
        f'<p id="streams-total">{len(names):,} stream(s) match.</p>',
        table(("Stream", "Operator", "Published", "Query", "Defined at"), rows, cls="rows"),
        pager(PATH, kept, number, PER_PAGE, len(names)),
    ]


def _page_number(params: Mapping[str, str]) -> int:
    text = params.get("page", "1")
    if not text.isdigit() or int(text) < 1:
        raise ValueError("page must be a whole number from 1")
    return int(text)


def _chosen(config: Config, params: Mapping[str, str]) -> list[str]:
    source = params.get("source", "")
    names = list(config.streams) if not source else streams_by_source(config)[0].get(source, [])
    text = params.get("q", "").lower()
    return [n for n in names if text in n.lower()] if text else names


def _row(stream: StreamConfig, queries: Mapping[str, str]) -> list[str]:
    origin = stream.origin
    return [
        f'<a href="{named(PATH, stream.name)}">{esc(stream.name)}</a>',
        esc(type(stream.plan).__name__),
        "yes" if stream.published else "no",
        esc(queries.get(stream.name, "not running")),
        f'<span class="meta">{esc(Path(origin.file).name)}:{origin.line}</span>',
    ]


def stream_body(deps: ConsoleDeps, name: str) -> list[str] | None:
    """One stream's page body; None: no such stream."""
    config = deps.config()
    stream = config.streams.get(name)
    if stream is None:
        return None
    now = deps.clock()
    origin = stream.origin
    query = deps.queries().get(name, "not running")
    edit = f"/console/editor?stream={quote(name, safe='')}"
    lines = [
        f'<p>Run by Spark query <strong id="stream-query">{esc(query)}</strong>; '
        f'<a href="{esc(edit)}" id="edit-stream">edit in the editor</a>.</p>',
        *_published(stream),
        f'<h2>Definition</h2><p class="meta">{esc(origin.file)}:{origin.line}</p>',
        f'<pre id="stream-definition">{esc(definition(config, stream))}</pre>',
        "<h2>Counters</h2>",
        _counters(deps, name),
        f"<h2>Items per hour, last {DAYS} days</h2>",
        hourly_svg(deps.store.hourly(name, now - DAYS * 86400.0), now),
        "<h2>Newest items</h2>",
        *_items(deps, stream, now),
        "<h2>Plans</h2>",
        f'<pre id="stream-explain">{esc(deps.explain(name))}</pre>',
    ]
    return lines


def _published(stream: StreamConfig) -> list[str]:
    if not stream.published:
        return ['<p class="meta">Not published (no <code>publish:</code>).</p>']
    base = f"/feeds/{quote(stream.name, safe='')}"
    if isinstance(stream.plan, Split):
        return ['<p>Published: one feed per value, listed on <a href="/">the index</a>.</p>']
    links = " · ".join(
        f'<a href="{esc(base)}.{fmt}">{label}</a>'
        for fmt, label in (("html", "page"), ("rss", "RSS"), ("atom", "Atom"), ("json", "JSON"))
    )
    return [f"<p>Published: {links}</p>"]


def _counters(deps: ConsoleDeps, name: str) -> str:
    counters = deps.counters()
    dropped = counters.get("dropped", {})
    steps = {k: v for k, v in dropped.items() if k == name or k.startswith(name + "/")}
    rows = [
        ["items dropped (an expression failed)", f"{sum(steps.values()):,}"],
        ["items later than the lateness", f"{counters.get('late', {}).get(name, 0):,}"],
        _watermark(deps.queries(), counters.get("watermark", {}), name),
        ["windows revised", f"{counters.get('revised', {}).get(name, 0):,}"],
        ["windows computed again, unchanged", f"{counters.get('unchanged', {}).get(name, 0):,}"],
    ]
    rows += [[f"dropped at step {esc(k)}", f"{n:,}"] for k, n in sorted(steps.items())]
    return table(("Counter", "Since the start"), rows, ident="stream-counters")


def _watermark(queries: Mapping[str, str], late: Mapping[str, int], name: str) -> list[str]:
    """The rows Spark dropped behind the watermark in the query running ``name``.
    Spark counts them per stateful operator, and a query runs several streams: the
    count is the query's, and the row says so when it serves others too."""
    query = queries.get(name)
    if query is None:
        return ["dropped as late (watermark)", "not running"]
    serves = sum(1 for q in queries.values() if q == query)
    label = "dropped as late (watermark)"
    if serves > 1:
        label += f", for all {serves:,} streams of query {query}"
    return [esc(label), f"{late.get(query, 0):,}"]


def _items(deps: ConsoleDeps, stream: StreamConfig, now: float) -> list[str]:
    parts = [""]
    if isinstance(stream.plan, Split):
        parts = deps.store.parts(stream.name)[:5]
    entries = [e for part in parts for e in deps.store.latest(stream.name, part, RECENT_ITEMS)]
    entries.sort(key=lambda e: (e.ts, e.seq), reverse=True)
    if not entries:
        return [notice("No item stored yet.")]
    lines = ['<ol class="items" id="stream-items">']
    for entry in entries[:RECENT_ITEMS]:
        seen = shown(entry.item)
        title = esc(seen.title) if seen.title else '<em class="meta">(no title)</em>'
        text = f'<a href="{esc(seen.link)}" rel="noreferrer">{title}</a>' if seen.link else title
        part = f" · {esc(entry.part)}" if entry.part else ""
        stored = when(entry.created_at, now)
        lines.append(f'<li>{text} <span class="meta">{stored}{part}</span></li>')
    lines.append("</ol>")
    return lines


def definition(config: Config, stream: StreamConfig) -> str:
    """The stream's text in its file: the line of its name and the lines indented
    under it (a subscriptions file: its line)."""
    origin = stream.origin
    path = Path(origin.file)
    if not path.is_absolute() and not path.exists():
        path = config.path.parent / path
    try:
        with open(path, encoding="utf-8") as fh:
            lines = list(itertools.islice(fh, origin.line - 1, origin.line - 1 + DEFINITION_LINES))
    except OSError as exc:
        return f"({path} cannot be read: {exc.strerror})"
    if not lines:
        return f"({path} has no line {origin.line})"
    first = lines[0]
    indent = len(first) - len(first.lstrip())
    block = [first.rstrip()]
    for line in lines[1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        block.append(line.rstrip())
    return "\n".join(block).rstrip()


def explain_stream(config: Config, name: str) -> str:
    """A stream's plan as written and as rewritten (what ``roses explain NAME`` prints
    first), each node with its feeds.yaml line."""
    from roses_app.algebra.planner.rewrite import rewrite_streams, summary

    stream = config.streams[name].stream
    applied: dict[str, list[str]] = {}
    (rewritten,) = rewrite_streams([stream], config.settings.namespaces, applied=applied)
    written = format_plan(stream.plan)
    lines = ["== logical plan", written]
    after = format_plan(rewritten.plan)
    if after == written:
        lines.append("== rewritten plan: unchanged (no rule applies)")
    else:
        lines += [f"== rewritten plan (rules: {summary(applied.get(name, []))})", after]
    return "\n".join(lines)
