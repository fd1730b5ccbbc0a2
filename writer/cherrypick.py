"""Iceberg's `cherrypick_snapshot` (its `CherryPickOperation`): a snapshot that is not in
`main`'s history (a write-audit-publish snapshot staged with `wap.id`, a commit of another
branch) applied to `main`.

- When the snapshot's parent is `main`'s head (or both are none), `main` moves to it: a
  fast-forward, no new snapshot.
- Else an `append` is applied as a new snapshot adding the data files it added; an
  `overwrite` that replaced partitions (`replace-partitions` = true, Spark's dynamic INSERT
  OVERWRITE) adds its files and removes the ones it removed, if those are all still in the
  table, its parent is an ancestor of `main`'s head, and no data file was added to a partition
  it replaces since that parent. Any other operation is refused.
- Refused too: a snapshot that is an ancestor of `main`'s head already, or that a snapshot of
  that history was picked from (`source-snapshot-id`), or whose `wap.id` was published
  already.

The new snapshot's operation is the picked one's; its summary names `source-snapshot-id` and
`published-wap-id` (the picked `wap.id`), as Iceberg's. It commits through the snapshot
producer (writer/producer.py); a commit that lands meanwhile is checked again (the same
refusals; for an overwrite, a data file added to a replaced partition or deletes added to a
removed file). The data files it adds are the picked snapshot's: nothing is written but
manifests, a list and the metadata, and a commit that fails never deletes those files. On a
v3 table the added files get new row ids in `main` (their `first_row_id` is assigned again).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation as Op
from pyiceberg.table.snapshots import Snapshot, ancestors_of

from mor.planner.manifests import ADDED, CheckedIO, read_manifest, read_manifest_list
from mor.writer.catalog_changes import load
from mor.writer.conflicts import ConflictError, added_entries
from mor.writer.files import partition_key
from mor.writer.operations import AppendFiles, OverwriteFiles
from mor.writer.procedures import ProcedureError, RefMove, commit_ref_move

SOURCE = "source-snapshot-id"
PUBLISHED_WAP = "published-wap-id"
STAGED_WAP = "wap.id"


@dataclass(frozen=True)
class Picked:
    """What cherry-picking did: the picked snapshot, `main` before and after, and how
    (`fast-forward`, `append` or `overwrite`)."""

    source: int
    before: int | None
    after: int | None
    how: str

    def row(self) -> tuple[Any, ...]:
        return (self.source, self.after)

    def line(self, table: str, done: bool) -> str:
        if self.how == "fast-forward":
            verb = "moved" if done else "would move"
            return (
                f"table {table}: main {verb} from snapshot {self.before} to {self.source} "
                "(a fast-forward: its parent is main's head)"
            )
        if not done:
            return (
                f"table {table}: snapshot {self.source} ({self.how}) would be applied to main "
                f"as a new snapshot over {self.before}"
            )
        return (
            f"table {table}: snapshot {self.source} ({self.how}) applied to main as snapshot "
            f"{self.after}"
        )


def _summary(snap: Snapshot) -> dict[str, str]:
    return dict(snap.summary.additional_properties) if snap.summary is not None else {}


def _refuse(identifier: str, reason: str) -> ProcedureError:
    return ProcedureError(
        f"CALL cherrypick_snapshot on {identifier}: {reason}; nothing was committed"
    )


def _history_checks(picked: Snapshot, history: Sequence[Snapshot], identifier: str) -> None:
    """Iceberg's refusals against `history` (main's, newest first): an ancestor already,
    picked already, or its WAP id published already."""
    sid = picked.snapshot_id
    wap = _summary(picked).get(STAGED_WAP)
    for snap in history:
        if snap.snapshot_id == sid:
            raise _refuse(identifier, f"cannot cherry-pick snapshot {sid}: already an ancestor")
        props = _summary(snap)
        if props.get(SOURCE) == str(sid):
            raise _refuse(
                identifier,
                f"cannot cherry-pick snapshot {sid}: already picked to create ancestor "
                f"{snap.snapshot_id}",
            )
        if wap and wap in (props.get(STAGED_WAP), props.get(PUBLISHED_WAP)):
            raise _refuse(
                identifier,
                f"duplicate request to cherry-pick wap id that was published already: {wap}",
            )


def _entries(table: Table, snap: Snapshot) -> tuple[list[DataFile], list[DataFile]]:
    """The data files `snap` added and removed, as pyiceberg's records (each manifest read
    whole and checked first: planner/manifests.CheckedIO)."""
    checked = CheckedIO(table.io)
    added, removed = [], []
    for manifest in snap.manifests(checked):
        if manifest.added_snapshot_id != snap.snapshot_id:
            continue
        for e in manifest.fetch_manifest_entry(checked, discard_deleted=False):
            if e.snapshot_id != snap.snapshot_id or e.data_file.content != DataFileContent.DATA:
                continue
            if e.status == ManifestEntryStatus.ADDED:
                added.append(e.data_file)
            elif e.status == ManifestEntryStatus.DELETED:
                removed.append(e.data_file)
    return added, removed


def _readded(table: Table, f: DataFile) -> DataFile:
    """`f` as a new entry of this table's version (on v3: bound to the v3 struct, its
    `first_row_id` null: assigned from its new manifest's)."""
    names = (
        "content", "file_path", "file_format", "partition", "record_count",
        "file_size_in_bytes", "column_sizes", "value_counts", "null_value_counts",
        "nan_value_counts", "lower_bounds", "upper_bounds", "key_metadata", "split_offsets",
        "equality_ids", "sort_order_id",
    )  # fmt: skip
    out = DataFile.from_args(
        _table_format_version=table.metadata.format_version,
        **{n: getattr(f, n) for n in names},
    )
    out.spec_id = f.spec_id
    return out


def _live_data(table: Table, head: Snapshot | None) -> set[str]:
    if head is None:
        return set()
    out: set[str] = set()
    for m in read_manifest_list(table.io, head.manifest_list):
        if m.content == 0:  # data manifests
            out.update(e.data_file.file_path for e in read_manifest(table.io, m, metrics=False))
    return out


def _check_news(picked: Snapshot | None, news: Sequence[Snapshot], identifier: str) -> None:
    """A cherry-pick's checks against the commits that landed meanwhile: the refusals again."""
    assert picked is not None
    try:
        _history_checks(picked, list(reversed(news)), identifier)
    except ProcedureError as e:
        raise ConflictError(str(e)) from None


@dataclass
class _PickAppend(AppendFiles):
    picked: Snapshot | None = None

    def validate(self, table: Table, news: Sequence[Snapshot], identifier: str) -> None:
        _check_news(self.picked, news, identifier)


@dataclass
class _PickOverwrite(OverwriteFiles):
    picked: Snapshot | None = None

    def validate(self, table: Table, news: Sequence[Snapshot], identifier: str) -> None:
        _check_news(self.picked, news, identifier)
        super().validate(table, news, identifier)


def cherrypick(
    catalog: Catalog,
    identifier: str,
    snapshot_id: int,
    *,
    dry_run: bool = False,
    before_commit: Callable[[], Any] | None = None,
) -> Picked:
    """Cherry-pick `snapshot_id` into `main` of `identifier` (see the module)."""
    table = load(catalog, identifier)
    md = table.metadata
    picked = md.snapshot_by_id(snapshot_id)
    if picked is None:
        raise _refuse(identifier, f"cannot cherry-pick unknown snapshot id {snapshot_id}")
    head = md.current_snapshot()
    before = head.snapshot_id if head is not None else None
    op = picked.summary.operation if picked.summary is not None else None
    props = _summary(picked)
    replacing = op == Op.OVERWRITE and props.get("replace-partitions", "").lower() == "true"
    history = list(ancestors_of(head, md)) if head is not None else []
    if op == Op.APPEND or replacing:
        wap = props.get(STAGED_WAP)
        if wap and any(
            wap in (_summary(s).get(STAGED_WAP), _summary(s).get(PUBLISHED_WAP)) for s in history
        ):
            raise _refuse(
                identifier,
                f"duplicate request to cherry-pick wap id that was published already: {wap}",
            )
    if picked.parent_snapshot_id == before:  # a fast-forward
        if not dry_run:

            def decide(now: TableMetadata) -> RefMove:
                if now.current_snapshot_id != before:
                    raise _refuse(
                        identifier,
                        f"main moved to snapshot {now.current_snapshot_id} meanwhile; call it "
                        "again to pick onto it",
                    )
                return RefMove("cherrypick_snapshot", "main", before, snapshot_id)

            commit_ref_move(catalog, identifier, "cherrypick_snapshot", decide, before_commit)
        return Picked(snapshot_id, before, snapshot_id, "fast-forward")
    if not (op == Op.APPEND or replacing):
        raise _refuse(
            identifier,
            f"cannot cherry-pick snapshot {snapshot_id}: not append, dynamic overwrite, or "
            "fast-forward",
        )
    _history_checks(picked, history, identifier)
    added, removed = _entries(table, picked)
    extra = {SOURCE: str(snapshot_id)}
    if props.get(STAGED_WAP):
        extra[PUBLISHED_WAP] = props[STAGED_WAP]
    files = [_readded(table, f) for f in added]
    change: AppendFiles | OverwriteFiles
    if op == Op.APPEND:
        change = _PickAppend(added_data=files, summary=extra, adopted=True, picked=picked)
        how = "append"
    else:
        parent = picked.parent_snapshot_id
        if parent is not None and parent not in {s.snapshot_id for s in history}:
            raise _refuse(
                identifier,
                f"cannot cherry-pick overwrite not based on an ancestor of the current state: "
                f"{snapshot_id}",
            )
        live = _live_data(table, head)
        missing = sorted(f.file_path for f in removed if f.file_path not in live)
        if missing:
            raise _refuse(identifier, f"missing required files to delete: {', '.join(missing)}")
        replaced = {(f.spec_id, partition_key(f.partition)) for f in added}
        for snap in history:
            if snap.snapshot_id == parent:
                break
            for status, _, f in added_entries(table, snap):
                if (
                    status == ADDED
                    and f.content == DataFileContent.DATA
                    and (f.spec_id, partition_key(f.partition)) in replaced
                ):
                    raise _refuse(
                        identifier,
                        "cannot cherry-pick replace partitions with changed partition: "
                        f"{partition_key(f.partition)} (data file {f.file_path} added by "
                        f"snapshot {snap.snapshot_id})",
                    )
        change = _PickOverwrite(
            added_data=files,
            summary=extra,
            adopted=True,
            replaces=lambda f: (f.spec_id, partition_key(f.partition)) in replaced,
            isolation="serializable",
            picked=picked,
        )  # its summary without `replace-partitions`, as Iceberg's
        for f in removed:
            change.remove(f)
        how = "overwrite"
    if dry_run:
        return Picked(snapshot_id, before, None, how)
    from mor.writer.producer import SnapshotProducer

    if before_commit is not None:
        before_commit()
    done = SnapshotProducer(catalog, identifier, branch="main").commit(change, head)
    return Picked(snapshot_id, before, done.snapshot.snapshot_id, how)
