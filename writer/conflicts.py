"""Conflict detection: whether a commit that landed first touches what a change changes.

As Iceberg's `SnapshotProducer` validations (`validateNoNewDeletesForDataFiles`,
`validateDeletedDataFiles`, ...), made to the changes mor commits: the snapshots committed to
the branch since the change's base are read (their own manifests only, through planner's
manifest reader, DELETED entries included) and each entry they wrote is checked against the
change. A conflict is one line naming the snapshot and what it did.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from mor.planner.errors import MorError
from mor.planner.manifests import ADDED, DELETED, read_manifest, read_manifest_list
from mor.writer.files import named_data_file

if TYPE_CHECKING:
    from mor.writer.producer import Change


class ConflictError(MorError):
    """A commit that landed while the operation ran touched what it changes: nothing of the
    operation was committed, and the table is as that commit left it."""


def since(table: Table, head: Snapshot, base: Snapshot) -> list[Snapshot]:
    """The snapshots committed to the branch after `base`, oldest first; `base` must be an
    ancestor of `head` (else the branch was rolled back or replaced: a conflict)."""
    out = []
    s: Snapshot | None = head
    while s is not None and s.snapshot_id != base.snapshot_id:
        out.append(s)
        s = table.metadata.snapshot_by_id(s.parent_snapshot_id) if s.parent_snapshot_id else None
    if s is None:
        raise ConflictError(
            f"{table.name()}: the branch no longer descends from snapshot {base.snapshot_id} "
            "(rolled back or replaced meanwhile); nothing was committed"
        )
    return list(reversed(out))


def check(table: Table, news: Sequence[Snapshot], change: Change, identifier: str) -> None:
    """Raise ConflictError when a snapshot of `news` touches what `change` changes: removes a
    data file it was computed for or a delete file it removes, adds a delete file that
    applies to one of its data files (positions or a deletion vector naming it, or any delete
    in its partition that names no file), or adds a data file that a removed equality
    delete would reach (a data sequence number at or below `reach_seq`). A row-level write
    (`delete`) also conflicts, as Iceberg's `RowDelta` with its conflict detection filter,
    with added equality deletes that may hold its rows (`conflict_filter`), and under
    serializable isolation with added data files that may. A change that
    removes nothing and was computed for no data file (an append) conflicts with nothing."""
    if not (change.data or change.removed or change.removed_data or change.removed_dvs):
        return
    for snap in news:
        for status, seq, f in _entries(table, snap):
            what = _conflict(status, seq, f, change)
            if what:
                raise ConflictError(
                    f"{identifier}: snapshot {snap.snapshot_id} "
                    f"({snap.summary.operation.value if snap.summary else '?'}), committed "
                    f"meanwhile, {what}; nothing was committed"
                )


def _entries(table: Table, snap: Snapshot) -> Iterator[tuple[int, int | None, Any]]:
    """(status, data sequence number, file) of each entry `snap` wrote (added or deleted by
    it), from the manifests it added."""
    io = table.io
    for manifest in read_manifest_list(io, snap.manifest_list):
        if manifest.added_snapshot_id != snap.snapshot_id:
            continue  # carried over: nothing of this snapshot
        for entry in read_manifest(io, manifest, deleted=True):
            if entry.snapshot_id == snap.snapshot_id:
                yield entry.status, entry.sequence_number, entry.data_file


def _conflict(status: int, seq: int | None, f: Any, change: Change) -> str:
    if status == DELETED:
        return _removed(f, change)
    if status != ADDED:
        return ""
    may = change.conflict_filter
    if f.content == DataFileContent.DATA:
        if change.row_level and change.isolation == "serializable":
            if may is None or may(f):
                return (
                    f"added data file {f.file_path}, which may hold rows this statement's "
                    "condition matches (serializable isolation)"
                )
        if change.removed and seq is not None and seq <= change.reach_seq:
            return (
                f"added data file {f.file_path} with data sequence number {seq}, which an "
                "equality delete this operation removes would apply to"
            )
        return ""
    if f.content == DataFileContent.POSITION_DELETES:
        named = named_data_file(f)
        if f.referenced_data_file and named in change.data:
            return (
                f"added a deletion vector ({f.file_path}) to {named}, a data file this "
                "operation rewrites"
            )
        if named is None or named in change.data:
            return f"added position deletes {f.file_path} to a data file this operation rewrites"
    if (
        f.content == DataFileContent.EQUALITY_DELETES
        and change.row_level
        and (may is None or may(f))
    ):
        return f"added equality deletes {f.file_path}, which may delete rows this statement changes"
    return ""


def _removed(f: Any, change: Change) -> str:
    if f.content == DataFileContent.DATA and f.file_path in change.data | change.removed_data:
        return f"removed data file {f.file_path}, which this operation rewrites"
    if f.content != DataFileContent.DATA and f.file_path in change.removed:
        return f"removed delete file {f.file_path}, which this operation removes"
    offset = f.content_offset
    if f.content == DataFileContent.POSITION_DELETES and (
        (f.file_path, offset) in change.removed_dvs
        or (offset is None and f.file_path in {p for p, _ in change.removed_dvs})
    ):
        return f"removed a deletion vector of {f.file_path}, whose vectors this operation replaces"
    return ""
