"""The Spark side of the maintenance commands: the positions equality deletes remove.

`deleted_positions` runs, for the data files of a planned `SELECT *` (the equality-delete
rewrite applied: one branch per set of equality id sets), the very step a query runs to
resolve equality deletes to positions (physical/compile.Compiler.execute): one Spark job per
branch reads the files' key columns, every row, semi-joined with each delete side on the
anti-join's own null-safe conditions, and collects (`_file`, `_pos`) of the matches. So the
positions a conversion writes are exactly those a query of mor removes.
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
from pyspark.sql import SparkSession

from mor.physical.compile import Compiler
from mor.planner.errors import InternalError
from mor.planner.nodes import IcebergScan, Plan
from mor.planner.settings import applied
from mor.planner.state import ProcessCaches
from mor.rules.physical.nodes import ResolveEqDeletes

# every file resolved, whatever the read count or the number of positions
_RESOLVE_ALL = {
    "resolve_equality_deletes": True,
    "resolve_at_read": 1,
    "resolved_cache_rows": 1 << 62,
}


def only_files(plan: Plan, paths: set[str]) -> Plan:
    """`plan` with every scan's data files cut to those recorded as `paths`."""

    def cut(node: Plan) -> Plan:
        if isinstance(node, IcebergScan) and node.files is not None:
            data = tuple(t for t in node.files.data if t.path in paths)
            return replace(node, files=replace(node.files, data=data))
        return node

    return plan.transform_up(cut)


def deleted_positions(spark: SparkSession, plan: Plan) -> dict[str, pa.Array]:
    """The positions (sorted int64) the equality deletes of `plan`'s scans remove from each
    data file they apply to, by the file's recorded path; a file whose deletes match no row
    is absent. Nothing is kept in the process's caches."""
    with applied(_RESOLVE_ALL):
        compiler = Compiler(spark, ProcessCaches())
        query = compiler.plan(plan)
        steps = [n for n in query.walk() if isinstance(n, ResolveEqDeletes)]
        found: dict[str, pa.Array] = {}
        for step in steps:
            if step.resolution.method != "positions":
                raise InternalError(f"resolving refused: {step.resolution.why}")
            for path, positions in compiler.execute(step).items():
                if path in found:  # files of two branches: never, each file is in one
                    raise InternalError(f"{path} resolved twice")
                found[path] = positions
    return found
