"""Committing a rewrite of files: one snapshot, atomically, through the table's catalog.

The maintenance commands (mor/maintenance.py) change no row of a table. Converting equality
deletes adds delete files that say what other delete files said (positions for equality
deletes) and removes the delete files no live data file needs any more; compacting replaces
data files by new ones holding their live rows, and removes the delete files that reached
only them. This module turns such a change into an Iceberg v2 snapshot as Iceberg's own
library makes one (`RewriteFiles`, operation `replace`):

- the new delete files go in new delete manifests (one per partition spec), their entries
  ADDED with no sequence number: they inherit the new snapshot's;
- the new data files go in new data manifests, their entries ADDED with the data sequence
  number of the snapshot the rewrite read (`RewriteFiles.dataSequenceNumber`), so that a
  delete committed after that snapshot, meanwhile, still applies to the rows they hold, and
  none committed before it does (it was applied when they were written); their file sequence
  number is the new snapshot's;
- each manifest holding a removed file is written again: the removed files' entries DELETED
  (this snapshot's id, their sequence numbers kept), every other entry EXISTING with its own
  sequence numbers and snapshot id; every other manifest is carried over as it is;
- a manifest list over them, and a snapshot whose summary has the counts and the totals;
- the commit asks the catalog to move the branch from the snapshot the change was computed
  on to the new one (`AssertRefSnapshotId`): the catalog does it atomically or refuses.

Optimistic concurrency, as Iceberg's `SnapshotProducer`: when another commit landed first the
change is checked against every snapshot committed since (`conflicts`), and rebuilt over the
new head when nothing in them touches it (appends are rebased over), up to `retries` times.
A conflicting commit stops the operation with one line. Whatever an attempt wrote and no
committed snapshot references is deleted before returning or raising; only a commit whose
outcome the catalog could not tell (`CommitStateUnknownException`) leaves its files, and the
error names them.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
    write_manifest_list,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    SetSnapshotRefUpdate,
)
from pyiceberg.types import IntegerType, ListType, LongType, NestedField, StringType, StructType

from mor.planner.errors import MorError

RETRIES = 4
POSITION_DELETE_SCHEMA = Schema(
    NestedField(2147483546, "file_path", StringType(), required=True),
    NestedField(2147483545, "pos", LongType(), required=True),
)
FULL_METRICS = {"write.metadata.metrics.default": "full"}  # file_path bounds untruncated


class ConflictError(MorError):
    """A commit that landed while the operation ran touched what it changes: nothing of the
    operation was committed, and the table is as that commit left it."""


class CommitUnknownError(MorError):
    """The catalog could not tell whether the commit landed: the files it would reference
    are left in place (named in the message)."""


class DataManifestWriter(ManifestWriterV2):
    """A v2 manifest of data files in the spec's schema: pyiceberg 0.12 declares
    `equality_ids` a list of longs where the spec (and Iceberg's Java reader, which fails on
    it in its metadata tables) has ints. Avro encodes int and long alike, so the entries are
    written as pyiceberg writes them."""

    def _with_partition(self, format_version: Any) -> Schema:
        return _int_equality_ids(super()._with_partition(format_version))


class DeleteManifestWriter(DataManifestWriter):
    """A v2 manifest of delete files (pyiceberg 0.12 writes data manifests only)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def _int_equality_ids(schema: Schema) -> Schema:
    """The manifest entry schema with `equality_ids` (field 135) a list of ints (spec)."""

    def data_file(t: StructType) -> StructType:
        return StructType(
            *[
                NestedField(
                    field_id=f.field_id,
                    name=f.name,
                    field_type=ListType(
                        element_id=136, element_type=IntegerType(), element_required=True
                    ),
                    required=f.required,
                    doc=f.doc,
                )
                if f.field_id == 135
                else f
                for f in t.fields
            ]
        )

    return Schema(
        *[
            NestedField(f.field_id, f.name, data_file(f.field_type), required=f.required)
            if f.field_id == 2 and isinstance(f.field_type, StructType)
            else f
            for f in schema.fields
        ]
    )


@dataclass
class Rewrite:
    """A change of files that changes no row.

    `added`: new delete files (written already, by the caller); `removed`: paths of live
    delete files to remove; `data`: the data files the change was computed for (paths as
    recorded): a concurrent commit that removes one of them, or adds position deletes to
    one, conflicts; `reach_seq`: the highest data sequence number of the removed equality
    deletes: a concurrent commit adding a data file below it (a rewrite keeping old sequence
    numbers) would be reached by a removed delete, and conflicts. `added_data`: new data
    files, committed with data sequence number `data_seq`; `removed_data`: paths of the live
    data files they replace."""

    added: list[DataFile]
    removed: set[str]
    data: set[str]
    reach_seq: int = 0
    summary: dict[str, str] = field(default_factory=dict)  # extra summary properties
    added_data: list[DataFile] = field(default_factory=list)
    removed_data: set[str] = field(default_factory=set)
    data_seq: int | None = None

    def __post_init__(self) -> None:
        if self.added_data and self.data_seq is None:
            raise ValueError("new data files need the data sequence number of the read")


@dataclass
class Committed:
    snapshot: Snapshot
    attempts: int
    rebased_over: list[int]  # snapshot ids committed meanwhile, rebased over


def commit_rewrite(
    catalog: Catalog,
    identifier: str,
    base: Snapshot,
    branch: str,
    change: Rewrite,
    *,
    retries: int = RETRIES,
    before_commit: Callable[[int], None] | None = None,
) -> Committed:
    """Commit `change`, computed on `base` (the head of `branch` then), as one snapshot.
    `before_commit(attempt)`: called right before each attempt asks the catalog (tests use
    it to land a concurrent commit)."""
    table = catalog.load_table(identifier)
    if table.metadata.format_version != 2:
        raise MorError(
            f"{identifier}: format version {table.metadata.format_version}; this commit "
            "writes v2 metadata only"
        )
    snapshot_id = _new_snapshot_id(table)
    written: list[str] = []  # every file this operation wrote, to delete unless committed
    written += [f.file_path for f in (*change.added, *change.added_data)]
    io = table.io
    rebased: list[int] = []
    committed = False
    try:
        ours = _added_manifests(table, change, snapshot_id, written)
        for attempt in range(1, retries + 2):
            head = _head(table, branch)
            if head is None:
                raise ConflictError(f"{identifier}: branch {branch} no longer exists")
            if head.snapshot_id != base.snapshot_id:
                news = _since(table, head, base)
                conflicts(table, news, change, identifier)
                rebased += [s.snapshot_id for s in news if s.snapshot_id not in rebased]
                base = head
            mark = len(written)  # what this attempt writes: written[mark:]
            manifests = _manifests(table, head, change, snapshot_id, written) + ours
            seq = table.metadata.last_sequence_number + 1
            listing = _manifest_list(table, head, manifests, snapshot_id, seq, written)
            snapshot = Snapshot(
                snapshot_id=snapshot_id,
                parent_snapshot_id=head.snapshot_id,
                sequence_number=seq,
                timestamp_ms=max(int(time.time() * 1000), head.timestamp_ms + 1),
                manifest_list=listing,
                summary=_summary(head, change),
                schema_id=table.metadata.current_schema_id,
            )
            if before_commit is not None:
                before_commit(attempt)
            try:
                catalog.commit_table(
                    table,
                    requirements=(
                        AssertTableUUID(uuid=table.metadata.table_uuid),
                        AssertRefSnapshotId(ref=branch, snapshot_id=head.snapshot_id),
                    ),
                    updates=(
                        AddSnapshotUpdate(snapshot=snapshot),
                        SetSnapshotRefUpdate(
                            ref_name=branch, type=SnapshotRefType.BRANCH, snapshot_id=snapshot_id
                        ),
                    ),
                )
            except CommitStateUnknownException as e:
                committed = True  # perhaps: nothing may be deleted
                raise CommitUnknownError(
                    f"{identifier}: the catalog could not tell whether snapshot {snapshot_id} "
                    f"was committed ({e}); its files are left in place: {', '.join(written)}"
                ) from e
            except CommitFailedException:
                _delete(io, written[mark:])  # this attempt's manifest list and rewrites
                del written[mark:]
                table = catalog.load_table(identifier)
                continue
            committed = True
            return Committed(snapshot, attempt, rebased)
        raise ConflictError(
            f"{identifier}: {retries + 1} attempts to commit failed, each time another "
            "commit landed first; nothing was committed"
        )
    except MorError as e:
        left = [] if committed else _delete(io, written)
        if left:  # named, so that they can be removed by hand
            raise type(e)(f"{e}; files it wrote could not be removed: {', '.join(left)}") from e
        raise
    finally:
        if not committed:
            _delete(io, written)


def write_position_deletes(table: Table, data_file: DataFile, positions: pa.Array) -> DataFile:
    """A position delete file naming `data_file` alone (file-scoped: its `file_path` bounds
    are that path, whole), rows sorted by position, in the data file's partition and spec,
    written through the table's FileIO under `<location>/data/`."""
    n = len(positions)
    rows = pa.table(
        {
            "file_path": pa.array([data_file.file_path] * n, pa.string()),
            "pos": positions.cast(pa.int64()).sort(),
        },
        schema=schema_to_pyarrow(POSITION_DELETE_SCHEMA),
    )
    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink)
    data = sink.getvalue()
    stats = data_file_statistics_from_parquet_metadata(
        pq.read_metadata(pa.BufferReader(data)),
        compute_statistics_plan(POSITION_DELETE_SCHEMA, FULL_METRICS),
        parquet_path_to_id_mapping(POSITION_DELETE_SCHEMA),
    )
    path = f"{table.metadata.location.rstrip('/')}/data/mor-{uuid.uuid4()}-deletes.parquet"
    with table.io.new_output(path).create(overwrite=False) as out:
        out.write(data.to_pybytes())
    f = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=data_file.partition,
        file_size_in_bytes=len(data),
        **stats.to_serialized_dict(),
    )
    f.spec_id = data_file.spec_id
    return f


def _new_snapshot_id(table: Table) -> int:
    taken = {s.snapshot_id for s in table.metadata.snapshots}
    while True:
        sid = uuid.uuid4().int & ((1 << 63) - 1)
        if sid and sid not in taken:
            return sid


def _head(table: Table, branch: str) -> Snapshot | None:
    return table.metadata.snapshot_by_name(branch)


def _since(table: Table, head: Snapshot, base: Snapshot) -> list[Snapshot]:
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


def conflicts(table: Table, news: Sequence[Snapshot], change: Rewrite, identifier: str) -> None:
    """Raise ConflictError when a snapshot of `news` touches what `change` changes: removes a
    data file it was computed for or a delete file it removes, adds a delete file that
    applies to one of its data files (positions or a deletion vector naming it, or any delete
    in its partition that names no file), or adds a data file that a removed equality
    delete would reach (a data sequence number at or below `reach_seq`)."""
    io = table.io
    for snap in news:
        for manifest in snap.manifests(io):
            if manifest.added_snapshot_id != snap.snapshot_id:
                continue  # carried over: nothing of this snapshot
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                if entry.snapshot_id != snap.snapshot_id:
                    continue
                f = entry.data_file
                what = _conflict(entry, f, change)
                if what:
                    raise ConflictError(
                        f"{identifier}: snapshot {snap.snapshot_id} "
                        f"({snap.summary.operation.value if snap.summary else '?'}), committed "
                        f"meanwhile, {what}; nothing was committed"
                    )


def _conflict(entry: ManifestEntry, f: DataFile, change: Rewrite) -> str:
    if entry.status == ManifestEntryStatus.DELETED:
        if f.content == DataFileContent.DATA and f.file_path in change.data | change.removed_data:
            return f"removed data file {f.file_path}, which this operation rewrites"
        if f.content != DataFileContent.DATA and f.file_path in change.removed:
            return f"removed delete file {f.file_path}, which this operation removes"
        return ""
    if entry.status != ManifestEntryStatus.ADDED:
        return ""
    if f.content == DataFileContent.DATA:
        seq = entry.sequence_number
        if change.removed and seq is not None and seq <= change.reach_seq:
            return (
                f"added data file {f.file_path} with data sequence number {seq}, which an "
                "equality delete this operation removes would apply to"
            )
        return ""
    if f.content == DataFileContent.POSITION_DELETES:
        named = _named_file(f)
        if named is None or named in change.data:
            return f"added position deletes {f.file_path} to a data file this operation rewrites"
    return ""


def _named_file(f: DataFile) -> str | None:
    """The one data file a position delete file names (its `file_path` bounds are equal, or
    its referenced data file), or None when it may name several."""
    ref = getattr(f, "referenced_data_file", None)
    if ref:
        return str(ref)
    lower = (f.lower_bounds or {}).get(2147483546)
    upper = (f.upper_bounds or {}).get(2147483546)
    if lower is not None and lower == upper:
        return bytes(lower).decode("utf-8", errors="replace")
    return None


def _added_manifests(
    table: Table, change: Rewrite, snapshot_id: int, written: list[str]
) -> list[ManifestFile]:
    """New manifests, one per content and partition spec: the new delete files with no
    sequence number (they inherit the snapshot's), the new data files with `data_seq`."""
    groups: dict[tuple[bool, int], list[DataFile]] = defaultdict(list)
    for f in change.added:
        groups[(True, f.spec_id)].append(f)
    for f in change.added_data:
        groups[(False, f.spec_id)].append(f)
    out = []
    for (deletes, spec_id), files in sorted(groups.items()):
        path = _manifest_path(table)
        written.append(path)
        writer = (DeleteManifestWriter if deletes else DataManifestWriter)(
            table.metadata.specs()[spec_id],
            table.metadata.schema(),
            table.io.new_output(path),
            snapshot_id,
            "deflate",
        )
        with writer:
            for f in files:
                writer.add_entry(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED,
                        snapshot_id=snapshot_id,
                        sequence_number=None if deletes else change.data_seq,
                        file_sequence_number=None,
                        data_file=f,
                    )
                )
        out.append(writer.to_manifest_file())
    return out


def _manifests(
    table: Table, head: Snapshot, change: Rewrite, snapshot_id: int, written: list[str]
) -> list[ManifestFile]:
    """The head's manifests, each one holding a removed file written again."""
    io = table.io
    out = []
    found: set[str] = set()
    for manifest in head.manifests(io):
        deletes = manifest.content == ManifestContent.DELETES
        gone = change.removed if deletes else change.removed_data
        if not gone:
            out.append(manifest)
            continue
        entries = manifest.fetch_manifest_entry(io, discard_deleted=True)
        hit = [e for e in entries if e.data_file.file_path in gone]
        if not hit:
            out.append(manifest)
            continue
        found.update(e.data_file.file_path for e in hit)
        path = _manifest_path(table)
        written.append(path)
        writer = (DeleteManifestWriter if deletes else DataManifestWriter)(
            table.metadata.specs()[manifest.partition_spec_id],
            table.metadata.schema(),
            io.new_output(path),
            snapshot_id,
            "deflate",
        )
        with writer:
            for e in entries:
                if e.data_file.file_path in gone:
                    writer.delete(e)
                else:
                    writer.existing(e)
        out.append(writer.to_manifest_file())
    missing = (change.removed | change.removed_data) - found
    if missing:
        raise ConflictError(
            f"{table.name()}: files this operation removes are no longer live: "
            f"{', '.join(sorted(missing)[:3])}; nothing was committed"
        )
    return out


def _manifest_list(
    table: Table,
    head: Snapshot,
    manifests: Sequence[ManifestFile],
    snapshot_id: int,
    seq: int,
    written: list[str],
) -> str:
    path = (
        f"{table.metadata.location.rstrip('/')}/metadata/"
        f"snap-{snapshot_id}-{len(written)}-{uuid.uuid4()}.avro"
    )
    written.append(path)
    with write_manifest_list(
        format_version=2,
        output_file=table.io.new_output(path),
        snapshot_id=snapshot_id,
        parent_snapshot_id=head.snapshot_id,
        sequence_number=seq,
        avro_compression="deflate",
    ) as writer:
        writer.add_manifests(list(manifests))
    return path


def _manifest_path(table: Table) -> str:
    return f"{table.metadata.location.rstrip('/')}/metadata/mor-{uuid.uuid4()}-m0.avro"


def _summary(head: Snapshot, change: Rewrite) -> Summary:
    """Iceberg's summary of a `replace`: what was added and removed, and the totals after.
    Sizes and row counts of removed files come in `change.summary` (`removed-files-size`,
    `deleted-records`, `removed-position-deletes`, `removed-equality-deletes`)."""
    added_pos = [f for f in change.added if f.content == DataFileContent.POSITION_DELETES]
    extra = change.summary
    props: dict[str, str] = {}
    if change.added_data or change.removed_data:
        props["added-data-files"] = str(len(change.added_data))
        props["deleted-data-files"] = str(len(change.removed_data))
        props["added-records"] = str(sum(f.record_count for f in change.added_data))
    if change.added:
        props["added-delete-files"] = str(len(change.added))
        props["added-position-delete-files"] = str(len(added_pos))
        props["added-position-deletes"] = str(sum(f.record_count for f in added_pos))
    added_size = sum(f.file_size_in_bytes for f in (*change.added, *change.added_data))
    props["added-files-size"] = str(added_size)
    if change.removed:
        props["removed-delete-files"] = str(len(change.removed))
    props.update(extra)
    previous = head.summary or Summary(Operation.APPEND)

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
    total("total-delete-files", len(change.added), len(change.removed))
    total(
        "total-position-deletes",
        sum(f.record_count for f in added_pos),
        of("removed-position-deletes"),
    )
    total("total-equality-deletes", 0, of("removed-equality-deletes"))
    total("total-files-size", added_size, of("removed-files-size"))
    return Summary(Operation.REPLACE, **props)


def _delete(io: object, paths: Iterable[str]) -> list[str]:
    """Delete these files (each once); the paths that could not be deleted."""
    left = []
    for p in dict.fromkeys(paths):
        try:
            io.delete(p)  # type: ignore[attr-defined]
        except FileNotFoundError:
            continue
        except Exception:  # noqa: BLE001 - the store refused: named by the caller
            left.append(p)
    return left


def list_files(io: Any, location: str) -> list[str]:
    """Every file below `location` (a folder), named as `location` names it: through the
    table's FileIO (pyiceberg's PyArrowFileIO, the one that lists), so an object store's
    credentials and endpoint are those the catalog gave."""
    from pyarrow.fs import FileSelector, FileType

    fs_of = getattr(io, "fs_by_scheme", None)
    if fs_of is None:
        raise MorError(
            f"{location}: listing it needs pyiceberg's PyArrowFileIO (py-io-impl), not "
            f"{type(io).__name__}"
        )
    scheme, netloc, path = io.parse_location(location, io.properties)
    fs = fs_of(scheme, netloc)
    infos = fs.get_file_info(FileSelector(path, recursive=True, allow_not_found=True))
    root, prefix = path.rstrip("/"), location.rstrip("/")
    return sorted(prefix + i.path[len(root) :] for i in infos if i.type == FileType.File)


def data_file_of(
    table: Table, path: str, partition: Any, spec_id: int, schema: Schema | None = None
) -> DataFile:
    """The manifest record of a Parquet data file mor wrote in `schema` (default: the
    table's): its size, row count and the column metrics the table's
    `write.metadata.metrics.*` properties ask for, from its footer (so pruning by column
    bounds keeps working on it)."""
    inp = table.io.new_input(path)
    with inp.open() as stream:
        meta = pq.read_metadata(stream)
    schema = schema or table.schema()
    stats = data_file_statistics_from_parquet_metadata(
        meta,
        compute_statistics_plan(schema, table.metadata.properties),
        parquet_path_to_id_mapping(schema),
    )
    f = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        file_size_in_bytes=len(inp),
        **stats.to_serialized_dict(),
    )
    f.spec_id = spec_id
    return f
