"""Iceberg's `rewrite_manifests` (its `RewriteManifestsSparkAction` and `BaseRewriteManifests`):
the current snapshot's manifests of one partition spec (by default the table's current one)
written again, their live entries regrouped by partition, so that a scan's partition filter
prunes whole manifests and planning opens fewer of them.

What it rewrites, as Iceberg's action chooses it, for data manifests and delete manifests apart:
the manifests of that spec, unless there is only one and it is within one target size
(`commit.manifest.target-size-bytes`, default 8 MiB): `ceil(total bytes / target)` manifests
are written. Their entries are every live entry (ADDED or EXISTING) of the manifests
replaced, each EXISTING with what it had or inherited written out: its snapshot id, its data
and file sequence numbers and, v3, a data file's `first_row_id` (its rows keep their row ids).
A partitioned spec's entries are split into the target number of groups by ranges of their
partition (each partition in one group, the groups of about equal entry counts, as Spark's
`repartitionByRange` splits them); an unpartitioned spec's round-robin. A manifest rolls over
at 1.2 times the target, as Iceberg's rolling writer.

Bounded memory at any size: a first pass over the manifests counts the entries of each
partition (the groups are decided from those counts), a second streams every entry into its
group's open manifest; the manifests are read eight at a time, their bytes kept between the
two passes up to `KEEP_BYTES` (read twice beyond it). An entry is copied as its bytes when
its manifest's schema is the one the new manifests are written in (`_Layout`: the first
manifest's, when it suits the table), only what it inherited written in front of its
`data_file` (and a v3 `first_row_id` into it); any other entry is encoded.

The commit is a `replace` snapshot (no row changes: the totals carried over; the summary's
`manifests-created`, `manifests-kept`, `manifests-replaced`, `entries-processed`) whose
manifest list holds the new manifests first, then every other manifest of the head as it
was. On a v3 table a new data manifest gets the next row ids in the list (Iceberg's manifest
list writer reserves them for files without one; here every file has its own). A commit
landing meanwhile: the new manifests go over the new head if every manifest they replace is
still in it (checked again, as Iceberg's `validateDeletedManifests`), else nothing is
committed and what was written is deleted. The replaced manifests are not deleted: the
snapshots before reach them (expire_snapshots deletes them with those).
"""

from __future__ import annotations

import copy
import decimal
import io as _io
import json
import math
import os
import struct
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import fastavro
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import MANIFEST_LIST_FILE_SCHEMAS, ManifestContent, PartitionFieldStats
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation as Op
from pyiceberg.table.snapshots import Snapshot, Summary
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    UUIDType,
)
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

from mor.planner.manifests import live_records, read_records, stored_value
from mor.writer.catalog_changes import load
from mor.writer.conflicts import ConflictError
from mor.writer.files import delete_files
from mor.writer.manifests import (
    DataManifestWriter,
    DeleteManifestWriter,
    DvManifestWriter,
    V3DataManifestWriter,
    list_path,
    manifest_path,
    write_avro,
    write_v3_list,
)
from mor.writer.procedures import ProcedureError
from mor.writer.producer import Committed, SnapshotProducer, new_snapshot_id

TARGET_BYTES = 8 << 20  # commit.manifest.target-size-bytes, Iceberg's default
KEEP_BYTES = 256 << 20  # manifests' bytes kept between the two passes
READERS = 8  # manifests read at once
TOTALS = (
    "total-data-files",
    "total-delete-files",
    "total-records",
    "total-files-size",
    "total-position-deletes",
    "total-equality-deletes",
)


@dataclass(frozen=True)
class Chosen:
    """The manifests of one content (`ManifestContent`) to rewrite into `count` manifests."""

    content: int
    listed: tuple[dict[str, Any], ...]  # their manifest-list records
    count: int

    @property
    def kind(self) -> str:
        return "delete" if self.content == ManifestContent.DELETES else "data"


@dataclass
class ManifestRewrite:
    """What rewrite_manifests did (or would do): the manifests it replaced and added (their
    paths), the entries written, the snapshot it committed (None: nothing to do, or a dry
    run)."""

    table: str
    spec_id: int
    chosen: list[Chosen]
    added: list[str] = field(default_factory=list)
    entries: int = 0
    snapshot_id: int | None = None
    new_id: int = 0  # the id of the snapshot it commits, one for every attempt

    @property
    def replaced_records(self) -> list[dict[str, Any]]:
        return [r for c in self.chosen for r in c.listed]

    @property
    def replaced(self) -> list[str]:
        return [r["manifest_path"] for r in self.replaced_records]

    def row(self) -> tuple[int, int]:
        """Iceberg's output row: rewritten_manifests_count, added_manifests_count."""
        return (len(self.replaced), len(self.added))

    def line(self, done: bool) -> str:
        if not self.chosen:
            return (
                f"table {self.table}: nothing to rewrite (the manifests of partition spec "
                f"{self.spec_id} are one within the target size, or none)"
            )
        what = ", ".join(f"{len(c.listed)} {c.kind} manifest(s)" for c in self.chosen)
        if not done:
            into = sum(c.count for c in self.chosen)
            return f"table {self.table}: would rewrite {what} into about {into}, by partition"
        return (
            f"table {self.table}: rewrote {what} into {len(self.added)}, {self.entries} "
            f"entries grouped by partition (snapshot {self.snapshot_id})"
        )

    def as_dict(self, done: bool) -> dict[str, Any]:
        return {
            "table": self.table,
            "procedure": "rewrite_manifests",
            "spec_id": self.spec_id,
            "replaced": self.replaced,
            "added": self.added,
            "entries": self.entries,
            "snapshot_id": self.snapshot_id,
            "committed": done and self.snapshot_id is not None,
        }


def target_bytes(md: TableMetadata) -> int:
    """The size of the manifests rewrite_manifests writes (the table's
    `commit.manifest.target-size-bytes`)."""
    return int(md.properties.get("commit.manifest.target-size-bytes", TARGET_BYTES))


def choose(md: TableMetadata, listed: Sequence[dict[str, Any]], spec_id: int) -> list[Chosen]:
    """The manifests among the head's (`listed`: manifest-list records) that Iceberg's action
    rewrites, and how many it writes of each content."""
    target = target_bytes(md)
    out = []
    for content in (ManifestContent.DATA, ManifestContent.DELETES):
        ms = tuple(
            r for r in listed if r["content"] == content and r["partition_spec_id"] == spec_id
        )
        if not ms:
            continue
        count = max(1, math.ceil(sum(r["manifest_length"] for r in ms) / target))
        if count == 1 and len(ms) == 1:
            continue
        out.append(Chosen(int(content), ms, count))
    return out


def rewrite_manifests(
    catalog: Catalog,
    identifier: str,
    spec_id: int | None = None,
    dry_run: bool = False,
    check: Callable[[], Any] | None = None,
) -> ManifestRewrite:
    """Run rewrite_manifests on the table's current snapshot (see the module's docstring).
    `check` is called after each manifest read and right before the commit (it raises to
    stop: nothing is committed, what was written is deleted)."""
    table = load(catalog, identifier)
    md = table.metadata
    spec = md.spec() if spec_id is None else md.specs().get(spec_id)
    if spec is None:
        raise ProcedureError(
            f"CALL rewrite_manifests on {identifier}: invalid spec id {spec_id} (the table's "
            f"are {sorted(md.specs())}); nothing was committed"
        )
    head = md.current_snapshot()
    listed = [] if head is None else read_records(table.io, head.manifest_list)[2]
    done = ManifestRewrite(identifier, spec.spec_id, choose(md, listed, spec.spec_id))
    for r in done.replaced_records:  # Iceberg's action checks them
        if None in (r["added_files_count"], r["existing_files_count"]):
            raise ProcedureError(
                f"CALL rewrite_manifests on {identifier}: no file counts in manifest "
                f"{r['manifest_path']}; nothing was committed"
            )
    if dry_run or not done.chosen:
        return done
    producer = SnapshotProducer(catalog, identifier)
    done.new_id = new_snapshot_id(table)
    written: list[str] = []
    try:
        news = _write_groups(table, spec, done, written, check)
    except BaseException:
        delete_files(table.io, written)  # nothing references them
        raise
    done.added = [r["manifest_path"] for r in news]

    def build(table: Table, now: Snapshot | None, written: list[str]) -> Snapshot:
        """The snapshot of one attempt: its manifest list (the manifests are written once,
        for every attempt)."""
        snapshot = _snapshot(table, now, head, done, news, written)
        if check is not None:
            check()
        return snapshot

    committed: Committed = producer.commit_built(build, written)
    done.snapshot_id = committed.snapshot.snapshot_id
    return done


def _read(io: Any, path: str) -> bytes:
    with io.new_input(path).open() as stream:
        return stream.read()


# --- the new manifests ------------------------------------------------------------------------


def _write_groups(
    table: Table,
    spec: Any,
    done: ManifestRewrite,
    written: list[str],
    check: Callable[[], Any] | None,
) -> list[dict[str, Any]]:
    """The new manifests of every chosen content, written; their manifest-list records
    (sequence number and snapshot id left to the snapshot)."""
    schema = table.metadata.schema()
    types = [f.field_type for f in spec.partition_type(schema).fields]
    out = []
    for chosen in done.chosen:
        kept: dict[str, bytes] = {}  # the first pass's bytes, up to KEEP_BYTES, for the second
        room = KEEP_BYTES

        def raw_of(r: dict[str, Any], keep: bool) -> bytes:
            nonlocal room
            path = r["manifest_path"]
            raw = kept.pop(path, None)
            if raw is None:
                raw = _read(table.io, path)
                if keep and len(raw) <= room:
                    kept[path] = raw
                    room -= len(raw)
            return raw

        def sources(keep: bool) -> Iterator[_Source]:
            """Each chosen manifest read, in order: fetched READERS at a time (requests to
            a store overlap), decoded here (fastavro holds the GIL: threads would only
            take turns)."""
            with ThreadPoolExecutor(READERS) as pool:
                pending = [(r, pool.submit(raw_of, r, keep)) for r in chosen.listed[:READERS]]
                for r in chosen.listed[READERS:]:
                    pending.append((r, pool.submit(raw_of, r, keep)))
                    first, fetched = pending.pop(0)
                    yield _Source.read(fetched.result(), first)
                    if check is not None:
                        check()
                for first, fetched in pending:
                    yield _Source.read(fetched.result(), first)
                    if check is not None:
                        check()

        fields = _partition_fields(spec)
        ranged = bool(spec.fields) and chosen.count > 1
        group_of: Callable[[bytes, int], int]
        if not ranged:
            group_of = lambda key, i: i % chosen.count  # noqa: E731 - round-robin
        else:
            counts: Counter[bytes] = Counter()
            for src in sources(keep=True):
                part = _partition_names(src.schema)
                for r in src.live:
                    counts[_key(r["data_file"]["partition"], part, fields, types)] += 1
            groups = _ranges(counts, chosen.count)
            group_of = lambda key, i: groups[key]  # noqa: E731
        writers: list[_Rolling] = []
        try:
            i = 0
            for src in sources(keep=False):
                if not writers:
                    layout = _Layout.of(table, spec, chosen.content, src, fields)
                    writers = [
                        _Rolling(table, spec, chosen.content, layout, types, written)
                        for _ in range(chosen.count)
                    ]
                part = _partition_names(src.schema)
                same = src.shape == layout.shape
                for r, raw, assigned in zip(src.live, src.raws, src.assigned, strict=True):
                    key = _key(r["data_file"]["partition"], part, fields, types) if ranged else b""
                    writers[group_of(key, i)].add(r, part, raw if same else None, assigned)
                    i += 1
            done.entries += i
        finally:
            for w in writers:
                out += w.close()
        expected = sum(
            (r["added_files_count"] or 0) + (r["existing_files_count"] or 0) for r in chosen.listed
        )
        got = sum(r["existing_files_count"] for r in out if r["content"] == chosen.content)
        if got != expected:  # Iceberg's validateFilesCounts
            raise ProcedureError(
                f"CALL rewrite_manifests on {done.table}: replaced and created manifests must "
                f"have the same number of active files: {got} (new), {expected} (old); "
                "nothing was committed"
            )
    return out


def _partition_fields(spec: Any) -> list[int]:
    """The spec's partition field ids, in order."""
    return [f.field_id for f in spec.fields]


def _partition_names(writer_schema: dict[str, Any]) -> dict[int, str]:
    """A manifest's partition record field names by field id (Avro's names may be
    sanitized, and differ between writers)."""
    (data_file,) = [f for f in writer_schema["fields"] if f["name"] == "data_file"]
    (part,) = [f for f in data_file["type"]["fields"] if f["name"] == "partition"]
    return {f["field-id"]: f["name"] for f in part["type"].get("fields", [])}


def _ranges(counts: Counter[bytes], n: int) -> dict[bytes, int]:
    """Each partition key's group: the keys in order, cut into `n` ranges of about equal
    entry counts (a key never split)."""
    total = sum(counts.values())
    out, seen, group = {}, 0, 0
    for key in sorted(counts):
        out[key] = group
        seen += counts[key]
        while group < n - 1 and seen >= total * (group + 1) / n:
            group += 1
    return out


def _key(
    partition: dict[str, Any], names: dict[int, str], fields: list[int], types: list[Any]
) -> bytes:
    """An order-preserving byte string of a partition's values: nulls first, numbers (dates
    and times as days and microseconds) by value, strings and bytes lexicographically."""
    out = bytearray()
    for fid, t in zip(fields, types, strict=True):
        v = _value(t, partition.get(names.get(fid, "")))
        if v is None:
            out += b"\x00"
            continue
        out += b"\x01"
        if isinstance(t, BooleanType):
            out += b"\x01" if v else b"\x00"
        elif isinstance(t, (FloatType, DoubleType)):
            bits = struct.unpack(">Q", struct.pack(">d", v))[0]
            bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | (1 << 63)
            out += bits.to_bytes(8, "big")
        elif isinstance(t, DecimalType):
            out += (int(v.scaleb(t.scale)) + (1 << 127)).to_bytes(17, "big")
        elif isinstance(v, int):
            out += (v + (1 << 63)).to_bytes(8, "big")
        else:
            raw = v.bytes if isinstance(v, uuid.UUID) else v.encode() if isinstance(v, str) else v
            out += raw.replace(b"\x00", b"\x00\xff") + b"\x00\x00"
    return bytes(out)


def _value(t: Any, v: Any) -> Any:
    """A partition value as read (fastavro's: a date, a Decimal, a UUID, or the stored bytes
    of a decimal or uuid without its logical type) as pyiceberg's partition values are: days
    and microseconds (`stored_value`), a Decimal, a UUID, bytes."""
    v = stored_value(v)
    if v is None:
        return None
    if isinstance(t, DecimalType) and not isinstance(v, decimal.Decimal):
        return decimal.Decimal(int.from_bytes(v, "big", signed=True)).scaleb(-t.scale)
    if isinstance(t, UUIDType) and not isinstance(v, uuid.UUID):
        return uuid.UUID(bytes=bytes(v)) if isinstance(v, (bytes, bytearray)) else uuid.UUID(v)
    if isinstance(t, (BinaryType, FixedType)):
        return bytes(v)
    return v


BLOCK_BYTES = 64 << 10  # entries' bytes per Avro block before it is compressed


def _zz(n: int) -> bytes:
    """Avro's zig-zag varint of a long."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _opt_long(v: int | None) -> bytes:
    """A `["null", "long"]` union's encoding."""
    return b"\x00" if v is None else b"\x02" + _zz(v)


def _skip_varint(b: bytes, i: int) -> int:
    while b[i] & 0x80:
        i += 1
    return i + 1


def _prefix_end(b: bytes) -> int | None:
    """Where `data_file` starts in an entry's bytes (its status, then snapshot id, sequence
    number and file sequence number, each `["null", "long"]`); None when they are not so."""
    i = _skip_varint(b, 0)
    for _ in range(3):
        branch = b[i]
        i += 1
        if branch == 2:
            i = _skip_varint(b, i)
        elif branch != 0:
            return None
    return i


_ENTRY_PREFIX = (
    ("status", "int"),
    ("snapshot_id", ["null", "long"]),
    ("sequence_number", ["null", "long"]),
    ("file_sequence_number", ["null", "long"]),
)
_PARSED: dict[str, Any] = {}  # fastavro's parsed schema by its text (a few per table)
_SHAPES: dict[str, Any] = {}
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def _shape(t: Any) -> Any:
    """What an Avro type's binary encoding depends on: the kinds and order of its values (no
    names, docs, defaults, field ids or logical types). Two schemas of the same shape encode
    every value into the same bytes."""
    if isinstance(t, list):
        return tuple(_shape(x) for x in t)
    if isinstance(t, str):
        return t if t in _PRIMITIVES else ("named", t)
    kind = t["type"]
    if kind == "record":
        return ("record", tuple(_shape(f["type"]) for f in t["fields"]))
    if kind == "array":
        return ("array", _shape(t["items"]))
    if kind == "map":
        return ("map", _shape(t["values"]))
    if kind == "fixed":
        return ("fixed", t["size"])
    if kind == "enum":
        return ("enum", tuple(t["symbols"]))
    return _shape(kind)


def _shape_of(text: str, schema: Any) -> Any:
    if text not in _SHAPES:
        if len(_SHAPES) >= 64:
            _SHAPES.clear()
        _SHAPES[text] = _shape(schema)
    return _SHAPES[text]


def _parsed(text: str, schema: Any) -> Any:
    if text not in _PARSED:
        if len(_PARSED) >= 64:
            _PARSED.clear()
        _PARSED[text] = fastavro.parse_schema(copy.deepcopy(schema))
    return _PARSED[text]


@dataclass
class _Source:
    """A manifest read: its Avro schema (as written in its header, and parsed as JSON), its
    metadata, its live entries (live_records: what they inherit written out), each one's
    bytes as stored, and whether its `first_row_id` was assigned (inherited, written out)."""

    text: str
    schema: dict[str, Any]
    meta: dict[str, str]
    live: list[dict[str, Any]]
    raws: list[bytes]
    assigned: list[bool]

    @property
    def shape(self) -> Any:
        return _shape_of(self.text, self.schema)

    @staticmethod
    def read(raw: bytes, listed: dict[str, Any]) -> _Source:
        reader = fastavro.block_reader(_io.BytesIO(raw))
        text = reader.metadata["avro.schema"]
        parsed = _parsed(text, reader.writer_schema)
        records, raws = [], []
        for block in reader:
            b = block.bytes_.getvalue()
            stream = _io.BytesIO(b)
            for _ in range(block.num_records):
                at = stream.tell()
                records.append(fastavro.schemaless_reader(stream, parsed, None))
                raws.append(b[at : stream.tell()])
        live = live_records(listed, records)
        stored = [(rec, raw) for rec, raw in zip(records, raws, strict=True) if rec["status"] != 2]
        return _Source(
            text,
            reader.writer_schema,
            {k: v for k, v in reader.metadata.items() if not k.startswith("avro.")},
            live,
            [raw for _, raw in stored],
            [
                r["data_file"] is not rec["data_file"]
                for r, (rec, _) in zip(live, stored, strict=True)
            ],
        )


@dataclass(frozen=True)
class _Layout:
    """How one content's new manifests are written: their Avro schema (its text for their
    header; the `data_file` record parsed, to encode an entry) and metadata. The first
    manifest read gives its own when it suits the table (the entry's fields as the spec
    orders them, the table's format version, on v3 data a `first_row_id`): entries read in
    a schema of the same shape (`_shape`: the same bytes for the same values, whatever the
    names, docs and writer) are copied as their bytes, their inherited values written in front
    (and a `first_row_id` assigned written into the trailing nulls after it, `tail` of
    them); other entries, or every entry when no manifest suits, are encoded, in the table's
    format version's entry schema made by pyiceberg's writer."""

    text: str
    shape: Any  # _shape of its schema: an entry read in a schema of this shape is copied
    meta: dict[str, str]
    file_schema: Any
    file_names: tuple[str, ...]
    part_names: dict[int, str]
    tail: tuple[str, ...] | None  # the nullable fields after first_row_id; None: not patchable

    @staticmethod
    def of(table: Table, spec: Any, content: int, src: _Source, fields: list[int]) -> _Layout:
        version = table.metadata.format_version
        if _suits(src, version, content, fields):
            text, schema, meta = src.text, src.schema, src.meta
        else:
            deletes = content == ManifestContent.DELETES
            if version == 3:
                kind: type = DvManifestWriter if deletes else V3DataManifestWriter
            else:
                kind = DeleteManifestWriter if deletes else DataManifestWriter
            model = kind(spec, table.metadata.schema(), None, 0, "deflate")
            schema = AvroSchemaConversion().iceberg_to_avro(
                model._with_partition(version), schema_name="manifest_entry"
            )
            text = json.dumps(schema)
            meta = {k: v for k, v in model._meta.items() if not k.startswith("avro.")}
        (data_file,) = [f for f in schema["fields"] if f["name"] == "data_file"]
        record = data_file["type"]
        names = [f["name"] for f in record["fields"]]
        tail: tuple[str, ...] | None = None
        if "first_row_id" in names:
            after = record["fields"][names.index("first_row_id") + 1 :]
            if all(isinstance(f["type"], list) and f["type"][0] == "null" for f in after):
                tail = tuple(f["name"] for f in after)
        return _Layout(
            text,
            _shape_of(text, schema),
            meta,
            fastavro.parse_schema(copy.deepcopy(record)),
            tuple(names),
            _partition_names(schema),
            tail,
        )


def _suits(src: _Source, version: int, content: int, fields: list[int]) -> bool:
    """Whether a manifest's own schema can be the new manifests' (see _Layout)."""
    s = src.schema
    got = [(f["name"], f["type"]) for f in s.get("fields", [])[:4]]
    if got != list(_ENTRY_PREFIX) or [f["name"] for f in s["fields"][4:]] != ["data_file"]:
        return False
    if src.meta.get("format-version") != str(version):
        return False
    if sorted(_partition_names(s)) != sorted(fields):
        return False
    names = [f["name"] for f in s["fields"][4]["type"]["fields"]]
    return not (version == 3 and content == ManifestContent.DATA and "first_row_id" not in names)


class _Rolling:
    """The manifests of one group: entries written EXISTING in the layout, in Avro blocks of
    about BLOCK_BYTES (deflate), a new manifest begun once one reaches 1.2 times the
    target."""

    def __init__(
        self,
        table: Table,
        spec: Any,
        content: int,
        layout: _Layout,
        types: list[Any],
        written: list[str],
    ) -> None:
        self.max_bytes = int(1.2 * target_bytes(table.metadata))
        self.table, self.spec, self.content, self.layout = table, spec, content, layout
        self.fields = _partition_fields(spec)
        self.types, self.written = types, written
        self.out: list[dict[str, Any]] = []
        self._open: Any = None

    def _begin(self) -> None:
        path = manifest_path(self.table, "mor-manifests")
        self.written.append(path)
        stream = self.table.io.new_output(path).create(overwrite=False)
        sync = os.urandom(16)
        items = {
            "avro.schema": self.layout.text.encode(),
            "avro.codec": b"deflate",
            **{k: v.encode() for k, v in self.layout.meta.items()},
        }
        header = bytearray(b"Obj\x01")
        header += _zz(len(items))
        for k, v in items.items():
            header += _zz(len(k)) + k.encode() + _zz(len(v)) + v
        header += b"\x00" + sync
        stream.write(bytes(header))
        self._open = {
            "path": path,
            "stream": stream,
            "sync": sync,
            "bytes": len(header),
            "block": [],
            "block_bytes": 0,
            "files": 0,
            "rows": 0,
            "min_seq": None,
            "stats": [PartitionFieldStats(t) for t in self.types],
        }

    def add(
        self, r: dict[str, Any], part: dict[int, str], raw: bytes | None, assigned: bool
    ) -> None:
        """Entry `r` (read in a manifest whose partition names are `part`; `raw`: its bytes
        when that manifest's schema is the layout's)."""
        if self._open is None:
            self._begin()
        o, lay = self._open, self.layout
        f = r["data_file"]
        values = [f["partition"].get(part.get(fid, "")) for fid in self.fields]
        body = None
        if raw is not None:
            end = _prefix_end(raw)
            body = None if end is None else raw[end:]
            if body is not None and assigned:
                n = None if lay.tail is None else len(lay.tail)
                if n is not None and all(f.get(k) is None for k in lay.tail or ()):
                    zeros = b"\x00" * (n + 1)
                    body = (
                        body[: -(n + 1)] + b"\x02" + _zz(f["first_row_id"]) + zeros[1:]
                        if body.endswith(zeros)
                        else None
                    )
                else:
                    body = None
        if body is None:
            data_file = {name: f.get(name) for name in lay.file_names}
            data_file["partition"] = {
                lay.part_names[fid]: v for fid, v in zip(self.fields, values, strict=True)
            }
            buf = _io.BytesIO()
            fastavro.schemaless_writer(buf, lay.file_schema, data_file)
            body = buf.getvalue()
        entry = (
            b"\x00"  # EXISTING
            + _opt_long(r["snapshot_id"])
            + _opt_long(r["sequence_number"])
            + _opt_long(r["file_sequence_number"])
            + body
        )
        o["block"].append(entry)
        o["block_bytes"] += len(entry)
        o["files"] += 1
        o["rows"] += f["record_count"]
        seq = r["sequence_number"]
        if seq is not None:
            o["min_seq"] = seq if o["min_seq"] is None else min(o["min_seq"], seq)
        for s, v, t in zip(o["stats"], values, self.types, strict=True):
            s.update(_value(t, v))
        if o["block_bytes"] >= BLOCK_BYTES:
            self._flush()
            if o["bytes"] >= self.max_bytes:
                self._finish()

    def _flush(self) -> None:
        o = self._open
        if not o["block"]:
            return
        z = zlib.compressobj(1, zlib.DEFLATED, -15)  # the fastest level: 10-20% larger
        data = z.compress(b"".join(o["block"])) + z.flush()
        block = _zz(len(o["block"])) + _zz(len(data)) + data + o["sync"]
        o["stream"].write(block)
        o["bytes"] += len(block)
        o["block"], o["block_bytes"] = [], 0

    def _finish(self) -> None:
        self._flush()
        o, self._open = self._open, None
        o["stream"].close()
        self.out.append(
            {
                "manifest_path": o["path"],
                "manifest_length": o["bytes"],
                "partition_spec_id": self.spec.spec_id,
                "content": self.content,
                "sequence_number": None,
                "min_sequence_number": o["min_seq"],
                "added_snapshot_id": None,
                "added_files_count": 0,
                "existing_files_count": o["files"],
                "deleted_files_count": 0,
                "added_rows_count": 0,
                "existing_rows_count": o["rows"],
                "deleted_rows_count": 0,
                "partitions": [_summary(s.to_summary()) for s in o["stats"]],
                "key_metadata": None,
                "first_row_id": None,
            }
        )

    def close(self) -> list[dict[str, Any]]:
        if self._open is not None:
            self._finish()
        return self.out


def _summary(s: Any) -> dict[str, Any]:
    """A pyiceberg `PartitionFieldSummary` as a manifest-list record's."""
    return {
        "contains_null": s.contains_null,
        "contains_nan": s.contains_nan,
        "lower_bound": s.lower_bound,
        "upper_bound": s.upper_bound,
    }


# --- the snapshot ------------------------------------------------------------------------------


def _snapshot(
    table: Table,
    now: Snapshot | None,
    read: Snapshot | None,
    done: ManifestRewrite,
    news: list[dict[str, Any]],
    written: list[str],
) -> Snapshot:
    """The replace snapshot over the branch's head `now` (the rewrite read `read`): its
    manifest list written; ConflictError when a manifest it replaces is no longer there."""
    if now is None:
        raise ConflictError(
            f"{done.table}: its snapshots were removed meanwhile; nothing was committed"
        )
    md = table.metadata
    listed = read_records(table.io, now.manifest_list)[2]
    replaced = set(done.replaced)
    there = {r["manifest_path"] for r in listed}
    gone = sorted(replaced - there)
    if gone:
        raise ConflictError(
            f"{done.table}: manifest {gone[0]} could not be found in the latest snapshot "
            f"{now.snapshot_id} (a commit since snapshot "
            f"{None if read is None else read.snapshot_id} rewrote it); nothing was committed"
        )
    kept = [r for r in listed if r["manifest_path"] not in replaced]
    seq = md.last_sequence_number + 1
    sid = done.new_id
    records = [
        {
            **r,
            "sequence_number": seq,
            "added_snapshot_id": sid,
            "min_sequence_number": seq
            if r["min_sequence_number"] is None
            else r["min_sequence_number"],
        }
        for r in news
    ] + kept
    path = list_path(table, sid, written)
    meta = {
        "snapshot-id": str(sid),
        "parent-snapshot-id": str(now.snapshot_id),
        "sequence-number": str(seq),
    }
    lineage: dict[str, int] = {}
    if md.format_version == 3:
        lineage = write_v3_list(table, path, meta, records)
    else:
        names = [f.name for f in MANIFEST_LIST_FILE_SCHEMAS[2].fields]
        meta["format-version"] = "2"
        write_avro(
            table.io, path, _V2_LIST_SCHEMA, meta, [{k: r.get(k) for k in names} for r in records]
        )
    before = now.summary
    props = {
        "manifests-created": str(len(news)),
        "manifests-kept": str(len(kept)),
        "manifests-replaced": str(len(replaced)),
        "entries-processed": str(done.entries),
    }
    if before is not None:
        props.update({k: before[k] for k in TOTALS if before.get(k) is not None})
    return Snapshot(
        snapshot_id=sid,
        parent_snapshot_id=now.snapshot_id,
        sequence_number=seq,
        timestamp_ms=max(int(time.time() * 1000), 1 + now.timestamp_ms),
        manifest_list=path,
        summary=Summary(Op.REPLACE, **props),
        schema_id=md.current_schema_id,
        **lineage,
    )


_V2_LIST_SCHEMA = AvroSchemaConversion().iceberg_to_avro(
    MANIFEST_LIST_FILE_SCHEMAS[2], schema_name="manifest_file"
)
