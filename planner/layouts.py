"""File layouts: how a data or delete file differs from the table's schema.

Most files need nothing special: Spark reads them by Parquet field id with the table's types.
Two kinds of file do, and only tables that can hold them pay for a footer read per file:

- files without field ids (tables migrated into Iceberg, which carry a name mapping in
  `schema.name-mapping.default`): their columns are read by the mapped names;
- files written before a column was promoted (int -> long, float -> double, a wider decimal):
  Spark 3.5's vectorized reader cannot upcast dictionary-encoded pages, so they are read with
  their own physical type and cast to the table's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DecimalType,
    DoubleType,
    IcebergType,
    ListType,
    LongType,
    MapType,
    StructType,
)

from mor.planner.errors import DataFileError
from mor.planner.nodes import Layout
from mor.planner.sources import TableSource

NAME_MAPPING = "schema.name-mapping.default"


def _primitive_ids(struct: StructType, out: dict[int, IcebergType]) -> dict[int, IcebergType]:
    for f in struct.fields:
        t = f.field_type
        if isinstance(t, StructType):
            _primitive_ids(t, out)
        elif not isinstance(t, (ListType, MapType)):
            out[f.field_id] = t
    return out


def promoted_fields(src: TableSource) -> set[int]:
    """Field ids whose type differs between schemas of the table's history."""
    seen: dict[int, set[str]] = {}
    for s in src.metadata.schemas:
        for fid, t in _primitive_ids(s.as_struct(), {}).items():
            seen.setdefault(fid, set()).add(str(t))
    return {fid for fid, types in seen.items() if len(types) > 1}


def needs_footers(src: TableSource) -> bool:
    return NAME_MAPPING in src.metadata.properties or bool(promoted_fields(src))


def _name_mapping(src: TableSource) -> dict[tuple[int, ...], list[str]]:
    """(ancestor field ids..., field id) -> accepted names, from the table's name mapping."""
    raw = src.metadata.properties.get(NAME_MAPPING)
    out: dict[tuple[int, ...], list[str]] = {}

    def walk(fields: list[dict[str, Any]], parents: tuple[int, ...]) -> None:
        for f in fields:
            if "field-id" in f:
                out[parents + (f["field-id"],)] = list(f.get("names", []))
                walk(f.get("fields") or [], parents + (f["field-id"],))

    if raw:
        walk(json.loads(raw), ())
    return out


def _arrow_type(t: pa.DataType) -> str | None:
    """The Iceberg name of a promotable Parquet physical type, else None."""
    if pa.types.is_int32(t):
        return "int"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision}, {t.scale})"
    return None


def _by_id(schema: pa.Schema) -> dict[int, pa.Field]:
    out: dict[int, pa.Field] = {}

    def walk(fields: Iterable[pa.Field]) -> None:
        for f in fields:
            md = f.metadata or {}
            if b"PARQUET:field_id" in md:
                out[int(md[b"PARQUET:field_id"])] = f
            if pa.types.is_struct(f.type):
                walk(f.type)

    walk(schema)
    return out


def layout_of(src: TableSource, path: str, table_schema: Schema) -> Layout:
    """What to override when reading the file at `path` (recorded path; opened mapped)."""
    try:
        with src.io.new_input(path).open() as f:
            arrow = pq.read_schema(f)
    except Exception as e:  # noqa: BLE001 - missing or not Parquet: name the file
        raise DataFileError(f"cannot read the Parquet footer of {path}: {e}") from e
    ids = _by_id(arrow)
    table_types = _primitive_ids(table_schema.as_struct(), {})
    overrides: list[tuple[int, str | None, str | None]] = []
    if not ids:
        mapping = _name_mapping(src)
        if not mapping:
            raise DataFileError(
                f"{path} has no Parquet field ids and table {src.name} has no name mapping "
                f"({NAME_MAPPING}): its columns cannot be matched"
            )
        names = {f.name: f for f in arrow}
        for key, accepted in sorted(mapping.items()):
            if len(key) != 1:
                continue  # nested fields follow their top-level struct by name
            hit = next((n for n in accepted if n in names), None)
            if hit is not None:
                phys = _arrow_type(names[hit].type)
                want = table_types.get(key[0])
                overrides.append(
                    (key[0], hit, phys if want and phys and phys != str(want) else None)
                )
        return Layout(by_name=True, fields=tuple(overrides))
    for fid, f in sorted(ids.items()):
        phys = _arrow_type(f.type)
        want = table_types.get(fid)
        if phys and want is not None and phys != str(want) and _promotable(phys, want):
            overrides.append((fid, None, phys))
    return Layout(by_name=False, fields=tuple(overrides))


def _promotable(phys: str, want: IcebergType) -> bool:
    if phys == "int":
        return isinstance(want, LongType)
    if phys == "float":
        return isinstance(want, DoubleType)
    return isinstance(want, DecimalType)


_ARROW_NAMES = (
    (pa.types.is_int32, "int"),
    (pa.types.is_int64, "long"),
    (pa.types.is_float32, "float"),
    (pa.types.is_float64, "double"),
    (pa.types.is_boolean, "boolean"),
    (pa.types.is_date32, "date"),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "string"),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), "binary"),
)


def _iceberg_name(t: pa.DataType) -> str | None:
    """The Iceberg name of a primitive Parquet column as pyarrow reads it (None: not compared)."""
    for test, name in _ARROW_NAMES:
        if test(t):
            return name
    if pa.types.is_decimal(t):
        return f"decimal({t.precision}, {t.scale})"
    return None


def _open_schema(read_path: str) -> pa.Schema:
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(read_path if "://" in read_path else f"file://{read_path}")
    with fs.open_input_file(path) as f:
        return pq.read_schema(f)


def column_type_mismatch(plan: Any) -> str | None:
    """After Spark failed to read a query's files without naming one: the first file (data or
    delete) of `plan` whose Parquet column for a field it reads has a type that is neither the
    table's nor one the file's layout reads and casts, as one line naming the file. Reads one
    footer per file, so it runs only once a query has failed; None when every file agrees."""
    from mor.planner.nodes import EqDeleteScan, IcebergScan

    checks: list[tuple[str, str, Any, tuple[Layout, ...], Iterable[Any]]] = []
    for top in getattr(plan, "scans", ()) or (plan,):
        for node in top.walk():
            if isinstance(node, IcebergScan) and node.files is not None:
                for t in node.data_files():
                    checks.append(("data file", node.table, t, node.files.layouts, node.fields))
            elif isinstance(node, EqDeleteScan):
                for d in node.files:
                    checks.append(("equality delete file", node.table, d, node.layouts, node.keys))
    for kind, table, task, layouts, fields in checks:
        try:
            ids = _by_id(_open_schema(task.read_path))
        except Exception:  # noqa: BLE001 - missing or unreadable: Spark's error says so
            continue
        cast = {fid: phys for fid, _, phys in layouts[task.layout].fields if phys}
        for rf in fields:
            found = ids.get(rf.field_id)
            have = _iceberg_name(found.type) if found is not None else None
            want = json.loads(rf.type_str) if rf.type_str.startswith('"') else rf.type_str
            if rf.path or have is None or have == want or cast.get(rf.field_id) == have:
                continue
            return (
                f"{kind} {task.read_path} of {table} stores column {rf.col.label} "
                f"(field id {rf.field_id}) as {have}, but the table's type is {want}: "
                "it was not written for this table's schema; refusing to read it"
            )
    return None
