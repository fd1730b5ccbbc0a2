"""Manifest decoding (planner/manifests.py, fastavro) against pyiceberg's own reader: every
manifest of every snapshot of the real tables (Spark, Dremio and DuckDB writers), and manifests
written here with every partition type, NULLs and values before 1970, each entry status and
null sequence numbers, in format v1 and v2. No Spark."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
    write_manifest,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from mor.planner import manifests
from mor.planner.manifests import read_manifest
from mor.planner.sources import PathMap, Resolver

REALDATA = Path(__file__).resolve().parent / "realdata"
_TABLES = json.loads((REALDATA / "tables.json").read_text())
_EXPECTED = json.loads((REALDATA / "expected_results.json").read_text())
_FILE_FIELDS = (
    "content",
    "file_path",
    "file_format",
    "record_count",
    "file_size_in_bytes",
    "value_counts",
    "null_value_counts",
    "nan_value_counts",
    "lower_bounds",
    "upper_bounds",
    "equality_ids",
)


def _theirs(entry: Any) -> tuple:
    f = entry.data_file
    return (
        int(entry.status),
        entry.snapshot_id,
        entry.sequence_number,
        entry.file_sequence_number,
        tuple(f.partition[i] for i in range(len(f.partition))),
        *(_plain(getattr(f, n)) for n in _FILE_FIELDS),
    )


def _ours(entry: Any) -> tuple:
    f = entry.data_file
    return (
        entry.status,
        entry.snapshot_id,
        entry.sequence_number,
        entry.file_sequence_number,
        f.partition,
        *(_plain(getattr(f, n)) for n in _FILE_FIELDS),
    )


def _plain(v: Any) -> Any:
    if v is None:
        return None
    if hasattr(v, "items"):
        return dict(v.items()) or None  # pyiceberg reads an absent map as {} or None alike
    if isinstance(v, list):
        return list(v)
    return v


def _same(file_io: Any, manifest: Any) -> int:
    theirs = [_theirs(e) for e in manifest.fetch_manifest_entry(file_io, discard_deleted=True)]
    ours = [_ours(e) for e in read_manifest(file_io, manifest)]
    assert ours == theirs, manifest.manifest_path
    # partition values compare equal across types (1 == 1.0, Decimal("1.50") == Decimal("1.5")):
    # their types and printed forms must agree too (EXPLAIN prints them)
    assert [repr(o[4]) for o in ours] == [repr(t[4]) for t in theirs]
    return len(ours)


@pytest.mark.parametrize("name", list(_TABLES))
def test_real_tables_manifests_decode_as_pyiceberg_reads_them(name: str) -> None:
    t = _TABLES[name]
    resolver = Resolver(None, PathMap.of({t["prefix_in_files"]: str(REALDATA / t["maps_to"])}))
    src = resolver.by_path(str(REALDATA / t["metadata"]))
    seen: set[str] = set()
    entries = 0
    snaps = _EXPECTED[name]["snapshots"]
    readable = [s["snapshot_id"] for s in snaps if "unreadable" not in s]
    for snap_id in readable:
        snap = src.metadata.snapshot_by_id(snap_id)
        assert snap is not None
        for m in snap.manifests(src.io):
            if m.manifest_path not in seen:
                seen.add(m.manifest_path)
                entries += _same(src.io, m)
    assert seen and entries > 0


SCHEMA = Schema(
    NestedField(1, "b", BooleanType(), required=False),
    NestedField(2, "i", IntegerType(), required=False),
    NestedField(3, "l", LongType(), required=False),
    NestedField(4, "f", FloatType(), required=False),
    NestedField(5, "d", DoubleType(), required=False),
    NestedField(6, "dec", DecimalType(12, 2), required=False),
    NestedField(7, "dt", DateType(), required=False),
    NestedField(8, "t", TimeType(), required=False),
    NestedField(9, "ts", TimestampType(), required=False),
    NestedField(10, "tz", TimestamptzType(), required=False),
    NestedField(11, "s", StringType(), required=False),
    NestedField(12, "u", UUIDType(), required=False),
    NestedField(13, "fx", FixedType(4), required=False),
    NestedField(14, "bin", BinaryType(), required=False),
)
_IDENTITY = [(i, n) for i, n in enumerate([f.name for f in SCHEMA.fields], start=1)]
SPEC = PartitionSpec(
    *[PartitionField(i, 1000 + i, IdentityTransform(), f"{n}_id") for i, n in _IDENTITY],
    PartitionField(9, 1100, YearTransform(), "ts_year"),
    PartitionField(9, 1101, MonthTransform(), "ts_month"),
    PartitionField(10, 1102, DayTransform(), "tz_day"),
    PartitionField(10, 1103, HourTransform(), "tz_hour"),
    PartitionField(11, 1104, TruncateTransform(3), "s_trunc"),
    PartitionField(3, 1105, BucketTransform(16), "l_bucket"),
    spec_id=3,
)
_ROWS = [
    # identity values, then year, month, day, hour, truncate, bucket
    [True, 7, 2**40, 1.5, -2.25, Decimal("1234.50"), 19000, 3_600_000_001,
     1_700_000_000_123_456, 1_700_000_000_123_456, "héllo", uuid.UUID(int=12345),
     b"\x00\x01\x02\x03", b"\xff\x00", 53, 640, 19675, 472222, "hél", 5],
    [False, -1, -(2**40), float("-inf"), 0.0, Decimal("-0.01"), -719162, 0,
     -62_135_596_800_000_000, -1, "", uuid.UUID(int=0), b"\xff\xff\xff\xff", b"",
     -1969, -23000, -1, -1, "", 0],
    [None] * 20,
]  # fmt: skip


def _write(path: Path, version: int, seq: int | None) -> Any:
    file_io = PyArrowFileIO()
    out = file_io.new_output(str(path))
    with write_manifest(
        version, SPEC, SCHEMA, out, snapshot_id=99, avro_compression="deflate"
    ) as w:
        for n, row in enumerate(_ROWS * 3):
            content = DataFileContent.DATA if version == 1 or n % 3 == 0 else DataFileContent(n % 3)
            f = DataFile.from_args(
                content=content,
                file_path=f"s3://bucket/t/{n}.parquet",
                file_format=FileFormat.PARQUET,
                partition=Record(*row),
                record_count=10 + n,
                file_size_in_bytes=1000 + n,
                value_counts={1: 10, 3: 10},
                null_value_counts={1: n % 2},
                nan_value_counts={4: 0} if n % 2 else None,
                lower_bounds={3: (n).to_bytes(8, "little")},
                upper_bounds={3: (n + 5).to_bytes(8, "little")},
                equality_ids=[3, 11] if content == DataFileContent.EQUALITY_DELETES else None,
            )
            f.spec_id = SPEC.spec_id
            status = list(ManifestEntryStatus)[n % 3]
            explicit = status != ManifestEntryStatus.ADDED or n % 2 == 0
            w.add_entry(
                ManifestEntry.from_args(
                    status=status,
                    snapshot_id=(7 + n) if explicit or version == 1 else None,
                    sequence_number=(n + 1) if explicit and version > 1 else None,
                    file_sequence_number=(n + 1) if explicit and version > 1 else None,
                    data_file=f,
                )
            )
    manifest = w.to_manifest_file()
    if seq is not None:
        manifest.sequence_number = seq
        manifest.min_sequence_number = seq
    return file_io, manifest


@pytest.mark.parametrize(("version", "seq"), [(1, None), (2, 0), (2, 42)])
def test_every_partition_type_status_and_inherited_number(
    tmp_path: Path, version: int, seq: int | None
) -> None:
    file_io, manifest = _write(tmp_path / f"m-v{version}.avro", version, seq)
    n = _same(file_io, manifest)
    assert n == 6  # of 9 entries, the 3 DELETED are dropped
    # the values themselves, not only agreement: days, micros, Decimal, UUID, bytes
    first = read_manifest(file_io, manifest)[0].data_file.partition
    assert first[6] == 19000 and isinstance(first[6], int)
    assert first[7] == 3_600_000_001 and first[8] == 1_700_000_000_123_456
    assert first[5] == Decimal("1234.50") and first[11] == uuid.UUID(int=12345)
    assert first[12] == b"\x00\x01\x02\x03"


def test_a_logical_type_without_conversion_goes_to_pyiceberg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition type this module does not convert is read by pyiceberg's reader: the same
    entries, never fastavro's own value for it."""
    file_io, manifest = _write(tmp_path / "m.avro", 2, 42)
    monkeypatch.setattr(
        manifests, "_LOGICAL", {k: v for k, v in manifests._LOGICAL.items() if k != "date"}
    )
    monkeypatch.setattr(manifests, "_CONVERTERS", {})
    called = []
    real = manifests._pyiceberg_entries
    monkeypatch.setattr(manifests, "_pyiceberg_entries", lambda *a: called.append(1) or real(*a))
    _same(file_io, manifest)
    assert called


def test_decoding_pauses_the_collector_and_restores_it() -> None:
    import gc

    assert gc.isenabled()
    with manifests.gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with manifests.gc_paused():
            pass
        assert not gc.isenabled()  # it was off before: stays off
    finally:
        gc.enable()


def test_dates_before_1970_and_times_convert_exactly() -> None:
    assert manifests._days(dt.date(1, 1, 1)) == -719162
    assert manifests._micros(dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc)) == -62135596800000000
    assert manifests._micros(dt.datetime(1969, 12, 31, 23, 59, 59, 999999)) == -1
    assert manifests._time_micros(dt.time(23, 59, 59, 999999)) == 86_399_999_999
