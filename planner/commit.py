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

On a v3 table the same snapshot is made with v3 metadata, the manifests and the manifest list
copied at the level of their Avro records (pyiceberg 0.12 reads v3 manifests through its v2
schema and would drop a deletion vector's `referenced_data_file`, `content_offset` and
`content_size_in_bytes`, and every manifest's `first_row_id`):

- new delete manifests (deletion vectors) are written in the v3 entry schema;
- a manifest holding a removed file is written again record by record in its own Avro schema,
  every value as it was except the entry's status, snapshot id and (materialized) sequence
  numbers, and for a data file its `first_row_id` (materialized from the manifest's);
- a removed deletion vector is one blob, (Puffin path, `content_offset`): the other vectors
  of its Puffin file stay;
- the manifest list keeps each carried-over manifest's record, `first_row_id` included; a data
  manifest without one is assigned the next row ids (row lineage: the snapshot's
  `first-row-id` is the table's `next-row-id`, its `added-rows` the ids assigned).

Optimistic concurrency, as Iceberg's `SnapshotProducer`: when another commit landed first the
change is checked against every snapshot committed since (`conflicts`), and rebuilt over the
new head when nothing in them touches it (appends are rebased over), up to `retries` times.
A conflicting commit stops the operation with one line. Whatever an attempt wrote and no
committed snapshot references is deleted before returning or raising; only a commit whose
outcome the catalog could not tell (`CommitStateUnknownException`) leaves its files, and the
error names them.
"""

from __future__ import annotations

import copy
import gzip
import io as _io
import json
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import fastavro
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
    DATA_FILE_TYPE,
    MANIFEST_LIST_FILE_SCHEMAS,
    UNASSIGNED_SEQ,
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
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

from mor.planner.errors import MorError
from mor.planner.nodes import LINEAGE_COLUMNS

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


class _V3Entries:
    """A v3 manifest: the v3 entry schema, its records written whole (pyiceberg writes v3
    files from its v2 records, which have no `referenced_data_file`, `content_offset`,
    `content_size_in_bytes` or `first_row_id`). Entries are DataFiles bound to the v3 struct
    (`dv_file`, `data_file_of` on a v3 table)."""

    @property
    def version(self) -> Any:
        return 3

    def new_writer(self) -> Any:
        from pyiceberg.avro.file import AvroOutputFile

        schema = self._with_partition(3)  # type: ignore[attr-defined]
        return AvroOutputFile[ManifestEntry](
            output_file=self._output_file,  # type: ignore[attr-defined]
            file_schema=schema,
            record_schema=schema,
            schema_name="manifest_entry",
            metadata=self._meta,  # type: ignore[attr-defined]
        )


class DvManifestWriter(_V3Entries, DeleteManifestWriter):
    """A v3 manifest of deletion vectors."""


class V3DataManifestWriter(_V3Entries, DataManifestWriter):
    """A v3 manifest of data files (compaction's new files: `first_row_id` null, assigned
    from the manifest's in the manifest list; their rows carry the `_row_id` they had)."""


def dv_file(
    data_file: DataFile, puffin_path: str, puffin_size: int, offset: int, length: int, rows: int
) -> DataFile:
    """The manifest record of a deletion vector of `data_file` (its partition and spec), the
    blob at `offset` of the Puffin file `puffin_path`, holding `rows` positions."""
    f = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path=puffin_path,
        file_format=FileFormat.PUFFIN,
        partition=data_file.partition,
        record_count=rows,
        file_size_in_bytes=puffin_size,
        referenced_data_file=data_file.file_path,
        content_offset=offset,
        content_size_in_bytes=length,
    )
    f.spec_id = data_file.spec_id
    return f


_V3_FIELDS = [f.name for f in DATA_FILE_TYPE[3].fields]


def v3_field(f: DataFile, name: str) -> Any:
    """A v3 field of a DataFile (`referenced_data_file`, `content_offset`,
    `content_size_in_bytes`, `first_row_id`): pyiceberg 0.12 has no property for them, and a
    DataFile bound to the v2 struct has none (None)."""
    i = _V3_FIELDS.index(name)
    try:
        return f[i]
    except IndexError:
        return None


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
    data files they replace. `removed_dvs`: deletion vectors to remove (v3), each by its
    Puffin file and blob offset."""

    added: list[DataFile]
    removed: set[str]
    data: set[str]
    reach_seq: int = 0
    summary: dict[str, str] = field(default_factory=dict)  # extra summary properties
    added_data: list[DataFile] = field(default_factory=list)
    removed_data: set[str] = field(default_factory=set)
    data_seq: int | None = None
    removed_dvs: set[tuple[str, int]] = field(default_factory=set)  # (Puffin path, offset)

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
    version = table.metadata.format_version
    if version not in (2, 3):
        raise MorError(f"{identifier}: format version {version}; this commit writes v2 and v3")
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
            seq = table.metadata.last_sequence_number + 1
            lineage: dict[str, int] = {}
            if version == 3:
                listing, lineage = _v3_list(table, head, change, ours, snapshot_id, seq, written)
            else:
                manifests = _manifests(table, head, change, snapshot_id, written) + ours
                listing = _manifest_list(table, head, manifests, snapshot_id, seq, written)
            snapshot = Snapshot(
                snapshot_id=snapshot_id,
                parent_snapshot_id=head.snapshot_id,
                sequence_number=seq,
                timestamp_ms=max(int(time.time() * 1000), head.timestamp_ms + 1),
                manifest_list=listing,
                summary=_summary(head, change),
                schema_id=table.metadata.current_schema_id,
                **lineage,
            )
            if before_commit is not None:
                before_commit(attempt)
            try:
                with _v3_metadata(catalog, table, identifier):
                    catalog.commit_table(
                        table,
                        requirements=(
                            AssertTableUUID(uuid=table.metadata.table_uuid),
                            AssertRefSnapshotId(ref=branch, snapshot_id=head.snapshot_id),
                        ),
                        updates=(
                            AddSnapshotUpdate(snapshot=snapshot),
                            SetSnapshotRefUpdate(
                                ref_name=branch,
                                type=SnapshotRefType.BRANCH,
                                snapshot_id=snapshot_id,
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
    entries = _new_entries_v3 if table.metadata.format_version >= 3 else _new_entries
    for snap in news:
        for entry, f in entries(table, snap):
            what = _conflict(entry, f, change)
            if what:
                raise ConflictError(
                    f"{identifier}: snapshot {snap.snapshot_id} "
                    f"({snap.summary.operation.value if snap.summary else '?'}), committed "
                    f"meanwhile, {what}; nothing was committed"
                )


def _new_entries(table: Table, snap: Snapshot) -> Iterator[tuple[ManifestEntry, DataFile]]:
    """The entries `snap` wrote (added or deleted by it), from the manifests it added."""
    io = table.io
    for manifest in snap.manifests(io):
        if manifest.added_snapshot_id != snap.snapshot_id:
            continue  # carried over: nothing of this snapshot
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
            if entry.snapshot_id == snap.snapshot_id:
                yield entry, entry.data_file


def _new_entries_v3(table: Table, snap: Snapshot) -> Iterator[tuple[Any, Any]]:
    """`_new_entries` of a v3 table, its manifests read as Avro records (pyiceberg 0.12 reads
    no deletion vector's `referenced_data_file` or offset: every vector would conflict)."""
    from types import SimpleNamespace

    def bounds(raw: Any) -> dict[int, bytes]:
        return {kv["key"]: kv["value"] for kv in raw or []}

    _, _, listed = _read_avro(table.io, snap.manifest_list)
    for m in listed:
        if m["added_snapshot_id"] != snap.snapshot_id:
            continue
        _, _, records = _read_avro(table.io, m["manifest_path"])
        for r in records:
            if (r["snapshot_id"] or m["added_snapshot_id"]) != snap.snapshot_id:
                continue
            raw = r["data_file"]
            seq = r["sequence_number"]
            if seq is None and r["status"] == 1:
                seq = snap.sequence_number
            entry = SimpleNamespace(status=ManifestEntryStatus(r["status"]), sequence_number=seq)
            f = SimpleNamespace(
                content=DataFileContent(raw.get("content", 0)),
                file_path=raw["file_path"],
                lower_bounds=bounds(raw.get("lower_bounds")),
                upper_bounds=bounds(raw.get("upper_bounds")),
                referenced_data_file=raw.get("referenced_data_file"),
                content_offset=raw.get("content_offset"),
            )
            yield entry, f


def _conflict(entry: ManifestEntry, f: DataFile, change: Rewrite) -> str:
    if entry.status == ManifestEntryStatus.DELETED:
        if f.content == DataFileContent.DATA and f.file_path in change.data | change.removed_data:
            return f"removed data file {f.file_path}, which this operation rewrites"
        if f.content != DataFileContent.DATA and f.file_path in change.removed:
            return f"removed delete file {f.file_path}, which this operation removes"
        offset = getattr(f, "content_offset", None)
        if f.content == DataFileContent.POSITION_DELETES and (
            (f.file_path, offset) in change.removed_dvs
            or (offset is None and f.file_path in {p for p, _ in change.removed_dvs})
        ):
            return (
                f"removed a deletion vector of {f.file_path}, whose vectors this operation replaces"
            )
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
        if getattr(f, "referenced_data_file", None) and named in change.data:
            return (
                f"added a deletion vector ({f.file_path}) to {named}, a data file this "
                "operation rewrites"
            )
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
        if table.metadata.format_version == 3:
            kind: type = DvManifestWriter if deletes else V3DataManifestWriter
        else:
            kind = DeleteManifestWriter if deletes else DataManifestWriter
        writer = kind(
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


def _plain(schema: Any) -> Any:
    """An Avro schema without its logical types: records read through it hold the values as
    stored (days, microseconds, a decimal's bytes), which a writer given the original schema
    stores unchanged."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


def _read_avro(io: Any, path: str) -> tuple[Any, dict[str, str], list[dict[str, Any]]]:
    """An Avro file's writer schema, its metadata (but Avro's own keys) and its records, the
    values as stored."""
    with io.new_input(path).open() as stream:
        raw = stream.read()
    schema = fastavro.reader(_io.BytesIO(raw)).writer_schema
    reader = fastavro.reader(_io.BytesIO(raw), reader_schema=_plain(schema))
    meta = {k: v for k, v in reader.metadata.items() if not k.startswith("avro.")}
    return schema, meta, list(reader)


def _write_avro(io: Any, path: str, schema: Any, meta: dict[str, str], records: list) -> int:
    """Write `records` as an Avro file (deflate) through `io`; its size."""
    buf = _io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(copy.deepcopy(schema)), records, codec="deflate",
                    metadata=meta)  # fmt: skip
    data = buf.getvalue()
    with io.new_output(path).create(overwrite=False) as out:
        out.write(data)
    return len(data)


def _v3_rewrite(
    table: Table,
    listed: dict[str, Any],
    change: Rewrite,
    snapshot_id: int,
    seq: int,
    written: list[str],
    found: set[Any],
) -> dict[str, Any] | None:
    """The manifest-list record of `listed` (a manifest of the head) written again with the
    files `change` removes DELETED, or None when it holds none of them. Every other live
    entry becomes EXISTING with its inherited snapshot id, sequence numbers and (data files)
    first row id written out; DELETED entries are dropped, as Iceberg's writers drop them."""
    deletes = listed["content"] == ManifestContent.DELETES
    gone = (change.removed | change.removed_dvs) if deletes else change.removed_data
    if not gone:
        return None
    schema, meta, records = _read_avro(table.io, listed["manifest_path"])

    def key(f: dict[str, Any]) -> Any:
        if deletes and f.get("content_offset") is not None:
            return (f["file_path"], f["content_offset"])
        return f["file_path"]

    live = [r for r in records if r["status"] != 2]
    hit = [r for r in live if key(r["data_file"]) in gone]
    if not hit:
        return None
    found.update(key(r["data_file"]) for r in hit)
    out, counts = [], {"existing": [0, 0], "deleted": [0, 0]}
    next_row = None if deletes else listed.get("first_row_id")
    if next_row is not None and not _has_first_row_id(schema):
        # a manifest written before the table's upgrade, in the v2 schema: its files inherit
        # ids counted over the live entries, which this rewrite changes (a removed file no
        # longer counts), so each file's id is written out, in the v3 schema's field
        schema, meta = _with_first_row_id(schema), {**meta, "format-version": "3"}
    min_seq = None
    for r in live:
        r = dict(r)
        added = r["status"] == 1
        r["snapshot_id"] = (
            r["snapshot_id"] if r["snapshot_id"] is not None else listed["added_snapshot_id"]
        )
        for k in ("sequence_number", "file_sequence_number"):
            if r.get(k) is None and (added or listed["sequence_number"] == 0):
                r[k] = listed["sequence_number"]
        f = r["data_file"]
        if next_row is not None and f.get("first_row_id") is None:
            r["data_file"] = {**f, "first_row_id": next_row}
            next_row += f["record_count"]
        if key(f) in gone:
            r["status"], r["snapshot_id"] = 2, snapshot_id
            counts["deleted"][0] += 1
            counts["deleted"][1] += f["record_count"]
        else:
            r["status"] = 0
            counts["existing"][0] += 1
            counts["existing"][1] += f["record_count"]
            if r.get("sequence_number") is not None:
                min_seq = (
                    r["sequence_number"] if min_seq is None else min(min_seq, r["sequence_number"])
                )
        out.append(r)
    path = _manifest_path(table)
    written.append(path)
    size = _write_avro(table.io, path, schema, meta, out)
    return {
        **listed,
        "manifest_path": path,
        "manifest_length": size,
        "sequence_number": seq,
        "min_sequence_number": seq if min_seq is None else min_seq,
        "added_snapshot_id": snapshot_id,
        "added_files_count": 0,
        "existing_files_count": counts["existing"][0],
        "deleted_files_count": counts["deleted"][0],
        "added_rows_count": 0,
        "existing_rows_count": counts["existing"][1],
        "deleted_rows_count": counts["deleted"][1],
        "first_row_id": None,  # its data files carry theirs; assigned anew as Iceberg does
    }


def _data_file_record(schema: dict[str, Any]) -> dict[str, Any]:
    """The `data_file` record schema of a manifest entry's Avro schema."""
    (field,) = [f for f in schema["fields"] if f["name"] == "data_file"]
    return field["type"]


def _has_first_row_id(schema: dict[str, Any]) -> bool:
    return any(f["name"] == "first_row_id" for f in _data_file_record(schema)["fields"])


def _with_first_row_id(schema: dict[str, Any]) -> dict[str, Any]:
    """A manifest entry's Avro schema with the v3 `first_row_id` field (142) in its
    `data_file` record, optional, as the spec declares it."""
    out = copy.deepcopy(schema)
    _data_file_record(out)["fields"].append(
        {
            "name": "first_row_id",
            "type": ["null", "long"],
            "default": None,
            "doc": "The _row_id for the first row in the data file",
            "field-id": 142,
        }
    )
    return out


def _listed(m: ManifestFile, seq: int) -> dict[str, Any]:
    """The manifest-list record (v3 names) of a manifest this operation wrote."""
    unassigned = m.min_sequence_number in (None, UNASSIGNED_SEQ)
    return {
        "manifest_path": m.manifest_path,
        "manifest_length": m.manifest_length,
        "partition_spec_id": m.partition_spec_id,
        "content": int(m.content),
        "sequence_number": seq,
        "min_sequence_number": seq if unassigned else m.min_sequence_number,
        "added_snapshot_id": m.added_snapshot_id,
        "added_files_count": m.added_files_count,
        "existing_files_count": m.existing_files_count,
        "deleted_files_count": m.deleted_files_count,
        "added_rows_count": m.added_rows_count,
        "existing_rows_count": m.existing_rows_count,
        "deleted_rows_count": m.deleted_rows_count,
        "partitions": [
            {
                "contains_null": p.contains_null,
                "contains_nan": p.contains_nan,
                "lower_bound": p.lower_bound,
                "upper_bound": p.upper_bound,
            }
            for p in (m.partitions or [])
        ],
        "key_metadata": None,
        "first_row_id": None,
    }


_V3_LIST_SCHEMA = AvroSchemaConversion().iceberg_to_avro(
    MANIFEST_LIST_FILE_SCHEMAS[3], schema_name="manifest_file"
)
_LIST_NAMES = [f.name for f in MANIFEST_LIST_FILE_SCHEMAS[3].fields]


def _v3_list(
    table: Table,
    head: Snapshot,
    change: Rewrite,
    ours: Sequence[ManifestFile],
    snapshot_id: int,
    seq: int,
    written: list[str],
) -> tuple[str, dict[str, int]]:
    """The v3 manifest list of the new snapshot over `head` (see the module's docstring),
    and the snapshot's row-lineage fields."""
    io = table.io
    _, _, heads = _read_avro(io, head.manifest_list)
    found: set[Any] = set()
    records = []
    for listed in heads:
        listed = {k: listed.get(k) for k in _LIST_NAMES}
        again = _v3_rewrite(table, listed, change, snapshot_id, seq, written, found)
        records.append(again if again is not None else listed)
    records += [_listed(m, seq) for m in ours]
    missing = (change.removed | change.removed_dvs | change.removed_data) - found
    if missing:
        names = sorted(p if isinstance(p, str) else f"{p[0]} (offset {p[1]})" for p in missing)
        raise ConflictError(
            f"{table.name()}: files this operation removes are no longer live: "
            f"{', '.join(names[:3])}; nothing was committed"
        )
    start = table.metadata.next_row_id or 0
    next_row = start
    for r in records:
        if r["content"] == ManifestContent.DATA and r.get("first_row_id") is None:
            r["first_row_id"] = next_row
            next_row += (r["existing_rows_count"] or 0) + (r["added_rows_count"] or 0)
    path = (
        f"{table.metadata.location.rstrip('/')}/metadata/"
        f"snap-{snapshot_id}-{len(written)}-{uuid.uuid4()}.avro"
    )
    written.append(path)
    meta = {
        "snapshot-id": str(snapshot_id),
        "parent-snapshot-id": str(head.snapshot_id),
        "sequence-number": str(seq),
        "first-row-id": str(start),
        "format-version": "3",
    }
    _write_avro(io, path, _V3_LIST_SCHEMA, meta, records)
    return path, {"first_row_id": start, "added_rows": next_row - start}


def _manifest_path(table: Table) -> str:
    return f"{table.metadata.location.rstrip('/')}/metadata/mor-{uuid.uuid4()}-m0.avro"


def _summary(head: Snapshot, change: Rewrite) -> Summary:
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
    added_size = sum(_size(f) for f in (*change.added, *change.added_data))
    props["added-files-size"] = str(added_size)
    removed = len(change.removed) + len(change.removed_dvs)
    if removed:
        props["removed-delete-files"] = str(removed)
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
    total("total-delete-files", len(change.added), removed)
    total(
        "total-position-deletes",
        sum(f.record_count for f in added_pos),
        of("removed-position-deletes"),
    )
    total("total-equality-deletes", 0, of("removed-equality-deletes"))
    total("total-files-size", added_size, of("removed-files-size"))
    return Summary(Operation.REPLACE, **props)


def _size(f: DataFile) -> int:
    """A file's bytes in a summary: a deletion vector's blob, else the whole file (as
    Iceberg's `SnapshotSummary` counts them)."""
    blob = v3_field(f, "content_size_in_bytes") if f.file_format == FileFormat.PUFFIN else None
    return int(blob) if blob is not None else int(f.file_size_in_bytes)


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
    bounds keeps working on it). On a v3 table the record is bound to the v3 struct, its
    `first_row_id` null (inherited from its manifest's), and the row lineage columns the file
    carries get no metrics: a null `_row_id` stands for one inherited, which bounds of the
    stored values would not cover."""
    inp = table.io.new_input(path)
    with inp.open() as stream:
        meta = pq.read_metadata(stream)
    schema = schema or table.schema()
    props = table.metadata.properties
    version = table.metadata.format_version
    if version >= 3:
        lineage = [
            NestedField(i, name, LongType(), required=False) for name, i in LINEAGE_COLUMNS.items()
        ]
        props = {**props, **{f"write.metadata.metrics.column.{f.name}": "none" for f in lineage}}
        schema = Schema(*schema.fields, *lineage, schema_id=schema.schema_id)
    stats = data_file_statistics_from_parquet_metadata(
        meta,
        compute_statistics_plan(schema, props),
        parquet_path_to_id_mapping(schema),
    )
    f = DataFile.from_args(
        _table_format_version=version,
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        file_size_in_bytes=len(inp),
        **stats.to_serialized_dict(),
    )
    f.spec_id = spec_id
    return f
