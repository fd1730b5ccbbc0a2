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

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from mor.physical.compile import Compiler, to_dataframe
from mor.physical.scan.classic import warm_credentials
from mor.physical.scan.types import FIELD_ID_KEY, spark_type
from mor.physical.spark.spark_errors import spark_failure
from mor.physical.spark.store_access import StoreAccess
from mor.planner.errors import InternalError, MorError, UnsupportedError
from mor.planner.nodes import Plan
from mor.planner.state import ProcessCaches
from mor.rules.physical.nodes import ResolveEqDeletes


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


def _rows(
    spark: SparkSession, plan: Plan, columns: Sequence[Column], groups: Sequence[Group]
) -> tuple[DataFrame, list[str]]:
    """The live rows of `plan` as written: the columns (field ids in their metadata), spread
    over one Spark partition per new file, with the group's number as column GROUP when
    there are several groups (the partition columns returned)."""
    from pyspark.sql import Row

    df = to_dataframe(plan, spark, ProcessCaches())
    spread = F.xxhash64("_file", "_pos")  # the same rows to the same file on a task's retry
    if len(groups) == 1:  # one partition: no join, no partition column to sort the rows by
        n = groups[0].files
        return df.repartition(n, spread).select(*[_with_id(c) for c in columns]), []
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
    return rows.select(*[_with_id(c) for c in columns], F.col("g").alias(GROUP)), [GROUP]


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
    the groups' data files) under `folder` (a path Spark writes to) with Spark's Parquet
    writer, one sub-folder `mor_group=<i>` per group (a partition column of the write; with
    one group, written straight into `mor_group=0`, sparing Spark's sort by partition
    column), as Parquet whose columns carry the Iceberg field ids (nested struct fields too)
    and whose timestamps are INT64 microseconds, as Iceberg's writers write them. One Spark
    job, committed by Spark's file commit protocol: the folder holds all the files or, when
    the job fails, none that a later listing takes for output."""
    out, partition = _rows(spark, plan, columns, groups)
    if access is not None:  # written with the table's store settings (store_access.py)
        folder = access.path(folder)
    if not partition:
        folder = f"{folder.rstrip('/')}/{GROUP}=0"
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


@dataclass(frozen=True)
class Written:
    """A data file a task of `write_arrow` wrote: its path (as the table records paths), its
    group, rows, bytes and Parquet footer (the driver reads no file back)."""

    path: str
    group: int
    rows: int
    size: int
    footer: bytes


@dataclass(frozen=True)
class ArrowStore:
    """Where the tasks of `write_arrow` write: `kind` "local" (a local path, `root` its
    folder) or "s3" (`root` is `bucket/key`, `options` pyarrow's S3FileSystem arguments,
    the table's credentials among them: kept out of every repr)."""

    kind: str
    root: str
    options: tuple[tuple[str, Any], ...] = field(default=(), repr=False)


def arrow_store(folder: str, access: StoreAccess | None) -> ArrowStore | None:
    """Where compaction's tasks write with pyarrow (`write_arrow`), or
    None for Spark's writer, as the `compaction_writer` setting says: `auto` takes pyarrow
    for a table on S3 whose store settings mor has (its tasks write with the same ones:
    Spark's commit protocol makes folders and renames, which S3 Tables buckets refuse and
    S3 turns into copies), Spark's writer for every other table."""
    from mor.planner.settings import current

    chosen = current().compaction_writer
    s3 = folder.split("://", 1)[0] in ("s3", "s3a", "s3n")
    local = "://" not in folder or folder.startswith("file:")
    if chosen == "spark" or (chosen == "auto" and not (s3 and access is not None)):
        return None
    if s3:
        root = folder.split("://", 1)[1]
        return ArrowStore("s3", root, access.arrow_options() if access is not None else ())
    if local:
        return ArrowStore("local", folder.removeprefix("file://").removeprefix("file:"))
    raise UnsupportedError(
        f"compaction_writer=arrow writes tables on S3 and local folders, not {folder}: "
        "set compaction_writer to spark or auto"
    )


ROW_GROUP_BYTES = 128 << 20  # rows buffered per row group (Iceberg's default row-group size)


def write_arrow(
    spark: SparkSession,
    plan: Plan,
    columns: Sequence[Column],
    groups: Sequence[Group],
    folder: str,
    store: ArrowStore,
    compression: str,
) -> list[Written]:
    """Write the live rows of `plan` as `write_compacted` does, but each Spark task writes
    its files with pyarrow straight to their final paths under `folder` (`<folder>/
    mor_group=<i>/<task>-<uuid>.parquet`, through `store`), as Iceberg's own writers do: no
    temporary folder, no rename, no listing, no folder request (buckets of S3 Tables refuse
    those). The files the job returns are the output; a failed or repeated task attempt's
    file is returned by no task (the caller clears the folder of whatever it does not
    commit). The columns carry their field ids, timestamps are microseconds; a task given
    no row writes no file."""
    from mor.physical.spark.workers import check_python_workers

    check_python_workers(spark, "compaction (compaction_writer=arrow)")
    out, partition = _rows(spark, plan, columns, groups)
    target = _nullable(_arrow_schema(columns))
    task = _arrow_task(
        store, folder.rstrip("/"), target.serialize().to_pybytes(), compression, bool(partition)
    )
    result = "path string, grp int, rows long, size long, footer binary"
    try:
        got = out.mapInArrow(task, result).collect()
    except MorError:
        raise
    except Exception as e:  # noqa: BLE001 - Spark's failure, as one line
        if "No module named 'pyarrow'" in str(e):
            raise UnsupportedError(
                "compaction's Spark tasks write with pyarrow, which the executors' Python "
                "lacks: install pyarrow there (or point PYSPARK_PYTHON at an environment "
                "that has it), or set compaction_writer=spark"
            ) from e
        raise spark_failure(e) from e
    return [Written(r.path, r.grp, r.rows, r.size, bytes(r.footer)) for r in got]


def _arrow_schema(columns: Sequence[Column]) -> pa.Schema:
    """The Arrow schema of the written files: pyiceberg's for the columns' Iceberg types,
    with their field ids (nested ones too)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType, NestedField

    fields = [
        NestedField(
            c.field_id, c.name, IcebergType.model_validate_json(c.type_json), required=False
        )
        for c in columns
    ]
    return schema_to_pyarrow(Schema(*fields))


def _nullable(schema: pa.Schema) -> pa.Schema:
    """`schema` with every field (struct fields too) nullable, as Spark's writer writes
    them: a task's column is Spark's, which may hold nulls where the Iceberg field is
    optional, and a reader of Iceberg takes an optional column for a required one."""

    def fix(f: pa.Field) -> pa.Field:
        t = f.type
        if pa.types.is_struct(t):
            t = pa.struct([fix(t.field(i)) for i in range(t.num_fields)])
        return pa.field(f.name, t, nullable=True, metadata=f.metadata)

    return pa.schema([fix(f) for f in schema])


def _arrow_task(
    store: ArrowStore, folder: str, schema: bytes, compression: str, grouped: bool
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function each task of `write_arrow` runs. Built here and pickled by value (a
    nested function): the executors need pyarrow, not mor."""
    kind, root, options = store.kind, store.root.rstrip("/"), dict(store.options)
    codec = "none" if compression == "uncompressed" else compression
    group_column, limit = GROUP, ROW_GROUP_BYTES

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import io
        import uuid

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.fs as pafs
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        target = pa.ipc.read_schema(pa.py_buffer(schema))
        fs = pafs.S3FileSystem(**options) if kind == "s3" else pafs.LocalFileSystem()
        ctx = TaskContext.get()
        task = f"{ctx.partitionId():05d}" if ctx is not None else "00000"
        files: dict[int, list] = {}  # group -> [name, stream, writer, buffered, bytes, rows]

        def flush(state: list) -> None:
            if state[3]:
                state[2].write_table(pa.concat_tables(state[3]), row_group_size=1 << 30)
                state[3], state[4] = [], 0

        def add(g: int, table: pa.Table) -> None:
            state = files.get(g)
            if state is None:
                name = f"{group_column}={g}/{task}-{uuid.uuid4()}.parquet"
                if kind == "local":
                    fs.create_dir(f"{root}/{group_column}={g}", recursive=True)
                stream = fs.open_output_stream(f"{root}/{name}")
                writer = pq.ParquetWriter(stream, target, compression=codec)
                state = files[g] = [name, stream, writer, [], 0, 0]
            arrays = [table.column(f.name).cast(f.type) for f in target]
            state[3].append(pa.Table.from_arrays(arrays, schema=target))
            state[4] += table.nbytes
            state[5] += table.num_rows
            if state[4] >= limit:
                flush(state)

        for batch in batches:
            if not batch.num_rows:
                continue
            table = pa.Table.from_batches([batch])
            if not grouped:
                add(0, table)
                continue
            column = table.column(group_column)
            for g in pc.unique(column).to_pylist():
                add(g, table.filter(pc.equal(column, g)))
        for g, state in sorted(files.items()):
            name, stream, writer, _, _, rows = state
            flush(state)
            writer.close()
            size = stream.tell()
            stream.close()
            footer = io.BytesIO()
            writer.writer.metadata.write_metadata_file(footer)
            yield pa.RecordBatch.from_pydict(
                {
                    "path": [f"{folder}/{name}"],
                    "grp": pa.array([g], pa.int32()),
                    "rows": [rows],
                    "size": [size],
                    "footer": [footer.getvalue()],
                }
            )

    return write


def _with_id(c: Column) -> F.Column:
    """The column with its field id (and its struct fields' ids, through a cast to the
    same type carrying them) in the metadata Spark's Parquet writer turns into field ids."""
    col = F.col(f"`{c.name}`")
    dtype = spark_type(c.type_json, c.name)
    if not isinstance(dtype, (T.StructType,)):
        return col.alias(c.name, metadata={FIELD_ID_KEY: c.field_id})
    return col.cast(dtype).alias(c.name, metadata={FIELD_ID_KEY: c.field_id})
