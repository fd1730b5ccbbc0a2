"""Small tables for tests that only need metadata."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from mor.fixtures import TableWriter


def small_table(catalog: Any) -> TableWriter:
    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "p", StringType()),
        NestedField(3, "v", LongType()),
    )
    w = TableWriter(catalog, "s.t", schema)
    w.append(
        pa.table({"id": pa.array([1], pa.int64()), "p": ["a"], "v": pa.array([1], pa.int64())})
    )
    return w
