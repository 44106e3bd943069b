"""feeds.yaml operators of algebra v1, the stateless ones: filter, map, union and split
(registered on import).

```yaml
filter: {from: X, where: XPATH}                        # σ
map:    {from: X, xpath: XPATH}                        # μ with an accessor
map:    {from: X, xquery: FILE.xq or inline text}      # μ with an XQuery mutator
union:  [X, Y, ...]                                    # ∪
split:  {from: X, by: XPATH}                           # Ψ, only at a stream's root
```
"""

from __future__ import annotations

from roses_app.algebra.plan.operators import Filter, Map, Node, Split, Union
from roses_app.config.operator_registry import (
    Builder,
    OperatorContext,
    register_operator,
    xquery_argument,
)
from roses_app.config.yamlmarks import Marked, describe


def _unary(node_type: type[Filter | Map | Split], key: str) -> Builder:
    """The builder of ``{from: INPUT, KEY: XPATH}`` operators (filter, map, split)."""

    def build(ctx: OperatorContext, value: Marked) -> Node | None:
        args = ctx.arguments(value, required=("from", key))
        source = ctx.input(args.get("from"))
        expr = ctx.xpath(args, key)
        if source is None or expr is None:
            return None
        return node_type(source, expr, origin=ctx.origin)

    return build


def _union(ctx: OperatorContext, value: Marked) -> Node | None:
    if not value.is_seq:
        ctx.problem(value.line, f"union must be a list of inputs, got {describe(value)}")
        return None
    if not value.value:
        ctx.problem(value.line, "union needs at least one input")
        return None
    inputs = [ctx.input(item, f"[{i}]") for i, item in enumerate(value.value)]
    if any(i is None for i in inputs):
        return None
    return Union(tuple(i for i in inputs if i is not None), origin=ctx.origin)


def _map(ctx: OperatorContext, value: Marked) -> Node | None:
    """``map: {from: INPUT, xpath: ACCESSOR}`` or ``map: {from: INPUT, xquery: MUTATOR}``."""
    args = ctx.arguments(value, required=("from",), optional=("xpath", "xquery"))
    source = ctx.input(args.get("from"))
    if args.ok and ("xpath" in args) == ("xquery" in args):
        ctx.problem(
            args.line,
            "map takes either xpath (an accessor) or xquery (a mutator: an xquery/*.xq file "
            "or XQuery text)" + (", not both" if "xpath" in args else ""),
        )
        return None
    if "xquery" in args:
        query = xquery_argument(ctx, args, "xquery")
        if source is None or query is None:
            return None
        return Map(source, xquery=query, origin=ctx.origin)
    expr = ctx.xpath(args, "xpath")
    if source is None or expr is None:
        return None
    return Map(source, expr, origin=ctx.origin)


register_operator("filter", _unary(Filter, "where"))
register_operator("map", _map)
register_operator("union", _union)
register_operator("split", _unary(Split, "by"), root_only=True)
