"""Join keys: the string values of the nodes a simple path selects in each item.

The paths come from :func:`roses_app.algebra.plan.equikeys.equi_key`: child, attribute and
descendant steps with name tests, ``*`` and ``text()``, relative to the item.  On
those, libxml2's XPath 1.0 selects the same nodes as XPath 3.1, and a node's string
value (its descendant text, without comments or processing instructions) is what
``=`` compares; so lxml computes the keys both engines join on.
"""

from __future__ import annotations

from collections.abc import Sequence

from lxml import etree

from roses_app.xmlfn.batch import OnError, each
from roses_app.xmlfn.fastpath import lxml_xpath
from roses_app.xmlfn.xpath import Namespaces


def _string_value(node: object) -> str:
    if isinstance(node, etree._Element):
        return "".join(node.itertext())
    return str(node)  # an attribute's value or a text node: a str (smart strings off)


def key_strings_batch(
    path: str,
    namespaces: Namespaces,
    xmls: Sequence[str | None],
    on_error: OnError | None = None,
) -> list[list[str]]:
    """The distinct string values ``path`` selects in each item, sorted; [] for None
    or a failing item (which ``on_error`` gets)."""
    select = lxml_xpath(path, namespaces)

    def keys(item: etree._Element) -> list[str]:
        found = select(item)
        nodes = found if isinstance(found, list) else [found]
        return sorted({_string_value(node) for node in nodes})

    return each(xmls, keys, [], f"join key {path!r}", on_error)
