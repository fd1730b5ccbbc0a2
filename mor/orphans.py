"""Files mor wrote into a table that no snapshot references: what a write command killed
before its commit leaves (`mor orphans TABLE`, `orphan_files(table)`).

A write command deletes what it wrote when it fails; a process killed (SIGKILL, a lost
machine) before the catalog took its commit cannot. Its files stay under the table's folder,
referenced by no snapshot. They are named as only mor names files: `data/mor-<uuid>-deletes.*`
(position delete files, Puffin files of deletion vectors the conversion wrote),
`data/mor-compact-<uuid>/...` (compaction's data files), `data/mor-<delete|update|merge>-<uuid>/...`
(what a DELETE's, UPDATE's or MERGE's tasks wrote), `metadata/mor-<uuid>-m*.avro` (manifests) and
`metadata/snap-<id>-<n>-mor-<uuid>.avro` (manifest lists).

This lists them: every file under `<location>/data` and `<location>/metadata` named so, less
every file a snapshot of the table references (manifest lists, manifests, data and delete
files, read through planner's manifest reader, DELETED entries included). With `delete`, those
older than `older_than_hours` (default 72, as Iceberg's `remove_orphan_files`: a write command
running now has files no snapshot references yet) are deleted. Nothing not named as mor names
files is ever listed or deleted: Iceberg's `remove_orphan_files` is for the rest.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from mor.planner.errors import MorError, TableNotFoundError
from mor.writer.files import delete_files, listed_files

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

OLDER_THAN_HOURS = 72.0


@dataclass
class Orphan:
    path: str
    bytes: int
    hours: float  # since it was written


@dataclass
class OrphansReport:
    table: str
    older_than_hours: float
    orphans: list[Orphan] = field(default_factory=list)  # referenced by no snapshot
    removed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # the store refused to delete them

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def old(self) -> list[Orphan]:
        return [o for o in self.orphans if o.hours >= self.older_than_hours]

    def line(self) -> str:
        young = len(self.orphans) - len(self.old)
        size = sum(o.bytes for o in self.orphans)
        text = (
            f"{self.table}: {len(self.orphans)} files mor wrote are referenced by no snapshot "
            f"({size} bytes)"
        )
        if young:
            text += f", {young} of them written less than {self.older_than_hours:g} h ago"
        if self.removed:
            text += f"; removed {len(self.removed)}"
        elif self.old:
            text += f"; --delete removes the {len(self.old)} older"
        if self.left:
            text += f"; {len(self.left)} could not be removed: {', '.join(self.left[:3])}"
        return text


def is_mors(path: str) -> bool:
    """Whether a file under a table's folder is named as mor names the files it writes."""
    parts = path.rstrip("/").split("/")
    name = parts[-1]
    return (
        name.startswith("mor-")
        or (name.startswith("snap-") and "-mor-" in name)
        or any(_FOLDER.fullmatch(p) for p in parts[:-1])
    )


# the folders of mor's Spark jobs: compaction's, and a DELETE's, UPDATE's or MERGE's
_FOLDER = re.compile(r"mor-(compact|delete|update|merge)-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")


def orphan_files(
    table: str,
    *,
    catalog: Catalog | str | None = None,
    warehouse: str | None = None,
    older_than_hours: float = OLDER_THAN_HOURS,
    delete: bool = False,
) -> OrphansReport:
    """The files mor wrote under `table`'s folder that no snapshot references; with `delete`,
    those older than `older_than_hours` deleted."""
    from mor.catalogs import resolve_catalog

    if older_than_hours < 0:
        raise MorError(f"--older-than needs hours, 0 or more, not {older_than_hours:g}")
    cat = resolve_catalog(catalog, warehouse)
    try:
        tbl = cat.load_table(table)
    except Exception as e:  # noqa: BLE001 - NoSuchTableError and kin: one line
        raise TableNotFoundError(f"{table}: {e}") from e
    location = tbl.metadata.location.rstrip("/")
    listed = [
        f
        for folder in ("data", "metadata")
        for f in listed_files(tbl.io, f"{location}/{folder}")
        if is_mors(f[0])
    ]
    report = OrphansReport(table, older_than_hours)
    if listed:
        referenced = _referenced(tbl)
        report.orphans = [
            Orphan(p, size, age / 3600) for p, size, age in sorted(listed) if p not in referenced
        ]
    if delete:
        old = [o.path for o in report.old]
        report.left = delete_files(tbl.io, old)
        report.removed = [p for p in old if p not in report.left]
    return report


def _referenced(tbl: Table) -> set[str]:
    """Every file a snapshot of the table references: manifest lists, manifests, data and
    delete files (deletion vectors by their Puffin file)."""
    from mor.planner.manifests import read_manifest, read_manifest_list

    io = tbl.io
    out: set[str] = set()
    seen: set[str] = set()
    for snap in tbl.metadata.snapshots:
        out.add(snap.manifest_list)
        for m in read_manifest_list(io, snap.manifest_list):
            out.add(m.manifest_path)
            if m.manifest_path in seen:
                continue
            seen.add(m.manifest_path)
            for entry in read_manifest(io, m, deleted=True):
                out.add(entry.data_file.file_path)
    return out
