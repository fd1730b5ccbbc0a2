"""Manifest decoding (planner/manifests.py, fastavro) against pyiceberg's own reader: every
manifest of every snapshot of the real tables (Spark, Dremio and DuckDB writers), and manifests
written here with every partition type, NULLs and values before 1970, each entry status and
null sequence numbers, in format v1 and v2. No Spark."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
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
    ManifestContent,
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

from mor.planner import avro_entries, manifests
from mor.planner.manifests import read_manifest
from mor.planner.sources import PathMap, Resolver
from mor.planner.state import caches

# the fast tier too (`make check`: tests/legs.py)
pytestmark = [pytest.mark.check]

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


@pytest.fixture(params=["generated", "fastavro"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which of the two decoders reads every manifest: the readers generated per schema
    (planner/avro_entries.py; fastavro then never asked) or fastavro's (what the generated
    ones leave to it)."""
    if request.param == "generated":

        def refused(*_a: Any, **_k: Any) -> Any:
            raise AssertionError("fastavro asked for a manifest the generated reader reads")

        monkeypatch.setattr(manifests.fastavro, "reader", refused)
    else:

        def unhandled(*_a: Any, **_k: Any) -> Any:
            raise avro_entries.Unhandled("left to fastavro by the test")

        monkeypatch.setattr(avro_entries, "records", unhandled)
    return request.param  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", list(_TABLES))
def test_real_tables_manifests_decode_as_pyiceberg_reads_them(name: str, reader: str) -> None:
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
    tmp_path: Path, version: int, seq: int | None, reader: str
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
    monkeypatch.setattr(
        avro_entries,
        "_PARTITION_LOGICAL",
        {k: v for k, v in avro_entries._PARTITION_LOGICAL.items() if k[0] != "date"},
    )
    monkeypatch.setattr(avro_entries, "_READERS", {})
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


# --- manifest lists -------------------------------------------------------------------------

_LIST_FIELDS = (
    "manifest_path",
    "manifest_length",
    "partition_spec_id",
    "content",
    "sequence_number",
    "min_sequence_number",
    "added_snapshot_id",
)


def _list_entry(m: Any) -> tuple:
    """A list entry's fields, ours or pyiceberg's: the same attribute names, by design."""
    parts = m.partitions
    return (
        *(getattr(m, n) for n in _LIST_FIELDS),
        None
        if parts is None
        else [(p.contains_null, p.contains_nan, p.lower_bound, p.upper_bound) for p in parts],
    )


def _same_list(file_io: Any, path: str) -> int:
    from pyiceberg.manifest import read_manifest_list

    theirs = [_list_entry(m) for m in read_manifest_list(file_io.new_input(path))]
    with file_io.new_input(path).open() as f:
        ours_raw = manifests.decode_manifest_list(f.read())
    ours = [_list_entry(m) for m in ours_raw]
    assert ours == theirs, path
    # always the enum (pyiceberg gives a v1 list's default as a bare 0: equal, not the same)
    assert all(isinstance(o[3], ManifestContent) for o in ours)
    return len(ours)


@pytest.mark.parametrize("name", list(_TABLES))
def test_real_tables_manifest_lists_decode_as_pyiceberg_reads_them(name: str) -> None:
    t = _TABLES[name]
    resolver = Resolver(None, PathMap.of({t["prefix_in_files"]: str(REALDATA / t["maps_to"])}))
    src = resolver.by_path(str(REALDATA / t["metadata"]))
    readable = [s["snapshot_id"] for s in _EXPECTED[name]["snapshots"] if "unreadable" not in s]
    n = 0
    for snap_id in readable:
        snap = src.metadata.snapshot_by_id(snap_id)
        assert snap is not None
        n += _same_list(src.io, snap.manifest_list)
    assert n > 0


@pytest.mark.parametrize("version", [1, 2])
def test_written_manifest_lists_decode_as_pyiceberg_reads_them(
    tmp_path: Path, version: int
) -> None:
    """Lists written by pyiceberg's writer in v1 (no content, no sequence numbers: the spec's
    defaults) and v2, with summaries that have NULL bounds, unknown NaN and none at all."""
    from pyiceberg.manifest import PartitionFieldSummary, write_manifest_list

    file_io = PyArrowFileIO()
    path = str(tmp_path / f"snap-v{version}.avro")
    summaries = [
        [PartitionFieldSummary(False, False, b"\x01\x00\x00\x00", b"\x09\x00\x00\x00")],
        [PartitionFieldSummary(True, None, None, None)],
        [
            PartitionFieldSummary(True, True, b"a", b"z"),
            PartitionFieldSummary(False, None, b"", b""),
        ],
        None,
    ]
    with write_manifest_list(
        version, file_io.new_output(path), 77, 76, 5 if version > 1 else None, "deflate"
    ) as w:
        ms = []
        for n, parts in enumerate(summaries * 2):
            content = ManifestContent.DELETES if version > 1 and n % 2 else ManifestContent.DATA
            ms.append(
                manifests.ManifestFile.from_args(
                    manifest_path=f"s3://bucket/t/metadata/m{n}.avro",
                    manifest_length=1000 + n,
                    partition_spec_id=n % 3,
                    content=content,
                    sequence_number=-1 if n % 3 == 0 else n,  # -1: this commit's, inherited
                    min_sequence_number=-1 if n % 3 == 0 else n,
                    added_snapshot_id=77 if n % 3 == 0 else 70 + n,
                    added_files_count=1,
                    existing_files_count=0,
                    deleted_files_count=0,
                    added_rows_count=10,
                    existing_rows_count=0,
                    deleted_rows_count=0,
                    partitions=parts,
                    key_metadata=None,
                )
            )
        w.add_manifests(ms)
    assert _same_list(file_io, path) == 8
    ours = manifests.decode_manifest_list(file_io.new_input(path).open().read())
    if version == 1:  # the values themselves: v1 lists carry neither, the spec says DATA and 0
        assert {m.content for m in ours} == {ManifestContent.DATA}
        assert {m.sequence_number for m in ours} == {0}
    else:  # the writer's inheritance of its own commit's number
        assert [m.sequence_number for m in ours][:4] == [5, 1, 2, 5]
    assert ours[1].partitions[0].contains_nan is None and ours[3].partitions is None


def test_a_list_without_a_required_field_is_refused_for_pyiceberg(tmp_path: Path) -> None:
    import fastavro

    schema = {
        "type": "record",
        "name": "manifest_file",
        "fields": [{"name": "manifest_path", "type": "string", "field-id": 500}],
    }
    path = tmp_path / "bad.avro"
    with path.open("wb") as f:
        fastavro.writer(f, schema, [{"manifest_path": "m.avro"}])
    with pytest.raises(ValueError, match="manifest_length, partition_spec_id"):
        manifests.decode_manifest_list(path.read_bytes())


def test_a_listed_manifest_reads_through_pyiceberg_as_the_fallback(tmp_path: Path) -> None:
    """The fallback of a manifest fastavro cannot decode, given the list's own entry."""
    file_io, manifest = _write(tmp_path / "m.avro", 2, 42)
    listed = manifests.ListedManifest.of(manifest)
    theirs = [_theirs(e) for e in manifest.fetch_manifest_entry(file_io, discard_deleted=True)]
    assert [_ours(e) for e in manifests._pyiceberg_entries(file_io, listed)] == theirs
    assert [_ours(e) for e in read_manifest(file_io, listed)] == theirs


def test_a_list_fastavro_cannot_decode_is_planned_through_pyiceberg(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A v2 list fastavro's decoding here refuses (a schema it cannot read) is read by
    pyiceberg's reader, once fastavro has read the file whole: the same files and deletes."""
    from mor.api import plan_query
    from mor.planner import scan_planning
    from mor.planner.nodes import IcebergScan

    name = "dremio/products_with_eq_deletes"
    t = _TABLES[name]
    sql = f"SELECT * FROM iceberg_scan('{REALDATA / t['metadata']}')"
    pm = {t["prefix_in_files"]: str(REALDATA / t["maps_to"])}

    def files() -> list[Any]:
        scan_planning.clear_manifest_cache(caches())
        plan = plan_query(sql, path_map=pm).optimized
        return [s.files for s in plan.walk() if isinstance(s, IcebergScan)]

    monkeypatch.setenv("MOR_MANIFEST_DISK_CACHE_MB", "0")  # each plan decodes its list
    fast = files()
    refused = []

    def refuse(raw: bytes) -> Any:
        refused.append(1)
        raise ValueError("codec")

    monkeypatch.setattr(scan_planning, "decode_manifest_list", refuse)
    assert files() == fast and refused


def test_a_broken_manifest_raises_and_never_reaches_pyiceberg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest fastavro cannot decode (here cut short) is an error, not pyiceberg's to try:
    its Cython decoder reads past a broken file's buffer. The list's fallback and the writer's
    reads take pyiceberg's reader only through CheckedIO, which refuses the same file."""
    file_io, manifest = _write(tmp_path / "m.avro", 2, 42)
    raw = (tmp_path / "m.avro").read_bytes()
    short = raw[: len(raw) - 40]
    monkeypatch.setattr(
        manifests, "_pyiceberg_entries", lambda *a: pytest.fail("handed to pyiceberg")
    )
    with pytest.raises(Exception) as e:
        manifests.decode_manifest(short, manifest, file_io)
    assert not isinstance(e.value, manifests.UnconvertedType)
    checked = manifests.CheckedIO(file_io, {manifest.manifest_path: short})
    with pytest.raises(EOFError):
        checked.new_input(manifest.manifest_path)
    whole = manifests.CheckedIO(file_io)  # reads the file itself: the same bytes pyiceberg reads
    with whole.new_input(manifest.manifest_path).open() as f:
        assert f.read() == raw


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fuzzed_manifests_and_lists_raise_and_never_crash(seed: int) -> None:
    """Truncations and byte flips of the real tables' manifests (deflated, and written again
    uncompressed) and lists, through the generated reader, fastavro's road and pyiceberg's
    behind CheckedIO, in a process of its own: each read returns or raises. Without the
    check (`--unchecked`, docs/testing.md) seeds 2 and 3 kill the process with a
    segmentation fault on 2026-12-07 (pyiceberg 0.12)."""
    import subprocess
    import sys

    script = Path(__file__).with_name("fuzz_manifests.py")
    run = subprocess.run(
        [sys.executable, str(script), str(seed), "600"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr[-2000:]}"
    counts = dict(line.rsplit(": ", 1) for line in run.stdout.splitlines())
    # the fuzzing reaches both: files that still decode, and errors past the header
    roads = ("manifest generated", "manifest fastavro", "manifest pyiceberg")
    for road in (*roads, "list fastavro", "list pyiceberg"):
        assert int(counts.get(f"{road}: read", 0)) > 0, run.stdout
    assert int(counts.get("manifest pyiceberg: EOFError", 0)) > 0, run.stdout


def _decoded_with(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """(manifest content, whether decoded with metrics) of each manifest decoded from now on
    (in this process: what another one left on disk is not used)."""
    from mor.planner import scan_planning

    monkeypatch.setenv("MOR_MANIFEST_DISK_CACHE_MB", "0")
    scan_planning.clear_manifest_cache(caches())
    seen: list[tuple[str, bool]] = []
    real = scan_planning.decode_manifest

    def decode(raw: bytes, manifest: Any, io: Any, metrics: bool = True) -> Any:
        seen.append((manifest.content.name.lower(), metrics))
        return real(raw, manifest, io, metrics)

    monkeypatch.setattr(scan_planning, "decode_manifest", decode)
    return seen


def _partitioned_by_p(tmp_path: Path, parts: str) -> tuple[Any, Any]:
    """Table m.t (id long, p string) partitioned by identity(p): a commit of ids 1-3 per
    value of `parts`. Its catalog and its writer."""
    import pyarrow as pa

    from mor.api import default_catalog
    from mor.writer.tables import TableWriter

    cat = default_catalog(str(tmp_path / "wh"))
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "p", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
    w = TableWriter(cat, "m.t", schema, spec)
    for p in parts:
        w.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "p": [p] * 3}))
    return cat, w


def test_data_manifests_are_decoded_without_metrics_when_no_filter_needs_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan reads column metrics only for a filter that partition values do not answer
    exactly, or for equality deletes' key bounds; otherwise data manifests are decoded without
    them (a third faster), and keep the same files. Delete manifests always have theirs."""
    from mor.api import plan_query
    from mor.planner.nodes import IcebergScan

    cat, w = _partitioned_by_p(tmp_path, "abc")
    first = w.refresh().scan().plan_files()[0].file
    w.commit(deletes=[w.position_delete_file({first.file_path: [0]}, first)])

    def planned(where: str) -> list[Any]:
        plan = plan_query(f"SELECT * FROM m.t {where}", catalog=cat).optimized
        return [s.files.data for s in plan.walk() if isinstance(s, IcebergScan) and s.files]

    cases = {"": False, "WHERE p = 'b'": False, "WHERE p IN ('a', 'c')": False}
    cases |= {"WHERE id > 2": True, "WHERE p = 'b' AND id > 2": True}
    for where, with_metrics in cases.items():
        seen = _decoded_with(monkeypatch)
        lite = planned(where)
        assert {m for c, m in seen if c == "data"} == {with_metrics}, where
        assert {m for c, m in seen if c == "deletes"} <= {True}
        monkeypatch.undo()
        seen = _decoded_with(monkeypatch)
        planned("WHERE id > 2")  # fully decoded now: the plan below reads the cache
        assert planned(where) == lite and len(seen) == 4, where
        monkeypatch.undo()
    w.commit(deletes=[w.equality_delete_file([1], [{1: 3}], partition=Record("a"))])
    seen = _decoded_with(monkeypatch)
    planned("")
    assert {m for c, m in seen if c == "data"} == {True}  # equality deletes' key bounds


def test_a_repeated_scan_reuses_its_plan_and_nothing_else_does(tmp_path: Path) -> None:
    """A scan planned again over the same metadata, snapshot, columns and predicates gets the
    files planned before without visiting a manifest entry; a new commit, another snapshot,
    another predicate or another column list is planned anew and sees its own files."""
    import pyarrow as pa

    from mor.api import plan_query
    from mor.planner import scan_planning
    from mor.planner.nodes import IcebergScan

    cat, w = _partitioned_by_p(tmp_path, "ab")
    old = w.refresh().metadata.current_snapshot_id
    scan_planning.clear_manifest_cache(caches())
    visits: list[int] = []
    real = scan_planning._plan_manifests

    def counted(*args: Any) -> Any:
        visits.append(1)
        return real(*args)

    def files(sql: str) -> tuple[Any, ...]:
        plan = plan_query(sql, catalog=cat).optimized
        scans = [s for s in plan.walk() if isinstance(s, IcebergScan) and s.files]
        return tuple(t.path for s in scans for t in s.files.data) + tuple(
            d.path for s in scans for d in s.files.deletes
        )

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scan_planning, "_plan_manifests", counted)
        full = files("SELECT * FROM m.t")
        assert files("SELECT * FROM m.t") == full and len(visits) == 1
        assert len(files("SELECT * FROM m.t WHERE p = 'a'")) == 1 and len(visits) == 2
        assert files("SELECT id FROM m.t") == full and len(visits) == 3
        first = w.refresh().scan().plan_files()[0].file
        w.commit(deletes=[w.position_delete_file({first.file_path: [0]}, first)])
        w.append(pa.table({"id": pa.array([4], pa.int64()), "p": ["c"]}))
        now = files("SELECT * FROM m.t")
        assert len(visits) == 4 and len(now) == len(full) + 2  # a data and a delete file
        assert files(f"SELECT * FROM m.t VERSION AS OF {old}") == full and len(visits) == 5
        assert files("SELECT * FROM m.t") == now and len(visits) == 5
        scan_planning.clear_manifest_cache(caches())
        assert files("SELECT * FROM m.t") == now and len(visits) == 6


# --- decoded manifests kept on disk for the next process (planner/manifest_store.py) ------


def _plans_reading(monkeypatch: pytest.MonkeyPatch, cat: Any, sql: str) -> tuple[Any, int]:
    """The scans' files of `sql` planned as a new process would (this process's caches
    cleared), and how many manifests it fetched and decoded."""
    from mor.api import plan_query
    from mor.planner import scan_planning
    from mor.planner.nodes import IcebergScan

    scan_planning.clear_manifest_cache(caches())
    decoded: list[int] = []
    real, real_list = scan_planning.decode_manifest, scan_planning.decode_manifest_list

    def decode(*args: Any, **kw: Any) -> Any:
        decoded.append(1)
        return real(*args, **kw)

    def decode_list(*args: Any, **kw: Any) -> Any:
        LISTS_DECODED.append(1)
        return real_list(*args, **kw)

    LISTS_DECODED.clear()
    with monkeypatch.context() as mp:
        mp.setattr(scan_planning, "decode_manifest", decode)
        mp.setattr(scan_planning, "decode_manifest_list", decode_list)
        plan = plan_query(sql, catalog=cat).optimized
    files = [s.files for s in plan.walk() if isinstance(s, IcebergScan) and s.files]
    return files, len(decoded)


LISTS_DECODED: list[int] = []  # manifest lists the last _plans_reading decoded


def _stored(root: Path, lists: bool = False) -> list[Path]:
    """The stored entries of manifests (`lists`: of manifest lists)."""
    import pickle

    from mor.planner.manifests import ListedManifest

    def is_list(p: Path) -> bool:
        try:
            entries = pickle.loads(p.read_bytes()[6 + 64 :])
        except Exception:  # noqa: BLE001 - a damaged entry: no list
            return False
        return bool(entries) and isinstance(entries[0], ListedManifest)

    return sorted(
        p
        for p in (root / "manifests").glob("*/*")
        if not p.name.endswith(".tmp") and is_list(p) == lists
    )


def test_a_second_process_plans_from_the_entries_the_first_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first plan decodes every manifest and stores its entries; a plan with this
    process's caches cleared (a new process) decodes none and plans the same files, deletes
    and sequence numbers. A new commit's manifests are decoded, the old ones still read back."""
    root = tmp_path / "cache"
    monkeypatch.setenv("MOR_CACHE_DIR", str(root))
    cat, w = _partitioned_by_p(tmp_path, "abc")
    first = w.refresh().scan().plan_files()[0].file
    w.commit(deletes=[w.position_delete_file({first.file_path: [0]}, first)])
    sql = "SELECT * FROM m.t WHERE id > 1"
    files, decoded = _plans_reading(monkeypatch, cat, sql)
    assert decoded == 4 and len(_stored(root)) == 4  # three data manifests, one of deletes
    assert LISTS_DECODED == [1] and len(_stored(root, lists=True)) == 1
    again, decoded = _plans_reading(monkeypatch, cat, sql)
    assert again == files and decoded == 0 and LISTS_DECODED == []  # the list read back too
    monkeypatch.setenv("MOR_MANIFEST_DISK_CACHE_MB", "0")  # off: decoded, nothing read back
    assert _plans_reading(monkeypatch, cat, sql) == (files, 4)
    monkeypatch.delenv("MOR_MANIFEST_DISK_CACHE_MB")
    import pyarrow as pa

    w.append(pa.table({"id": pa.array([7], pa.int64()), "p": ["d"]}))
    now, decoded = _plans_reading(monkeypatch, cat, sql)
    assert decoded == 1 and len(now[0].data) == len(files[0].data) + 1
    assert LISTS_DECODED == [1]  # the new snapshot's list


def test_a_stored_entry_is_never_trusted_for_another_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local file written anew at a path read before (a new modification time or size),
    and an entry that does not read back whole or comes from another format, are misses: the
    manifest is decoded again, the damaged entry removed. A cache folder others may write in
    is not used."""
    from mor.planner import manifest_store

    root = tmp_path / "cache"
    monkeypatch.setenv("MOR_CACHE_DIR", str(root))
    cat, w = _partitioned_by_p(tmp_path, "a")
    sql = "SELECT * FROM m.t"
    files, _ = _plans_reading(monkeypatch, cat, sql)
    (entry,) = _stored(root)
    # the same path, bytes of the same length, a new modification time: decoded again
    manifest = next(
        m.manifest_path for m in w.refresh().current_snapshot().manifests(w.refresh().io)
    )
    local = Path(manifest.removeprefix("file://").removeprefix("file:"))
    st = local.stat()
    os.utime(local, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert _plans_reading(monkeypatch, cat, sql) == (files, 1)
    assert len(_stored(root)) == 2  # stored under its new key; the old entry is left to trim
    # cut short, or another version's format: a miss, and removed
    for damaged in _stored(root) + _stored(root, lists=True):
        damaged.write_bytes(damaged.read_bytes()[:-7])
    assert _plans_reading(monkeypatch, cat, sql) == (files, 1) and LISTS_DECODED == [1]
    assert _plans_reading(monkeypatch, cat, sql) == (files, 0)  # stored whole again
    for other in _stored(root):
        other.write_bytes(b"MORM0\n" + other.read_bytes()[6:])
    assert _plans_reading(monkeypatch, cat, sql) == (files, 1)
    assert _plans_reading(monkeypatch, cat, sql) == (files, 0)
    # a folder group or others may write in: not used (an entry is a pickle)
    (root / "manifests").chmod(0o777)
    assert manifest_store.folder() is None
    assert _plans_reading(monkeypatch, cat, sql) == (files, 1)
    (root / "manifests").chmod(0o700)
    assert manifest_store.folder() == str(root / "manifests")
    assert entry.parent.exists()


def test_the_stored_entries_stay_within_their_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond `manifest_disk_cache_mb`, the least recently used entries are removed (to 80%
    of the bound), at the end of a plan that stored some; what remains still reads back."""
    from mor.planner import cache, manifest_store
    from mor.planner.settings import applied

    root = tmp_path / "cache"
    monkeypatch.setenv("MOR_CACHE_DIR", str(root))
    cat, _ = _partitioned_by_p(tmp_path, "abcdefgh")
    with applied(None):
        folder = manifest_store.folder()
        assert folder is not None
    _plans_reading(monkeypatch, cat, "SELECT * FROM m.t")
    manifests = _stored(root)
    stored = sorted(manifests + _stored(root, lists=True))
    sizes = sum(p.stat().st_size for p in stored)
    assert len(manifests) == 8 and len(stored) == 9
    for i, p in enumerate(stored):  # an order of use, oldest first
        os.utime(p, (1_000_000 + i, 1_000_000 + i))
    monkeypatch.setattr(manifest_store, "_state", {"written": 1, "trimmed": 0})
    bound_mb = sizes / 2 / (1024 * 1024)
    marker = Path(folder) / cache.TRIMMED
    marker.touch()  # another process trimmed the folder just now
    with applied(None):
        monkeypatch.setattr(
            manifest_store, "current", lambda: type("S", (), {"manifest_disk_cache_mb": bound_mb})
        )
        # a new process's first write, a trim by another process less than TRIM_EVERY ago:
        # the folder is not listed
        manifest_store.trim(folder)
        assert sorted(_stored(root) + _stored(root, lists=True)) == stored
        assert manifest_store._state == {"written": 1, "trimmed": 0}
        t = time.time() - cache.TRIM_EVERY - 1
        os.utime(marker, (t, t))
        manifest_store.trim(folder)
    assert time.time() - marker.stat().st_mtime < 60
    left = sorted(_stored(root) + _stored(root, lists=True))
    assert sum(p.stat().st_size for p in left) <= sizes * 0.4 + max(p.stat().st_size for p in left)
    assert left == stored[len(stored) - len(left) :]  # the most recently used kept
    monkeypatch.undo()
    monkeypatch.setenv("MOR_CACHE_DIR", str(root))
    files, decoded = _plans_reading(monkeypatch, cat, "SELECT * FROM m.t")
    assert decoded == 8 - len(set(left) & set(manifests))
    assert LISTS_DECODED == ([] if set(left) - set(manifests) else [1])


def test_processes_planning_at_once_share_the_stored_entries(tmp_path: Path) -> None:
    """Four processes plan the same table at the same time over one cache folder, twice in
    turn: every plan is the one planned with no cache, and no partial entry is ever read (each
    is written to a temporary file and renamed)."""
    import subprocess
    import sys

    cat, _ = _partitioned_by_p(tmp_path, "abcdefghij")
    root = tmp_path / "cache"
    script = (
        "import sys; from mor.api import default_catalog, plan_query\n"
        "from mor.planner.nodes import IcebergScan\n"
        f"cat = default_catalog({str(tmp_path / 'wh')!r})\n"
        "plan = plan_query('SELECT * FROM m.t WHERE id > 1', catalog=cat).optimized\n"
        "print(sorted(t.path for s in plan.walk() if isinstance(s, IcebergScan) and s.files "
        "for t in s.files.data))\n"
    )
    env = {**os.environ, "MOR_CACHE_DIR": str(root)}
    alone = subprocess.run(
        [sys.executable, "-c", script],
        env={**env, "MOR_MANIFEST_DISK_CACHE_MB": "0"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for _ in range(2):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True
            )
            for _ in range(4)
        ]
        outs = [p.communicate(timeout=120)[0] for p in procs]
        assert [p.returncode for p in procs] == [0] * 4
        assert outs == [alone] * 4
    assert len(_stored(root)) == 10 and not list(root.glob("manifests/*/*.tmp"))


def _long(v: int) -> bytes:
    """Avro's zigzag varint."""
    z, out = (v << 1) ^ (v >> 63), bytearray()
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _text(s: str) -> bytes:
    return _long(len(s.encode())) + s.encode()


def test_generated_reader_follows_blocks_given_by_size_and_skips_what_is_unread() -> None:
    """Arrays written in blocks whose counts are negative (their byte size follows, as Avro
    allows and Java's encoder may write), read and skipped; two records in one block; what
    it cannot follow (a codec) is left to fastavro."""
    pair = {"type": "record", "name": "kv", "fields": [
        {"name": "key", "type": "int"}, {"name": "value", "type": "long"}]}  # fmt: skip
    schema = {"type": "record", "name": "manifest_entry", "fields": [
        {"name": "status", "type": "int"},
        {"name": "snapshot_id", "type": ["null", "long"]},
        {"name": "data_file", "type": {"type": "record", "name": "r2", "fields": [
            {"name": "file_path", "type": "string"},
            {"name": "partition", "type": {"type": "record", "name": "r102", "fields": [
                {"name": "d", "type": ["null", {"type": "int", "logicalType": "date"}]}]}},
            {"name": "column_sizes", "type": ["null", {"type": "array", "items": pair}]},
            {"name": "value_counts", "type": ["null", {"type": "array", "items": "kv"}]},
            {"name": "split_offsets", "type": ["null", {"type": "array", "items": "long"}]},
        ]}},
    ]}  # fmt: skip
    sizes = _long(1) + _long(10) + _long(2) + _long(20)  # two pairs: (1, 10), (2, 20)
    counts = _long(3) + _long(30)  # one pair: (3, 30)

    def record(path: str, day: int) -> bytes:
        return (
            _long(1)  # status
            + _long(1) + _long(77)  # snapshot_id: the union's long
            + _text(path)
            + _long(1) + _long(day)  # partition d
            + _long(1) + _long(-2) + _long(len(sizes)) + sizes + _long(0)  # by size
            + _long(1) + _long(-1) + _long(len(counts)) + counts + _long(0)
            + _long(1) + _long(2) + _long(4) + _long(8) + _long(0)  # split_offsets [4, 8]
        )  # fmt: skip

    sync = bytes(range(16))
    block = record("a.parquet", 19000) + record("b.parquet", -1)
    meta = (
        _long(1)
        + _text("avro.schema")
        + _long(len(json.dumps(schema)))
        + json.dumps(schema).encode()
        + _long(0)
    )
    raw = b"Obj\x01" + meta + sync + _long(2) + _long(len(block)) + block + sync
    got, _ = avro_entries.records(raw)
    assert got == [
        {"status": 1, "snapshot_id": 77, "data_file": {
            "file_path": p, "partition": (d,), "value_counts": (3, 30)}}
        for p, d in (("a.parquet", 19000), ("b.parquet", -1))
    ]  # fmt: skip
    assert avro_entries.records(raw, metrics=False)[0][0]["data_file"] == {
        "file_path": "a.parquet",
        "partition": (19000,),
    }
    zstd = b"Obj\x01" + _long(2) + _text("avro.codec") + _text("zstandard") + meta[1:] + sync
    with pytest.raises(avro_entries.Unhandled, match="codec"):
        avro_entries.records(zstd + _long(2) + _long(len(block)) + block + sync)
    with pytest.raises(avro_entries.Unhandled, match="sync"):
        avro_entries.records(raw[:-1] + b"\xff")
