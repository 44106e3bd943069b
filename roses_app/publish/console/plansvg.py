"""The global plan as a picture: SVG drawn here, no library, no script.

A small config (at most ``SMALL_NODES`` boxes) is drawn whole: sources on the left,
each operator of the global plan once (equal sub-plans of several streams are one
node: :class:`~roses_app.algebra.planner.globalplan.GlobalPlan`) in columns by depth, the
streams on the right, each with the Spark query that runs it; an edge out of a
source carries the source's items per hour (its rate estimate), an edge into a
stream the items it stored per hour over the last day.

A larger one is summarised by source (100,000 subscriptions must not be 100,000
boxes): the ``TOP`` sources the most streams read, each with how many streams read
it (stateless, stateful) and the queries that run them, and one box for the rest.

Every text is escaped; each stream's box links to its page.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import quote
from xml.sax.saxutils import escape, quoteattr

from roses_app.algebra.plan.operators import Node, Source
from roses_app.algebra.planner.explain import describe
from roses_app.algebra.planner.globalplan import STATELESS_TYPES, DagNode, GlobalPlan
from roses_app.config.model import Config

SMALL_NODES = 80
TOP = 20
W, H, HGAP, VGAP, PAD = 210, 44, 80, 14, 16
FILL = {"source": "#e8f0fe", "stateless": "#ffffff", "stateful": "#fff3e0", "stream": "#e6f4ea"}
Rate = Callable[[str], float | None]  # items per hour, None: unknown


@dataclass(frozen=True)
class Box:
    id: str
    kind: str  # source | stateless | stateful | stream
    label: str
    detail: str
    title: str
    inputs: tuple[str, ...]
    href: str | None = None


def _short(text: str, width: int = 30) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _rate(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.1f}/h" if value < 10 else f"{value:,.0f}/h"


def plan_svg(config: Config, queries: Mapping[str, str], sources: Rate, streams: Rate) -> str:
    """The picture of ``config``'s global plan (see the module docstring)."""
    if len(config.streams) * 2 <= SMALL_NODES:
        plan = GlobalPlan.of([s.stream for s in config.streams.values()])
        if len(plan.nodes) + len(plan.roots) <= SMALL_NODES:
            return _whole(config, plan, queries, sources, streams)
    return _summary(config, queries, sources)


def plan_svg_soon(
    config: Config, queries: Mapping[str, str], sources: Rate, streams: Rate, wait: float
) -> str | None:
    """:func:`plan_svg`, or None when a large config's summary is not worked out
    within ``wait`` seconds (it goes on in a thread: the next page has it)."""
    if len(config.streams) * 2 > SMALL_NODES and not _summarised_within(config, wait):
        return None
    return plan_svg(config, queries, sources, streams)


def _boxes(config: Config, plan: GlobalPlan, queries: Mapping[str, str]) -> list[Box]:
    boxes = []
    for dag in plan.nodes.values():
        boxes.append(_node_box(dag))
    for name, root in plan.roots.items():
        stream = config.streams[name]
        query = queries.get(name, "not running")
        published = "published" if stream.published else "not published"
        boxes.append(
            Box(f"s:{name}", "stream", f"Stream {name}", f"query {query}, {published}",
                f"stream {name} [{stream.origin.file}:{stream.origin.line}]", (root,),
                f"/console/streams/{quote(name, safe='')}")
        )  # fmt: skip
    return boxes


def _node_box(dag: DagNode) -> Box:
    node = dag.node
    text = describe(node)
    where = f" [{node.origin.file}:{node.origin.line}]" if node.origin.line else ""
    shared = f"shared by {len(dag.streams)} streams" if len(dag.streams) > 1 else ""
    if isinstance(node, Source):
        return Box(dag.id, "source", f"Source {node.name}", shared, text + where, ())
    kind = "stateless" if dag.stateless else "stateful"
    head, _, rest = text.partition(" ")
    detail = ", ".join(part for part in (_short(rest, 26), shared) if part)
    return Box(dag.id, kind, head, detail, text + where, dag.inputs)


def _columns(boxes: list[Box]) -> list[list[Box]]:
    """Boxes in columns by depth (streams last), each column ordered by where its
    inputs are, to keep edges short."""
    depth: dict[str, int] = {}
    for box in boxes:  # inputs first (topological), streams after every node
        if box.kind != "stream":
            depth[box.id] = 1 + max((depth[i] for i in box.inputs), default=-1)
    last = max(depth.values(), default=-1) + 1
    columns: list[list[Box]] = [[] for _ in range(last + 1)]
    for box in boxes:
        columns[depth.get(box.id, last)].append(box)
    row: dict[str, float] = {}
    for n, column in enumerate(columns):
        if n == 0:
            column.sort(key=lambda b: b.label)
        else:
            column.sort(key=lambda b: sum(row[i] for i in b.inputs) / max(1, len(b.inputs)))
        for index, box in enumerate(column):
            row[box.id] = index
    return [c for c in columns if c]


def _whole(
    config: Config, plan: GlobalPlan, queries: Mapping[str, str], sources: Rate, streams: Rate
) -> str:
    columns = _columns(_boxes(config, plan, queries))
    at = {
        box.id: (PAD + x * (W + HGAP), PAD + 24 + y * (H + VGAP))
        for x, column in enumerate(columns)
        for y, box in enumerate(column)
    }
    width = PAD * 2 + len(columns) * (W + HGAP) - HGAP
    height = PAD * 2 + 24 + max(len(c) for c in columns) * (H + VGAP)
    boxes = {box.id: box for column in columns for box in column}
    caption = (
        f"The global plan: {len(config.streams)} stream(s), {len(plan.nodes)} node(s), "
        f"{len(plan.shared())} shared"
    )
    parts = [_open(width, height, caption)]
    for box in boxes.values():
        for source_id in box.inputs:
            origin = boxes[source_id]
            label = ""
            if origin.kind == "source":
                label = _rate(sources(origin.label.removeprefix("Source ")))
            elif box.kind == "stream":
                label = _rate(streams(box.label.removeprefix("Stream ")))
            parts.append(_edge(at[source_id], at[box.id], label, at_end=box.kind == "stream"))
    parts += [_box(box, *at[box.id]) for box in boxes.values()]
    parts.append("</svg>")
    return "\n".join(parts)


def _open(width: int, height: int, caption: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" id="plan-svg" role="img"'
        f' viewBox="0 0 {width} {height}" width="{width}" height="{height}"'
        f' font-family="sans-serif" font-size="12" aria-label={quoteattr(caption)}>'
        f"<title>{escape(caption)}</title>"
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7"'
        ' markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#888"/></marker></defs>'
        f'<text x="{PAD}" y="{PAD + 8}" font-weight="bold">{escape(caption)}</text>'
    )


def _edge(start: tuple[int, int], end: tuple[int, int], label: str, *, at_end: bool) -> str:
    """An arrow from the right of one box to the left of another; ``label`` above its
    start (``at_end``: above its end)."""
    x1, y1 = start[0] + W, start[1] + H // 2
    x2, y2 = end[0], end[1] + H // 2
    mid = (x1 + x2) // 2
    path = (
        f'<path d="M{x1},{y1} C{mid},{y1} {mid},{y2} {x2 - 2},{y2}" fill="none" stroke="#888"'
        ' stroke-width="1.2" marker-end="url(#arrow)"/>'
    )
    if not label:
        return path
    lx, ly = (x2 - 56, y2 - 5) if at_end else (x1 + 4, y1 - 5)
    return path + f'<text x="{lx}" y="{ly}" font-size="10" fill="#555">{escape(label)}</text>'


def _box(box: Box, x: int, y: int) -> str:
    stroke = "#2e7d32" if box.kind == "stream" else "#999"
    width = "2" if "shared" in box.detail else "1"
    body = (
        f"<g><title>{escape(box.title)}</title>"
        f'<rect x="{x}" y="{y}" width="{W}" height="{H}" rx="6" fill="{FILL[box.kind]}"'
        f' stroke="{stroke}" stroke-width="{width}"/>'
        f'<text x="{x + 8}" y="{y + 18}" font-weight="bold">{escape(_short(box.label))}</text>'
        f'<text x="{x + 8}" y="{y + 35}" fill="#444">{escape(_short(box.detail, 34))}</text></g>'
    )
    if box.href is None:
        return body
    return f"<a href={quoteattr(box.href)}>{body}</a>"


# -- summarised by source ----------------------------------------------------------------

_BY_SOURCE: dict[int, tuple[Config, dict[str, list[str]], dict[str, bool]]] = {}
_BY_SOURCE_LOCK = threading.Lock()
_WORKING: dict[int, threading.Thread] = {}  # the thread working out a config's summary
_WORKING_LOCK = threading.Lock()


def streams_by_source(config: Config) -> tuple[dict[str, list[str]], dict[str, bool]]:
    """source -> the streams that read it; stream -> stateless; once per config.
    (Memos by node identity: a node's hash is a digest to compute.)"""
    with _BY_SOURCE_LOCK:  # a second asker waits for the first one's answer
        return _streams_by_source(config)


def _summarised_within(config: Config, wait: float) -> bool:
    """Whether :func:`streams_by_source` of ``config`` is known within ``wait`` seconds
    (worked out in a thread of its own, one at a time)."""
    with _WORKING_LOCK:
        found = _BY_SOURCE.get(id(config))
        if found is not None and found[0] is config:
            return True
        working = _WORKING.get(id(config))
        if working is None or not working.is_alive():
            working = threading.Thread(target=streams_by_source, args=(config,),
                                       name="plan-summary", daemon=True)  # fmt: skip
            _WORKING.clear()
            _WORKING[id(config)] = working
            working.start()
    working.join(wait)
    return not working.is_alive()


def _streams_by_source(config: Config) -> tuple[dict[str, list[str]], dict[str, bool]]:
    found = _BY_SOURCE.get(id(config))
    if found is not None and found[0] is config:
        return found[1], found[2]
    memo: dict[int, tuple[frozenset[str], bool]] = {}
    readers: dict[str, list[str]] = {}
    kinds: dict[str, bool] = {}
    for name, stream in config.streams.items():
        sources, stateless = _read_by(stream.plan, memo)
        for source in sources:
            readers.setdefault(source, []).append(name)
        kinds[name] = stateless
    _BY_SOURCE.clear()  # one config at a time: the running one
    _BY_SOURCE[id(config)] = (config, readers, kinds)
    return readers, kinds


def _read_by(
    node: Node, memo: dict[int, tuple[frozenset[str], bool]]
) -> tuple[frozenset[str], bool]:
    """The sources below ``node``, and whether all of it is stateless."""
    found = memo.get(id(node))
    if found is None:
        if isinstance(node, Source):
            found = (frozenset((node.name,)), True)
        else:
            below = [_read_by(child, memo) for child in node.children()]
            sources = below[0][0] if len(below) == 1 else frozenset().union(*(b[0] for b in below))
            stateless = isinstance(node, STATELESS_TYPES) and all(b[1] for b in below)
            found = (sources, stateless)
        memo[id(node)] = found
    return found


def _summary(config: Config, queries: Mapping[str, str], sources: Rate) -> str:
    readers, kinds = streams_by_source(config)
    top = sorted(readers, key=lambda s: (-len(readers[s]), s))[:TOP]
    rest = [s for s in readers if s not in set(top)]
    rows = len(top) + (1 if rest else 0)
    width, height = PAD * 2 + 2 * W + HGAP + 120, PAD * 2 + 24 + rows * (H + VGAP)
    caption = (
        f"{len(config.streams):,} streams over {len(readers):,} sources: too many to draw, "
        f"summarised by source (the {len(top)} most read)"
    )
    parts = [_open(width, height, caption)]
    for n, source in enumerate(top):
        y = PAD + 24 + n * (H + VGAP)
        parts += list(_group(source, readers[source], kinds, queries, sources, y))
    if rest:
        y = PAD + 24 + len(top) * (H + VGAP)
        count = len({name for s in rest for name in readers[s]})
        box = Box("rest", "source", f"{len(rest):,} more sources", f"read by {count:,} streams",
                  "the other sources", ())  # fmt: skip
        parts.append(_box(box, PAD, y))
    parts.append("</svg>")
    return "\n".join(parts)


def _group(
    source: str,
    names: list[str],
    kinds: Mapping[str, bool],
    queries: Mapping[str, str],
    sources: Rate,
    y: int,
) -> Iterator[str]:
    light = sum(1 for name in names if kinds[name])
    ran = Counter(queries.get(name, "not running") for name in names)
    runs = ", ".join(f"{q} ×{n:,}" for q, n in ran.most_common(3))
    yield _edge((PAD, y), (PAD + W + HGAP, y), _rate(sources(source)), at_end=False)
    yield _box(Box(f"src:{source}", "source", f"Source {source}", "", source, ()), PAD, y)
    detail = f"{light:,} stateless, {len(names) - light:,} stateful"
    box = Box(f"g:{source}", "stream", f"{len(names):,} streams", detail,
              f"{len(names):,} streams read {source}; queries: {runs}", (),
              f"/console/streams?{_query(source)}")  # fmt: skip
    yield _box(box, PAD + W + HGAP, y)
    yield (
        f'<text x="{PAD + 2 * W + HGAP + 8}" y="{y + 26}" font-size="11" fill="#555">'
        f"{escape(_short(runs, 20))}</text>"
    )


def _query(source: str) -> str:
    return "source=" + quote(source, safe="")
