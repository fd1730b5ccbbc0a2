"""The planner's I/O step between rule lists: attach to each scan the files it reads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from pyiceberg.schema import Schema

from mor.planner.defaults import default_sql
from mor.planner.errors import MetadataError
from mor.planner.layouts import LAYOUT_CACHE_FILES, LAYOUTS, NAME_MAPPING, layout_of, needs_footers
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
from mor.planner.scan_planning import plan_scan
from mor.planner.schemas import find_field
from mor.planner.settings import current
from mor.planner.sources import Resolver, TableSource


def attach_files(plan: Plan, resolver: Resolver) -> Plan:
    """Plan every IcebergScan over its snapshot's manifests (see scan_planning)."""

    def visit(node: Plan) -> Plan:
        if isinstance(node, MetadataTable) and node.data is None:
            return replace(node, data=metadata_rows(node, resolver.sources[node.source_key]))
        if isinstance(node, TableChanges) and node.commits is None:
            from mor.planner.changes import plan_changes

            return plan_changes(node, resolver.sources[node.source_key], planned_scan)
        if not isinstance(node, IcebergScan) or node.files is not None:
            return node
        return planned_scan(node, resolver.sources[node.source_key])

    return plan.transform_up(visit)


def planned_scan(node: IcebergScan, src: TableSource) -> IcebergScan:
    """`node` with its files: the snapshot's data files, the deletes that apply to each, the
    layouts of their columns and the fields the equality deletes name."""
    schema = next(
        (s for s in src.metadata.schemas if s.schema_id == node.schema_id),
        src.metadata.schema(),
    )
    files = plan_scan(node, src, schema)
    if needs_footers(src):
        files = _with_layouts(files, src, schema)
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


def _with_layouts(files: ScanFiles, src: TableSource, schema: Schema) -> ScanFiles:
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
    missing = [p for p, k in keys.items() if LAYOUTS.get(k) is None]
    if missing:
        workers = max(1, min(len(missing), current().io_threads))
        with ThreadPoolExecutor(workers, thread_name_prefix="mor-footers") as pool:
            found = list(pool.map(lambda p: layout_of(src, p, schema), missing))
        shared: dict[Layout, Layout] = {}
        for p, lay in zip(missing, found):
            LAYOUTS.put(keys[p], shared.setdefault(lay, lay), 1, LAYOUT_CACHE_FILES)
    index: dict[Layout, int] = {Layout(): 0}

    def idx(path: str) -> int:
        lay = LAYOUTS.get(keys[path])
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
    table's manifests through the same FileIO (and path map) as its scans."""
    from pyiceberg.table import StaticTable

    table = StaticTable(
        identifier=tuple(src.name.split(".")),  # type: ignore[attr-defined]
        metadata=src.metadata,  # type: ignore[attr-defined]
        metadata_location=src.metadata_location,  # type: ignore[attr-defined]
        io=src.io,  # type: ignore[attr-defined]
        catalog=None,  # type: ignore[arg-type]
    )
    fn = getattr(table.inspect, node.kind)
    try:
        if node.kind in SNAPSHOT_METADATA_TABLES:
            return fn(node.snapshot_id)
        return fn()
    except Exception as e:  # noqa: BLE001 - a missing manifest, an unreadable file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MetadataError(f"cannot read {node.table}.{node.kind}: {first}") from e
