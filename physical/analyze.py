"""EXPLAIN ANALYZE: count the rows each kind of delete removes, by running the plan's pieces."""

from __future__ import annotations

from pyspark.sql import SparkSession

from mor.physical.compile import Compiler
from mor.planner.errors import InternalError
from mor.planner.nodes import AntiJoin, IcebergScan, Plan, Union, show_ids
from mor.planner.query_metrics import MorMetrics
from mor.planner.state import ProcessCaches


def _top_scans(plan: Plan) -> list[Plan]:
    """Each table read: a scan, or the Union the equality rule made of one."""
    out: list[Plan] = []

    def visit(node: Plan) -> None:
        if isinstance(node, IcebergScan) or (
            isinstance(node, Union) and all(_is_branch(i) for i in node.inputs)
        ):
            out.append(node)
            return
        for c in node.children:
            visit(c)

    visit(plan)
    return out


def _is_branch(node: Plan) -> bool:
    while isinstance(node, AntiJoin):
        node = node.left
    return isinstance(node, IcebergScan) and node.branch is not None


def count_removed(
    m: MorMetrics, plan: Plan, spark: SparkSession, cache: ProcessCaches
) -> MorMetrics:
    compiler = Compiler(spark, cache)
    by_pos = 0
    by_eq: dict[str, int] = {}
    live = 0
    for top in _top_scans(plan):
        branches = top.inputs if isinstance(top, Union) else (top,)
        for b in branches:
            chain = []
            node = b
            while isinstance(node, AntiJoin):
                chain.append(node)
                node = node.left
            if not isinstance(node, IcebergScan):
                raise InternalError(f"an anti-join chain ends in {type(node).__name__}, not a scan")
            scanned = compiler.compile(node).count()
            by_pos += node.rows_estimate() - scanned
            before = scanned
            for aj in reversed(chain):
                after = compiler.compile(aj).count()
                key = show_ids(aj.eq_set)
                by_eq[key] = by_eq.get(key, 0) + before - after
                before = after
            live += before
    m.rows_removed_by_position = by_pos
    m.rows_removed_by_equality = by_eq
    m.rows_live = live
    return m
