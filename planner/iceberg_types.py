"""Spark SQL's column types as Iceberg types, as Iceberg's Spark catalog converts them
(`SparkSchemaUtil`, `SparkTypeToType`): TINYINT and SMALLINT become int, CHAR and VARCHAR
string, TIMESTAMP (Spark's, with the session's time zone) timestamptz, TIMESTAMP_NTZ
timestamp, VARIANT variant (v3); what Iceberg has no type for (intervals, Spark's TIME) is
refused by name. Field ids are placeholders: the catalog assigns a new table's (and
pyiceberg's schema update a new column's) as Iceberg does."""

from __future__ import annotations

import itertools
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
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
from sqlglot import exp

from mor.planner.errors import UnsupportedError

DType = exp.DataType.Type
_ATOMIC: dict[Any, IcebergType] = {
    DType.BOOLEAN: BooleanType(),
    DType.TINYINT: IntegerType(),
    DType.SMALLINT: IntegerType(),
    DType.INT: IntegerType(),
    DType.BIGINT: LongType(),
    DType.FLOAT: FloatType(),
    DType.DOUBLE: DoubleType(),
    DType.TEXT: StringType(),
    DType.VARCHAR: StringType(),
    DType.CHAR: StringType(),
    DType.BINARY: BinaryType(),
    DType.VARBINARY: BinaryType(),
    DType.DATE: DateType(),
    DType.TIMESTAMP: TimestamptzType(),
    DType.TIMESTAMPTZ: TimestamptzType(),
    DType.TIMESTAMPLTZ: TimestamptzType(),
    DType.TIMESTAMPNTZ: TimestampType(),
}


class _Ids:
    def __init__(self) -> None:
        self.next = itertools.count(1)

    def __call__(self) -> int:
        return next(self.next)


def iceberg_type(dtype: exp.DataType, where: Any = None, ids: _Ids | None = None) -> IcebergType:
    """The Iceberg type of a Spark SQL type (nested fields get placeholder ids)."""
    ids = ids or _Ids()
    kind = dtype.this
    if kind in _ATOMIC:
        return _ATOMIC[kind]
    if kind == DType.DECIMAL:
        params = [int(p.name) for p in dtype.expressions]
        precision = params[0] if params else 10
        scale = params[1] if len(params) > 1 else 0
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise UnsupportedError(
                f"DECIMAL({precision}, {scale}): precision 1-38, scale 0-precision"
            )
        return DecimalType(precision, scale)
    if kind == DType.ARRAY:
        inner = dtype.expressions[0]
        return ListType(ids(), iceberg_type(inner, where, ids), element_required=False)
    if kind == DType.MAP:
        key, value = dtype.expressions
        return MapType(
            ids(),
            iceberg_type(key, where, ids),
            ids(),
            iceberg_type(value, where, ids),
            value_required=False,
        )
    if kind == DType.STRUCT:
        return StructType(*[_field(c, where, ids) for c in dtype.expressions])
    if kind == DType.VARIANT:
        from pyiceberg.types import UnknownType  # noqa: F401 - variant needs pyiceberg's model

        raise UnsupportedError(
            "VARIANT columns are not created by mor yet (pyiceberg 0.12 has no variant type)"
        )
    raise UnsupportedError(
        f"column type {dtype.sql(dialect='spark')}: Iceberg has no such type (its types: "
        "boolean, int, bigint, float, double, decimal, string, binary, date, timestamp, "
        "timestamp_ntz, struct, array, map)"
    )


def _field(c: exp.Expression, where: Any, ids: _Ids) -> NestedField:
    """A column definition (`name TYPE [NOT NULL] [COMMENT '...']`) as a field."""
    if not isinstance(c, exp.ColumnDef):
        raise UnsupportedError(f"{c.sql(dialect='spark')}: expected a column name and its type")
    kind = c.args.get("kind")
    if kind is None:
        raise UnsupportedError(f"column {c.name}: its type is missing")
    required = False
    doc = None
    for con in c.args.get("constraints") or []:
        k = con.args.get("kind")
        if isinstance(k, exp.NotNullColumnConstraint):
            required = not k.args.get("allow_null")
        elif isinstance(k, exp.CommentColumnConstraint):
            doc = k.this.name
        elif isinstance(k, exp.DefaultColumnConstraint):
            raise UnsupportedError(
                f"column {c.name} DEFAULT: column defaults are not written by mor"
            )
        else:
            raise UnsupportedError(f"column {c.name}: {con.sql(dialect='spark')} is not supported")
    fid = ids()
    return NestedField(fid, c.name, iceberg_type(kind, where, ids), required=required, doc=doc)


def iceberg_schema(columns: list[exp.Expression], where: Any = None) -> Schema:
    """A new table's schema from its column definitions (ids: placeholders in order)."""
    ids = _Ids()
    fields = [_field(c, where, ids) for c in columns]
    names = [f.name.lower() for f in fields]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise UnsupportedError(f"column {dup} is defined twice")
    return Schema(*fields)
