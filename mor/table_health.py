"""`mor health`: how much a merge-on-read table's deletes cost its readers, and what to run.

Everything comes from the table's metadata and the planner's own matching of deletes to data
files (the rules of SEMANTICS.md), plus, for exact counts, the position delete files themselves:

- `deleted_records` is exact for position deletes and deletion vectors (distinct positions below
  each data file's record count, from the delete files that apply to it; a vector's cardinality
  is its manifest record count). Rows that equality deletes remove are known only by running the
  anti-joins: `exact=True` (`--exact`) counts the live rows of each data file on Spark; without
  it they are estimated (each delete key removes one row, split between the partitions its file
  applies to by their record counts, at most the rows left) and the report says so.
- `read_amplification` estimates what a scan costs against the same live rows compacted: the
  data files, the delete files that apply, each data file again per equality id set it is
  anti-joined with, and Spark's cost of opening a file (`spark.sql.files.openCostInBytes`,
  4 MiB) per file; divided by the live rows' bytes (data bytes times 1 - delete ratio) in files
  of the target size (`write.target-file-size-bytes`) with no delete file, plus their opening.
- `advice` names the Spark procedure to run (Iceberg's `rewrite_data_files`,
  `rewrite_position_delete_files`, `expire_snapshots`) with the figure that triggered it.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.manifest import DataFileContent

from mor.planner.delete_index import is_dv
from mor.planner.errors import MetadataError, MorError
from mor.planner.nodes import DataTask, DeleteTask, IcebergScan, show_ids
from mor.planner.scan_planning import delete_key, live_entries, plan_scan
from mor.planner.sources import TableSource

OPEN_COST = 4 * 1024 * 1024  # Spark's spark.sql.files.openCostInBytes default
TARGET_FILE_SIZE = 512 * 1024 * 1024  # Iceberg's write.target-file-size-bytes default


@dataclass(frozen=True)
class Thresholds:
    """When advice is given. The first is Iceberg's own default for `rewrite_data_files`."""

    delete_ratio: float = 0.3  # rewrite_data_files `delete-ratio-threshold`
    delete_files: int = 5  # delete files applying to one data file (`delete-file-threshold`)
    small_files: int = 5  # small data files in one partition (`min-input-files`)
    snapshots: int = 100  # snapshots kept in the metadata before expiring is advised


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

    def report(self, exact: bool) -> dict[str, Any]:
        deleted = self.position_deleted + round(self.equality_deleted)
        deleted = min(deleted, self.data_records)
        ratio = deleted / self.data_records if self.data_records else 0.0
        live_bytes = self.data_bytes * (1 - ratio)
        files = (
            self.data_files
            + self.position_delete_files
            + self.equality_delete_files
            + self.deletion_vectors
        )
        read = self.data_bytes + self.delete_file_bytes + self.probe_bytes + OPEN_COST * files
        # the same rows compacted: their bytes in files of the target size, no delete file
        ideal = live_bytes + OPEN_COST * max(1, math.ceil(live_bytes / self.target))
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


def health(
    src: TableSource,
    *,
    snapshot_id: int | None = None,
    live_rows: Callable[[int], dict[str, int]] | None = None,
    catalog_name: str = "catalog",
    thresholds: Thresholds = Thresholds(),
) -> dict[str, Any]:
    """The health report of one table at one snapshot (default: the current one), as a
    JSON-ready dict: the table's counts at top level and a `partitions` list of the same
    counts per partition, `equality_keys`, and `advice`. `live_rows(snapshot_id)`: the live
    rows of each data file by path, every delete applied (exact counts; else estimated)."""
    md = src.metadata
    sid = md.current_snapshot_id if snapshot_id is None else snapshot_id
    snap = md.snapshot_by_id(sid) if sid is not None else None
    if sid is not None and snap is None:
        raise MetadataError(f"table {src.name} has no snapshot {sid}")
    target = int(md.properties.get("write.target-file-size-bytes", TARGET_FILE_SIZE))
    small = int(target * 0.75)  # Iceberg's min-file-size-bytes default for rewrite_data_files
    out: dict[str, Any] = {
        "table": src.name,
        "snapshot_id": sid,
        "format_version": md.format_version,
        "snapshots": len(md.snapshots),
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
        snapshot_id=sid,
        schema_id=md.current_schema_id,
        fields=(),
    )
    files = plan_scan(scan, src, md.schema())
    deletes = {d.file_id: d for d in files.deletes}
    entries = live_entries(src, snap)
    live_deletes = [e for e in entries if e.file.content != DataFileContent.DATA]

    positions = _deleted_positions(src, files.data, deletes)
    live = live_rows(sid) if live_rows is not None else None
    eq_share = _equality_estimate(files.data, deletes) if live is None else {}

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
    used = {d.identity for d in files.deletes}
    dangling = [e for e in live_deletes if delete_key(e) not in used]
    estimated = live is None and any(t.eq_deletes for t in files.data)
    # Parquet position delete files applying to a data file that has any (vectors are one each)
    stacks = [
        sum(1 for i in t.pos_deletes if not deletes[i].is_dv) for t in files.data if t.pos_deletes
    ]
    stacks = [n for n in stacks if n]
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
    report = {
        **out,
        **total.report(not estimated),
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
    src: TableSource, data: Iterable[DataTask], deletes: dict[int, DeleteTask]
) -> dict[int, int]:
    """Exact count of deleted positions per data file: a vector's cardinality; the distinct
    positions below the file's record count in the position delete files that apply."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    wanted: dict[int, set[str]] = defaultdict(set)  # delete file id -> data paths it serves
    out: dict[int, int] = {}
    for t in data:
        for i in t.pos_deletes:
            d = deletes[i]
            if d.is_dv:
                out[t.file_id] = min(d.record_count, t.record_count)
            else:
                wanted[i].add(t.path)
    found: dict[str, set[int]] = defaultdict(set)
    for i, paths in wanted.items():
        d = deletes[i]
        try:
            with src.io.new_input(d.read_path).open() as f:
                table = pq.read_table(f, columns=["file_path", "pos"])
        except Exception as e:  # noqa: BLE001 - missing or not Parquet: one line, by name
            raise MetadataError(
                f"table {src.name}: cannot read position delete file {d.path}: "
                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            ) from e
        table = table.filter(pc.is_in(table["file_path"], value_set=_array(sorted(paths))))
        for row in table.group_by("file_path").aggregate([("pos", "distinct")]).to_pylist():
            found[row["file_path"]].update(row["pos_distinct"])
    for t in data:
        if t.file_id not in out and t.path in found:
            out[t.file_id] = sum(1 for p in found[t.path] if 0 <= p < t.record_count)
    return out


def _array(values: list[str]) -> Any:
    import pyarrow as pa

    return pa.array(values, pa.string())


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


def _where(src: TableSource, partitions: list[dict[str, Any]]) -> str | None:
    """A `where` filter selecting these partitions for rewrite_data_files, when every one is of
    a spec with identity transforms only (else None: the procedure then runs on the table)."""
    md = src.metadata
    specs = md.specs()
    schema = md.schema()
    terms = []
    for p in partitions:
        spec = specs[p["spec_id"]]
        if not spec.fields or any(str(f.transform) != "identity" for f in spec.fields):
            return None
        conds = []
        for f in spec.fields:
            name = schema.find_column_name(f.source_id)
            if name is None:
                return None
            v = p["values"].get(str(f.field_id))
            if v is None:
                conds.append(f"{name} IS NULL")
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                conds.append(f"{name} = {v}")
            else:
                text = str(v).replace("'", "''")
                conds.append(f"{name} = '{text}'")
        terms.append(" AND ".join(conds))
    if not terms:
        return None
    return " OR ".join(f"({t})" if len(terms) > 1 else t for t in terms)


def advice(
    report: dict[str, Any],
    partitions: list[dict[str, Any]],
    dangling: list[Any],
    src: TableSource,
    catalog: str,
    th: Thresholds,
) -> list[dict[str, Any]]:
    """What to run, each with the figure that triggered it; nothing for a healthy table."""
    table = src.name
    out: list[dict[str, Any]] = []

    def call(proc: str, *args: str) -> str:
        return f"CALL {catalog}.system.{proc}(table => '{table}'{''.join(', ' + a for a in args)})"

    def where_arg(parts: list[dict[str, Any]]) -> list[str]:
        if len(parts) == len(partitions):
            return []
        w = _where(src, parts)
        return [f"where => {json.dumps(w)}"] if w else []

    heavy = [p for p in partitions if p["delete_ratio"] >= th.delete_ratio]
    if heavy:
        worst = max(heavy, key=lambda p: p["delete_ratio"])
        est = "" if worst["deleted_records_exact"] else " (estimated: --exact counts it)"
        out.append(
            {
                "procedure": "rewrite_data_files",
                "call": call(
                    "rewrite_data_files",
                    *where_arg(heavy),
                    f"options => map('delete-ratio-threshold', '{th.delete_ratio}')",
                ),
                "reason": (
                    f"{len(heavy)} of {len(partitions)} partition(s) have a delete ratio of "
                    f"{th.delete_ratio} or more (highest {worst['delete_ratio']} in "
                    f"{worst['partition']}{est})"
                ),
                "partitions": [p["partition"] for p in heavy],
            }
        )
    many = [p for p in partitions if p["data_files_over_delete_file_threshold"]]
    if many:
        n = sum(p["data_files_over_delete_file_threshold"] for p in many)
        out.append(
            {
                "procedure": "rewrite_data_files",
                "call": call(
                    "rewrite_data_files",
                    *where_arg(many),
                    f"options => map('delete-file-threshold', '{th.delete_files}')",
                ),
                "reason": (
                    f"{n} data file(s) have {th.delete_files} or more delete files applying to "
                    f"them (at most {report['max_delete_files_per_data_file']})"
                ),
                "partitions": [p["partition"] for p in many],
            }
        )
    per_file = report["position_delete_files_per_data_file"]
    dangling_pos = sum(1 for e in dangling if e.file.content == DataFileContent.POSITION_DELETES)
    stacked = per_file >= 2 and report["position_delete_files"] >= th.small_files
    if dangling_pos or stacked:
        why = []
        if stacked:
            why.append(
                f"{per_file} position delete files apply to each data file that has any, on "
                "average (rewriting merges them: one file to open per data file)"
            )
        if dangling_pos:
            why.append(f"{dangling_pos} delete file(s) or vectors apply to no live data file")
        out.append(
            {
                "procedure": "rewrite_position_delete_files",
                "call": call("rewrite_position_delete_files"),
                "reason": "; ".join(why),
                "partitions": [],
            }
        )
    dangling_eq = len(dangling) - dangling_pos
    if dangling_eq:
        out.append(
            {
                "procedure": "rewrite_data_files",
                "call": call(
                    "rewrite_data_files", "options => map('remove-dangling-deletes', 'true')"
                ),
                "reason": f"{dangling_eq} equality delete file(s) apply to no live data file",
                "partitions": [],
            }
        )
    small = [p for p in partitions if p["small_files"] >= th.small_files]
    if small and not heavy:
        n = sum(p["small_files"] for p in small)
        out.append(
            {
                "procedure": "rewrite_data_files",
                "call": call("rewrite_data_files", *where_arg(small)),
                "reason": (
                    f"{n} data file(s) smaller than {report['small_file_bytes']} bytes (75% of "
                    f"the target file size) in {len(small)} partition(s), "
                    f"{th.small_files} or more in each"
                ),
                "partitions": [p["partition"] for p in small],
            }
        )
    if report["snapshots"] > th.snapshots:
        out.append(
            {
                "procedure": "expire_snapshots",
                "call": call("expire_snapshots", f"retain_last => {th.snapshots}"),
                "reason": (
                    f"{report['snapshots']} snapshots in the metadata (more than "
                    f"{th.snapshots}): their manifests and unreferenced delete files stay"
                ),
                "partitions": [],
            }
        )
    return out


def bar(ratio: float, width: int = 20) -> str:
    filled = min(width, max(0, round(ratio * width)))
    return "█" * filled + "·" * (width - filled)


def render_table(report: dict[str, Any]) -> str:
    """The report as text: the table's figures, a bar of the delete ratio per partition, the
    equality keys and the advice."""

    def amp(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}x"

    est = "" if report["deleted_records_exact"] else " (estimated: --exact counts it)"
    lines = [
        f"table        {report['table']} @ snapshot {report['snapshot_id']} "
        f"(v{report['format_version']}, {report['snapshots']} snapshots)",
        f"data         {report['data_files']} files, {report['data_records']} records, "
        f"{_size(report['data_bytes'])}, {report['small_files']} small",
        f"deletes      {report['position_delete_files']} position delete files, "
        f"{report['deletion_vectors']} deletion vectors, {report['equality_delete_files']} "
        f"equality delete files ({_size(report['delete_file_bytes'])}), "
        f"{report['dangling_delete_files']} dangling",
        f"deleted      {report['deleted_records']} records{est}, delete ratio "
        f"{report['delete_ratio']:.2%}",
        f"read         ~{amp(report['read_amplification'])} the cost of the same rows compacted",
    ]
    for k in report["equality_keys"]:
        lines.append(
            f"eq keys      {k['field_ids']} ({', '.join(k['columns'])}): {k['delete_files']} "
            f"files, {k['delete_records']} keys, sequence numbers "
            f"{k['min_sequence_number']}..{k['max_sequence_number']}"
        )
    if report["partitions"]:
        width = max(len(p["partition"]) for p in report["partitions"])
        width = min(max(width, 9), 48)
        lines += [
            "",
            f"{'partition':<{width}}  {'files':>6} {'records':>9} {'pos':>4} {'dv':>4} "
            f"{'eq':>4} {'deleted':>8}  delete ratio{'':<17} read",
        ]
        for p in report["partitions"]:
            name = p["partition"]
            name = name if len(name) <= width else name[: width - 1] + "…"
            lines.append(
                f"{name:<{width}}  {p['data_files']:>6} {p['data_records']:>9} "
                f"{p['position_delete_files']:>4} {p['deletion_vectors']:>4} "
                f"{p['equality_delete_files']:>4} {p['deleted_records']:>8}  "
                f"{bar(p['delete_ratio'])} {p['delete_ratio']:>6.1%}  "
                f"{amp(p['read_amplification'])}"
            )
    lines.append("")
    if not report["advice"]:
        lines.append("advice       none: the table is healthy to read")
    for a in report["advice"]:
        lines += [f"advice       {a['reason']}", f"             {a['call']}"]
    return "\n".join(lines) + "\n"


def _size(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def plot(report: dict[str, Any], path: str) -> None:
    """A PNG chart of the delete ratio and the delete files per partition (matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise MorError(
            "--plot needs matplotlib: pip install 'mor[plot]' (or matplotlib itself)"
        ) from e
    parts = report["partitions"] or [
        {
            "partition": "(empty table)",
            "delete_ratio": 0.0,
            "position_delete_files": 0,
            "deletion_vectors": 0,
            "equality_delete_files": 0,
        }
    ]
    names = [p["partition"] for p in parts]
    height = max(3.0, 0.35 * len(names) + 1.5)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, height), sharey=True)
    ys = range(len(names))
    ratios = [p["delete_ratio"] for p in parts]
    threshold = report.get("thresholds", {}).get("delete_ratio", 0.3)
    left.barh(ys, ratios, color=["#c0392b" if r >= threshold else "#2e86c1" for r in ratios])
    left.axvline(threshold, color="#555", linestyle="--", linewidth=1)
    left.set_xlim(0, max(1.0, max(ratios) * 1.05))
    left.set_xlabel(f"delete ratio (dashed: {threshold}, rewrite_data_files' threshold)")
    left.set_yticks(list(ys), names)
    left.invert_yaxis()
    pos = [p["position_delete_files"] for p in parts]
    dvs = [p["deletion_vectors"] for p in parts]
    eqs = [p["equality_delete_files"] for p in parts]
    right.barh(ys, pos, label="position delete files", color="#2e86c1")
    right.barh(ys, dvs, left=pos, label="deletion vectors", color="#7fb3d5")
    right.barh(
        ys,
        eqs,
        left=[a + b for a, b in zip(pos, dvs)],
        label="equality delete files",
        color="#e67e22",
    )
    right.set_xlabel("delete files that apply to the partition's data files")
    right.legend(loc="lower right", fontsize="small")
    est = "" if report["deleted_records_exact"] else " (equality deletes estimated)"
    fig.suptitle(f"{report['table']} @ snapshot {report['snapshot_id']}{est}")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100)
    except OSError as e:
        raise MorError(f"cannot write the chart to {path}: {e}") from e
    finally:
        plt.close(fig)
