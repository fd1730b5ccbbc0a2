"""Read only the columns the query needs: drop unused scan fields and unused projections.

The root keeps all of its output. Distinct and set operations need every column of their
inputs (they compare whole rows). Equality columns are added back by split_equality_deletes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from planner.nodes import (
    Aggregate,
    Distinct,
    Filter,
    IcebergScan,
    Join,
    Limit,
    Plan,
    Project,
    SetOp,
    Sort,
    Union,
)

if TYPE_CHECKING:
    from rules import RuleContext


def prune_columns(plan: Plan, ctx: RuleContext) -> Plan:
    return _prune(plan, frozenset(c.name for c in plan.output))


def _prune(node: Plan, need: frozenset[str]) -> Plan:
    match node:
        case IcebergScan(fields=fields, pushed=pushed):
            want = need | {r for e in pushed for r in e.refs}
            kept = tuple(f for f in fields if f.col.name in want)
            return node if len(kept) == len(fields) else replace(node, fields=kept)
        case Project(child=child, exprs=exprs):
            kept_exprs = tuple((c, e) for c, e in exprs if c.name in need)
            below = frozenset(r for _, e in kept_exprs for r in e.refs)
            new_child = _prune(child, below)
            if new_child is child and len(kept_exprs) == len(exprs):
                return node
            return replace(node, child=new_child, exprs=kept_exprs)
        case Filter(child=child, conditions=conds):
            return node.with_children((_prune(child, need | _refs(conds)),))
        case Sort(child=child, keys=keys):
            return node.with_children((_prune(child, need | _refs(k.expr for k in keys)),))
        case Limit(child=child):
            return node.with_children((_prune(child, need),))
        case Aggregate(child=child, groups=groups, aggs=aggs):
            below = _refs(e for _, e in groups) | _refs(e for _, e in aggs)
            return node.with_children((_prune(child, below),))
        case Join(left=left, right=right, condition=cond):
            want = need | (cond.refs if cond is not None else frozenset())
            return node.with_children((_prune(left, want), _prune(right, want)))
        case Distinct() | SetOp() | Union():
            return node.with_children(
                tuple(_prune(k, frozenset(c.name for c in k.output)) for k in node.children)
            )
        case _:
            return node.with_children(
                tuple(_prune(k, frozenset(c.name for c in k.output)) for k in node.children)
            )


def _refs(exprs) -> frozenset[str]:  # type: ignore[no-untyped-def]
    return frozenset(r for e in exprs for r in e.refs)
