"""Fault injection: for each broken file or race, the one-line error or the exact rows.

Every fault is applied to a fresh copy of one small merge-on-read table:

    file A: ids 1-4  (position delete of row 0 -> id 1 gone)
    file B: ids 5-8
    equality delete id = 6 (after both files)
    live rows: 2, 3, 4, 5, 7, 8

An error must come through the CLI as exactly one line on stderr (exit code 1, nothing on
stdout), naming the file at fault; a fault that does not make the table unreadable must give
exactly the rows the spec says. None may give a partial or silently wrong result.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from mor import DataFileError, MorError, mor_errors, mor_sql
from mor.cli import main
from mor.planner.state import caches
from mor.writer.tables import TableWriter

# the legs beyond pyspark 3.5 classic that run this file (markers: pyproject.toml)
pytestmark = [pytest.mark.spark4, pytest.mark.connect]

SQL = "SELECT id FROM f.t ORDER BY id"
SPARK_MAJOR = int(__import__("pyspark").__version__.split(".")[0])
LIVE = [2, 3, 4, 5, 7, 8]
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "v", StringType(), required=False),
)


@dataclass
class Table:
    wh: Path
    catalog: Any
    writer: TableWriter
    a: Path  # data file with a position delete
    b: Path  # data file without one
    pos_delete: Path
    eq_delete: Path

    def snapshot(self) -> Any:
        snap = self.writer.refresh().current_snapshot()
        assert snap is not None
        return snap

    def manifests(self) -> list[Path]:
        return [local(m.manifest_path) for m in self.snapshot().manifests(self.writer.table.io)]


def local(path: str) -> Path:
    return Path(path.removeprefix("file://"))


def _rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]})


@pytest.fixture()
def table(tmp_path: Path) -> Table:
    return make_table(tmp_path)


def make_table(tmp_path: Path) -> Table:
    from mor.api import default_catalog

    wh = tmp_path / "wh"
    cat = default_catalog(str(wh))
    w = TableWriter(cat, "f.t", SCHEMA)
    _, (a,) = w.append(_rows([1, 2, 3, 4]))
    _, (b,) = w.append(_rows([5, 6, 7, 8]))
    pos = w.position_delete_file({a.file_path: [0]}, a)
    eq = w.equality_delete_file([1], [{1: 6}])
    w.commit(deletes=[pos, eq])
    return Table(
        wh,
        cat,
        w,
        local(a.file_path),
        local(b.file_path),
        local(pos.file_path),
        local(eq.file_path),
    )


def run_cli(t: Table, capsys: pytest.CaptureFixture[str], sql: str = SQL) -> tuple[int, str, str]:
    """`mor run` as a new process would run it: no manifest read before is cached (manifests
    are immutable, so a cached one is the committed content even after the file is damaged)."""
    from mor.physical.deletes.bitmaps import clear_position_cache
    from mor.planner.scan_planning import clear_manifest_cache

    clear_manifest_cache(caches())
    clear_position_cache(caches())
    code = main(["run", "-e", sql, "--format", "csv", "--warehouse", str(t.wh)])
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_one_line_error(
    t: Table, capsys: pytest.CaptureFixture[str], *needles: str, sql: str = SQL
) -> str:
    code, out, err = run_cli(t, capsys, sql)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 1 and out == "", (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("mor: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def assert_rows(t: Table, capsys: pytest.CaptureFixture[str], ids: list[int]) -> None:
    code, out, err = run_cli(t, capsys)
    assert code == 0, err
    assert out.splitlines() == ["id", *map(str, ids)]


def test_the_table_reads_before_any_fault(
    table: Table, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_rows(table, capsys, LIVE)


# --- metadata -------------------------------------------------------------------------------


def truncated_then_missing(
    t: Table,
    capsys: pytest.CaptureFixture[str],
    path: Path,
    truncated: tuple[str, ...],
    missing: tuple[str, ...],
    keep: int | None = None,
) -> None:
    """`path` cut short (to `keep` bytes, else half), then removed: each one line with its
    needles; then restored."""
    saved = path.read_bytes()
    try:
        path.write_bytes(saved[: len(saved) // 2 if keep is None else keep])
        assert_one_line_error(t, capsys, *truncated)
        path.unlink()
        assert_one_line_error(t, capsys, *missing)
    finally:
        path.write_bytes(saved)


def test_metadata_json_missing_or_truncated(
    table: Table, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = local(table.writer.refresh().metadata_location)
    truncated_then_missing(
        table, capsys, meta, ("f.t", "metadata JSON is invalid"), (meta.name, "is missing")
    )
    assert_rows(table, capsys, LIVE)


def test_manifest_list_missing_or_truncated(
    table: Table, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    ml = local(table.snapshot().manifest_list)
    truncated_then_missing(table, capsys, ml, (ml.name, "manifest list"), (ml.name,))
    assert_rows(table, capsys, LIVE)


def test_manifest_missing_or_truncated(
    table: Table, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    for manifest in table.manifests():
        truncated_then_missing(table, capsys, manifest, (manifest.name,), (manifest.name,))
    assert_rows(table, capsys, LIVE)


# --- data files -----------------------------------------------------------------------------


def same_size_parquet(like: Path, ids: list[int]) -> bytes:
    """A valid Parquet file holding `ids` (with the field ids of `like`) of exactly `like`'s
    size, padded in its string values. Nothing but checksums tells it apart."""
    target = like.stat().st_size
    schema = pq.read_schema(like).remove_metadata()
    out = like.with_suffix(".swap")
    size = 0
    for pad in range(0, 4096):
        values = [{"id": i, "v": f"x{i}"} for i in ids]
        values[-1]["v"] += "#" * pad
        rows = pa.Table.from_pylist(values, schema=schema)
        pq.write_table(rows, out, compression="none", use_dictionary=False, write_statistics=False)
        size = out.stat().st_size
        if size >= target:
            break
    data = out.read_bytes()
    out.unlink()
    assert size == target, f"no padding gives {target} bytes for {len(ids)} rows (got {size})"
    return data


@pytest.mark.parametrize("which", ["a", "b"])
def test_data_file_missing_or_truncated(
    which: str, table: Table, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = getattr(table, which)
    truncated_then_missing(table, capsys, path, (path.name, "replaced or truncated"), (path.name,))
    assert_rows(table, capsys, LIVE)


@pytest.mark.parametrize("ids", [[1, 2], [1, 2, 3, 4, 99, 100, 101]], ids=["fewer", "more"])
def test_data_file_replaced_by_another_of_a_different_size(
    ids: list[int], table: Table, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Read as if it were the committed file, it would lose rows (or add them) without a word,
    and the position delete would name other rows: refused by name before any row is read."""
    schema = pq.read_schema(table.a)
    pq.write_table(pa.Table.from_pylist([{"id": i, "v": "x"} for i in ids], schema=schema), table.a)
    assert_one_line_error(table, capsys, table.a.name, "bytes, but the table's metadata records")


def test_data_file_with_more_rows_than_recorded_at_the_same_size(
    table: Table, spark: Any, position_method: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The size check cannot see this one. Where positions are applied (file A, whichever
    method), a row past the recorded count stops the query: positions there were never
    checked, so that row cannot be called live. (In a file without position deletes, rows
    have no position to check: the same as a same-size swap, see docs/limitations.md.)"""
    table.a.write_bytes(same_size_parquet(table.a, [1, 2, 3, 4, 9]))
    assert_one_line_error(
        table, capsys, table.a.name, "has more rows than its metadata records (4)"
    )


def write_hadoop_crc(path: Path, chunk: int = 512) -> None:
    """The `.name.crc` file Hadoop's checksummed local file system keeps beside a file it
    writes: `crc\\0`, the chunk size, then a big-endian CRC-32 of each chunk."""
    import struct
    import zlib

    data = path.read_bytes()
    sums = b"".join(
        struct.pack(">I", zlib.crc32(data[i : i + chunk])) for i in range(0, len(data), chunk)
    )
    (path.parent / f".{path.name}.crc").write_bytes(b"crc\x00" + struct.pack(">i", chunk) + sums)


def test_data_file_failing_its_hadoop_checksum(
    table: Table, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A data file with a Hadoop `.crc` beside it and one byte flipped since (same size, so the
    size check passes): Spark's local file system refuses it; mor names the file."""
    write_hadoop_crc(table.b)
    assert (table.b.parent / f".{table.b.name}.crc").exists()
    assert_rows(table, capsys, LIVE)  # the checksum holds
    data = bytearray(table.b.read_bytes())
    data[8] ^= 0xFF  # inside the first page, past the magic
    table.b.write_bytes(bytes(data))
    assert_one_line_error(table, capsys, table.b.name, "fails its Hadoop checksum")


# --- delete files ---------------------------------------------------------------------------


def test_delete_files_missing(table: Table, spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    for path in (table.pos_delete, table.eq_delete):
        truncated_then_missing(table, capsys, path, (path.name,), (path.name,), keep=40)
    assert_rows(table, capsys, LIVE)


def test_position_delete_past_the_end_deletes_nothing(
    table: Table, spark: Any, position_method: str, capsys: pytest.CaptureFixture[str]
) -> None:
    w = table.writer
    like = next(f for f in _data_files(table) if local(f.file_path) == table.a)
    w.commit(deletes=[w.position_delete_file({like.file_path: [4, 1000, 1 << 40]}, like)])
    assert_rows(table, capsys, LIVE)


def _data_files(t: Table) -> list[DataFile]:
    io = t.writer.refresh().io
    return [
        e.data_file
        for m in t.snapshot().manifests(io)
        for e in m.fetch_manifest_entry(io)
        if e.data_file.content == DataFileContent.DATA
    ]


def _eq_delete_with(t: Table, column: pa.Array, key_type: Any) -> DataFile:
    """An equality delete on field id 1 whose file stores `column` (of its own type) as `id`."""
    field = pa.field("id", column.type, metadata={b"PARQUET:field_id": b"1"})
    from mor.writer.files import write_delete_file

    return write_delete_file(
        t.writer.table,
        pa.table([column], schema=pa.schema([field])),
        Schema(NestedField(1, "id", key_type, required=False)),
        DataFileContent.EQUALITY_DELETES,
        Record(),
        0,
        [1],
    )


@pytest.mark.parametrize(
    "column,key_type,stored",
    [
        (pa.array([3], pa.int32()), IntegerType(), "int"),
        (pa.array(["3"], pa.string()), StringType(), "string"),
    ],
    ids=["int", "string"],
)
def test_equality_delete_whose_key_type_differs_is_refused(
    column: pa.Array,
    key_type: Any,
    stored: str,
    table: Table,
    spark: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A key column of a type the table's `id` never had (a promotion in the table's history
    is read and cast: tests/test_evolution.py) is refused by name; Spark's own error names no
    file, so mor checks the plan's footers once the query failed."""
    d = _eq_delete_with(table, column, key_type)
    table.writer.commit(deletes=[d])
    if stored == "int" and SPARK_MAJOR >= 4:
        # Spark 4's Parquet reader widens int to bigint as Iceberg's Java reader does: the
        # delete of 3 applies
        assert_rows(table, capsys, [2, 4, 5, 7, 8])
        return
    assert_one_line_error(
        table,
        capsys,
        f"equality delete file {d.file_path}",
        f"stores column id (field id 1) as {stored}, but the table's type is long",
    )


@pytest.mark.parametrize("fmt", [FileFormat.ORC, FileFormat.AVRO])
@pytest.mark.parametrize(
    "content", [DataFileContent.POSITION_DELETES, DataFileContent.EQUALITY_DELETES]
)
def test_delete_file_in_another_format_is_refused(
    fmt: FileFormat,
    content: DataFileContent,
    table: Table,
    spark: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ext = fmt.value.lower()
    path = table.wh / f"delete.{ext}"
    path.write_bytes(b"not read")
    f = DataFile.from_args(
        content=content,
        file_path=f"file://{path}",
        file_format=fmt,
        partition=table.writer.data_files(_rows([1]))[0].partition,
        record_count=1,
        file_size_in_bytes=path.stat().st_size,
        equality_ids=[1] if content == DataFileContent.EQUALITY_DELETES else None,
    )
    f.spec_id = 0
    table.writer.commit(deletes=[f])
    assert_one_line_error(table, capsys, f"delete.{ext} is {fmt.value}", "only Parquet")


# --- races ----------------------------------------------------------------------------------


def test_concurrent_commit_while_a_query_runs(table: Table, spark: Any) -> None:
    """A DataFrame reads the snapshot it was planned on: commits after planning (appends,
    position and equality deletes) change nothing in it; two collects agree; a new query
    sees the new snapshot."""
    df = mor_sql(SQL, catalog=table.catalog, spark=spark)
    first = [r.id for r in df.collect()]
    w = table.writer
    _, (c,) = w.append(_rows([10, 11]))
    like = next(f for f in _data_files(table) if local(f.file_path) == table.b)
    w.commit(
        deletes=[
            w.position_delete_file({like.file_path: [0]}, like),  # id 5
            w.equality_delete_file([1], [{1: 2}, {1: 10}]),
        ]
    )
    second = [r.id for r in df.collect()]
    assert first == second == LIVE
    after = [r.id for r in mor_sql(SQL, catalog=table.catalog, spark=spark).collect()]
    assert after == [3, 4, 7, 8, 11]


def test_a_file_removed_after_planning_fails_the_query_not_the_rows(
    table: Table, spark: Any
) -> None:
    """A data file deleted between planning and running (an `expire_snapshots` elsewhere) is
    an error when the DataFrame runs, never a result without its rows."""
    df = mor_sql(SQL, catalog=table.catalog, spark=spark)
    shutil.move(table.b, table.b.with_suffix(".gone"))
    try:
        with pytest.raises(DataFileError, match=f"^file missing: .*{table.b.name}$") as e:
            with mor_errors(df):
                df.collect()
        assert e.value.__cause__ is not None  # Spark's exception, for --debug and tracebacks
    finally:
        shutil.move(table.b.with_suffix(".gone"), table.b)
    # (Spark keeps the failed job's result for that DataFrame; a new query reads the file)
    assert [r.id for r in mor_sql(SQL, catalog=table.catalog, spark=spark).collect()] == LIVE


# --- the same faults through the API: MorError subclasses -----------------------------------


def test_api_users_get_mor_errors_from_failed_actions(
    table: Table, spark: Any, position_method: str
) -> None:
    """A guard that fails inside Spark's tasks reaches `mor_errors` users as DataFileError
    naming the file; a failure mor cannot attribute passes through unchanged."""
    table.a.write_bytes(same_size_parquet(table.a, [1, 2, 3, 4, 9]))
    from mor.physical.deletes.bitmaps import clear_position_cache
    from mor.planner.scan_planning import clear_manifest_cache

    clear_manifest_cache(caches())
    clear_position_cache(caches())
    df = mor_sql(SQL, catalog=table.catalog, spark=spark)
    with pytest.raises(DataFileError) as e:
        with mor_errors():
            df.collect()
    assert table.a.name in str(e.value)
    assert "has more rows than its metadata records (4)" in str(e.value)
    assert "\n" not in str(e.value)
    # not mor's failure: Spark's own error, unchanged
    boom = mor_sql(
        "SELECT raise_error('the user asked for this') AS x FROM f.t",
        catalog=table.catalog,
        spark=spark,
    )
    with pytest.raises(Exception, match="the user asked for this") as other:
        with mor_errors(boom):
            boom.collect()
    assert not isinstance(other.value, MorError)


def test_api_column_type_mismatch_is_named_with_the_dataframe(table: Table, spark: Any) -> None:
    """Spark names no file when a Parquet column has another type: given the DataFrame,
    mor_errors checks that query's files and names the one at fault."""
    if SPARK_MAJOR >= 4:
        column, key_type = pa.array(["3"], pa.string()), StringType()
    else:
        column, key_type = pa.array([3], pa.int32()), IntegerType()
    d = _eq_delete_with(table, column, key_type)
    table.writer.commit(deletes=[d])
    joined = {"resolve_equality_deletes": False}  # the anti-join: the failure is the action's
    df = mor_sql(SQL, catalog=table.catalog, spark=spark, settings=joined)
    with pytest.raises(DataFileError, match=f"equality delete file {d.file_path}"):
        with mor_errors(df):
            df.collect()
    # resolving (at the first read here) runs a job of its own while mor_sql builds the
    # query: named there
    with pytest.raises(DataFileError, match=f"equality delete file {d.file_path}"):
        mor_sql(SQL, catalog=table.catalog, spark=spark, settings={"resolve_at_read": 1})
