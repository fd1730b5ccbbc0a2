"""File layouts: how a data or delete file differs from the table's schema.

Spark reads every column by name (never by Parquet field id: that needs a session setting that
would change how the user's own reads match columns too). Most tables need nothing special:
when no name in the table's history was ever used by another field id, renamed, or sanitized by
writers, and no type was promoted, the schema's names and types are every file's, and no footer
is read. Tables migrated into Iceberg (`add_files`, Hive or Delta migrations) hold files without
field ids and carry a name mapping (`schema.name-mapping.default`); when the mapping gives each
field exactly the name the schema does, those files are read by the same names, footer-free too.

Footers are needed only for what metadata cannot tell (`footer_reason` says which):
- a name mapping with aliases or without some field: files without field ids are read by the
  names the mapping accepts and their footer shows;
- files written before a column was promoted (int -> long, float -> double, a wider decimal):
  Spark 3.5's vectorized reader cannot upcast dictionary-encoded pages, so they are read with
  their own physical type and cast to the table's;
- renamed or reused names: each file's own names, by field id;
- v3 columns with an initial default: which files predate the column.
Then only the footers of the files the query reads (after pruning) are read, in parallel
(setting io_threads), and each file's layout is kept across queries of the process (files are
immutable; keyed by path, size and the table's schemas).
"""

from __future__ import annotations

import json
import re
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

from mor.planner.defaults import defaulted_ids
from mor.planner.errors import DataFileError
from mor.planner.nodes import Layout
from mor.planner.sources import TableSource

NAME_MAPPING = "schema.name-mapping.default"

# A file's layout depends on the file (immutable: its path and size) and the table's schemas and
# name mapping: kept across queries of the process (attach.py, in planner/state.py).


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


def _named_fields(
    struct: StructType, parent: int = 0, out: dict[int, tuple[int, str]] | None = None
) -> dict[int, tuple[int, str]]:
    """field id -> (parent field id, name) of every named field (struct fields at any depth,
    also inside lists and maps); list elements and map keys/values are structural, unnamed."""
    out = {} if out is None else out
    for f in struct.fields:
        out[f.field_id] = (parent, f.name)
        _named_in_type(f.field_type, f.field_id, out)
    return out


def _named_in_type(t: IcebergType, parent: int, out: dict[int, tuple[int, str]]) -> None:
    if isinstance(t, StructType):
        _named_fields(t, parent, out)
    elif isinstance(t, ListType):
        _named_in_type(t.element_type, t.element_id, out)
    elif isinstance(t, MapType):
        _named_in_type(t.key_type, t.key_id, out)
        _named_in_type(t.value_type, t.value_id, out)


# A name Iceberg's writers (Java's TypeToMessageType, pyiceberg) store in Parquet unchanged;
# others are sanitized Avro-style (`my-col` -> `my_x2Dcol`, `1st` -> `_1st`), and the rules
# have varied across writer versions, so such names are looked up in each file's footer.
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def names_ambiguous(src: TableSource) -> bool:
    """Whether reading by the current schema's names could miss or pick the wrong column of
    some file: a field id that had another name in the table's history (a rename), a name (in
    the same struct, compared as Spark does, without case) that belonged to another field id
    (a column dropped and another added under its name), or a name writers sanitize."""
    names: dict[int, set[str]] = {}
    owners: dict[tuple[int, str], set[int]] = {}
    for schema in src.metadata.schemas:
        for fid, (parent, name) in _named_fields(schema.as_struct()).items():
            if not _PLAIN_NAME.fullmatch(name):
                return True
            names.setdefault(fid, set()).add(name)
            owners.setdefault((parent, name.lower()), set()).add(fid)
    return any(len(n) > 1 for n in names.values()) or any(len(o) > 1 for o in owners.values())


def footer_reason(src: TableSource) -> str | None:
    """Why the files of this table must be matched to its schema by their footers (what
    EXPLAIN VERBOSE could print), or None when every file reads by the schema's names."""
    if promoted_fields(src):
        return "a column's type was promoted"
    if names_ambiguous(src):
        return "a column was renamed, or a name was used by another column"
    if defaulted_ids(src.metadata.schemas):
        return "a column has an initial default"
    if NAME_MAPPING in src.metadata.properties and not _mapping_is_schema(src):
        return "the name mapping names a column otherwise than the schema"
    return None


def needs_footers(src: TableSource) -> bool:
    return footer_reason(src) is not None


def _mapping_is_schema(src: TableSource) -> bool:
    """The name mapping gives every named field of every schema exactly the one name the schema
    gives it (names_ambiguous is false, so there is one): files without field ids then hold
    each field under the name the schema reads. A field missing from the mapping reads as NULL
    from such files (Iceberg's rule), which reading by name could not promise."""
    try:
        mapping = _name_mapping(src)
    except (ValueError, TypeError, AttributeError):  # malformed: footers say what each file is
        return False
    mapped = {key[-1]: names for key, names in mapping.items()}
    for schema in src.metadata.schemas:
        for fid, (_, name) in _named_fields(schema.as_struct()).items():
            if mapped.get(fid) != [name]:
                return False
    return True


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
    defaulted = defaulted_ids(src.metadata.schemas)
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
        found = {fid for fid, name, _ in overrides if name is not None}
        return Layout(by_name=True, fields=tuple(overrides), absent=frozenset(defaulted - found))
    promoted: dict[int, str] = {}
    for fid, f in sorted(ids.items()):
        phys = _arrow_type(f.type)
        want = table_types.get(fid)
        if phys and want is not None and phys != str(want) and _promotable(phys, want):
            promoted[fid] = phys
    in_file = _arrow_named(arrow)
    in_schema = _named_fields(table_schema.as_struct())
    for older in src.metadata.schemas:  # a dropped field can still be read (an equality key)
        for fid, named in _named_fields(older.as_struct()).items():
            in_schema.setdefault(fid, named)
    file_names = {(parent, name.lower()) for parent, name in in_file.values()}
    same = all(
        in_file[fid][1] == name if fid in in_file else (parent, name.lower()) not in file_names
        for fid, (parent, name) in in_schema.items()
    )
    absent = frozenset(defaulted - set(ids))
    if same:  # the schema's names find exactly this file's columns
        return Layout(
            fields=tuple((fid, None, phys) for fid, phys in sorted(promoted.items())),
            absent=absent,
        )
    return Layout(
        absent=absent,
        by_name=True,
        nested=True,
        fields=tuple(
            (fid, in_file[fid][1], promoted.get(fid)) for fid in sorted(in_schema) if fid in in_file
        ),
    )


def _arrow_named(schema: pa.Schema) -> dict[int, tuple[int, str]]:
    """field id -> (parent field id, name) of the named fields of a file that has field ids."""
    out: dict[int, tuple[int, str]] = {}

    def fid_of(f: pa.Field) -> int | None:
        md = f.metadata or {}
        return int(md[b"PARQUET:field_id"]) if b"PARQUET:field_id" in md else None

    def in_type(t: pa.DataType, parent: int) -> None:
        if pa.types.is_struct(t):
            fields(list(t), parent)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            in_type(t.value_type, fid_of(t.value_field) or -1)
        elif pa.types.is_map(t):
            in_type(t.key_type, fid_of(t.key_field) or -1)
            in_type(t.item_type, fid_of(t.item_field) or -1)

    def fields(fs: list[pa.Field], parent: int) -> None:
        for f in fs:
            fid = fid_of(f)
            if fid is not None:
                out[fid] = (parent, f.name)
            in_type(f.type, fid if fid is not None else -1)

    fields(list(schema), 0)
    return out


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
