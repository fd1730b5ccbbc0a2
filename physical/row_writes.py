"""The Spark job of a row-level write (DELETE, UPDATE, MERGE): its rows stay on the executors.

One Spark action over the statement's rows query (a DataFrame mor built): its tasks
(physical/tasks/row_files.rows_stage) write the new rows as data files and each data file's
positions as a position delete file or a deletion vector merged with its current deletes. When
several tasks wrote positions for one data file (a file Spark split, rows a join spread), a
second job of a few tasks joins them (`merge_stage`). The driver collects one record per file
written (paths, sizes, counts, footers, a vector's place in its Puffin file) and nothing per
row.

The tasks write with pyarrow through the table's own store settings: the file system of the
table's FileIO (pyiceberg's PyArrowFileIO: local folders, S3 with the catalog's vended
credentials, GCS, Azure, HDFS) ships with them (`ArrowPlace`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyarrow.fs import LocalFileSystem

from mor.physical.spark.spark_errors import spark_failure
from mor.physical.spark.workers import check_python_workers
from mor.physical.tasks import by_value
from mor.physical.tasks.row_files import RECORD, merge_stage, rows_stage
from mor.planner.errors import MorError, UnsupportedError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class ArrowPlace:
    """A folder (or file) as the tasks reach it: a pyarrow file system and its path there
    (the file system carries the table's store settings: kept out of every repr)."""

    fs: Any = field(repr=False)
    path: str


def arrow_place(io: Any, location: str) -> ArrowPlace:
    """`location` (a path as the store names it, after any path map) through the FileIO
    `io`'s file system: pyiceberg's PyArrowFileIO, or one made from `io`'s properties."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    inner = io
    while not isinstance(inner, PyArrowFileIO) and getattr(inner, "inner", None) is not None:
        inner = inner.inner  # mor's wrappers: the path map's, the request counter's
    if not isinstance(inner, PyArrowFileIO):
        inner = PyArrowFileIO(properties=dict(getattr(io, "properties", {}) or {}))
    scheme, netloc, path = inner.parse_location(location, inner.properties)
    try:
        fs = inner.fs_by_scheme(scheme, netloc)
    except ValueError as e:
        raise UnsupportedError(f"{location}: mor's tasks cannot write there ({e})") from None
    if isinstance(fs, LocalFileSystem):  # pyiceberg's subclass: the tasks need pyarrow's own
        fs = LocalFileSystem()
    return ArrowPlace(fs, path)


@dataclass(frozen=True)
class RowWriteJob:
    """What the tasks of one statement need, all plain values (pickled with them).

    `kind`: DELETE, UPDATE or MERGE; `table`: its name (in errors); `v3`: deletion vectors;
    `folder`: where the files go; `check`: a MERGE's cardinality rule; `schema`: the data
    files' Arrow schema (serialized; None for a DELETE); `partition`, `sort`, `codec`,
    `target_bytes`: how they are laid out; `current` and `filesystems`: v3, per data file as
    recorded the deletes a new vector merges (physical/tasks/row_files._PositionsWriter)."""

    kind: str
    table: str
    v3: bool
    folder: ArrowPlace
    check: bool = False
    schema: bytes | None = None
    partition: tuple[Any, ...] = ()
    sort: tuple[Any, ...] = ()
    codec: str = "zstd"
    target_bytes: int = 512 << 20
    current: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict, repr=False)
    filesystems: dict[str, Any] = field(default_factory=dict, repr=False)
    created_by: str = "mor"


def run_row_write_job(df: DataFrame, job: RowWriteJob) -> list[dict[str, Any]]:
    """Run the job over the rows query `df`: the records of the files written (as dicts of
    physical/tasks/row_files.RECORD), one Spark action, and a second one of a few tasks when
    several tasks wrote positions for one data file. A failure inside the tasks is one
    MorError line."""
    check_python_workers(df.sparkSession, f"{job.kind} on {job.table}")
    by_value()
    place = job.folder
    args = {
        "fs": place.fs,
        "folder": place.path,
        "table": job.table,
        "check": job.check,
        "kind": job.kind,
        "v3": job.v3,
        "current": job.current,
        "filesystems": job.filesystems,
        "created_by": job.created_by,
        "schema": job.schema,
        "partition": [list(p) for p in job.partition],
        "sort": [list(s) for s in job.sort],
        "codec": job.codec,
        "target_bytes": job.target_bytes,
    }
    records = collected(df.mapInArrow(rows_stage(args), record_type()))
    per_file: dict[str, int] = {}
    for r in records:
        if r["kind"] in POSITIONS:
            per_file[r["file"]] = per_file.get(r["file"], 0) + 1
    split = {f for f, n in per_file.items() if n > 1}
    if split:  # their parts joined into one file each
        parts = [r for r in records if r["kind"] in POSITIONS and r["file"] in split]
        rows = [tuple(r[k] for k in RECORD.names) for r in parts]
        joined = df.sparkSession.createDataFrame(rows, record_type()).repartition("file")
        records = [r for r in records if not (r["kind"] in POSITIONS and r["file"] in split)]
        records += collected(joined.mapInArrow(merge_stage(args), record_type()))
    return [r for r in records if r["kind"] != "matched"]


POSITIONS = ("delete_file", "dv", "matched")  # the records of a data file's positions


def record_type() -> Any:
    """The tasks' records' Spark type (RECORD's columns), built here: given as DDL text,
    pyspark parses it in the JVM, one more round trip for every write."""
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    kinds = {"string": StringType(), "binary": BinaryType(), "int64": LongType()}
    return StructType([StructField(f.name, kinds[str(f.type)], True) for f in RECORD])


def collected(records: DataFrame) -> list[dict[str, Any]]:
    """The records (a few rows: one per file written), as dicts; Spark's failure in one
    line."""
    try:
        got = records.collect()
    except MorError:
        raise
    except Exception as e:  # noqa: BLE001 - Spark's failure (a task's `mor: ...` too), one line
        if "No module named 'pyarrow'" in str(e):
            raise UnsupportedError(
                "the row-level write's Spark tasks write with pyarrow, which the executors' "
                "Python lacks: install pyarrow there (or point PYSPARK_PYTHON at an "
                "environment that has it)"
            ) from e
        raise spark_failure(e) from e
    return [
        {k: bytes(v) if isinstance(v, bytearray) else v for k, v in r.asDict().items()} for r in got
    ]
