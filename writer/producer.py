"""One snapshot producer: every commit mor makes goes through `SnapshotProducer.commit`.

It commits an `Operation` (writer/operations.py: `RowDelta`, `RewriteFiles`), which says what
the snapshot adds and removes, what conflicts with it and what its summary holds; the producer
knows nothing of SQL. New delete files' entries are ADDED with no sequence number (they
inherit the new snapshot's); new data files get the operation's `data_seq` (a rewrite keeps
the data sequence number of the snapshot it read, `RewriteFiles.dataSequenceNumber`, so that a
delete committed after it, meanwhile, still applies to the rows they hold).

A commit makes, on the head of the branch (writer/manifests.py): new manifests for the added
files (one per content and partition spec), every manifest holding a removed file written again
(the removed entries DELETED, the others EXISTING with their own sequence numbers), every
other manifest carried over as it is, a manifest list, and a snapshot whose summary has the
counts and the totals. The catalog is asked to move the branch from the head the operation was
computed on to the new snapshot (`AssertRefSnapshotId`): it does so atomically or refuses.

Optimistic concurrency, as Iceberg's: when another commit landed first, the operation validates
itself against every snapshot committed since, and is rebuilt over the new head when nothing
in them touches it, up to `retries` times. A conflicting commit stops the
operation with one line. Whatever an attempt wrote and no committed snapshot references is
deleted before returning or raising; only a commit whose outcome the catalog could not tell
(`CommitStateUnknownException`) leaves its files, and the error names them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.io import FileIO
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    SetSnapshotRefUpdate,
)

from mor.planner.errors import MorError
from mor.writer import conflicts, manifests
from mor.writer.conflicts import ConflictError
from mor.writer.files import MappedIO, delete_files
from mor.writer.operations import Operation

RETRIES = 4


class CommitUnknownError(MorError):
    """The catalog could not tell whether the commit landed: the files it would reference
    are left in place (named in the message)."""


@dataclass
class Committed:
    snapshot: Snapshot
    attempts: int
    rebased_over: list[int]  # snapshot ids committed meanwhile, rebased over


class SnapshotProducer:
    """Commits changes to one branch of one table of `catalog`, each as one snapshot."""

    def __init__(
        self,
        catalog: Catalog,
        identifier: str,
        branch: str = "main",
        retries: int = RETRIES,
        prefix: str = "mor",
        io: FileIO | None = None,
        path_map: Callable[[str], str] | None = None,
    ) -> None:
        self.catalog = catalog
        self.identifier = identifier
        self.branch = branch
        self.retries = retries
        self.prefix = prefix  # in the names of the manifests and manifest lists it writes
        # the table's files are read and written through `io` (default: the catalog's, of
        # each load), every path through `path_map` (a table copied or moved)
        self.io = io
        self.path_map = path_map

    def _load(self) -> Table:
        """The table as the catalog has it now, its files reached through the producer's
        FileIO and path map."""
        table = self.catalog.load_table(self.identifier)
        if self.io is None and self.path_map is None:
            return table
        io = self.io if self.io is not None else table.io
        if self.path_map is not None:
            io = MappedIO(io, self.path_map)
        return Table(table.name(), table.metadata, table.metadata_location, io, self.catalog)

    def _attempting(self, attempt: int) -> None:
        """Called right before each attempt asks the catalog (tests land a concurrent commit
        here, by patching it)."""

    def commit(self, op: Operation, base: Snapshot | None) -> Committed:
        """Commit `op`, computed on `base` (the head of the branch then; None for a
        table without a snapshot on it yet), as one snapshot."""
        table = self._writable()
        # what it wrote, deleted if it does not commit (a cherry-pick's files are not its own)
        written: list[str] = [f.file_path for f in (*op.added, *op.added_data) if not op.adopted]
        return self._cleaned(table, written, lambda: self._attempts(table, op, base, written))

    def commit_built(
        self, build: Callable[[Table, Snapshot | None, list[str]], Snapshot], written: list[str]
    ) -> Committed:
        """Commit the snapshot `build` makes over the branch's head (given the table, the
        head and `written`, it writes its files and appends their paths to `written`; it
        raises ConflictError when the head no longer allows it), built again over the new
        head when another commit lands first. On failure every path in `written` is
        deleted, as `commit` deletes what it wrote."""
        table = self._writable()
        return self._cleaned(table, written, lambda: self._retried(table, build, written, []))

    def _writable(self) -> Table:
        """The table, refused unless its format version is one these commits write."""
        table = self._load()
        version = table.metadata.format_version
        if version not in (2, 3):
            raise MorError(
                f"{self.identifier}: format version {version}; this commit writes v2 and v3"
            )
        return table

    def _cleaned(
        self, table: Table, written: list[str], attempts: Callable[[], Committed]
    ) -> Committed:
        """`attempts()`, and when it fails, every path in `written` deleted (but when the
        catalog could not tell whether the commit landed)."""
        committed = False
        try:
            done = attempts()
            committed = True
            return done
        except CommitUnknownError:
            committed = True  # perhaps: nothing may be deleted
            raise
        except MorError as e:
            left = delete_files(table.io, written)
            committed = True  # cleaned up already
            if left:  # named, so that they can be removed by hand
                raise type(e)(f"{e}; files it wrote could not be removed: {', '.join(left)}") from e
            raise
        finally:
            if not committed:
                delete_files(table.io, written)

    def _attempts(
        self, table: Table, op: Operation, base: Snapshot | None, written: list[str]
    ) -> Committed:
        snapshot_id = new_snapshot_id(table)
        ours = manifests.added_manifests(table, op, snapshot_id, written, self.prefix)
        rebased: list[int] = []

        def build(table: Table, head: Snapshot | None, written: list[str]) -> Snapshot:
            nonlocal base
            base = self._rebase(table, head, base, op, rebased)
            return self._snapshot(table, head, op, ours, snapshot_id, written)

        return self._retried(table, build, written, rebased)

    def _retried(
        self,
        table: Table,
        build: Callable[[Table, Snapshot | None, list[str]], Snapshot],
        written: list[str],
        rebased: list[int],
    ) -> Committed:
        """The attempts: the snapshot built over the branch's head and the catalog asked;
        when another commit landed first, what the attempt wrote is deleted and the table
        read again, up to `retries` more times."""
        for attempt in range(1, self.retries + 2):
            head = table.metadata.snapshot_by_name(self.branch)
            mark = len(written)  # what this attempt writes: written[mark:]
            snapshot = build(table, head, written)
            self._attempting(attempt)
            try:
                self._ask(table, head, snapshot, written)
            except CommitFailedException:
                delete_files(table.io, written[mark:])  # this attempt's list and rewrites
                del written[mark:]
                table = self._load()
                continue
            return Committed(snapshot, attempt, rebased)
        raise ConflictError(
            f"{self.identifier}: {self.retries + 1} attempts to commit failed, each time "
            "another commit landed first; nothing was committed"
        )

    def _rebase(
        self,
        table: Table,
        head: Snapshot | None,
        base: Snapshot | None,
        op: Operation,
        rebased: list[int],
    ) -> Snapshot | None:
        """The head the operation is built on this attempt: `base`, or the branch's head when
        commits landed meanwhile that do not conflict with it (their ids go to `rebased`)."""
        if head is None:
            if base is not None:
                raise ConflictError(f"{self.identifier}: branch {self.branch} no longer exists")
            return None
        if base is not None and head.snapshot_id == base.snapshot_id:
            return base
        if base is None:
            raise ConflictError(
                f"{self.identifier}: branch {self.branch} was created meanwhile; nothing "
                "was committed"
            )
        news = conflicts.since(table, head, base)
        op.validate(table, news, self.identifier)
        rebased += [s.snapshot_id for s in news if s.snapshot_id not in rebased]
        return head

    def _snapshot(
        self,
        table: Table,
        head: Snapshot | None,
        op: Operation,
        ours: list[Any],
        snapshot_id: int,
        written: list[str],
    ) -> Snapshot:
        """The new snapshot over `head`, its manifests and manifest list written."""
        seq = table.metadata.last_sequence_number + 1
        lineage: dict[str, int] = {}
        try:
            if table.metadata.format_version == 3:
                listing, lineage = manifests.v3_manifest_list(
                    table, head, op, ours, snapshot_id, seq, written, self.prefix
                )
            else:
                carried = manifests.rewritten_manifests(table, head, op, snapshot_id, written)
                listing = manifests.manifest_list(
                    table, head, ours + carried, snapshot_id, seq, written, self.prefix
                )
        except manifests.StaleChange as e:
            raise ConflictError(str(e)) from e
        return Snapshot(
            snapshot_id=snapshot_id,
            parent_snapshot_id=None if head is None else head.snapshot_id,
            sequence_number=seq,
            timestamp_ms=max(int(time.time() * 1000), 1 + (head.timestamp_ms if head else 0)),
            manifest_list=listing,
            summary=op.summary_of(head),
            schema_id=table.metadata.current_schema_id,
            **lineage,
        )

    def _ask(
        self, table: Table, head: Snapshot | None, snapshot: Snapshot, written: list[str]
    ) -> None:
        """Ask the catalog to move the branch from `head` to `snapshot`, atomically."""
        try:
            with _v3_metadata(self.catalog, table, self.identifier):
                self.catalog.commit_table(
                    table,
                    requirements=(
                        AssertTableUUID(uuid=table.metadata.table_uuid),
                        AssertRefSnapshotId(
                            ref=self.branch,
                            snapshot_id=None if head is None else head.snapshot_id,
                        ),
                    ),
                    updates=(
                        AddSnapshotUpdate(snapshot=snapshot),
                        SetSnapshotRefUpdate(
                            ref_name=self.branch,
                            type=SnapshotRefType.BRANCH,
                            snapshot_id=snapshot.snapshot_id,
                        ),
                    ),
                )
        except CommitStateUnknownException as e:
            raise CommitUnknownError(
                f"{self.identifier}: the catalog could not tell whether snapshot "
                f"{snapshot.snapshot_id} was committed ({e}); its files are left in place: "
                f"{', '.join(written)}"
            ) from e


def new_table_snapshot(
    table: Table, op: Operation, written: list[str], prefix: str = "mor"
) -> tuple[Snapshot, tuple[Any, ...]]:
    """The first snapshot of a table not committed yet (a staged CREATE TABLE AS SELECT, a
    REPLACE TABLE's new rows): its manifests and list written (their paths appended to
    `written`), and the updates that add it and point main at it, for the catalog commit
    that creates (or replaces) the table."""
    producer = SnapshotProducer(None, ".".join(table.name()), prefix=prefix)  # type: ignore[arg-type]
    snapshot_id = new_snapshot_id(table)
    ours = manifests.added_manifests(table, op, snapshot_id, written, prefix)
    snapshot = producer._snapshot(table, None, op, ours, snapshot_id, written)
    updates = (
        AddSnapshotUpdate(snapshot=snapshot),
        SetSnapshotRefUpdate(
            ref_name="main", type=SnapshotRefType.BRANCH, snapshot_id=snapshot.snapshot_id
        ),
    )
    return snapshot, updates


def new_snapshot_id(table: Table) -> int:
    taken = {s.snapshot_id for s in table.metadata.snapshots}
    while True:
        sid = uuid.uuid4().int & ((1 << 63) - 1)
        if sid and sid not in taken:
            return sid


@contextmanager
def _v3_metadata(catalog: Catalog, table: Table, identifier: str) -> Iterator[None]:
    """A v3 table's metadata written for this commit (writer/catalog_changes.v3_writes: the
    keys of the previous metadata file kept, the JSON read back)."""
    from mor.writer.catalog_changes import v3_writes

    with v3_writes(catalog, table.metadata.format_version, table.metadata_location, identifier,
                   table.io):  # fmt: skip
        yield
