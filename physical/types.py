"""Iceberg types (as pyiceberg's JSON) -> Spark types carrying Parquet field ids."""

from __future__ import annotations

import json
import re
from typing import Any

from pyspark.sql import types as T

from mor.planner.errors import UnsupportedError

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
    "unknown": "a column of Iceberg v3's unknown type; mor does not read it yet",
    "geometry": "Spark 3.5 and 4.0 have no geometry type; mor does not read it yet",
    "geography": "Spark 3.5 and 4.0 have no geography type; mor does not read it yet",
    "time": "Spark has no time-of-day type",
    "uuid": "mor does not read uuid columns yet",
}


def spark_type(type_json: str, where: str) -> T.DataType:
    """The Spark type of an Iceberg type given as pyiceberg's JSON (`"long"`, `{"type":
    "struct", ...}`); struct fields carry their Parquet field ids."""
    return _convert(json.loads(type_json), where)


def _convert(t: Any, where: str) -> T.DataType:
    """`t`: a primitive type name, or the dict of a nested type (already parsed)."""
    if isinstance(t, str):
        if t in _PRIMITIVES:
            return _PRIMITIVES[t]
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
            [field(f["name"], f["id"], _convert(f["type"], where)) for f in t["fields"]]
        )
    if kind == "list":
        return T.ArrayType(_convert(t["element"], where), not t.get("element-required", False))
    if kind == "map":
        return T.MapType(
            _convert(t["key"], where),
            _convert(t["value"], where),
            not t.get("value-required", False),
        )
    raise UnsupportedError(f"{where}: Iceberg type {kind} is not supported")


def field(name: str, field_id: int, dtype: T.DataType) -> T.StructField:
    return T.StructField(name, dtype, True, {FIELD_ID_KEY: field_id})
