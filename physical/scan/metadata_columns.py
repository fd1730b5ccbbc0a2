"""The metadata columns of a scan, read only when the query names them, as Iceberg's Spark
reader gives them: `_pos` (the row's position in its file), `_file` (its path as recorded),
`_spec_id`, `_partition` (a struct of every spec's partition fields), and on v3 tables the row
lineage columns `_row_id` and `_last_updated_sequence_number`.

Per-file values come from a broadcast table of one row per data file read, joined on the file
key (tables.py: inline when small, else createDataFrame); `_partition` from a second table of
one row per partition, joined on the partition's id.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from mor.physical.scan.guards import POS
from mor.physical.scan.reads import Read
from mor.physical.scan.tables import SMALL, sql_literal, values, with_file_columns
from mor.physical.scan.types import spark_type
from mor.planner.errors import UnsupportedError
from mor.planner.nodes import LINEAGE_COLUMNS, DataTask, IcebergScan

STORED = "$stored"  # + a row lineage column: the value in the data file
HPART = "$hidden_partition"


def hidden_type(scan: IcebergScan, name: str) -> T.DataType:
    """The Spark type of a metadata column, as Iceberg's Spark reader types it."""
    if name == "_file":
        return T.StringType()
    if name == "_pos":
        return T.LongType()
    if name == "_spec_id":
        return T.IntegerType()
    if name in LINEAGE_COLUMNS:
        return T.LongType()
    fields = scan.files.partition_fields if scan.files else ()
    return T.StructType(
        [T.StructField(f.name, spark_type(f.type_str, f"{scan.table} _partition")) for f in fields]
    )


def with_hidden(spark: SparkSession, scan: IcebergScan, df: DataFrame, read: Read) -> DataFrame:
    """Adds the metadata columns the query reads: _pos from the row index, the others per file
    (path as recorded, spec id; partition through its id) and lineage."""
    if "_pos" in scan.hidden:
        df = df.withColumn("_pos", F.col(POS))
    lineage = [h for h in scan.hidden if h in LINEAGE_COLUMNS]
    if lineage:
        df = _with_lineage(spark, scan, df, read, lineage)
    ptype = hidden_type(scan, "_partition")
    fields = scan.files.partition_fields if scan.files else ()
    if "_partition" in scan.hidden and not fields:
        # an unpartitioned table: NULL of an empty struct, as Iceberg's reader gives (Spark
        # cannot build an empty struct value)
        df = df.withColumn("_partition", F.lit(None).cast(ptype))
    wanted = [h for h in ("_file", "_spec_id") if h in scan.hidden]
    partition = "_partition" in scan.hidden and bool(fields)
    if not wanted and not partition:
        return df
    names = tuple(wanted) + ((HPART,) if partition else ())
    types = tuple(T.StringType() if h == "_file" else T.IntegerType() for h in names)
    tasks = scan.data_files()

    def value(t: DataTask, h: str) -> Any:
        return t.path if h == "_file" else t.spec_id if h == "_spec_id" else t.partition_id

    rows = [(read.keys[t.file_id], *(value(t, h) for h in names)) for t in tasks]
    df = with_file_columns(spark, df, read.key, rows, names, types)
    if partition:
        df = df.join(F.broadcast(_partitions(spark, scan, tasks, ptype)), HPART, "left")
    return df


def _partitions(
    spark: SparkSession, scan: IcebergScan, tasks: Sequence[DataTask], ptype: T.StructType
) -> DataFrame:
    """($hidden_partition, _partition) for each partition of these files."""
    fields = scan.files.partition_fields if scan.files else ()
    first = {}
    for t in tasks:
        first.setdefault(t.partition_id, t)
    if len(first) <= SMALL and not _connect(spark):
        rows = []
        for pid, t in sorted(first.items()):
            given = dict(t.partition)
            parts = [
                f"{sql_literal(f.name, T.StringType())}, "
                f"{_literal(given.get(f.field_id), sf.dataType, scan.table)}"
                for f, sf in zip(fields, ptype.fields)
            ]
            rows.append([f"CAST({int(pid)} AS INT)", f"named_struct({', '.join(parts)})"])
        return values(spark, (HPART, "_partition"), rows)
    data = []
    for pid, t in sorted(first.items()):
        given = dict(t.partition)
        data.append(
            (
                pid,
                tuple(
                    _python(given.get(f.field_id), sf.dataType, scan.table)
                    for f, sf in zip(fields, ptype.fields)
                ),
            )
        )
    schema = T.StructType(
        [T.StructField(HPART, T.IntegerType()), T.StructField("_partition", ptype)]
    )
    return spark.createDataFrame(data, schema)


def _connect(spark: SparkSession) -> bool:
    from mor.physical.spark.session import is_connect

    return is_connect(spark)


def _with_lineage(
    spark: SparkSession, scan: IcebergScan, df: DataFrame, read: Read, lineage: list[str]
) -> DataFrame:
    """`_row_id`: the stored value, else the file's first_row_id + _pos;
    `_last_updated_sequence_number`: the stored value, else the file's data sequence number, as
    the spec says (Iceberg 1.10.2's reader gives the file sequence number: apache/iceberg#17039;
    1.12.0's agrees with the spec).
    A file without a first_row_id (written before the table was upgraded to v3) has no
    lineage: both are NULL, as Iceberg's reader gives them. The per-file values come from a
    broadcast table on the file key, as the other metadata columns do."""
    rows = [
        (
            read.keys[t.file_id],
            t.first_row_id,
            None if t.first_row_id is None else t.data_seq,
        )
        for t in scan.data_files()
    ]
    names = ("$first_row_id", "$lineage_seq")
    df = with_file_columns(spark, df, read.key, rows, names, (T.LongType(),) * 2)
    if "_row_id" in lineage:
        inherited = F.col("`$first_row_id`") + F.col(POS)
        df = df.withColumn("_row_id", F.coalesce(F.col(f"`{STORED}_row_id`"), inherited))
    if "_last_updated_sequence_number" in lineage:
        stored = F.col(f"`{STORED}_last_updated_sequence_number`")
        df = df.withColumn(
            "_last_updated_sequence_number", F.coalesce(stored, F.col("`$lineage_seq`"))
        )
    return df


def _unsupported(dtype: T.DataType, table: str) -> UnsupportedError:
    return UnsupportedError(
        f"table {table}: _partition with a {dtype.simpleString()} partition value is not "
        "supported yet"
    )


def _literal(v: Any, dtype: T.DataType, table: str) -> str:
    """A partition value as a Spark SQL literal of its result type."""
    if v is None:
        return f"CAST(NULL AS {dtype.simpleString()})"
    if isinstance(dtype, (T.IntegerType, T.LongType, T.StringType)):
        return sql_literal(v, dtype)
    if isinstance(dtype, T.BooleanType):
        return "true" if v else "false"
    if isinstance(dtype, T.DateType):
        days = v if isinstance(v, int) else (v - dt.date(1970, 1, 1)).days
        return f"date_add(DATE '1970-01-01', {int(days)})"
    if isinstance(dtype, (T.DoubleType, T.FloatType)):
        return f"CAST('{float(v)!r}' AS {dtype.simpleString()})"
    if isinstance(dtype, T.DecimalType):
        return f"CAST('{v}' AS {dtype.simpleString()})"
    raise _unsupported(dtype, table)


def _python(v: Any, dtype: T.DataType, table: str) -> Any:
    """A partition value as the Python value createDataFrame takes for its result type."""
    if isinstance(v, uuid.UUID):  # an identity partition on a uuid column: its canonical string
        return str(v)
    if v is None or isinstance(
        dtype,
        (
            T.IntegerType,
            T.LongType,
            T.StringType,
            T.BooleanType,
            T.DoubleType,
            T.FloatType,
            T.DecimalType,
        ),
    ):
        return v
    if isinstance(dtype, T.DateType):
        return dt.date(1970, 1, 1) + dt.timedelta(days=v) if isinstance(v, int) else v
    raise _unsupported(dtype, table)
