"""The base of the logical plan's nodes (:mod:`roses_app.algebra.plan.operators`): a node's
digest, equality and hash, its inputs and walks, and where it was written.

Plans are DAGs: a stream used by several others is one node object in all of them,
so a plan of a few lines may have 2^N paths.  Nothing may walk it as a tree: a
node's hash and equality come from its :attr:`Node.digest`, computed once per node
from its inputs' digests, and every walk keeps what it did per node.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, fields, replace
from typing import Any

from roses_app.algebra.plan.cached import computed_once

# Attributes a node computes once and keeps (never pickled: recomputed on use).
_CACHED = ("digest", "_hash", "tree_size", "analysis", "_inputs", "_text")


@dataclass(frozen=True, slots=True)  # one per plan node
class Origin:
    """Where a node was written: ``file:line``, in which stream, which step."""

    file: str = "<memory>"
    line: int = 0
    stream: str = ""
    step: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line} (stream {self.stream!r}, step {self.step})"


def _encode(value: object) -> bytes:
    """An unambiguous byte form of a field value for :attr:`Node.digest`: a node by its
    digest, a tuple or dataclass (an XQuery, a window spec) by its compared parts,
    anything else (str, int, None) by its repr."""
    if isinstance(value, Node):
        return b"N" + len(value.digest).to_bytes(8, "big") + value.digest
    if type(value) is str:  # (most fields: the same bytes as below, sooner)
        text = repr(value).encode("utf-8")
        return b"V" + len(text).to_bytes(8, "big") + text
    if isinstance(value, tuple):
        body = b"".join(_encode(v) for v in value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = [type(value).__name__.encode()]
        parts += [_encode(getattr(value, f.name)) for f in fields(value) if f.compare]
        body = b"".join(parts)
    else:
        body = repr(value).encode("utf-8")
    kind = b"N" if isinstance(value, Node) else b"T" if isinstance(value, tuple) else b"V"
    return kind + len(body).to_bytes(8, "big") + body


# Field metadata: a field added to a node type after plans were fingerprinted leaves
# the digest and the repr (the fingerprint) as they were while it has its default, so
# that upgrading ROSES does not make every stream look changed.
LATER = {"later": True}


# per node class (plans of ten thousand streams asked dataclasses.fields hundreds of
# thousands of times): its fields, and its compared ones with whether each is LATER
_FIELDS: dict[type, tuple[dataclasses.Field[Any], ...]] = {}
_COMPARED: dict[type, tuple[tuple[dataclasses.Field[Any], bool], ...]] = {}


def _fields_of(kind: type) -> tuple[dataclasses.Field[Any], ...]:
    found = _FIELDS.get(kind)
    if found is None:
        found = _FIELDS[kind] = fields(kind)
    return found


def _compared_fields(kind: type) -> tuple[tuple[dataclasses.Field[Any], bool], ...]:
    found = _COMPARED.get(kind)
    if found is None:
        found = tuple((f, bool(f.metadata.get("later"))) for f in fields(kind) if f.compare)
        _COMPARED[kind] = found
    return found


def _identity_fields(node: object) -> list[dataclasses.Field[Any]]:
    """The compared fields that say what ``node`` computes (see :data:`LATER`)."""
    return [
        f
        for f, later in _compared_fields(type(node))
        if not (later and getattr(node, f.name) == f.default)
    ]


def node_repr(node: object) -> str:
    """The dataclass repr, without the :data:`LATER` fields that have their default."""
    shown = [f for f in _fields_of(type(node)) if f.repr]
    kept = {f.name for f in _identity_fields(node)}
    parts = [f"{f.name}={getattr(node, f.name)!r}" for f in shown if f.name in kept]
    return f"{type(node).__name__}({', '.join(parts)})"


@dataclass(frozen=True, eq=False)
class Node:
    """Base of all plan nodes; ``origin`` never takes part in equality."""

    origin: Origin = field(default=Origin(), compare=False, repr=False, kw_only=True)

    @computed_once
    def digest(self) -> bytes:
        """SHA-256 of what the node computes: its type, its compared fields and its
        inputs' digests (a Merkle hash), computed once per node.  Two nodes are
        equal when their digests are: the dataclass equality of their fields, short
        of a SHA-256 collision, in constant time however shared their inputs are."""
        h = hashlib.sha256(type(self).__name__.encode())
        for f, later in _compared_fields(type(self)):  # (_identity_fields, inline)
            value = getattr(self, f.name)
            if not (later and value == f.default):
                h.update(_encode(value))
        return h.digest()

    @computed_once
    def analysis(self) -> dict[str, Any]:
        """What analyses of the plan found of this node object (the operators of time
        :mod:`roses_app.algebra.time.eventtime` finds), kept once computed: each depends on
        the node's sub-plan only, and a run over a run over a run would otherwise ask
        again at every level."""
        return {}

    @computed_once
    def _hash(self) -> int:
        return int.from_bytes(self.digest[:8], "big", signed=True)

    @computed_once
    def tree_size(self) -> int:
        """How many nodes the plan would have as a tree (shared inputs counted once
        per path): what a walk that forgets what it did would visit."""
        return 1 + sum(child.tree_size for child in self.children())

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Node):
            return NotImplemented
        return self._hash == other._hash and self.digest == other.digest

    def __getstate__(self) -> dict[str, Any]:
        # the cached digest would outlive a change of its encoding in a pickle
        return {k: v for k, v in self.__dict__.items() if k not in _CACHED}

    def children(self) -> tuple[Node, ...]:
        """The inputs: the fields holding a node or a tuple of nodes, in field order."""
        return self._inputs

    @computed_once
    def _inputs(self) -> tuple[Node, ...]:
        out: list[Node] = []
        for f in _fields_of(type(self)):
            value = getattr(self, f.name)
            if isinstance(value, Node):
                out.append(value)
            elif isinstance(value, tuple):
                out.extend(v for v in value if isinstance(v, Node))
        return tuple(out)

    def walk(self) -> Iterator[Node]:
        """Every node object of the plan once, depth first, where a tree walk would
        first reach it (a node reached by several paths is not visited again)."""
        seen: set[int] = set()
        stack: list[Node] = [self]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            yield node
            stack.extend(reversed(node.children()))

    def outermost(self, marked: AbstractSet[Node]) -> Iterator[Node]:
        """The ``marked`` sub-plans of this plan that are inside no larger marked one
        (this node itself if marked), each node object visited once."""
        seen: set[int] = set()
        todo: list[Node] = [self]
        while todo:
            node = todo.pop()
            if id(node) not in seen:
                seen.add(id(node))
                if node in marked:
                    yield node
                else:
                    todo.extend(node.children())

    def map_inputs(self, fn: Callable[[Node], Node]) -> Node:
        """This node with ``fn`` applied to each input (its origin kept); the node
        itself when ``fn`` returns every input unchanged."""
        changes: dict[str, Any] = {}
        for f in _fields_of(type(self)):
            value = getattr(self, f.name)
            if isinstance(value, Node):
                new: Any = fn(value)
                same = new is value
            elif isinstance(value, tuple) and value and all(isinstance(v, Node) for v in value):
                new = tuple(fn(v) for v in value)
                same = all(a is b for a, b in zip(new, value, strict=True))
            else:
                continue
            if not same:
                changes[f.name] = new
        return replace(self, **changes) if changes else self
