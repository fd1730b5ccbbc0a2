"""Equality deletes resolved once (rules/physical/equality.py): the positions a first query finds
are kept per data file and later queries read the file as one with position deletes. The
answer must equal the anti-join's, and a key that forgot a delete file, a sequence number or a
replaced file would reuse a stale answer: each of those is shown to matter here."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from helpers import altered
from mor import explain, mor_sql
from mor.physical.spark import reuse
from mor.planner.errors import DataFileError
from mor.planner.nodes import AntiJoin, IcebergScan
from mor.planner.state import caches
from mor.rules.physical import equality as resolution
from mor.writer.tables import TableWriter

# the legs beyond pyspark 3.5 classic that run this file (markers: pyproject.toml): Spark 4 through
# Spark Connect (the newest pyspark's classic leg runs the suites whose answers depend on its SQL)
pytestmark = [pytest.mark.connect]

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "s", StringType(), required=False),
)
OFF = {"resolve_equality_deletes": False}


@pytest.fixture(autouse=True)
def _resolve_at_first_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are of resolving itself: a first read resolves (`resolve_at_read = 1`),
    unless a test says otherwise (the default, 2, has its own tests at the end)."""
    monkeypatch.setenv("MOR_RESOLVE_AT_READ", "1")


def _table(catalog: Any) -> tuple[TableWriter, Any, Any]:
    """Two data files (ids 0-9, 10-19), an equality delete of ids 3 and 12 and a position
    delete of position 5 of the first file. Returns the writer, the first data file and the
    equality delete file."""
    w = TableWriter(catalog, "q.t", SCHEMA)
    _, (a,) = w.append(
        pa.table({"id": pa.array(range(10), pa.int64()), "s": [f"a{i}" for i in range(10)]})
    )
    w.append(
        pa.table({"id": pa.array(range(10, 20), pa.int64()), "s": [f"b{i}" for i in range(10)]})
    )
    eq = w.equality_delete_file([1], [{1: 3}, {1: 12}])
    w.commit(deletes=[eq, w.position_delete_file({a.file_path: [5]}, a)])
    return w, a, eq


def _fresh() -> None:
    resolution.clear_resolved(caches())
    reuse.clear()


def _ids(catalog: Any, spark: Any, sql: str = "SELECT id FROM q.t", **settings: Any) -> list:
    df = mor_sql(sql, catalog=catalog, spark=spark, settings=settings)
    return sorted(r[0] for r in df.collect())


LIVE = [0, 1, 2, 4, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19]


def test_resolved_positions_give_the_anti_joins_rows(catalog: Any, spark: Any) -> None:
    _table(catalog)
    _fresh()
    plan = explain("SELECT id, s FROM q.t", catalog=catalog, physical=True)
    assert "resolve equality deletes first (a Spark job): 2 of 2 data file(s)" in plan
    assert "left_anti" not in plan
    assert _ids(catalog, spark) == LIVE  # cold: resolved by this query
    assert resolution.held(caches()) == (2, 2 + 2)  # two files, one position each
    reuse.clear()  # no DataFrame of the first query: the positions alone carry the answer
    plan = explain("SELECT s FROM q.t", catalog=catalog, physical=True)
    assert "equality deletes resolved: the positions they remove from 2 data file(s)" in plan
    assert "columns by name: s(2);" in plan  # the key column is not read
    assert sorted(
        r.s for r in mor_sql("SELECT s FROM q.t", catalog=catalog, spark=spark).collect()
    ) == sorted(f"a{i}" for i in LIVE if i < 10) + sorted(f"b{i - 10}" for i in LIVE if i >= 10)
    assert _ids(catalog, spark, "SELECT count(*) FROM q.t") == [len(LIVE)]
    assert _ids(catalog, spark, "SELECT id FROM q.t WHERE id > 2") == [i for i in LIVE if i > 2]
    assert _ids(catalog, spark, **OFF) == LIVE  # the anti-join, as before
    off = explain("SELECT id FROM q.t", catalog=catalog, physical=True, settings=OFF)
    assert "left_anti join" in off and "setting resolve_equality_deletes is off" in off


def test_a_new_delete_file_or_snapshot_never_reuses_a_stale_answer(
    catalog: Any, spark: Any
) -> None:
    w, a, _ = _table(catalog)
    _fresh()
    first = w.refresh().current_snapshot().snapshot_id
    assert _ids(catalog, spark) == LIVE
    w.commit(deletes=[w.equality_delete_file([1], [{1: 4}, {1: 15}])])
    assert _ids(catalog, spark) == [i for i in LIVE if i not in (4, 15)]
    # the earlier snapshot still has its own answer, from its own keys
    at = f"SELECT id FROM q.t VERSION AS OF {first}"
    assert _ids(catalog, spark, at) == LIVE
    # a row written after the deletes is not deleted by them (sequence numbers)
    w.append(pa.table({"id": pa.array([3, 4], pa.int64()), "s": ["new3", "new4"]}))
    assert _ids(catalog, spark) == sorted([i for i in LIVE if i not in (4, 15)] + [3, 4])
    # a replaced data file is refused before anything resolved for it is used
    with altered(a.file_path, lambda b: b + b"\0"):
        with pytest.raises(DataFileError, match="was replaced or truncated"):
            _ids(catalog, spark)


def test_the_key_holds_what_the_answer_depends_on(catalog: Any) -> None:
    """Mutation check of `file_key`: changing any input of the answer changes the key."""
    from mor.api import plan_query

    w, _, _ = _table(catalog)
    planned = plan_query("SELECT id FROM q.t", catalog=catalog)
    join = next(n for n in planned.optimized.walk() if isinstance(n, AntiJoin))
    base, joins = resolution.chain_of(join)
    fields = resolution.key_fields(base, joins)
    deletes = base.deletes_by_id()
    t = base.data_files()[0]
    (d_id,) = t.eq_deletes
    d = deletes[d_id]

    def key(task: Any = t, dels: Any = deletes, scan: IcebergScan = base) -> tuple:
        return resolution.file_key(task, scan, dels, fields)

    same = key()
    assert key() == same
    changed = {
        "data size": key(replace(t, size_bytes=t.size_bytes + 1)),
        "data sequence number": key(replace(t, data_seq=t.data_seq + 1)),
        "data path": key(replace(t, read_path=t.read_path + "x")),
        "data rows": key(replace(t, record_count=t.record_count + 1)),
        "data partition": key(replace(t, partition=((1000, 1),))),
        "delete sequence number": key(dels={**deletes, d_id: replace(d, data_seq=d.data_seq + 1)}),
        "delete size": key(dels={**deletes, d_id: replace(d, size_bytes=d.size_bytes + 1)}),
        "delete path": key(dels={**deletes, d_id: replace(d, path=d.path + "x")}),
        "delete id set": key(dels={**deletes, d_id: replace(d, eq_ids=frozenset({1, 2}))}),
        "another delete": key(
            replace(t, eq_deletes=(d_id, 999)), {**deletes, 999: replace(d, file_id=999)}
        ),
        "key type": resolution.file_key(
            t, base, deletes, tuple(replace(f, type_str='"int"') for f in fields)
        ),
    }
    for what, k in changed.items():
        assert k != same, f"the key ignores the {what}"


def test_a_key_without_the_delete_files_would_return_deleted_rows(
    catalog: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end-to-end tests above can fail: with delete files left out of the key, the newer
    snapshot's delete is missed."""
    w, _, _ = _table(catalog)
    _fresh()
    real = resolution.file_key

    def forgetful(task: Any, *rest: Any) -> tuple:
        return real(replace(task, eq_deletes=()), *rest)

    monkeypatch.setattr(resolution, "file_key", forgetful)
    assert _ids(catalog, spark) == LIVE
    w.commit(deletes=[w.equality_delete_file([1], [{1: 4}])])
    reuse.clear()
    assert 4 in _ids(catalog, spark)  # stale: what the real key prevents
    _fresh()


def test_a_branch_too_large_to_hold_joins(catalog: Any, spark: Any) -> None:
    _table(catalog)
    _fresh()
    small = {"resolved_cache_rows": 1}
    plan = explain("SELECT id FROM q.t", catalog=catalog, physical=True, settings=small)
    assert "equality deletes joined, not resolved (its files could lose ~2 rows" in plan
    assert "left_anti join" in plan
    assert _ids(catalog, spark, **small) == LIVE
    assert resolution.held(caches()) == (0, 0)


def test_a_filtered_query_joins_first_and_resolves_when_read_again(
    catalog: Any, spark: Any
) -> None:
    """A filter read into the scan skips row groups that resolving would read: the first
    filtered query joins, the next one over the same files resolves, later ones hold."""
    _table(catalog)
    _fresh()
    sql = "SELECT id FROM q.t WHERE s <> 'a1'"
    want = [i for i in LIVE if i != 1]
    plan = explain(sql, catalog=catalog, physical=True)
    assert "resolved when a query reads them again" in plan and "left_anti join" in plan
    assert _ids(catalog, spark, sql) == want
    assert resolution.held(caches()) == (0, 0) and resolution.seen(caches()) == 2
    reuse.clear()
    assert "resolve equality deletes first" in explain(sql, catalog=catalog, physical=True)
    assert _ids(catalog, spark, sql) == want
    assert resolution.held(caches())[0] == 2
    reuse.clear()
    assert "equality deletes resolved:" in explain(sql, catalog=catalog, physical=True)
    assert _ids(catalog, spark, sql) == want


def test_held_positions_survive_their_eviction_within_the_query(catalog: Any, spark: Any) -> None:
    """A query that resolves some files and holds others: storing the new positions may push
    the held ones out of the bounded cache, and the query must still apply them."""
    w = TableWriter(catalog, "q.e", SCHEMA)
    w.append(pa.table({"id": pa.array(range(10), pa.int64()), "s": ["a"] * 10}))
    w.commit(deletes=[w.equality_delete_file([1], [{1: 3}])])
    _fresh()
    tight = {"resolved_cache_rows": 3}  # one file's entry (a position + 1) fits, not two
    sql = "SELECT id FROM q.e"
    assert _ids(catalog, spark, sql, **tight) == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert resolution.held(caches()) == (1, 2)
    w.append(pa.table({"id": pa.array(range(10, 20), pa.int64()), "s": ["b"] * 10}))
    w.commit(deletes=[w.equality_delete_file([1], [{1: 12}])])  # bounds exclude the first file
    reuse.clear()
    got = _ids(catalog, spark, sql, **tight)
    assert got == [i for i in range(20) if i not in (3, 12)]
    assert resolution.held(caches()) == (1, 2)  # the first file's entry made room for the second's


def test_a_replaced_equality_delete_file_is_refused_though_resolved(
    catalog: Any, spark: Any
) -> None:
    """Held positions are no way around the size check of the delete files they came from."""
    _, _, eq = _table(catalog)
    _fresh()
    assert _ids(catalog, spark) == LIVE
    reuse.clear()
    with altered(eq.file_path, lambda b: b + b"\0"):
        with pytest.raises(DataFileError, match="equality delete file .* was replaced"):
            _ids(catalog, spark)
        # a count answered from metadata and held positions reads no data file: checked too
        with pytest.raises(DataFileError, match="equality delete file .* was replaced"):
            _ids(catalog, spark, "SELECT count(*) FROM q.t")
    assert _ids(catalog, spark) == LIVE


def test_by_default_a_first_read_joins_and_the_second_resolves(
    catalog: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """resolve_at_read = 2 (the default): the first query of a process over the files
    anti-joins and counts the read (EXPLAIN counts none), the second resolves them, the third
    holds them. The first query's DataFrame, kept for reuse on a classic session, does not
    serve the second: its plan decided otherwise."""
    monkeypatch.delenv("MOR_RESOLVE_AT_READ")
    _table(catalog)
    _fresh()
    sql = "SELECT id FROM q.t"
    for _ in range(2):
        plan = explain(sql, catalog=catalog, physical=True)
        assert "read 1 of these files in this process; resolved at read 2" in plan, plan
        assert "left_anti join" in plan
    assert _ids(catalog, spark, sql) == LIVE
    assert resolution.held(caches()) == (0, 0) and resolution.seen(caches()) == 2
    assert "resolve equality deletes first" in explain(sql, catalog=catalog, physical=True)
    assert _ids(catalog, spark, sql) == LIVE  # no reuse.clear(): the decision differs
    assert resolution.held(caches())[0] == 2
    assert "equality deletes resolved:" in explain(sql, catalog=catalog, physical=True)
    assert _ids(catalog, spark, sql) == LIVE


def test_a_read_counts_though_its_dataframe_is_reused(
    catalog: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """resolve_at_read = 3: the second query joins again (on a classic session its DataFrame
    is the first one's, reused) and still counts, so the third resolves."""
    monkeypatch.setenv("MOR_RESOLVE_AT_READ", "3")
    _table(catalog)
    _fresh()
    sql = "SELECT id, s FROM q.t"
    assert _ids(catalog, spark, sql) == LIVE
    plan = explain(sql, catalog=catalog, physical=True)
    assert "read 2 of these files in this process; resolved at read 3" in plan, plan
    assert _ids(catalog, spark, sql) == LIVE
    assert resolution.held(caches()) == (0, 0)
    assert "resolve equality deletes first" in explain(sql, catalog=catalog, physical=True)
    assert _ids(catalog, spark, sql) == LIVE
    assert resolution.held(caches())[0] == 2
