"""Manifests and manifest lists of the snapshots mor commits (writer/producer.py).

v2 tables: new manifests are written with pyiceberg's manifest writer, made to write what the
spec says where pyiceberg 0.12 does not (`DeleteManifestWriter`: a manifest of delete files;
`equality_ids` a list of ints); a manifest holding a removed file is written again entry by
entry (the removed ones DELETED, the others EXISTING with their own sequence numbers), and the
manifest list with pyiceberg's writer.

v3 tables: new manifests in the v3 entry schema (`DvManifestWriter`, `V3DataManifestWriter`);
a manifest holding a removed file, and the manifest list, copied at the level of their Avro
records as planner's reader gives them (`read_records`: pyiceberg 0.12 reads a deletion
vector's `referenced_data_file`, `content_offset`, `content_size_in_bytes` and every
manifest's `first_row_id` away):

- a rewritten manifest keeps its own Avro schema, every value as it was except the entry's
  status, snapshot id and (materialized) sequence numbers, and for a data file its
  `first_row_id` (materialized from the manifest's);
- a removed deletion vector is one blob, (Puffin path, `content_offset`): the other vectors of
  its Puffin file stay;
- the manifest list keeps each carried-over manifest's record, `first_row_id` included; a data
  manifest without one is assigned the next row ids (row lineage: the snapshot's
  `first-row-id` is the table's `next-row-id`, its `added-rows` the ids assigned).

`written` (a list every function here appends to) collects each path written, so that the
producer deletes what no committed snapshot references.
"""

from __future__ import annotations

import copy
import io as _io
import uuid
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import fastavro
from pyiceberg.manifest import (
    MANIFEST_LIST_FILE_SCHEMAS,
    UNASSIGNED_SEQ,
    DataFile,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
    write_manifest_list,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import IntegerType, ListType, NestedField, StructType
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

from mor.planner.errors import MorError
from mor.planner.manifests import CheckedIO, live_records, read_records

if TYPE_CHECKING:
    from mor.writer.operations import Operation


class StaleChange(MorError):
    """Files a change removes are no longer live in the snapshot it is applied to (the
    producer reports it as a conflict)."""


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


def added_manifests(
    table: Table, change: Operation, snapshot_id: int, written: list[str], prefix: str = "mor"
) -> list[ManifestFile]:
    """New manifests, one per content and partition spec: the new delete files with no
    sequence number (they inherit the snapshot's), the new data files with `data_seq`;
    named `<prefix>-<uuid>-m0.avro`."""
    groups: dict[tuple[bool, int], list[DataFile]] = defaultdict(list)
    for f in change.added:
        groups[(True, f.spec_id)].append(f)
    for f in change.added_data:
        groups[(False, f.spec_id)].append(f)
    out = []
    for (deletes, spec_id), files in sorted(groups.items()):
        path = manifest_path(table, prefix)
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


def rewritten_manifests(
    table: Table, head: Snapshot | None, change: Operation, snapshot_id: int, written: list[str]
) -> list[ManifestFile]:
    """The head's manifests (none before the first snapshot), each one holding a removed
    file written again."""
    io = table.io
    checked = CheckedIO(io)  # pyiceberg's reader only sees what fastavro read whole
    out = []
    found: set[str] = set()
    for manifest in head.manifests(checked) if head is not None else ():
        deletes = manifest.content == ManifestContent.DELETES
        gone = change.removed if deletes else change.removed_data
        if not gone:
            out.append(manifest)
            continue
        entries = manifest.fetch_manifest_entry(checked, discard_deleted=True)
        hit = [e for e in entries if e.data_file.file_path in gone]
        if not hit:
            out.append(manifest)
            continue
        found.update(e.data_file.file_path for e in hit)
        path = manifest_path(table)
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
        raise StaleChange(
            f"{table.name()}: files this operation removes are no longer live: "
            f"{', '.join(sorted(missing)[:3])}; nothing was committed"
        )
    return out


def manifest_list(
    table: Table,
    head: Snapshot | None,
    manifests: Sequence[ManifestFile],
    snapshot_id: int,
    seq: int,
    written: list[str],
    prefix: str = "mor",
) -> str:
    path = list_path(table, snapshot_id, written, prefix)
    with write_manifest_list(
        format_version=2,
        output_file=table.io.new_output(path),
        snapshot_id=snapshot_id,
        parent_snapshot_id=None if head is None else head.snapshot_id,
        sequence_number=seq,
        avro_compression="deflate",
    ) as writer:
        writer.add_manifests(list(manifests))
    return path


def write_avro(io: Any, path: str, schema: Any, meta: dict[str, str], records: list) -> int:
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
    change: Operation,
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
    schema, meta, records = read_records(table.io, listed["manifest_path"])

    def key(f: dict[str, Any]) -> Any:
        if deletes and f.get("content_offset") is not None:
            return (f["file_path"], f["content_offset"])
        return f["file_path"]

    live = live_records(listed, records)
    hit = [r for r in live if key(r["data_file"]) in gone]
    if not hit:
        return None
    found.update(key(r["data_file"]) for r in hit)
    out, counts = [], {"existing": [0, 0], "deleted": [0, 0]}
    if not deletes and listed.get("first_row_id") is not None and not _has_first_row_id(schema):
        # a manifest written before the table's upgrade, in the v2 schema: its files inherit
        # ids counted over the live entries, which this rewrite changes (a removed file no
        # longer counts), so each file's id is written out, in the v3 schema's field
        schema, meta = _with_first_row_id(schema), {**meta, "format-version": "3"}
    min_seq = None
    for r in live:
        f = r["data_file"]
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
    path = manifest_path(table)
    written.append(path)
    size = write_avro(table.io, path, schema, meta, out)
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


V3_LIST_SCHEMA = AvroSchemaConversion().iceberg_to_avro(
    MANIFEST_LIST_FILE_SCHEMAS[3], schema_name="manifest_file"
)
LIST_NAMES = [f.name for f in MANIFEST_LIST_FILE_SCHEMAS[3].fields]


def v3_manifest_list(
    table: Table,
    head: Snapshot | None,
    change: Operation,
    ours: Sequence[ManifestFile],
    snapshot_id: int,
    seq: int,
    written: list[str],
    prefix: str = "mor",
) -> tuple[str, dict[str, int]]:
    """The v3 manifest list of the new snapshot over `head` (see the module's docstring),
    and the snapshot's row-lineage fields."""
    io = table.io
    heads = [] if head is None else read_records(io, head.manifest_list)[2]
    found: set[Any] = set()
    records = []
    for listed in heads:
        listed = {k: listed.get(k) for k in LIST_NAMES}
        again = _v3_rewrite(table, listed, change, snapshot_id, seq, written, found)
        records.append(again if again is not None else listed)
    # the new manifests first, then the head's (rewritten or carried over) in their order, as
    # Iceberg's SnapshotProducer lists them: the new rows get the first row ids of the range
    records = [_listed(m, seq) for m in ours] + records
    missing = (change.removed | change.removed_dvs | change.removed_data) - found
    if missing:
        names = sorted(p if isinstance(p, str) else f"{p[0]} (offset {p[1]})" for p in missing)
        raise StaleChange(
            f"{table.name()}: files this operation removes are no longer live: "
            f"{', '.join(names[:3])}; nothing was committed"
        )
    path = list_path(table, snapshot_id, written, prefix)
    meta = {
        "snapshot-id": str(snapshot_id),
        "parent-snapshot-id": "null" if head is None else str(head.snapshot_id),
        "sequence-number": str(seq),
    }
    return path, write_v3_list(table, path, meta, records)


def write_v3_list(
    table: Table, path: str, meta: dict[str, str], records: list[dict[str, Any]]
) -> dict[str, int]:
    """Write a v3 manifest list of `records` (manifest-list records, v3 names) at `path`,
    `meta` its snapshot's keys: a data manifest without a `first_row_id` is assigned the next
    row ids (row lineage: the snapshot's `first-row-id` is the table's `next-row-id`); the
    snapshot's row-lineage fields (`first_row_id`, `added_rows`: the ids assigned)."""
    start = table.metadata.next_row_id or 0
    next_row = start
    out = []
    for r in records:
        r = {k: r.get(k) for k in LIST_NAMES}
        if r["content"] == ManifestContent.DATA and r["first_row_id"] is None:
            r["first_row_id"] = next_row
            next_row += (r["existing_rows_count"] or 0) + (r["added_rows_count"] or 0)
        out.append(r)
    meta = {**meta, "first-row-id": str(start), "format-version": "3"}
    write_avro(table.io, path, V3_LIST_SCHEMA, meta, out)
    return {"first_row_id": start, "added_rows": next_row - start}


def list_path(table: Table, snapshot_id: int, written: list[str], prefix: str = "mor") -> str:
    """A new manifest list's path (appended to `written`)."""
    path = (
        f"{table.metadata.location.rstrip('/')}/metadata/"
        f"snap-{snapshot_id}-{len(written)}-{prefix}-{uuid.uuid4()}.avro"
    )
    written.append(path)
    return path


def manifest_path(table: Table, prefix: str = "mor") -> str:
    return f"{table.metadata.location.rstrip('/')}/metadata/{prefix}-{uuid.uuid4()}-m0.avro"
