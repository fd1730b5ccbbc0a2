"""Iceberg types (as pyiceberg's JSON) -> Spark types carrying Parquet field ids."""

from __future__ import annotations

import json
import re
from typing import Any

from pyspark.sql import types as T

from planner.errors import UnsupportedError

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


def spark_type(type_json: str | Any, where: str) -> T.DataType:
    t = json.loads(type_json) if isinstance(type_json, str) else type_json
    if isinstance(t, str):
        if t in _PRIMITIVES:
            return _PRIMITIVES[t]
        m = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", t)
        if m:
            return T.DecimalType(int(m.group(1)), int(m.group(2)))
        if t.startswith("fixed["):
            return T.BinaryType()
        raise UnsupportedError(f"{where}: Iceberg type {t} is not supported by mor on Spark 3.5")
    kind = t["type"]
    if kind == "struct":
        return T.StructType(
            [field(f["name"], f["id"], spark_type(f["type"], where)) for f in t["fields"]]
        )
    if kind == "list":
        return T.ArrayType(spark_type(t["element"], where), not t.get("element-required", False))
    if kind == "map":
        return T.MapType(
            spark_type(t["key"], where),
            spark_type(t["value"], where),
            not t.get("value-required", False),
        )
    raise UnsupportedError(f"{where}: Iceberg type {kind} is not supported")


def field(name: str, field_id: int, dtype: T.DataType) -> T.StructField:
    return T.StructField(name, dtype, True, {FIELD_ID_KEY: field_id})
