"""Regular expressions that may backtrack catastrophically (XPath's regex syntax, that of
XML Schema with ``^``, ``$``, groups and back-references).

A backtracking engine takes exponential time when a repeated part can match the same
text in more than one way, then meets text that fails at the end: ``(a+)+$`` against
``aaaa…a!`` tries every way to cut the ``a``s.  :func:`regex_hazard` parses the pattern
into a small tree and finds the two shapes that cause it:

* a repetition inside a repetition whose other required parts do not separate the
  iterations (``(a+)+``, ``(.*)*``, ``(\\w+\\s?)*``; not ``(\\d+,)*``, where the comma
  must come between two runs of digits and cannot be a digit);
* a repeated alternation two of whose branches can start with the same character
  (``(\\w|\\w\\w)*``, ``(a|ab)+``).

Which characters a part can match is tested on a sample of characters (ASCII and a few
others), with the ``regex`` module for the class syntax; a class it cannot read counts
as any character.  A pattern that does not parse gets no warning (the processor reports
it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import regex

UNBOUNDED = -1
REPEATED = 4  # a part repeated at least this many times (or unboundedly) is a repetition
SAMPLE = "".join(map(chr, range(32, 127))) + "\t\n\r\u00a0éßЖα中٣"
ESCAPES = set("nrt\\|.?*+(){}[]^$-")


@dataclass
class Part:
    """A node of a parsed pattern: ``chars`` (a character class: its text) or
    ``alternatives`` (a group: sequences of parts); ``low``/``high`` its repetition
    (``high`` :data:`UNBOUNDED` for ``*``, ``+``, ``{n,}``); ``empty``: it matches
    only the empty string (``^``, ``$``, a back-reference counts as any text)."""

    chars: str = ""
    alternatives: list[list[Part]] = field(default_factory=list)
    low: int = 1
    high: int = 1
    empty: bool = False

    @property
    def repeated(self) -> bool:
        return self.high == UNBOUNDED or self.high >= REPEATED

    def nullable(self) -> bool:
        if self.low == 0 or self.empty:
            return True
        if self.chars:
            return False
        return any(all(p.nullable() for p in seq) for seq in self.alternatives)

    def unbounded_inside(self) -> bool:
        """Whether this part, or a part in it, repeats without bound."""
        if self.high == UNBOUNDED and not self.empty:
            return True
        return any(p.unbounded_inside() for seq in self.alternatives for p in seq)

    def matches(self) -> frozenset[str]:
        """The sample characters this part can match anywhere."""
        if self.chars:
            return _class(self.chars)
        return frozenset().union(*(p.matches() for seq in self.alternatives for p in seq))

    def first(self) -> frozenset[str]:
        """The sample characters a match of this part can start with."""
        if self.chars:
            return _class(self.chars)
        out: frozenset[str] = frozenset()
        for seq in self.alternatives:
            out |= _first_of(seq)
        return out


def _first_of(seq: list[Part]) -> frozenset[str]:
    out: frozenset[str] = frozenset()
    for part in seq:
        out |= part.first()
        if not part.nullable():
            break
    return out


@cache
def _class(text: str) -> frozenset[str]:
    """The sample characters the one-character pattern ``text`` matches."""
    if text == ".":
        return frozenset(SAMPLE) - {"\n", "\r"}
    try:
        pattern = regex.compile(text, regex.V1)
    except regex.error:
        return frozenset(SAMPLE)  # a class it cannot read (\i, \c, ...): any character
    return frozenset(c for c in SAMPLE if pattern.fullmatch(c))


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def alternatives(self) -> list[list[Part]]:
        seqs = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            seqs.append(self.sequence())
        return seqs

    def sequence(self) -> list[Part]:
        seq: list[Part] = []
        while self.peek() not in ("", "|", ")"):
            part = self.atom()
            self.quantifier(part)
            seq.append(part)
        return seq

    def atom(self) -> Part:
        c = self.peek()
        self.pos += 1
        if c == "(":
            if self.text.startswith("?:", self.pos):
                self.pos += 2
            inner = self.alternatives()
            if self.peek() != ")":
                raise ValueError("an unclosed group")
            self.pos += 1
            return Part(alternatives=inner)
        if c == "[":
            return Part(chars=self.char_class())
        if c == "\\":
            return self.escape()
        if c in "^$":
            return Part(empty=True)
        if c in "*+?{":
            raise ValueError("a quantifier with nothing before it")
        return Part(chars="." if c == "." else regex.escape(c))

    def char_class(self) -> str:
        start, depth = self.pos - 1, 1
        while depth and self.pos < len(self.text):
            c = self.text[self.pos]
            if c == "\\":
                self.pos += 1
            elif c == "[":
                depth += 1  # a subtraction, [a-z-[aeiou]]
            elif c == "]":
                depth -= 1
            self.pos += 1
        if depth:
            raise ValueError("an unclosed character class")
        # XPath's subtraction [a-z-[aeiou]] is the regex module's [a-z--[aeiou]]
        return self.text[start : self.pos].replace("-[", "--[")

    def escape(self) -> Part:
        start = self.pos - 1  # at the backslash
        c = self.peek()
        self.pos += 1
        if c in "pP" and self.peek() == "{":
            end = self.text.find("}", self.pos)
            if end < 0:
                raise ValueError("an unclosed \\p{")
            self.pos = end + 1
            return Part(chars=self.text[start : self.pos])
        if c.isdigit():  # a back-reference: any text (it repeats what a group took)
            return Part(chars=".", low=0, high=UNBOUNDED)
        if c in ESCAPES:
            return Part(chars=regex.escape(c) if c not in "nrt" else "\\" + c)
        return Part(chars="\\" + c)  # \d \w \s \i \c and their capitals

    def quantifier(self, part: Part) -> None:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.pos += 1
            part.low, part.high = (0 if c != "+" else 1), (1 if c == "?" else UNBOUNDED)
        elif c == "{":
            end = self.text.find("}", self.pos)
            low, comma, high = self.text[self.pos + 1 : end].partition(",")
            if end < 0 or not low.isdigit() or not (high.isdigit() or not high):
                raise ValueError("a malformed {n,m}")
            self.pos = end + 1
            part.low = int(low)
            part.high = int(high) if high else (UNBOUNDED if comma else int(low))
        else:
            return
        if self.peek() == "?":  # reluctant: the same ways to cut the text
            self.pos += 1


def parse(pattern: str) -> list[list[Part]]:
    """The pattern's alternatives; ValueError if it does not parse."""
    parser = _Parser(pattern)
    seqs = parser.alternatives()
    if parser.pos != len(pattern):
        raise ValueError("an unopened group")
    return seqs


def regex_hazard(pattern: str) -> str | None:
    """Why ``pattern`` may backtrack catastrophically, or None."""
    try:
        seqs = parse(pattern)
    except ValueError:
        return None
    return _in(seqs)


def _in(seqs: list[list[Part]]) -> str | None:
    for seq in seqs:
        for part in seq:
            why = _repetition(part) if part.repeated and part.alternatives else None
            why = why or _in(part.alternatives)
            if why:
                return why
    return None


def _repetition(group: Part) -> str | None:
    """Why a repeated group is ambiguous, or None."""
    seqs = group.alternatives
    if len(seqs) > 1:
        starts = [_first_of(seq) for seq in seqs]
        for i, a in enumerate(starts):
            if any(a & b for b in starts[i + 1 :]):
                return "repeats an alternation whose branches can start alike"
        return None
    seq = seqs[0]
    for part in seq:
        if not (part.unbounded_inside() and part.matches()):
            continue
        inner = part.matches()
        required = [p for p in seq if p is not part and not p.nullable()]
        # iterations can be cut in more than one way unless a required part that
        # cannot be part of the inner repetition stands between them
        if all(p.matches() & inner for p in required):
            return "repeats a repetition (nested quantifiers)"
    return None
