"""Iceberg's procedures that move a branch to another snapshot, each one metadata commit:
`rollback_to_snapshot`, `rollback_to_timestamp`, `set_current_snapshot` (the table's `main`)
and `fast_forward` (any branch), with the checks and messages of Iceberg's own
(`SetSnapshotOperation`, `UpdateSnapshotReferencesOperation`):

- rollback_to_snapshot: the snapshot exists and is an ancestor of the current one;
- rollback_to_timestamp: the latest ancestor of the current snapshot strictly older than the
  timestamp;
- set_current_snapshot: any snapshot of the table, or the one a branch or tag points to
  (exactly one of the two given);
- fast_forward: `branch` exists and is a branch, `to` exists, and `branch`'s snapshot is an
  ancestor of `to`'s (nothing to do when they are the same).

The branch keeps its retention settings; the commit asserts the branch still points where it
was read (another writer moving it meanwhile: read again and checked again, as Iceberg's
commit retries). No file is written but the metadata file, none is deleted.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import ancestors_of
from pyiceberg.table.update import AssertRefSnapshotId, AssertTableUUID, SetSnapshotRefUpdate

from mor.planner.errors import MorError
from mor.writer.catalog_changes import load, v3_models, v3_writes

RETRIES = 4


class ProcedureError(MorError):
    """A procedure Iceberg's checks refuse: nothing was committed."""


@dataclass(frozen=True)
class RefMove:
    """What a procedure does: `branch` from `before` (None: it had no snapshot) to `after`."""

    procedure: str
    branch: str
    before: int | None
    after: int | None

    @property
    def moves(self) -> bool:
        return self.before != self.after

    def row(self) -> tuple[Any, ...]:
        """Iceberg's output row for the procedure."""
        if self.procedure == "fast_forward":
            return (self.branch, self.before, self.after)
        return (self.before, self.after)

    def line(self, table: str, done: bool) -> str:
        if not self.moves:
            return f"table {table}: {self.branch} is at snapshot {self.after} already"
        verb = "moved" if done else "would move"
        return f"table {table}: {self.branch} {verb} from snapshot {self.before} to {self.after}"


def ref_move(md: TableMetadata, procedure: str, args: Mapping[str, Any], table: str) -> RefMove:
    """What `procedure` with `args` does to the table whose metadata is `md`; ProcedureError
    when Iceberg's procedure refuses it."""

    def refuse(reason: str) -> ProcedureError:
        return ProcedureError(f"CALL {procedure} on {table}: {reason}; nothing was committed")

    current = md.current_snapshot_id
    ancestors = {s.snapshot_id for s in ancestors_of(md.current_snapshot(), md)}
    if procedure == "rollback_to_snapshot":
        sid = args["snapshot_id"]
        if md.snapshot_by_id(sid) is None:
            raise refuse(f"cannot roll back to unknown snapshot id {sid}")
        if sid not in ancestors:
            raise refuse(
                f"cannot roll back to snapshot {sid}: not an ancestor of the current state "
                f"(snapshot {current}); set_current_snapshot moves main to any snapshot"
            )
        return RefMove(procedure, MAIN_BRANCH, current, sid)
    if procedure == "rollback_to_timestamp":
        ts = args["timestamp"]
        older = [
            s
            for s in ancestors_of(md.current_snapshot(), md)
            if s.timestamp_ms < ts  # strictly older, as Iceberg's
        ]
        if not older:
            when = dt.datetime.fromtimestamp(ts / 1000, dt.timezone.utc).isoformat()
            raise refuse(f"cannot roll back: no ancestor of the current snapshot older than {when}")
        best = max(older, key=lambda s: s.timestamp_ms)
        return RefMove(procedure, MAIN_BRANCH, current, best.snapshot_id)
    if procedure == "set_current_snapshot":
        sid, ref = args.get("snapshot_id"), args.get("ref")
        if (sid is None) == (ref is None):
            raise refuse("give either snapshot_id or ref, not both and not neither")
        if ref is not None:
            if ref not in md.refs:
                raise refuse(f"no branch or tag {ref}")
            sid = md.refs[ref].snapshot_id
        if md.snapshot_by_id(sid) is None:
            raise refuse(f"cannot set the current snapshot to unknown snapshot id {sid}")
        return RefMove(procedure, MAIN_BRANCH, current, sid)
    if procedure == "fast_forward":
        branch, to = args["branch"], args["to"]
        target = md.refs.get(branch)
        if target is None:
            raise refuse(f"target branch does not exist: {branch}")
        source = md.refs.get(to)
        if source is None:
            raise refuse(f"ref does not exist: {to}")
        if target.snapshot_ref_type != SnapshotRefType.BRANCH:
            raise refuse(f"ref {branch} is a tag not a branch")
        if source.snapshot_id == target.snapshot_id:
            return RefMove(procedure, branch, target.snapshot_id, target.snapshot_id)
        head = md.snapshot_by_id(source.snapshot_id)
        if target.snapshot_id not in {s.snapshot_id for s in ancestors_of(head, md)}:
            raise refuse(f"cannot fast-forward: {branch} is not an ancestor of {to}")
        return RefMove(procedure, branch, target.snapshot_id, source.snapshot_id)
    raise refuse("not a procedure that moves a branch")


def updates(md: TableMetadata, move: RefMove) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The metadata updates and requirements of `move` (nothing when it does not move): the
    branch's retention settings kept, its snapshot asserted as read."""
    if not move.moves or move.after is None:
        return (), ()
    ref = md.refs.get(move.branch)
    update = SetSnapshotRefUpdate(
        ref_name=move.branch,
        type=SnapshotRefType.BRANCH,
        snapshot_id=move.after,
        max_ref_age_ms=ref.max_ref_age_ms if ref is not None else None,
        max_snapshot_age_ms=ref.max_snapshot_age_ms if ref is not None else None,
        min_snapshots_to_keep=ref.min_snapshots_to_keep if ref is not None else None,
    )
    return (update,), (
        AssertTableUUID(uuid=md.table_uuid),
        AssertRefSnapshotId(ref=move.branch, snapshot_id=move.before),
    )


def run_ref_move(
    catalog: Catalog, identifier: str, procedure: str, args: Mapping[str, Any]
) -> RefMove:
    """Run `procedure` on `identifier`: one commit through the catalog (none when the branch
    is where it would go already)."""
    return commit_ref_move(
        catalog, identifier, procedure, lambda md: ref_move(md, procedure, args, identifier)
    )


def commit_ref_move(
    catalog: Catalog,
    identifier: str,
    procedure: str,
    decide: Callable[[TableMetadata], RefMove],
    before_commit: Callable[[], Any] | None = None,
) -> RefMove:
    """Commit the move `decide` makes of the table's metadata as read, read again and decided
    again when another commit lands first."""
    for attempt in range(RETRIES):
        table = load(catalog, identifier)
        md = table.metadata
        move = decide(md)
        changes, requirements = updates(md, move)
        if not changes:
            return move
        try:
            if before_commit is not None:
                before_commit()
            with (
                v3_models(),
                v3_writes(
                    catalog, md.format_version, table.metadata_location, identifier, table.io
                ),
            ):
                catalog.commit_table(table, requirements=requirements, updates=changes)
            return move
        except CommitFailedException:
            if attempt == RETRIES - 1:
                raise ProcedureError(
                    f"CALL {procedure} on {identifier}: the table kept changing under it "
                    f"({RETRIES} attempts); nothing was committed"
                ) from None
    raise AssertionError("unreachable")
