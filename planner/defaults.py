"""Column defaults (Iceberg v3 `initial-default`): the value a column reads in a data file
written before the column was added.

A file lacks the column exactly when its Parquet schema has no field of that id (planning reads
the footers of tables that have defaults: planner/layouts.py); there the column is the default,
elsewhere the file's own values (NULLs included). The default is carried to the physical layer
as a Spark SQL literal of the column's type, built here from pyiceberg's decoded value.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math

from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from mor.planner.errors import UnsupportedError

_EPOCH = dt.datetime(1970, 1, 1)


def defaulted_ids(schemas: list[Schema]) -> set[int]:
    """Field ids (at any depth) that have an `initial-default` in some schema of the table."""
    out: set[int] = set()

    def walk(t: IcebergType) -> None:
        if isinstance(t, StructType):
            for f in t.fields:
                if f.initial_default is not None:
                    out.add(f.field_id)
                walk(f.field_type)
        elif isinstance(t, ListType):
            walk(t.element_type)
        elif isinstance(t, MapType):
            walk(t.key_type)
            walk(t.value_type)

    for s in schemas:
        walk(s.as_struct())
    return out


def check_nested(f: NestedField, table: str) -> None:
    """A default inside a struct, list or map column is refused by name (never read as NULL)."""

    def walk(t: IcebergType, where: str) -> None:
        if isinstance(t, StructType):
            for g in t.fields:
                if g.initial_default is not None:
                    raise UnsupportedError(
                        f"table {table}: field {where}.{g.name} has an initial default (Iceberg "
                        "v3) inside a nested column, which mor does not read yet"
                    )
                walk(g.field_type, f"{where}.{g.name}")
        elif isinstance(t, ListType):
            walk(t.element_type, f"{where}.element")
        elif isinstance(t, MapType):
            walk(t.key_type, f"{where}.key")
            walk(t.value_type, f"{where}.value")

    walk(f.field_type, f.name)


def default_sql(f: NestedField, table: str) -> str | None:
    """The field's `initial-default` as a Spark SQL literal of its type; None without one."""
    v = f.initial_default
    if v is None:
        return None
    t = f.field_type
    where = f"table {table}: column {f.name}"
    if isinstance(t, BooleanType):
        return "true" if v else "false"
    if isinstance(t, IntegerType):
        return f"CAST({int(v)} AS INT)"
    if isinstance(t, LongType):
        return f"CAST({int(v)} AS BIGINT)"
    if isinstance(t, (FloatType, DoubleType)):
        name = "FLOAT" if isinstance(t, FloatType) else "DOUBLE"
        x = float(v)
        if math.isnan(x):
            text = "NaN"
        elif math.isinf(x):
            text = "Infinity" if x > 0 else "-Infinity"
        else:
            text = repr(x)
        return f"CAST('{text}' AS {name})"
    if isinstance(t, DecimalType):
        return f"CAST('{decimal.Decimal(v)}' AS DECIMAL({t.precision},{t.scale}))"
    if isinstance(t, StringType):
        return f"decode(unhex('{str(v).encode('utf-8').hex()}'), 'UTF-8')"
    if isinstance(t, (BinaryType, FixedType)):
        return f"unhex('{bytes(v).hex()}')"
    if isinstance(t, DateType):
        days = v if isinstance(v, int) else (v - dt.date(1970, 1, 1)).days
        return f"date_add(DATE '1970-01-01', {int(days)})"
    if isinstance(t, (TimestampType, TimestamptzType)):
        micros = v if isinstance(v, int) else _micros(v)
        if isinstance(t, TimestamptzType):
            return f"timestamp_micros({int(micros)})"  # an instant, whatever the session's zone
        # a local date-time: its text, which a cast to TIMESTAMP_NTZ reads without a zone
        wall = _EPOCH + dt.timedelta(microseconds=int(micros))
        return f"CAST('{wall.isoformat(sep=' ')}' AS TIMESTAMP_NTZ)"
    raise UnsupportedError(f"{where} has an initial default of type {t}, which mor cannot read")


def _micros(v: dt.datetime) -> int:
    if v.tzinfo is not None:
        v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    delta = v - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
