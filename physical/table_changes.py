"""table_changes as DataFrame operations (the plan: planner/changes.py).

Per commit: the rows of removed files are DELETE, of added files INSERT; the files whose deletes
the commit changed are read at the parent and at the commit and joined once (full outer, on
`_file` and `_pos`): a row on one side only is a DELETE (parent) or an INSERT (commit). Commits
that can yield both kinds then go through one window that cancels identical DELETE/INSERT pairs
(rows a rewrite carried over unchanged) and, with identifier fields, names a key deleted and
inserted by one commit UPDATE_BEFORE / UPDATE_AFTER. Commits with one kind only skip the window.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from mor.physical.scan.types import spark_type
from mor.planner.nodes import (
    CHANGE_ORDINAL,
    CHANGE_TYPE,
    COMMIT_SNAPSHOT_ID,
    CommitChanges,
    Plan,
    TableChanges,
)

TAG = "$tag"  # "D" (a row the commit deleted) or "I" (one it inserted); D sorts first
KEYS = ["_file", "_pos"]


def _c(name: str) -> Column:
    return F.col(f"`{name}`")


def changes_schema(node: TableChanges) -> T.StructType:
    """The columns of a change set: the table's, then the change columns."""
    return T.StructType(
        [T.StructField(f.col.name, spark_type(f.type_str, node.table)) for f in node.fields]
        + [
            T.StructField(CHANGE_TYPE, T.StringType()),
            T.StructField(CHANGE_ORDINAL, T.IntegerType()),
            T.StructField(COMMIT_SNAPSHOT_ID, T.LongType()),
        ]
    )


def compile_changes(
    spark: SparkSession, node: TableChanges, compile: Callable[[Plan], DataFrame]
) -> DataFrame:
    cols = [f.col.name for f in node.fields]
    plain: list[DataFrame] = []
    mixed: list[DataFrame] = []
    for commit in node.commits or ():
        rows = _commit_rows(commit, cols, compile)
        if rows is not None:
            (mixed if commit.mixed else plain).append(rows)
    out: list[DataFrame] = []
    if plain:
        df = _union(plain)
        out.append(
            df.select(
                *[_c(c) for c in cols],
                F.when(_c(TAG) == "D", "DELETE").otherwise("INSERT").alias(CHANGE_TYPE),
                _c(CHANGE_ORDINAL),
                _c(COMMIT_SNAPSHOT_ID),
            )
        )
    if mixed:
        out.append(_net(_union(mixed), node, cols))
    if not out:
        return spark.createDataFrame([], changes_schema(node))
    return _union(out)


def _union(frames: list[DataFrame]) -> DataFrame:
    return reduce(lambda a, b: a.unionAll(b), frames)


def _commit_rows(
    commit: CommitChanges, cols: list[str], compile: Callable[[Plan], DataFrame]
) -> DataFrame | None:
    """The commit's DELETE and INSERT rows: its columns, TAG, ordinal and snapshot id."""
    frames: list[DataFrame] = []
    tags = (
        F.lit(commit.ordinal).cast("int").alias(CHANGE_ORDINAL),
        F.lit(commit.snapshot_id).cast("long").alias(COMMIT_SNAPSHOT_ID),
    )
    if commit.removed is not None:
        frames.append(compile(commit.removed).select(*[_c(c) for c in cols], F.lit("D").alias(TAG)))
    if commit.before is not None and commit.after is not None:
        before, after = compile(commit.before), compile(commit.after)
        inner = [f"$c{i}" for i in range(len(cols))]
        b = before.select(
            *[_c(c).alias("b" + n) for c, n in zip(cols, inner)], F.lit(True).alias("$b"), *KEYS
        )
        a = after.select(
            *[_c(c).alias("a" + n) for c, n in zip(cols, inner)], F.lit(True).alias("$a"), *KEYS
        )
        if commit.deletes_only:  # the commit only added deletes to these files
            frames.append(
                b.join(a.select(*KEYS), KEYS, "left_anti").select(
                    *[_c("b" + n).alias(c) for c, n in zip(cols, inner)], F.lit("D").alias(TAG)
                )
            )
        else:
            only = b.join(a, KEYS, "full_outer").where(_c("$a").isNull() | _c("$b").isNull())
            gone = _c("$a").isNull()
            frames.append(
                only.select(
                    *[
                        F.when(gone, _c("b" + n)).otherwise(_c("a" + n)).alias(c)
                        for c, n in zip(cols, inner)
                    ],
                    F.when(gone, F.lit("D")).otherwise(F.lit("I")).alias(TAG),
                )
            )
    if commit.added is not None:
        frames.append(compile(commit.added).select(*[_c(c) for c in cols], F.lit("I").alias(TAG)))
    if not frames:
        return None
    return _union(frames).select("*", *tags)


def _comparable(t: T.DataType, name: str) -> Column:
    """The column as a value Spark can group by: maps (anywhere inside) as their JSON text."""

    def has_map(x: T.DataType) -> bool:
        if isinstance(x, T.MapType):
            return True
        if isinstance(x, T.ArrayType):
            return has_map(x.elementType)
        if isinstance(x, T.StructType):
            return any(has_map(f.dataType) for f in x.fields)
        return False

    return F.to_json(_c(name)) if has_map(t) else _c(name)


def _net(df: DataFrame, node: TableChanges, cols: list[str]) -> DataFrame:
    """Cancel identical DELETE/INSERT pairs of one commit (as multisets: d copies deleted and i
    inserted leave max(d - i, 0) DELETE or max(i - d, 0) INSERT), then name updates."""
    schema = df.schema  # analysed once (on Spark Connect, each look is a round trip)
    whole = Window.partitionBy(
        _c(CHANGE_ORDINAL), *[_comparable(schema[c].dataType, c) for c in cols]
    )
    is_d = F.when(_c(TAG) == "D", 1).otherwise(0)
    rn = F.row_number().over(whole.orderBy(_c(TAG)))  # D rows are 1..n_d, then I rows
    counted = df.select(
        "*",
        F.sum(is_d).over(whole).alias("$n_d"),
        F.sum(1 - is_d).over(whole).alias("$n_i"),
        rn.alias("$rn"),
    )
    n_d, n_i, rn = _c("$n_d"), _c("$n_i"), _c("$rn")
    kept = counted.where(
        ((_c(TAG) == "D") & (rn <= n_d - n_i)) | ((_c(TAG) == "I") & (rn > 2 * n_d))
    )
    deleted = F.when(_c(TAG) == "D", "DELETE").otherwise("INSERT")
    if node.identifier:
        key = Window.partitionBy(_c(CHANGE_ORDINAL), *[_c(k) for k in node.identifier])
        both = (F.max(is_d).over(key) == 1) & (F.min(is_d).over(key) == 0)
        kind = F.when(
            both, F.when(_c(TAG) == "D", "UPDATE_BEFORE").otherwise("UPDATE_AFTER")
        ).otherwise(deleted)
    else:
        kind = deleted
    return kept.select(
        *[_c(c) for c in cols],
        kind.alias(CHANGE_TYPE),
        _c(CHANGE_ORDINAL),
        _c(COMMIT_SNAPSHOT_ID),
    )
