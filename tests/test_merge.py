"""MERGE INTO as a merge-on-read commit (mor/merge.py), against a naive evaluation of Spark's
MERGE semantics over the spec's rules.

The histories are tests/test_semantics.py's (appends, position deletes, equality deletes of
one or two columns, NULL keys, partitioned or not), v2 or upgraded to v3. Random MERGEs then
run through `mor_sql`, their clauses drawn from every kind (WHEN MATCHED with and without a
condition, UPDATE SET * and of some columns, DELETE; WHEN NOT MATCHED INSERT * and of some
columns; WHEN NOT MATCHED BY SOURCE UPDATE and DELETE), their sources with NULL keys and keys
matching several rows. The reference: for each live row, the source rows whose key equals
its key (NULL matches nothing); the first clause of its kind whose condition is TRUE acts; a
source row no live row matches is inserted by the first WHEN NOT MATCHED clause that holds;
a live row matched by two source rows is an error unless the only WHEN MATCHED clause is an
unconditional DELETE. mor must read exactly the reference's rows after each, report its
counts, and commit nothing when it fails.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_maintenance import _as_v3
from test_row_writes import _eq, _ids, _live_rows, _lt, _read, _three_files, registered_history
from test_semantics import PART_SPEC, SCHEMA, op

from legs import soak_in
from mor import MorError, explain, mor_sql
from mor.row_writes import run_row_write

pytestmark = [pytest.mark.spark41, pytest.mark.connect]

Row = dict[str, Any]
Truth = Callable[[Row, Row], bool | None]  # (target row, source row) -> the condition
New = Callable[[Row, Row], tuple[Any, Any, Any]]  # -> the written row's (id, p, v)


def _plus(a: Any, b: int) -> Any:
    return None if a is None else a + b


# (clause, action, condition, new row); `t` is None in WHEN NOT MATCHED, `s` in BY SOURCE
MATCHED: list[tuple[str, str, Truth | None, New | None]] = [
    ("WHEN MATCHED AND s.v IS NULL THEN DELETE", "delete", lambda t, s: s["v"] is None, None),
    ("WHEN MATCHED AND t.v > s.v THEN DELETE", "delete", lambda t, s: _lt(s["v"], t["v"]), None),
    (
        "WHEN MATCHED AND t.p = 'a' THEN UPDATE SET v = s.v + 100",
        "update",
        lambda t, s: _eq(t["p"], "a"),
        lambda t, s: (t["id"], t["p"], _plus(s["v"], 100)),
    ),
    ("WHEN MATCHED THEN UPDATE SET *", "update", None, lambda t, s: (s["id"], s["p"], s["v"])),
    ("WHEN MATCHED THEN DELETE", "delete", None, None),
]
NOT_MATCHED: list[tuple[str, str, Truth | None, New | None]] = [
    # unqualified names in WHEN NOT MATCHED are the source's
    (
        "WHEN NOT MATCHED AND v > 1 THEN INSERT *",
        "insert",
        lambda t, s: _lt(1, s["v"]),
        lambda t, s: (s["id"], s["p"], s["v"]),
    ),
    (
        "WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, v * 2)",
        "insert",
        None,
        lambda t, s: (s["id"], None, None if s["v"] is None else s["v"] * 2),
    ),
]
BY_SOURCE: list[tuple[str, str, Truth | None, New | None]] = [
    # and in WHEN NOT MATCHED BY SOURCE the target's
    (
        "WHEN NOT MATCHED BY SOURCE AND v = 0 THEN DELETE",
        "delete",
        lambda t, s: _eq(t["v"], 0),
        None,
    ),
    (
        "WHEN NOT MATCHED BY SOURCE AND t.p = 'b' THEN UPDATE SET v = -1",
        "update",
        lambda t, s: _eq(t["p"], "b"),
        lambda t, s: (t["id"], t["p"], -1),
    ),
]


def _pick(pool: list, chosen: list[int]) -> list:
    """The chosen clauses in the pool's order, one without a condition only last."""
    out = [pool[i] for i in sorted(set(chosen))]
    bare = [c for c in out if c[2] is None]
    return [c for c in out if c[2] is not None] + bare[:1]


def _literal(x: Any, kind: str) -> str:
    if x is None:
        return f"CAST(NULL AS {kind})"
    return f"'{x}'" if kind == "STRING" else f"{x}L"


def _expected(
    live: list[Row], source: list[Row], clauses: list[tuple]
) -> tuple[list[tuple[Row, str, tuple | None]], list[tuple], bool]:
    """The reference's outcome: (live row, action, new row) for each row acted on, the rows
    inserted, and whether Spark's cardinality check stops the statement."""
    matched = [c for c in clauses if c in MATCHED]
    check = bool(matched) and not (len(matched) == 1 and matched[0][0] == MATCHED[4][0])
    acted: list[tuple[Row, str, tuple | None]] = []
    for r in live:
        ms = [s for s in source if _eq(r["id"], s["id"]) is True]
        if check and len(ms) > 1:
            return [], [], True
        for s in ms:
            c = next((c for c in matched if c[2] is None or c[2](r, s) is True), None)
            if c is not None:
                acted.append((r, c[1], c[3](r, s) if c[3] else None))
        if not ms:
            c = next(
                (c for c in clauses if c in BY_SOURCE and (c[2] is None or c[2](r, {}) is True)),
                None,
            )
            if c is not None:
                acted.append((r, c[1], c[3](r, {}) if c[3] else None))
    once = {(r["file"], r["pos"]): (r, a, w) for r, a, w in acted}  # deleted once
    inserted = []
    for s in source:
        if any(_eq(r["id"], s["id"]) is True for r in live):
            continue
        c = next(
            (c for c in clauses if c in NOT_MATCHED and (c[2] is None or c[2]({}, s) is True)),
            None,
        )
        if c is not None:
            inserted.append(c[3]({}, s))
    return list(once.values()), inserted, False


source_rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(0, 6)),
        st.sampled_from(["a", "b", None]),
        st.one_of(st.none(), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=5,
)


# on 4.1 and Connect in `make soak`: 3.5 holds it in CI, Spark 4 the MERGE path through the
# tests below (the rows are found and collected as UPDATE's are)
@soak_in("4.1", "connect")
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    partitioned=st.booleans(),
    v3=st.booleans(),
    ops=st.lists(op, min_size=1, max_size=4),
    merges=st.lists(
        st.tuples(
            source_rows,
            st.lists(st.integers(0, len(MATCHED) - 1), max_size=3),
            st.lists(st.integers(0, len(NOT_MATCHED) - 1), max_size=2),
            st.lists(st.integers(0, len(BY_SOURCE) - 1), max_size=2),
        ),
        min_size=2,
        max_size=2,
    ),
)
def test_merge_matches_the_naive_reference(
    tmp_path_factory: Any, spark: Any, partitioned: bool, v3: bool, ops: list, merges: list
) -> None:
    cat, ref = registered_history(tmp_path_factory, partitioned, v3, ops)
    for rows, m, n, b in merges:
        clauses = _pick(MATCHED, m) + _pick(NOT_MATCHED, n) + _pick(BY_SOURCE, b)
        if not clauses:
            clauses = [MATCHED[4]]
        source = [dict(zip(("id", "p", "v"), r)) for r in rows]
        values = ", ".join(
            f"({_literal(r['id'], 'BIGINT')}, {_literal(r['p'], 'STRING')}, "
            f"{_literal(r['v'], 'BIGINT')})"
            for r in source
        )
        sql = (
            f"MERGE INTO t.h t USING (SELECT * FROM VALUES {values} AS v(id, p, v)) s "
            f"ON t.id = s.id {' '.join(c[0] for c in clauses)}"
        )
        live = _live_rows(ref)
        acted, inserted, violation = _expected(live, source, clauses)
        before = cat.load_table("t.h").current_snapshot().snapshot_id
        if violation:
            with pytest.raises(MorError, match="MERGE_CARDINALITY_VIOLATION") as e:
                mor_sql(sql, catalog=cat, spark=spark)
            assert "\n" not in str(e.value)
            assert cat.load_table("t.h").current_snapshot().snapshot_id == before
            continue
        (res,) = mor_sql(sql, catalog=cat, spark=spark).collect()
        kinds = Counter(a for _, a, _ in acted)
        assert (res.num_updated_rows, res.num_deleted_rows, res.num_inserted_rows) == (
            kinds["update"],
            kinds["delete"],
            len(inserted),
        ), sql
        assert res.num_affected_rows == len(acted) + len(inserted)
        head = cat.load_table("t.h").current_snapshot()
        if acted or inserted:
            assert res.snapshot_id == head.snapshot_id
            op_ = "overwrite" if acted and (inserted or kinds["update"]) else None
            op_ = op_ or ("delete" if acted else "append")
            assert head.summary.operation.value == op_, sql
        else:
            assert res.snapshot_id is None and head.snapshot_id == before
        gone = {(r["file"], r["pos"]) for r, _, _ in acted}
        ref.pos += [(f, p, head.sequence_number) for f, p in gone]
        new = [w for _, a, w in acted if a == "update"] + inserted
        for j, (i, p, v) in enumerate(new):
            f = f"merge-{head.snapshot_id}-{j}"
            ref.rows.append(
                {"id": i, "p": p, "v": v, "file": f, "pos": 0, "seq": head.sequence_number}
            )
        assert _read(cat, spark) == ref.live(), sql


def test_merge_upserts_keep_row_ids_and_write_each_partition(catalog: Any, spark: Any) -> None:
    """An upsert from a staging table (a source named without an alias, columns named
    `db.t.c`), on v3: updated rows keep their `_row_id`, inserted ones get new ones; a row
    whose key moves to another partition is written there; EXPLAIN shows the query."""
    w = _three_files(catalog)
    _as_v3(catalog, w, "c.v3")
    stage = _three_files(catalog, "c.stage")
    del stage
    mor_sql("DELETE FROM c.stage WHERE id NOT IN (1, 2, 11)", catalog=catalog, spark=spark)
    # rows written before the upgrade have no _row_id: rewritten, they get one
    mor_sql("UPDATE c.v3 SET v = v", catalog=catalog, spark=spark)
    ids = {
        r.id: r._row_id
        for r in mor_sql("SELECT id, _row_id FROM c.v3", catalog=catalog, spark=spark).collect()
    }
    sql = (
        "MERGE INTO c.v3 USING (SELECT id + 3 AS id, 'b' AS p, v FROM c.stage) AS s "
        "ON c.v3.id = s.id "
        "WHEN MATCHED THEN UPDATE SET v = s.v + 10, p = s.p "
        "WHEN NOT MATCHED THEN INSERT *"
    )
    before = {f["file_path"] for f in catalog.load_table("c.v3").inspect.files().to_pylist()}
    plan = explain(sql, catalog=catalog, check=False)
    assert plan.startswith("MERGE INTO c.v3: acts on the rows of this query"), plan
    (res,) = mor_sql(sql, catalog=catalog, spark=spark).collect()
    # c.stage's 1, 2 and 11 (v 1, 2, 2), +3: 4 and 14 matched, 5 inserted
    assert (res.num_updated_rows, res.num_deleted_rows, res.num_inserted_rows) == (2, 0, 1)
    got = {
        r.id: (r.p, r.v, r._row_id)
        for r in mor_sql(
            "SELECT id, p, v, _row_id FROM c.v3", catalog=catalog, spark=spark
        ).collect()
    }
    assert got[4] == ("b", 11, ids[4])  # moved from a to b, its id kept
    assert got[14] == ("b", 12, ids[14])
    assert None not in ids.values()
    assert got[5][:2] == ("b", 2) and got[5][2] is not None and got[5][2] not in ids.values()
    assert len(got) == 11
    files = catalog.load_table("c.v3").inspect.files().to_pylist()
    written = [f for f in files if f["file_path"] not in before and f["content"] == 0]
    # in the rows' new partition only (as many files as tasks held its rows: a row-level
    # write does not shuffle its rows, and Spark's plan of the MERGE decides how many do)
    assert written and {f["partition"]["p"] for f in written} == {"b"}
    assert _ids(catalog, spark, "c.t") == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]  # untouched


def test_merge_refusals_are_one_line_and_commit_nothing(catalog: Any, spark: Any) -> None:
    _three_files(catalog)
    src = "(SELECT * FROM VALUES (1L, 'a', 5L), (1L, 'a', 6L) AS v(id, p, v)) s"
    for sql, why in (
        # a target row matched by two source rows (Spark's and Iceberg's rule)
        (
            f"MERGE INTO c.t t USING {src} ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v",
            "MERGE_CARDINALITY_VIOLATION",
        ),
        (
            f"MERGE INTO c.t t USING {src} ON t.id = s.id WHEN MATCHED AND s.v > 5 THEN DELETE",
            "MERGE_CARDINALITY_VIOLATION",
        ),
        (
            f"MERGE INTO c.t t USING {src} ON t.id = s.id WHEN NOT MATCHED THEN INSERT (id) "
            "VALUES (t.id)",
            "t.id is a column of t",
        ),
        (
            f"MERGE INTO c.t t USING {src} ON t.id = s.id WHEN NOT MATCHED BY SOURCE THEN "
            "UPDATE SET v = s.v",
            "s.v is a column of s",
        ),
        (
            f"MERGE INTO c.t t USING {src} ON t.id = s.id WHEN NOT MATCHED THEN DELETE",
            "Spark allows INSERT there",
        ),
        (
            f"MERGE INTO c.t t USING {src} ON t.id = s.id WHEN MATCHED THEN DELETE "
            "WHEN MATCHED AND s.v = 1 THEN DELETE",
            "only the last WHEN MATCHED clause",
        ),
        (
            f"MERGE INTO c.t t USING {src} ON t.id = s.id WHEN MATCHED THEN UPDATE SET s.v = 1",
            "it sets a column of t",
        ),
        (
            f"MERGE INTO c.t t USING {src} ON t.id = s.id WHEN MATCHED THEN UPDATE SET nosuch = 1",
            "no such column of c.t",
        ),
        (
            f"MERGE INTO c.t t USING {src} ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 'x'",
            r"the value is string, the column bigint; write CAST",
        ),
        (f"MERGE INTO c.t t USING {src} ON t.id = s.nosuch WHEN MATCHED THEN DELETE", "nosuch"),
        (
            f"MERGE INTO c.t VERSION AS OF 1 t USING {src} ON t.id = s.id WHEN MATCHED THEN DELETE",
            "a snapshot cannot be changed",
        ),
    ):
        with pytest.raises(MorError, match=why) as e:
            mor_sql(sql, catalog=catalog, spark=spark)
        assert "\n" not in str(e.value), str(e.value)
    assert _ids(catalog, spark) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
    # the only WHEN MATCHED clause an unconditional DELETE: no check (Spark's rule)
    (res,) = mor_sql(
        f"MERGE INTO c.t t USING {src} ON t.id = s.id WHEN MATCHED THEN DELETE",
        catalog=catalog,
        spark=spark,
    ).collect()
    assert res.num_deleted_rows == 1 and _ids(catalog, spark) == [0, 2, 3, 4, 10, 11, 12, 13, 14]


def test_merge_into_a_table_without_a_snapshot_inserts_its_first_rows(
    catalog: Any, spark: Any
) -> None:
    """A pipeline's first run: the table exists with no snapshot; every source row is not
    matched, the commit is the table's first snapshot (an `append`)."""
    _three_files(catalog)
    catalog.create_table("c.e", schema=SCHEMA, partition_spec=PART_SPEC)
    sql = (
        "MERGE INTO c.e t USING (SELECT * FROM c.t WHERE id < 3) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED AND s.v > 0 THEN INSERT *"
    )
    (res,) = mor_sql(sql, catalog=catalog, spark=spark).collect()
    assert (res.num_inserted_rows, res.num_updated_rows) == (2, 0)  # ids 1, 2 (v 1, 2)
    head = catalog.load_table("c.e").current_snapshot()
    assert res.snapshot_id == head.snapshot_id and head.parent_snapshot_id is None
    assert head.summary.operation.value == "append"
    assert _ids(catalog, spark, "c.e") == [1, 2]
    (res,) = mor_sql(sql, catalog=catalog, spark=spark).collect()  # now both are matched
    assert (res.num_inserted_rows, res.num_updated_rows) == (0, 2)
    assert _ids(catalog, spark, "c.e") == [1, 2]


def test_an_insert_gives_a_column_it_does_not_name_its_write_default(
    catalog: Any, spark: Any
) -> None:
    """v3: a column added with a default (`d`, initial and write default 7) that a MERGE's
    INSERT does not name gets its write-default, as the spec asks of a writer (and Iceberg's
    writer on Spark 4 writes); rows written before it read its initial default."""
    import json

    from pyiceberg.table.metadata import TableMetadataUtil
    from pyiceberg.typedef import IcebergBaseModel

    t = _three_files(catalog).refresh()
    raw = {**json.loads(t.metadata.model_dump_json()), "format-version": 3, "next-row-id": 0}
    for schema in raw["schemas"]:
        schema["fields"].append(
            {"id": 4, "name": "d", "type": "int", "required": False,
             "initial-default": 7, "write-default": 9}
        )  # fmt: skip
    raw["last-column-id"] = 4
    md = TableMetadataUtil.parse_obj(raw)
    path = f"{t.metadata.location}/metadata/00099-with-default.metadata.json"
    with t.io.new_output(path).create() as out:
        out.write(IcebergBaseModel.model_dump_json(md).encode())
    catalog.register_table("c.d", path)
    (res,) = mor_sql(
        "MERGE INTO c.d t USING (SELECT 100 AS id, 5 AS v) s ON t.id = s.id "
        "WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)",
        catalog=catalog,
        spark=spark,
    ).collect()
    assert res.num_inserted_rows == 1
    got = {
        r.id: r.d for r in mor_sql("SELECT id, d FROM c.d", catalog=catalog, spark=spark).collect()
    }
    assert got[100] == 9  # the write-default
    assert {got[i] for i in got if i != 100} == {7}  # older rows: the initial default


def test_a_data_files_rows_spread_over_tasks_get_one_file_each(catalog: Any, spark: Any) -> None:
    """A join that spreads one data file's rows over several tasks (a sort-merge join over
    shuffle partitions that are not coalesced): each data file still gets one position
    delete file (the tasks' parts joined by a second job), every row changed once, and a
    target row two tasks match stops the statement with nothing committed. On v3 one vector
    per data file, as the spec asks."""
    settings = {
        "spark.sql.autoBroadcastJoinThreshold": "-1",
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
    }
    before = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        for v3 in (False, True):
            if v3:
                catalog.drop_table("c.t")
                _as_v3(catalog, _three_files(catalog, "c.w"), "c.t")
            else:
                _three_files(catalog, "c.t")
            r = run_row_write(
                "MERGE INTO c.t t USING (SELECT id, v FROM c.t) s ON t.id = s.id "
                "WHEN MATCHED AND t.v = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET v = s.v + 10",
                catalog=catalog,
                spark=spark,
            )
            assert (r.deleted, r.updated) == (3, 7)
            # one position delete file (v3: one vector) per data file the rows were in
            assert (
                sorted(f.data_file for f in r.written)
                == sorted(set(r.written[0:0]) | {f.data_file for f in r.written})
                and len(r.written) == 2
            )
            got = sorted(tuple(r) for r in mor_sql("SELECT id, v FROM c.t", catalog=catalog,
                                                   spark=spark).collect())  # fmt: skip
            assert got == [(i, i % 3 + 10) for i in (0, 1, 2, 3, 4, 10, 11, 12, 13, 14) if i % 3]
            added = catalog.load_table("c.t").current_snapshot().summary.additional_properties
            assert added["added-dvs" if v3 else "added-position-delete-files"] == "2"
            head = catalog.load_table("c.t").current_snapshot().snapshot_id
            with pytest.raises(MorError, match="MERGE_CARDINALITY_VIOLATION"):
                mor_sql(
                    "MERGE INTO c.t t USING (SELECT id FROM c.t UNION ALL SELECT id FROM c.t) s "
                    "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 0",
                    catalog=catalog,
                    spark=spark,
                )
            assert catalog.load_table("c.t").current_snapshot().snapshot_id == head
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
