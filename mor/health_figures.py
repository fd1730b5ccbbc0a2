"""`mor health`, its figures: how much a merge-on-read table's deletes cost its readers.

The advice drawn from them is in health_advice.py, the text and chart in health_report.py.

Everything comes from the table's metadata and the planner's own matching of deletes to data
files (the rules of SEMANTICS.md), plus, for exact counts, the position delete files themselves:

- `deleted_records` is exact for position deletes and deletion vectors (distinct positions below
  each data file's record count, from the delete files that apply to it, read by the reader
  scans use: physical/deletes/delete_files.py; a vector's cardinality is its manifest record count).
  Rows that equality deletes remove are known only by running the anti-joins: `exact=True`
  (`--exact`) counts the live rows of each data file on Spark; without it they are estimated
  (each delete key removes one row, split between the partitions its file applies to by their
  record counts, at most the rows left) and the report says so.
- `read_amplification` estimates what a scan costs against the same live rows compacted: the
  data files, the delete files that apply, each data file again per equality id set it is
  anti-joined with, and Spark's cost of opening a file (`spark.sql.files.openCostInBytes`,
  4 MiB) per file; divided by the live rows' bytes (data bytes times 1 - delete ratio) in files
  of the target size (`write.target-file-size-bytes`) with no delete file, plus their opening;
  the table's figure sums its partitions' costs (each compacted on its own).
- `advice` (health_advice.py) names the Spark procedure to run (Iceberg's
  `rewrite_data_files`, `rewrite_position_delete_files`, `expire_snapshots`) with the figure
  that triggered it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.manifest import DataFileContent

from mor.health_advice import Thresholds, advice
from mor.planner.delete_index import is_dv
from mor.planner.errors import MetadataError
from mor.planner.nodes import DataTask, DeleteTask, IcebergScan, show_ids
from mor.planner.scan_planning import delete_key, live_entries, plan_scan
from mor.planner.sources import TableSource
from mor.planner.state import ProcessCaches

OPEN_COST = 4 * 1024 * 1024  # Spark's spark.sql.files.openCostInBytes default
TARGET_FILE_SIZE = 512 * 1024 * 1024  # Iceberg's write.target-file-size-bytes default


@dataclass
class _Counts:
    data_files: int = 0
    data_records: int = 0
    data_bytes: int = 0
    position_delete_files: int = 0
    equality_delete_files: int = 0
    deletion_vectors: int = 0
    delete_file_bytes: int = 0
    position_deleted: int = 0
    equality_deleted: float = 0.0
    small_files: int = 0
    probe_bytes: int = 0  # data bytes anti-joined, once per equality id set
    max_delete_files: int = 0  # most delete files applying to one data file
    over_threshold: int = 0  # data files with at least Thresholds.delete_files
    deletes: set[int] = field(default_factory=set)  # delete file ids that apply here
    target: int = TARGET_FILE_SIZE  # the table's target data file size

    def deleted(self) -> int:
        return min(self.position_deleted + round(self.equality_deleted), self.data_records)

    def costs(self) -> tuple[float, float]:
        """What a scan of these files reads (bytes, each file's opening counted), and what it
        would read of the same live rows compacted: their bytes in files of the target size,
        no delete file."""
        ratio = self.deleted() / self.data_records if self.data_records else 0.0
        live_bytes = self.data_bytes * (1 - ratio)
        files = (
            self.data_files
            + self.position_delete_files
            + self.equality_delete_files
            + self.deletion_vectors
        )
        read = self.data_bytes + self.delete_file_bytes + self.probe_bytes + OPEN_COST * files
        ideal = live_bytes + OPEN_COST * max(1, math.ceil(live_bytes / self.target))
        return read, ideal

    def report(self, exact: bool, parts: Iterable[_Counts] = ()) -> dict[str, Any]:
        """The counts and figures; `parts`: the partitions these counts sum, each compacted
        on its own (rows of two partitions never share a file), for the read figure."""
        deleted = self.deleted()
        ratio = deleted / self.data_records if self.data_records else 0.0
        costs = [p.costs() for p in parts] or [self.costs()]
        read, ideal = sum(c[0] for c in costs), sum(c[1] for c in costs)
        return {
            "data_files": self.data_files,
            "data_records": self.data_records,
            "data_bytes": self.data_bytes,
            "position_delete_files": self.position_delete_files,
            "equality_delete_files": self.equality_delete_files,
            "deletion_vectors": self.deletion_vectors,
            "delete_file_bytes": self.delete_file_bytes,
            "deleted_records": deleted,
            "deleted_records_exact": exact,
            "delete_ratio": round(ratio, 4),
            "small_files": self.small_files,
            "max_delete_files_per_data_file": self.max_delete_files,
            "read_amplification": round(read / ideal, 2),
        }


def manifests(src: TableSource) -> dict[str, Any] | None:
    """The current snapshot's manifests as rewrite_manifests sees them (its manifest list
    read, no manifest): how many (data, delete), their bytes, and how many rewrite_manifests
    would leave (writer/rewrite_manifests.choose: the current spec's regrouped, the other
    specs' kept)."""
    from mor.planner.manifests import read_records
    from mor.writer.rewrite_manifests import choose

    md = src.metadata
    head = md.current_snapshot()
    if head is None:
        return None
    listed = read_records(src.io, head.manifest_list)[2]
    chosen = choose(md, listed, md.default_spec_id)
    deletes = sum(1 for r in listed if r["content"] == 1)
    return {
        "count": len(listed),
        "data": len(listed) - deletes,
        "deletes": deletes,
        "bytes": sum(r["manifest_length"] for r in listed),
        "after_rewrite": len(listed) - sum(len(c.listed) - c.count for c in chosen),
    }


def history(src: TableSource, now_ms: int, orphans: bool = False) -> dict[str, Any]:
    """The table's history as expiry and orphan removal see it: its snapshots (how many, the
    oldest one's age), its refs, its metadata file (bytes, entries in its log), the current
    snapshot's manifests (`manifests`), what
    `expire_snapshots` with the table's own retention would remove now (snapshots, refs, and
    the files only they reach, by kind: planner/expiry.py, the manifests of every snapshot read
    once), and with `orphans`, the files under the table's location older than three days that
    nothing references (writer/orphans.py: the store listed)."""
    from mor.planner.expiry import ExpiryError, expired_files, gc_enabled, plan_expiry, reachable

    md = src.metadata
    stamps = [s.timestamp_ms for s in md.snapshots]
    try:
        size: int | None = len(src.io.new_input(src.metadata_location))
    except Exception:  # noqa: BLE001 - a figure, not a reason to fail the report
        size = None
    out: dict[str, Any] = {
        "snapshots": len(md.snapshots),
        "oldest_snapshot_days": round((now_ms - min(stamps)) / 86_400_000, 2) if stamps else None,
        "refs": len(md.refs),
        "metadata_file_bytes": size,
        "metadata_log_entries": len(md.metadata_log),
        "gc_enabled": gc_enabled(md),
        "manifests": manifests(src),
        "expiry": None,
        "orphans": None,
    }
    try:
        plan = plan_expiry(md, now_ms)
    except ExpiryError as e:
        out["expiry"] = {"error": str(e)}
        plan = None
    if plan is not None:
        try:
            freed = (
                expired_files(src.io, md, reachable(src.io, md, plan.retained))
                if plan.removed
                else None
            )
        except Exception as e:  # noqa: BLE001 - a file a kept snapshot reaches is unreadable
            first = str(e).splitlines()[0] if str(e) else ""
            out["expiry"] = {"error": f"{type(e).__name__}: {first}"}
            return out
        out["expiry"] = {
            "snapshots": len(plan.removed),
            "refs": list(plan.removed_refs),
            "files": freed.counts() if freed is not None else {},
        }
    if orphans:
        from mor.planner.orphans import (
            OLDER_THAN_MS,
            OrphanError,
            Prefixes,
            find_orphans,
            roots,
            valid_files,
        )
        from mor.writer.orphans import candidates, no_other_table

        folders = roots(md, None)
        sizes = candidates(src.io.inner, md, folders, now_ms - OLDER_THAN_MS)
        valid = valid_files(src.io, md, src.metadata_location)
        found, _ = find_orphans(sizes, valid, Prefixes.of(mode="IGNORE"))
        try:  # a location another table shares: remove_orphan_files refuses it, as here
            no_other_table(src.io, md.table_uuid, found, src.name)
            out["orphans"] = {"files": len(found), "bytes": sum(sizes[p] for p in found)}
        except OrphanError as e:
            out["orphans"] = {"error": str(e)}
    return out


def health(
    src: TableSource,
    cache: ProcessCaches,
    *,
    snapshot_id: int | None = None,
    live_rows: Callable[[int], dict[str, int]] | None = None,
    catalog_name: str = "catalog",
    thresholds: Thresholds = Thresholds(),
    orphans: bool = False,
    now_ms: int | None = None,
) -> dict[str, Any]:
    """The health report of one table at one snapshot (default: the current one), as a
    JSON-ready dict: the table's counts at top level and a `partitions` list of the same
    counts per partition, `equality_keys`, and `advice`. `live_rows(snapshot_id)`: the live
    rows of each data file by path, every delete applied (exact counts; else estimated).
    `cache`: the process's caches, which planning and the position delete files read use."""
    md = src.metadata
    sid = md.current_snapshot_id if snapshot_id is None else snapshot_id
    snap = md.snapshot_by_id(sid) if sid is not None else None
    if sid is not None and snap is None:
        raise MetadataError(f"table {src.name} has no snapshot {sid}")
    target = int(md.properties.get("write.target-file-size-bytes", TARGET_FILE_SIZE))
    small = int(target * 0.75)  # Iceberg's min-file-size-bytes default for rewrite_data_files
    import time

    out: dict[str, Any] = {
        "table": src.name,
        "snapshot_id": sid,
        "format_version": md.format_version,
        "snapshots": len(md.snapshots),
        "history": history(
            src, now_ms if now_ms is not None else int(time.time() * 1000), orphans
        ),
    }
    if snap is None:
        return {
            **out,
            **_Counts().report(True),
            "dangling_delete_files": 0,
            "position_delete_files_per_data_file": 0.0,
            "equality_keys": [],
            "small_file_bytes": small,
            "advice": [],
            "partitions": [],
        }
    scan = IcebergScan(
        table=src.name,
        source_key=src.key,
        io=src.io.inner,
        snapshot_id=sid,
        schema_id=md.current_schema_id,
        fields=(),
    )
    files = plan_scan(scan, src, md.schema(), cache)
    deletes = {d.file_id: d for d in files.deletes}
    entries = live_entries(src, snap, cache)
    live_deletes = [e for e in entries if e.file.content != DataFileContent.DATA]

    positions = _deleted_positions(src, files.data, deletes, cache)
    live = live_rows(sid) if live_rows is not None else None
    eq_share = _equality_estimate(files.data, deletes) if live is None else {}

    total, parts, first = _count(
        files, deletes, live_deletes, target, small, thresholds, live, positions, eq_share
    )
    used = {d.identity for d in files.deletes}
    dangling = [e for e in live_deletes if delete_key(e) not in used]
    estimated = live is None and any(t.eq_deletes for t in files.data)
    # Parquet position delete files applying to a data file that has any (vectors are one each)
    stacks = [
        sum(1 for i in t.pos_deletes if not deletes[i].is_dv) for t in files.data if t.pos_deletes
    ]
    stacks = [n for n in stacks if n]
    partitions = _partitions(files, parts, first, estimated)
    report = {
        **out,
        **total.report(not estimated, parts.values()),
        "data_files_over_delete_file_threshold": total.over_threshold,
        "dangling_delete_files": len(dangling),
        "position_delete_files_per_data_file": round(sum(stacks) / len(stacks), 2)
        if stacks
        else 0.0,
        "equality_keys": _equality_keys(src, live_deletes),
        "small_file_bytes": small,
        "thresholds": {
            "delete_ratio": thresholds.delete_ratio,
            "delete_files": thresholds.delete_files,
            "small_files": thresholds.small_files,
            "snapshots": thresholds.snapshots,
        },
    }
    report["advice"] = advice(report, partitions, dangling, src, catalog_name, thresholds)
    report["partitions"] = partitions
    return report


def _count(
    files: Any,
    deletes: dict[int, Any],
    live_deletes: list[Any],
    target: int,
    small: int,
    thresholds: Thresholds,
    live: dict[str, int] | None,
    positions: dict[int, int],
    eq_share: dict[int, float],
) -> tuple[_Counts, dict[int, _Counts], dict[int, DataTask]]:
    """The table's counts, each partition's, and a data file of each partition (its spec
    and values)."""
    total = _Counts(target=target)
    parts: dict[int, _Counts] = defaultdict(lambda: _Counts(target=target))
    first: dict[int, DataTask] = {}  # a data file of each partition: its spec and values
    for t in files.data:
        first.setdefault(t.partition_id, t)
        c = parts[t.partition_id]
        applying = (*t.pos_deletes, *t.eq_deletes)
        for x in (c, total):
            x.data_files += 1
            x.data_records += t.record_count
            x.data_bytes += t.size_bytes
            x.small_files += t.size_bytes < small
            x.probe_bytes += t.size_bytes * len(t.eq_sets)
            x.max_delete_files = max(x.max_delete_files, len(applying))
            x.over_threshold += len(applying) >= thresholds.delete_files
            if live is not None:
                gone = t.record_count - live.get(t.path, 0)
                x.position_deleted += gone
            else:
                x.position_deleted += positions.get(t.file_id, 0)
                x.equality_deleted += eq_share.get(t.file_id, 0.0)
        c.deletes.update(applying)
    for c in parts.values():
        for i in c.deletes:
            _count_delete(c, deletes[i].kind, deletes[i].is_dv, deletes[i].size_bytes)
    for e in live_deletes:
        f = e.file
        _count_delete(
            total,
            "position" if f.content == DataFileContent.POSITION_DELETES else "equality",
            is_dv(f),
            f.content_size_in_bytes if is_dv(f) else f.file_size_in_bytes,
        )
    return total, parts, first


def _partitions(
    files: Any, parts: dict[int, _Counts], first: dict[int, DataTask], estimated: bool
) -> list[dict[str, Any]]:
    """The per-partition rows of the report, in the order of their names."""
    partitions = []
    for pid in sorted(parts, key=lambda p: files.partitions[p]):
        partitions.append(
            {
                "partition": files.partitions[pid],
                "spec_id": first[pid].spec_id,
                "values": {str(k): _plain(v) for k, v in first[pid].partition},
                **parts[pid].report(not estimated),
                "data_files_over_delete_file_threshold": parts[pid].over_threshold,
            }
        )
    return partitions


def _plain(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, bool)) or v is None else str(v)


def _count_delete(c: _Counts, kind: str, dv: bool, size: int | None) -> None:
    if dv:
        c.deletion_vectors += 1
    elif kind == "position":
        c.position_delete_files += 1
    else:
        c.equality_delete_files += 1
    c.delete_file_bytes += size or 0


def _deleted_positions(
    src: TableSource,
    data: Iterable[DataTask],
    deletes: dict[int, DeleteTask],
    cache: ProcessCaches,
) -> dict[int, int]:
    """Exact count of deleted positions per data file: a deletion vector's cardinality (its
    manifest record count: no blob is read, a request per data file on an object store); else
    the distinct positions below the file's record count in the position delete files that
    apply, read by the reader scans use (physical/deletes/delete_files.py: in parallel, cached)."""
    from mor.physical.deletes.delete_files import read_positions

    out: dict[int, int] = {}
    files = []
    for t in data:
        dv = next((deletes[i] for i in t.pos_deletes if deletes[i].is_dv), None)
        if dv is not None:
            out[t.file_id] = min(dv.record_count, t.record_count)
        elif t.pos_deletes:
            files.append(t)
    found = read_positions(files, deletes, src.name, src.key, cache) if files else {}
    out.update({fid: len(p) for fid, p in found.items()})
    return out


def _equality_estimate(
    data: Iterable[DataTask], deletes: dict[int, DeleteTask]
) -> dict[int, float]:
    """Rows equality deletes remove, estimated per data file: each key of a delete file removes
    one row, split between the data files it applies to by their record counts."""
    served: dict[int, list[DataTask]] = defaultdict(list)
    for t in data:
        for i in t.eq_deletes:
            served[i].append(t)
    out: dict[int, float] = defaultdict(float)
    for i, tasks in served.items():
        rows = sum(t.record_count for t in tasks) or 1
        for t in tasks:
            out[t.file_id] += deletes[i].record_count * t.record_count / rows
    return out


def _equality_keys(src: TableSource, live: list[Any]) -> list[dict[str, Any]]:
    """Per equality id set: its columns, delete files, key rows and sequence-number span."""
    by_set: dict[frozenset[int], list[Any]] = defaultdict(list)
    for e in live:
        if e.file.content == DataFileContent.EQUALITY_DELETES:
            by_set[frozenset(e.file.equality_ids or ())].append(e)
    schema = src.metadata.schema()
    out = []
    for ids in sorted(by_set, key=sorted):
        es = by_set[ids]
        names = []
        for i in sorted(ids):
            name = schema.find_column_name(i)
            names.append(name if name is not None else f"(dropped field {i})")
        out.append(
            {
                "field_ids": show_ids(ids),
                "columns": names,
                "delete_files": len(es),
                "delete_records": sum(e.file.record_count for e in es),
                "min_sequence_number": min(e.seq for e in es),
                "max_sequence_number": max(e.seq for e in es),
            }
        )
    return out
