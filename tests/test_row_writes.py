"""DELETE FROM as a merge-on-read commit (mor/dml.py), against a naive evaluation of the spec
rules and of SQL's three-valued logic.

The histories are those of tests/test_semantics.py (random appends, position deletes and
equality deletes of one or two columns, NULL keys, partitioned or not), as v2 or upgraded to
v3. Two random DELETEs then run through `mor_sql`: after each, mor reads exactly the rows the
reference keeps (every row the condition is TRUE for gone, a row it is NULL for kept, rows
deleted before not counted again), pyiceberg reads the same where it can (no equality
delete), and the snapshot is a `delete` with the counts Iceberg's writer puts there.
Concurrency: a commit landing between the read and the commit is rebased over or stops the
statement, as Iceberg's `RowDelta` validations and the table's isolation level say, leaving
nothing behind. The CLI: `mor run` with DELETE, `--dry-run`, errors as one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from test_maintenance import _as_v3
from test_semantics import PART_SPEC, SCHEMA, Reference, _history, op

from helpers import landing
from legs import soak_in
from mor import MorError, explain, mor_sql
from mor.row_writes import run_row_write
from mor.writer.conflicts import ConflictError
from mor.writer.tables import TableWriter

ROOT = Path(__file__).resolve().parent.parent
# Spark 4.1 and Spark Connect too: the rows to delete are found by a query on the user's
# session, whichever it is (the CLI's own sessions are the same on every leg: soak there)
pytestmark = [pytest.mark.spark41, pytest.mark.connect]

Row = dict[str, Any]


def _eq(a: Any, b: Any) -> bool | None:
    return None if a is None or b is None else a == b


def _and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def _lt(a: Any, b: Any) -> bool | None:
    return None if a is None or b is None else a < b


# (SQL condition over t.h, its value for a row under SQL's three-valued logic); `k` drawn
CONDITIONS: list[Callable[[int], tuple[str, Callable[[Row, list[Row]], bool | None]]]] = [
    lambda k: (f"v = {k}", lambda r, _: _eq(r["v"], k)),
    lambda k: (f"v <> {k}", lambda r, _: None if r["v"] is None else r["v"] != k),
    lambda k: ("id IS NULL", lambda r, _: r["id"] is None),
    lambda k: (
        f"p = 'a' AND id > {k}",
        lambda r, _: _and(_eq(r["p"], "a"), _lt(k, r["id"])),
    ),
    lambda k: (
        f"id IN ({k}, {k + 2}) OR v IS NULL",
        lambda r, _: _or(_or(_eq(r["id"], k), _eq(r["id"], k + 2)), r["v"] is None),
    ),
    lambda k: (f"v <=> {k % 2}", lambda r, _: r["v"] == k % 2),
    lambda k: ("true", lambda r, _: True),
    lambda k: (
        # a subquery over the table itself, read at the same snapshot
        f"id IN (SELECT id FROM t.h WHERE v = {k % 4})",
        lambda r, live: _in(r["id"], [x["id"] for x in live if x["v"] == k % 4]),
    ),
]


def _in(x: Any, values: list[Any]) -> bool | None:
    if x is None:
        return None if values else False
    if x in values:
        return True
    return None if None in values else False


def _data_files(cat: Any, name: str = "t.h") -> set[str]:
    """The live data files of the table's current snapshot."""
    table = cat.load_table(name)
    if table.current_snapshot() is None:
        return set()
    return set(table.inspect.data_files().column("file_path").to_pylist())


def _live_rows(ref: Reference) -> list[Row]:
    """The reference's live rows, with their file and position."""
    live = ref.live()
    out = []
    for r in ref.rows:
        key = (r["id"], r["p"], r["v"])
        if live[key] and _is_live(ref, r):
            out.append(r)
    return out


def _is_live(ref: Reference, r: Row) -> bool:
    names = {1: "id", 2: "p", 3: "v"}
    if any(f == r["file"] and p == r["pos"] and r["seq"] <= s for f, p, s in ref.pos):
        return False
    return not any(
        r["seq"] < s
        and (part is None or part == r["p"])
        and all(r[names[i]] == key[i] for i in ids)
        for ids, key, part, s in ref.eq
    )


def _read(cat: Any, spark: Any, name: str = "t.h") -> Counter:
    rows = mor_sql(f"SELECT id, p, v FROM {name}", catalog=cat, spark=spark).collect()
    return Counter(tuple(r) for r in rows)


def registered_history(
    tmp_path_factory: Any, partitioned: bool, v3: bool, ops: list
) -> tuple[Any, Reference]:
    """A random history of test_semantics (after four rows with NULLs) in a new warehouse,
    registered as `t.h` (v2, or upgraded to v3), and its reference."""
    from mor.api import default_catalog

    cat = default_catalog(str(tmp_path_factory.mktemp("wh")))
    writer = TableWriter(
        cat, "t.w", SCHEMA, PART_SPEC if partitioned else UNPARTITIONED_PARTITION_SPEC
    )
    ops = [("append", [(1, "a", 1), (None, "b", 2), (2, "a", None), (3, "b", 0)])] + ops
    ops = [
        (o[0], o[1], [tuple(dict(zip((1, 3), k))[i] for i in o[1]) for k in o[2]], o[3], o[4])
        if o[0] == "eq"
        else o
        for o in ops
    ]
    ref = Reference(partitioned)
    _history(writer, ref, ops)
    if v3:
        _as_v3(cat, writer, "t.h")
    else:
        cat.register_table("t.h", writer.refresh().metadata_location)
    return cat, ref


# on 4.1 in `make soak` (CI's time): Spark 4 holds it in CI through Connect
@soak_in("4.1")
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    partitioned=st.booleans(),
    v3=st.booleans(),
    ops=st.lists(op, min_size=1, max_size=5),
    conds=st.lists(
        st.tuples(st.integers(0, len(CONDITIONS) - 1), st.integers(0, 4)), min_size=2, max_size=2
    ),
)
def test_delete_matches_the_naive_reference(
    tmp_path_factory: Any, spark: Any, partitioned: bool, v3: bool, ops: list, conds: list
) -> None:
    cat, ref = registered_history(tmp_path_factory, partitioned, v3, ops)
    for i, k in conds:
        sql, truth = CONDITIONS[i](k)
        live = _live_rows(ref)
        gone = [r for r in live if truth(r, live) is True]
        before = _data_files(cat)
        (res,) = mor_sql(f"DELETE FROM t.h WHERE {sql}", catalog=cat, spark=spark).collect()
        assert res.num_affected_rows == len(gone), sql
        table = cat.load_table("t.h")
        head = table.current_snapshot()
        if gone:
            assert res.snapshot_id == head.snapshot_id
            assert head.summary.operation.value == "delete"
            props = head.summary.additional_properties
            added = int(props.get("added-position-deletes", "0"))
            removed = int(props.get("removed-position-deletes", "0"))
            # files every row of which the condition selects by metadata are removed whole
            # (Iceberg's metadata delete): only live files, only rows the condition deletes
            dropped = before - _data_files(cat)
            assert int(props.get("deleted-data-files", "0")) == len(dropped)
            assert all(all(truth(r, live) is True for r in live if r["file"] == f) for f in dropped)
            by_position = [r for r in gone if r["file"] not in dropped]
            # v2: the new rows alone; v3: each file's whole vector, replacing the old one and
            # the file-scoped position delete files it merges (which may name one position
            # twice: their record counts, removed, can exceed the positions they held)
            if v3 and by_position:
                assert added >= len(by_position) and int(props["added-dvs"]) >= 1
                assert removed >= 0
            else:
                assert added == len(by_position)
            assert table.metadata.format_version == (3 if v3 else 2)
        else:
            assert res.snapshot_id is None
        ref.pos += [(r["file"], r["pos"], head.sequence_number) for r in gone]
        assert _read(cat, spark) == ref.live(), sql
        if not ref.eq and not v3:  # pyiceberg refuses equality deletes (and reads no v3)
            got = Counter((r["id"], r["p"], r["v"]) for r in table.scan().to_arrow().to_pylist())
            assert got == ref.live()


# UPDATE's assignments: (SQL, the new (p, v) of a row), a partition move among them
ASSIGNMENTS: list[tuple[str, Callable[[Row], tuple[Any, Any]]]] = [
    ("v = v + 10", lambda r: (r["p"], None if r["v"] is None else r["v"] + 10)),
    ("p = 'b'", lambda r: ("b", r["v"])),
    ("v = NULL, p = 'a'", lambda r: ("a", None)),
]


# on 4.1 and Connect in `make soak` (CI's time): 3.5 holds it in CI, and Spark 4 the UPDATE
# path through test_v3_updated_rows_keep_their_row_ids and the DELETE property
@soak_in("4.1", "connect")
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    partitioned=st.booleans(),
    v3=st.booleans(),
    ops=st.lists(op, min_size=1, max_size=4),
    stmts=st.lists(
        st.tuples(
            st.integers(0, len(CONDITIONS) - 1),
            st.integers(0, 4),
            st.integers(0, len(ASSIGNMENTS) - 1),
        ),
        min_size=2,
        max_size=2,
    ),
)
def test_update_matches_the_naive_reference(
    tmp_path_factory: Any, spark: Any, partitioned: bool, v3: bool, ops: list, stmts: list
) -> None:
    """UPDATE: the rows its condition is TRUE for read with their new values (a row moved to
    another partition when `p` changes), every other row as it was; on v3 each updated row
    keeps its `_row_id` once it has one, its `_last_updated_sequence_number` the commit's."""
    cat, ref = registered_history(tmp_path_factory, partitioned, v3, ops)
    for n, (i, k, a) in enumerate(stmts):
        cond, truth = CONDITIONS[i](k)
        sets, new_values = ASSIGNMENTS[a]
        live = _live_rows(ref)
        changed = [r for r in live if truth(r, live) is True]
        lineage = "SELECT id, p, v, _row_id FROM t.h" if v3 else None
        ids_before = (
            Counter(
                r["_row_id"]
                for r in mor_sql(f"{lineage} WHERE {cond}", catalog=cat, spark=spark).collect()
            )
            if lineage
            else None
        )
        sql = f"UPDATE t.h SET {sets} WHERE {cond}"
        (res,) = mor_sql(sql, catalog=cat, spark=spark).collect()
        assert res.num_affected_rows == len(changed), sql
        head = cat.load_table("t.h").current_snapshot()
        if changed:
            assert res.snapshot_id == head.snapshot_id
            assert head.summary.operation.value == "overwrite"
            assert int(head.summary.additional_properties["added-records"]) == len(changed)
        for j, r in enumerate(changed):
            p, v = new_values(r)
            ref.pos.append((r["file"], r["pos"], head.sequence_number))
            moved = {**r, "p": p, "v": v, "file": f"update-{head.snapshot_id}-{j}", "pos": 0}
            ref.rows.append({**moved, "seq": head.sequence_number})
        assert _read(cat, spark) == ref.live(), sql
        if v3 and changed:
            after = mor_sql(
                "SELECT _row_id, _last_updated_sequence_number FROM t.h "
                f"WHERE _last_updated_sequence_number = {head.sequence_number}",
                catalog=cat,
                spark=spark,
            ).collect()
            got = Counter(r[0] for r in after)
            # a row with an id keeps it; one without (written before the upgrade, never
            # rewritten since) gets a new one, no other row's
            assert ids_before is not None and None not in got, sql
            had = Counter({k: c for k, c in ids_before.items() if k is not None})
            assert not had - got, sql  # every id kept
            assert sum(got.values()) == sum(ids_before.values()), sql


def _three_files(cat: Any, name: str = "c.t") -> TableWriter:
    """ids 0-4 in partition a (one file), 10-14 in b (one file), p identity-partitioned."""
    w = TableWriter(cat, name, SCHEMA, PART_SPEC)
    for p, lo in (("a", 0), ("b", 10)):
        ids = list(range(lo, lo + 5))
        w.append(
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "p": [p] * 5,
                    "v": pa.array([i % 3 for i in ids], pa.int64()),
                }
            )
        )
    return w


def _ids(cat: Any, spark: Any, name: str = "c.t") -> list[int]:
    return sorted(
        r[0] for r in mor_sql(f"SELECT id FROM {name}", catalog=cat, spark=spark).collect()
    )


def _mor_files(w: TableWriter) -> list[str]:
    root = w.refresh().metadata.location.removeprefix("file://")
    return [f for _, _, fs in os.walk(root) for f in fs if f.startswith("mor-")]


def test_a_concurrent_append_conflicts_under_serializable_and_is_rebased_under_snapshot(
    catalog: Any, spark: Any
) -> None:
    w = _three_files(catalog)

    def append(p: str, ident: int) -> Callable[[int], None]:
        def land(attempt: int) -> None:
            if attempt == 1:
                w.append(
                    pa.table(
                        {
                            "id": pa.array([ident], pa.int64()),
                            "p": [p],
                            "v": pa.array([0], pa.int64()),
                        }
                    )
                )

        return land

    # serializable (the default): a new file of partition a may hold rows `p = 'a'` matches
    before = _mor_files(w)
    with landing(append("a", 5)), pytest.raises(ConflictError, match="serializable"):
        run_row_write("DELETE FROM c.t WHERE p = 'a' AND v = 0", catalog=catalog, spark=spark)
    assert _mor_files(w) == before  # nothing left behind
    assert _ids(catalog, spark) == [0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14]
    # a file of partition b cannot: rebased over
    with landing(append("b", 15)):
        r = run_row_write("DELETE FROM c.t WHERE p = 'a' AND v = 0", catalog=catalog, spark=spark)
    # ids 0, 3 and 5 (the append that conflicted landed)
    assert r.rows == 3 and r.attempts == 2 and len(r.rebased_over) == 1
    assert _ids(catalog, spark) == [1, 2, 4, 10, 11, 12, 13, 14, 15]
    # snapshot isolation: a file that may hold such rows is rebased over too, its row kept
    with w.refresh().transaction() as tx:
        tx.set_properties({"write.delete.isolation-level": "snapshot"})
    with landing(append("a", 6)):
        r = run_row_write("DELETE FROM c.t WHERE p = 'a' AND v = 1", catalog=catalog, spark=spark)
    assert r.rows == 2 and r.isolation == "snapshot" and r.attempts == 2  # ids 1, 4
    assert _ids(catalog, spark) == [2, 6, 10, 11, 12, 13, 14, 15]


def test_the_conflict_filter_holds_over_the_equality_delete_rewrite(
    catalog: Any, spark: Any
) -> None:
    """With equality deletes on some files the rows query is planned as several branches; the
    condition still decides which new files may conflict (it did not: every new data file
    stopped a serializable DELETE of such a table, a Flink CDC table's every DELETE)."""
    w = _three_files(catalog)
    b = next(t.file for t in w.refresh().scan().plan_files() if t.file.partition[0] == "b")
    w.commit(deletes=[w.equality_delete_file([1], [{1: 11}], b.partition, b.spec_id)])

    def land(attempt: int) -> None:  # a row of partition a whose v the condition cannot match
        if attempt == 1:
            rows = {"id": pa.array([7], pa.int64()), "p": ["a"], "v": pa.array([5], pa.int64())}
            w.append(pa.table(rows))

    with landing(land):
        r = run_row_write("DELETE FROM c.t WHERE v = 0", catalog=catalog, spark=spark)
    assert r.rows == 3 and r.attempts == 2  # ids 0, 3 and 12, over both files
    assert _ids(catalog, spark) == [1, 2, 4, 7, 10, 13, 14]


def test_a_concurrent_delete_on_the_same_file_stops_it_leaving_nothing(
    catalog: Any, spark: Any
) -> None:
    w = _three_files(catalog)
    with w.refresh().transaction() as tx:
        tx.set_properties({"write.delete.isolation-level": "snapshot"})
    files = {t.file.partition[0]: t.file for t in w.refresh().scan().plan_files()}

    def delete(attempt: int) -> None:
        if attempt == 1:
            f = files["a"]
            w.commit(deletes=[w.position_delete_file({f.file_path: [4]}, f)])

    before = _mor_files(w)
    with landing(delete), pytest.raises(ConflictError, match="position deletes"):
        run_row_write("DELETE FROM c.t WHERE id < 2", catalog=catalog, spark=spark)
    assert _mor_files(w) == before
    assert _ids(catalog, spark) == [0, 1, 2, 3, 10, 11, 12, 13, 14]  # the other commit's alone

    # an equality delete that may hold the statement's rows conflicts at any isolation level
    def eq(attempt: int) -> None:
        if attempt == 1:
            f = files["b"]
            w.commit(deletes=[w.equality_delete_file([1], [{1: 11}], f.partition, f.spec_id)])

    with landing(eq), pytest.raises(ConflictError, match="equality deletes"):
        run_row_write("DELETE FROM c.t WHERE p = 'b' AND id >= 11", catalog=catalog, spark=spark)
    assert _ids(catalog, spark) == [0, 1, 2, 3, 10, 12, 13, 14]
    # one whose keys its condition cannot match (by the file's bounds) is rebased over
    with landing(eq):
        r = run_row_write("DELETE FROM c.t WHERE p = 'b' AND id > 12", catalog=catalog, spark=spark)
    assert r.rows == 2 and r.attempts == 2
    assert _ids(catalog, spark) == [0, 1, 2, 3, 10, 12]


def test_refusals_and_errors_are_one_line(catalog: Any, spark: Any) -> None:
    _three_files(catalog)
    for sql, why in (
        ("INSERT INTO c.t VALUES (1, 'a')", "INSERT INTO c.t: the table takes 3 columns"),
        ("DELETE FROM c.t VERSION AS OF 1 WHERE id = 1", "a snapshot cannot be changed"),
        ("DELETE FROM c.nosuch WHERE id = 1", "c.nosuch"),
        ("DELETE FROM c.t WHERE id = 1 LIMIT 1", "no LIMIT"),
    ):
        with pytest.raises(MorError, match=why) as e:
            mor_sql(sql, catalog=catalog, spark=spark)
        assert "\n" not in str(e.value)
    # an unknown column names its line and column in the user's statement
    with pytest.raises(MorError, match=r"line 2, column 9") as e:
        mor_sql("DELETE FROM c.t\n  WHERE nosuch = 1", catalog=catalog, spark=spark)
    assert "VERSION AS OF" not in str(e.value)
    with pytest.raises(MorError, match=r"line 1, column 23"):
        mor_sql("DELETE FROM c.t WHERE nosuch = 1", catalog=catalog, spark=spark)
    assert _ids(catalog, spark) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]


def _cli(wh: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MOR_WAREHOUSE": str(wh)}
    return subprocess.run(
        [str(Path(sys.executable).parent / "mor"), "run", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_cli_runs_delete_then_queries_with_dry_run_first(
    tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mor run` in this process (its session is the test's; the kill test below runs the
    command itself)."""
    from mor.api import default_catalog
    from mor.cli import main

    wh = tmp_path / "wh"
    cat = default_catalog(str(wh))
    w = _three_files(cat)
    head = w.refresh().current_snapshot().snapshot_id
    sql = "DELETE FROM c.t WHERE v = 0; SELECT count(*) AS n FROM c.t"

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(["run", "--warehouse", str(wh), *argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, err = run("--dry-run", "-e", sql)
    assert code == 0, err
    assert "would delete 3 rows of 2 data files" in out
    assert "| 10 |" in out.splitlines()  # the query after it: nothing deleted
    assert cat.load_table("c.t").current_snapshot().snapshot_id == head
    code, out, err = run("-e", sql)
    assert code == 0, err
    assert "deleted 3 rows of 2 data files; wrote 2 position delete files" in out
    assert "| 7 |" in out.splitlines()  # the count after it, in its table
    assert _ids(cat, spark) == [1, 2, 4, 10, 11, 13, 14]
    code, out, err = run("--format", "json", "-e", "DELETE FROM c.t WHERE id = 14")
    assert code == 0 and '"rows": 1' in out and '"data_files": 1' in out, err
    code, out, err = run("-e", "DELETE FROM c.t WHERE nosuch = 1")
    assert code == 1 and out == "" and "Traceback" not in err
    assert "nosuch" in err and "line 1, column 23" in err and len(err.strip().splitlines()) == 1
    code, out, err = run("--output", str(tmp_path / "o.csv"), "-e", sql)
    assert code == 2 and "--output" in err
    assert _ids(cat, spark) == [1, 2, 4, 10, 11, 13]


# in `make soak` (CI's time): the snapshot producer's commit is killed in CI by
# tests/test_compact.py's CLI kill test
# (statement, its snapshot's operation, the rows (id, v) after it); before: v = id % 3
KILLED = [
    (
        "DELETE FROM c.t WHERE v = 0",
        "delete",
        [(1, 1), (2, 2), (4, 1), (10, 1), (11, 2), (13, 1), (14, 2)],
    ),
    (
        "MERGE INTO c.t t USING (SELECT id, v FROM c.t WHERE v = 0) s ON t.id = s.id "
        "WHEN MATCHED AND t.p = 'a' THEN DELETE WHEN MATCHED THEN UPDATE SET v = 9 "
        "WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)",
        "overwrite",
        [(1, 1), (2, 2), (4, 1), (10, 1), (11, 2), (12, 9), (13, 1), (14, 2)],
    ),
]


@soak_in("3.5", "4.1", "connect")
@pytest.mark.parametrize("statement,operation,after", KILLED, ids=["delete", "merge"])
def test_cli_killed_at_any_moment_leaves_the_table_before_or_after(
    tmp_path: Path, spark: Any, statement: str, operation: str, after: list
) -> None:
    """`mor run -e "DELETE ..."` (and a MERGE) killed (SIGKILL) at moments spread over its
    run: each time the table reads as before the statement or as after it, never in between;
    a last run completes."""
    import signal
    import time

    from mor.api import default_catalog

    wh = tmp_path / "wh"
    cat = default_catalog(str(wh))
    _three_files(cat)

    def rows() -> list:
        got = mor_sql("SELECT id, v FROM c.t", catalog=cat, spark=spark).collect()
        return sorted(tuple(r) for r in got)

    before = [(i, i % 3) for i in (0, 1, 2, 3, 4, 10, 11, 12, 13, 14)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MOR_WAREHOUSE": str(wh)}
    argv = [str(Path(sys.executable).parent / "mor"), "run", "-e", statement]
    t0 = time.perf_counter()
    assert _cli(wh, "--dry-run", "-e", statement).returncode == 0
    whole = time.perf_counter() - t0
    for frac in (0.5, 0.8, 0.9, 0.97):
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(whole * frac)
        p.send_signal(signal.SIGKILL)
        p.wait()
        now = rows()
        assert now in (before, after), frac
        if now == after:
            assert cat.load_table("c.t").current_snapshot().summary.operation.value == operation
            break
    done = _cli(wh, "-e", statement)  # completes (a second time: changes nothing more)
    assert done.returncode == 0, done.stderr
    assert rows() == after
    # what the killed attempts wrote is listed as orphans, and removed without a change
    from mor.orphans import orphan_files

    gone = orphan_files("c.t", catalog=cat, older_than_hours=0, delete=True)
    assert not gone.left and gone.removed == [o.path for o in gone.orphans]
    assert rows() == after and not orphan_files("c.t", catalog=cat).orphans


def test_a_branch_named_either_way_and_main_untouched(catalog: Any, spark: Any) -> None:
    """`branch=` (the CLI's --branch) and Spark's `ns.t.branch_<name>` commit to the branch;
    main reads as before; the rows query reads the branch's head."""
    w = _three_files(catalog)
    main_head = w.refresh().current_snapshot().snapshot_id
    w.refresh().manage_snapshots().create_branch(main_head, "audit").commit()
    r = run_row_write("DELETE FROM c.t WHERE v = 0", catalog=catalog, spark=spark, branch="audit")
    assert r.rows == 3 and r.branch == "audit"
    (res,) = mor_sql(
        "DELETE FROM c.t.branch_audit WHERE id = 1", catalog=catalog, spark=spark
    ).collect()
    assert res.num_affected_rows == 1
    assert cat_head(catalog) == main_head and _ids(catalog, spark) == [
        0,
        1,
        2,
        3,
        4,
        10,
        11,
        12,
        13,
        14,
    ]
    got = mor_sql(
        "SELECT id FROM c.t VERSION AS OF 'audit'", catalog=catalog, spark=spark
    ).collect()
    assert sorted(x[0] for x in got) == [2, 4, 10, 11, 13, 14]
    assert "DELETE FROM c.t (branch audit): deletes the rows" in explain(
        "DELETE FROM c.t.branch_audit WHERE id = 2", catalog=catalog, check=False
    )
    with pytest.raises(MorError, match="branch 'audit' in the name"):
        run_row_write(
            "DELETE FROM c.t.branch_audit WHERE id = 2", catalog=catalog, spark=spark, branch="x"
        )


def cat_head(catalog: Any) -> int:
    return catalog.load_table("c.t").current_snapshot().snapshot_id


def test_v3_updated_rows_keep_their_row_ids(catalog: Any, spark: Any) -> None:
    """On v3 an updated row keeps its `_row_id` (in place and moved to another partition);
    its `_last_updated_sequence_number` is the commit's; every other row's lineage is as it
    was."""
    w = _three_files(catalog, "c.w")
    _as_v3(catalog, w, "c.t")
    run_row_write("DELETE FROM c.t WHERE id = 4", catalog=catalog, spark=spark)  # ids assigned

    def lineage() -> dict[int, tuple[int, int, str, int]]:
        sql = "SELECT id, _row_id, _last_updated_sequence_number, p, v FROM c.t"
        rows = mor_sql(sql, catalog=catalog, spark=spark).collect()
        return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}

    before = lineage()
    assert all(v[0] is not None for v in before.values())
    r = run_row_write(
        "UPDATE c.t SET v = v + 100, p = CASE WHEN id = 0 THEN 'b' ELSE p END WHERE id IN (0, 11)",
        catalog=catalog,
        spark=spark,
    )
    # both rows now in partition b: one file per task of the rows query that held one
    assert r.rows == 2 and 1 <= len(r.data_written) <= 2
    seq = catalog.load_table("c.t").current_snapshot().sequence_number
    after = lineage()
    for i, (rid, lus, p, v) in after.items():
        if i in (0, 11):
            assert (rid, lus, p, v) == (before[i][0], seq, "b", before[i][3] + 100)
        else:
            assert (rid, lus, p, v) == before[i]


def test_a_delete_removes_whole_the_files_its_condition_selects(catalog: Any, spark: Any) -> None:
    """Files every row of which the condition selects by metadata (partition values, column
    bounds) are removed from the snapshot, as Iceberg's metadata delete removes them, with
    the position delete files that named them alone; no position is written for them, and
    the rows counted are their live rows."""
    w = _three_files(catalog)
    a, b = sorted(w.refresh().inspect.data_files().column("file_path").to_pylist())
    r = run_row_write("DELETE FROM c.t WHERE id = 1", catalog=catalog, spark=spark)
    (pos_file,) = [f.path for f in r.written]
    # by its partition value: all of a's live rows (4, one deleted before), the file and the
    # position delete file that named it alone removed
    r = run_row_write("DELETE FROM c.t WHERE p = 'a'", catalog=catalog, spark=spark)
    assert (r.rows, r.written, [f.path for f in r.dropped]) == (4, [], [a])
    snap = catalog.load_table("c.t").current_snapshot()
    props = snap.summary.additional_properties
    assert snap.summary.operation.value == "delete"
    assert props["deleted-data-files"] == "1" and props["deleted-records"] == "5"
    assert props["removed-delete-files"] == "1" and props["total-data-files"] == "1"
    assert props["total-records"] == "5" and props["total-position-deletes"] == "0"
    assert "added-position-deletes" not in props
    files = catalog.load_table("c.t").inspect.files()
    assert files.column("file_path").to_pylist() == [b] and pos_file not in str(files)
    # by column bounds, with another conjunct evaluated by metadata too
    r = run_row_write("DELETE FROM c.t WHERE id >= 10 AND p = 'b'", catalog=catalog, spark=spark)
    assert r.rows == 5 and [f.path for f in r.dropped] == [b] and _ids(catalog, spark) == []
    # a condition the metadata cannot settle for the whole file: positions, as before
    w = _three_files(catalog)
    r = run_row_write("DELETE FROM c.t WHERE p = 'a' AND v = 0", catalog=catalog, spark=spark)
    assert r.rows == 2 and not r.dropped and len(r.written) == 1
    r = run_row_write("DELETE FROM c.t WHERE id < 20 AND id % 2 = 0", catalog=catalog, spark=spark)
    assert not r.dropped and r.rows == 5
    got = Counter(tuple(x.values()) for x in w.refresh().scan().to_arrow().to_pylist())
    assert got == Counter([(1, "a", 1), (11, "b", 2), (13, "b", 1)])  # pyiceberg reads it so


def test_path_map_reaches_every_write(tmp_path: Path, spark: Any, realdata: dict) -> None:
    """A table whose files are recorded under another prefix (a copy of the Dremio orders,
    position delete files naming several data files) takes a DELETE, an UPDATE and a MERGE
    through the call's path map: each reads its files, and commits the manifests it reads
    and writes, where the map puts them; the table reads right through the same map after
    each, and nothing is written under the recorded prefix."""
    import json
    import shutil

    from mor.api import default_catalog

    name = "dremio/multi_rowgroup_orders_with_deletes"
    table = realdata[name]
    copy = tmp_path / "orders"
    shutil.copytree(ROOT / "tests" / "realdata" / table["maps_to"], copy)
    meta_path = copy / "metadata" / Path(table["metadata"]).name
    meta = json.loads(meta_path.read_text())
    meta["location"] = str(copy)  # where it lies now; every file still recorded as written
    meta_path.write_text(json.dumps(meta))
    cat = default_catalog(str(tmp_path / "wh"))
    cat.create_namespace("r")
    cat.register_table(("r", "orders"), str(meta_path))
    pm = {table["prefix_in_files"]: str(copy)}

    def rows() -> Counter:
        got = mor_sql(
            "SELECT order_id, amount FROM r.orders", catalog=cat, path_map=pm, spark=spark
        )
        return Counter(tuple(r) for r in got.collect())

    want = rows()
    assert sum(want.values()) == table["expected"]["snapshots"][-1]["row_count"]
    statements = [
        ("DELETE FROM r.orders WHERE order_id % 10 = 3", lambda k, v: None if k % 10 == 3 else v),
        (
            "UPDATE r.orders SET amount = amount + 1 WHERE order_id % 10 = 4",
            lambda k, v: v + 1 if k % 10 == 4 else v,
        ),
        (
            "MERGE INTO r.orders t USING (SELECT order_id FROM r.orders WHERE order_id % 10 = 5) s "
            "ON t.order_id = s.order_id WHEN MATCHED THEN DELETE",
            lambda k, v: None if k % 10 == 5 else v,
        ),
    ]
    for sql, change in statements:
        (res,) = mor_sql(sql, catalog=cat, path_map=pm, spark=spark).collect()
        assert res.snapshot_id is not None, sql
        after: Counter = Counter()
        for (k, v), n in want.items():
            if change(k, v) is not None:
                after[(k, change(k, v))] += n
        assert rows() == after, sql
        assert res.num_affected_rows == sum(n for (k, v), n in want.items() if change(k, v) != v), (
            sql
        )
        want = after
    assert not os.path.exists(table["prefix_in_files"])
    assert cat.load_table("r.orders").metadata_location.startswith(str(copy))


def test_the_shell_runs_deletes_updates_and_merges(
    tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mor shell` runs a DELETE, an UPDATE and a MERGE as `mor run` does (with its --branch
    and --dry-run), and a query after them sees what they committed."""
    import io

    from mor.api import default_catalog
    from mor.cli import main

    wh = tmp_path / "wh"
    cat = default_catalog(str(wh))
    _three_files(cat)
    script = [
        "DELETE FROM c.t WHERE v = 0;",
        "UPDATE c.t SET v = 100 WHERE id = 1;",
        "MERGE INTO c.t t USING (SELECT 99 AS id, 'b' AS p, 5L AS v) s ON t.id = s.id",
        "  WHEN NOT MATCHED THEN INSERT *;",
        "SELECT id, v FROM c.t WHERE id IN (1, 99) ORDER BY id;",
        "EXPLAIN DELETE FROM c.t WHERE id = 2;",
    ]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(script) + "\n"))
    code = main(["shell", "--warehouse", str(wh)])
    out, err = capsys.readouterr()
    assert code == 0 and err == "", err
    assert "c.t: deleted 3 rows of 2 data files" in out
    assert "c.t: updated 1 rows of 1 data files" in out
    assert "c.t: merged 1 rows (0 updated, 0 deleted, 1 inserted" in out
    assert "| 1  | 100 |" in out and "| 99 | 5   |" in out
    assert "DELETE FROM c.t: deletes the rows (_file, _pos) of this query" in out
    assert _ids(cat, spark) == [1, 2, 4, 10, 11, 13, 14, 99]
    # the shell's --dry-run: counted, nothing committed
    head = cat.load_table("c.t").current_snapshot().snapshot_id
    monkeypatch.setattr("sys.stdin", io.StringIO("DELETE FROM c.t WHERE id > 10;\n"))
    assert main(["shell", "--warehouse", str(wh), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    # 11, 13, 14 by position; the MERGE's file (99 alone) removed whole
    want = "would delete 4 rows of 2 data files, writing 1 position delete files, 1 data files"
    assert f"{want} removed whole" in out, out + err
    assert cat.load_table("c.t").current_snapshot().snapshot_id == head


def test_an_interrupt_during_a_commit_waits_for_the_catalogs_answer() -> None:
    """Ctrl-C while the catalog is asked to commit is held until it answers, then raised
    saying what the block made: what the statement wrote is known to be committed or not
    (its files kept or removed). Outside the CLI the caller's handler is put back."""
    import signal

    from mor import interrupts

    reached = []
    before = signal.getsignal(signal.SIGINT)  # Python's, or the SparkContext's in a session
    with pytest.raises(interrupts.Interrupted) as got:
        with interrupts.held(lambda: "committed as snapshot 7"):
            os.kill(os.getpid(), signal.SIGINT)
            reached.append("the commit went on")
    assert reached == ["the commit went on"]
    assert interrupts.line(got.value) == "mor: interrupted: committed as snapshot 7"
    assert signal.getsignal(signal.SIGINT) is before


def test_python_workers_lacking_pyarrow_get_one_line_before_any_task(
    catalog: Any, spark: Any, tmp_path: Path
) -> None:
    """A session whose Python workers cannot import what mor's tasks import is told so in
    one line naming the interpreter and what it lacks, before any of the write's tasks runs
    (nothing written, nothing committed); a session whose workers can is asked once. Classic
    local sessions: the workers' interpreter (`pythonExec`) is asked directly, here a fresh
    virtual environment without pyarrow; clusters and Spark Connect: one task reports it."""
    from mor.physical.spark import workers
    from mor.physical.spark.session import is_connect

    w = _three_files(catalog)
    before = w.refresh().current_snapshot().snapshot_id
    # the task's report (what a cluster or a Connect server answers), on this leg's session
    assert workers._asked_by_a_task(spark, "here", ("pyarrow",)) is None
    said = workers._asked_by_a_task(spark, "the workers", ("pyarrow", "mor_no_such_module"))
    assert said is not None and "the workers, which lacks mor_no_such_module" in said
    if is_connect(spark):
        return  # a Connect client cannot point the server's workers elsewhere
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    sc = spark.sparkContext
    saved, sc.pythonExec = sc.pythonExec, str(bare / "bin" / "python")
    checked = set(workers._CHECKED)
    workers._CHECKED.clear()
    jobs = max(sc.statusTracker().getJobIdsForGroup(), default=-1)
    try:
        with pytest.raises(MorError) as e:
            mor_sql("DELETE FROM c.t WHERE v = 1", catalog=catalog, spark=spark)
    finally:
        sc.pythonExec = saved
        workers._CHECKED.clear()
        workers._CHECKED.update(checked)
    line = str(e.value)
    assert "\n" not in line and line.startswith("DELETE on c.t: Spark's Python workers run ")
    assert str(bare / "bin" / "python") in line and "lacks pyarrow" in line
    assert f"PYSPARK_PYTHON={sys.executable}" in line
    assert max(sc.statusTracker().getJobIdsForGroup(), default=-1) == jobs  # no job ran
    assert w.refresh().current_snapshot().snapshot_id == before and not _mor_files(w)
    mor_sql("DELETE FROM c.t WHERE v = 1", catalog=catalog, spark=spark)  # the real workers
    assert _ids(catalog, spark) == [0, 2, 3, 11, 12, 14]
