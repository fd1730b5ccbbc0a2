"""Manifest files decoded by readers generated per Avro schema (planner/avro_entries.py, every
length checked), or by fastavro (C) for what those leave, instead of pyiceberg's
record-by-record reader.

pyiceberg builds each `DataFile` field by field through Python objects; on a table of many files
that is most of cold planning. Here each manifest is read by straight-line Python generated once
for its writer schema (the fields planning never reads skipped, the metric maps read flat: 9 us
an entry against fastavro's 20, 2026-12-07); a manifest it does not handle or finds broken goes
to fastavro with its own writer schema (projected without the metric maps for plans that read
none: `decode_manifest`). Each entry becomes a compact `EntryFile` (about 300
bytes of metrics in one blob, a partition tuple shared by the entries of one partition), so
that planning a table of a million files does not hold a million decoded records (5.5 KB each).

What comes out follows the spec as pyiceberg's reader does (tests/test_manifests.py compares the
two on every manifest of the test tables, and on manifests written with every partition type):

- entries with status DELETED (2) are dropped;
- a null data / file sequence number is inherited from the manifest when the entry is ADDED (1)
  or the manifest's sequence number is 0 (v1); otherwise it stays null (planning refuses it);
- a null snapshot id is inherited from the manifest's `added_snapshot_id`;
- partition values are Iceberg's Python values as pyiceberg gives them: dates as days since
  1970-01-01, times and timestamps as microseconds, decimals as `Decimal`, UUIDs as `uuid.UUID`,
  fixed and binary as `bytes`;
- metric maps read as `dict[int, ...]`; `content` is DATA when the field is absent (v1).

A manifest whose partition carries a logical type this module does not convert (for example
nanosecond timestamps) is read with pyiceberg's reader instead: slower, never different. A file
fastavro cannot decode (truncated, corrupt, a codec whose library is missing here) is an error,
never handed to pyiceberg: pyiceberg 0.12's Cython decoder checks no length or count against its
buffer, so on a broken file it reads past its memory and can kill the interpreter instead of
raising. Whatever mor gives pyiceberg's Avro readers goes through `CheckedIO`: read whole once,
decoded by fastavro first (`check_whole`), then served from memory.
"""

from __future__ import annotations

import copy
import datetime as dt
import gc
import io
import marshal
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any

import fastavro
from pyiceberg.io import FileIO, InputFile, OutputFile
from pyiceberg.manifest import DataFileContent, FileFormat, ManifestContent, ManifestFile

from mor.planner import avro_entries
from mor.planner.state import caches

ADDED, DELETED = 1, 2
_METRICS = ("value_counts", "null_value_counts", "nan_value_counts", "lower_bounds", "upper_bounds")
_OPTIONAL = (
    "equality_ids",
    "first_row_id",
    "referenced_data_file",
    "content_offset",
    "content_size_in_bytes",
)
_ABSENT = (None,) * len(_OPTIONAL)  # the usual data file's optional fields
_CONTENT = {c.value: c for c in DataFileContent}
_FORMAT = {f.value.upper(): f for f in FileFormat}
_EPOCH_DAY = dt.date(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_MICRO = dt.timedelta(microseconds=1)


def _days(v: dt.date) -> int:
    return (v - _EPOCH_DAY).days


def _micros(v: dt.datetime) -> int:
    if v.tzinfo is None:  # a local-timestamp logical type: no zone, same arithmetic
        v = v.replace(tzinfo=dt.timezone.utc)
    return (v - _EPOCH_UTC) // _MICRO


def _time_micros(v: dt.time) -> int:
    return ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond


def _uuid(v: Any) -> uuid.UUID:
    return v if isinstance(v, uuid.UUID) else uuid.UUID(bytes=bytes(v))


def stored_value(v: Any) -> Any:
    """A value as fastavro decodes it (a logical type's: a date, a datetime, a time, a
    Decimal, a UUID) as Iceberg's Avro stores it: days, microseconds, and the Decimal and the
    UUID themselves (their scale and bytes are the type's); any other value unchanged."""
    if isinstance(v, dt.datetime):
        return _micros(v)
    if isinstance(v, dt.date):
        return _days(v)
    if isinstance(v, dt.time):
        return _time_micros(v)
    return v


# fastavro's value for a logical type -> pyiceberg's value; None: fastavro's value is pyiceberg's
_LOGICAL: dict[str, Callable[[Any], Any] | None] = {
    "date": _days,
    "time-micros": _time_micros,
    "timestamp-micros": _micros,
    "local-timestamp-micros": _micros,
    "decimal": None,
    "uuid": _uuid,
}


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while planning builds many small acyclic
    objects (decoded entries): collections triggered by the allocations alone cost a third of
    cold planning (measured). Reference counting still frees everything; the collector runs
    again afterwards, if it was running before."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class UnconvertedType(ValueError):
    """A partition logical type without a conversion here (the manifest goes to pyiceberg)."""


class _MetricMaps:
    """The five metric maps by pyiceberg's names, each read through the subclass's
    `_metric(index)` (its maps in `_METRICS` order)."""

    __slots__ = ()

    value_counts = property(lambda self: self._metric(0))
    null_value_counts = property(lambda self: self._metric(1))
    nan_value_counts = property(lambda self: self._metric(2))
    lower_bounds = property(lambda self: self._metric(3))
    upper_bounds = property(lambda self: self._metric(4))


class EntryFile(_MetricMaps):
    """The data or delete file of a manifest entry: the attributes planning reads of pyiceberg's
    `DataFile`, under the same names (pyiceberg's metric evaluators accept it as one).

    Kept compact, because planning and the manifest cache hold one per file (10^6 on large
    tables): fastavro's decoded record (about 5.5 KB of dicts and lists per entry, its column
    metrics mostly) is not kept. The five metric maps are one `marshal` blob of flat
    (field id, value, ...) tuples (about 300 bytes), expanded into a `dict[int, ...]` each time
    a filter or an equality delete's bounds read one; the optional fields of v2 delete files and
    v3 files are one tuple, absent (None) for the usual data file."""

    __slots__ = (
        "content",
        "file_path",
        "file_format",
        "partition",
        "record_count",
        "file_size_in_bytes",
        "spec_id",
        "_opt",
        "_metrics",
    )

    def __init__(
        self,
        raw: dict[str, Any],
        content: DataFileContent,
        file_format: FileFormat,
        partition: tuple[Any, ...],
        spec_id: int,
        metrics: bool = True,
    ) -> None:
        self.content = content
        self.file_path: str = raw["file_path"]
        self.file_format = file_format
        self.partition = partition
        self.record_count: int = raw["record_count"]
        self.file_size_in_bytes: int = raw["file_size_in_bytes"]
        self.spec_id = spec_id
        opt = tuple(map(raw.get, _OPTIONAL))
        self._opt = None if opt == _ABSENT else opt
        self._metrics = _packed_metrics(raw) if metrics else None

    def _metric(self, index: int) -> dict[int, Any] | None:
        return _metric_map(None if self._metrics is None else marshal.loads(self._metrics), index)

    def metrics_view(self) -> MetricsView:
        """The metric maps read from one unpacking of the blob (a filter of several
        predicates reads several maps of each file)."""
        return MetricsView(self.record_count, self._metrics)

    def _optional(self, index: int) -> Any:
        return None if self._opt is None else self._opt[index]

    equality_ids = property(lambda self: self._optional(0))
    first_row_id = property(lambda self: self._optional(1))
    referenced_data_file = property(lambda self: self._optional(2))
    content_offset = property(lambda self: self._optional(3))
    content_size_in_bytes = property(lambda self: self._optional(4))


class MetricsView(_MetricMaps):
    """An entry's record count and metric maps (as `EntryFile` gives them), its blob unpacked
    once."""

    __slots__ = ("record_count", "_maps")

    def __init__(self, record_count: int, blob: bytes | None) -> None:
        self.record_count = record_count
        self._maps = None if blob is None else marshal.loads(blob)

    def _metric(self, index: int) -> dict[int, Any] | None:
        return _metric_map(self._maps, index)


def _metric_map(maps: tuple[Any, ...] | None, index: int) -> dict[int, Any] | None:
    """Map `index` (in `_METRICS` order) of an unpacked metric blob, as a dict."""
    flat = None if maps is None else maps[index]
    return None if flat is None else dict(zip(flat[::2], flat[1::2]))


def _packed_metrics(raw: dict[str, Any]) -> bytes | None:
    """The metric maps of a decoded entry as one marshal blob: per map, in `_METRICS` order,
    a flat tuple (field id, value, field id, value, ...), or None when the map is absent.
    fastavro gives Avro maps as lists of {"key", "value"} records; pyiceberg's reader (the
    fallback) gives dicts."""
    maps = []
    for name in _METRICS:
        v = raw.get(name)
        if v is None:
            maps.append(None)
        elif type(v) is tuple:  # flat already (planner/avro_entries.py)
            maps.append(v)
        elif hasattr(v, "items"):  # a mapping
            maps.append(tuple(chain.from_iterable(v.items())))
        else:  # flattened in C, not by a generator per pair: 7-8 -> 5.6-5.7 us an entry
            maps.append(tuple(chain.from_iterable(map(_KEY_VALUE, v))))
    if all(m is None for m in maps):
        return None
    return marshal.dumps(tuple(maps))


_KEY_VALUE = itemgetter("key", "value")


class ManifestEntry:
    """A live manifest entry: status, inherited snapshot id and sequence numbers, its file."""

    __slots__ = ("status", "snapshot_id", "sequence_number", "file_sequence_number", "data_file")

    def __init__(
        self,
        status: int,
        snapshot_id: int | None,
        sequence_number: int | None,
        file_sequence_number: int | None,
        data_file: EntryFile,
    ) -> None:
        self.status = status
        self.snapshot_id = snapshot_id
        self.sequence_number = sequence_number
        self.file_sequence_number = file_sequence_number
        self.data_file = data_file


def read_manifest(
    file_io: FileIO, manifest: Any, *, deleted: bool = False, metrics: bool = True
) -> list[ManifestEntry]:
    """The live entries of `manifest` (a `ManifestFile` or `ListedManifest`); `deleted`: the
    entries with status DELETED too (what a snapshot removed: the writer's conflict checks);
    `metrics=False`: without column metrics (decode_manifest)."""
    with file_io.new_input(manifest.manifest_path).open() as f:
        raw = f.read()
    return decode_manifest(raw, manifest, file_io, metrics, deleted=deleted)


def decode_manifest(
    raw: bytes, manifest: Any, file_io: FileIO, metrics: bool = True, *, deleted: bool = False
) -> list[ManifestEntry]:
    """The live entries of `manifest` from its bytes `raw`; a partition type not converted here
    goes to pyiceberg's reader (the file checked first); a file fastavro cannot decode raises.
    `metrics=False`: without column metrics (their maps, split offsets, key metadata), for
    plans that read none: a sixth faster to decode
    (23 us an entry against 28 us, fastavro's own decoding 19 us, bench/scale.py's manifests
    on 2026-12-07), and no metric blob to make or hold.
    `deleted`: DELETED entries kept (their sequence numbers as recorded)."""
    try:
        return _decode(raw, manifest, metrics, deleted)
    except UnconvertedType:  # raised before any record is read: pyiceberg's values, checked
        checked = CheckedIO(file_io, {manifest.manifest_path: raw})
        return _pyiceberg_entries(checked, manifest, deleted)


def check_whole(raw: bytes) -> None:
    """Raise fastavro's error unless every block and record of the Avro file `raw` decodes
    (its values as stored: no logical type can fail it). Only a file that passed goes to
    pyiceberg's Avro reader (see the module's doc; tests/test_manifests.py fuzzes both)."""
    writer = fastavro.reader(io.BytesIO(raw)).writer_schema
    for _ in fastavro.reader(io.BytesIO(raw), reader_schema=_plain(writer)):
        pass


class CheckedIO(FileIO):
    """A FileIO for pyiceberg's manifest and manifest-list readers: each file read whole once
    through `base` (or taken from `known`, its bytes already read), checked by `check_whole`,
    then served from memory. Writes and deletes go to `base` unchanged."""

    def __init__(self, base: FileIO, known: dict[str, bytes] | None = None) -> None:
        super().__init__(base.properties)
        self._base = base
        self._known = dict(known or {})

    def new_input(self, location: str) -> InputFile:
        raw = self._known.get(location)
        if raw is None:
            with self._base.new_input(location).open() as f:
                raw = f.read()
        check_whole(raw)
        return _InMemory(location, raw)

    def new_output(self, location: str) -> OutputFile:
        return self._base.new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        self._base.delete(location)


class _InMemory(InputFile):
    def __init__(self, location: str, raw: bytes) -> None:
        super().__init__(location)
        self._raw = raw

    def __len__(self) -> int:
        return len(self._raw)

    def exists(self) -> bool:
        return True

    def open(self, seekable: bool = True) -> io.BytesIO:
        return io.BytesIO(self._raw)


def read_records(file_io: FileIO, path: str) -> tuple[Any, dict[str, str], list[dict[str, Any]]]:
    """A manifest's or manifest list's Avro writer schema, its metadata (but Avro's own keys)
    and its records, for a writer that copies them (writer/manifests.py) into a file of the
    same schema. A logical type's value is decoded (fastavro applies the writer schema's
    logical types whatever the reader schema says: a date, a datetime, a Decimal;
    `stored_value` gives the stored one back), and encoded again as it was by a writer of the
    same schema. pyiceberg 0.12 reads the v3 fields away; this keeps every field."""
    with file_io.new_input(path).open() as stream:
        raw = stream.read()
    return decode_records(raw)


def decode_records(raw: bytes) -> tuple[Any, dict[str, str], list[dict[str, Any]]]:
    """`read_records` of a file's bytes."""
    reader = fastavro.reader(io.BytesIO(raw))
    meta = {k: v for k, v in reader.metadata.items() if not k.startswith("avro.")}
    return reader.writer_schema, meta, list(reader)


def live_records(listed: dict[str, Any], records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The live entries (ADDED, EXISTING) of the manifest `listed` (its manifest-list record)
    among `records` (read_records), each a copy with what its readers inherit written out:
    the snapshot id (the manifest's `added_snapshot_id` when null), the data and file
    sequence numbers (the manifest's, for an ADDED entry; and for every entry of a manifest
    written before sequence numbers, 0), and a data file's `first_row_id` (v3: the manifest's
    plus the rows of the live files before it that have none, as Iceberg's ManifestReader
    assigns them)."""
    seq = listed["sequence_number"]
    next_row = None if listed["content"] == ManifestContent.DELETES else listed.get("first_row_id")
    out = []
    for r in records:
        if r["status"] == 2:
            continue
        r = dict(r)
        if r["snapshot_id"] is None:
            r["snapshot_id"] = listed["added_snapshot_id"]
        for k in ("sequence_number", "file_sequence_number"):
            if r.get(k) is None and (r["status"] == 1 or seq == 0):
                r[k] = seq
        f = r["data_file"]
        if next_row is not None and f.get("first_row_id") is None:
            r["data_file"] = {**f, "first_row_id": next_row}
            next_row += f["record_count"]
        out.append(r)
    return out


def _plain(schema: Any) -> Any:
    """An Avro schema without its logical types."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


# data_file fields a plan without metrics reads nothing of
_UNREAD = frozenset({*_METRICS, "column_sizes", "split_offsets", "key_metadata", "sort_order_id"})
_PROJECTIONS: dict[str, Any] = {}
# each of the memos below keyed by an Avro schema's text holds at most this many (one per
# table schema and partition spec read): listed by cache_figures() as "manifest schemas"
_SCHEMAS = 256


def _without_metrics(text: str, writer: dict[str, Any]) -> Any:
    """The writer schema without the fields in _UNREAD, parsed, as fastavro's reader schema
    (cached per schema text); None when it cannot be made (the whole record is decoded)."""
    if text in _PROJECTIONS:
        return _PROJECTIONS[text]
    if len(_PROJECTIONS) >= _SCHEMAS:  # many tables and schemas in one process: start over
        _PROJECTIONS.clear()
    try:
        schema = copy.deepcopy(writer)
        data_file = next(f for f in schema["fields"] if f.get("field-id") == 2)
        fields = data_file["type"]["fields"]
        data_file["type"]["fields"] = [f for f in fields if f["name"] not in _UNREAD]
        parsed = fastavro.parse_schema(schema)
    except Exception:  # noqa: BLE001 - an unexpected layout: decode everything
        parsed = None
    if len(_PROJECTIONS) >= 64:
        _PROJECTIONS.clear()
    _PROJECTIONS[text] = parsed
    return parsed


def _decode(
    raw: bytes, manifest: Any, metrics: bool = True, deleted: bool = False
) -> list[ManifestEntry]:
    converters: list[tuple[str, Callable[[Any], Any] | None]] | None = None
    try:  # partition values already Iceberg's (planner/avro_entries.py)
        records: Any = avro_entries.records(raw, metrics)[0]
    except Exception:  # noqa: BLE001 - left, or broken: fastavro's reader (and its error)
        records = fastavro.reader(io.BytesIO(raw))
        text = records.metadata["avro.schema"]
        converters = _converters(text, records.writer_schema)
        if not metrics:
            projection = _without_metrics(text, records.writer_schema)
            if projection is not None:
                records = fastavro.reader(io.BytesIO(raw), reader_schema=projection)
    out: list[ManifestEntry] = []
    m_seq = manifest.sequence_number or 0
    inherit_all = m_seq == 0
    spec_id = manifest.partition_spec_id
    shared: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # one tuple per partition value
    for rec in records:
        status = rec["status"]
        if status == DELETED and not deleted:
            continue
        added = status == ADDED or inherit_all
        seq = rec.get("sequence_number")
        fseq = rec.get("file_sequence_number")
        snap = rec.get("snapshot_id")
        d = rec["data_file"]
        part = d["partition"]
        values = (
            part
            if converters is None
            else tuple(
                v if conv is None or v is None else conv(v)
                for name, conv in converters
                for v in (part[name],)
            )
        )
        values = shared.setdefault(values, values)
        f = EntryFile(
            d,
            _CONTENT[d.get("content", 0)],
            _FORMAT[d["file_format"].upper()],
            values,
            spec_id,
            metrics,
        )
        out.append(
            ManifestEntry(
                status,
                manifest.added_snapshot_id if snap is None else snap,
                m_seq if seq is None and added else seq,
                m_seq if fseq is None and added else fseq,
                f,
            )
        )
    return out


_CONVERTERS: dict[str, list[tuple[str, Callable[[Any], Any] | None]]] = {}


def _converters(text: str, writer: dict[str, Any]) -> list[tuple[str, Callable[[Any], Any] | None]]:
    """Per partition field (in order): its Avro name and how fastavro's value becomes
    pyiceberg's. Cached per schema text (one per table schema and spec)."""
    hit = _CONVERTERS.get(text)
    if hit is not None:
        return hit
    data_file = next(f for f in writer["fields"] if f.get("field-id") == 2)
    partition = next(f for f in data_file["type"]["fields"] if f.get("field-id") == 102)
    out = [(pf["name"], _converter(pf["type"])) for pf in partition["type"].get("fields", [])]
    if len(_CONVERTERS) >= _SCHEMAS:  # many tables and schemas in one process: start over
        _CONVERTERS.clear()
    _CONVERTERS[text] = out
    return out


def _converter(t: Any) -> Callable[[Any], Any] | None:
    if isinstance(t, list):  # a union with null
        convs = [c for c in (_converter(b) for b in t) if c is not None]
        return convs[0] if convs else None
    if isinstance(t, dict):
        logical = t.get("logicalType")
        if logical is None:
            return None
        if logical not in _LOGICAL:
            raise UnconvertedType(f"partition logical type {logical}")
        return _LOGICAL[logical]
    return None


def _pyiceberg_entries(
    file_io: FileIO, manifest: Any, deleted: bool = False
) -> list[ManifestEntry]:
    if isinstance(manifest, ListedManifest):
        manifest = manifest.as_pyiceberg()
    out = []
    for e in manifest.fetch_manifest_entry(file_io, discard_deleted=not deleted):
        d = e.data_file
        raw: dict[str, Any] = {
            name: getattr(d, name, None)
            for name in ("file_path", "record_count", "file_size_in_bytes", *_OPTIONAL, *_METRICS)
        }
        part = tuple(d.partition[i] for i in range(len(d.partition)))
        f = EntryFile(raw, d.content, d.file_format, part, manifest.partition_spec_id)
        out.append(
            ManifestEntry(
                int(e.status), e.snapshot_id, e.sequence_number, e.file_sequence_number, f
            )
        )
    return out


# The manifest list, decoded the same way. Fields are found by their Iceberg field id in the
# writer schema (a reader resolves by id, not name); absent v1 fields take the spec's defaults.
_LIST_FIELDS = {
    500: "manifest_path",
    501: "manifest_length",
    502: "partition_spec_id",
    503: "added_snapshot_id",
    507: "partitions",
    515: "sequence_number",
    516: "min_sequence_number",
    517: "content",
    520: "first_row_id",
}
_LIST_REQUIRED = (500, 501, 502)
_MANIFEST_CONTENT = {c.value: c for c in ManifestContent}


@dataclass(slots=True, eq=False)  # identity, as pyiceberg's models and the entries here
class PartitionSummary:
    """One partition field's summary in a manifest list entry (pyiceberg's
    `PartitionFieldSummary` attributes: its manifest evaluator accepts it as one)."""

    contains_null: bool
    contains_nan: bool | None
    lower_bound: bytes | None
    upper_bound: bytes | None


@dataclass(slots=True, eq=False)  # identity, as pyiceberg's models and the entries here
class ListedManifest:
    """A manifest list entry: the attributes planning reads of pyiceberg's `ManifestFile`, under
    the same names, and the manifest's `first_row_id` (v3 row lineage), which pyiceberg's model
    does not carry."""

    manifest_path: str
    manifest_length: int
    partition_spec_id: int
    content: ManifestContent
    sequence_number: int
    min_sequence_number: int
    added_snapshot_id: int | None
    partitions: list[PartitionSummary] | None
    first_row_id: int | None

    def as_pyiceberg(self) -> ManifestFile:
        """pyiceberg's model of this entry, for its manifest reader (the fallback)."""
        return ManifestFile.from_args(
            manifest_path=self.manifest_path,
            manifest_length=self.manifest_length,
            partition_spec_id=self.partition_spec_id,
            content=self.content,
            sequence_number=self.sequence_number,
            min_sequence_number=self.min_sequence_number,
            added_snapshot_id=self.added_snapshot_id,
            added_files_count=None,
            existing_files_count=None,
            deleted_files_count=None,
            added_rows_count=None,
            existing_rows_count=None,
            deleted_rows_count=None,
            partitions=None,
            key_metadata=None,
        )

    @classmethod
    def of(cls, m: ManifestFile) -> ListedManifest:
        """From pyiceberg's model (its reader read the list)."""
        parts = m.partitions
        return cls(
            m.manifest_path,
            m.manifest_length,
            m.partition_spec_id,
            _MANIFEST_CONTENT[int(m.content or 0)],  # pyiceberg gives v1's default as a bare 0
            m.sequence_number or 0,
            m.min_sequence_number or 0,
            m.added_snapshot_id,
            None
            if parts is None
            else [
                PartitionSummary(p.contains_null, p.contains_nan, p.lower_bound, p.upper_bound)
                for p in parts
            ],
            getattr(m, "first_row_id", None),
        )


def decode_manifest_list(raw: bytes) -> list[ListedManifest]:
    """The entries of a manifest list from its bytes. ValueError when a required field is
    absent from the file's schema (the caller may try pyiceberg's reader, through `CheckedIO`)."""
    records = fastavro.reader(io.BytesIO(raw))
    names, summary = _list_names(records.metadata["avro.schema"], records.writer_schema)
    path, length, spec, snap, parts_, seq, min_seq, content, first_row_id = (
        names.get(i) for i in (500, 501, 502, 503, 507, 515, 516, 517, 520)
    )
    null, nan, lower, upper = (summary.get(i) for i in (509, 518, 510, 511))
    kinds = _MANIFEST_CONTENT
    out = []
    for rec in records:  # an absent field's name is None: rec.get(None) is None
        parts = rec.get(parts_)
        out.append(
            ListedManifest(
                rec[path],
                rec[length],
                rec[spec],
                kinds[rec.get(content) or 0],  # v1 has none: DATA
                rec.get(seq) or 0,  # v1 has none: the spec's initial default 0
                rec.get(min_seq) or 0,
                rec.get(snap),
                None
                if parts is None
                else [
                    PartitionSummary(p.get(null), p.get(nan), p.get(lower), p.get(upper))
                    for p in parts
                ],
                rec.get(first_row_id),
            )
        )
    return out


_LIST_NAMES: dict[str, tuple[dict[int, str], dict[int, str]]] = {}


def _list_names(text: str, writer: dict[str, Any]) -> tuple[dict[int, str], dict[int, str]]:
    """Avro field names of the manifest list's fields and of its partition summaries, by field
    id. Cached per schema text."""
    hit = _LIST_NAMES.get(text)
    if hit is not None:
        return hit
    names = {f["field-id"]: f["name"] for f in writer["fields"] if "field-id" in f}
    missing = [_LIST_FIELDS[i] for i in _LIST_REQUIRED if i not in names]
    if missing:
        raise ValueError(f"manifest list has no {', '.join(missing)}")
    summary: dict[int, str] = {}
    part = next((f for f in writer["fields"] if f.get("field-id") == 507), None)
    if part is not None:
        t = part["type"]
        arr = next(b for b in t if isinstance(b, dict)) if isinstance(t, list) else t
        items = arr["items"]
        summary = {f["field-id"]: f["name"] for f in items["fields"] if "field-id" in f}
    if len(_LIST_NAMES) >= _SCHEMAS:
        _LIST_NAMES.clear()
    _LIST_NAMES[text] = (names, summary)
    return names, summary


def read_manifest_list(file_io: FileIO, path: str) -> list[ListedManifest]:
    """The entries of the manifest list at `path` (a snapshot's), decoded as above."""
    with file_io.new_input(path).open() as stream:
        return decode_manifest_list(stream.read())


def _schema_memos() -> tuple[int, int]:
    n = len(_PROJECTIONS) + len(_CONVERTERS) + len(_LIST_NAMES)
    return n, n


def _clear_schema_memos() -> None:
    _PROJECTIONS.clear()
    _CONVERTERS.clear()
    _LIST_NAMES.clear()


caches().register(
    "manifest schemas",
    "what decoding a manifest or list of one Avro schema needs (projection, partition "
    "conversions, field names), per schema text",
    "schemas",
    f"{_SCHEMAS} schemas each",
    _schema_memos,
    _clear_schema_memos,
)
