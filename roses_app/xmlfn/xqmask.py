"""Masking XQuery text: comments become spaces, string literal contents and the
literal parts of direct element constructors NUL characters (newlines are kept), so
that only the code is left, at the same offsets (:mod:`roses_app.xmlfn.xqsource`
finds statements and names in it)."""

from __future__ import annotations

import re

_NAME_START = re.compile(r"[A-Za-z_\u00C0-\uFFFF]")
_NAME = re.compile(r"[A-Za-z_\u00C0-\uFFFF][\w.\-\u00B7\u00C0-\uFFFF]*(?::[\w.\-\u00C0-\uFFFF]+)?")
# Words after which an operand (so possibly a direct constructor) follows.
_OPERAND_NEXT = frozenset(
    re.findall(
        r"\w+",
        "return then else in satisfies and or to div idiv mod union intersect except eq ne lt "
        "le gt ge is at where by let for some every switch case default typeswitch try catch "
        "collation ascending descending stable count group tumbling sliding window start end "
        "only when previous next ordered unordered validate instance of treat as castable cast "
        "otherwise",
    )
)


# What masked literal text (strings, constructors) becomes; comments become spaces.
LITERAL = "\x00"


class _Masker:
    """Blank out what is not code, keeping every newline at its place."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.out = list(text)
        self.pos = 0
        self.operand_end = False  # the last token can end an operand

    def blank(self, start: int, end: int, filler: str = LITERAL) -> None:
        for k in range(start, min(end, len(self.text))):
            if self.text[k] not in "\r\n":
                self.out[k] = filler

    def startswith(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    def skip_to(self, end_marker: str) -> None:
        """Blank from pos to after ``end_marker`` (or to the end)."""
        end = self.text.find(end_marker, self.pos)
        end = len(self.text) if end < 0 else end + len(end_marker)
        self.blank(self.pos, end)
        self.pos = end

    def comment(self) -> None:
        start, depth = self.pos, 0
        while self.pos < len(self.text):
            if self.startswith("(:"):
                depth += 1
                self.pos += 2
            elif self.startswith(":)"):
                depth -= 1
                self.pos += 2
                if depth == 0:
                    break
            else:
                self.pos += 1
        self.blank(start, self.pos, " ")

    def string(self) -> None:
        quote = self.text[self.pos]
        self.pos += 1
        start = self.pos
        while self.pos < len(self.text):
            if self.text[self.pos] == quote:
                if self.text.startswith(quote * 2, self.pos):
                    self.pos += 2
                    continue
                break
            self.pos += 1
        self.blank(start, self.pos)
        self.pos += 1
        self.operand_end = True

    def enclosed(self, start: int, opener: int) -> int:
        """Blank the literal text from ``start``, then scan the enclosed expression
        after its ``opener`` characters up to its ``}``; where literal text goes on."""
        self.blank(start, self.pos)
        self.pos += opener
        self.code("}")
        return self.pos

    def string_constructor(self) -> None:
        """``` ``[ ... `{ expr }` ... ]`` ```"""
        start = self.pos
        self.pos += 3
        while self.pos < len(self.text) and not self.startswith("]``"):
            if self.startswith("`{"):
                start = self.enclosed(start, 2)
            else:
                self.pos += 1
        self.pos = min(self.pos + 3, len(self.text))
        self.blank(start, self.pos)
        self.operand_end = True

    def code(self, until: str | None = None) -> None:
        """Scan code up to the ``}`` closing an enclosed expression (or to the end)."""
        text = self.text
        self.operand_end = False  # an expression starts: an operand comes first
        while self.pos < len(text):
            c = text[self.pos]
            if c.isspace():
                self.pos += 1
            elif self.startswith("(:"):
                self.comment()
            elif c in "\"'":
                self.string()
            elif self.startswith("``["):
                self.string_constructor()
            elif c == "{":
                self.pos += 1
                self.code("}")
                self.operand_end = True
            elif c == "}":
                self.pos += 1
                if until == "}":
                    return
            elif c == "<" and not self.operand_end and self.constructor_ahead():
                self.constructor()
                self.operand_end = True
            elif c == "$":
                match = _NAME.match(text, self.pos + 1)
                self.pos += 1 + (len(match.group()) if match else 0)
                self.operand_end = True
            elif _NAME_START.match(c):
                match = _NAME.match(text, self.pos)
                word = match.group() if match else c
                self.pos += len(word)
                self.operand_end = word not in _OPERAND_NEXT
            elif c.isdigit():
                while self.pos < len(text) and (text[self.pos].isalnum() or text[self.pos] == "."):
                    self.pos += 1
                self.operand_end = True
            else:
                self.pos += 1
                self.operand_end = c in ")].*?"

    def constructor_ahead(self) -> bool:
        nxt = self.text[self.pos + 1 : self.pos + 2]
        return bool(_NAME_START.match(nxt)) or self.startswith("<!--") or self.startswith("<?")

    def constructor(self) -> None:
        if self.startswith("<!--"):
            self.skip_to("-->")
        elif self.startswith("<?"):
            self.skip_to("?>")
        else:
            self.element()

    def element(self) -> None:
        """A direct element constructor from its ``<``."""
        text = self.text
        start = self.pos
        match = _NAME.match(text, self.pos + 1)
        name = match.group() if match else ""
        self.pos += 1 + len(name)
        while self.pos < len(text):
            c = text[self.pos]
            if self.startswith("/>"):
                self.pos += 2
                self.blank(start, self.pos)
                return
            if c == ">":
                self.pos += 1
                self.blank(start, self.pos)
                self.content(name)
                return
            if c in "\"'":
                self.blank(start, self.pos)
                self.attribute_value()
                start = self.pos
            else:
                self.pos += 1
        self.blank(start, self.pos)

    def attribute_value(self) -> None:
        quote = self.text[self.pos]
        start = self.pos
        self.pos += 1
        while self.pos < len(self.text):
            if self.startswith(quote * 2) or self.startswith("{{") or self.startswith("}}"):
                self.pos += 2
            elif self.text[self.pos] == quote:
                self.pos += 1
                break
            elif self.text[self.pos] == "{":
                start = self.enclosed(start, 1)
            else:
                self.pos += 1
        self.blank(start, self.pos)

    def content(self, name: str) -> None:
        """Element content up to its end tag; enclosed expressions stay code."""
        start = self.pos
        while self.pos < len(self.text):
            if self.startswith("</"):
                self.blank(start, self.pos)
                self.skip_to(">")
                return
            if self.startswith("<!--"):
                self.skip_to("-->")
            elif self.startswith("<![CDATA["):
                self.skip_to("]]>")
            elif self.startswith("<?"):
                self.skip_to("?>")
            elif self.startswith("<"):
                self.blank(start, self.pos)
                self.element()
                start = self.pos
            elif self.startswith("{{") or self.startswith("}}"):
                self.pos += 2
            elif self.startswith("{"):
                start = self.enclosed(start, 1)
            else:
                self.pos += 1
        self.blank(start, self.pos)


def mask(text: str) -> str:
    """``text`` with comments blanked and string contents and constructor literals NULs."""
    masker = _Masker(text)
    masker.code()
    return "".join(masker.out)
