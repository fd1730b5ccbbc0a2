"""The files mor writes into a table, and their manifest records with full statistics.

- delete files in Parquet (`write_delete_file`): position deletes (file-scoped, as
  `write_position_deletes` writes them for the conversion, or naming several files, as the
  test tables' writer does) and equality deletes, each record with the column metrics of its
  footer (`file_path` bounds untruncated, so that a reader sees which data file a position
  delete file names);
- the record of a Parquet data file a Spark job wrote (`data_file_of`, from its footer, with
  the metrics the table's `write.metadata.metrics.*` ask for);
- the record of a deletion vector, one blob of a Puffin file (`dv_file`; the blobs are made by
  physical/deletes/dv.py's `puffin`);
- listing and deleting what an operation wrote (`list_files`, `delete_files`), always through
  the table's FileIO: an object store's credentials and endpoint are those the catalog gave.

Every path is under the table's `<location>/data/`, named `mor-<uuid>...`, so that what mor
wrote is told apart from what other writers did (it never deletes a file it did not write).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.manifest import DATA_FILE_TYPE, DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from mor.planner.delete_index import names_one
from mor.planner.errors import DataFileError, MorError
from mor.planner.nodes import LINEAGE_COLUMNS

POSITION_DELETE_SCHEMA = Schema(
    NestedField(2147483546, "file_path", StringType(), required=True),
    NestedField(2147483545, "pos", LongType(), required=True),
)
FULL_METRICS = {"write.metadata.metrics.default": "full"}  # file_path bounds untruncated


def partition_key(partition: Any) -> tuple[Any, ...]:
    """A partition's values as a tuple, whether given as pyiceberg's Record (a new file's) or
    as a tuple (planner's manifest reader's): what two files of one partition share."""
    return tuple(partition) if partition is not None else ()


def partition_record(partition: Any) -> Record:
    """A partition as pyiceberg's manifest writer takes it: a Record (planner's manifest
    reader gives the values as a tuple, in the spec's order)."""
    return partition if isinstance(partition, Record) else Record(*partition)


def write_delete_file(
    table: Table,
    rows: pa.Table,
    schema: Schema,
    content: DataFileContent,
    partition: Record,
    spec_id: int,
    equality_ids: Sequence[int] | None = None,
    prefix: str = "mor",
) -> DataFile:
    """Write `rows` (in `schema`, the delete file's own) as a Parquet delete file through the
    table's FileIO under `<location>/data/<prefix>-<uuid>-deletes.parquet`, and its manifest
    record in `partition` of spec `spec_id`, with full column metrics from its footer."""
    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink)
    data = sink.getvalue()
    path = f"{table.metadata.location.rstrip('/')}/data/{prefix}-{uuid.uuid4()}-deletes.parquet"
    write_object(table.io, path, data.to_pybytes())
    meta = pq.read_metadata(pa.BufferReader(data))
    return delete_file_of(path, meta, len(data), schema, content, partition, spec_id, equality_ids)


def delete_file_of(
    path: str,
    meta: pq.FileMetaData,
    size: int,
    schema: Schema,
    content: DataFileContent,
    partition: Any,
    spec_id: int,
    equality_ids: Sequence[int] | None = None,
) -> DataFile:
    """The manifest record of a Parquet delete file (in `schema`, the delete file's own) from
    its footer, with full column metrics (a position delete file's `file_path` bounds whole,
    so that a reader sees which data file it names)."""
    stats = data_file_statistics_from_parquet_metadata(
        meta,
        compute_statistics_plan(schema, FULL_METRICS),
        parquet_path_to_id_mapping(schema),
    )
    f = DataFile.from_args(
        content=content,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition_record(partition),
        file_size_in_bytes=size,
        equality_ids=None if equality_ids is None else list(equality_ids),
        **stats.to_serialized_dict(),
    )
    f.spec_id = spec_id
    return f


class MappedIO(FileIO):
    """The FileIO a commit reads and writes a table's files through when a path map applies
    to them (a table copied or moved): every path, as the table records it, opened where
    the map puts it; the paths recorded stay the table's own."""

    def __init__(self, inner: FileIO, path_map: Callable[[str], str]) -> None:
        super().__init__(properties=inner.properties)
        self.inner = inner
        self._map = path_map

    def new_input(self, location: str) -> Any:
        return self.inner.new_input(self._map(location))

    def new_output(self, location: str) -> Any:
        return self.inner.new_output(self._map(location))

    def delete(self, location: Any) -> None:
        self.inner.delete(self._map(location if isinstance(location, str) else location.location))


def write_object(io: FileIO, path: str, data: bytes) -> None:
    """Write a new file mor made (a delete file, a Puffin file) at `path`; the store's refusal
    as one line naming the file (a store may refuse some kinds of object: S3 Tables buckets
    take Parquet, Avro and JSON, not `.puffin`)."""
    try:
        with io.new_output(path).create(overwrite=False) as out:
            out.write(data)
    except OSError as e:
        reason = " ".join(str(e).split())
        kind = path.rsplit(".", 1)[-1]
        hint = (
            f"; a store that refuses .{kind} objects (S3 Tables buckets do) cannot hold them"
            if "ACCESS_DENIED" in reason or "AccessDenied" in reason or "403" in reason
            else ""
        )
        raise DataFileError(f"cannot write {path}: {reason[:300]}{hint}") from None


def position_rows(positions: dict[str, Iterable[int]]) -> pa.Table:
    """The rows of a position delete file, {data file path: positions}, sorted by path and
    position as the spec asks."""
    rows = sorted((p, int(i)) for p, ps in positions.items() for i in ps)
    return pa.table(
        {
            "file_path": pa.array([r[0] for r in rows], pa.string()),
            "pos": pa.array([r[1] for r in rows], pa.int64()),
        },
        schema=schema_to_pyarrow(POSITION_DELETE_SCHEMA),
    )


def write_position_deletes(table: Table, data_file: Any, positions: pa.Array) -> DataFile:
    """A position delete file naming `data_file` alone (file-scoped: its `file_path` bounds
    are that path, whole), rows sorted by position, in the data file's partition and spec."""
    rows = position_rows({data_file.file_path: positions.cast(pa.int64()).to_pylist()})
    return write_delete_file(
        table,
        rows,
        POSITION_DELETE_SCHEMA,
        DataFileContent.POSITION_DELETES,
        data_file.partition,
        data_file.spec_id,
    )


def dv_file(
    data_file: str,
    partition: Any,
    spec_id: int,
    puffin_path: str,
    puffin_size: int,
    offset: int,
    length: int,
    rows: int,
) -> DataFile:
    """The manifest record of a deletion vector of `data_file` (as recorded; its partition
    and spec), the blob at `offset` of the Puffin file `puffin_path`, holding `rows`
    positions."""
    f = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path=puffin_path,
        file_format=FileFormat.PUFFIN,
        partition=partition_record(partition),
        record_count=rows,
        file_size_in_bytes=puffin_size,
        referenced_data_file=data_file,
        content_offset=offset,
        content_size_in_bytes=length,
    )
    f.spec_id = spec_id
    return f


_V3_FIELDS = [f.name for f in DATA_FILE_TYPE[3].fields]


def v3_field(f: DataFile, name: str) -> Any:
    """A v3 field of a DataFile (`referenced_data_file`, `content_offset`,
    `content_size_in_bytes`, `first_row_id`): pyiceberg 0.12 has no property for them, and a
    DataFile bound to the v2 struct has none (None). A file of planner's manifest reader has
    them as attributes."""
    if not isinstance(f, DataFile):
        return getattr(f, name, None)
    i = _V3_FIELDS.index(name)
    try:
        return f[i]
    except IndexError:
        return None


def content_size(f: Any) -> int:
    """A file's bytes as Iceberg's `SnapshotSummary` counts them: a deletion vector's blob,
    else the whole file."""
    blob = v3_field(f, "content_size_in_bytes") if f.file_format == FileFormat.PUFFIN else None
    return int(blob) if blob is not None else int(f.file_size_in_bytes)


def named_data_file(f: Any) -> str | None:
    """The one data file a position delete file names (its `file_path` bounds are equal, or
    its referenced data file), or None when it may name several."""
    ref = v3_field(f, "referenced_data_file")
    return str(ref) if ref else names_one(f)


def data_file_of(
    table: Table,
    path: str,
    partition: Any,
    spec_id: int,
    schema: Schema | None = None,
    footer: tuple[pq.FileMetaData, int] | None = None,
    nan_counts: dict[int, int] | None = None,
) -> DataFile:
    """The manifest record of a Parquet data file mor wrote in `schema` (default: the
    table's): its size, row count and the column metrics the table's
    `write.metadata.metrics.*` properties ask for, from its footer (so pruning by column
    bounds keeps working on it). On a v3 table the record is bound to the v3 struct, its
    `first_row_id` null (inherited from its manifest's), and the row lineage columns the file
    carries get no metrics: a null `_row_id` stands for one inherited, which bounds of the
    stored values would not cover. `footer`: the file's footer and size as its writer
    returned them (no request for the file). As Iceberg's Parquet writer records them: no
    counts or bounds for a field inside a list or a map (only its column size), and, given
    the NaN counts the writer made (`nan_counts`, per float or double field id), those."""
    if footer is None:
        inp = table.io.new_input(path)
        with inp.open() as stream:
            meta = pq.read_metadata(stream)
        footer = (meta, len(inp))
    meta, size = footer
    schema = schema or table.schema()
    props = table.metadata.properties
    version = table.metadata.format_version
    if version >= 3:
        lineage = [
            NestedField(i, name, LongType(), required=False) for name, i in LINEAGE_COLUMNS.items()
        ]
        props = {**props, **{f"write.metadata.metrics.column.{f.name}": "none" for f in lineage}}
        schema = Schema(*schema.fields, *lineage, schema_id=schema.schema_id)
    repeated = repeated_ids(schema)
    stats = data_file_statistics_from_parquet_metadata(
        meta,
        metrics_plan(schema, props, repeated),
        parquet_path_to_id_mapping(schema),
    )
    values = stats.to_serialized_dict()
    for key in ("value_counts", "null_value_counts", "lower_bounds", "upper_bounds"):
        values[key] = {k: v for k, v in values[key].items() if k not in repeated}
    if nan_counts is not None:
        values["nan_value_counts"] = {int(k): int(v) for k, v in nan_counts.items()}
    f = DataFile.from_args(
        _table_format_version=version,
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition_record(partition),
        file_size_in_bytes=size,
        **values,
    )
    f.spec_id = spec_id
    return f


def metrics_plan(schema: Schema, props: dict[str, str], repeated: set[int]) -> dict[int, Any]:
    """pyiceberg's metrics plan, with a field inside a struct (not a list or a map) given the
    bounds Iceberg's writer records for it (pyiceberg keeps its counts only): the table's
    `write.metadata.metrics.*` mode, truncate(16) by default for strings and binary, full for
    the others."""
    from pyiceberg.io.pyarrow import (
        MetricModeTypes,
        MetricsMode,
        StatisticsCollector,
        match_metrics_mode,
    )
    from pyiceberg.table import TableProperties
    from pyiceberg.types import BinaryType, StringType

    plan = compute_statistics_plan(schema, props)
    default = props.get(
        TableProperties.DEFAULT_WRITE_METRICS_MODE,
        TableProperties.DEFAULT_WRITE_METRICS_MODE_DEFAULT,
    )
    for fid, col in list(plan.items()):
        if fid in repeated or "." not in col.column_name:
            continue
        mode = match_metrics_mode(
            props.get(
                f"{TableProperties.METRICS_MODE_COLUMN_CONF_PREFIX}.{col.column_name}", default
            )
        )
        textual = isinstance(col.iceberg_type, (StringType, BinaryType))
        if not textual and mode.type == MetricModeTypes.TRUNCATE:
            mode = MetricsMode(MetricModeTypes.FULL)
        plan[fid] = StatisticsCollector(fid, col.iceberg_type, mode, col.column_name)
    return plan


def repeated_ids(schema: Schema) -> set[int]:
    """The field ids inside a list or a map (their elements, keys and values, and anything
    below them): Iceberg's writer keeps no counts or bounds for them."""
    from pyiceberg.types import ListType, MapType, StructType

    out: set[int] = set()

    def visit(t: Any, inside: bool) -> None:
        if isinstance(t, StructType):
            for f in t.fields:
                if inside:
                    out.add(f.field_id)
                visit(f.field_type, inside)
        elif isinstance(t, ListType):
            out.add(t.element_id)
            visit(t.element_type, True)
        elif isinstance(t, MapType):
            out.update((t.key_id, t.value_id))
            visit(t.key_type, True)
            visit(t.value_type, True)

    visit(schema.as_struct(), False)
    return out


def delete_files(io: FileIO, paths: Iterable[str]) -> list[str]:
    """Delete these files (each once); the paths that could not be deleted."""
    left = []
    for p in dict.fromkeys(paths):
        try:
            io.delete(p)
        except FileNotFoundError:
            continue
        except Exception:  # noqa: BLE001 - the store refused: named by the caller
            left.append(p)
    return left


def list_files(io: Any, location: str) -> list[str]:
    """Every file below `location` (a folder), named as `location` names it: through the
    table's FileIO (pyiceberg's PyArrowFileIO, the one that lists), so an object store's
    credentials and endpoint are those the catalog gave."""
    return sorted(p for p, _, _ in listed_files(io, location))


def listed_files(io: Any, location: str) -> list[tuple[str, int, float]]:
    """`list_files` with each file's size in bytes and its age in seconds (by the store's
    modification time)."""
    import time

    now = time.time()
    return [(p, size, now - mtime_ms / 1000) for p, size, mtime_ms in listing(io, location)]


def listing(io: Any, location: str, qualify: bool = False) -> list[tuple[str, int, int]]:
    """Every file below `location` (a folder; none when it does not exist) with its size in
    bytes and its modification time in milliseconds (0 when the store gives none). `qualify`:
    a local path without a scheme is named `file:<path>`, as Hadoop's listing names it."""
    from pyarrow.fs import FileSelector, FileType

    seen = 0
    while getattr(io, "fs_by_scheme", None) is None and hasattr(io, "inner") and seen < 8:
        io, seen = io.inner, seen + 1  # a FileIO wrapping pyiceberg's (counting, path-mapped)
    fs_of = getattr(io, "fs_by_scheme", None)
    if fs_of is None:
        raise MorError(
            f"{location}: listing it needs pyiceberg's PyArrowFileIO (py-io-impl), not "
            f"{type(io).__name__}"
        )
    scheme, netloc, path = io.parse_location(location, io.properties)
    fs = fs_of(scheme, netloc)
    infos = fs.get_file_info(FileSelector(path, recursive=True, allow_not_found=True))
    root, prefix = path.rstrip("/"), location.rstrip("/")
    if qualify and prefix.startswith("/"):
        prefix = "file:" + prefix
    return [
        (
            prefix + i.path[len(root) :],
            i.size or 0,
            int(i.mtime.timestamp() * 1000) if i.mtime is not None else 0,
        )
        for i in infos
        if i.type == FileType.File
    ]


def delete_each(
    io: FileIO,
    paths: list[str],
    threads: int = 1,
    interrupted: Callable[[], bool] = lambda: False,
) -> list[tuple[str, str]]:
    """Delete `paths` through `io` on `threads` threads, each once; the (path, why) of those
    not deleted. A file already gone is not a failure (another run, a store that lists late);
    once `interrupted()` nothing more is deleted. A local file's Hadoop checksum file
    (`.<name>.crc`, written beside it by Spark's and Iceberg's Java writers, which delete it with
    the file) goes with it."""
    from concurrent.futures import ThreadPoolExecutor

    def one(path: str) -> tuple[str, str] | None:
        if interrupted():
            return (path, "not deleted: interrupted")
        try:
            io.delete(path)
        except FileNotFoundError:
            return None
        except Exception as e:  # noqa: BLE001 - the store's refusal, counted and named
            return (path, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        _sidecar(path)
        return None

    unique = list(dict.fromkeys(paths))
    if threads <= 1 or len(unique) < 2:
        return [f for f in map(one, unique) if f is not None]

    def chunk(part: list[str]) -> list[tuple[str, str]]:
        return [f for f in map(one, part) if f is not None]

    size = max(1, min(256, len(unique) // (threads * 4)))  # few futures, work spread
    parts = [unique[i : i + size] for i in range(0, len(unique), size)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return [f for done in pool.map(chunk, parts) for f in done]


def _sidecar(path: str) -> None:
    import os

    if "://" in path and not path.startswith("file:"):
        return
    local = path.removeprefix("file:")
    if local.startswith("//"):
        local = local[2:]
    folder, name = os.path.split(local)
    try:
        os.remove(os.path.join(folder, f".{name}.crc"))
    except OSError:
        pass
