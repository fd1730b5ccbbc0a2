"""Iceberg's bucket transform inside a Spark task, over a pandas Series a pandas UDF gets
(physical/udfs.py; physical/appends.py's `_bucket_key` keeps NULL out of it, so integers
arrive as int64 exactly). No pandas import: the Series makes the result of its own type."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa

from mor.physical.tasks.transforms import apply


def bucket_series(values: Any, transform: str, kind: str) -> Any:
    """`transform` (`bucket[N]`) of each value of a Series holding a column of Iceberg type
    `kind` (`int`, `long`, `timestamp` as written, `string`, `binary`, `uuid` as text,
    `decimal(p, s)`), as an int32 Series."""
    if kind in ("int", "long"):
        arr = pa.array(values.to_numpy(dtype="int64"), pa.int64())
        kind = "long"
    elif kind == "timestamp":
        arr = pa.array(values.to_numpy(dtype="datetime64[us]"), pa.timestamp("us"))
    elif kind == "uuid":
        arr = pa.array([uuid.UUID(v).bytes for v in values], pa.binary(16))
        kind = "fixed[16]"
    elif kind.startswith("decimal"):
        arr = pa.array(list(values), pa.decimal128(38, int(kind.split(",")[1].strip(" )"))))
    elif kind == "binary":
        arr = pa.array([bytes(v) for v in values], pa.binary())
    else:
        arr = pa.array(list(values), pa.string())
    out = apply(transform, kind, arr)
    return type(values)(out.to_numpy(zero_copy_only=False), dtype="int32", index=values.index)
