"""REPLACE TABLE as Iceberg's replace transaction makes it (`TableMetadata.buildReplacement`):
a new schema whose fields keep the ids of the current schema's fields of the same name
(new ones get fresh ids), a new partition spec and sort order (an identical existing one is
reused), the new properties over the current ones, main taken off its snapshot; with AS
SELECT, the new rows' snapshot (no parent) set as main, all in one catalog commit. The old
snapshots stay in the history (time travel and rollback still reach them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    AddSortOrderUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    RemoveSnapshotRefUpdate,
    SetCurrentSchemaUpdate,
    SetDefaultSortOrderUpdate,
    SetDefaultSpecUpdate,
    SetLocationUpdate,
    SetPropertiesUpdate,
    update_table_metadata,
)
from pyiceberg.types import ListType, MapType, NestedField, StructType

from mor.writer.catalog_changes import (
    CatalogChangeError,
    load,
    sort_order_of,
    spec_of,
    v3_models,
    v3_writes,
)


def reassigned(schema: Schema, base: Schema, last_column_id: int) -> tuple[Schema, int]:
    """`schema` with the ids of `base`'s fields of the same full name, fresh ids after
    `last_column_id` for the others (Iceberg's `TypeUtil.assignFreshIds(schema, base, ...)`);
    and the last id assigned."""
    counter = [last_column_id]

    def next_id(path: str) -> int:
        try:
            return base.find_field(path).field_id
        except ValueError:
            counter[0] += 1
            return counter[0]

    def of(t: Any, path: str) -> Any:
        if isinstance(t, StructType):
            return StructType(*[field(f, f"{path}.{f.name}" if path else f.name) for f in t.fields])
        if isinstance(t, ListType):
            eid = next_id(f"{path}.element")
            return ListType(eid, of(t.element_type, f"{path}.element"), t.element_required)
        if isinstance(t, MapType):
            kid, vid = next_id(f"{path}.key"), next_id(f"{path}.value")
            return MapType(
                kid,
                of(t.key_type, f"{path}.key"),
                vid,
                of(t.value_type, f"{path}.value"),
                t.value_required,
            )
        return t

    def field(f: NestedField, path: str) -> NestedField:
        fid = next_id(path)
        return NestedField(fid, f.name, of(f.field_type, path), required=f.required, doc=f.doc)

    top = [field(f, f.name) for f in schema.fields]
    return Schema(*top), counter[0]


def _spec(md: Any, schema: Schema, fields: Sequence[Any], name: str) -> PartitionSpec:
    """The new spec: an existing identical one, else a new id; partition field ids reused
    for the same source and transform, fresh after the table's last one."""
    fresh = spec_of(schema, fields, name)
    known = {
        (f.source_id, str(f.transform)): f.field_id for s in md.partition_specs for f in s.fields
    }
    last = md.last_partition_id or 999
    out = []
    for f in fresh.fields:
        fid = known.get((f.source_id, str(f.transform)))
        if fid is None:
            last += 1
            fid = last
        out.append(PartitionField(f.source_id, fid, f.transform, f.name))
    for s in md.partition_specs:
        if list(s.fields) == out:
            return s
    return PartitionSpec(*out, spec_id=max(s.spec_id for s in md.partition_specs) + 1)


def _order(md: Any, schema: Schema, fields: Sequence[Any], name: str) -> SortOrder:
    fresh = sort_order_of(schema, fields, name)
    for o in md.sort_orders:
        if list(o.fields) == list(fresh.fields):
            return o
    return SortOrder(*fresh.fields, order_id=max(o.order_id for o in md.sort_orders) + 1)


def replace_table(
    catalog: Catalog,
    identifier: str,
    schema: Schema,
    partition: Sequence[Any],
    sort: Sequence[Any],
    properties: dict[str, str],
    location: str | None,
    write: Callable[[Any, Any], tuple[list[Any], Any, str]] | None,
    clear: Callable[[Any, str, set[str]], int],
) -> tuple[int | None, list[Any]]:
    """Replace the table (module docstring); `write(metadata, io)`: the new rows' Spark job
    over the table as replaced, returning the data files it wrote (and where, for `clear`).
    The snapshot committed (None without rows) and the data files."""
    from pyiceberg.table.update import UpgradeFormatVersionUpdate

    from mor.writer.files import delete_files
    from mor.writer.operations import OverwriteFiles
    from mor.writer.producer import new_table_snapshot

    table = load(catalog, identifier)
    md = table.metadata
    properties = dict(properties)
    version = properties.pop("format-version", None)  # a property of the metadata, not a key
    new_schema, last = reassigned(schema, md.schema(), md.last_column_id)
    same = next((s for s in md.schemas if s.fields == new_schema.fields), None)
    updates: list[Any] = []
    if version is not None and int(version) > md.format_version:
        updates.append(UpgradeFormatVersionUpdate(format_version=int(version)))
    elif version is not None and int(version) < md.format_version:
        raise CatalogChangeError(
            f"REPLACE TABLE {identifier}: format-version {version}, and the table is "
            f"v{md.format_version}: Iceberg cannot downgrade a table"
        )
    if same is not None:
        updates.append(SetCurrentSchemaUpdate(schema_id=same.schema_id))
        new_schema = same
    else:
        new_schema = Schema(*new_schema.fields, schema_id=max(s.schema_id for s in md.schemas) + 1)
        updates += [AddSchemaUpdate(schema_=new_schema), SetCurrentSchemaUpdate(schema_id=-1)]
    spec = _spec(md, new_schema, partition, identifier)
    if any(s.spec_id == spec.spec_id for s in md.partition_specs):
        updates.append(SetDefaultSpecUpdate(spec_id=spec.spec_id))
    else:
        updates += [AddPartitionSpecUpdate(spec=spec), SetDefaultSpecUpdate(spec_id=-1)]
    order = _order(md, new_schema, sort, identifier)
    if any(o.order_id == order.order_id for o in md.sort_orders):
        updates.append(SetDefaultSortOrderUpdate(sort_order_id=order.order_id))
    else:
        updates += [
            AddSortOrderUpdate(sort_order=order),
            SetDefaultSortOrderUpdate(sort_order_id=-1),
        ]
    if properties:
        updates.append(SetPropertiesUpdate(updates=properties))
    if location:
        updates.append(SetLocationUpdate(location=location))
    if "main" in md.refs:
        updates.append(RemoveSnapshotRefUpdate(ref_name="main"))
    files: list[Any] = []
    written: list[str] = []
    place = folder = None
    committed = False
    snapshot_id = None
    try:
        if write is not None:
            with v3_models():
                staged_md = update_table_metadata(md, tuple(updates))
            files, place, folder = write(staged_md, table.io)
            if files:
                staged = Table(table.name(), staged_md, table.metadata_location, table.io, catalog)
                # Spark's REPLACE ... AS SELECT writes through a truncate: an overwrite
                rows = OverwriteFiles(added_data=files)
                snap, more = new_table_snapshot(staged, rows, written)
                updates += list(more)
                snapshot_id = snap.snapshot_id
        requirements = (
            AssertTableUUID(uuid=md.table_uuid),
            AssertRefSnapshotId(ref="main", snapshot_id=md.current_snapshot_id),
        )
        after = max(md.format_version, int(version or 0))
        try:
            with (
                v3_models(),
                v3_writes(catalog, after, table.metadata_location, identifier, table.io),
            ):
                catalog.commit_table(table, requirements=requirements, updates=tuple(updates))
        except CommitFailedException as e:
            raise CatalogChangeError(
                f"REPLACE TABLE {identifier}: the table changed meanwhile ({e}); nothing was "
                "committed"
            ) from None
        committed = True
    finally:
        if not committed:
            if place is not None and folder is not None:
                clear(place, folder, set())
            delete_files(table.io, written)
    return snapshot_id, files
