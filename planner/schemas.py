"""The schema a scan reads with, and field lookups by id across a table's schema history."""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.schema import Schema
from pyiceberg.types import IcebergType, NestedField, StructType

from planner.errors import MetadataError
from planner.sources import TableSource


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
