"""Iceberg's `expire_snapshots`: the snapshots and refs planner/expiry.py names removed from the
metadata in one commit, then the files only they reached deleted.

The commit asserts the table (its UUID) and every ref as read: another writer committing first
makes it read the table again and decide again (as Iceberg's commit retries). Deleting starts
only once the commit succeeded, and what it deletes is computed from the metadata the commit
left, read again from the catalog: every file reachable from the table before, less every file
reachable from any snapshot still in it (a writer that committed meanwhile included). A
deletion that fails is counted and named, never retried blindly; a file already gone is not a
failure. Nothing is deleted on a dry run, and nothing at all when `gc.enabled` is false.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.update import (
    AssertCurrentSchemaId,
    AssertDefaultSpecId,
    AssertRefSnapshotId,
    AssertTableUUID,
    RemovePartitionSpecsUpdate,
    RemoveSchemasUpdate,
    RemoveSnapshotRefUpdate,
    RemoveSnapshotsUpdate,
)

from mor.planner.expiry import (
    KINDS,
    Expiry,
    ExpiryError,
    Files,
    expired_files,
    expired_metadata,
    gc_enabled,
    plan_expiry,
    reachable,
)
from mor.writer.catalog_changes import load, v3_models, v3_writes
from mor.writer.files import delete_each

RETRIES = 4


@dataclass
class ExpiryRun:
    """What an expiry decided and did: the snapshots and refs (`expiry`), the files only
    expired snapshots reached (`gone`) and the FileIO that deletes them, and the deletions that
    failed."""

    table: str
    expiry: Expiry
    io: Any
    gone: Files
    failed: list[tuple[str, str]] = field(default_factory=list)
    removed_specs: tuple[int, ...] = ()  # clean_expired_metadata
    removed_schemas: tuple[int, ...] = ()

    def row(self) -> tuple[int, ...]:
        """Iceberg's output row: deleted files by kind (on a dry run: those it would delete)."""
        failed = {p for p, _ in self.failed}
        return tuple(sum(1 for p in self.gone.paths[k] if p not in failed) for k in KINDS)


def expire(
    catalog: Catalog,
    identifier: str,
    *,
    older_than: int | None = None,
    retain_last: int | None = None,
    snapshot_ids: Iterable[int] = (),
    dry_run: bool = False,
    clean_expired_metadata: bool = False,
    now_ms: int | None = None,
    before_commit: Callable[[], Any] | None = None,
) -> ExpiryRun:
    """Commit the expiry of `identifier` (nothing deleted yet: `delete_expired` does that).
    `before_commit`: called right before the catalog is asked (the caller's interrupt check)."""
    ids = list(snapshot_ids)
    for attempt in range(RETRIES):
        table = load(catalog, identifier)
        md = table.metadata
        if not gc_enabled(md):
            raise ExpiryError(
                f"cannot expire snapshots of {identifier}: GC is disabled (gc.enabled=false: "
                "deleting files may corrupt other tables); nothing was committed"
            )
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        plan = plan_expiry(md, now, older_than, retain_last, ids)
        specs, schemas = (
            expired_metadata(table.io, md, plan.retained) if clean_expired_metadata else ((), ())
        )
        if dry_run:
            gone = expired_files(table.io, md, reachable(table.io, md, plan.retained))
            return ExpiryRun(identifier, plan, table.io, gone, [], specs, schemas)
        if not plan.changes and not specs and not schemas:
            return ExpiryRun(identifier, plan, table.io, Files())
        changes: list[Any] = [RemoveSnapshotRefUpdate(ref_name=n) for n in plan.removed_refs]
        if plan.removed:
            changes.append(RemoveSnapshotsUpdate(snapshot_ids=list(plan.removed)))
        if specs:
            changes.append(RemovePartitionSpecsUpdate(spec_ids=list(specs)))
        if schemas:
            changes.append(RemoveSchemasUpdate(schema_ids=list(schemas)))
        requirements = [AssertTableUUID(uuid=md.table_uuid)] + [
            AssertRefSnapshotId(ref=name, snapshot_id=ref.snapshot_id)
            for name, ref in md.refs.items()
        ]
        if specs or schemas:  # a spec or schema added meanwhile is read again, decided again
            requirements += [
                AssertDefaultSpecId(default_spec_id=md.default_spec_id),
                AssertCurrentSchemaId(current_schema_id=md.current_schema_id),
            ]
        try:
            if before_commit is not None:
                before_commit()
            with (
                v3_models(),
                v3_writes(
                    catalog,
                    md.format_version,
                    table.metadata_location,
                    identifier,
                    table.io,
                    frozenset(plan.removed),
                ),
            ):
                catalog.commit_table(
                    table, requirements=tuple(requirements), updates=tuple(changes)
                )
        except CommitFailedException:
            if attempt == RETRIES - 1:
                raise ExpiryError(
                    f"expire_snapshots on {identifier}: the table kept changing under it "
                    f"({RETRIES} attempts); nothing was committed"
                ) from None
            continue
        after_table = load(catalog, identifier)
        after = after_table.metadata
        try:
            kept = reachable(after_table.io, after, [s.snapshot_id for s in after.snapshots])
        except Exception as e:  # noqa: BLE001 - what is kept is unknown: nothing may go
            raise ExpiryError(
                f"expire_snapshots on {identifier}: the snapshots were expired, but no file was "
                f"deleted: a snapshot still in the table could not be read "
                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
            ) from None
        gone = expired_files(table.io, md, kept)
        return ExpiryRun(identifier, plan, after_table.io, gone, [], specs, schemas)
    raise AssertionError("unreachable")


def delete_expired(
    run: ExpiryRun,
    threads: int = 1,
    interrupted: Callable[[], bool] = lambda: False,
) -> ExpiryRun:
    """Delete `run.gone` through `run.io` on `threads` threads (Iceberg's
    `max_concurrent_deletes`), manifest lists and manifests after the files they list; stop
    early once `interrupted()` (what is left is orphaned, never referenced again)."""
    order = ["data_files", "position_delete_files", "equality_delete_files", "statistics_files"]
    order += ["manifest_files", "manifest_lists"]
    for kind in order:
        run.failed += delete_each(run.io, sorted(run.gone.paths[kind]), threads, interrupted)
    return run
