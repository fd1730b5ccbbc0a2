"""The operations mor commits, one class each, as Iceberg's `SnapshotProducer` family names
them: what a snapshot adds and removes, the validations against commits that landed since
the snapshot it was computed on, and its summary.

- `RowDelta` (Iceberg's `RowDelta`, as Spark's merge-on-read DELETE, UPDATE and MERGE commit
  it): new data files and delete files (position delete files, deletion vectors), the delete
  files the new vectors replace, and data files removed whole (a DELETE whose condition
  selects every row of a file: Iceberg's metadata delete, `RowDelta.removeRows`). Its
  operation is `delete`, `append` or `overwrite`, as `RowDelta` names it.
- `RewriteFiles` (Iceberg's `RewriteFiles`, operation `replace`): the maintenance commands;
  no row changes.

The snapshot producer (writer/producer.py) commits any `Operation` and knows nothing of SQL;
writer/manifests.py writes the manifests from the fields the base class holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation as Op
from pyiceberg.table.snapshots import Snapshot, Summary

from mor.planner.manifests import ADDED, DELETED
from mor.writer.conflicts import ConflictError, added_entries
from mor.writer.files import content_size, named_data_file, partition_key


@dataclass
class Operation:
    """What one snapshot adds and removes.

    `added`: new delete files; `removed`: paths of live delete files to remove;
    `removed_dvs`: deletion vectors to remove (v3), each by its Puffin file and blob offset;
    `added_data`: new data files, committed with data sequence number `data_seq` (None: the
    new snapshot's); `removed_data`: paths of live data files to remove; `summary`: what the
    snapshot's summary adds (counts of removed files the paths alone do not tell)."""

    added: list[DataFile] = field(default_factory=list)
    removed: set[str] = field(default_factory=set)
    removed_dvs: set[tuple[str, int]] = field(default_factory=set)
    added_data: list[DataFile] = field(default_factory=list)
    removed_data: set[str] = field(default_factory=set)
    data_seq: int | None = None
    summary: dict[str, str] = field(default_factory=dict)
    adopted: bool = False  # its data files are the table's already (a cherry-pick): never deleted

    @property
    def operation(self) -> Op:
        raise NotImplementedError

    def validate(self, table: Table, news: Sequence[Snapshot], identifier: str) -> None:
        """Raise ConflictError when a snapshot of `news` (committed to the branch since the
        operation's base, oldest first) touches what it changes."""
        for snap in news:
            for status, seq, f in added_entries(table, snap):
                what = self._conflict(status, seq, f)
                if what:
                    raise ConflictError(
                        f"{identifier}: snapshot {snap.snapshot_id} "
                        f"({snap.summary.operation.value if snap.summary else '?'}), committed "
                        f"meanwhile, {what}; nothing was committed"
                    )

    def _conflict(self, status: int, seq: int | None, f: Any) -> str:
        return self._removed_meanwhile(f) if status == DELETED else ""

    def _removed_meanwhile(self, f: Any) -> str:
        """A file this operation depends on (a data file it read, a delete file or vector it
        removes) that a snapshot committed meanwhile removed."""
        if f.content == DataFileContent.DATA and f.file_path in self.referenced:
            return f"removed data file {f.file_path}, which this operation rewrites"
        if f.content != DataFileContent.DATA and f.file_path in self.removed:
            return f"removed delete file {f.file_path}, which this operation removes"
        offset = f.content_offset
        if f.content == DataFileContent.POSITION_DELETES and (
            (f.file_path, offset) in self.removed_dvs
            or (offset is None and f.file_path in {p for p, _ in self.removed_dvs})
        ):
            return (
                f"removed a deletion vector of {f.file_path}, whose vectors this operation replaces"
            )
        return ""

    @property
    def referenced(self) -> set[str]:
        """The data files the operation was computed for (their rows, or their positions)."""
        return set(self.removed_data)

    def _new_positions(self, f: Any) -> str:
        """Position deletes or a vector added meanwhile to a data file this operation read
        (or naming no one data file: they may apply to one)."""
        if f.content != DataFileContent.POSITION_DELETES:
            return ""
        named = named_data_file(f)
        if f.referenced_data_file and named in self.referenced:
            return (
                f"added a deletion vector ({f.file_path}) to {named}, a data file this "
                "operation rewrites"
            )
        if named is None or named in self.referenced:
            return f"added position deletes {f.file_path} to a data file this operation rewrites"
        return ""

    def summary_of(self, head: Snapshot | None) -> Summary:
        raise NotImplementedError


@dataclass
class RowDelta(Operation):
    """A row-level write: new data and delete files, replaced vectors and file-scoped position
    delete files, data files removed whole. Validated as Iceberg's `RowDelta` with the
    statement's conflict detection filter (`conflict_filter`: whether a file committed
    meanwhile may hold rows the statement's condition matches; None: any may): the data
    files it deletes from (`data`) still exist, no delete file or vector it removes was
    removed (Iceberg's `validateDeletedFiles`), no position deletes or vector were added to
    those data files, no equality deletes that may hold its rows, and under `serializable`
    isolation no data file that may hold them."""

    data: set[str] = field(default_factory=set)
    conflict_filter: Callable[[Any], bool] | None = None
    isolation: str = "serializable"

    @property
    def operation(self) -> Op:
        deletes = bool(self.added or self.removed_data)
        if deletes and self.added_data:
            return Op.OVERWRITE
        return Op.DELETE if deletes else Op.APPEND

    @property
    def referenced(self) -> set[str]:
        return self.data | self.removed_data

    def validate(self, table: Table, news: Sequence[Snapshot], identifier: str) -> None:
        if self.referenced or self.removed or self.removed_dvs:
            super().validate(table, news, identifier)

    def _conflict(self, status: int, seq: int | None, f: Any) -> str:
        if status != ADDED:
            return super()._conflict(status, seq, f)
        may = self.conflict_filter
        if f.content == DataFileContent.DATA:
            if self.isolation == "serializable" and (may is None or may(f)):
                return (
                    f"added data file {f.file_path}, which may hold rows this statement's "
                    "condition matches (serializable isolation)"
                )
            return ""
        if f.content == DataFileContent.EQUALITY_DELETES:
            if may is None or may(f):
                return (
                    f"added equality deletes {f.file_path}, which may delete rows this "
                    "statement changes"
                )
            return ""
        return self._new_positions(f)

    def summary_of(self, head: Snapshot | None) -> Summary:
        """As Iceberg's `SnapshotSummary` makes it for a row delta: what was added (deletion
        vectors counted as `added-dvs`) and removed (replaced vectors and position delete
        files, data files removed whole: counts in `summary`), and the totals after (from the
        head's, or from zero on a table's first snapshot)."""
        files = [*self.added_data, *self.added]
        pos = [f for f in self.added if f.content == DataFileContent.POSITION_DELETES]
        eq = [f for f in self.added if f.content == DataFileContent.EQUALITY_DELETES]
        dvs = [f for f in pos if f.file_format == FileFormat.PUFFIN]
        added = {
            "added-data-files": len(self.added_data),
            "added-delete-files": len(self.added),
            "added-position-delete-files": len(pos) - len(dvs),
            "added-dvs": len(dvs),
            "added-equality-delete-files": len(eq),
            "added-records": sum(f.record_count for f in self.added_data),
            "added-position-deletes": sum(f.record_count for f in pos),
            "added-equality-deletes": sum(f.record_count for f in eq),
            "added-files-size": sum(content_size(f) for f in files),
        }
        props = {k: str(v) for k, v in added.items() if v}
        props.update({k: v for k, v in self.summary.items() if v != "0"})

        def of(key: str) -> int:
            return int(self.summary.get(key, "0"))

        removed_files = of("removed-dvs") + of("removed-position-delete-files")
        if removed_files:
            props["removed-delete-files"] = str(removed_files)
        if self.removed_data:
            props["deleted-data-files"] = str(len(self.removed_data))
        parts = {(f.spec_id, str(f.partition)) for f in files}
        props["changed-partition-count"] = str(len(parts) + of("changed-partitions-removed"))
        props.pop("changed-partitions-removed", None)
        before = head.summary if head is not None and head.summary is not None else None
        for total, plus, minus in (
            ("total-data-files", added["added-data-files"], len(self.removed_data)),
            ("total-delete-files", added["added-delete-files"], removed_files),
            ("total-records", added["added-records"], of("deleted-records")),
            ("total-files-size", added["added-files-size"], of("removed-files-size")),
            (
                "total-position-deletes",
                added["added-position-deletes"],
                of("removed-position-deletes"),
            ),
            ("total-equality-deletes", added["added-equality-deletes"], 0),
        ):
            try:
                start = int(before.get(total) or 0) if before is not None else 0
            except ValueError:
                continue
            props[total] = str(start + plus - minus)
        return Summary(self.operation, **props)


@dataclass
class RewriteFiles(Operation):
    """A rewrite (`replace`): no row changes. Converting equality deletes adds delete files
    that say what others said and removes those no live data file needs; compaction replaces
    data files by new ones holding their live rows (at the data sequence number of the
    snapshot it read, `data_seq`, required with new data files), removing the delete files
    that reached only them. `data`: the data files it was computed for: one removed
    meanwhile, or given new position deletes, conflicts; `reach_seq`: the highest data
    sequence number of the equality deletes it removes: a data file added meanwhile at or
    below it (a rewrite keeping old sequence numbers) would be reached by them, and
    conflicts."""

    data: set[str] = field(default_factory=set)
    reach_seq: int = 0

    def __post_init__(self) -> None:
        if self.added_data and self.data_seq is None:
            raise ValueError("new data files need the data sequence number of the read")

    @property
    def operation(self) -> Op:
        return Op.REPLACE

    @property
    def referenced(self) -> set[str]:
        return self.data | self.removed_data

    def validate(self, table: Table, news: Sequence[Snapshot], identifier: str) -> None:
        if self.data or self.removed or self.removed_data or self.removed_dvs:
            super().validate(table, news, identifier)

    def _conflict(self, status: int, seq: int | None, f: Any) -> str:
        if status != ADDED:
            return super()._conflict(status, seq, f)
        if f.content == DataFileContent.DATA:
            if self.removed and seq is not None and seq <= self.reach_seq:
                return (
                    f"added data file {f.file_path} with data sequence number {seq}, which an "
                    "equality delete this operation removes would apply to"
                )
            return ""
        return self._new_positions(f)

    def summary_of(self, head: Snapshot | None) -> Summary:
        """Iceberg's summary of a `replace`: what was added and removed, and the totals
        after. Sizes and row counts of removed files come in `summary` (`removed-files-size`,
        `deleted-records`, `removed-position-deletes`, `removed-equality-deletes`)."""
        added_pos = [f for f in self.added if f.content == DataFileContent.POSITION_DELETES]
        pos_files = [f for f in added_pos if f.file_format != FileFormat.PUFFIN]
        extra = self.summary
        props: dict[str, str] = {}
        if self.added_data or self.removed_data:
            props["added-data-files"] = str(len(self.added_data))
            props["deleted-data-files"] = str(len(self.removed_data))
            props["added-records"] = str(sum(f.record_count for f in self.added_data))
        if self.added:
            props["added-delete-files"] = str(len(self.added))
            props["added-position-delete-files"] = str(len(pos_files))
            props["added-position-deletes"] = str(sum(f.record_count for f in added_pos))
        added_size = sum(content_size(f) for f in (*self.added, *self.added_data))
        props["added-files-size"] = str(added_size)
        removed = len(self.removed) + len(self.removed_dvs)
        if removed:
            props["removed-delete-files"] = str(removed)
        props.update(extra)
        previous = (head.summary if head is not None else None) or Summary(Op.APPEND)

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

        total("total-data-files", len(self.added_data), len(self.removed_data))
        total("total-records", int(props.get("added-records", "0")), of("deleted-records"))
        total("total-delete-files", len(self.added), removed)
        total(
            "total-position-deletes",
            sum(f.record_count for f in added_pos),
            of("removed-position-deletes"),
        )
        total("total-equality-deletes", 0, of("removed-equality-deletes"))
        total("total-files-size", added_size, of("removed-files-size"))
        return Summary(Op.REPLACE, **props)


def appended(data: list[DataFile], deletes: list[DataFile]) -> RowDelta:
    """New data files and delete files, nothing removed and nothing read (the test tables'
    and the demo's writer): an `append`, or an `overwrite` with delete files."""
    return RowDelta(added=list(deletes), added_data=list(data))


@dataclass(frozen=True)
class Removed:
    """A live file an operation removes, as its manifest records it (what its summary
    counts): its content, rows and bytes (a deletion vector's blob), spec and partition."""

    path: str
    content: DataFileContent
    records: int
    size: int
    spec_id: int
    partition: tuple[Any, ...]  # the partition's values (`changed-partition-count`)
    dv_offset: int | None = None

    @staticmethod
    def of(f: Any) -> Removed:
        offset = f.content_offset if f.file_format == FileFormat.PUFFIN else None
        return Removed(
            f.file_path, f.content, int(f.record_count), content_size(f), int(f.spec_id or 0),
            partition_key(f.partition), offset,
        )  # fmt: skip


@dataclass
class AppendFiles(Operation):
    """Iceberg's `AppendFiles` (INSERT INTO, the first snapshot of CREATE TABLE AS SELECT):
    new data files, nothing removed, nothing validated (an append conflicts with nothing)."""

    @property
    def operation(self) -> Op:
        return Op.APPEND

    def validate(self, table: Table, news: Sequence[Snapshot], identifier: str) -> None:
        return

    def summary_of(self, head: Snapshot | None) -> Summary:
        return _summary(self.operation, self.added_data, [], head, dict(self.summary))


@dataclass
class OverwriteFiles(Operation):
    """INSERT OVERWRITE as Iceberg commits it: `OverwriteFiles.overwriteByRowFilter` (static:
    the live data files a filter selects whole, every file without one) or
    `ReplacePartitions` (`replace_partitions`: the files of the partitions the new files land
    in), with the delete files of what they replace, and the new data files.

    As Iceberg's, the filter (or the partitions) applies to the branch as it is when the
    commit lands: a data file committed meanwhile that `replaces` selects is replaced too,
    unless an isolation level was asked for (`isolation`, Iceberg's `isolation-level` write
    option): then a data file added meanwhile to what is replaced is a conflict under
    `serializable` (validateNoConflictingData), and delete files added meanwhile to a
    replaced data file under both `serializable` and `snapshot` (validateNoConflictingDeletes).
    `removing`: the files removed, with what the summary counts."""

    replaces: Callable[[Any], bool] | None = None
    isolation: str | None = None
    replace_partitions: bool = False
    removing: dict[tuple[str, int | None], Removed] = field(default_factory=dict)

    def remove(self, f: Any) -> None:
        """Remove the live file `f` (a data file, a delete file or a deletion vector)."""
        r = Removed.of(f)
        self.removing[(r.path, r.dv_offset)] = r
        if f.content == DataFileContent.DATA:
            self.removed_data.add(r.path)
        elif r.dv_offset is not None:
            self.removed_dvs.add((r.path, r.dv_offset))
        else:
            self.removed.add(r.path)

    def _forget(self, path: str) -> None:
        self.removed_data.discard(path)
        self.removing.pop((path, None), None)

    @property
    def operation(self) -> Op:
        return Op.OVERWRITE

    @property
    def referenced(self) -> set[str]:
        return set(self.removed_data)

    def validate(self, table: Table, news: Sequence[Snapshot], identifier: str) -> None:
        for snap in news:
            for status, _, f in added_entries(table, snap):
                what = self._meanwhile(status, f)
                if what:
                    raise ConflictError(
                        f"{identifier}: snapshot {snap.snapshot_id} "
                        f"({snap.summary.operation.value if snap.summary else '?'}), committed "
                        f"meanwhile, {what}; nothing was committed ({self.isolation} isolation)"
                    )

    def _meanwhile(self, status: int, f: Any) -> str:
        """What a file a commit landed meanwhile means for this overwrite: a conflict (its
        text), or nothing once the overwrite is fitted to it."""
        path = f.file_path
        if status == DELETED:
            if f.content == DataFileContent.DATA and path in self.removed_data:
                if self.isolation is not None:
                    return f"removed data file {path}, which this overwrite replaces"
                self._forget(path)  # gone already: nothing to replace
            elif (path, None) in self.removing or (path, getattr(f, "content_offset", None)) in (
                self.removing
            ):
                self.removing.pop((path, None), None)
                self.removed.discard(path)
                self.removed_dvs = {(p, o) for p, o in self.removed_dvs if p != path}
            return ""
        if status != ADDED:
            return ""
        if f.content == DataFileContent.DATA:
            if self.replaces is not None and self.replaces(f):
                if self.isolation == "serializable":
                    return (
                        f"added data file {path} to what this overwrite replaces "
                        "(validateNoConflictingData)"
                    )
                self.remove(f)  # the filter at commit time takes it too, as Iceberg's
            return ""
        named = named_data_file(f)
        if named is not None and named in self.removed_data:
            if self.isolation is not None:
                return (
                    f"added deletes {path} to data file {named}, which this overwrite "
                    "replaces (validateNoConflictingDeletes)"
                )
            self.remove(f)
        elif self.replaces is not None and self.replaces(f):
            if self.isolation is not None:
                return f"added deletes {path} to what this overwrite replaces"
            self.remove(f)
        return ""

    def summary_of(self, head: Snapshot | None) -> Summary:
        extra = {"replace-partitions": "true"} if self.replace_partitions else {}
        extra.update(self.summary)
        return _summary(self.operation, self.added_data, list(self.removing.values()), head,
                        extra)  # fmt: skip


def _summary(
    op: Op, added: list[DataFile], removed: list[Removed], head: Snapshot | None,
    extra: dict[str, str],
) -> Summary:  # fmt: skip
    """Iceberg's `SnapshotSummary` of new data files and removed files: what was added and
    removed, the partitions changed, and the totals after (from the head's, or from zero on
    a branch's first snapshot)."""
    data = [r for r in removed if r.content == DataFileContent.DATA]
    pos = [r for r in removed if r.content == DataFileContent.POSITION_DELETES]
    eq = [r for r in removed if r.content == DataFileContent.EQUALITY_DELETES]
    dvs = [r for r in pos if r.dv_offset is not None]
    counts = {
        "added-data-files": len(added),
        "deleted-data-files": len(data),
        "added-records": sum(f.record_count for f in added),
        "deleted-records": sum(r.records for r in data),
        "added-files-size": sum(content_size(f) for f in added),
        "removed-files-size": sum(r.size for r in removed),
        "removed-delete-files": len(pos) + len(eq),
        "removed-position-delete-files": len(pos) - len(dvs),
        "removed-dvs": len(dvs),
        "removed-equality-delete-files": len(eq),
        "removed-position-deletes": sum(r.records for r in pos),
        "removed-equality-deletes": sum(r.records for r in eq),
    }
    props = {k: str(v) for k, v in counts.items() if v}
    parts = {(f.spec_id, partition_key(f.partition)) for f in added}
    parts |= {(r.spec_id, r.partition) for r in removed}
    props["changed-partition-count"] = str(len(parts))
    props.update(extra)
    before = head.summary if head is not None and head.summary is not None else None
    for total, plus, minus in (
        ("total-data-files", len(added), len(data)),
        ("total-delete-files", 0, len(pos) + len(eq)),
        ("total-records", counts["added-records"], counts["deleted-records"]),
        ("total-files-size", counts["added-files-size"], counts["removed-files-size"]),
        ("total-position-deletes", 0, counts["removed-position-deletes"]),
        ("total-equality-deletes", 0, counts["removed-equality-deletes"]),
    ):
        try:
            start = int(before.get(total) or 0) if before is not None else 0
        except ValueError:
            continue
        props[total] = str(start + plus - minus)
    return Summary(op, **props)
