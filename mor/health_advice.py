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
    manifests: int = 100  # manifests in the current snapshot before regrouping is advised


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
    a = _Advisor(report, partitions, src, catalog, th)
    dangling_pos = sum(1 for e in dangling if e.file.content == DataFileContent.POSITION_DELETES)
    heavy = [p for p in partitions if p["delete_ratio"] >= th.delete_ratio]
    return [
        *a.heavy(heavy),
        *a.many_deletes(),
        *a.position_files(dangling_pos),
        *a.equality(len(dangling) - dangling_pos),
        *a.small_files(heavy),
        *a.snapshots(),
        *a.orphans(),
        *a.manifests(),
    ]


class _Advisor:
    """The rules of `advice`, each a method returning its piece of advice (or none). Each
    piece names mor's own command where there is one (a table named in a catalog: the
    commit goes through it), and Iceberg's Spark procedure beside it."""

    def __init__(
        self,
        report: dict[str, Any],
        partitions: list[dict[str, Any]],
        src: TableSource,
        catalog: str,
        th: Thresholds,
    ) -> None:
        self.report, self.partitions, self.src, self.catalog, self.th = (
            report,
            partitions,
            src,
            catalog,
            th,
        )
        self.table = src.name
        self.named = "/" not in self.table

    def call(self, proc: str, *args: str) -> str:
        extra = "".join(", " + a for a in args)
        return f"CALL {self.catalog}.system.{proc}(table => '{self.table}'{extra})"

    def where_arg(self, parts: list[dict[str, Any]]) -> list[str]:
        if len(parts) == len(self.partitions):
            return []
        w = _where(self.src, parts)
        return [f"where => {json.dumps(w)}"] if w else []

    def compact(self, parts: list[dict[str, Any]], *options: str) -> dict[str, str]:
        if not self.named:
            return {}
        w = _where(self.src, parts) if len(parts) != len(self.partitions) else None
        where = f" --where {json.dumps(w)}" if w else ""
        return {"mor": f"mor compact {self.table}{where}{''.join(' ' + o for o in options)}"}

    def heavy(self, heavy: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not heavy:
            return []
        th = self.th
        worst = max(heavy, key=lambda p: p["delete_ratio"])
        est = "" if worst["deleted_records_exact"] else " (estimated: --exact counts it)"
        return [
            {
                "procedure": "rewrite_data_files",
                **self.compact(heavy, f"--delete-ratio-threshold {th.delete_ratio}"),
                "call": self.call(
                    "rewrite_data_files",
                    *self.where_arg(heavy),
                    f"options => map('delete-ratio-threshold', '{th.delete_ratio}')",
                ),
                "reason": (
                    f"{len(heavy)} of {len(self.partitions)} partition(s) have a delete ratio of "
                    f"{th.delete_ratio} or more (highest {worst['delete_ratio']} in "
                    f"{worst['partition']}{est})"
                ),
                "partitions": [p["partition"] for p in heavy],
            }
        ]

    def many_deletes(self) -> list[dict[str, Any]]:
        many = [p for p in self.partitions if p["data_files_over_delete_file_threshold"]]
        if not many:
            return []
        th = self.th
        n = sum(p["data_files_over_delete_file_threshold"] for p in many)
        return [
            {
                "procedure": "rewrite_data_files",
                **self.compact(many, f"--delete-file-threshold {th.delete_files}"),
                "call": self.call(
                    "rewrite_data_files",
                    *self.where_arg(many),
                    f"options => map('delete-file-threshold', '{th.delete_files}')",
                ),
                "reason": (
                    f"{n} data file(s) have {th.delete_files} or more delete files applying to "
                    f"them (at most {self.report['max_delete_files_per_data_file']})"
                ),
                "partitions": [p["partition"] for p in many],
            }
        ]

    def position_files(self, dangling_pos: int) -> list[dict[str, Any]]:
        per_file = self.report["position_delete_files_per_data_file"]
        stacked = per_file >= 2 and self.report["position_delete_files"] >= self.th.small_files
        if not (dangling_pos or stacked):
            return []
        why = []
        if stacked:
            why.append(
                f"{per_file} position delete files apply to each data file that has any, on "
                "average (rewriting merges them: one file to open per data file)"
            )
        if dangling_pos:
            why.append(f"{dangling_pos} delete file(s) or vectors apply to no live data file")
        options = ["--delete-file-threshold 2"] if stacked else []
        return [
            {
                "procedure": "rewrite_position_delete_files",
                # dangling files are removed by any compaction; stacked ones by rewriting
                # the data files they apply to
                **self.compact(self.partitions, *options),
                "call": self.call("rewrite_position_delete_files"),
                "reason": "; ".join(why),
                "partitions": [],
            }
        ]

    def equality(self, dangling_eq: int) -> list[dict[str, Any]]:
        out = []
        convert = f"mor convert-equality-deletes {self.table}" if self.named else None
        live_eq = self.report["equality_delete_files"] - dangling_eq
        if live_eq > 0 and convert:
            out.append(
                {
                    "procedure": "convert-equality-deletes",
                    "mor": convert,
                    "call": self.call(
                        "rewrite_data_files", "options => map('delete-file-threshold', '1')"
                    ),
                    "reason": (
                        f"{live_eq} equality delete file(s) apply to live data files: every "
                        "read joins them, and pyiceberg, Polars and Daft refuse the table; "
                        "converted to position deletes (deletion vectors on v3) once, they are "
                        "read as positions by every reader"
                    ),
                    "partitions": [],
                }
            )
        if dangling_eq:
            out.append(
                {
                    "procedure": "rewrite_data_files",
                    **({"mor": convert} if convert else {}),
                    "call": self.call(
                        "rewrite_data_files", "options => map('remove-dangling-deletes', 'true')"
                    ),
                    "reason": f"{dangling_eq} equality delete file(s) apply to no live data file",
                    "partitions": [],
                }
            )
        return out

    def small_files(self, heavy: list[dict[str, Any]]) -> list[dict[str, Any]]:
        th = self.th
        small = [p for p in self.partitions if p["small_files"] >= th.small_files]
        if not small or heavy:
            return []
        n = sum(p["small_files"] for p in small)
        return [
            {
                "procedure": "rewrite_data_files",
                **self.compact(small),
                "call": self.call("rewrite_data_files", *self.where_arg(small)),
                "reason": (
                    f"{n} data file(s) smaller than {self.report['small_file_bytes']} bytes "
                    f"(75% of the target file size) in {len(small)} partition(s), "
                    f"{th.small_files} or more in each"
                ),
                "partitions": [p["partition"] for p in small],
            }
        ]

    def snapshots(self) -> list[dict[str, Any]]:
        """expire_snapshots: when the table's own retention would remove snapshots (the files
        only they reach with them), else when more than `th.snapshots` are kept."""
        th, n = self.th, self.report["snapshots"]
        hist = self.report.get("history") or {}
        expiry = hist.get("expiry") or {}
        due = expiry.get("snapshots") or 0
        if due and hist.get("gc_enabled", True):
            files = expiry.get("files") or {}
            freed = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in files.items() if v)
            return [
                {
                    "procedure": "expire_snapshots",
                    **({"mor": f"mor expire-snapshots {self.table}"} if self.named else {}),
                    "call": self.call("expire_snapshots"),
                    "reason": (
                        f"{due} of {n} snapshots are older than the table's retention (oldest "
                        f"{hist.get('oldest_snapshot_days')} days; history.expire.* properties, "
                        f"default 5 days, at least 1 kept): expiring them deletes the files only "
                        f"they reach ({freed or 'none'})"
                    ),
                    "partitions": [],
                }
            ]
        if n <= th.snapshots:
            return []
        return [
            {
                "procedure": "expire_snapshots",
                **(
                    {"mor": f"mor expire-snapshots {self.table} --retain-last {th.snapshots}"}
                    if self.named
                    else {}
                ),
                "call": self.call("expire_snapshots", f"retain_last => {th.snapshots}"),
                "reason": (
                    f"{n} snapshots in the metadata (more than "
                    f"{th.snapshots}): their manifests and unreferenced delete files stay"
                ),
                "partitions": [],
            }
        ]

    def manifests(self) -> list[dict[str, Any]]:
        """rewrite_manifests, when the current snapshot has more manifests than the threshold
        and the rewrite would leave at most half of them."""
        m = (self.report.get("history") or {}).get("manifests") or {}
        if not m or m["count"] <= self.th.manifests or m["after_rewrite"] * 2 > m["count"]:
            return []
        return [
            {
                "procedure": "rewrite_manifests",
                **({"mor": f"mor rewrite-manifests {self.table}"} if self.named else {}),
                "call": self.call("rewrite_manifests"),
                "reason": (
                    f"{m['count']} manifests ({m['bytes']} bytes) in the current snapshot: "
                    "every query's planning opens those a partition filter cannot prune; "
                    f"regrouped by partition they would be {m['after_rewrite']}"
                ),
                "partitions": [],
            }
        ]

    def orphans(self) -> list[dict[str, Any]]:
        found = (self.report.get("history") or {}).get("orphans") or {}
        if not found.get("files"):
            return []
        return [
            {
                "procedure": "remove_orphan_files",
                **({"mor": f"mor remove-orphan-files {self.table}"} if self.named else {}),
                "call": self.call("remove_orphan_files"),
                "reason": (
                    f"{found['files']} file(s), {found['bytes']} bytes, under the table's "
                    "location and older than 3 days are referenced by nothing (left by writers "
                    "killed before their commit, or by an expiry that only edited metadata)"
                ),
                "partitions": [],
            }
        ]
