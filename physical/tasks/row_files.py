"""What the tasks of a row-level write (DELETE, UPDATE, MERGE) run, with pyarrow: no row
reaches the driver, which gets one record per file written.

`rows_stage` runs in the tasks of the statement's rows query. Each batch holds, per row the
statement changes, its data file and position (`_file`, `_pos`), for a MERGE the action of the
clause that applies (`_mor_act`) and whether a source row matched it (`_mor_matched`), and for
rows written again or inserted every column's new value (and on v3 its `_row_id`). The task
writes the new rows as Parquet data files of the table's current partition spec, each file's
rows in the table's sort order, and then each data file's positions it holds: one position
delete file naming that data file alone (v2), or a deletion vector holding them with every
position the data file's current vector and file-scoped position delete files delete (v3),
the vectors of a task in one Puffin file (`_PositionsWriter`). It returns per file written its
name, rows, bytes, footer (and partition, or vector's place), and its counts.

A data file's rows are usually all in one task (a task reads a file whole). When several
tasks wrote positions for one data file (Spark split it, or a join spread its rows), the
driver has a second, small job join them: `merge_stage` reads those files back and writes
the one a single task would have (a MERGE's cardinality rule checked over them too).

Files go straight to their final names under the statement's folder (`folder`, through the
pyarrow file system `fs`); a failed or repeated task attempt's files, and the parts a
`merge_stage` joined, are referenced by no record the commit takes, and the driver clears the
folder of whatever it does not commit.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mor.physical.tasks.roaring import decode64, dv_blob, dv_positions, encode64, puffin_file
from mor.physical.tasks.transforms import apply

# what both stages return: one record per data file's positions, file written, count or fault
RECORD = pa.schema(
    [
        ("kind", pa.string()),  # positions, data, delete_file, dv, counts, violation
        ("file", pa.string()),  # the data file (as recorded) positions are of
        ("name", pa.string()),  # a written file, relative to the statement's folder
        ("blob", pa.binary()),  # positions removed (64-bit Roaring, portable)
        ("matched", pa.binary()),  # a MERGE's matched positions, for its cardinality rule
        ("rows", pa.int64()),
        ("size", pa.int64()),
        ("offset", pa.int64()),  # a deletion vector's blob in its Puffin file
        ("length", pa.int64()),
        ("footer", pa.binary()),  # a Parquet file's footer, as a metadata-only Parquet file
        ("partition", pa.string()),  # a data file's partition values, JSON
        ("updated", pa.int64()),
        ("deleted", pa.int64()),
        ("inserted", pa.int64()),
        ("metrics", pa.string()),  # a data file's NaN counts, JSON {"nan": {field id: n}}
    ]
)
UPDATE, DELETE, INSERT, MATCHED = 1, 2, 3, 0  # _mor_act: what a MERGE clause does to a row
POSITION_DELETE_FIELDS = ((2147483546, "file_path"), (2147483545, "pos"))
ROW_GROUP_BYTES = 128 << 20
BUFFERED_BYTES = 256 << 20  # new rows a task holds before writing the largest partition's


def record(kind: str, **values: Any) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"kind": kind, **values}], schema=RECORD)


def fail(message: str) -> ValueError:
    """A failure the driver reports as one line (physical/spark/spark_errors.py: `mor: ...`)."""
    return ValueError(f"mor: {message}")


def task_number() -> str:
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
    except ImportError:  # outside Spark (the tests call the stages directly)
        ctx = None
    return f"{ctx.partitionId():05d}" if ctx is not None else "00000"


def footer(writer: pq.ParquetWriter) -> bytes:
    out = io.BytesIO()
    writer.writer.metadata.write_metadata_file(out)
    return out.getvalue()


def create(fs: Any, path: str) -> Any:
    """A new file at `path` (a local folder made first: object stores have none)."""
    import pyarrow.fs as pafs

    if isinstance(fs, pafs.LocalFileSystem):
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    return fs.open_output_stream(path)


def _write(fs: Any, path: str, table: pa.Table, codec: str, row_group_rows: int) -> tuple:
    """`table` as a Parquet file at `path`: its size and footer."""
    with create(fs, path) as stream:
        writer = pq.ParquetWriter(stream, table.schema, compression=codec, store_schema=False)
        writer.write_table(table, row_group_size=max(1, row_group_rows))
        writer.close()
        size = stream.tell()
    return size, footer(writer)


# --- the rows query's tasks -----------------------------------------------------------------


def rows_stage(
    args: dict[str, Any],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function the tasks of the rows query run over its Arrow batches.

    `args`: `kind` (DELETE, UPDATE or MERGE), `check` (a MERGE's cardinality rule applies),
    `fs`, `folder` (where the files go), `table` (its name, in errors), `v3`, and on v3
    `current`, `filesystems`, `created_by` (`_PositionsWriter`); to write rows: `schema`
    (the data files' Arrow schema, serialized, field ids in its metadata), `partition` (per
    partition field: (name, transform, source type, source column path)), `sort` (per sort
    field: (transform, source type, column path, descending, nulls first)), `codec`,
    `target_bytes` (a file is closed from this much Arrow data)."""
    kind, check = args["kind"], args.get("check", False)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        removed: dict[str, list[pa.Array]] = {}
        matched: dict[str, list[pa.Array]] = {}
        counts = {"updated": 0, "deleted": 0, "inserted": 0}
        writer: _DataWriter | None = None
        for batch in batches:
            if not batch.num_rows:
                continue
            t = pa.Table.from_batches([batch])
            if kind == "DELETE":
                gone, new = t, None
                counts["deleted"] += t.num_rows
            elif kind == "UPDATE":
                gone, new = t, t
                counts["updated"] += t.num_rows
            else:
                act = t.column("_mor_act")
                for what, code in (("updated", UPDATE), ("deleted", DELETE), ("inserted", INSERT)):
                    counts[what] += pc.sum(pc.equal(act, code)).as_py() or 0
                gone = t.filter(pc.is_in(act, pa.array([UPDATE, DELETE], act.type)))
                new = t.filter(pc.is_in(act, pa.array([UPDATE, INSERT], act.type)))
                if check:
                    _gather(t.filter(t.column("_mor_matched")), matched)
            _gather(gone, removed)
            if new is not None and new.num_rows:
                writer = writer or _DataWriter(args)
                writer.add(new)
        table = args.get("table", "")
        seen: dict[str, pa.Array] = {}
        for path, parts in matched.items():  # a row this task holds matched twice
            seen[path] = _sorted(parts)
            _duplicates(seen[path], path, table)
        if writer is not None:
            yield from writer.close()
        out = _PositionsWriter(args)
        for path in sorted(set(removed) | set(seen)):
            out.add(path, _distinct(_sorted(removed.get(path, []))), seen.get(path))
        yield from out.close()
        yield record("counts", **counts)

    return run


def _gather(t: pa.Table, into: dict[str, list[pa.Array]]) -> None:
    """Each row's position appended to its data file's list (rows of one file come in runs:
    a task reads a file's rows in order)."""
    if not t.num_rows:
        return
    files = t.column("_file").combine_chunks()
    positions = t.column("_pos").combine_chunks().cast(pa.int64())
    runs = pc.run_end_encode(files)
    start = 0
    for path, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist()):
        if path is not None:  # an inserted row: no data file
            into.setdefault(path, []).append(positions.slice(start, end - start))
        start = end


def _sorted(parts: list[pa.Array]) -> pa.Array:
    """The positions of `parts` in order (as they come, when they come in order)."""
    if not parts:
        return pa.array([], pa.int64())
    whole = pa.concat_arrays(parts) if len(parts) > 1 else parts[0]
    if len(whole) < 2:
        return whole
    if pc.all(pc.greater_equal(whole.slice(1), whole.slice(0, len(whole) - 1))).as_py():
        return whole
    return pc.take(whole, pc.sort_indices(whole))


def _distinct(ordered: pa.Array) -> pa.Array:
    """Sorted positions, each once."""
    if len(ordered) < 2:
        return ordered
    if pc.all(pc.greater(ordered.slice(1), ordered.slice(0, len(ordered) - 1))).as_py():
        return ordered
    return pc.unique(ordered)


def _duplicates(positions: pa.Array, path: str, table: str) -> None:
    """A MERGE's cardinality rule: no target row matched by two source rows."""
    if len(positions) < 2:
        return
    same = pc.equal(positions.slice(1), positions.slice(0, len(positions) - 1))
    at = pc.index(same, True).as_py()
    if at >= 0:
        raise _cardinality(table, path, positions[at].as_py())


def _cardinality(table: str, path: str, pos: int) -> ValueError:
    return fail(
        f"MERGE INTO {table}: the ON condition matched one row of {table} with more than one "
        f"row of the source (position {pos} of {path}), and Spark and Iceberg refuse that "
        "(MERGE_CARDINALITY_VIOLATION): which one would win is undefined; make the source's "
        "rows unique on the ON condition"
    )


class _DataWriter:
    """The new rows of one task, written as data files: each row conformed to the table's
    Arrow schema, placed in its partition, each partition's rows held until they make a file
    (or the task's rows held pass BUFFERED_BYTES), then sorted and written."""

    def __init__(self, args: dict[str, Any]) -> None:
        self.fs = args["fs"]
        self.folder = args["folder"].rstrip("/")
        self.schema = pa.ipc.read_schema(pa.py_buffer(args["schema"]))
        self.table = args.get("table", "")
        self.partition = args.get("partition", [])
        self.sort = args.get("sort", [])
        self.codec = args.get("codec", "zstd")
        self.target = int(args.get("target_bytes", 512 << 20))
        self.held: dict[str, tuple[list[Any], list[pa.Table], int]] = {}
        self.bytes = 0
        self.task = task_number()
        self.out: list[pa.RecordBatch] = []

    def add(self, t: pa.Table) -> None:
        if not t.num_rows:
            return
        rows = self._conformed(t)
        for values, part in self._partitioned(rows):
            key = json.dumps(values)
            held = self.held.get(key)
            if held is None:
                held = self.held[key] = (values, [], 0)
            size = part.nbytes
            self.held[key] = (values, held[1] + [part], held[2] + size)
            self.bytes += size
            if held[2] + size >= self.target:
                self._flush(key)
        while self.bytes > BUFFERED_BYTES and self.held:
            self._flush(max(self.held, key=lambda k: self.held[k][2]))

    def close(self) -> Iterator[pa.RecordBatch]:
        for key in list(self.held):
            self._flush(key)
        yield from self.out

    def _conformed(self, t: pa.Table) -> pa.Table:
        columns = []
        for f in self.schema:
            if f.name not in t.column_names:
                columns.append(pa.nulls(t.num_rows, f.type))
                continue
            col = t.column(f.name).combine_chunks()
            try:
                col = conform(col, f.type)
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
        keyed = pa.table({**keys, "_i": pa.array(range(rows.num_rows), pa.int64())})
        groups = keyed.group_by(list(keys), use_threads=False).aggregate([("_i", "list")])
        for g in range(groups.num_rows):
            values = [json_value(groups.column(k)[g].as_py()) for k in keys]
            yield values, rows.take(groups.column("_i_list")[g].values)

    def _flush(self, key: str) -> None:
        values, parts, _ = self.held.pop(key)
        rows = pa.concat_tables(parts)
        self.bytes -= sum(p.nbytes for p in parts)
        if self.sort:
            rows = rows.take(_order(rows, self.sort))
        name = f"{self.task}-{uuid.uuid4()}.parquet"
        per_row = max(1, rows.nbytes // max(1, rows.num_rows))
        size, footer = _write(
            self.fs, f"{self.folder}/{name}", rows, self.codec, ROW_GROUP_BYTES // per_row
        )
        nans: dict[int, int] = {}
        nan_counts(rows, float_fields(self.schema), nans)
        self.out.append(
            record(
                "data",
                name=name,
                rows=rows.num_rows,
                size=size,
                footer=footer,
                partition=json.dumps(values),
                metrics=json.dumps({"nan": nans}),
            )
        )


def float_fields(schema: pa.Schema) -> list[tuple[list[str], int]]:
    """The float and double fields of an Arrow schema (top-level or inside structs, never
    inside a list or a map), by path, with their field ids: the ones whose NaN values Iceberg's
    writer counts."""
    out: list[tuple[list[str], int]] = []

    def visit(fields: Any, path: list[str]) -> None:
        for f in fields:
            fid = (f.metadata or {}).get(b"PARQUET:field_id")
            if pa.types.is_floating(f.type) and fid is not None:
                out.append((path + [f.name], int(fid)))
            elif pa.types.is_struct(f.type):
                visit([f.type.field(i) for i in range(f.type.num_fields)], path + [f.name])

    visit(list(schema), [])
    return out


def nan_counts(rows: pa.Table, fields: list[tuple[list[str], int]], into: dict[int, int]) -> None:
    """Add the NaN values of each float field of `rows` to `into` (by field id)."""
    for path, fid in fields:
        col = rows.column(path[0]) if len(path) == 1 else column(rows, path)
        n = pc.sum(pc.is_nan(col)).as_py() if len(col) else 0
        into[fid] = into.get(fid, 0) + int(n or 0)


def column(t: pa.Table, path: list[str]) -> pa.Array:
    """A column, or a field nested in struct columns (a partition or sort source)."""
    col = t.column(path[0]).combine_chunks()
    for name in path[1:]:
        col = pc.struct_field(col, name)
    return col


def _order(rows: pa.Table, sort: list[Any]) -> pa.Array:
    """The indices that put `rows` in the sort order: per field its transform's value,
    ascending or descending, with nulls first or last."""
    keys, columns = [], {}
    for i, (transform, source, path, descending, nulls_first) in enumerate(sort):
        value = apply(transform, source, column(rows, path))
        columns[f"n{i}"] = pc.is_valid(value)
        columns[f"v{i}"] = value
        keys.append((f"n{i}", "ascending" if nulls_first else "descending"))
        keys.append((f"v{i}", "descending" if descending else "ascending"))
    return pc.sort_indices(pa.table(columns), sort_keys=keys)


def json_value(value: Any) -> Any:
    """A partition value as JSON: bytes as {"b": hex}, a decimal as {"d": text}."""
    import decimal

    if isinstance(value, (bytes, bytearray)):
        return {"b": bytes(value).hex()}
    if isinstance(value, decimal.Decimal):
        return {"d": str(value)}
    return value


def conform(col: pa.Array, target: pa.DataType) -> pa.Array:
    """A column as Spark's Arrow conversion gives it, in the table's Arrow type: field ids
    (in the type's nested fields) and names as the table's, a uuid's canonical text as its 16
    bytes, a fixed column's binary checked for its length."""
    if isinstance(target, pa.BaseExtensionType):
        return pa.ExtensionArray.from_storage(target, conform(col, target.storage_type))
    if pa.types.is_fixed_size_binary(target) and (
        pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
    ):
        return pa.array([None if v is None else _uuid_bytes(v) for v in col.to_pylist()], target)
    if pa.types.is_fixed_size_binary(target) and not pa.types.is_fixed_size_binary(col.type):
        lengths = pc.binary_length(col)
        wrong = pc.filter(lengths, pc.not_equal(lengths, target.byte_width))
        if len(wrong):
            raise ValueError(f"a value of {wrong[0].as_py()} bytes for fixed[{target.byte_width}]")
        return col.cast(pa.binary()).cast(target)
    if pa.types.is_struct(target):
        children = [
            conform(_struct_child(col, target.field(i).name), target.field(i).type)
            for i in range(target.num_fields)
        ]
        fields = [target.field(i) for i in range(target.num_fields)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=col.is_null())
    if pa.types.is_list(target) or pa.types.is_large_list(target):
        flat = col.cast(pa.large_list(col.type.value_type)) if pa.types.is_list(col.type) else col
        values = conform(flat.values, target.value_type)
        offsets = flat.offsets
        built = pa.LargeListArray.from_arrays(
            offsets, values, type=pa.large_list(target.value_field), mask=col.is_null()
        )
        return built.cast(target) if pa.types.is_list(target) else built
    if pa.types.is_map(target):
        keys = conform(col.keys, target.key_type)
        items = conform(col.items, target.item_type)
        return pa.MapArray.from_arrays(col.offsets, keys, items, type=target, mask=col.is_null())
    return col.cast(target)


def _struct_child(col: pa.Array, name: str) -> pa.Array:
    for i in range(col.type.num_fields):
        if col.type.field(i).name == name:
            return col.field(i)
    raise ValueError(f"no field {name} in {col.type}")


def _uuid_bytes(text: str) -> bytes:
    try:
        return uuid.UUID(text).bytes
    except ValueError:
        raise ValueError(f"{text!r} is not a UUID") from None


# --- each data file's positions ---------------------------------------------------------


class _PositionsWriter:
    """A task's positions, per data file: a position delete file naming that file alone (v2),
    or a deletion vector holding them with every position the file's current vector and
    position delete files delete (v3), the task's vectors in one Puffin file. A MERGE's
    matched positions of the file (sorted) ride in its record, for the cardinality rule
    across tasks (`merge_stage`)."""

    def __init__(self, args: dict[str, Any]) -> None:
        self.args = args
        self.fs, self.folder = args["fs"], args["folder"].rstrip("/")
        self.v3 = bool(args.get("v3"))
        self.task = task_number()
        self.current = _CurrentDeletes(args)
        self.vectors: list[tuple[str, bytes, int, int, bytes | None]] = []
        self.out: list[pa.RecordBatch] = []

    def add(
        self,
        path: str,
        new: pa.Array,
        matched: pa.Array | None,
        merged: pa.Array | None = None,
        deleted: int | None = None,
    ) -> None:
        """`new`: the positions the statement deletes (sorted, distinct); `merged` (v3): the
        vector's positions when they are known already (current ones included), `deleted`
        how many of them the statement deletes (default: `new`'s)."""
        blob = encode64(matched) if matched is not None else None
        deleted = len(new) if deleted is None else deleted
        if not len(new):
            if blob is not None:
                self.out.append(record("matched", file=path, matched=blob))
            return
        if self.v3:
            if merged is None:
                current = self.current.positions(path)
                merged = _distinct(_sorted([new, *current])) if current else new
            self.vectors.append((path, dv_blob(merged), len(merged), deleted, blob))
            return
        name = f"{self.task}-{uuid.uuid4()}-deletes.parquet"
        # one path in every row: a dictionary of one value (what Parquet stores anyway)
        paths = pa.DictionaryArray.from_arrays(
            pa.repeat(pa.scalar(0, pa.int32()), len(new)), pa.array([path], pa.string())
        )
        schema = _position_delete_schema()
        rows = pa.Table.from_arrays(
            [paths, new], schema=schema.set(0, schema.field(0).with_type(paths.type))
        )
        size, footer = _write(self.fs, f"{self.folder}/{name}", rows, "zstd", len(new))
        self.out.append(
            record(
                "delete_file",
                file=path,
                name=name,
                rows=len(new),
                size=size,
                footer=footer,
                deleted=deleted,
                matched=blob,
            )  # fmt: skip
        )

    def close(self) -> Iterator[pa.RecordBatch]:
        if self.vectors:
            name = f"{self.task}-{uuid.uuid4()}-deletes.puffin"
            data, placed = puffin_file(
                [(p, b, n) for p, b, n, _, _ in self.vectors],
                self.args.get("created_by", "mor"),
            )
            with create(self.fs, f"{self.folder}/{name}") as stream:
                stream.write(data)
            for (path, _, n, new, blob), (offset, length) in zip(self.vectors, placed):
                self.out.append(
                    record(
                        "dv",
                        file=path,
                        name=name,
                        rows=n,
                        size=len(data),
                        offset=offset,
                        length=length,
                        deleted=new,
                        matched=blob,
                    )  # fmt: skip
                )
        yield from self.out


def merge_stage(
    args: dict[str, Any],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """For the data files more than one task of the rows query wrote positions for (a file
    Spark split, rows a join spread): the function tasks run over those tasks' records, a
    data file's all in one task. Each file's files (position delete files, vectors) are read
    back and joined into one, as one task would have written it (a MERGE's cardinality rule
    checked over their matched positions). `args` as `rows_stage`'s."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        by_file: dict[str, list[dict[str, Any]]] = {}
        for batch in batches:
            for r in batch.to_pylist():
                by_file.setdefault(r["file"], []).append(r)
        out = _PositionsWriter(args)
        for path in sorted(by_file):
            records = by_file[path]
            matched = [decode64(r["matched"]) for r in records if r["matched"] is not None]
            if args.get("check") and len(matched) > 1:
                _duplicates(_sorted([m.cast(pa.int64()) for m in matched]), path, args["table"])
            parts = [_written(out, r) for r in records if r["kind"] != "matched"]
            if not parts:
                continue
            union = _distinct(_sorted(parts))
            if out.v3:  # each part holds the file's current positions too
                current = out.current.positions(path)
                known = len(_distinct(_sorted(current))) if current else 0
                out.add(path, union, None, merged=union, deleted=len(union) - known)
            else:
                out.add(path, union, None)
        yield from out.close()

    return run


def _written(out: _PositionsWriter, r: dict[str, Any]) -> pa.Array:
    """The positions a task wrote for a data file (its file, or its vector's blob)."""
    where = f"{out.folder}/{r['name']}"
    if r["kind"] == "delete_file":
        written = pq.read_table(where, columns=["pos"], filesystem=out.fs)
        return written.column("pos").combine_chunks()
    with out.fs.open_input_file(where) as f:
        f.seek(r["offset"])
        blob = f.read(r["length"])
    return dv_positions(blob, where)


def _position_delete_schema() -> pa.Schema:
    return pa.schema(
        [
            pa.field(name, pa.string() if name == "file_path" else pa.int64(), nullable=False,
                     metadata={b"PARQUET:field_id": str(fid).encode()})
            for fid, name in POSITION_DELETE_FIELDS
        ]
    )  # fmt: skip


class _CurrentDeletes:
    """v3: the positions a data file's current deletes delete (its vector, the position
    delete files that apply to it), read in the task; a position delete file several data
    files share is read once per task."""

    def __init__(self, args: dict[str, Any]) -> None:
        self.current = args.get("current") or {}
        self.filesystems = args.get("filesystems") or {}
        self.table = args.get("table", "")
        self.files: dict[str, pa.Table] = {}

    def positions(self, path: str) -> list[pa.Array]:
        out = []
        for key, where, offset, length, cardinality in self.current.get(path, ()):
            fs = self.filesystems[key]
            if offset is not None:
                with fs.open_input_file(where) as f:
                    f.seek(offset)
                    blob = f.read(length)
                if len(blob) != length:
                    raise fail(f"deletion vector {where} at offset {offset} is cut short")
                try:
                    out.append(dv_positions(blob, f"deletion vector {where} at offset {offset}",
                                            cardinality))  # fmt: skip
                except ValueError as e:
                    raise fail(f"{e} (of {self.table})") from None
                continue
            rows = self.files.get(where)
            if rows is None:
                rows = self.files[where] = pq.read_table(
                    where, columns=["file_path", "pos"], filesystem=fs
                )
            mine = rows.filter(pc.equal(rows.column("file_path"), path))
            out.append(mine.column("pos").combine_chunks().cast(pa.int64()))
        return out
