"""Constructs known to explode, found in an expression's text before it runs.

``roses check`` warns about them (:func:`hazards`); they are warnings, not errors:
the per-item budget (:mod:`roses_app.xmlfn.budget`) stops them at run time anyway, but
each item they meet then costs the budget and is dropped.  Found:

* a regular expression given as a literal to ``matches``, ``replace``, ``tokenize`` or
  ``analyze-string`` that may backtrack catastrophically (:mod:`.hazards_regex`):
  nested quantifiers (``(a+)+``, ``(.*)*``) or a quantified alternation whose branches
  can start alike (``(\\w|\\w\\w)*``);
* ``N to M`` ranges of literals that make a huge number of items or iterations per
  item: one range of at least :data:`HUGE` items (``string-join(for $i in 1 to
  100000000 return 'x')``), or ranges nested in ``for``, ``some`` and ``every``
  whose product is (``for $a in 1 to 100000, $b in 1 to 100000``).

The analysis is lexical (XPath 3.1 and XQuery 3.1 tokens, comments and string literals
understood) so that it reads XQuery files too, which no Python parser here compiles;
it errs on the side of silence where the text is not understood.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from roses_app.xmlfn.hazards_regex import regex_hazard

HUGE = 1_000_000  # items of a range, or iterations of nested ranges, per item

# the argument that is the pattern, and the one that holds the flags
REGEX_FUNCTIONS = {"matches": 2, "replace": 3, "tokenize": 2, "analyze-string": 2}
ITERATING = ("for", "some", "every")
BODY = ("return", "satisfies")

_TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<str>"(?:[^"]|"")*"?|'(?:[^']|'')*'?)
      | (?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)
      | (?P<var>\$[^\W\d][\w.\-]*(?::[^\W\d][\w.\-]*)?)
      | (?P<name>[^\W\d][\w.\-]*(?::[^\W\d][\w.\-]*)?)
      | (?P<op>=>|!=|<=|>=|\|\||//|::|:=|.)
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str  # str, num, var, name, op
    text: str

    @property
    def local(self) -> str:
        """A name without its prefix (``fn:matches`` -> ``matches``)."""
        return self.text.rpartition(":")[2] if self.kind == "name" else ""


def tokens(text: str) -> list[Token]:
    """The tokens of an XPath or XQuery text, its comments ``(: ... :)`` left out."""
    out: list[Token] = []
    pos = 0
    while pos < len(text):
        if text.startswith("(:", pos):
            pos = _comment_end(text, pos)
            continue
        m = _TOKEN.match(text, pos)
        assert m is not None  # the last alternative takes any character
        pos = m.end()
        kind = m.lastgroup or "op"
        if kind != "space":
            out.append(Token(kind, m.group()))
    return out


def _comment_end(text: str, pos: int) -> int:
    """Where the comment opened at ``pos`` ends (comments nest); the end if never."""
    depth = 0
    while pos < len(text):
        if text.startswith("(:", pos):
            depth, pos = depth + 1, pos + 2
        elif text.startswith(":)", pos):
            depth, pos = depth - 1, pos + 2
            if depth == 0:
                return pos
        else:
            pos += 1
    return pos


def string_value(token: Token) -> str | None:
    """The value of a string literal (its quotes doubled inside undone); None if the
    token is no closed string literal."""
    t = token.text
    if token.kind != "str" or len(t) < 2 or t[-1] != t[0]:
        return None
    return t[1:-1].replace(t[0] * 2, t[0])


def hazards(text: str) -> list[str]:
    """What may explode in the expression ``text``, each said once, in order."""
    toks = tokens(text)
    found = _regex_hazards(toks) + _range_hazards(toks)
    return list(dict.fromkeys(found))


# -- regular expressions ------------------------------------------------------------------


def _arguments(toks: list[Token], open_at: int) -> list[list[Token]]:
    """The arguments of the call whose ``(`` is ``toks[open_at]``."""
    args: list[list[Token]] = [[]]
    depth = 0
    for tok in toks[open_at + 1 :]:
        if tok.text in ("(", "[", "{"):
            depth += 1
        elif tok.text in (")", "]", "}"):
            if depth == 0:
                break
            depth -= 1
        elif tok.text == "," and depth == 0:
            args.append([])
            continue
        args[-1].append(tok)
    return args


def _literal(arg: list[Token]) -> str | None:
    return string_value(arg[0]) if len(arg) == 1 else None


def _regex_hazards(toks: list[Token]) -> list[str]:
    found = []
    for i, tok in enumerate(toks[:-1]):
        flags_at = REGEX_FUNCTIONS.get(tok.local)
        if flags_at is None or toks[i + 1].text != "(":
            continue
        args = _arguments(toks, i + 1)
        if i > 0 and toks[i - 1].text == "=>":  # $s => matches(p): the input comes first
            args = [[], *args]
        pattern = _literal(args[1]) if len(args) > 1 else None
        flags = (_literal(args[flags_at]) if len(args) > flags_at else "") or ""
        if pattern is None or "q" in flags:  # q: the pattern is plain text
            continue
        if "x" in flags:  # x: whitespace in the pattern is not part of it
            pattern = re.sub(r"\s", "", pattern)
        why = regex_hazard(pattern)
        if why is not None:
            found.append(
                f"the regular expression '{pattern}' given to {tok.local}() {why}: it can "
                "take exponential time on some text (such an item is then dropped at "
                "settings.limits.item_time); rewrite it so that a text can be matched one "
                "way only, e.g. '^a+$' for '^(a+)+$', '^\\w*$' for '^(\\w|\\w\\w)*$'"
            )
    return found


# -- ranges ---------------------------------------------------------------------------------


@dataclass
class _Scope:
    """A ``for``, ``some`` or ``every`` at bracket ``depth``: how many times its body
    runs (the product of its clauses' ranges, so far), and whether it is in it."""

    depth: int
    factor: int = 1
    in_body: bool = False


def _range_at(toks: list[Token], i: int) -> int | None:
    """Items of the range ``N to M`` of integer literals starting at ``toks[i]``."""
    if i + 2 >= len(toks) or toks[i + 1].text != "to":
        return None
    start, stop = toks[i], toks[i + 2]
    if not (start.kind == stop.kind == "num" and start.text.isdigit() and stop.text.isdigit()):
        return None
    return max(0, int(stop.text) - int(start.text) + 1)


def _range_hazards(toks: list[Token]) -> list[str]:
    found: list[str] = []
    scopes: list[_Scope] = []
    calls: list[str] = []  # the function (or "") each open bracket belongs to
    for i, tok in enumerate(toks):
        if tok.text in ("(", "[", "{"):
            calls.append(toks[i - 1].local if i and tok.text == "(" else "")
        elif tok.text in (")", "]", "}"):
            if calls:
                calls.pop()
            while scopes and scopes[-1].depth > len(calls):
                scopes.pop()  # the bracket around the for closed
        elif tok.text == "," and scopes and scopes[-1].in_body and scopes[-1].depth == len(calls):
            scopes.pop()  # a sequence's next member: the body is over
        elif tok.local in ITERATING and i + 1 < len(toks) and toks[i + 1].kind == "var":
            scopes.append(_Scope(len(calls)))
        elif tok.local in BODY:
            for scope in scopes:
                if scope.depth == len(calls):
                    scope.in_body = True
        size = _range_at(toks, i)
        if size is None:
            continue
        runs = 1
        for scope in scopes:
            runs *= scope.factor
        if size * runs >= HUGE:
            found.append(_range_warning(toks, i, size, runs, "string-join" in calls))
        if scopes and not scopes[-1].in_body:
            scopes[-1].factor *= max(1, size)  # a clause's range: its body runs so often
    return found


def _range_warning(toks: list[Token], i: int, size: int, runs: int, joined: bool) -> str:
    written = f"{toks[i].text} to {toks[i + 2].text}"
    if runs > 1:
        return (
            f"the range {written} inside for/some/every over other ranges makes about "
            f"{size * runs:,} iterations for each item; such an item is then dropped at "
            "settings.limits.item_time: iterate over the item's own nodes, or fewer numbers"
        )
    inside = " inside string-join()" if joined else ""
    return (
        f"the range {written}{inside} builds {size:,} items for each item (memory and "
        "time: such an item is then dropped at settings.limits.item_time or "
        "worker_memory); use a smaller range"
    )
