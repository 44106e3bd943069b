"""Logical plan nodes: one frozen dataclass per operator of the ROSES algebra.

Every node records where it came from (feeds.yaml file:line, stream, step id) so
that errors found while compiling or running point back at the user's text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Origin:
    """Where a node was written: ``file:line``, in which stream, which step."""

    file: str = "<memory>"
    line: int = 0
    stream: str = ""
    step: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line} (stream {self.stream!r}, step {self.step})"


@dataclass(frozen=True)
class Node:
    """Base of all plan nodes; ``origin`` never takes part in equality."""

    origin: Origin = field(default=Origin(), compare=False, repr=False, kw_only=True)

    def children(self) -> tuple[Node, ...]:
        return ()

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children():
            yield from child.walk()


@dataclass(frozen=True)
class Source(Node):
    """The events of one configured source (feed or mailbox)."""

    name: str


@dataclass(frozen=True)
class Filter(Node):
    """σ_pred: keep the items for which the XPath observer is true."""

    input: Node
    where: str

    def children(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class XQuery:
    """An XQuery 3.1 main module: a mutator or a reducer.

    ``file`` and ``line`` say where ``text`` starts (an xquery/*.xq file at line 1, or
    the feeds.yaml line of inline text), so processor errors can be reported there.
    The text is part of the plan: editing the file changes the stream's fingerprint.
    """

    text: str
    # Where the text is does not change what it means: moving feeds.yaml keeps the
    # stream's fingerprint (and so its checkpoint).
    file: str = field(default="", compare=False, repr=False)
    line: int = field(default=1, compare=False, repr=False)

    def __str__(self) -> str:
        return self.file or "inline XQuery"


@dataclass(frozen=True)
class Map(Node):
    """μ_map: replace each item by the result of an item function; λ (empty) drops it.

    Exactly one of ``xpath`` (an accessor: the selected part of the item) or
    ``xquery`` (a mutator over ``$i``) is set.
    """

    input: Node
    xpath: str = ""
    xquery: XQuery | None = None

    def __post_init__(self) -> None:
        if bool(self.xpath) == (self.xquery is not None):
            raise ValueError("Map needs exactly one of xpath or xquery")

    def children(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class Union(Node):
    """∪: every event of every input, ordered by timestamp."""

    inputs: tuple[Node, ...]

    def children(self) -> tuple[Node, ...]:
        return self.inputs


@dataclass(frozen=True)
class Split(Node):
    """Ψ_split: route each item to the named output its XPath returns.

    Only allowed at the root of a stream; each name becomes its own feed.
    """

    input: Node
    by: str

    def children(self) -> tuple[Node, ...]:
        return (self.input,)


NODE_TYPES: tuple[type[Node], ...] = (Source, Filter, Map, Union, Split)


@dataclass(frozen=True)
class Stream:
    """A named continuous query of feeds.yaml: its plan and how it is published."""

    name: str
    plan: Node
    origin: Origin = field(default=Origin(), compare=False, repr=False)

    @property
    def is_split(self) -> bool:
        return isinstance(self.plan, Split)
