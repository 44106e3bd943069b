"""YAML with line numbers: every mapping, sequence and scalar remembers where it was written.

PyYAML's ``safe_load`` forgets positions and silently keeps the last of two equal keys.
Here the document is composed into PyYAML's node graph and turned into a tree of
:class:`Marked` values instead: mappings (``dict[str, Marked]`` plus the line of every
key), sequences (``list[Marked]``) and scalars (the Python value the YAML 1.1 safe
resolver gives: str, int, float, bool, None, dates).  Lines are 1-based.

Mapping keys are kept as their source text (``yes:`` is the key ``"yes"``, ``8080:`` the
key ``"8080"``), since feeds.yaml keys are names.  Duplicate keys, non-scalar keys,
recursive aliases, unknown tags and syntax errors are reported, not raised, so that the
loader can go on and report every other problem of the file too.  Merge keys
(``<<: *anchor``) work as in YAML 1.1: the mapping's own keys win, silently.

An alias stays one shared value here, but whoever walks the values (the stream
planner builds one plan node per occurrence) meets it once per occurrence, so a
"billion laughs" file of a few hundred bytes would stand for billions of values.
The file is refused while it is composed, at the line of the alias that goes beyond
:mod:`roses_app.config.limits` (aliases, values they stand for, nesting), before
anything is expanded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

try:
    from yaml._yaml import CParser

    HAVE_LIBYAML = True
except ImportError:  # PyYAML built without libyaml: the pure-Python loader only
    HAVE_LIBYAML = False

from roses_app.config.limits import MAX_YAML_ALIAS_VALUES, MAX_YAML_ALIASES, MAX_YAML_DEPTH

MAP_TAG = "tag:yaml.org,2002:map"
SEQ_TAG = "tag:yaml.org,2002:seq"
MERGE_TAG = "tag:yaml.org,2002:merge"
STR_TAG = "tag:yaml.org,2002:str"

Report = Callable[[int, str], None]
NO_KEYS: Mapping[str, int] = MappingProxyType({})


def _no_keys() -> Mapping[str, int]:
    return NO_KEYS


@dataclass(eq=False, slots=True)
class Marked:
    """One YAML value and the 1-based line where it starts.

    ``value`` is ``dict[str, Marked]`` for a mapping (then ``key_lines`` gives each
    key's own line), ``list[Marked]`` for a sequence, else a plain Python scalar (and
    ``text`` the scalar as written).
    """

    value: Any
    line: int
    # (a value that is not a mapping shares one empty mapping: a config of a hundred
    # thousand streams has a million values)
    key_lines: Mapping[str, int] = field(default_factory=_no_keys)
    # a scalar's text as written (``2024`` for the int 2024); None for mappings and lists
    text: str | None = None

    @property
    def is_map(self) -> bool:
        return isinstance(self.value, dict)

    @property
    def is_seq(self) -> bool:
        return isinstance(self.value, list)

    @property
    def is_scalar(self) -> bool:
        return not (self.is_map or self.is_seq)

    def key_line(self, key: str) -> int:
        """The line of ``key`` in this mapping (the mapping's own line if unknown)."""
        return self.key_lines.get(key, self.line)

    def plain(self) -> Any:
        """The value without marks (dicts, lists, scalars), as ``yaml.safe_load`` gives."""
        if self.is_map:
            return {k: v.plain() for k, v in self.value.items()}
        if self.is_seq:
            return [v.plain() for v in self.value]
        return self.value


def describe(value: Marked | None) -> str:
    """What kind of YAML value this is, for messages: ``a string ('abc')``, ``a list``..."""
    if value is None:
        return "nothing"
    v = value.value
    if value.is_map:
        return "a mapping"
    if value.is_seq:
        return "a list"
    if v is None:
        return "an empty value"
    if isinstance(v, bool):
        return f"a boolean ({'true' if v else 'false'})"
    if isinstance(v, int | float):
        return f"a number ({v!r})"
    if isinstance(v, str):
        shown = v if len(v) <= 40 else v[:37] + "..."
        return f"a string ({shown!r})"
    return f"a {type(v).__name__} ({v})"


def syntax_problem(exc: yaml.YAMLError, text: str) -> tuple[int, str]:
    """The line and an actionable message for a PyYAML scanner/parser/reader error."""
    if isinstance(exc, yaml.MarkedYAMLError):
        line = exc.problem_mark.line + 1 if exc.problem_mark is not None else 1
        if isinstance(exc, yaml.composer.ComposerError) and "another document" in str(exc.problem):
            return line, "the config file must hold one YAML document, but a second one starts here"
        message = f"YAML syntax error: {exc.problem or exc.context or 'invalid YAML'}"
        if exc.context and exc.problem:
            context = exc.context
            if exc.context_mark is not None and exc.context_mark.line + 1 != line:
                context += f" started at line {exc.context_mark.line + 1}"
            message += f" ({context})"
        if "\t" in _line_text(text, line) and "tab" not in message.lower():
            message += "; note: YAML does not allow tabs for indentation"
        return line, message
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        return line, f"YAML cannot read this file: {exc.reason} (character #x{exc.character:04x})"
    return 1, f"YAML error: {exc}"


def _line_text(text: str, line: int) -> str:
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


class LimitError(yaml.YAMLError):
    """The file goes beyond a limit of :mod:`roses_app.config.limits` at ``line``."""

    def __init__(self, mark: object, message: str) -> None:  # a pure-Python or C Mark
        super().__init__(message)
        self.line = int(getattr(mark, "line", 0)) + 1
        self.message = message


class _Limits(Composer):
    """PyYAML's composer, counting while it composes: the aliases, the values they
    stand for (each composed node's size as if expanded, so nested aliases multiply)
    and the nesting depth; beyond a limit it raises :class:`LimitError`."""

    if TYPE_CHECKING:  # the parser's, from the loader class this is mixed into

        def check_event(self, *choices: Any) -> Any: ...
        def peek_event(self) -> Any: ...
        def dispose(self) -> None: ...
        def construct_object(self, node: yaml.Node, deep: bool = False) -> Any: ...

    def __init__(self) -> None:
        Composer.__init__(self)  # not super(): the loaders call each base's own
        self.aliases = 0
        self.alias_values = 0
        self.depth = 0
        # id(node) -> its number of values, aliases expanded (the nodes stay alive in
        # the document, so their ids are not reused)
        self.sizes: dict[int, int] = {}

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None:  # an undefined alias is PyYAML's error
                self._count_alias(event, target)
            return super().compose_node(parent, index)
        self.depth += 1
        try:
            if self.depth > MAX_YAML_DEPTH:
                raise LimitError(
                    self.peek_event().start_mark,
                    f"mappings and lists are nested more than {MAX_YAML_DEPTH} deep here "
                    "(the limit of feeds.yaml): write the plan with fewer levels",
                )
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if node is not None:
            self.sizes[id(node)] = self._size(node)
        return node

    def _size(self, node: yaml.Node) -> int:
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            return 1
        # a child not sized yet is a recursive alias (reported later): count it once
        return 1 + sum(self.sizes.get(id(child), 1) for child in children)

    def _count_alias(self, alias: yaml.AliasEvent, target: yaml.Node) -> None:
        mark = alias.start_mark
        self.aliases += 1
        if self.aliases > MAX_YAML_ALIASES:
            raise LimitError(
                mark,
                f"more than {MAX_YAML_ALIASES:,} YAML aliases (the limit of feeds.yaml): "
                "write the values out, or use stream names to share plans",
            )
        size = self.sizes.get(id(target), 1)
        self.alias_values += size
        if self.alias_values > MAX_YAML_ALIAS_VALUES:
            raise LimitError(
                mark,
                f"with the alias *{alias.anchor} (itself {size:,} values), the aliases of "
                f"this file stand for more than {MAX_YAML_ALIAS_VALUES:,} values, the limit "
                "of feeds.yaml (an alias bomb?): nest fewer aliases; stream names share "
                "plans without copying them",
            )


class _LimitedLoader(_Limits, yaml.SafeLoader):
    """The pure-Python safe loader with the limits: its messages are the ones reported."""

    def __init__(self, text: str) -> None:
        yaml.SafeLoader.__init__(self, text)  # checks for unprintable characters
        _Limits.__init__(self)


if HAVE_LIBYAML:

    class _FastLimitedLoader(_Limits, CParser, SafeConstructor, Resolver):
        """The same, with libyaml scanning and parsing (five times faster on a config
        of ten thousand streams); composing, so the limits and marks, stay in Python."""

        def __init__(self, text: str) -> None:
            yaml.reader.Reader(text)  # PyYAML's check for unprintable characters
            CParser.__init__(self, text)
            _Limits.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    class _ComposingLoader(CParser, SafeConstructor, Resolver):
        """libyaml composing too, without counting: for the files with no alias (the
        converter checks the nesting), which the limits would let through anyway."""

        def __init__(self, text: str) -> None:
            yaml.reader.Reader(text)  # PyYAML's check for unprintable characters
            CParser.__init__(self, text)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)


class _NotPlain(Exception):
    """The file has an alias or nests beyond the limit: the composer that counts
    (:class:`_Limits`) reads it again, to report it at its line."""


def load(text: str, report: Report) -> Marked | None:
    """Parse one YAML document into a :class:`Marked` tree.

    Problems go to ``report(line, message)``.  Returns None when the text is not YAML
    at all (syntax error), is empty, or goes beyond a limit; otherwise the tree,
    possibly with problems reported along the way.
    """
    if HAVE_LIBYAML:
        # most files have no alias: libyaml composes them (a config of ten thousand
        # streams: 0.7-1.0 s instead of 1.2-1.6 s); the others go the way that counts
        held: list[tuple[int, str]] = []
        try:
            tree = _load_plain(text, lambda line, message: held.append((line, message)))
        except (_NotPlain, yaml.YAMLError):
            pass  # a syntax error too: the loaders that count give PyYAML's message
        else:
            for line, message in held:
                report(line, message)
            return tree
    return _load_counted(text, report)


def _load_plain(text: str, report: Report) -> Marked | None:
    """:func:`load` of a file with no alias; raises :class:`_NotPlain` on an alias
    or on nesting beyond the limit (libyaml itself stops at 1,000 levels)."""
    loader = _ComposingLoader(text)
    root = _composed(loader)
    if root is None:
        return None
    return _Converter(loader, report, plain=True).convert(root, "")


def _composed(loader: Any) -> yaml.Node | None:
    """The document's root node (None if empty), the loader's parser state freed."""
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def _load_counted(text: str, report: Report) -> Marked | None:
    """:func:`load` with the composer that counts aliases and nesting."""
    loaders: list[Callable[[str], _Limits]] = [_LimitedLoader]
    if HAVE_LIBYAML:
        loaders.insert(0, _FastLimitedLoader)
    for make in loaders:
        try:
            loader = make(text)
            root = _composed(loader)
        except LimitError as exc:
            report(exc.line, exc.message)
            return None
        except yaml.YAMLError as exc:
            if make is _LimitedLoader:  # libyaml's message: PyYAML's is the one users see
                report(*syntax_problem(exc, text))
                return None
            continue
        break
    if root is None:
        return None
    return _Converter(loader, report).convert(root, "")


class _Converter:
    """Composed nodes to :class:`Marked` values.  ``plain``: the nodes come from
    :class:`_ComposingLoader`; a node met twice (an alias) or nested deeper than
    ``MAX_YAML_DEPTH`` raises :class:`_NotPlain`."""

    def __init__(
        self, loader: _Limits | SafeConstructor, report: Report, *, plain: bool = False
    ) -> None:
        self.loader = loader
        self.report = report
        self.done: dict[int, Marked] = {}
        self.active: set[int] = set()
        self.plain = plain
        self.keys: set[int] = set()  # plain: the key nodes met (an alias may be a key)

    def convert(self, node: yaml.Node, path: str) -> Marked:
        line = node.start_mark.line + 1
        key = id(node)
        if self.plain and (
            key in self.done
            or key in self.active
            or key in self.keys
            or len(self.active) >= MAX_YAML_DEPTH
        ):
            raise _NotPlain(line)  # met before (an alias), or one level too deep
        if key in self.done:  # an alias: same node, same value
            return self.done[key]
        if key in self.active:
            self.report(line, f"recursive YAML alias in {path or 'the document'}")
            return Marked(None, line)
        self.active.add(key)
        try:
            if isinstance(node, yaml.MappingNode):
                result = self._mapping(node, path, line)
            elif isinstance(node, yaml.SequenceNode):
                result = self._sequence(node, path, line)
            else:
                result = self._scalar(node, path, line)
        finally:
            self.active.discard(key)
        self.done[key] = result
        return result

    def _scalar(self, node: yaml.Node, path: str, line: int) -> Marked:
        if node.tag == STR_TAG:  # the safe constructor's string is the scalar's text
            return Marked(node.value, line, text=node.value)  # (sooner: most values)
        problem = None
        try:
            value = self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc)
        except (ValueError, KeyError, AttributeError):
            # PyYAML's constructors on a value its tag does not fit: written (!!int x)
            # or resolved (2024-13-45 looks like a date)
            kind = node.tag.rsplit(":", 1)[-1]
            problem = f"{node.value!r} is not a valid {kind}; put it in quotes to keep it as text"
        if problem is not None:
            self.report(line, f"cannot read the value of {path or 'the document'}: {problem}")
            value = None
        return Marked(value, line, text=str(node.value))

    def _sequence(self, node: yaml.SequenceNode, path: str, line: int) -> Marked:
        if node.tag != SEQ_TAG:
            self.report(line, f"unsupported YAML tag {node.tag!r} on {path or 'the document'}")
        items = [self.convert(child, f"{path}[{i}]") for i, child in enumerate(node.value)]
        return Marked(items, line)

    def _mapping(self, node: yaml.MappingNode, path: str, line: int) -> Marked:
        if node.tag != MAP_TAG:
            self.report(line, f"unsupported YAML tag {node.tag!r} on {path or 'the document'}")
        where = f" in {path}" if path else " at the top level"
        values: dict[str, Marked] = {}
        lines: dict[str, int] = {}
        merged: list[Marked] = []
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if key_node.tag == MERGE_TAG:
                merged.append(self.convert(value_node, path))
                continue
            if self.plain and (
                not isinstance(key_node, yaml.ScalarNode)
                or id(key_node) in self.keys
                or id(key_node) in self.done
            ):
                raise _NotPlain(key_line)  # a key that is a list or mapping may nest deep
            if not isinstance(key_node, yaml.ScalarNode):
                self.report(key_line, f"a key{where} must be a plain name, not a list or mapping")
                continue
            self.keys.add(id(key_node))
            key = str(key_node.value)
            child_path = f"{path}.{key}" if path else key
            if key in lines:
                self.report(
                    key_line,
                    f"duplicate key {key!r}{where} (first at line {lines[key]}); "
                    "YAML would silently keep only the last one",
                )
            values[key] = self.convert(value_node, child_path)
            lines[key] = key_line
        for merge in merged:
            sources = merge.value if merge.is_seq else [merge]
            for source in sources:
                if not source.is_map:
                    self.report(
                        source.line, f"'<<' merge{where} needs a mapping or a list of mappings"
                    )
                    continue
                for key, value in source.value.items():
                    if key not in values:
                        values[key] = value
                        lines[key] = source.key_line(key)
        return Marked(values, line, lines)
