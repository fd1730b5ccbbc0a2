"""compact: data files rewritten with every delete applied, one atomic commit.

Against a naive evaluation of the spec rules (tests/test_semantics.py's random histories):
after a compaction the new snapshot reads as the old one did, every earlier snapshot still
reads as before, and pyiceberg (no delete left) reads the same. The metadata is what Iceberg's
`RewriteFiles` writes: the new data files keep the data sequence number of the snapshot read
(so an equality delete committed meanwhile still applies to their rows: tested with one
landing right before the commit), their Parquet columns carry the Iceberg field ids, their
manifest entries the column bounds pruning needs.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.manifest import DataFileContent, ManifestEntryStatus
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import ListType, LongType, NestedField, StringType
from test_maintenance import LIVE, _cli, _entries, _files, _ids, _keys, _rows, _two_files
from test_semantics import PART_SPEC, SCHEMA, Reference, _history, op

from helpers import landing
from legs import soak_marks
from mor import MorError, mor_sql
from mor.maintenance import compact
from mor.planner.errors import UnsupportedError
from mor.writer.conflicts import ConflictError
from mor.writer.tables import TableWriter

ALL = {
    "delete_file_threshold": 1,
    "min_input_files": 1,
}  # every file with a delete, every small one


def _data(table: Any) -> list[Any]:
    snap = table.current_snapshot()
    return [
        e.data_file
        for _, e in _entries(table, snap)
        if e.status != ManifestEntryStatus.DELETED and e.data_file.content == DataFileContent.DATA
    ]


# on the Connect leg too: the compaction job is the one DataFrame write mor makes; by both
# writers (Spark's Parquet writer, pyarrow in the tasks: compaction_writer), Spark's writer
# through Connect in `make soak` (since 2026-12-06, CI's time: the arrow writer's tasks are
# the ones that run mor's code on the server)
@pytest.mark.connect
@pytest.mark.parametrize(
    "writer_kind", [pytest.param("spark", marks=soak_marks("connect")), "arrow"]
)
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(partitioned=st.booleans(), ops=st.lists(op, min_size=2, max_size=7))
def test_every_snapshot_reads_as_before_and_as_the_reference(
    tmp_path_factory: Any, spark: Any, writer_kind: str, partitioned: bool, ops: list
) -> None:
    from mor.api import default_catalog
    from mor.planner.settings import applied

    cat = default_catalog(str(tmp_path_factory.mktemp("wh")))
    spec = PART_SPEC if partitioned else UNPARTITIONED_PARTITION_SPEC
    writer = TableWriter(cat, "m.h", SCHEMA, spec)
    ref = Reference(partitioned)
    first = ("append", [(1, "a", 1), (None, "b", 2), (2, "a", None), (3, "b", 3)])
    _history(writer, ref, _keys([first, *ops, ("eq", (1,), [(2,)], True, 0)]))
    table = writer.refresh()
    head = table.current_snapshot()
    snaps = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
    before = {s.snapshot_id: _rows(cat, spark, "m.h", s.snapshot_id) for s in snaps}
    assert before[head.snapshot_id] == ref.live()

    with applied({"compaction_writer": writer_kind}, "test"):
        report = compact("m.h", catalog=cat, spark=spark, **ALL)

    table = writer.refresh()
    new = table.current_snapshot()
    assert _rows(cat, spark, "m.h") == ref.live()
    for s in snaps:
        assert _rows(cat, spark, "m.h", s.snapshot_id) == before[s.snapshot_id], s
    assert new.snapshot_id == report.snapshot and new.parent_snapshot_id == head.snapshot_id
    assert new.summary.operation.value == "replace"
    entries = [e for _, e in _entries(table, new) if e.snapshot_id == new.snapshot_id]
    added = [e for e in entries if e.status == ManifestEntryStatus.ADDED]
    assert {e.data_file.file_path for e in added} == {f.path for f in report.written}
    for e in added:
        assert e.data_file.content == DataFileContent.DATA
        assert e.sequence_number == head.sequence_number  # the snapshot read's, kept
        assert e.file_sequence_number == new.sequence_number
    gone = [e for e in entries if e.status == ManifestEntryStatus.DELETED]
    assert all(e.sequence_number <= head.sequence_number for e in gone)
    assert {e.data_file.file_path for e in gone if e.data_file.content != DataFileContent.DATA} == {
        f.path for f in report.removed
    }
    live = [e for _, e in _entries(table, new) if e.status != ManifestEntryStatus.DELETED]
    assert not [e for e in live if e.data_file.content != DataFileContent.DATA]  # none left
    data = [e.data_file for e in live]
    summary = new.summary
    assert int(summary["total-data-files"]) == len(data)
    assert int(summary["total-records"]) == sum(f.record_count for f in data)
    assert int(summary["total-delete-files"]) == 0
    assert int(summary["total-position-deletes"]) == int(summary["total-equality-deletes"]) == 0
    assert sum(f.rows for f in report.written) == sum(ref.live().values())
    got = Counter(
        (r["id"], r["p"], r["v"])
        for r in table.scan(snapshot_id=new.snapshot_id).to_arrow().to_pylist()
    )
    assert got == ref.live()  # pyiceberg reads it: no delete file left
    for e in added:  # field ids in the file, bounds in the manifest
        f = e.data_file
        schema = pq.read_schema(f.file_path.removeprefix("file://"))
        ids = {c.name: int(c.metadata[b"PARQUET:field_id"]) for c in schema}
        assert ids == {"id": 1, "p": 2, "v": 3}
        assert [f.name for f in Path(f.file_path.removeprefix("file://")).parent.iterdir()] == [
            Path(f.file_path).name
        ] or writer_kind == "spark"  # pyarrow's tasks write the data files, nothing else
        rows = pq.read_table(f.file_path.removeprefix("file://"))
        ids_in = [i for i in rows["id"].to_pylist() if i is not None]
        if ids_in:
            assert int.from_bytes(f.lower_bounds[1], "little", signed=True) == min(ids_in)
            assert int.from_bytes(f.upper_bounds[1], "little", signed=True) == max(ids_in)
        if partitioned:
            assert set(rows["p"].to_pylist()) == {f.partition[0]}


def test_an_equality_delete_committed_meanwhile_applies_to_the_rewritten_rows(
    catalog: Any, spark: Any
) -> None:
    """The delete lands after the rewrite read the table and before it commits: the new files
    keep the read snapshot's data sequence number, below the delete's, so it applies to
    them (a rewrite that gave them the new snapshot's would bring the row back)."""
    w = _two_files(catalog)
    landed = []

    def delete(attempt: int) -> None:
        if attempt == 1:
            landed.append(w.commit(deletes=[w.equality_delete_file([1], [{1: 5}, {1: 15}])]))

    with landing(delete):
        report = compact("m.g", catalog=catalog, spark=spark, **ALL)
    assert report.attempts == 2 and report.rebased_over == landed
    assert _ids(catalog, spark) == [i for i in LIVE if i not in (5, 15)]
    table = w.refresh()
    assert [f.file_path for f in _data(table)] == [f.path for f in report.written]
    # the delete that landed is the only delete file left, and still reaches the new files
    (eq,) = [
        e
        for _, e in _entries(table, table.current_snapshot())
        if e.status != ManifestEntryStatus.DELETED and e.data_file.content != DataFileContent.DATA
    ]
    assert eq.data_file.content == DataFileContent.EQUALITY_DELETES


def test_a_concurrent_append_is_rebased_over_and_left_as_it_is(catalog: Any, spark: Any) -> None:
    w = _two_files(catalog)
    landed = []

    def append(attempt: int) -> None:
        if attempt == 1:
            t = pa.table({"id": pa.array([3, 12, 100], pa.int64()), "s": ["s7", "x", "y"]})
            landed.append(w.append(t))

    with landing(append):
        report = compact("m.g", catalog=catalog, spark=spark, **ALL)
    assert report.rebased_over == [landed[0][0]]
    assert _ids(catalog, spark) == sorted(LIVE + [3, 12, 100])
    paths = {f.file_path for f in _data(w.refresh())}
    assert paths == {f.path for f in report.written} | {landed[0][1][0].file_path}


def test_a_concurrent_position_delete_on_a_rewritten_file_stops_it_leaving_nothing(
    catalog: Any, spark: Any
) -> None:
    w = _two_files(catalog)
    location = w.table.metadata.location
    data = _data(w.refresh())
    files = _files(location)
    landed = []

    def delete(attempt: int) -> None:
        if attempt == 1:
            f = data[0]
            landed.append(w.commit(deletes=[w.position_delete_file({f.file_path: [0]}, f)]))

    with (
        landing(delete),
        pytest.raises(ConflictError, match=r"added position deletes .* nothing was committed"),
    ):
        compact("m.g", catalog=catalog, spark=spark, **ALL)
    assert w.refresh().current_snapshot().snapshot_id == landed[0]
    new = _files(location) - files
    assert new and not [p for p in new if "mor-" in p], new  # only the concurrent commit's
    assert not [d for d in os.listdir(location.removeprefix("file://") + "/data") if "mor-" in d]
    got = _ids(catalog, spark)
    assert len(got) == len(LIVE) - 1 and set(got) < set(LIVE)


def _lowest(f: Any) -> int:
    return int.from_bytes(f.lower_bounds[1], "little", signed=True)


def _two_partitions(catalog: Any) -> TableWriter:
    """Partitions a and b, two files each of ids 0-9 / 10-19 (a) and 20-29 / 30-39 (b); one
    position delete in a's first file (row 0, of 10) and an equality delete on id in each
    partition: a's names 5 and 25 (reaching 5), b's 25."""
    w = TableWriter(catalog, "m.p", SCHEMA, PART_SPEC)
    for p, lo in (("a", 0), ("a", 10), ("b", 20), ("b", 30)):
        ids = list(range(lo, lo + 10))
        w.append(pa.table({"id": pa.array(ids, pa.int64()), "p": [p] * 10, "v": ids}))
    first = min((f for f in _data(w.refresh()) if f.partition[0] == "a"), key=_lowest)
    w.commit(deletes=[w.position_delete_file({first.file_path: [0]}, first)])
    w.commit(deletes=[w.equality_delete_file([1], [{1: 5}, {1: 25}], partition=Record("a"))])
    w.commit(deletes=[w.equality_delete_file([1], [{1: 25}], partition=Record("b"))])
    return w


def test_thresholds_and_where_choose_the_files(catalog: Any, spark: Any) -> None:
    """Iceberg's defaults: a file whose position deletes remove 10% of its rows (under 0.3)
    in a partition of 2 small files (under 5) is left; --delete-ratio-threshold 0.1 takes
    it alone; --where takes one partition, and the deletes reaching the other stay."""
    _two_partitions(catalog)
    live = sorted(set(range(40)) - {0, 5, 25})
    assert compact("m.p", catalog=catalog, spark=spark).snapshot is None
    r = compact("m.p", catalog=catalog, spark=spark, delete_ratio_threshold=0.1, dry_run=True)
    assert (r.data_files, r.partitions, r.data_rows, len(r.removed)) == (2, 1, 20, 2)
    r = compact("m.p", catalog=catalog, spark=spark, where="p = 'a'", **ALL)
    assert (r.data_files, r.partitions, sum(f.rows for f in r.written)) == (2, 1, 18)
    assert len(r.removed) == 2  # the position delete and a's equality delete; b's stays
    assert _ids(catalog, spark, "m.p") == live
    r = compact("m.p", catalog=catalog, spark=spark, where="p = 'b'", **ALL)
    assert (r.data_files, len(r.removed), sum(f.rows for f in r.written)) == (2, 1, 19)
    assert _ids(catalog, spark, "m.p") == live
    plan = mor_sql("SELECT id FROM m.p WHERE id > 100", catalog=catalog, spark=spark)
    assert plan.collect() == []


def test_pruning_uses_the_new_files_bounds(catalog: Any, spark: Any) -> None:
    from mor.api import plan_query

    _two_partitions(catalog)
    compact("m.p", catalog=catalog, spark=spark, **ALL)
    scans = plan_query("SELECT id FROM m.p WHERE id >= 30", catalog=catalog).optimized
    (pruning,) = [n.files.pruning for n in scans.walk() if getattr(n, "files", None)]
    total, by_partition, by_bounds = pruning.data_files
    assert total == 2 and by_bounds == 1  # b's file (20-39) kept, a's (1-19) pruned


def test_refusals_are_one_line(catalog: Any, spark: Any) -> None:
    _two_files(catalog)
    with pytest.raises(MorError, match="m.nope"):
        compact("m.nope", catalog=catalog, spark=spark)
    with pytest.raises(MorError, match="no branch 'b'"):
        compact("m.g", catalog=catalog, spark=spark, branch="b")
    with pytest.raises(MorError, match="nosuch"):
        compact("m.g", catalog=catalog, spark=spark, where="nosuch > 1")
    with pytest.raises(MorError, match="--target-file-size"):
        compact("m.g", catalog=catalog, spark=spark, target_file_size=0)
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "tags", ListType(3, StringType(), element_required=False), required=False),
    )
    TableWriter(catalog, "m.l", schema)
    with pytest.raises(UnsupportedError, match="column tags is of type list"):
        compact("m.l", catalog=catalog, spark=spark)


def test_a_failure_before_the_commit_leaves_nothing_behind(catalog: Any, spark: Any) -> None:
    w = _two_files(catalog)
    location = w.table.metadata.location
    files = _files(location)
    head = w.refresh().current_snapshot().snapshot_id

    def boom(attempt: int) -> None:
        assert [p for p in _files(location) - files if "/mor-compact-" in p]
        raise OSError("storage went away")

    with landing(boom), pytest.raises(OSError, match="storage went away"):
        compact("m.g", catalog=catalog, spark=spark, **ALL)
    assert _files(location) == files
    assert not [d for d in os.listdir(location.removeprefix("file://") + "/data") if "mor-" in d]
    assert w.refresh().current_snapshot().snapshot_id == head


def test_cli_killed_at_any_moment_leaves_the_table_before_or_after(
    tmp_path: Path, spark: Any
) -> None:
    """`mor compact` as a user runs it, killed (SIGKILL) at moments spread over its run (each
    on a table of its own): the table is either unchanged or compacted, and reads the same
    rows. A whole run prints its summary line; a bad name one line and a non-zero exit."""
    from mor.api import default_catalog

    opts = ("--delete-file-threshold", "1", "--min-input-files", "1")
    wh = tmp_path / "whole"
    _two_files(default_catalog(str(wh)))
    t0 = time.perf_counter()
    done = _cli(wh, "m.g", *opts, command="compact")
    out, err = done.communicate(timeout=300)
    whole = time.perf_counter() - t0
    assert done.returncode == 0, err
    assert "committed on main" in out.splitlines()[-1]
    for frac in (0.6, 0.95):
        wh = tmp_path / f"killed{frac}"
        cat = default_catalog(str(wh))
        _two_files(cat)
        head = cat.load_table("m.g").current_snapshot()
        p = _cli(wh, "m.g", *opts, command="compact")
        time.sleep(whole * frac)
        p.send_signal(signal.SIGKILL)
        p.wait()
        snap = cat.load_table("m.g").current_snapshot()
        assert snap.snapshot_id == head.snapshot_id or (
            snap.parent_snapshot_id == head.snapshot_id
            and snap.summary.operation.value == "replace"
        )
        assert _ids(cat, spark) == LIVE
    bad = _cli(wh, "m.nope", command="compact")
    out, err = bad.communicate(timeout=300)
    assert bad.returncode != 0 and out == "" and len(err.strip().splitlines()) == 1, err


def test_health_names_mor_compact_and_shows_its_effect(catalog: Any, spark: Any) -> None:
    from mor import health
    from mor.health_advice import Thresholds

    _two_partitions(catalog)
    before = health(
        "m.p", catalog=catalog, exact=True, spark=spark, thresholds=Thresholds(delete_ratio=0.05)
    )
    mine = [a.get("mor", "") for a in before["advice"]]
    assert "mor compact m.p --delete-ratio-threshold 0.05" in mine, before["advice"]
    compact("m.p", catalog=catalog, spark=spark, **ALL)
    after = health("m.p", catalog=catalog, exact=True, spark=spark)
    assert after["deleted_records"] == 0 and after["equality_delete_files"] == 0
    assert after["position_delete_files"] == 0
    assert not [a for a in after["advice"] if "compact" in a.get("mor", "")]


@pytest.mark.parametrize("writer_kind", ["spark", "arrow"])
def test_every_writable_type_is_written_as_read(catalog: Any, spark: Any, writer_kind: str) -> None:
    """Each column type compaction writes (a struct among them, NULLs in each), by both
    writers: the rows read the same through mor and pyiceberg after, each column and struct
    field carries its field id, timestamps are microseconds (with the zone where the type
    has one), decimals keep their scale."""
    import datetime as dt
    from decimal import Decimal

    from pyiceberg.types import (
        BinaryType,
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        FloatType,
        IntegerType,
        StructType,
        TimestampType,
        TimestamptzType,
    )

    from mor.planner.settings import applied

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "b", BooleanType(), required=False),
        NestedField(3, "i", IntegerType(), required=False),
        NestedField(4, "f", FloatType(), required=False),
        NestedField(5, "d", DoubleType(), required=False),
        NestedField(6, "dec", DecimalType(12, 3), required=False),
        NestedField(7, "day", DateType(), required=False),
        NestedField(8, "ts", TimestampType(), required=False),
        NestedField(9, "tz", TimestamptzType(), required=False),
        NestedField(10, "s", StringType(), required=False),
        NestedField(11, "bin", BinaryType(), required=False),
        NestedField(
            12,
            "st",
            StructType(
                NestedField(13, "x", LongType(), required=False),
                NestedField(14, "y", StringType(), required=False),
            ),
            required=False,
        ),
    )
    w = TableWriter(catalog, "m.types", schema)
    utc = dt.timezone.utc

    def row(i: int) -> dict:
        if i % 5 == 4:  # NULLs in every column
            return {"id": i, **{k: None for k in ("b", "i", "f", "d", "dec", "day", "ts", "tz")},
                    "s": None, "bin": None, "st": None}  # fmt: skip
        return {
            "id": i,
            "b": i % 2 == 0,
            "i": i * 7,
            "f": i / 4,
            "d": i / 3,
            "dec": Decimal(i) / Decimal(8),
            "day": dt.date(2026, 1, 1) + dt.timedelta(days=i),
            "ts": dt.datetime(2026, 1, 1, 12, 0, 0, i),
            "tz": dt.datetime(2026, 1, 1, 12, 0, 0, i, tzinfo=utc),
            "s": f"s{i}",
            "bin": bytes([i]),
            "st": {"x": i, "y": None if i % 3 else f"y{i}"},
        }

    from pyiceberg.io.pyarrow import schema_to_pyarrow

    arrow = schema_to_pyarrow(schema)
    w.append(pa.Table.from_pylist([row(i) for i in range(10)], schema=arrow))
    _, second = w.append(pa.Table.from_pylist([row(i) for i in range(10, 20)], schema=arrow))
    w.commit(deletes=[w.position_delete_file({second[0].file_path: [3]}, second[0])])
    names = ", ".join(f.name for f in schema.fields)
    sql = f"SELECT {names} FROM m.types"
    before = sorted(map(tuple, mor_sql(sql, catalog=catalog, spark=spark).collect()), key=str)
    assert len(before) == 19
    with applied({"compaction_writer": writer_kind}, "test"):
        report = compact("m.types", catalog=catalog, spark=spark, **ALL)
    assert report.snapshot is not None and len(report.written) == 1
    after = sorted(map(tuple, mor_sql(sql, catalog=catalog, spark=spark).collect()), key=str)
    assert after == before
    table = catalog.load_table("m.types")
    assert not [t for t in table.scan().plan_files() if t.delete_files]
    theirs = table.scan().to_arrow().cast(arrow).to_pylist()
    assert sorted(theirs, key=lambda r: r["id"]) == [row(i) for i in range(20) if i != 13]
    written = pq.read_schema(report.written[0].path.removeprefix("file://"))
    ids = {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in written}
    assert ids == {f.name: f.field_id for f in schema.fields}
    st = written.field("st").type
    assert [int(st.field(i).metadata[b"PARQUET:field_id"]) for i in range(2)] == [13, 14]
    assert written.field("ts").type == pa.timestamp("us")
    assert written.field("tz").type == pa.timestamp("us", tz="UTC")
    assert written.field("dec").type == pa.decimal128(12, 3)


def test_rewrite_data_files_is_the_compaction_under_icebergs_name(catalog: Any, spark: Any) -> None:
    """`CALL system.rewrite_data_files(...)` runs mor's compaction: Iceberg's options
    translated (tuning ones accepted, unknown ones refused by name), where and branch passed,
    Iceberg's output row; a dry run commits nothing."""
    from mor.statements import StatementExecution

    def call(args: str, **kw: Any) -> Any:
        sql = f"CALL system.rewrite_data_files({args})"
        return StatementExecution(sql, catalog=catalog, spark=spark, **kw).run()

    _two_partitions(catalog)
    live = sorted(set(range(40)) - {0, 5, 25})
    head = catalog.load_table("m.p").metadata.current_snapshot_id
    opts = "map('min-input-files', '1', 'delete-file-threshold', '1', "
    opts += "'partial-progress.enabled', 'true')"
    dry = call(f"table => 'm.p', options => {opts}", dry_run=True)
    assert "dry run" in dry.line
    assert catalog.load_table("m.p").metadata.current_snapshot_id == head
    out = call(f"table => 'm.p', strategy => 'binpack', options => {opts}, where => \"p = 'a'\"")
    assert out.columns == [
        "rewritten_data_files_count",
        "added_data_files_count",
        "rewritten_bytes_count",
        "failed_data_files_count",
        "removed_delete_files_count",
    ]
    rewritten, added, size, failed, removed = out.rows[0]
    assert (rewritten, failed, removed) == (2, 0, 2) and added >= 1 and size > 0
    assert _ids(catalog, spark, "m.p") == live
    for args, message in (
        ("'m.p', 'sort'", "strategy 'sort'"),
        ("table => 'm.p', sort_order => 'id DESC'", "sort_order"),
        ("table => 'm.p', options => map('rewrite-all', 'true')", "option 'rewrite-all'"),
        ("table => 'm.p', options => map('min-input-files', 'two')", "not a whole number"),
    ):
        with pytest.raises(UnsupportedError, match=message):
            call(args)
