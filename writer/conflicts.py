"""Conflict detection's reads: the snapshots committed to a branch since an operation's base,
and the entries each wrote (its own manifests only, through planner's manifest reader,
DELETED entries included). Each operation (writer/operations.py) checks those entries against
what it changes, as Iceberg's `SnapshotProducer` validations do; a conflict is one line naming
the snapshot and what it did.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from mor.planner.errors import MorError
from mor.planner.manifests import read_manifest, read_manifest_list


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


def added_entries(table: Table, snap: Snapshot) -> Iterator[tuple[int, int | None, Any]]:
    """(status, data sequence number, file) of each entry `snap` wrote (added or deleted by
    it), from the manifests it added."""
    io = table.io
    for manifest in read_manifest_list(io, snap.manifest_list):
        if manifest.added_snapshot_id != snap.snapshot_id:
            continue  # carried over: nothing of this snapshot
        for entry in read_manifest(io, manifest, deleted=True):
            if entry.snapshot_id == snap.snapshot_id:
                yield entry.status, entry.sequence_number, entry.data_file
