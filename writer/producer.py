"""One snapshot producer: every commit mor makes goes through `SnapshotProducer.commit`.

A `Change` is what one snapshot adds and removes; its operation says which kind it is, as
Iceberg's `SnapshotProducer` family says it (made smaller):

- `replace` (`RewriteFiles`): the maintenance commands, no row changed. Converting equality
  deletes adds delete files that say what other delete files said (positions for equality
  deletes) and removes the delete files no live data file needs any more; compacting replaces
  data files by new ones holding their live rows, and removes the delete files that reached
  only them. The new data files keep the data sequence number of the snapshot the rewrite read
  (`RewriteFiles.dataSequenceNumber`), so that a delete committed after it, meanwhile, still
  applies to the rows they hold, and none committed before it does;
- `append` and `overwrite` (`RowDelta`): new data files and delete files, their entries
  ADDED with no sequence number (they inherit the new snapshot's): the test tables' and the
  demo's writer (writer/tables.py).

A commit makes, on the head of the branch (writer/manifests.py): new manifests for the added
files (one per content and partition spec), every manifest holding a removed file written again
(the removed entries DELETED, the others EXISTING with their own sequence numbers), every
other manifest carried over as it is, a manifest list, and a snapshot whose summary has the
counts and the totals. The catalog is asked to move the branch from the head the change was
computed on to the new snapshot (`AssertRefSnapshotId`): it does so atomically or refuses.

Optimistic concurrency, as Iceberg's: when another commit landed first, the change is checked
against every snapshot committed since (writer/conflicts.py), and rebuilt over the new head
when nothing in them touches it, up to `retries` times. A conflicting commit stops the
operation with one line. Whatever an attempt wrote and no committed snapshot references is
deleted before returning or raising; only a commit whose outcome the catalog could not tell
(`CommitStateUnknownException`) leaves its files, and the error names them.
"""

from __future__ import annotations

import gzip
import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    SetSnapshotRefUpdate,
)

from mor.planner.errors import MorError
from mor.writer import conflicts, manifests
from mor.writer.conflicts import ConflictError
from mor.writer.files import content_size, delete_files

RETRIES = 4


class CommitUnknownError(MorError):
    """The catalog could not tell whether the commit landed: the files it would reference
    are left in place (named in the message)."""


@dataclass
class Change:
    """What one snapshot adds and removes.

    `added`: new delete files (written already, by the caller); `removed`: paths of live
    delete files to remove; `data`: the data files the change was computed for (paths as
    recorded): a concurrent commit that removes one of them, or adds position deletes to
    one, conflicts; `reach_seq`: the highest data sequence number of the removed equality
    deletes: a concurrent commit adding a data file below it (a rewrite keeping old sequence
    numbers) would be reached by a removed delete, and conflicts. `added_data`: new data
    files, committed with data sequence number `data_seq` (None: the new snapshot's);
    `removed_data`: paths of the live data files they replace. `removed_dvs`: deletion
    vectors to remove (v3), each by its Puffin file and blob offset. `operation`: `replace`
    (no row changes: `data_seq` is required with new data files), `append`, `overwrite` or
    `delete` (a row-level write: `conflict_filter` and `isolation` say what it conflicts
    with, as Iceberg's `RowDelta` validations)."""

    added: list[DataFile] = field(default_factory=list)
    removed: set[str] = field(default_factory=set)
    data: set[str] = field(default_factory=set)
    reach_seq: int = 0
    summary: dict[str, str] = field(default_factory=dict)  # extra summary properties
    added_data: list[DataFile] = field(default_factory=list)
    removed_data: set[str] = field(default_factory=set)
    data_seq: int | None = None
    removed_dvs: set[tuple[str, int]] = field(default_factory=set)  # (Puffin path, offset)
    operation: Operation = Operation.REPLACE
    # a row-level write (DELETE): which files committed meanwhile may hold rows its condition
    # matches (None: any file may), and the table's isolation level for it
    conflict_filter: Callable[[Any], bool] | None = None
    isolation: str = "serializable"
    row_level: bool = False  # a DELETE or UPDATE: its conflicts are a row-level write's

    def __post_init__(self) -> None:
        if self.operation == Operation.REPLACE and self.added_data and self.data_seq is None:
            raise ValueError("new data files need the data sequence number of the read")

    @classmethod
    def row_delta(cls, data: list[DataFile], deletes: list[DataFile]) -> Change:
        """New data files and delete files, nothing removed (Iceberg's `RowDelta`)."""
        op = Operation.OVERWRITE if deletes else Operation.APPEND
        return cls(added=list(deletes), added_data=list(data), operation=op)


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
    ) -> None:
        self.catalog = catalog
        self.identifier = identifier
        self.branch = branch
        self.retries = retries
        self.prefix = prefix  # in the names of the manifests and manifest lists it writes

    def _attempting(self, attempt: int) -> None:
        """Called right before each attempt asks the catalog (tests land a concurrent commit
        here, by patching it)."""

    def commit(self, change: Change, base: Snapshot | None) -> Committed:
        """Commit `change`, computed on `base` (the head of the branch then; None for a
        table without a snapshot on it yet), as one snapshot."""
        table = self.catalog.load_table(self.identifier)
        version = table.metadata.format_version
        if version not in (2, 3):
            raise MorError(
                f"{self.identifier}: format version {version}; this commit writes v2 and v3"
            )
        written: list[str] = [f.file_path for f in (*change.added, *change.added_data)]
        committed = False
        try:
            done = self._attempts(table, change, base, written)
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
        self, table: Table, change: Change, base: Snapshot | None, written: list[str]
    ) -> Committed:
        snapshot_id = _new_snapshot_id(table)
        ours = manifests.added_manifests(table, change, snapshot_id, written, self.prefix)
        rebased: list[int] = []
        for attempt in range(1, self.retries + 2):
            head = table.metadata.snapshot_by_name(self.branch)
            base = self._rebase(table, head, base, change, rebased)
            mark = len(written)  # what this attempt writes: written[mark:]
            snapshot = self._snapshot(table, head, change, ours, snapshot_id, written)
            self._attempting(attempt)
            try:
                self._ask(table, head, snapshot, written)
            except CommitFailedException:
                delete_files(table.io, written[mark:])  # this attempt's list and rewrites
                del written[mark:]
                table = self.catalog.load_table(self.identifier)
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
        change: Change,
        rebased: list[int],
    ) -> Snapshot | None:
        """The head the change is built on this attempt: `base`, or the branch's head when
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
        conflicts.check(table, news, change, self.identifier)
        rebased += [s.snapshot_id for s in news if s.snapshot_id not in rebased]
        return head

    def _snapshot(
        self,
        table: Table,
        head: Snapshot | None,
        change: Change,
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
                    table, head, change, ours, snapshot_id, seq, written, self.prefix
                )
            else:
                carried = manifests.rewritten_manifests(table, head, change, snapshot_id, written)
                listing = manifests.manifest_list(
                    table, head, carried + ours, snapshot_id, seq, written, self.prefix
                )
        except manifests.StaleChange as e:
            raise ConflictError(str(e)) from e
        return Snapshot(
            snapshot_id=snapshot_id,
            parent_snapshot_id=None if head is None else head.snapshot_id,
            sequence_number=seq,
            timestamp_ms=max(int(time.time() * 1000), 1 + (head.timestamp_ms if head else 0)),
            manifest_list=listing,
            summary=summary(head, change),
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


def _new_snapshot_id(table: Table) -> int:
    taken = {s.snapshot_id for s in table.metadata.snapshots}
    while True:
        sid = uuid.uuid4().int & ((1 << 63) - 1)
        if sid and sid not in taken:
            return sid


@contextmanager
def _v3_metadata(catalog: Catalog, table: Table, identifier: str) -> Iterator[None]:
    """Let a catalog that writes the table's metadata file itself (SQL, Hive, Glue, ...)
    write a v3 one: pyiceberg 0.12 models v3 metadata and applies the commit's updates to it
    (`next-row-id` advanced by the snapshot's `added-rows`), but refuses to serialize it
    (iceberg-python #1551). For this commit only, this catalog object serializes it with
    pydantic, as it serializes v2 metadata, after two checks that refuse the commit (nothing
    written) when they fail: the JSON parses back to the same metadata, and it keeps every
    key the previous metadata file has, at the top and in each snapshot (a field pyiceberg
    does not model would be lost). A REST catalog writes the file itself: nothing to do."""
    from pyiceberg.table.metadata import TableMetadataUtil
    from pyiceberg.typedef import IcebergBaseModel

    if table.metadata.format_version < 3 or not hasattr(type(catalog), "_write_metadata"):
        yield
        return
    with table.io.new_input(table.metadata_location).open() as stream:
        raw = stream.read()
    before = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)

    def write(metadata: Any, io: Any, metadata_path: str) -> None:
        path = metadata_path
        text = IcebergBaseModel.model_dump_json(metadata, exclude_none=True)
        after = json.loads(text)
        lost = sorted(set(before) - set(after))
        snaps = {s["snapshot-id"]: s for s in after.get("snapshots", [])}
        for old in before.get("snapshots", []):
            lost += [
                f"snapshot {old['snapshot-id']} {k}"
                for k in old
                if k not in snaps.get(old["snapshot-id"], {})
            ]
        if lost:
            raise MorError(
                f"{identifier}: its v3 metadata written by pyiceberg would lose "
                f"{', '.join(lost[:5])}; nothing was committed"
            )
        if TableMetadataUtil.parse_raw(text) != metadata:
            raise MorError(
                f"{identifier}: its v3 metadata does not read back as written; nothing was "
                "committed"
            )
        data = text.encode()
        if ".gz." in path.rsplit("/", 1)[-1]:
            data = gzip.compress(data)
        with io.new_output(path).create(overwrite=False) as out:
            out.write(data)

    catalog._write_metadata = write  # type: ignore[method-assign]
    try:
        yield
    finally:
        del catalog._write_metadata  # type: ignore[attr-defined]


def summary(head: Snapshot | None, change: Change) -> Summary:
    """The new snapshot's summary, as Iceberg's `SnapshotSummary` makes it for the operation."""
    if change.operation == Operation.REPLACE:
        return _replace_summary(head, change)
    return _row_delta_summary(head, change)


def _row_delta_summary(head: Snapshot | None, change: Change) -> Summary:
    """An `append`, `overwrite` or `delete` adding data and delete files (deletion vectors
    counted as `added-dvs`, as Iceberg does) and, for a v3 row-level write, removing the
    vectors and file-scoped position delete files its new vectors replace (their counts in
    `change.summary`): what was added and removed, and the totals after (from the head's, or
    from zero on a table's first snapshot)."""
    files = [*change.added_data, *change.added]
    pos = [f for f in change.added if f.content == DataFileContent.POSITION_DELETES]
    eq = [f for f in change.added if f.content == DataFileContent.EQUALITY_DELETES]
    dvs = [f for f in pos if f.file_format == FileFormat.PUFFIN]
    added = {
        "added-data-files": len(change.added_data),
        "added-delete-files": len(change.added),
        "added-position-delete-files": len(pos) - len(dvs),
        "added-dvs": len(dvs),
        "added-equality-delete-files": len(eq),
        "added-records": sum(f.record_count for f in change.added_data),
        "added-position-deletes": sum(f.record_count for f in pos),
        "added-equality-deletes": sum(f.record_count for f in eq),
        "added-files-size": sum(content_size(f) for f in files),
    }
    props = {k: str(v) for k, v in added.items() if v}
    props.update({k: v for k, v in change.summary.items() if v != "0"})

    def of(key: str) -> int:
        return int(change.summary.get(key, "0"))

    removed_files = of("removed-dvs") + of("removed-position-delete-files")
    if removed_files:
        props["removed-delete-files"] = str(removed_files)
    props["changed-partition-count"] = str(len({(f.spec_id, str(f.partition)) for f in files}))
    before = head.summary if head is not None and head.summary is not None else None
    for total, plus, minus in (
        ("total-data-files", added["added-data-files"], 0),
        ("total-delete-files", added["added-delete-files"], removed_files),
        ("total-records", added["added-records"], 0),
        ("total-files-size", added["added-files-size"], of("removed-files-size")),
        ("total-position-deletes", added["added-position-deletes"], of("removed-position-deletes")),
        ("total-equality-deletes", added["added-equality-deletes"], 0),
    ):
        try:
            start = int(before.get(total) or 0) if before is not None else 0
        except ValueError:
            continue
        props[total] = str(start + plus - minus)
    return Summary(change.operation, **props)


def _replace_summary(head: Snapshot | None, change: Change) -> Summary:
    """Iceberg's summary of a `replace`: what was added and removed, and the totals after.
    Sizes and row counts of removed files come in `change.summary` (`removed-files-size`,
    `deleted-records`, `removed-position-deletes`, `removed-equality-deletes`)."""
    added_pos = [f for f in change.added if f.content == DataFileContent.POSITION_DELETES]
    pos_files = [f for f in added_pos if f.file_format != FileFormat.PUFFIN]
    extra = change.summary
    props: dict[str, str] = {}
    if change.added_data or change.removed_data:
        props["added-data-files"] = str(len(change.added_data))
        props["deleted-data-files"] = str(len(change.removed_data))
        props["added-records"] = str(sum(f.record_count for f in change.added_data))
    if change.added:
        props["added-delete-files"] = str(len(change.added))
        props["added-position-delete-files"] = str(len(pos_files))
        props["added-position-deletes"] = str(sum(f.record_count for f in added_pos))
    added_size = sum(content_size(f) for f in (*change.added, *change.added_data))
    props["added-files-size"] = str(added_size)
    removed = len(change.removed) + len(change.removed_dvs)
    if removed:
        props["removed-delete-files"] = str(removed)
    props.update(extra)
    previous = (head.summary if head is not None else None) or Summary(Operation.APPEND)

    def total(key: str, plus: int, minus: int) -> None:
        before = previous.get(key)
        if before is None:
            return
        try:
            props[key] = str(int(before) + plus - minus)
        except ValueError:
            return

    def of(key: str) -> int:
        return int(extra.get(key, "0"))

    total("total-data-files", len(change.added_data), len(change.removed_data))
    total("total-records", int(props.get("added-records", "0")), of("deleted-records"))
    total("total-delete-files", len(change.added), removed)
    total(
        "total-position-deletes",
        sum(f.record_count for f in added_pos),
        of("removed-position-deletes"),
    )
    total("total-equality-deletes", 0, of("removed-equality-deletes"))
    total("total-files-size", added_size, of("removed-files-size"))
    return Summary(Operation.REPLACE, **props)
