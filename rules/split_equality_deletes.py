"""The equality-delete rewrite, as StarRocks does it for Iceberg merge-on-read.

A scan whose data files carry equality deletes becomes a Union of:
- the fast lane: files without equality deletes (position deletes are applied in the scan);
- one branch per distinct combination of equality id sets, whose scan is anti-joined
  (null-safe, guarded by sequence number and partition scope) with the delete scan of each
  id set in turn: a file reached by several id sets is anti-joined with every one of them.
The delete scan of one id set is one node shared by all branches that need it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from mor.planner.errors import InternalError
from mor.planner.nodes import (
    DATA_SEQ,
    GLOBAL_PART,
    PART,
    AntiJoin,
    Col,
    DataTask,
    EqDeleteScan,
    Expr,
    IcebergScan,
    Plan,
    ReadField,
    ScanFiles,
    Union,
)

if TYPE_CHECKING:
    from mor.rules import RuleContext


def split_equality_deletes(plan: Plan, ctx: RuleContext) -> Plan:
    """Split each scan that carries equality deletes into a Union of anti-joined branches."""
    return plan.transform_up(_split)


def _split(node: Plan) -> Plan:
    match node:
        case IcebergScan(files=ScanFiles() as files, branch=None) if any(
            d.eq_sets for d in files.data
        ):
            return _union(node, files)
        case _:
            return node  # unchanged: same object


def _union(scan: IcebergScan, files: ScanFiles) -> Plan:
    groups: dict[tuple[frozenset[int], ...], list[DataTask]] = {}
    for d in files.data:
        groups.setdefault(d.eq_sets, []).append(d)
    keys = sorted(groups, key=lambda k: (len(k), [sorted(s) for s in k]))
    delete_scans = {s: _delete_scan(scan, files, s) for k in keys for s in k}
    all_guards = {(k, s): _guards(groups[k], delete_scans[s], files) for k in keys for s in k}
    # a delete scan carries $del_seq/$del_partition only if some anti-join reading it checks them
    for s, ds in list(delete_scans.items()):
        if not any(any(g) for (k, s2), g in all_guards.items() if s2 == s):
            delete_scans[s] = replace(ds, meta=False)
    branches = []
    for i, key in enumerate(keys, start=1):
        guards = {s: all_guards[(key, s)] for s in key}
        meta = tuple(
            m
            for m, need in (
                (DATA_SEQ, any(g[0] for g in guards.values())),
                (PART, any(g[1] for g in guards.values())),
            )
            if need
        )
        branch_scan = _branch_scan(scan, files, groups[key], key, (i, len(keys)), meta)
        plan: Plan = branch_scan
        for s in key:
            keys_lr = tuple(
                (_left_key(branch_scan, fid), k.col.name)
                for fid, k in zip(sorted(s), delete_scans[s].keys)
            )
            plan = AntiJoin(
                left=plan,
                right=delete_scans[s],
                eq_set=s,
                keys=keys_lr,
                seq_guard=guards[s][0],
                part_guard=guards[s][1],
                null_safe=_may_hold_null_keys(delete_scans[s]),
            )
        branches.append(plan)
    return Union(inputs=tuple(branches), columns=scan.output)


def _may_hold_null_keys(deletes: EqDeleteScan) -> bool:
    """Unless every delete file's metrics say its (top-level) key columns hold no NULL."""
    if any(k.path for k in deletes.keys):
        return True  # a NULL struct above a nested key is not in the key's null count
    return not all(deletes.eq_set <= f.null_free for f in deletes.files)


def _guards(data: list[DataTask], deletes: EqDeleteScan, files: ScanFiles) -> tuple[bool, bool]:
    """Which of (sequence guard, partition guard) this anti-join still needs.

    A delete row can only meet data rows whose file is in `data`. Scan planning decided for each
    file which delete files apply; a guard is dropped only when it is true for every pair of a
    data file and a delete file of this scan that it would let through.
    """
    glob = all(d.partition_id == GLOBAL_PART for d in deletes.files)
    one_part = len({t.partition_id for t in data}) == 1 and all(
        d.partition_id in (GLOBAL_PART, data[0].partition_id) for d in deletes.files
    )
    part_needed = not (glob or one_part)
    seq_needed = False
    for t in data:
        for d in deletes.files:
            same_scope = d.partition_id in (GLOBAL_PART, t.partition_id)
            if same_scope and not t.data_seq < d.data_seq:
                seq_needed = True
            if not same_scope and not part_needed:
                raise InternalError("partition scope check is inconsistent")
    return seq_needed, part_needed


def _left_key(scan: IcebergScan, field_id: int) -> str:
    for f in scan.fields:
        if f.field_id == field_id and (not f.path or f.col.name == f"$eq{field_id}"):
            return f.col.name
    raise InternalError(f"equality field {field_id} missing from branch scan")


def _branch_scan(
    scan: IcebergScan,
    files: ScanFiles,
    data: list[DataTask],
    eq_sets: tuple[frozenset[int], ...],
    branch: tuple[int, int],
    meta: tuple[str, ...],
) -> IcebergScan:
    need = sorted({fid for s in eq_sets for fid in s})
    present = {f.field_id for f in scan.fields if not f.path}
    extra = []
    for ef in files.eq_fields:
        if ef.field_id in need and (ef.field_id not in present or ef.path):
            col = Col(name=f"$eq{ef.field_id}", label=ef.name, field_id=ef.field_id)
            extra.append(
                ReadField(
                    col=col,
                    field_id=ef.field_id,
                    type_str=ef.type_str,
                    path=ef.path,
                    default=ef.default,
                )
            )
    pos_ids = {p for d in data for p in d.pos_deletes}
    keep = tuple(
        t
        for t in files.deletes
        if t.file_id in pos_ids or (t.kind == "equality" and t.eq_ids in eq_sets)
    )
    sub = replace(files, data=tuple(data), deletes=keep)
    return replace(
        scan,
        files=sub,
        branch=branch,
        eq_sets=eq_sets,
        meta=meta,
        fields=scan.fields + tuple(extra),
    )


def _delete_scan(scan: IcebergScan, files: ScanFiles, eq_set: frozenset[int]) -> EqDeleteScan:
    by_id = {ef.field_id: ef for ef in files.eq_fields}
    tag = "_".join(str(i) for i in sorted(eq_set))
    keys = tuple(
        ReadField(
            col=Col(name=f"$del{tag}_{fid}", label=by_id[fid].name, field_id=fid),
            field_id=fid,
            type_str=by_id[fid].type_str,
            path=by_id[fid].path,
        )
        for fid in sorted(eq_set)
    )
    deletes = tuple(t for t in files.deletes if t.kind == "equality" and t.eq_ids == eq_set)
    return EqDeleteScan(
        pushed=_key_filters(scan, {k.field_id: k.col.name for k in keys if not k.path}),
        table=scan.table,
        source_key=scan.source_key,
        io=scan.io,
        eq_set=eq_set,
        keys=keys,
        files=deletes,
        partitions=files.partitions,
        layouts=files.layouts,
    )


def _key_filters(scan: IcebergScan, names: dict[int, str]) -> tuple[Expr, ...]:
    """The scan's pushed filters that test one equality key column, renamed to the delete side.

    Exact: a delete matches a data row only when their keys are equal (NULLs equal), so a delete
    whose key fails a filter could only match rows the filter removes. Only simple predicates
    (column op literal: deterministic) are moved."""
    by_name = {f.col.name: f.field_id for f in scan.fields if not f.path}
    out = []
    for e in scan.pushed:
        if e.pred is None or len(e.refs) != 1:
            continue
        (ref,) = e.refs
        fid = by_name.get(ref)
        if fid in names:
            out.append(e.renamed({ref: names[fid]}))
    return tuple(out)
