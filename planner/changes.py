"""Row-level changes between two snapshots (`table_changes`), planned from metadata.

The commits in range are the end snapshot's ancestors after the start snapshot, oldest first.
Commit c (snapshot S, parent P) changes the live rows of only some data files:

- the files it removed: their rows live at P are DELETE;
- the files it added: their rows live at S (its own position deletes and deletion vectors
  applied, every later delete not) are INSERT;
- the files both hold whose set of applicable deletes differs between P and S: their rows live
  at P and not at S (by `_file`, `_pos`) are DELETE, and the reverse INSERT.

Both sides are ordinary merge-on-read scans of one snapshot, restricted to those files, so every
delete is applied by the same rules (and rewritten by the same rule) as in a query. A row that
an equality delete removes is therefore reported once, by the commit whose delete first removed
it: at later snapshots it is no longer live. A `replace` commit (compaction, rewritten delete
files) changes no live row by Iceberg's definition and reads nothing. The physical layer cancels
identical DELETE/INSERT pairs of one commit (rows a copy-on-write rewrite carried over), and with
identifier fields names a key deleted and inserted by one commit UPDATE_BEFORE / UPDATE_AFTER.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from mor.planner.errors import MetadataError, TableNotFoundError
from mor.planner.nodes import (
    CommitChanges,
    IcebergScan,
    ScanFiles,
    TableChanges,
)
from mor.planner.sources import TableSource

REPLACE = "replace"


def snapshot_at(src: TableSource, ms: int, what: str) -> int | None:
    """The current snapshot of the table at time `ms` (milliseconds): the last entry of the
    snapshot log at or before it; None before the first commit."""
    best = None
    for entry in src.metadata.snapshot_log:
        if entry.timestamp_ms <= ms:
            best = entry.snapshot_id
    if best is None and what == "end":
        raise TableNotFoundError(f"table {src.name} has no snapshot at or before the {what} time")
    return best


def lineage(md: TableMetadata, snapshot_id: int) -> tuple[list[Snapshot], int | None]:
    """`snapshot_id` and its ancestors, newest first, as far as the metadata holds them, and the
    id of the parent found missing from it (expired; None when the oldest has no parent). The
    snapshots are indexed once: a walk costs its length, not its length times the history's
    (pyiceberg's `snapshot_by_id` scans the list)."""
    by_id = {s.snapshot_id: s for s in md.snapshots}
    out: list[Snapshot] = []
    snap = by_id.get(snapshot_id)
    while snap is not None:
        out.append(snap)
        parent = snap.parent_snapshot_id
        if parent is None:
            return out, None
        snap = by_id.get(parent)
        if snap is None:
            return out, parent
    return out, None


def ancestry(src: TableSource, start_id: int | None, end_id: int | None) -> list[Snapshot]:
    """The commits after `start_id` (exclusive) up to `end_id` (inclusive), oldest first.
    `start_id` must be an ancestor of `end_id` (or None: from the table's first commit)."""
    md = src.metadata
    if end_id is None:
        return []
    for sid in (start_id, end_id):
        if sid is not None and md.snapshot_by_id(sid) is None:
            raise TableNotFoundError(f"table {src.name} has no snapshot {sid}")
    chain, missing = lineage(md, end_id)
    if start_id is None:
        if missing is not None:
            raise MetadataError(
                f"table {src.name}: snapshot {missing}, parent of {chain[-1].snapshot_id}, "
                "has expired: give a start snapshot that is still in the table's metadata"
            )
        out = chain
    else:
        ids = [s.snapshot_id for s in chain]
        if start_id not in ids:
            raise TableNotFoundError(
                f"table {src.name}: snapshot {start_id} is not an ancestor of snapshot "
                f"{end_id} (changes are read along the end snapshot's history)"
            )
        out = chain[: ids.index(start_id)]
    out.reverse()
    return out


def _deletes_by_path(scan: IcebergScan | None) -> dict[str, frozenset[tuple[str, int]]]:
    """Each data file of a planned scan (by path) with the delete files that apply to it."""
    if scan is None or scan.files is None:
        return {}
    by_id = {d.file_id: d for d in scan.files.deletes}
    return {
        t.path: frozenset(by_id[i].identity for i in (*t.pos_deletes, *t.eq_deletes))
        for t in scan.files.data
    }


def restrict(files: ScanFiles, paths: set[str]) -> ScanFiles:
    """Only the data files in `paths`, and the delete files that apply to them."""
    data = tuple(t for t in files.data if t.path in paths)
    used = {i for t in data for i in (*t.pos_deletes, *t.eq_deletes)}
    p = files.pruning
    return replace(
        files,
        data=data,
        deletes=tuple(d for d in files.deletes if d.file_id in used),
        pruning=replace(p, data_files=(p.data_files[0], p.data_files[1], len(data))),
    )


def plan_changes(
    node: TableChanges,
    src: TableSource,
    planned: Callable[[IcebergScan, TableSource], IcebergScan],
) -> TableChanges:
    """Fill `node.commits`: for each commit, the scans of the data files whose rows it changed."""
    commits = ancestry(src, node.start_id, node.end_id)
    # commits are planned in order: the last two snapshots' scans, with each data file's deletes
    cache: dict[int | None, tuple[IcebergScan | None, dict[str, frozenset[tuple[str, int]]]]] = {}

    def scan_at(sid: int | None) -> tuple[IcebergScan | None, dict[str, frozenset]]:
        if sid not in cache:
            if len(cache) > 2:
                cache.pop(next(iter(cache)))
            scan = (
                None
                if sid is None
                else planned(
                    IcebergScan(
                        table=node.table,
                        source_key=node.source_key,
                        io=node.io,
                        snapshot_id=sid,
                        schema_id=node.schema_id,
                        fields=node.fields,
                        hidden=("_file", "_pos"),
                    ),
                    src,
                )
            )
            cache[sid] = (scan, _deletes_by_path(scan))
        return cache[sid]

    out = []
    for ordinal, snap in enumerate(commits):
        op = snap.summary.operation.value if snap.summary is not None else "unknown"
        base = CommitChanges(
            snapshot_id=snap.snapshot_id,
            parent_id=snap.parent_snapshot_id,
            ordinal=ordinal,
            operation=op,
            timestamp_ms=snap.timestamp_ms,
        )
        if op == REPLACE:
            out.append(base)
            continue
        after, now = scan_at(snap.snapshot_id)
        before, then = scan_at(snap.parent_snapshot_id)
        removed = then.keys() - now.keys()
        added = now.keys() - then.keys()
        changed = {p for p in now.keys() & then.keys() if now[p] != then[p]}
        grows = all(then[p] <= now[p] for p in changed)

        def part(scan: IcebergScan | None, paths: set[str], name: str) -> IcebergScan | None:
            if not paths or scan is None or scan.files is None:
                return None
            label = f"{node.table} commit {ordinal} {name}"
            return replace(scan, table=label, files=restrict(scan.files, paths))

        out.append(
            replace(
                base,
                removed=part(before, removed, "removed"),
                before=part(before, changed, "before"),
                after=part(after, changed, "after"),
                added=part(after, added, "added"),
                deletes_only=grows,
            )
        )
    return replace(node, commits=tuple(out))
