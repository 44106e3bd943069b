"""The rows the engines hand to the store, and the entries it holds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from lxml import etree

from roses_app.items import content_hash, item_identity, parse_item


@dataclass(frozen=True, slots=True)
class OutRow:
    """One output event of a stream, as the Spark sink hands it over.

    ``part`` is "" for a normal stream and the split value for a split output; ``ts`` is
    in microseconds since the epoch; ``seq`` orders rows with equal ``ts``; ``item`` is
    one serialized ``<item>``.
    """

    stream: str
    part: str
    ts: int
    seq: int
    item: str
    # the item's identity when the producer already knows it (the fused stage
    # computes it on the workers from the tree it parsed); else found here
    guid: str | None = None


# what a sink hands over: an OutRow or its fields (stream, part, ts, seq, item[, guid])
RowLike = OutRow | tuple[str, str, int, int, str] | tuple[str, str, int, int, str, str | None]


def out_row(row: RowLike) -> OutRow:
    return row if isinstance(row, OutRow) else OutRow(*row)


class RowBatch(Protocol):
    """A micro-batch's rows kept as the stage made them, expanded on request (the fused
    stage's :class:`~roses_app.spark.fusedrows.FusedRows`)."""

    def rows(self) -> Sequence[RowLike]:
        """A row per stream that has an item."""
        ...


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """One item of a published feed as the store holds it."""

    stream: str
    part: str
    guid: str
    ts: int
    seq: int
    item: str
    created_at: float
    updated_at: float


def entry_guid(item: str, element: etree._Element | None = None) -> str:
    """The identity of an item in its feed: guid, else link, else sha256 of the XML."""
    if element is None:
        try:
            element = parse_item(item)
        except etree.XMLSyntaxError:
            return content_hash(item)
    return item_identity(element) or content_hash(item)


__all__ = ["OutRow", "RowBatch", "RowLike", "StoredEntry", "entry_guid", "out_row"]
