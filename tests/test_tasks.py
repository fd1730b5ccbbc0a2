"""What a row-level write's Spark tasks run (physical/tasks/), without Spark: the Roaring
codec against pyroaring, Iceberg's partition transforms against pyiceberg's, the two stages
of the write called on Arrow batches, and the rule that lets them run on executors that have
pyarrow alone (they import nothing else, and ship by value)."""

from __future__ import annotations

import ast
import datetime as dt
import decimal
import json
import random
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.transforms import parse_transform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)
from pyiceberg.utils.datetime import date_to_days, datetime_to_micros, time_to_micros
from pyroaring import BitMap64

from mor.physical.deletes.dv import decode
from mor.physical.tasks import MODULES, roaring, transforms
from mor.physical.tasks.row_files import RECORD, merge_stage, rows_stage

pytestmark = [pytest.mark.check]

ROOT = Path(__file__).resolve().parent.parent


# --- deletion vectors ------------------------------------------------------------------------


def _positions(rng: random.Random) -> list[int]:
    """Positions of every shape a container takes: sparse (array), dense (bitmap), runs, past
    2^32 (several 32-bit bitmaps) and up to 2^63 - 1."""
    shape = rng.choice(["sparse", "dense", "runs", "wide", "edge"])
    if shape == "sparse":
        return [rng.randrange(1 << 20) for _ in range(rng.randrange(1, 5000))]
    if shape == "dense":
        return [rng.randrange(70_000) for _ in range(rng.randrange(4097, 60_000))]
    if shape == "runs":
        out = []
        for _ in range(rng.randrange(1, 50)):
            start = rng.randrange(1 << 22)
            out += range(start, start + rng.randrange(1, 9000))
        return out
    if shape == "wide":
        return [rng.randrange(1 << 40) for _ in range(rng.randrange(1, 3000))]
    return [0, 65535, 65536, (1 << 32) - 1, 1 << 32, (1 << 63) - 1]


def test_roaring_reads_and_writes_what_pyroaring_does() -> None:
    """Every bitmap mor's tasks write reads back in pyroaring as the same positions, and
    every bitmap pyroaring writes (run-length encoded or not) reads in mor's tasks the same;
    the sizes are the smallest form's, as CRoaring's run-optimized ones."""
    rng = random.Random(7)
    for _ in range(60):
        values = sorted(set(_positions(rng)))
        arr = pa.array(values, pa.int64())
        mine = roaring.encode64(arr)
        assert list(BitMap64.deserialize(mine)) == values
        assert roaring.decode64(mine).to_pylist() == values
        theirs = BitMap64(values)
        assert roaring.decode64(theirs.serialize()).to_pylist() == values
        theirs.run_optimize()
        assert roaring.decode64(theirs.serialize()).to_pylist() == values
        assert len(mine) <= len(BitMap64(values).serialize())
    assert roaring.decode64(roaring.encode64(pa.array([], pa.int64()))).to_pylist() == []


def test_a_deletion_vector_blob_is_the_specs() -> None:
    """The blob (length, magic, bitmap, CRC) reads in the driver's reader (pyroaring), the
    Puffin file names each blob's place, and damage is refused by name."""
    positions = pa.array([3, 9, 70_000, 1 << 33], pa.int64())
    blob = roaring.dv_blob(positions)
    assert decode(blob, "x", 4).to_pylist() == positions.to_pylist()
    assert roaring.dv_positions(blob, "x", 4).to_pylist() == positions.to_pylist()
    data, placed = roaring.puffin_file([("s3://b/t/d1.parquet", blob, 4)], "test")
    ((offset, length),) = placed
    assert data[:4] == b"PFA1" and data[-4:] == b"PFA1" and data[offset : offset + length] == blob
    footer = json.loads(data[offset + length + 4 : -12])
    assert footer["blobs"][0]["properties"] == {
        "referenced-data-file": "s3://b/t/d1.parquet",
        "cardinality": "4",
    }
    with pytest.raises(ValueError, match="CRC-32 mismatch"):
        roaring.dv_positions(blob[:-1] + bytes([blob[-1] ^ 1]), "the vector")
    with pytest.raises(ValueError, match="holds 4 positions, its manifest entry records 5"):
        roaring.dv_positions(blob, "the vector", 5)


# --- partition transforms -------------------------------------------------------------------


def _values(rng: random.Random, t: Any) -> list[Any]:
    epoch = dt.datetime(1970, 1, 1)
    utc = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)

    def micros() -> dt.timedelta:
        return dt.timedelta(microseconds=rng.randint(-(2**50), 2**50))

    def dec() -> decimal.Decimal:
        digits = rng.randint(-(10 ** (t.precision - 1)), 10 ** (t.precision - 1))
        return decimal.Decimal(digits).scaleb(-t.scale, context=decimal.Context(prec=80))

    gen = {
        IntegerType: lambda: rng.randint(-(2**31), 2**31 - 1),
        LongType: lambda: rng.randint(-(2**63), 2**63 - 1),
        DateType: lambda: dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-40_000, 40_000)),
        TimeType: lambda: dt.time(rng.randint(0, 23), rng.randint(0, 59), 0, rng.randint(0, 999)),
        TimestampType: lambda: epoch + micros(),
        TimestamptzType: lambda: utc + micros(),
        StringType: lambda: "".join(rng.choice("ab日本é€x") for _ in range(rng.randint(0, 9))),
        BinaryType: lambda: bytes(rng.randrange(256) for _ in range(rng.randint(0, 9))),
        FixedType: lambda: bytes(rng.randrange(256) for _ in range(5)),
        UUIDType: lambda: uuid.UUID(int=rng.getrandbits(128)),
        DecimalType: dec,
        BooleanType: lambda: rng.random() < 0.5,
        DoubleType: lambda: rng.random() * 1e6 - 5e5,
    }[type(t)]
    return [gen() if rng.random() > 0.1 else None for _ in range(300)]


def _internal(t: Any, v: Any) -> Any:
    if v is None:
        return None
    if isinstance(t, DateType):
        return date_to_days(v)
    if isinstance(t, TimeType):
        return time_to_micros(v)
    if isinstance(t, (TimestampType, TimestamptzType)):
        return datetime_to_micros(v)
    return v


@pytest.mark.parametrize(
    "t",
    [
        IntegerType(), LongType(), DateType(), TimeType(), TimestampType(), TimestamptzType(),
        StringType(), BinaryType(), FixedType(5), UUIDType(), DecimalType(38, 4),
        DecimalType(9, 2), BooleanType(), DoubleType(),
    ],
    ids=str,
)  # fmt: skip
def test_transforms_are_pyicebergs(t: Any) -> None:
    """Each transform of each type, applied to a column as pyiceberg's Arrow type holds it,
    gives pyiceberg's value for every row (NULLs, negative dates and times, multi-byte
    characters, decimals of 38 digits included)."""
    rng = random.Random(str(t))
    arrow_type = schema_to_pyarrow(Schema(NestedField(1, "c", t, required=False)))[0].type
    values = _values(rng, t)
    if isinstance(t, UUIDType):
        column = pa.array([None if v is None else v.bytes for v in values], pa.binary(16))
    else:
        column = pa.array(values, arrow_type)
        values = column.to_pylist()
    checked = 0
    for name in ("identity", "bucket[16]", "bucket[1000]", "truncate[3]", "truncate[10]",
                 "year", "month", "day", "hour", "void"):  # fmt: skip
        transform = parse_transform(name)
        if not transform.can_transform(t):
            continue
        fn = transform.transform(t)
        want = [fn(_internal(t, v)) for v in values]
        got = transforms.apply(name, str(t), column).to_pylist()
        if isinstance(t, UUIDType) and name == "identity":
            got = [None if g is None else uuid.UUID(bytes=g) for g in got]
        assert got == want, name
        checked += 1
    assert checked >= 2


def test_murmur3_without_mmh3_is_mmh3s(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pure-Python murmur3 an executor without mmh3 uses gives mmh3's hashes."""
    import mmh3

    rng = random.Random(3)
    samples = [bytes(rng.randrange(256) for _ in range(n)) for n in range(0, 40)]
    monkeypatch.setitem(sys.modules, "mmh3", None)
    for data in samples:
        assert transforms.murmur3_bytes(data) == mmh3.hash(data, 0, signed=False)


# --- the two stages ---------------------------------------------------------------------------

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "p", StringType()),
    NestedField(
        3, "s", StructType(NestedField(4, "a", IntegerType()), NestedField(5, "b", StringType()))
    ),
    NestedField(6, "l", ListType(7, LongType())),
    NestedField(8, "m", MapType(9, StringType(), 10, DoubleType())),
    NestedField(11, "u", UUIDType()),
    NestedField(12, "f", FixedType(3)),
    NestedField(13, "d", DecimalType(10, 2)),
    NestedField(14, "ts", TimestamptzType()),
)  # fmt: skip


def _spark_batch(n: int) -> pa.Table:
    """Rows as Spark's Arrow conversion gives them (uuid as text, fixed as binary, its own
    list and map field names, the session's time zone)."""
    return pa.table(
        {
            "_file": ["a.parquet"] * (n // 2) + ["b.parquet"] * (n - n // 2),
            "_pos": pa.array([(i * 7) % n for i in range(n)], pa.int64()),
            "id": pa.array(range(n), pa.int64()),
            "p": [["x", "y", "z"][i % 3] for i in range(n)],
            "s": pa.array(
                [None if i % 4 == 1 else {"a": i, "b": None if i % 3 else "q"} for i in range(n)],
                pa.struct([("a", pa.int32()), ("b", pa.string())]),
            ),
            "l": pa.array(
                [None if i % 5 == 0 else list(range(i % 3)) for i in range(n)], pa.list_(pa.int64())
            ),  # fmt: skip
            "m": pa.array(
                [[("k", float(i))] if i % 2 else [] for i in range(n)],
                pa.map_(pa.string(), pa.float64()),
            ),  # fmt: skip
            "u": [str(uuid.UUID(int=i)) for i in range(n)],
            "f": [bytes([i % 256]) * 3 for i in range(n)],
            "d": pa.array([decimal.Decimal(i).scaleb(-2) for i in range(n)], pa.decimal128(10, 2)),
            "ts": pa.array(
                [
                    dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(hours=i)
                    for i in range(n)
                ],
                pa.timestamp("us", tz="Europe/Paris"),
            ),  # fmt: skip
            "_row_id": pa.array([None if i % 6 == 0 else 100 + i for i in range(n)], pa.int64()),
        }
    )


def _args(tmp_path: Path, **more: Any) -> dict[str, Any]:
    target = schema_to_pyarrow(SCHEMA).append(
        pa.field("_row_id", pa.int64(), metadata={b"PARQUET:field_id": b"2147483540"})
    )
    return {
        "kind": "UPDATE",
        "fs": pafs.LocalFileSystem(),
        "folder": str(tmp_path / "w"),
        "schema": target.serialize().to_pybytes(),
        "table": "db.t",
        "partition": [("p", "identity", "string", ["p"]), ("b", "bucket[4]", "long", ["id"])],
        "sort": [("identity", "long", ["id"], True, False)],
        "codec": "zstd",
        "target_bytes": 1 << 20,
        **more,
    }


def _records(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    return pa.Table.from_batches(batches, schema=RECORD).to_pylist() if batches else []


def test_stage_one_writes_rows_as_the_table_types_them(tmp_path: Path) -> None:
    """New rows land in one file per partition (identity and bucket, by the transforms),
    sorted by the sort order (id descending), every column in the table's type with its
    field id: a uuid's text as its 16 bytes, a fixed column's binary, lists, maps and structs
    with the schema's field names, timestamps in UTC; `_row_id` as each row had it."""
    rows = _spark_batch(24)
    out = _records(list(rows_stage(_args(tmp_path))(iter(rows.to_batches(max_chunksize=5)))))
    data = [r for r in out if r["kind"] == "data"]
    positions = {
        r["file"]: pq.read_table(tmp_path / "w" / r["name"]).column("pos").to_pylist()
        for r in out
        if r["kind"] == "delete_file"
    }
    (counts,) = [r for r in out if r["kind"] == "counts"]
    assert counts["updated"] == 24 and counts["inserted"] == counts["deleted"] == 0
    assert sorted(positions["a.parquet"] + positions["b.parquet"]) == sorted(
        rows.column("_pos").to_pylist()
    )
    seen = 0
    for r in data:
        t = pq.read_table(tmp_path / "w" / r["name"])
        ids = t.column("id").to_pylist()
        assert ids == sorted(ids, reverse=True) and r["rows"] == len(ids)
        p, bucket = json.loads(r["partition"])
        assert set(t.column("p").to_pylist()) == {p}
        assert set(transforms.apply("bucket[4]", "long", t.column("id")).to_pylist()) == {bucket}
        by_id = {i: j for j, i in enumerate(rows.column("id").to_pylist())}
        for got in t.to_pylist():
            want = rows.slice(by_id[got["id"]], 1).to_pylist()[0]
            assert got["u"] == uuid.UUID(want["u"]) and got["f"] == want["f"]
            assert got["s"] == want["s"] and got["l"] == want["l"] and got["d"] == want["d"]
            assert (got["m"] or []) == (want["m"] or []) and got["_row_id"] == want["_row_id"]
            assert got["ts"] == want["ts"]
        schema = pq.ParquetFile(tmp_path / "w" / r["name"]).schema_arrow
        assert schema.field("u").metadata[b"PARQUET:field_id"] == b"11"
        assert schema.field("l").type.value_field.metadata[b"PARQUET:field_id"] == b"7"
        assert schema.field("m").type.key_field.metadata[b"PARQUET:field_id"] == b"9"
        seen += len(ids)
    assert seen == 24


def test_an_unpartitioned_append_conforms_each_row_group_as_the_table_types_it(
    tmp_path: Path,
) -> None:
    """An append into an unpartitioned table holds Spark's batches as sent and conforms them
    once per row group: every column typed as the table's (uuid text as 16 bytes, fixed from
    binary, nested field names and ids, the zone dropped from the timestamp's type), NaN
    counts per file, files rolled at the target size, and a bad value still one line naming
    the column, whichever batch holds it."""
    from mor.physical.tasks.append_files import append_stage

    n = 600
    rows = _spark_batch(n).drop_columns(["_file", "_pos", "_row_id"])
    floats = pa.array([float("nan") if i % 7 == 0 else i / 3 for i in range(n)], pa.float64())
    rows = rows.append_column("v", floats)
    target = schema_to_pyarrow(SCHEMA).append(
        pa.field("v", pa.float64(), metadata={b"PARQUET:field_id": b"15"})
    )
    args = {
        **_args(tmp_path),
        "schema": target.serialize().to_pybytes(),
        "partition": [],
        "row_group_bytes": 4 << 10,  # several row groups a file, several files
        "target_bytes": 24 << 10,
    }
    out = _records(list(append_stage(args)(iter(rows.to_batches(max_chunksize=25)))))
    data = [r for r in out if r["kind"] == "data"]
    assert len(data) > 1 and out[-1]["inserted"] == n
    got = pa.concat_tables([pq.read_table(tmp_path / "w" / r["name"]) for r in data])
    assert got.num_rows == n == sum(r["rows"] for r in data)
    assert got.column("u").to_pylist() == [uuid.UUID(int=i) for i in range(n)]
    assert got.column("f").to_pylist() == rows.column("f").to_pylist()
    assert got.column("id").to_pylist() == list(range(n))
    utc = rows.column("ts").cast(pa.timestamp("us", "UTC"))
    assert got.column("ts").to_pylist() == utc.to_pylist()
    assert got.column("s").to_pylist() == rows.column("s").to_pylist()
    nan_ids = {int(k) for r in data for k in json.loads(r["metrics"])["nan"]}
    assert nan_ids == {15}  # a map's doubles are not counted, as Iceberg's writer counts
    assert sum(json.loads(r["metrics"])["nan"]["15"] for r in data) == len(range(0, n, 7))
    for r in data:
        f = pq.ParquetFile(tmp_path / "w" / r["name"])
        assert f.metadata.num_row_groups > 1 and f.schema_arrow.field("u").metadata == {
            b"PARQUET:field_id": b"11"
        }
        assert f.schema_arrow.field("m").type.item_field.metadata[b"PARQUET:field_id"] == b"10"
        v = f.read().column("v")
        assert json.loads(r["metrics"])["nan"]["15"] == pc.sum(pc.is_nan(v)).as_py()
    bad = [rows.slice(0, 100), rows.slice(100, 100)]
    ids = bad[1].column("id").to_pylist()
    bad[1] = bad[1].set_column(
        bad[1].schema.get_field_index("id"), "id", pa.array([None, *ids[1:]], pa.int64())
    )
    batches = [b for t in bad for b in t.to_batches(max_chunksize=25)]
    with pytest.raises(ValueError, match="mor: db.t: column id is NOT NULL"):
        list(append_stage({**args, "folder": str(tmp_path / "x")})(iter(batches)))
    wrong = rows.set_column(rows.schema.get_field_index("u"), "u", pa.array(["nope"] * n))
    with pytest.raises(ValueError, match="mor: db.t: column u .*'nope' is not a UUID"):
        list(append_stage({**args, "folder": str(tmp_path / "y")})(iter(wrong.to_batches(50))))


def test_stage_one_refuses_values_the_columns_cannot_hold(tmp_path: Path) -> None:
    rows = _spark_batch(4)
    bad_fixed = rows.set_column(rows.schema.get_field_index("f"), "f", pa.array([b"ab"] * 4))
    with pytest.raises(ValueError, match=r"mor: db.t: column f .* 2 bytes for fixed\[3\]"):
        list(rows_stage(_args(tmp_path))(iter(bad_fixed.to_batches())))
    bad_uuid = rows.set_column(rows.schema.get_field_index("u"), "u", pa.array(["nope"] * 4))
    with pytest.raises(ValueError, match="mor: db.t: column u .*'nope' is not a UUID"):
        list(rows_stage(_args(tmp_path))(iter(bad_uuid.to_batches())))
    null_id = rows.set_column(rows.schema.get_field_index("id"), "id", pa.nulls(4, pa.int64()))
    with pytest.raises(ValueError, match="mor: db.t: column id is NOT NULL"):
        list(rows_stage(_args(tmp_path))(iter(null_id.to_batches())))


def _deleting(tmp_path: Path, rows: list[tuple[str, list[int]]], **more: Any) -> list:
    """The records of one task of a DELETE's rows query over (data file, positions)."""
    batch = pa.table(
        {
            "_file": [f for f, ps in rows for _ in ps],
            "_pos": pa.array([p for _, ps in rows for p in ps], pa.int64()),
        }
    )
    args = {"kind": "DELETE", "fs": pafs.LocalFileSystem(), "folder": str(tmp_path), "table": "t",
            **more}  # fmt: skip
    return _records(list(rows_stage(args)(iter(batch.to_batches(max_chunksize=2)))))


def test_each_data_files_positions_are_written_once(tmp_path: Path) -> None:
    """v2: one position delete file per data file, naming it alone, positions sorted and each
    once; v3: one vector per data file holding its new positions and every position its
    current vector and position delete files delete, the task's vectors in one Puffin file."""
    rows = [("a", [5, 1]), ("b", [0, 2]), ("a", [3, 5])]
    v2 = _deleting(tmp_path / "v2", rows)
    files = {r["file"]: r for r in v2 if r["kind"] == "delete_file"}
    (counts,) = [r for r in v2 if r["kind"] == "counts"]
    assert counts["deleted"] == 6 and set(files) == {"a", "b"}
    for f, want in (("a", [1, 3, 5]), ("b", [0, 2])):
        t = pq.read_table(tmp_path / "v2" / files[f]["name"]).to_pylist()
        assert t == [{"file_path": f, "pos": p} for p in want] and files[f]["deleted"] == len(want)
    old = roaring.dv_blob(pa.array([7, 8], pa.int64()))
    (tmp_path / "old.puffin").write_bytes(b"PFA1" + old)
    pq.write_table(pa.table({"file_path": ["b", "c"], "pos": pa.array([9, 4], pa.int64())}),
                   tmp_path / "pos.parquet")  # fmt: skip
    current = {
        "a": [("l", str(tmp_path / "old.puffin"), 4, len(old), 2)],
        "b": [("l", str(tmp_path / "pos.parquet"), None, None, None)],
    }
    fs = pafs.LocalFileSystem()
    written = _deleting(tmp_path / "v3", rows, v3=True, current=current, filesystems={"l": fs})
    v3 = [r for r in written if r["kind"] == "dv"]
    assert len({r["name"] for r in v3}) == 1  # one Puffin file for the task
    for r in v3:
        raw = (tmp_path / "v3" / r["name"]).read_bytes()
        got = decode(raw[r["offset"] : r["offset"] + r["length"]], "x", r["rows"]).to_pylist()
        assert got == {"a": [1, 3, 5, 7, 8], "b": [0, 2, 9]}[r["file"]]
        assert r["deleted"] == {"a": 3, "b": 2}[r["file"]]


def test_a_data_files_positions_from_several_tasks_are_joined(tmp_path: Path) -> None:
    """Two tasks' files for one data file (a file Spark split) read back and joined into the
    one a single task would have written: v2 one delete file, v3 one vector holding the
    current positions too, each position counted once."""
    fs = pafs.LocalFileSystem()
    old = roaring.dv_blob(pa.array([7], pa.int64()))
    (tmp_path / "old.puffin").write_bytes(b"PFA1" + old)
    for v3 in (False, True):
        folder = tmp_path / f"v{3 if v3 else 2}"
        more: dict[str, Any] = {"v3": v3}
        if v3:
            where = str(tmp_path / "old.puffin")
            more |= {"current": {"a": [("l", where, 4, len(old), 1)]}, "filesystems": {"l": fs}}
        parts = _deleting(folder, [("a", [1, 4])], **more)
        parts += _deleting(folder, [("a", [4, 9])], **more)
        parts = [r for r in parts if r["kind"] in ("delete_file", "dv")]
        assert len(parts) == 2
        args = {"fs": fs, "folder": str(folder), "table": "t", **more}
        batches = [pa.RecordBatch.from_pylist([r], schema=RECORD) for r in parts]
        (joined,) = _records(list(merge_stage(args)(iter(batches))))
        if v3:
            raw = (folder / joined["name"]).read_bytes()
            blob = raw[joined["offset"] : joined["offset"] + joined["length"]]
            assert decode(blob, "x", joined["rows"]).to_pylist() == [1, 4, 7, 9]
        else:
            assert pq.read_table(folder / joined["name"]).column("pos").to_pylist() == [1, 4, 9]
        assert joined["deleted"] == 3


def test_a_target_row_matched_twice_stops_a_merge(tmp_path: Path) -> None:
    """Spark's cardinality rule: a target row two source rows match, within a task and
    where two tasks' matched positions of a data file meet."""
    merge = {"kind": "MERGE", "check": True, "fs": pafs.LocalFileSystem(),
             "folder": str(tmp_path), "table": "db.t"}  # fmt: skip

    def task(*positions: int) -> list:
        batch = pa.table(
            {
                "_file": ["a"] * len(positions),
                "_pos": pa.array(positions, pa.int64()),
                "_mor_act": pa.array([2] * len(positions), pa.int8()),
                "_mor_matched": [True] * len(positions),
            }
        )
        return list(rows_stage(merge)(iter(batch.to_batches())))

    with pytest.raises(ValueError, match="position 4 of a.*MERGE_CARDINALITY_VIOLATION"):
        task(4, 4)
    records = [r for r in _records(task(4) + task(4, 6)) if r["kind"] == "delete_file"]
    batches = [pa.RecordBatch.from_pylist([r], schema=RECORD) for r in records]
    with pytest.raises(ValueError, match="MERGE_CARDINALITY_VIOLATION"):
        list(merge_stage(merge)(iter(batches)))


# --- what the executors need --------------------------------------------------------------


def test_the_task_modules_import_the_standard_library_and_pyarrow_only() -> None:
    """Executors run these modules without mor, pyiceberg or pyroaring installed: every
    import is of the standard library, pyarrow, pyspark (TaskContext), mmh3 (optional, a
    fallback beside it) or another task module."""
    allowed = {"pyarrow", "pyspark", "mmh3", "mor"} | set(sys.stdlib_module_names)
    for name in MODULES:
        tree = ast.parse((ROOT / "physical" / "tasks" / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module]
            else:
                continue
            for m in mods:
                assert m.split(".")[0] in allowed, f"{name}.py imports {m}"
                if m.startswith("mor"):
                    assert m.startswith("mor.physical.tasks."), f"{name}.py imports {m}"


def test_a_stage_runs_where_only_pyarrow_is(tmp_path: Path) -> None:
    """The stage functions, pickled as Spark ships them (by value), run in a Python that
    cannot import mor, pyiceberg or pyroaring."""
    from pyspark import cloudpickle

    from mor.physical.tasks import by_value

    by_value()
    task = rows_stage(_args(tmp_path, kind="DELETE"))
    batch = _spark_batch(6).select(["_file", "_pos"])
    (tmp_path / "task.pkl").write_bytes(cloudpickle.dumps(task))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_table(batch)
    (tmp_path / "rows.arrow").write_bytes(sink.getvalue().to_pybytes())
    script = f"""
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('mor', 'pyiceberg', 'pyroaring'):
            raise ImportError('no ' + name + ' on this executor')
sys.meta_path.insert(0, Refuse())
import pickle, pyarrow as pa
task = pickle.loads(open({str(tmp_path / "task.pkl")!r}, 'rb').read())
rows = pa.ipc.open_stream(open({str(tmp_path / "rows.arrow")!r}, 'rb').read()).read_all()
out = pa.Table.from_batches(list(task(iter(rows.to_batches()))))
print(sorted(out.column('kind').to_pylist()))
"""
    got = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "['counts', 'delete_file', 'delete_file']"
