"""The schema a scan reads with, and field lookups by id across a table's schema history."""

from __future__ import annotations

from dataclasses import dataclass

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

from mor.planner.errors import MetadataError
from mor.planner.sources import TableSource


@dataclass(frozen=True)
class TableSchema:
    schema: Schema

    @property
    def schema_id(self) -> int:
        return self.schema.schema_id

    def top_level(self) -> tuple[NestedField, ...]:
        return tuple(self.schema.fields)

    def top_level_names(self) -> list[str]:
        return [f.name for f in self.schema.fields]


def schema_at(src: TableSource, snapshot_id: int | None) -> TableSchema:
    """The snapshot's schema for time travel (as Iceberg's Spark reader does), else current."""
    md = src.metadata
    if snapshot_id is not None and snapshot_id != md.current_snapshot_id:
        snap = md.snapshot_by_id(snapshot_id)
        if snap is not None and snap.schema_id is not None:
            for s in md.schemas:
                if s.schema_id == snap.schema_id:
                    return TableSchema(s)
    return TableSchema(md.schema())


def find_field(
    src: TableSource, field_id: int, prefer: Schema
) -> tuple[NestedField, tuple[tuple[str, int], ...]]:
    """A field by id, with its ancestors (name, id); looks in older schemas for dropped fields."""
    for schema in [prefer] + sorted(src.metadata.schemas, key=lambda s: -s.schema_id):
        hit = _find(schema.as_struct(), field_id, ())
        if hit is not None:
            return hit
    raise MetadataError(f"table {src.name}: no schema has a field with id {field_id}")


def _find(
    struct: StructType, field_id: int, path: tuple[tuple[str, int], ...]
) -> tuple[NestedField, tuple[tuple[str, int], ...]] | None:
    for f in struct.fields:
        if f.field_id == field_id:
            return f, path
        t: IcebergType = f.field_type
        if isinstance(t, StructType):
            hit = _find(t, field_id, path + ((f.name, f.field_id),))
            if hit is not None:
                return hit
    return None


def find_path(schema: Schema, field_id: int) -> list[str]:
    """The names from a top-level column of `schema` down to the field `field_id` (a column
    or a field of struct columns)."""
    hit = _find(schema.as_struct(), field_id, ())
    if hit is None:
        raise MetadataError(f"schema {schema.schema_id} has no field with id {field_id}")
    field, path = hit
    return [name for name, _ in path] + [field.name]


_SQL_TYPES: dict[type, str] = {
    BooleanType: "boolean",
    IntegerType: "int",
    LongType: "bigint",
    FloatType: "float",
    DoubleType: "double",
    DateType: "date",
    TimestampType: "timestamp_ntz",
    TimestamptzType: "timestamp",
    StringType: "string",
    BinaryType: "binary",
    FixedType: "binary",
}


def spark_sql_type(t: IcebergType) -> str:
    """The Spark SQL type name of an Iceberg type, for sqlglot's view of the table (names and
    nesting matter there, not exactness: an unknown type reads as string)."""
    if isinstance(t, StructType):
        return (
            "struct<"
            + ",".join(f"`{f.name}`:{spark_sql_type(f.field_type)}" for f in t.fields)
            + ">"
        )
    if isinstance(t, ListType):
        return f"array<{spark_sql_type(t.element_type)}>"
    if isinstance(t, MapType):
        return f"map<{spark_sql_type(t.key_type)},{spark_sql_type(t.value_type)}>"
    if isinstance(t, DecimalType):
        return f"decimal({t.precision},{t.scale})"
    return _SQL_TYPES.get(type(t), "string")
