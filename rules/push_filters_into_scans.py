"""Push WHERE conjuncts down through joins to the Iceberg scans they read.

A conjunct that reaches a scan is recorded in `IcebergScan.pushed`, where scan planning uses it
to prune manifests and files and the physical scan applies it (so Parquet can skip row groups).
The Filter itself stays in place above: pushing only ever narrows what is read.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from planner.nodes import Expr, Filter, IcebergScan, Join, Plan

if TYPE_CHECKING:
    from rules import RuleContext


def push_filters_into_scans(plan: Plan, ctx: RuleContext) -> Plan:
    return _push(plan, ())


def _push(node: Plan, conds: tuple[Expr, ...]) -> Plan:
    match node:
        case Filter(child=child, conditions=own):
            new_child = _push(child, conds + own)
            return node if new_child is child else replace(node, child=new_child)
        case IcebergScan(pushed=pushed):
            names = {c.name for c in node.output}
            mine = tuple(c for c in conds if c.refs and c.refs <= names and c not in pushed)
            return replace(node, pushed=pushed + mine) if mine else node
        case Join(left=left, right=right, kind=kind):
            # a condition above an outer join may only go to the side whose rows are preserved
            to_left = conds if kind in ("inner", "cross", "left", "left_semi", "left_anti") else ()
            to_right = conds if kind in ("inner", "cross", "right") else ()
            if kind in ("inner", "left_semi") and node.condition is not None:
                # an inner join's own condition filters both sides too
                to_left = to_left + (node.condition,)
                to_right = to_right + (node.condition,)
            nl, nr = _push(left, _only(to_left, left)), _push(right, _only(to_right, right))
            return node.with_children((nl, nr))
        case _:
            # other nodes rename or aggregate columns: start afresh below them
            kids = node.children
            return node.with_children(tuple(_push(k, ()) for k in kids)) if kids else node


def _only(conds: tuple[Expr, ...], side: Plan) -> tuple[Expr, ...]:
    names = {c.name for c in side.output}
    return tuple(c for c in conds if c.refs and c.refs <= names)
