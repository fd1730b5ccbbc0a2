"""Iceberg types (as pyiceberg's JSON) -> Spark types carrying Parquet field ids.

Two Spark types per Iceberg type: the one the table presents (as Iceberg's Spark reader does)
and the one Spark's Parquet reader reads the stored values as (`stored=True`). They differ for
`uuid` only: stored as a 16-byte FIXED_LEN_BYTE_ARRAY with the UUID annotation, which Spark's
Parquet reader refuses to infer but reads as `binary` when told to, and presented as a string
in the canonical 8-4-4-4-12 form (lower-case hex), as Iceberg's Spark reader presents it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pyspark.sql import types as T

from mor.planner.errors import UnsupportedError
from mor.planner.sources import VARIANT

FIELD_ID_KEY = "parquet.field.id"

_PRIMITIVES: dict[str, T.DataType] = {
    "boolean": T.BooleanType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "date": T.DateType(),
    "timestamp": T.TimestampNTZType(),
    "timestamptz": T.TimestampType(),
    "string": T.StringType(),
    "binary": T.BinaryType(),
}


# v3 and other types mor refuses by name (the Spark type each would need)
_UNREAD = {
    "timestamp_ns": "Spark has no nanosecond timestamp",
    "timestamptz_ns": "Spark has no nanosecond timestamp",
    "unknown": "a field of Iceberg v3's unknown type inside a struct, list or map",
    "geometry": "Spark 3.5 and 4.0 have no geometry type; mor does not read it yet",
    "geography": "Spark 3.5 and 4.0 have no geography type; mor does not read it yet",
    "time": "Spark has no time-of-day type",
}


def spark_type(type_json: str, where: str, stored: bool = False) -> T.DataType:
    """The Spark type of an Iceberg type given as pyiceberg's JSON (`"long"`, `{"type":
    "struct", ...}`); struct fields carry their Parquet field ids. `stored`: the type Spark
    reads the values from Parquet as (binary for uuid), else the one the table presents.
    A top-level column of v3's `unknown` type is Spark's `void` (NullType), as Iceberg's
    reader gives it: always NULL, and never in a data file (is_unknown)."""
    if is_unknown(type_json):
        return T.NullType()
    return _convert(json.loads(type_json), where, stored)


def is_unknown(type_json: str) -> bool:
    return type_json == '"unknown"'


def is_uuid(stored: T.DataType, declared: T.DataType) -> bool:
    """A leaf read as uuid bytes and presented as its string (no other type pairs these two:
    Iceberg promotes no type to or from uuid)."""
    return isinstance(stored, T.BinaryType) and isinstance(declared, T.StringType)


def _convert(t: Any, where: str, stored: bool) -> T.DataType:
    """`t`: a primitive type name, or the dict of a nested type (already parsed)."""
    if isinstance(t, str):
        if t in _PRIMITIVES:
            return _PRIMITIVES[t]
        if t == "uuid":
            return T.BinaryType() if stored else T.StringType()
        if t == VARIANT:  # a variant column (planner/sources.py)
            if not hasattr(T, "VariantType"):
                import pyspark

                raise UnsupportedError(
                    f"{where}: Iceberg type variant is not supported on pyspark "
                    f"{pyspark.__version__} (Spark's VARIANT type came with Spark 4.0)"
                )
            return T.VariantType()
        m = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", t)
        if m:
            return T.DecimalType(int(m.group(1)), int(m.group(2)))
        if t.startswith("fixed["):
            return T.BinaryType()
        why = _UNREAD.get(t.split("(")[0], "mor has no Spark type for it")
        raise UnsupportedError(f"{where}: Iceberg type {t} is not supported ({why})")
    kind = t["type"]
    if kind == "struct":
        return T.StructType(
            [field(f["name"], f["id"], _convert(f["type"], where, stored)) for f in t["fields"]]
        )
    if kind == "list":
        return T.ArrayType(
            _convert(t["element"], where, stored), not t.get("element-required", False)
        )
    if kind == "map":
        return T.MapType(
            _convert(t["key"], where, stored),
            _convert(t["value"], where, stored),
            not t.get("value-required", False),
        )
    raise UnsupportedError(f"{where}: Iceberg type {kind} is not supported")


def field(name: str, field_id: int, dtype: T.DataType) -> T.StructField:
    return T.StructField(name, dtype, True, {FIELD_ID_KEY: field_id})
