"""`mor health`, its advice: what to run on a table, each with the figure that triggered it
(the figures come from health_figures.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyiceberg.manifest import DataFileContent

from mor.planner.sources import TableSource


@dataclass(frozen=True)
class Thresholds:
    """When advice is given. The first is Iceberg's own default for `rewrite_data_files`."""

    delete_ratio: float = 0.3  # rewrite_data_files `delete-ratio-threshold`
    delete_files: int = 5  # delete files applying to one data file (`delete-file-threshold`)
    small_files: int = 5  # small data files in one partition (`min-input-files`)
    snapshots: int = 100  # snapshots kept in the metadata before expiring is advised


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

    # mor's own commands, for a table named in a catalog (the commit goes through it)
    named = "/" not in table

    def compact(parts: list[dict[str, Any]], *options: str) -> dict[str, str]:
        if not named:
            return {}
        w = _where(src, parts) if len(parts) != len(partitions) else None
        where = f" --where {json.dumps(w)}" if w else ""
        return {"mor": f"mor compact {table}{where}{''.join(' ' + o for o in options)}"}

    heavy = [p for p in partitions if p["delete_ratio"] >= th.delete_ratio]
    if heavy:
        worst = max(heavy, key=lambda p: p["delete_ratio"])
        est = "" if worst["deleted_records_exact"] else " (estimated: --exact counts it)"
        out.append(
            {
                "procedure": "rewrite_data_files",
                **compact(heavy, f"--delete-ratio-threshold {th.delete_ratio}"),
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
                **compact(many, f"--delete-file-threshold {th.delete_files}"),
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
                # dangling files are removed by any compaction; stacked ones by rewriting
                # the data files they apply to
                **compact(partitions, *(["--delete-file-threshold 2"] if stacked else [])),
                "call": call("rewrite_position_delete_files"),
                "reason": "; ".join(why),
                "partitions": [],
            }
        )
    dangling_eq = len(dangling) - dangling_pos
    convert = f"mor convert-equality-deletes {table}" if named else None
    live_eq = report["equality_delete_files"] - dangling_eq
    if live_eq > 0 and convert:
        out.append(
            {
                "procedure": "convert-equality-deletes",
                "mor": convert,
                "call": call("rewrite_data_files", "options => map('delete-file-threshold', '1')"),
                "reason": (
                    f"{live_eq} equality delete file(s) apply to live data files: every read "
                    "joins them, and pyiceberg, Polars and Daft refuse the table; converted "
                    "to position deletes (deletion vectors on v3) once, they are read as "
                    "positions by every reader"
                ),
                "partitions": [],
            }
        )
    if dangling_eq:
        out.append(
            {
                "procedure": "rewrite_data_files",
                **({"mor": convert} if convert else {}),
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
                **compact(small),
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
