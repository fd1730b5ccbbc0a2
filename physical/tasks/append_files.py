"""What the tasks of an INSERT (or CREATE TABLE AS SELECT, or a DataFrame written to a table)
run, with pyarrow: every row they get is a new row of the table, written as Parquet data
files of the table's current partition spec. The driver gets one record per file written
(physical/tasks/row_files.RECORD: its name, rows, bytes, footer and partition values), never a
row.

As Iceberg's Spark writer, the rows come to the tasks laid out by Spark (physical/appends.py):
clustered by partition (hash distribution) or ordered (range distribution); for a table with a
sort order, sorted within the task by the partition and that order. A task keeps one Parquet
file open per partition it holds (Iceberg's fanout writer; with `clustered` input, a
partition's file is closed as soon as the next partition starts, as its clustered writer
does), writes a row
group whenever the rows buffered for a file reach `row_group_bytes` (or the task's buffers
`buffered_bytes`: the largest goes first), and rolls to a new file once a file reaches
`target_bytes` written, the table's `write.target-file-size-bytes`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from mor.physical.tasks.row_files import (
    column,
    conform,
    create,
    fail,
    float_fields,
    footer,
    json_value,
    nan_counts,
    record,
    task_number,
)
from mor.physical.tasks.transforms import apply

ROW_GROUP_BYTES = 128 << 20  # Iceberg's write.parquet.row-group-size-bytes default
BUFFERED_BYTES = 256 << 20  # rows a task holds unwritten, across its open files


class _Open:
    """One data file being written: its writer, the rows buffered for its next row group.
    `prepare`: what the buffered rows go through before they are written, once per row group
    (AppendWriter._prepared: NaNs counted into `nans`; an unpartitioned table's rows, held as
    Spark sent them, conformed)."""

    def __init__(
        self,
        fs: Any,
        folder: str,
        task: str,
        schema: pa.Schema,
        codec: str,
        prepare: Callable[[pa.Table, dict[int, int]], pa.Table],
    ) -> None:
        import pyarrow.parquet as pq

        self.name = f"{task}-{uuid.uuid4()}.parquet"
        self.stream = create(fs, f"{folder}/{self.name}")
        self.writer = pq.ParquetWriter(self.stream, schema, compression=codec, store_schema=False)
        self.prepare = prepare
        self.held: list[pa.Table] = []
        self.held_bytes = 0
        self.rows = 0
        self.nans: dict[int, int] = {}

    def flush(self) -> None:
        if not self.held:
            return
        rows = pa.concat_tables(self.held) if len(self.held) > 1 else self.held[0]
        self.held, self.held_bytes = [], 0
        rows = self.prepare(rows, self.nans)
        self.writer.write_table(rows, row_group_size=max(1, rows.num_rows))

    def written(self) -> int:
        return self.stream.tell()

    def close(self) -> tuple[int, bytes]:
        self.flush()
        self.writer.close()
        size = self.stream.tell()
        self.stream.close()
        return size, footer(self.writer)


class AppendWriter:
    """A task's new rows, written as data files (module docstring). `args`: `fs`, `folder`,
    `table`, `schema` (the data files' Arrow schema, serialized, field ids in its metadata),
    `partition` (per field: name, transform, source type, source column path), `codec`,
    `target_bytes`, `clustered`, and optionally `row_group_bytes`, `buffered_bytes`."""

    def __init__(self, args: dict[str, Any]) -> None:
        self.fs = args["fs"]
        self.folder = args["folder"].rstrip("/")
        self.schema = pa.ipc.read_schema(pa.py_buffer(args["schema"]))
        self.table = args.get("table", "")
        self.partition = args.get("partition", [])
        self.codec = args.get("codec", "zstd")
        self.target = int(args.get("target_bytes", 512 << 20))
        self.row_group = int(args.get("row_group_bytes", ROW_GROUP_BYTES))
        self.buffered = int(args.get("buffered_bytes", BUFFERED_BYTES))
        self.clustered = bool(args.get("clustered"))
        self.floats = float_fields(self.schema)
        self.task = task_number()
        self.open: dict[str, tuple[list[Any], _Open]] = {}
        self.held = 0
        self.rows = 0
        self.out: list[pa.RecordBatch] = []

    def add(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        rows = pa.Table.from_batches([batch])
        self.rows += rows.num_rows
        if not self.partition:  # held as sent, conformed and counted per row group (_prepared)
            parts: Iterator[tuple[list[Any], pa.Table]] = iter([([], rows)])
        else:
            parts = self._partitioned(self._conformed(rows))
        for values, part in parts:
            key = json.dumps(values)
            if self.clustered and key not in self.open:
                for other in list(self.open):  # the input moved on: earlier files are done
                    self._close(other)
            if key not in self.open:
                self.open[key] = (
                    values,
                    _Open(self.fs, self.folder, self.task, self.schema, self.codec, self._prepared),
                )
            f = self.open[key][1]
            f.held.append(part)
            f.held_bytes += part.nbytes
            f.rows += part.num_rows
            self.held += part.nbytes
            if f.held_bytes >= self.row_group:
                self._flush(key)
        while self.held > self.buffered and self.open:
            self._flush(max(self.open, key=lambda k: self.open[k][1].held_bytes))

    def _flush(self, key: str) -> None:
        f = self.open[key][1]
        self.held -= f.held_bytes
        f.flush()
        if f.written() >= self.target:
            self._close(key)

    def _close(self, key: str) -> None:
        values, f = self.open.pop(key)
        self.held -= f.held_bytes
        size, footer = f.close()
        self.out.append(
            record(
                "data",
                name=f.name,
                rows=f.rows,
                size=size,
                footer=footer,
                partition=json.dumps(values),
                metrics=json.dumps({"nan": f.nans}),
            )
        )

    def close(self) -> Iterator[pa.RecordBatch]:
        for key in list(self.open):
            self._close(key)
        yield from self.out
        yield record("counts", inserted=self.rows)

    def _prepared(self, rows: pa.Table, nans: dict[int, int]) -> pa.Table:
        """A row group's rows as written: conformed (a partitioned table's were, before they
        were split by partition), their NaNs counted into `nans`."""
        if not self.partition:
            rows = self._conformed(rows)
        nan_counts(rows, self.floats, nans)
        return rows

    def _conformed(self, t: pa.Table) -> pa.Table:
        columns = []
        for f in self.schema:
            col = t.column(f.name)
            try:
                if _plain(f.type):  # a cast, chunk by chunk in Arrow (none when alike)
                    col = col if col.type == f.type else col.cast(f.type)
                else:
                    col = conform(col.combine_chunks(), f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
                raise fail(
                    f"{self.table}: column {f.name} of type {f.type} cannot hold the values "
                    f"written: {str(e).splitlines()[0][:200]}"
                ) from None
            if not f.nullable and col.null_count:
                raise fail(
                    f"{self.table}: column {f.name} is NOT NULL, and the statement writes "
                    "NULL into it"
                )
            columns.append(col)
        return pa.Table.from_arrays(columns, schema=self.schema)

    def _partitioned(self, rows: pa.Table) -> Iterator[tuple[list[Any], pa.Table]]:
        if not self.partition:
            yield [], rows
            return
        keys = {}
        for i, (_, transform, source, path) in enumerate(self.partition):
            keys[f"k{i}"] = apply(transform, source, column(rows, path))
        keyed = pa.table(keys)
        if _constant(keyed):  # one partition in the batch (clustered input, or a fanout's luck)
            yield [json_value(keyed.column(k)[0].as_py()) for k in keys], rows
            return
        keyed = keyed.append_column("_i", pa.array(range(rows.num_rows), pa.int64()))
        groups = keyed.group_by(list(keys), use_threads=False).aggregate([("_i", "list")])
        for g in range(groups.num_rows):
            values = [json_value(groups.column(k)[g].as_py()) for k in keys]
            yield values, rows.take(groups.column("_i_list")[g].values)


def _plain(t: pa.DataType) -> bool:
    """Whether `conform` is a plain cast for a column of type `t` (no nested fields, no
    extension, no fixed-width binary)."""
    return not (
        isinstance(t, pa.BaseExtensionType)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_nested(t)
    )


def _constant(keys: pa.Table) -> bool:
    """Whether every row of the batch has the same partition (the common case of clustered
    input: no grouping needed)."""
    for col in keys.columns:
        first = col.slice(0, 1)
        if col.null_count not in (0, len(col)):
            return False
        if col.null_count == len(col):
            continue
        import pyarrow.compute as pc

        if not pc.all(pc.equal(col, first[0])).as_py():
            return False
    return True


def append_stage(
    args: dict[str, Any],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function the tasks of an append run over their Arrow batches: every row written
    (AppendWriter), one record per file and one of counts."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        writer = AppendWriter(args)
        for batch in batches:
            writer.add(batch)
        yield from writer.close()

    return run


def by_name(batch: pa.RecordBatch, names: list[str]) -> pa.RecordBatch:
    """A batch's columns renamed and ordered as the table's (`names`: per table column, the
    batch's column that fills it, matched by name without case)."""
    index = {n.lower(): i for i, n in enumerate(batch.schema.names)}
    arrays = [batch.column(index[n.lower()]) for n in names]
    return pa.RecordBatch.from_arrays(arrays, names=names)


def write_batches(args: dict[str, Any], batches: Iterator[pa.RecordBatch]) -> list[dict[str, Any]]:
    """A data source task's rows written (AppendWriter, `args["columns"]`: the table's column
    names in order): the records of its files, as plain dicts."""
    names = list(args["columns"])
    writer = AppendWriter(args)
    for batch in batches:
        writer.add(by_name(batch, names))
    return [r for out in writer.close() for r in out.to_pylist()]
