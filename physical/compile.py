"""Compile an optimized logical plan into PySpark DataFrame operations."""

from __future__ import annotations

from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from physical.paths import SparkPaths
from physical.scan import scan_data, scan_eq_deletes, where_all
from planner.errors import UnsupportedError
from planner.nodes import (
    DATA_SEQ,
    DEL_PART,
    DEL_SEQ,
    GLOBAL_PART,
    PART,
    Aggregate,
    AntiJoin,
    Distinct,
    EqDeleteScan,
    Expr,
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


def _c(name: str) -> Column:
    return F.col(f"`{name}`")


def _e(e: Expr) -> Column:
    return F.expr(e.sql)


class Compiler:
    """Compiles each plan node once: a subtree shared by two parents becomes one DataFrame."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.paths = SparkPaths(spark)
        self._memo: dict[int, tuple[Plan, DataFrame]] = {}

    def compile(self, node: Plan) -> DataFrame:
        hit = self._memo.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        df = self._compile(node)
        self._memo[id(node)] = (node, df)
        return df

    def _compile(self, node: Plan) -> DataFrame:
        match node:
            case IcebergScan():
                return scan_data(self.spark, node, self.paths)
            case EqDeleteScan():
                return scan_eq_deletes(self.spark, node, self.paths)
            case AntiJoin(left=left, right=right, keys=keys):
                pairs = [
                    _c(lk).eqNullSafe(_c(rk)) if node.null_safe else _c(lk) == _c(rk)
                    for lk, rk in keys
                ]
                cond = reduce(lambda a, b: a & b, pairs)
                if node.seq_guard:
                    cond = cond & (_c(DATA_SEQ) < _c(DEL_SEQ))
                if node.part_guard:
                    cond = cond & (
                        (_c(DEL_PART) == F.lit(GLOBAL_PART)) | (_c(PART) == _c(DEL_PART))
                    )
                return self.compile(left).join(self.compile(right), cond, "left_anti")
            case Union(inputs=inputs, columns=cols):
                names = [_c(c.name) for c in cols]
                parts = [self.compile(p).select(*names) for p in inputs]
                return reduce(lambda a, b: a.unionAll(b), parts)
            case Filter(child=child, conditions=conds):
                return where_all(self.compile(child), conds)
            case Project(child=child, exprs=exprs):
                return self.compile(child).select(*[_e(e).alias(c.name) for c, e in exprs])
            case Aggregate(child=child, groups=groups, aggs=aggs):
                df = self.compile(child)
                agg_cols = [_e(e).alias(c.name) for c, e in aggs]
                if not groups:
                    if not agg_cols:
                        return df.select().limit(1)
                    return df.agg(*agg_cols)
                grouped = df.groupBy(*[_e(e).alias(c.name) for c, e in groups])
                if not agg_cols:
                    return grouped.agg(F.count(F.lit(1)).alias("$n")).drop("$n")
                return grouped.agg(*agg_cols)
            case Join(left=left, right=right, kind=kind, condition=cond):
                lf, rt = self.compile(left), self.compile(right)
                if kind == "cross" and cond is None:
                    return lf.crossJoin(rt)
                how = {"full": "full_outer", "cross": "inner"}.get(kind, kind)
                return lf.join(rt, _e(cond) if cond is not None else F.lit(True), how)
            case Sort(child=child, keys=keys):
                cols = []
                for k in keys:
                    c = _e(k.expr)
                    if k.ascending:
                        cols.append(c.asc_nulls_first() if k.nulls_first else c.asc_nulls_last())
                    else:
                        cols.append(c.desc_nulls_first() if k.nulls_first else c.desc_nulls_last())
                return self.compile(child).orderBy(*cols)
            case Limit(child=child, limit=n, offset=off):
                df = self.compile(child)
                if off:
                    df = df.offset(off)
                return df.limit(n) if n is not None else df
            case Distinct(child=child):
                return self.compile(child).distinct()
            case SetOp(left=left, right=right, kind=kind, distinct=distinct):
                lf = self.compile(left)
                rt = self.compile(right).toDF(*[c.name for c in left.output])
                if kind == "union":
                    return lf.union(rt).distinct() if distinct else lf.unionAll(rt)
                if kind == "intersect":
                    return lf.intersect(rt) if distinct else lf.intersectAll(rt)
                return lf.subtract(rt) if distinct else lf.exceptAll(rt)
        raise UnsupportedError(f"internal: no physical operator for {type(node).__name__}")


NESTED_PRUNING_CONF = "spark.sql.optimizer.nestedSchemaPruning.enabled"


def _reads_nested_fields(plan: Plan) -> bool:
    for node in plan.walk():
        fields = (
            node.fields
            if isinstance(node, IcebergScan)
            else (node.keys if isinstance(node, EqDeleteScan) else ())
        )
        if any(f.path for f in fields):
            return True
    return False


def to_dataframe(plan: Plan, spark: SparkSession) -> DataFrame:
    """The query's result, columns named as the user wrote them."""
    if _reads_nested_fields(plan):
        # Spark 3.5's nested schema pruning rebuilds the read schema without the Parquet field
        # ids of nested fields when _metadata columns are read too; the nested key would then
        # read as NULL (and NULL keys match each other). Reading whole structs avoids that.
        spark.conf.set(NESTED_PRUNING_CONF, "false")
    df = Compiler(spark).compile(plan)
    return df.select(*[_c(c.name).alias(c.label) for c in plan.output])
