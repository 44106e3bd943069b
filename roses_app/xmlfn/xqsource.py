"""XQuery source handling: split a user's main module into prolog and body, and wrap it.

A mutator is written as an ordinary XQuery main module over external variables
(``$i``; ``$i1``/``$i2``; ``$items``).  To run it over a whole batch in one Saxon call
it is rewritten into a wrapper module that keeps the user's prolog and body *at the
same line numbers* (nothing with a newline is inserted before or inside the user's
text), so Saxon's line numbers are the user's:

* the user's declarations of the bound external variables are blanked out (their
  ``as TYPE`` is kept for the binding), as are ``declare option output:...`` (the
  wrapper owns serialization) and a leading ``return`` of the body (the seed writes
  mutators as ``return <item>...``);
* after the last prolog statement, on the same line, the wrapper declares the batch
  variable and starts a loop over the batch's units; each unit binds the variables
  and evaluates the body inside ``try { } catch * { }``, so that one failing item
  gives an error marker instead of failing the batch;
* after the body, on a new line, the wrapper checks the result (``treat as``
  one ``<item>`` element or the empty sequence) and ends each unit's output with a
  processing instruction that separates the units in the serialized result.

When the prolog itself refers to a bound variable (a function or a global variable
using ``$i``), the variables must be global: the wrapper then declares them as
globals over a batch of one unit, and the caller runs one call per item.

To find the prolog's end, the text is *masked* (:mod:`roses_app.xmlfn.xqmask`),
leaving only the code, in which statements end at a ``;`` outside brackets.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from roses_app.xmlfn.xqmask import mask

ROSES_NS = "urn:x-roses"
BATCH_VAR = f"$Q{{{ROSES_NS}}}batch"
# Separates the output of two units; a random name no item can contain by chance.
SEPARATOR_NAME = "roses-" + uuid.uuid4().hex
SEPARATOR = f"<?{SEPARATOR_NAME}?>"
ERROR_TAG = "roses:error"

# Bindings of each kind of function: variable -> path from the unit element.
BINDINGS: dict[str, tuple[tuple[str, str], ...]] = {
    "map": (("i", "*"),),
    "combine": (("i1", "*[1]"), ("i2", "*[2]")),
    "reduce": (("items", "*"),),
}


_PROLOG_START = re.compile(
    r"(?:xquery\s+(?:version|encoding)\b|module\s+namespace\b|import\s+(?:module|schema)\b"
    r"|declare\s*%|declare\s+(?:default|boundary-space|base-uri|construction|ordering"
    r"|copy-namespaces|decimal-format|namespace|variable|function|option|context|updating"
    r"|revalidation)\b)"
)
_EXTERNAL = re.compile(
    r"declare\s+(?:%\S+\s+)*variable\s+\$\s*([\w.\-]+)\s*(?:as\s+(.*?))?\s*external\b", re.S
)
_VALUE_DECL = re.compile(r"declare\s+(?:%\S+\s+)*variable\s+\$\s*([\w.\-]+)\b")
_OUTPUT_OPTION = re.compile(r"declare\s+option\s+(?:output:|Q\{http://www\.w3\.org/2010/xslt)")
_RETURN = re.compile(r"\s*return\b")


@dataclass(frozen=True)
class Statement:
    start: int
    end: int  # after the ';'
    kind: str  # "library", "external", "variable", "output", "other"
    name: str = ""  # the variable of "external" and "variable"
    type: str = ""  # the declared type of "external"
    default: bool = False  # "external" with a default value (``external := ...``)


@dataclass(frozen=True)
class Module:
    """A user's main module cut into prolog statements and body."""

    text: str
    masked: str
    statements: tuple[Statement, ...]
    body_start: int

    def line_of(self, offset: int) -> int:
        return self.text.count("\n", 0, offset) + 1


def _statement_end(masked: str, pos: int) -> int:
    depth = 0
    for k in range(pos, len(masked)):
        c = masked[k]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == ";" and depth <= 0:
            return k + 1
    return -1


def split_module(text: str) -> Module:
    """Cut ``text`` into prolog statements and body (a best effort on broken text)."""
    masked = mask(text)
    statements: list[Statement] = []
    pos = 0
    while True:
        while pos < len(masked) and masked[pos].isspace():
            pos += 1
        match = _PROLOG_START.match(masked, pos)
        if not match:
            break
        end = _statement_end(masked, pos)
        if end < 0:
            break
        statements.append(_classify(text, masked, pos, end))
        pos = end
    return Module(text, masked, tuple(statements), pos)


def _classify(text: str, masked: str, start: int, end: int) -> Statement:
    code = masked[start:end]
    if code.startswith("module"):
        return Statement(start, end, "library")
    external = _EXTERNAL.match(code)
    if external:
        declared = (text[start + external.start(2) : start + external.end(2)]).strip()
        if external.group(2) is None:
            declared = ""
        default = ":=" in code[external.end() :]
        name = external.group(1)
        return Statement(start, end, "external", name, " ".join(declared.split()), default)
    value = _VALUE_DECL.match(code)
    if value:
        return Statement(start, end, "variable", value.group(1))
    if _OUTPUT_OPTION.match(code):
        return Statement(start, end, "output")
    return Statement(start, end, "other")


def _blanked(text: str, start: int, end: int) -> str:
    return "".join(c if c in "\r\n" else " " for c in text[start:end])


@dataclass(frozen=True)
class Wrapper:
    """The rewritten module and what the caller must know to run it."""

    text: str
    per_item: bool  # the variables are globals: run one unit per call
    user_lines: int  # lines of the user's text; a line past it is the wrapper's own
    extra: tuple[str, ...]  # extra external variables the caller must bind (strings)
    insert_line: int = 1  # where the header was inserted (line, 1-based column) ...
    insert_column: int = 1
    inserted: int = 0  # ... and how many characters it has

    def user_position(self, line: int, column: int) -> tuple[int, int]:
        """A (line, column) of the wrapper as a position in the user's text."""
        if line == self.insert_line and column >= self.insert_column:
            column = max(self.insert_column, column - self.inserted)
        return line, column


def _refers_to(masked: str, names: tuple[str, ...]) -> bool:
    pattern = r"\$\s*(?:" + "|".join(re.escape(n) for n in names) + r")(?![\w.\-])"
    return re.search(pattern, masked) is not None


def build_wrapper(
    module: Module, kind: str, extra: tuple[str, ...] = (), *, safe: bool = False
) -> Wrapper:
    """The batch wrapper of ``module`` for a ``kind`` function (map, combine, reduce).

    The result check is ``treat as element(item)?`` on the body's output as Saxon
    writes it, which costs nothing; but when a body returns two items, the first is
    already written and the error cannot be caught: the whole call fails.  The
    ``safe`` wrapper, which the caller then runs on the same batch, builds each result
    in memory first and checks it (a little slower), so that every error is caught.
    """
    bound = {name for name, _ in BINDINGS[kind]}
    prolog = _prolog(module, bound, extra)
    text = module.text
    body_start = module.body_start
    returned = _RETURN.match(module.masked, body_start)
    per_item = _refers_to("\n".join(prolog.kept_code), tuple(sorted(bound)))
    header, loop = _header_and_loop(kind, prolog, extra, per_item, safe)
    body = text[body_start:]
    if returned:
        cut = returned.end() - body_start
        body = _blanked(body, 0, cut) + body[cut:]
    prefix = prolog.text + text[prolog.end : body_start]
    inserted = " ".join(header) + " " + loop
    line = prefix.count("\n") + 1
    column = len(prefix) - (prefix.rfind("\n") + 1) + 1
    return Wrapper(
        prefix + inserted + body + _footer(safe),
        per_item,
        text.count("\n") + 1,
        tuple(extra),
        line,
        column,
        len(inserted),
    )


@dataclass(frozen=True)
class _Prolog:
    """The user's prolog as the wrapper keeps it: its text up to ``end`` with the bound
    variables' declarations and the output options blanked, the bound variables'
    declared types, the extra variables it declares, and the code it keeps."""

    text: str
    end: int
    types: dict[str, str]
    declared_extra: frozenset[str]
    kept_code: tuple[str, ...]


def _prolog(module: Module, bound: set[str], extra: tuple[str, ...]) -> _Prolog:
    text = module.text
    parts: list[str] = []
    types: dict[str, str] = {}
    declared_extra: set[str] = set()
    kept_code: list[str] = []
    pos = 0
    for st in module.statements:
        parts.append(text[pos : st.start])
        if st.kind == "external" and st.name in bound:
            types[st.name] = st.type
            parts.append(_blanked(text, st.start, st.end))
        elif st.kind == "output":
            parts.append(_blanked(text, st.start, st.end))
        else:
            if st.kind == "external" and st.name in extra:
                declared_extra.add(st.name)
            parts.append(text[st.start : st.end])
            kept_code.append(module.masked[st.start : st.end])
        pos = st.end
    return _Prolog("".join(parts), pos, types, frozenset(declared_extra), tuple(kept_code))


def _header_and_loop(
    kind: str, prolog: _Prolog, extra: tuple[str, ...], per_item: bool, safe: bool
) -> tuple[list[str], str]:
    """The wrapper's declarations (on the line of the prolog's end) and the start of
    its loop over the batch's units, which binds the variables."""
    bindings = BINDINGS[kind]
    ser = "Q{http://www.w3.org/2010/xslt-xquery-serialization}"
    header = [
        f"declare variable {BATCH_VAR} external;",
        f'declare option {ser}method "xml";',
        f'declare option {ser}omit-xml-declaration "yes";',
        f'declare option {ser}indent "no";',
    ]
    header += [f"declare variable ${n} external;" for n in extra if n not in prolog.declared_extra]

    def typed(name: str) -> str:
        return f" as {prolog.types[name]}" if prolog.types.get(name) else ""

    unit = f"$Q{{{ROSES_NS}}}u"
    result = f"$Q{{{ROSES_NS}}}r"
    context = "$i ! " if kind == "map" else ""
    start = f"let {result} := {context}((" if safe else f"return {context}(("
    if per_item:
        header += [
            f"declare variable ${name}{typed(name)} := {BATCH_VAR}/*/*/{path};"
            for name, path in bindings
        ]
        return header, f"ordered {{ (try {{ {start if safe else start.removeprefix('return ')}"
    lets = " ".join(f"let ${name}{typed(name)} := {unit}/{path}" for name, path in bindings)
    return header, f"ordered {{ for {unit} in {BATCH_VAR}/*/* return (try {{ {lets} {start}"


def _footer(safe: bool) -> str:
    """The wrapper's end, on a line of its own: the result check, the error marker of
    a failing unit, and the separator after each unit's output."""
    result = f"$Q{{{ROSES_NS}}}r"
    # ``treat as`` checks the result without building it in memory (``instance of``
    # on a variable would); its XPDY0050, on the footer line, is the caller's cue.
    catch = (
        f'<{ERROR_TAG} xmlns:roses="{ROSES_NS}" code="{{$err:code}}" '
        f'line="{{$err:line-number}}">{{$err:description}}</{ERROR_TAG}>'
    )
    check = "treat as element(Q{}item)?"
    if safe:
        check = (
            f")) return if (count({result}) gt 1) then error(xs:QName('err:XPDY0050'), "
            f"'the result has ' || count({result}) || ' items') else {result} {check}"
        )
    else:
        check = f") {check})"
    return f"\n{check} }} catch * {{ {catch} }}, {SEPARATOR}) }}\n"
