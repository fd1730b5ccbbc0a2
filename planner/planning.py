"""The planner's I/O step between rule lists: attach to each scan the files it reads."""

from __future__ import annotations

from dataclasses import replace

from planner.nodes import EqField, IcebergScan, Plan
from planner.scan_planning import plan_scan
from planner.schemas import TableSchema, find_field
from planner.sources import Resolver


def attach_files(plan: Plan, resolver: Resolver) -> Plan:
    """Plan every IcebergScan over its snapshot's manifests (see scan_planning)."""

    def visit(node: Plan) -> Plan:
        if not isinstance(node, IcebergScan) or node.files is not None:
            return node
        src = resolver.sources[node.source_key]
        schema = next(
            (s for s in src.metadata.schemas if s.schema_id == node.schema_id), src.metadata.schema()
        )
        files = plan_scan(node, src, schema)
        ids = sorted({i for d in files.deletes for i in d.eq_ids})
        eq_fields = []
        for fid in ids:
            f, path = find_field(src, fid, schema)
            eq_fields.append(
                EqField(field_id=fid, name=f.name, type_str=f.field_type.model_dump_json(), path=path)
            )
        return replace(node, files=replace(files, eq_fields=tuple(eq_fields)))

    return plan.transform_up(visit)


__all__ = ["attach_files", "TableSchema"]
