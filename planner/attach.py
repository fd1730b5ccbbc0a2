"""The planner's I/O step, between binding the SQL and the rules: each scan gets the files it
reads (scan_planning.py), grouped by layout where the table's history needs their footers, and
each metadata table its rows (pyiceberg's `inspect`)."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from pyiceberg.schema import Schema, index_by_id, index_name_by_id
from pyiceberg.types import (
    FixedType,
    IcebergType,
    ListType,
    MapType,
    NestedField,
    StructType,
    UUIDType,
)

from mor.planner.defaults import default_sql
from mor.planner.errors import MetadataError
from mor.planner.layouts import NAME_MAPPING, layout_of, needs_footers
from mor.planner.nodes import (
    SNAPSHOT_METADATA_TABLES,
    EqField,
    IcebergScan,
    Layout,
    MetadataTable,
    Plan,
    ScanFiles,
    TableChanges,
)
from mor.planner.requests import in_context
from mor.planner.scan_planning import plan_scan
from mor.planner.schemas import find_field
from mor.planner.settings import current
from mor.planner.sources import Resolver, TableSource
from mor.planner.state import LAYOUT_CACHE_FILES, ProcessCaches


def attach_files(plan: Plan, resolver: Resolver, cache: ProcessCaches) -> Plan:
    """Plan every IcebergScan over its snapshot's manifests (see scan_planning), with what
    `cache` keeps of earlier planning (and keeping what this planning reads)."""

    def visit(node: Plan) -> Plan:
        if isinstance(node, MetadataTable) and node.data is None:
            return replace(node, data=metadata_rows(node, resolver.sources[node.source_key]))
        if isinstance(node, TableChanges) and node.commits is None:
            from mor.planner.changes import plan_changes

            return plan_changes(
                node,
                resolver.sources[node.source_key],
                lambda scan, src: planned_scan(scan, src, cache),
            )
        if not isinstance(node, IcebergScan) or node.files is not None:
            return node
        return planned_scan(node, resolver.sources[node.source_key], cache)

    return plan.transform_up(visit)


def planned_scan(node: IcebergScan, src: TableSource, cache: ProcessCaches) -> IcebergScan:
    """`node` with its files: the snapshot's data files, the deletes that apply to each, the
    layouts of their columns and the fields the equality deletes name."""
    schema = next(
        (s for s in src.metadata.schemas if s.schema_id == node.schema_id),
        src.metadata.schema(),
    )
    files = plan_scan(node, src, schema, cache)
    if needs_footers(src):
        files = _with_layouts(files, src, schema, cache)
    ids = sorted({i for d in files.deletes for i in d.eq_ids})
    eq_fields = []
    for fid in ids:
        f, path = find_field(src, fid, schema)
        eq_fields.append(
            EqField(
                field_id=fid,
                name=f.name,
                type_str=f.field_type.model_dump_json(),
                path=path,
                default=None if path else default_sql(f, node.table),
            )
        )
    return replace(node, files=replace(files, eq_fields=tuple(eq_fields)))


def _with_layouts(
    files: ScanFiles, src: TableSource, schema: Schema, cache: ProcessCaches
) -> ScanFiles:
    """Group the scan's files by layout, from their footers (only for tables whose history
    needs them: layouts.footer_reason). Only the files the query reads are opened, in parallel
    (setting io_threads: an object store answers slowly), each once per process."""
    history = (
        str(src.metadata.table_uuid),
        len(src.metadata.schemas),
        schema.schema_id,
        src.metadata.properties.get(NAME_MAPPING),
    )
    wanted = [d for d in files.data] + [d for d in files.deletes if d.kind == "equality"]
    keys = {d.path: (d.read_path, d.size_bytes, history) for d in wanted}
    layouts = cache.layouts
    missing = [p for p, k in keys.items() if layouts.get(k) is None]
    if missing:
        workers = max(1, min(len(missing), current().io_threads))
        with ThreadPoolExecutor(workers, thread_name_prefix="mor-footers") as pool:
            found = list(pool.map(in_context(lambda p: layout_of(src, p, schema)), missing))
        shared: dict[Layout, Layout] = {}
        for p, lay in zip(missing, found):
            layouts.put(keys[p], shared.setdefault(lay, lay), 1, LAYOUT_CACHE_FILES)
    index: dict[Layout, int] = {Layout(): 0}

    def idx(path: str) -> int:
        lay = layouts.get(keys[path])
        if lay is None:  # evicted meanwhile by another scan's footers: read it again
            lay = layout_of(src, path, schema)
        return index.setdefault(lay, len(index))

    data = tuple(replace(d, layout=idx(d.path)) for d in files.data)
    deletes = tuple(
        replace(d, layout=idx(d.path)) if d.kind == "equality" else d for d in files.deletes
    )
    layouts = tuple(sorted(index, key=index.__getitem__))
    return replace(files, data=data, deletes=deletes, layouts=layouts)


def metadata_rows(node: MetadataTable, src: object) -> object:
    """The rows of a metadata table as an Arrow table, from pyiceberg's `inspect`, reading the
    table's manifests through the same FileIO (and path map) as its scans.

    pyiceberg 0.12 cannot build these tables for a uuid column (a bound in `readable_metrics`,
    an identity partition's value: Arrow's uuid extension type is built from Python values,
    which pyarrow does not implement), so `inspect` runs over the schemas with each uuid read
    as fixed[16] (the same 16 bytes in manifests), and those values are given back as the
    canonical strings Iceberg's Spark reader presents uuids as (uuid_strings)."""
    from pyiceberg.table import StaticTable

    metadata, uuids = _uuids_as_fixed(src.metadata)  # type: ignore[attr-defined]
    table = StaticTable(
        identifier=tuple(src.name.split(".")),  # type: ignore[attr-defined]
        metadata=metadata,
        metadata_location=src.metadata_location,  # type: ignore[attr-defined]
        io=src.io,  # type: ignore[attr-defined]
        catalog=None,  # type: ignore[arg-type]
    )
    fn = getattr(table.inspect, node.kind)
    try:
        rows = fn(node.snapshot_id) if node.kind in SNAPSHOT_METADATA_TABLES else fn()
    except Exception as e:  # noqa: BLE001 - a missing manifest, an unreadable file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MetadataError(f"cannot read {node.table}.{node.kind}: {first}") from e
    return uuid_strings(rows, *uuids) if uuids[0] or uuids[1] else rows


def _uuids_as_fixed(metadata: Any) -> tuple[Any, tuple[set[str], set[str]]]:
    """`metadata` with every uuid field of every schema typed fixed[16], and the names that
    then hold uuid bytes: columns (as readable_metrics names them) and identity partition
    fields. The metadata itself when no schema has a uuid."""
    columns: set[str] = set()
    uuid_ids = set()
    for schema in metadata.schemas:
        names = index_name_by_id(schema)
        for fid, f in index_by_id(schema).items():
            if isinstance(f.field_type, UUIDType):
                columns.add(names[fid])
                uuid_ids.add(fid)
    if not columns:
        return metadata, (set(), set())
    parts = set()
    for spec in metadata.partition_specs:
        for pf in spec.fields:
            if pf.source_id in uuid_ids and str(pf.transform) == "identity":
                parts.add(pf.name)
    schemas = [
        Schema(
            *(_fixed(f) for f in s.fields),
            schema_id=s.schema_id,
            identifier_field_ids=s.identifier_field_ids,
        )
        for s in metadata.schemas
    ]
    return metadata.model_copy(update={"schemas": schemas}), (columns, parts)


def _fixed(f: NestedField) -> NestedField:
    return f.model_copy(update={"field_type": _fixed_type(f.field_type)})


def _fixed_type(t: IcebergType) -> IcebergType:
    if isinstance(t, UUIDType):
        return FixedType(16)
    if isinstance(t, StructType):
        return StructType(*(_fixed(f) for f in t.fields))
    if isinstance(t, ListType):
        return ListType(t.element_id, _fixed_type(t.element_type), t.element_required)
    if isinstance(t, MapType):
        return MapType(
            t.key_id,
            _fixed_type(t.key_type),
            t.value_id,
            _fixed_type(t.value_type),
            t.value_required,
        )
    return t


def uuid_strings(table: Any, columns: set[str], parts: set[str]) -> Any:
    """An inspect table with the uuid bytes it holds as canonical strings: the bounds of the
    uuid `columns` under `readable_metrics`, and the `parts` under a `partition` struct."""
    import pyarrow as pa

    def fix(arr: Any, path: tuple[str, ...]) -> Any:
        if pa.types.is_struct(arr.type):
            kids = [fix(arr.field(i), (*path, f.name)) for i, f in enumerate(arr.type)]
            names = [f.name for f in arr.type]
            return pa.StructArray.from_arrays(kids, names=names, mask=arr.is_null())
        if not pa.types.is_fixed_size_binary(arr.type) or arr.type.byte_width != 16:
            return arr
        bound = len(path) >= 3 and path[-3] == "readable_metrics" and path[-2] in columns
        part = len(path) >= 2 and path[-2] == "partition" and path[-1] in parts
        if not (bound or part):
            return arr
        return pa.array(
            [None if b is None else str(uuid.UUID(bytes=b)) for b in arr.to_pylist()],
            pa.string(),
        )

    cols = [fix(table.column(i).combine_chunks(), (n,)) for i, n in enumerate(table.column_names)]
    return pa.Table.from_arrays(cols, names=table.column_names)
