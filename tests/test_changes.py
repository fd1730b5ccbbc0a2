"""table_changes / mor.changes against a naive evaluation of the spec rules at every snapshot.

The Java-written histories of tests/oracle check the same against Iceberg's own reader (with
compactions, deletion vectors and schema evolution); these run in the test session's Spark.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from test_semantics import PART_SPEC, SCHEMA, Reference, _history, op

from legs import soak_in
from mor import MorError, SqlSyntaxError, TableNotFoundError, changes, explain, mor_sql
from mor.writer.tables import TableWriter

# the legs beyond pyspark 3.5 classic that run this file (markers: pyproject.toml): Spark 4 through
# Spark Connect (the newest pyspark's classic leg runs the suites whose answers depend on its SQL)
pytestmark = [pytest.mark.connect]

DELETED = ("DELETE", "UPDATE_BEFORE")


def _at(ref: Reference, seq: int) -> Counter:
    """The reference's live rows at sequence number `seq` (everything committed up to it)."""
    past = Reference(ref.partitioned)
    past.rows = [r for r in ref.rows if r["seq"] <= seq]
    past.pos = [p for p in ref.pos if p[2] <= seq]
    past.eq = [e for e in ref.eq if e[3] <= seq]
    return past.live()


# through Spark Connect in `make soak` (since 2026-11-29 evening, for CI's time): the change
# rows are planned by mor alike on every Spark, and this file's other tests run there in CI
@soak_in("connect")
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(partitioned=st.booleans(), ops=st.lists(op, min_size=2, max_size=7))
def test_each_commit_turns_its_parent_into_its_snapshot(
    tmp_path_factory: Any, spark: Any, partitioned: bool, ops: list
) -> None:
    from mor.api import default_catalog

    cat = default_catalog(str(tmp_path_factory.mktemp("wh")))
    writer = TableWriter(
        cat, "c.h", SCHEMA, PART_SPEC if partitioned else UNPARTITIONED_PARTITION_SPEC
    )
    ops = [("append", [(1, "a", 1), (None, "b", 2), (2, "a", None), (1, "a", 1)])] + ops
    ops = [
        (o[0], o[1], [tuple(dict(zip((1, 3), k))[i] for i in o[1]) for k in o[2]], o[3], o[4])
        if o[0] == "eq"
        else o
        for o in ops
    ]
    ref = Reference(partitioned)
    _history(writer, ref, ops)
    snaps = sorted(writer.refresh().metadata.snapshots, key=lambda s: s.sequence_number)
    rows = changes("c.h", catalog=cat, spark=spark).collect()
    assert {r._change_ordinal for r in rows} <= set(range(len(snaps)))
    before: Counter = Counter()
    for i, snap in enumerate(snaps):
        mine = [r for r in rows if r._change_ordinal == i]
        assert all(r._commit_snapshot_id == snap.snapshot_id for r in mine)
        dels = Counter((r.id, r.p, r.v) for r in mine if r._change_type in DELETED)
        ins = Counter((r.id, r.p, r.v) for r in mine if r._change_type not in DELETED)
        after = _at(ref, snap.sequence_number)
        assert not dels - before, f"commit {i} deleted rows that were not live"
        assert (before - dels) + ins == after, f"commit {i}"
        assert not dels & ins, "identical DELETE/INSERT pairs are cancelled"
        before = after
    # one commit alone is the same rows, ordinal 0
    last = snaps[-1]
    alone = changes(
        "c.h",
        catalog=cat,
        spark=spark,
        start_snapshot_id=snaps[-2].snapshot_id if len(snaps) > 1 else None,
        end_snapshot_id=last.snapshot_id,
    ).collect()
    assert Counter(tuple(r)[:4] for r in alone) == Counter(
        (r.id, r.p, r.v, r._change_type) for r in rows if r._change_ordinal == len(snaps) - 1
    )
    assert {r._change_ordinal for r in alone} <= {0}


KEYED = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "v", StringType(), required=False),
    identifier_field_ids=[1],
)


@pytest.fixture()
def upserts(catalog: Any) -> tuple[Any, TableWriter, list[int]]:
    """An upsert history on a table whose identifier field is `id`, as Flink writes it."""
    w = TableWriter(catalog, "c.keyed", KEYED)
    s1, files = w.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]}))
    # upsert of 2 (equality delete + the new row) and an insert of 4
    new = w.data_files(pa.table({"id": pa.array([2, 4], pa.int64()), "v": ["B", "d"]}))
    s2 = w.commit(data=new, deletes=[w.equality_delete_file([1], [{1: 2}])])
    # a position delete of 3
    s3 = w.commit(deletes=[w.position_delete_file({files[0].file_path: [2]}, files[0])])
    # 2 deleted again: only the row the upsert wrote is live, and only it is reported
    s4 = w.commit(deletes=[w.equality_delete_file([1], [{1: 2}])])
    # a row written and deleted by one commit (a position delete of its own file) is no change
    five = w.data_files(pa.table({"id": pa.array([5, 6], pa.int64()), "v": ["e", "f"]}))
    s5 = w.commit(data=five, deletes=[w.position_delete_file({five[0].file_path: [0]}, five[0])])
    return catalog, w, [s1, s2, s3, s4, s5]


def _changes(cat: Any, spark: Any, sql: str) -> list[tuple]:
    return sorted(tuple(r) for r in mor_sql(sql, catalog=cat, spark=spark).collect())


def test_upserts_are_updates_and_each_delete_is_reported_once(upserts: Any, spark: Any) -> None:
    cat, _, (s1, s2, s3, s4, s5) = upserts
    got = _changes(
        cat,
        spark,
        "SELECT _change_ordinal, _commit_snapshot_id, _change_type, id, v "
        "FROM table_changes('c.keyed')",
    )
    assert got == sorted(
        [
            (0, s1, "INSERT", 1, "a"),
            (0, s1, "INSERT", 2, "b"),
            (0, s1, "INSERT", 3, "c"),
            (1, s2, "UPDATE_BEFORE", 2, "b"),
            (1, s2, "UPDATE_AFTER", 2, "B"),
            (1, s2, "INSERT", 4, "d"),
            (2, s3, "DELETE", 3, "c"),
            (3, s4, "DELETE", 2, "B"),
            (4, s5, "INSERT", 6, "f"),
        ]
    )
    # a range: after s2 up to s4, ordinals from 0; a row inserted and deleted in the range
    # appears twice
    got = _changes(
        cat,
        spark,
        f"SELECT _change_ordinal, _change_type, id, v FROM table_changes('c.keyed', {s1}, {s4})",
    )
    assert got == sorted(
        [
            (0, "UPDATE_BEFORE", 2, "b"),
            (0, "UPDATE_AFTER", 2, "B"),
            (0, "INSERT", 4, "d"),
            (1, "DELETE", 3, "c"),
            (2, "DELETE", 2, "B"),
        ]
    )


def test_timestamps_name_the_snapshot_current_then(upserts: Any, spark: Any) -> None:
    cat, w, (s1, s2, s3, s4, _) = upserts
    md = w.refresh().metadata
    ts = {s.snapshot_id: s.timestamp_ms for s in md.snapshots}
    by_id = changes("c.keyed", catalog=cat, spark=spark, start_snapshot_id=s2, end_snapshot_id=s4)
    by_time = changes(
        "c.keyed", catalog=cat, spark=spark, start_timestamp=ts[s2], end_timestamp=ts[s4]
    )
    assert sorted(map(tuple, by_id.collect())) == sorted(map(tuple, by_time.collect()))
    with pytest.raises(MorError, match="not both"):
        changes("c.keyed", catalog=cat, start_snapshot_id=s1, start_timestamp=ts[s1])


def test_copy_on_write_rewrite_reports_only_the_rows_it_removed(catalog: Any, spark: Any) -> None:
    """pyiceberg's delete rewrites the file without the row: the rows it carries over are
    one DELETE and one INSERT each, identical, and cancel."""
    w = TableWriter(catalog, "c.cow", SCHEMA)
    w.append(
        pa.table(
            {
                "id": pa.array([1, 2, 2, 3], pa.int64()),
                "p": ["a", "a", "a", "b"],
                "v": pa.array([1, 2, 2, 3], pa.int64()),
            }
        )
    )
    w.refresh().delete(EqualTo("id", 1))
    ops = [s.summary.operation.value for s in w.refresh().metadata.snapshots]
    assert ops[-1] == "overwrite"
    got = _changes(
        catalog, spark, "SELECT _change_ordinal, _change_type, id, p, v FROM table_changes('c.cow')"
    )
    assert [g for g in got if g[0] == 1] == [(1, "DELETE", 1, "a", 1)]


def test_explain_shows_how_each_commit_is_read(upserts: Any) -> None:
    cat, _, (s1, s2, s3, s4, s5) = upserts
    text = explain(f"SELECT * FROM table_changes('c.keyed', {s1}, {s3})", catalog=cat, check=False)
    assert f"TableChanges #1: table_changes('c.keyed') after {s1} up to {s3}: commits=2" in text
    assert "identifier=[id]" in text
    assert (
        f"CommitChanges #2: commit=0 snapshot={s2} operation=overwrite reads=[before, after, "
        "added]" in text
    )
    assert f"commit=1 snapshot={s3} operation=delete reads=[before, after]" in text
    # each scan says which commit and part it reads, at which snapshot
    assert f"IcebergScan table_changes('c.keyed') commit 0 added @ snapshot {s2}" in text
    assert f"IcebergScan table_changes('c.keyed') commit 1 before @ snapshot {s2}" in text


def test_bad_ranges_are_one_line_errors(upserts: Any, spark: Any) -> None:
    cat, _, (s1, s2, *_rest) = upserts
    with pytest.raises(TableNotFoundError, match=f"snapshot {s2} is not an ancestor of"):
        mor_sql(f"SELECT * FROM table_changes('c.keyed', {s2}, {s1})", catalog=cat, spark=spark)
    with pytest.raises(TableNotFoundError, match="has no snapshot 42"):
        mor_sql("SELECT * FROM table_changes('c.keyed', 42)", catalog=cat, spark=spark)
    with pytest.raises(SqlSyntaxError, match=r"table_changes takes") as e:
        mor_sql("SELECT *\n  FROM table_changes(c.keyed)", catalog=cat, spark=spark)
    assert "line 2, column 8" in str(e.value)
    with pytest.raises(TableNotFoundError, match="no snapshot at or before"):
        mor_sql(
            "SELECT * FROM table_changes('c.keyed', NULL, '1999-01-01 00:00:00')",
            catalog=cat,
            spark=spark,
        )
    # the same snapshot at both ends: no commits, no rows, the table's columns
    df = mor_sql(f"SELECT * FROM table_changes('c.keyed', {s1}, {s1})", catalog=cat, spark=spark)
    assert df.collect() == []
    assert df.columns == ["id", "v", "_change_type", "_change_ordinal", "_commit_snapshot_id"]
