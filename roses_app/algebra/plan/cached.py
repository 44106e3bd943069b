"""A property computed once per object, without a lock.

Python 3.11's ``functools.cached_property`` takes one lock, shared by every object
of the class, on each first access: the nodes of 100,000 subscriptions' plans asked
for their digests, hashes and inputs a million times, a second of it in that lock.
Plan nodes are immutable, so two threads computing a value at once compute the same
one: no lock is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class computed_once(Generic[T]):
    """Like ``functools.cached_property``: the value is kept in the object's
    ``__dict__`` (which a frozen dataclass has), where later reads find it first."""

    def __init__(self, compute: Callable[[Any], T]) -> None:
        self.compute = compute
        self.name = compute.__name__
        self.__doc__ = compute.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> computed_once[T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> Any:
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.compute(instance)
        return value


def kept_repr(text_of: Callable[[Any], str]) -> Callable[[Any], str]:
    """A ``__repr__`` that keeps the text ``text_of`` makes in the object's
    ``__dict__`` (as ``_text``): a plan's repr holds its inputs' reprs, so each node's
    is made once (a node's id is a digest of its repr: 100,000 plans, 1.3 s to 0.4 s)."""

    def __repr__(self: Any) -> str:
        found: str | None = self.__dict__.get("_text")
        if found is None:
            found = self.__dict__["_text"] = text_of(self)
        return found

    return __repr__
