"""The Spark job of a row-level write (DELETE, UPDATE, MERGE): its rows stay on the executors.

One Spark action over the statement's rows query (a DataFrame mor built): stage 1 runs in the
rows query's own tasks (physical/tasks/row_files.rows_stage: each data file's positions
gathered, new rows written as data files), the records are repartitioned by data file, and
stage 2 writes each data file's positions (a position delete file, or a deletion vector merged
with its current deletes). The driver collects one record per file written (paths, sizes,
counts, footers, a vector's place in its Puffin file) and nothing per row.

The tasks write with pyarrow through the table's own store settings: the file system of the
table's FileIO (pyiceberg's PyArrowFileIO: local folders, S3 with the catalog's vended
credentials, GCS, Azure, HDFS) ships with them (`ArrowPlace`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyarrow.fs import LocalFileSystem

from mor.physical.spark.spark_errors import spark_failure
from mor.physical.tasks import by_value
from mor.physical.tasks.row_files import RECORD_DDL, deletes_stage, rows_stage
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
    recorded the deletes a new vector merges (physical/tasks/row_files.deletes_stage)."""

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
    physical/tasks/row_files.RECORD), one Spark action. A failure inside the tasks is one
    MorError line."""
    by_value()
    place = job.folder
    common = {"fs": place.fs, "folder": place.path, "table": job.table, "check": job.check}
    first = rows_stage(
        {
            **common,
            "kind": job.kind,
            "schema": job.schema,
            "partition": [list(p) for p in job.partition],
            "sort": [list(s) for s in job.sort],
            "codec": job.codec,
            "target_bytes": job.target_bytes,
        }
    )
    second = deletes_stage(
        {
            **common,
            "v3": job.v3,
            "current": job.current,
            "filesystems": job.filesystems,
            "created_by": job.created_by,
        }
    )
    records = df.mapInArrow(first, RECORD_DDL).repartition("file").mapInArrow(second, RECORD_DDL)
    try:
        got = records.collect()  # a few rows: one per file written
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
