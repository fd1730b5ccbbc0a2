"""`mor tables` and `mor describe`: what a catalog holds and what a table is, from metadata only."""

from __future__ import annotations

import datetime as dt

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError

from mor.planner.errors import TableNotFoundError
from mor.planner.sources import TableSource


def list_tables(catalog: Catalog, namespace: str | None) -> list[str]:
    """`ns.table` names, sorted: of one namespace, or of every namespace (nested ones too)."""
    if namespace:
        spaces = [tuple(namespace.split("."))]
    else:
        spaces, todo = [], list(catalog.list_namespaces())
        while todo:
            ns = todo.pop()
            spaces.append(ns)
            todo += [c for c in catalog.list_namespaces(ns) if c != ns]
    out = []
    for ns in spaces:
        try:
            out += [".".join(t) for t in catalog.list_tables(ns)]
        except NoSuchNamespaceError as e:
            raise TableNotFoundError(
                f"namespace {'.'.join(ns)} not found in catalog {catalog.name!r}"
            ) from e
    return sorted(set(out))


def describe(src: TableSource) -> str:
    """Schema, partition specs, snapshots, properties and location of one table."""
    md = src.metadata
    lines = [f"table      {src.name}", f"location   {md.location}"]
    lines.append(f"format     v{md.format_version}, metadata {src.metadata_location}")
    schema = md.schema()
    lines += ["", f"schema {schema.schema_id}"]
    width = max((len(f.name) for f in schema.fields), default=0)
    for f in schema.fields:
        req = "  required" if f.required else ""
        lines.append(f"  {f.field_id:>4}  {f.name.ljust(width)}  {f.field_type}{req}")
    if schema.identifier_field_ids:
        names = [schema.find_column_name(i) for i in schema.identifier_field_ids]
        lines.append(f"  identifier fields: {', '.join(n or '?' for n in names)}")
    lines += ["", "partition specs"]
    for spec_id, spec in sorted(md.specs().items()):
        fields = ", ".join(
            f"{schema.find_column_name(p.source_id) or p.source_id} {p.transform} as {p.name}"
            for p in spec.fields
        )
        current = " (current)" if spec_id == md.default_spec_id else ""
        lines.append(f"  {spec_id}: {fields or 'unpartitioned'}{current}")
    snaps = sorted(md.snapshots, key=lambda s: s.sequence_number or 0)
    lines += ["", f"snapshots  {len(snaps)} (current {md.current_snapshot_id})"]
    for s in snaps[-10:]:
        when = dt.datetime.fromtimestamp(s.timestamp_ms / 1000, dt.timezone.utc)
        summary = s.summary
        op = summary.operation.value if summary is not None else "?"
        lines.append(
            f"  {s.snapshot_id}  seq {s.sequence_number}  {when:%Y-%m-%d %H:%M:%S} UTC  {op}"
        )
    if len(snaps) > 10:
        lines.append(f"  ... {len(snaps) - 10} older (SELECT * FROM {src.name}.snapshots)")
    if md.refs:
        lines += ["", "refs"]
        for name, ref in sorted(md.refs.items()):
            lines.append(f"  {name}  {ref.snapshot_ref_type.value}  {ref.snapshot_id}")
    if md.properties:
        lines += ["", "properties"]
        lines += [f"  {k} = {v}" for k, v in sorted(md.properties.items())]
    return "\n".join(lines) + "\n"
