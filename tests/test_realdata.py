"""Conformance on the seven real tables (tests/realdata, from ../shared), every readable snapshot.

The tables are part of the repository: every case is collected, and a missing file fails."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mor import mor_sql
from mor.physical.spark import reuse
from mor.planner.errors import MetadataError
from mor.planner.state import caches
from mor.rules.physical import equality as resolution

# the fast tier too (`make check`: tests/legs.py)
pytestmark = [pytest.mark.check]


# the legs beyond pyspark 3.5 classic that run each test (markers: pyproject.toml): the current
# snapshots everywhere; every snapshot on 3.5 classic only (which snapshot's files a read takes
# is the planner's, the same on every Spark; the 4.1 leg reads every snapshot of these tables
# with Iceberg's reader too, tests/test_oracle.py); files read by path on Spark Connect as well
def every_leg(test: Any) -> Any:
    return pytest.mark.cluster(pytest.mark.spark4(pytest.mark.connect(test)))


REALDATA = Path(__file__).resolve().parent / "realdata"
_TABLES = json.loads((REALDATA / "tables.json").read_text())
_EXPECTED = json.loads((REALDATA / "expected_results.json").read_text())
CASES = [(name, snap) for name in _TABLES for snap in _EXPECTED[name]["snapshots"]]


def _args(name: str) -> tuple[str, dict[str, str]]:
    t = _TABLES[name]
    return f"iceberg_scan('{REALDATA / t['metadata']}')", {
        t["prefix_in_files"]: str(REALDATA / t["maps_to"])
    }


def _expected_rows(snap: dict) -> list[tuple]:
    if "sorted_keys_field_1" in snap:
        return [(k,) for k in snap["sorted_keys_field_1"]]
    return [tuple(r) for r in snap["rows_by_field_id"]]


def _id(case: tuple[str, dict]) -> str:
    return f"{case[0].split('/')[-1]}@seq{case[1]['sequence_number']}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_snapshot_rows_and_count(case: tuple[str, dict], realdata: dict, spark: object) -> None:
    name, snap = case
    table, pm = _args(name)
    at = f"{table} VERSION AS OF {snap['snapshot_id']}"
    if "unreadable" in snap:
        with pytest.raises(MetadataError, match="manifest list .* is missing"):
            mor_sql(f"SELECT * FROM {at}", path_map=pm, spark=spark)
        return
    want = _expected_rows(snap)
    # equality deletes by the anti-join, then resolved by the query (cold: resolve_at_read 1),
    # then from the positions held (rules/physical/equality.py)
    resolution.clear_resolved(caches())
    for how in ("anti-join", "resolved cold", "resolved held"):
        settings = {"resolve_equality_deletes": how != "anti-join", "resolve_at_read": 1}
        if how == "resolved held":
            reuse.clear()
        df = mor_sql(f"SELECT * FROM {at}", path_map=pm, spark=spark, settings=settings)
        rows = df.collect()
        if "sorted_keys_field_1" in snap:
            assert sorted(r[0] for r in rows) == [k for (k,) in want], how
        else:
            assert Counter(tuple(str(v) for v in r) for r in rows) == Counter(want), how
    (n,) = mor_sql(f"SELECT count(*) FROM {at}", path_map=pm, spark=spark).collect()[0]
    assert n == snap["row_count"]


@every_leg
@pytest.mark.parametrize("name", list(_TABLES))
def test_current_snapshot_queries(name: str, realdata: dict, spark: object) -> None:
    """Projections without the equality columns, filters and aggregates on the current snapshot."""
    table, pm = _args(name)
    snap = next(
        s
        for s in _EXPECTED[name]["snapshots"]
        if s["snapshot_id"] == _TABLES[name]["current_snapshot_id"]
    )
    want = _expected_rows(snap)
    keys = sorted(int(r[0]) for r in want)
    # the first column is field 1 in every table here
    first = mor_sql(f"SELECT * FROM {table}", path_map=pm, spark=spark).columns
    k = first[0]
    last = first[-1]
    # a projection that leaves out the key column (often the equality column)
    got = mor_sql(f"SELECT {last} FROM {table}", path_map=pm, spark=spark).collect()
    assert len(got) == snap["row_count"]
    # a filter on the key, and one that excludes everything
    mid = keys[len(keys) // 2]
    got = mor_sql(f"SELECT {k} FROM {table} WHERE {k} >= {mid}", path_map=pm, spark=spark).collect()
    assert sorted(int(r[0]) for r in got) == [x for x in keys if x >= mid]
    assert (
        mor_sql(f"SELECT count(*) FROM {table} WHERE {k} < -1", path_map=pm, spark=spark).collect()[
            0
        ][0]
        == 0
    )
    # aggregates
    row = mor_sql(
        f"SELECT count(*) AS n, min({k}) AS lo, max({k}) AS hi, sum({k}) AS s FROM {table}",
        path_map=pm,
        spark=spark,
    ).collect()[0]
    assert (row.n, row.lo, row.hi, row.s) == (len(keys), min(keys), max(keys), sum(keys))
    grouped = mor_sql(
        f"SELECT {k} % 2 AS parity, count(*) AS n FROM {table} "
        f"GROUP BY {k} % 2 HAVING count(*) > 0",
        path_map=pm,
        spark=spark,
    ).collect()
    assert {r.parity: r.n for r in grouped} == dict(Counter(x % 2 for x in keys))


@every_leg
@pytest.mark.parametrize("name", list(_TABLES))
def test_table_directory_reads_the_current_snapshot(
    name: str, realdata: dict, spark: object
) -> None:
    """iceberg_scan('<table directory>') finds the current metadata file as Iceberg's Hadoop
    tables do, or by the table's own records when the files are not numbered (`vfinal`)."""
    t = _TABLES[name]
    directory = REALDATA / t["maps_to"]
    pm = {t["prefix_in_files"]: str(directory)}
    current = next(
        s for s in _EXPECTED[name]["snapshots"] if s["snapshot_id"] == t["current_snapshot_id"]
    )
    sql = f"SELECT count(*) FROM iceberg_scan('{directory}')"
    assert mor_sql(sql, path_map=pm, spark=spark).collect()[0][0] == current["row_count"]


@pytest.mark.connect
@pytest.mark.parametrize("name", list(_TABLES))
def test_files_read_by_path_in_groups_below_the_listing_threshold(
    name: str, realdata: dict, spark: object, position_method: str, monkeypatch: Any
) -> None:
    """Without file lists (the fallback), more files than Spark's listing threshold are read
    in groups of at most that many, so no listing job runs: with the threshold at 1 every file
    is a group of its own, and every snapshot reads the same rows, positions and files as
    through file lists (each position method)."""
    from mor.physical.scan.reads import LISTING

    table, pm = _args(name)
    queries = [f"SELECT * FROM {table}", f"SELECT _file, _pos FROM {table}"]

    def bag(sql: str) -> Counter:
        return Counter(
            tuple(str(v) for v in r) for r in mor_sql(sql, path_map=pm, spark=spark).collect()
        )

    want = [bag(q) for q in queries]
    monkeypatch.setenv("MOR_FILE_LISTS", "off")
    spark.conf.set(LISTING, "1")  # type: ignore[attr-defined]
    try:
        assert [bag(q) for q in queries] == want
    finally:
        spark.conf.unset(LISTING)  # type: ignore[attr-defined]
