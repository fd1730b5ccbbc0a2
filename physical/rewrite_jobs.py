"""The Spark side of the maintenance commands: the positions equality deletes remove, and
the live rows of data files written again (compaction).

`deleted_positions` runs, for the data files of a planned `SELECT *` (the equality-delete
rewrite applied: one branch per set of equality id sets), the very step a query runs to
resolve equality deletes to positions (physical/compile.Compiler.execute): one Spark job per
branch reads the files' key columns, every row, semi-joined with each delete side on the
anti-join's own null-safe conditions, and collects (`_file`, `_pos`) of the matches. So the
positions a conversion writes are exactly those a query of mor removes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from mor.physical.compile import Compiler, to_dataframe
from mor.physical.scan.classic import warm_credentials
from mor.physical.scan.types import FIELD_ID_KEY, spark_type
from mor.physical.spark.spark_errors import spark_failure
from mor.physical.spark.store_access import StoreAccess
from mor.planner.errors import InternalError, MorError
from mor.planner.nodes import IcebergScan, Plan
from mor.planner.state import ProcessCaches
from mor.rules.physical.nodes import ResolveEqDeletes


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
    compiler = Compiler(spark, ProcessCaches(), resolve_every=True)
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


GROUP = "mor_group"  # the partition column of the written folder: one folder per group


@dataclass(frozen=True)
class Group:
    """Data files whose live rows go to `files` new files of one partition."""

    paths: tuple[str, ...]  # recorded paths of the data files rewritten
    files: int  # how many files to write (the rows are spread by a hash of file and position)


@dataclass(frozen=True)
class Column:
    name: str
    field_id: int
    type_json: str  # the Iceberg type, as pyiceberg's JSON


def write_compacted(
    spark: SparkSession,
    plan: Plan,
    columns: Sequence[Column],
    groups: Sequence[Group],
    folder: str,
    compression: str,
    access: StoreAccess | None = None,
) -> None:
    """Write the live rows of `plan` (a planned `SELECT *, _file, _pos` of the table, cut to
    the groups' data files) under `folder` (a path Spark writes to), one sub-folder
    `mor_group=<i>` per group (a partition column of the write; with one group, written
    straight into `mor_group=0`, sparing Spark's sort by partition column), as Parquet
    whose columns carry the Iceberg field ids (nested struct fields too) and whose
    timestamps are INT64 microseconds, as Iceberg's writers write them. One Spark job,
    committed by Spark's file commit protocol: the folder holds all the files or, when the
    job fails, none that a later listing takes for output."""
    from pyspark.sql import Row

    df = to_dataframe(plan, spark, ProcessCaches())
    if access is not None:  # written with the table's store settings (store_access.py)
        folder = access.path(folder)
    spread = F.xxhash64("_file", "_pos")  # the same rows to the same file on a task's retry
    if len(groups) == 1:  # one partition: no join, no partition column to sort the rows by
        n = groups[0].files
        out = df.repartition(n, spread).select(*[_with_id(c) for c in columns])
        folder, partition = f"{folder.rstrip('/')}/{GROUP}=0", []
    else:
        starts, at = [], 0
        for g in groups:
            starts.append(at)
            at += g.files
        assign = spark.createDataFrame(
            [
                Row(_file=p, g=i, n=g.files, o=o)
                for i, (g, o) in enumerate(zip(groups, starts))
                for p in g.paths
            ],
            "_file string, g int, n int, o int",
        )
        rows = df.join(F.broadcast(assign), "_file")
        bucket = F.col("o") + F.pmod(spread, F.col("n")).cast("int")
        rows = rows.withColumn("_bucket", bucket).repartition(at, "_bucket")
        out = rows.select(*[_with_id(c) for c in columns], F.col("g").alias(GROUP))
        partition = [GROUP]
    key = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "TIMESTAMP_MICROS")
    try:
        options = access.options([folder]) if access is not None else {}
        if access is not None:
            warm_credentials(spark, access.scheme, options, folder)
        (
            out.write.mode("error")  # Spark Connect knows "error" only
            .options(**options)
            .option("compression", compression)
            .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
            .partitionBy(*partition)
            .parquet(folder)
        )
    except MorError:
        raise
    except Exception as e:  # noqa: BLE001 - Spark's failure, as one line
        raise spark_failure(e) from e
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def _with_id(c: Column) -> F.Column:
    """The column with its field id (and its struct fields' ids, through a cast to the
    same type carrying them) in the metadata Spark's Parquet writer turns into field ids."""
    col = F.col(f"`{c.name}`")
    dtype = spark_type(c.type_json, c.name)
    if not isinstance(dtype, (T.StructType,)):
        return col.alias(c.name, metadata={FIELD_ID_KEY: c.field_id})
    return col.cast(dtype).alias(c.name, metadata={FIELD_ID_KEY: c.field_id})
