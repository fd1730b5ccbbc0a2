"""Columns as Spark reads them from a file and as the table declares them.

Spark reads every column by name, never by Parquet field id: reading by id needs
`spark.sql.parquet.fieldId.read.enabled`, a session setting that would change how the user's
own reads match columns too. A file's `Layout` (planner/layouts.py) says where it differs from
the table's schema: its own names for fields (files without field ids, renamed fields), its
physical type for a promoted one, absent fields. Here that becomes the schema Spark reads each
group of files with (`read_schema`: top-level columns under their names in the file, nested
reads merged into their struct) and the column expressions that give the table's names and
types back (`column`: structs rebuilt with the declared children, promoted values cast, float
and double values shielded from Parquet row-group filters, uuid bytes given as their canonical
string).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from mor.physical.scan.types import FIELD_ID_KEY, is_unknown, is_uuid, spark_type
from mor.planner.nodes import Layout, ReadField


def _file_name(layout: Layout, field_id: int | None, name: str, top: bool) -> str:
    """The name field `field_id` (named `name` in the table's schema) has in files of this
    layout. Spark reads every column by name: no Parquet field ids (reading by id needs a
    session setting that would change the user's own reads too)."""
    if field_id is not None and layout.by_name and (top or layout.nested):
        o = layout.override(field_id)
        return o[0] if o and o[0] else f"__mor_absent_{field_id}"  # absent: reads as NULL
    return name


def _plain(t: T.DataType) -> T.DataType:
    """`t` without field-id metadata (the table's names and types, as Spark compares them)."""
    if isinstance(t, T.StructType):
        return T.StructType([T.StructField(f.name, _plain(f.dataType), True) for f in t.fields])
    if isinstance(t, T.ArrayType):
        return T.ArrayType(_plain(t.elementType), t.containsNull)
    if isinstance(t, T.MapType):
        return T.MapType(_plain(t.keyType), _plain(t.valueType), t.valueContainsNull)
    return t


def _fid(f: T.StructField) -> int | None:
    v = f.metadata.get(FIELD_ID_KEY)
    return int(v) if v is not None else None


def _promoted(layout: Layout, field_id: int | None, where: str) -> T.DataType | None:
    o = layout.override(field_id) if field_id is not None else None
    return spark_type(f'"{o[1]}"', where, stored=True) if o and o[1] else None


def _in_file(t: T.DataType, layout: Layout, where: str) -> T.DataType:
    """A declared (schema) type as files of this layout hold it: struct fields under their
    names in the file, promoted primitives with the file's type."""
    if isinstance(t, T.StructType):
        return T.StructType(
            [
                T.StructField(
                    _file_name(layout, _fid(f), f.name, top=False),
                    _promoted(layout, _fid(f), where) or _in_file(f.dataType, layout, where),
                    True,
                )
                for f in t.fields
            ]
        )
    if isinstance(t, T.ArrayType):
        return T.ArrayType(_in_file(t.elementType, layout, where), t.containsNull)
    if isinstance(t, T.MapType):
        return T.MapType(
            _in_file(t.keyType, layout, where),
            _in_file(t.valueType, layout, where),
            t.valueContainsNull,
        )
    return t


def _stored(rf: ReadField, where: str) -> T.DataType:
    return spark_type(rf.type_str, f"{where}, column {rf.col.label}", stored=True)


def _read_type(layout: Layout, rf: ReadField, where: str) -> T.DataType:
    return _promoted(layout, rf.field_id, where) or _in_file(_stored(rf, where), layout, where)


def read_schema(fields: Sequence[ReadField], where: str, layout: Layout) -> T.StructType:
    """Top-level columns under their names in the file; nested reads merge into their struct
    (a whole struct field read too covers them)."""
    top: dict[int, T.StructField] = {}
    order: list[int] = []
    for rf in fields:
        if is_unknown(rf.type_str) and not rf.path:
            continue  # never stored: the column is NULL (column())
        node = T.StructField(_leaf_name(layout, rf), _read_type(layout, rf, where), True)
        for i in range(len(rf.path) - 1, -1, -1):
            name, fid = rf.path[i]
            outer = _file_name(layout, fid, name, top=i == 0)
            node = T.StructField(outer, T.StructType([node]), True)
        tid = rf.path[0][1] if rf.path else rf.field_id
        if tid in top:
            node = _merge(top[tid], node)
        else:
            order.append(tid)
        top[tid] = node
    return T.StructType([top[i] for i in order])


def _leaf_name(layout: Layout, rf: ReadField) -> str:
    return _file_name(layout, rf.field_id, rf.col.label, top=not rf.path)


def _merge(a: T.StructField, b: T.StructField) -> T.StructField:
    if not (isinstance(a.dataType, T.StructType) and isinstance(b.dataType, T.StructType)):
        return a  # a whole field already covers the nested one
    kids = {f.name: f for f in a.dataType.fields}
    for f in b.dataType.fields:
        kids[f.name] = _merge(kids[f.name], f) if f.name in kids else f
    return T.StructField(a.name, T.StructType(list(kids.values())), True)


def column(rf: ReadField, layout: Layout, where: str, merged: bool = False) -> Column:
    """The column a read field becomes, with the table's names and types. `merged`: a nested
    key was read into this (whole) struct field too, so it is shaped back to its own type."""
    if rf.default is not None and not rf.path and rf.field_id in layout.absent:
        # a file written before the column was added: it reads the column's initial default
        return F.expr(rf.default).alias(rf.col.name)
    if is_unknown(rf.type_str) and not rf.path:
        return F.lit(None).alias(rf.col.name)  # v3's unknown type: void, always NULL
    if not rf.path:
        c = F.col(f"`{_file_name(layout, rf.field_id, rf.col.label, top=True)}`")
    else:
        name, fid = rf.path[0]
        c = F.col(f"`{_file_name(layout, fid, name, top=True)}`")
        for name, fid in rf.path[1:]:
            c = c.getField(_file_name(layout, fid, name, top=False))
        c = c.getField(_leaf_name(layout, rf))
    declared = spark_type(rf.type_str, f"{where}, column {rf.col.label}")
    read = _read_type(layout, rf, where)
    if merged or read != _plain(declared):  # rebuilt and NaN-shielded in one pass
        stored = _stored(rf, where)
        return _as_declared(c, layout, declared, stored, where, rf.field_id).alias(rf.col.name)
    return _nan_shielded(c, _plain(declared)).alias(rf.col.name)


def _has_floats(t: T.DataType) -> bool:
    if isinstance(t, (T.FloatType, T.DoubleType)):
        return True
    return isinstance(t, T.StructType) and any(_has_floats(f.dataType) for f in t.fields)


def _nan_shielded(c: Column, t: T.DataType) -> Column:
    """A float or double column (also inside structs) Spark cannot turn into a Parquet filter.

    Spark prunes Parquet row groups by their min/max statistics, and writers such as pyarrow
    (pyiceberg's) leave NaN out of them: `d > 5` then skips a row group whose numbers are all
    below 5 but which holds NaN, and Spark orders NaN above every number, so rows are lost
    (even in plain spark.read.parquet). `nanvl(x, x)` is x itself (NaN, -0.0 and NULL kept)
    but is no column reference, so no filter on it reaches the Parquet reader."""
    if isinstance(t, (T.FloatType, T.DoubleType)):
        return F.nanvl(c, c)
    if isinstance(t, T.StructType) and _has_floats(t):
        kids = [_nan_shielded(c.getField(f.name), f.dataType).alias(f.name) for f in t.fields]
        return F.when(c.isNull(), F.lit(None)).otherwise(F.struct(*kids))
    return c


def uuid_string(c: Column) -> Column:
    """16 uuid bytes as the canonical string Iceberg's Spark reader gives (lower-case hex,
    8-4-4-4-12); NULL stays NULL. The canonical strings order as the bytes do (unsigned), as
    Iceberg's bounds compare uuids.

    The bytes are cut before they are hex-encoded: a substring of a binary value is a byte
    copy, where one of a string counts characters. Grouping 5M uuids took 2.9 s this way
    against 5.4 s cutting the hex string (a hex of the whole value alone: 1.7 s)."""
    parts = [
        F.hex(F.substring(c, start, n)) for start, n in ((1, 4), (5, 2), (7, 2), (9, 2), (11, 6))
    ]
    dash = F.lit("-")
    # concat, not concat_ws: NULL stays NULL (concat_ws skips NULLs: an empty string)
    return F.lower(
        F.concat(parts[0], dash, parts[1], dash, parts[2], dash, parts[3], dash, parts[4])
    )


def _as_declared(
    c: Column,
    layout: Layout,
    declared: T.DataType,
    stored: T.DataType,
    where: str,
    field_id: int | None = None,
    shield: bool = True,
) -> Column:
    """A column read as files of `layout` hold it, rebuilt with exactly the declared children,
    names and types (a NULL struct stays NULL); identity where nothing differs. `stored`: the
    declared type as Parquet stores it (spark_type(..., stored=True)). `shield`: float and
    double leaves outside arrays and maps are NaN-shielded in the same pass."""
    if _promoted(layout, field_id, where) is not None:  # promoted since the file was written
        cast = c.cast(_plain(declared))
        return _nan_shielded(cast, _plain(declared)) if shield else cast
    if isinstance(declared, T.StructType):
        kids = [
            _as_declared(
                c.getField(_file_name(layout, _fid(f), f.name, top=False)),
                layout,
                f.dataType,
                s.dataType,
                where,
                _fid(f),
                shield,
            ).alias(f.name)
            for f, s in zip(declared.fields, stored.fields)
        ]
        return F.when(c.isNull(), F.lit(None)).otherwise(F.struct(*kids))
    in_file = _in_file(stored, layout, where)
    if isinstance(declared, T.ArrayType) and in_file != _plain(declared):
        element = (declared.elementType, stored.elementType)
        return F.transform(c, lambda x: _as_declared(x, layout, *element, where, shield=False))
    if isinstance(declared, T.MapType) and in_file != _plain(declared):
        key, value = (declared.keyType, stored.keyType), (declared.valueType, stored.valueType)
        return F.map_from_arrays(
            F.transform(
                F.map_keys(c), lambda k: _as_declared(k, layout, *key, where, shield=False)
            ),
            F.transform(
                F.map_values(c), lambda v: _as_declared(v, layout, *value, where, shield=False)
            ),
        )
    if is_uuid(stored, declared):
        return uuid_string(c)
    if in_file != _plain(declared):
        c = c.cast(_plain(declared))
    return _nan_shielded(c, _plain(declared)) if shield else c


def merged_fields(fields: Sequence[ReadField]) -> set[int]:
    """Field ids of whole top-level fields that a nested read of the same scan merges into."""
    under = {f.path[0][1] for f in fields if f.path}
    return {f.field_id for f in fields if not f.path and f.field_id in under}


def float_key(c: Column) -> Column:
    """A key compared as text (ReadField.compared_as_text): one string per float value, so
    -0.0 and 0.0 differ and NaN equals NaN; NULL stays NULL."""
    return c.cast("string")
