"""The query editor: a page, its live preview, and applying a stream to feeds.yaml.

The page is a plain form (POST ``/console/apply``), so that it works without its
script; the script (``static/console.js``) sends the text to ``POST
/console/preview`` (JSON, with the CSRF header) 300 ms after the last keystroke and
shows the problems (line, column) or the matching items.  Kinds: ``where`` (a
filter's observer), ``by`` (a split's expression), ``map`` (an accessor), each over
the source chosen, or ``stream`` (the stream's whole YAML, the mapping under its name).
Removing a stream asks first, on a page saying what happens to its feed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from roses_app.config.fields import NAME_MAX, NAME_RE
from roses_app.config.model import Config
from roses_app.errors import ConfigError, RosesError
from roses_app.publish.console.deps import KINDS, PreviewAsk
from roses_app.publish.console.layout import esc, notice
from roses_app.publish.console.streampages import definition

DEFAULT_LIMIT = 10_000
MAX_LIMIT = 100_000
MAX_TEXT = 64 * 1024
SOURCES_LISTED = 1000  # names offered in the source field's list (any may be typed)
OPERATORS = {"where": ("filter", "where"), "by": ("split", "by"), "map": ("map", "xpath")}
KIND_LABELS = {"where": "where (filter)", "by": "by (split)", "map": "map (xpath)",
               "stream": "whole stream (YAML)"}  # fmt: skip


class EditorError(RosesError, ValueError):
    """What the editor was sent cannot be used (said to the user as is)."""


def check_name(name: str) -> str:
    if not name or len(name) > NAME_MAX or not NAME_RE.fullmatch(name):
        raise EditorError(
            f"a stream's name is 1 to {NAME_MAX} letters, digits, _ or -, got {name[:40]!r}"
        )
    return name


def preview_ask(fields: Mapping[str, Any]) -> PreviewAsk:
    """The preview a request asks (an EditorError: what is wrong with it)."""
    text, kind = fields.get("text"), fields.get("kind", "where")
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise EditorError(f"text must be a string of at most {MAX_TEXT:,} characters")
    if kind not in KINDS:
        raise EditorError(f"kind must be one of {', '.join(KINDS)}")
    source = fields.get("source") or None
    if source is not None and not isinstance(source, str):
        raise EditorError("source must be a name")
    if kind != "stream" and source is None:
        raise EditorError(f"choose the source that {kind} reads (from:)")
    limit = fields.get("limit", DEFAULT_LIMIT)
    try:
        limit = int(limit)
    except (TypeError, ValueError):
        raise EditorError("limit must be a whole number") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise EditorError(f"limit must be 1 to {MAX_LIMIT:,}")
    name = fields.get("name") or "preview"
    return PreviewAsk(text, kind, source, check_name(str(name)), limit)


def stream_yaml(fields: Mapping[str, str]) -> str:
    """The YAML of the stream the editor's fields describe (the mapping under its
    name in feeds.yaml)."""
    ask = preview_ask({**fields, "limit": DEFAULT_LIMIT})
    if ask.kind == "stream":
        if not ask.text.strip():
            raise EditorError("the stream's YAML is empty")
        return ask.text
    operator, key = OPERATORS[ask.kind]
    body: dict[str, Any] = {operator: {"from": ask.source, key: ask.text}}
    if fields.get("publish"):
        body["publish"] = True
    return yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=4096)


def problems_of(exc: BaseException) -> list[str]:
    """A refusal's problems as lines (file:line: message)."""
    if isinstance(exc, ConfigError):
        return [str(p) for p in exc.problems]
    return [str(exc)]


def in_subscriptions(config: Config, name: str) -> bool:
    """Whether a stream is a line of a subscriptions file (JSON Lines), not feeds.yaml's."""
    return Path(config.streams[name].origin.file).suffix not in (".yaml", ".yml")


def stream_text(config: Config, name: str) -> str:
    """The YAML under a stream's name in its file, unindented (its editor text); a
    subscription's line as the same YAML."""
    stream = config.streams[name]
    lines = definition(config, stream).split("\n")
    if in_subscriptions(config, name):
        try:
            line = json.loads(lines[0])
            body: dict[str, Any] = {"filter": {"from": line["from"], "where": line["where"]}}
        except (ValueError, KeyError, TypeError):
            return lines[0] + "\n"
        if line.get("publish"):
            body["publish"] = line["publish"]
        return yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=4096)
    _, _, rest = lines[0].partition(":")
    rest = rest.split(" #", 1)[0].strip()
    below = lines[1:]
    indent = min((len(x) - len(x.lstrip()) for x in below if x.strip()), default=0)
    body_lines = [x[indent:] for x in below]
    return "\n".join([rest, *body_lines] if rest else body_lines).strip() + "\n"


def editor_body(
    config: Config, params: Mapping[str, str], csrf: str, problems: list[str] | None = None
) -> list[str]:
    """The editor page's body, for a new stream or ``params["stream"]``."""
    name = params.get("stream", "") or params.get("name", "")
    existing = name in config.streams
    lines = [
        '<form method="post" action="/console/apply" id="editor-form" class="editor">',
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">',
        *_inputs(config, params, name, existing),
        '<div class="actions"><button type="submit" name="action" value="apply"'
        ' id="apply-button">Apply to feeds.yaml</button>',
    ]
    if existing:
        lines.append(
            '<button type="submit" name="action" value="remove" id="remove-button"'
            ' class="danger">Remove this stream…</button>'
        )
    lines.append("</div></form>")
    if existing and in_subscriptions(config, name):
        origin = config.streams[name].origin
        said = (
            f"{name} is line {origin.line} of the subscriptions file {origin.file}: the "
            "editor previews it; change it in that file (feeds.yaml refuses a name taken twice)."
        )
        lines.insert(0, notice(said))
    if problems:
        lines.append('<h2>Not applied</h2><ul id="apply-problems" class="problems">')
        lines += [f"<li>{esc(p)}</li>" for p in problems]
        lines.append("</ul>")
    lines += [
        '<section id="preview" class="preview" aria-live="polite"><h2>Preview</h2>',
        '<p id="preview-status" class="meta">The preview shows here as you type.</p>',
        '<ul id="problems" class="problems"></ul>',
        '<pre id="preview-text" class="marked" hidden></pre>',
        '<div id="preview-counts"></div><ol id="preview-items" class="items"></ol></section>',
    ]
    return lines


def _inputs(config: Config, params: Mapping[str, str], name: str, existing: bool) -> list[str]:
    kind = params.get("kind") or ("stream" if existing else "where")
    text = params.get("text")
    if text is None:
        text = stream_text(config, name) if existing else ""
    kinds = "".join(
        f'<option value="{k}"{" selected" if k == kind else ""}>{esc(label)}</option>'
        for k, label in KIND_LABELS.items()
    )
    names = [*config.sources, *config.streams][:SOURCES_LISTED]
    options = "".join(f'<option value="{esc(n)}">' for n in names)
    publish = " checked" if params.get("publish", "on" if not existing else "") else ""
    limit = params.get("limit", str(DEFAULT_LIMIT))
    return [
        '<div class="fields">',
        f'<label>Stream <input name="name" id="editor-name" value="{esc(name)}" required'
        f' maxlength="{NAME_MAX}" pattern="[A-Za-z0-9_-]+"></label>',
        f'<label>Kind <select name="kind" id="editor-kind">{kinds}</select></label>',
        f'<label>from: <input name="source" id="editor-source" list="editor-sources"'
        f' value="{esc(params.get("source", ""))}"></label>'
        f'<datalist id="editor-sources">{options}</datalist>',
        f'<label>Items to try <input name="limit" id="editor-limit" type="number" min="1"'
        f' max="{MAX_LIMIT}" value="{esc(limit)}"></label>',
        f'<label><input type="checkbox" name="publish" id="editor-publish"{publish}>'
        " publish (where / by / map)</label></div>",
        f'<textarea name="text" id="editor-text" rows="12" spellcheck="false"'
        f' aria-label="expression or stream YAML">{esc(text)}</textarea>',
    ]


def confirm_body(config: Config, name: str, csrf: str) -> list[str]:
    """The page asking whether to remove a stream, saying what follows."""
    stream = config.streams[name]
    origin = stream.origin
    quoted = quote(name, safe="")
    feed = (
        f"Its feeds (/feeds/{esc(quoted)}.rss, .atom, .json, .html) stop changing at once and "
        "answer 404 once the config is reloaded (at once: the console reloads it); readers "
        "keep what they fetched, WebSub subscribers get no more updates, and its published "
        "items are forgotten (a stream of that name added later starts empty)."
        if stream.published
        else "It is not published, so no feed goes away."
    )
    readers = [n for n, s in config.streams.items() if n != name and _reads(s.plan, name)]
    lines = [
        f"<p>Remove the stream <strong>{esc(name)}</strong>, written at "
        f"{esc(origin.file)}:{origin.line}? The file is saved first (a backup beside it).</p>",
        f"<p>{feed}</p>",
    ]
    if readers:
        lines.append(notice(f"Streams that read it by name ({', '.join(readers[:10])}) must be "
                            "changed first: the removal would be refused.", "error"))  # fmt: skip
    lines += [
        '<form method="post" action="/console/apply" id="confirm-form">',
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">',
        f'<input type="hidden" name="name" value="{esc(name)}">',
        '<button type="submit" name="action" value="confirm-remove" id="confirm-remove-button"'
        ' class="danger">Remove it</button> ',
        f'<a href="/console/editor?stream={esc(quoted)}" id="cancel-remove">Keep it</a></form>',
    ]
    return lines


def _reads(plan: Any, name: str) -> bool:
    return any(getattr(n.origin, "stream", "") == name for n in plan.walk())


def reload_text(reloaded: Any) -> str:
    """A reload's result in one line (its ``summary()`` when it has one)."""
    summary = getattr(reloaded, "summary", None)
    return str(summary()) if callable(summary) else str(reloaded)


def outcome_lines(applied: Any, reloaded: Any) -> list[str]:
    """What an apply did: the file, its backup, the reload's result."""
    lines = [f"<p>Written to {esc(str(getattr(applied, 'path', '')))} "
             f"(backup: {esc(str(getattr(applied, 'backup', '')))}).</p>"]  # fmt: skip
    if reloaded is None:
        lines.append(notice("This ROSES cannot reload: the change runs from its next start."))
        return lines
    failed = getattr(reloaded, "error", None)
    lines.append(notice(reload_text(reloaded), "error" if failed else "info"))
    lines.append('<dl class="facts" id="reload-result">')
    lines += [f"<dt>{esc(k)}</dt><dd>{esc(_shown(v))}</dd>" for k, v in _fields(reloaded) if v]
    lines.append("</dl>")
    return lines


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ", ".join(map(str, value))
    return f"{value:.1f} s" if isinstance(value, float) else str(value)


def _fields(value: Any) -> list[tuple[str, Any]]:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    return [("result", value)]
