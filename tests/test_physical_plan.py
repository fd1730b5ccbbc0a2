"""One physical plan (rules/physical/) for EXPLAIN PHYSICAL and the compiler: what is printed
is what runs. Each case plans a query once, formats the plan, translates the same plan into
DataFrames and checks that the nodes formatted are the nodes translated (the one exception:
a branch whose equality deletes a step resolves is printed with a preview of its scan and runs
the scan planned over the positions the step found), and that the rows are the live ones."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from mor.api import plan_query
from mor.physical.compile import Compiler
from mor.physical.describe import describe_plan
from mor.physical.spark import reuse
from mor.planner.settings import applied
from mor.planner.state import ProcessCaches, caches
from mor.rules.physical import equality as resolution
from mor.rules.physical import plan_physical
from mor.rules.physical.nodes import (
    AntiJoinExec,
    QueryExec,
    ReadData,
    ReadEqDeletes,
    ResolvedBranch,
    ResolveEqDeletes,
)
from mor.rules.physical.reading import SessionFacts
from mor.writer.tables import TableWriter

# the legs beyond pyspark 3.5 classic that run this file (markers: pyproject.toml)
pytestmark = [pytest.mark.spark4, pytest.mark.connect]

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "s", StringType(), required=False),
    NestedField(3, "g", LongType(), required=False),
)


def _table(catalog: Any) -> None:
    """Three data files: one with a position delete and equality deletes of two id sets, one
    with equality deletes of one set, one with none (appended after the deletes)."""
    w = TableWriter(catalog, "pp.t", SCHEMA)

    def rows(lo: int, hi: int) -> pa.Table:
        ids = list(range(lo, hi))
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "s": [f"s{i}" for i in ids],
                "g": pa.array([i % 3 for i in ids], pa.int64()),
            }
        )

    _, (a,) = w.append(rows(0, 10))
    w.append(rows(10, 20))
    by_id = w.equality_delete_file([1], [{1: 3}, {1: 12}])
    by_s = w.equality_delete_file([2], [{2: "s7"}])
    w.commit(deletes=[by_id, by_s, w.position_delete_file({a.file_path: [5]}, a)])
    w.append(rows(20, 25))


LIVE = sorted(set(range(25)) - {3, 12, 7, 5})
SQL = "SELECT id, g FROM pp.t"


def _run(catalog: Any, spark: Any, sql: str = SQL) -> tuple[Any, str, list, Compiler, list]:
    planned = plan_query(sql, catalog=catalog)
    compiler = Compiler(spark, caches())
    physical = compiler.plan(planned.optimized)
    text, formatted = describe_plan(physical, compiler.reads.facts)
    rows = compiler.run(physical).collect()
    return physical, text, formatted, compiler, sorted(r.id for r in rows)


def _ids(nodes: list) -> set[int]:
    return {id(n) for n in nodes}


@pytest.mark.parametrize("resolve", [False, True])
def test_every_node_printed_is_a_node_translated(catalog: Any, spark: Any, resolve: bool) -> None:
    _table(catalog)
    resolution.clear_resolved(caches())
    reuse.clear()  # nothing reused from an earlier query: every node is translated
    resolving = {"resolve_equality_deletes": resolve, "resolve_at_read": 1}
    with applied(resolving, "test"):
        physical, text, formatted, compiler, ids = _run(catalog, spark)
    assert ids == LIVE
    assert isinstance(physical, QueryExec)
    kinds = {type(n).__name__ for n in formatted}
    if not resolve:
        # joined: every node printed is translated, and nothing else is
        assert _ids(formatted) == _ids(compiler.translated), text
        assert {"AntiJoinExec", "ReadEqDeletes", "ReadData", "UnionExec"} <= kinds
        assert not compiler.executed
        return
    # resolving on the first call: a step, then the branches' scans planned again
    steps = [n for n in formatted if isinstance(n, ResolveEqDeletes)]
    assert steps and compiler.executed == steps, text
    branches = [n for n in formatted if isinstance(n, ResolvedBranch)]
    previews = {id(b.scan) for b in branches}
    assert _ids(formatted) - _ids(compiler.translated) == previews | _ids(steps)
    extra = [n for n in compiler.translated if id(n) not in _ids(formatted)]
    # the final scan of each branch, and the key read of each step
    assert len(extra) == len(branches) + len(steps), [type(n).__name__ for n in extra]
    assert all(isinstance(n, ReadData) for n in extra)
    assert not any(isinstance(n, AntiJoinExec) for n in formatted)

    # again: the positions are held, the plan is final, and printed = translated
    reuse.clear()
    physical, text, formatted, compiler, ids = _run(catalog, spark)
    assert ids == LIVE
    assert not any(isinstance(n, ResolveEqDeletes) for n in formatted), text
    assert _ids(formatted) == _ids(compiler.translated), text
    assert "held from an earlier query" in text


def test_caches_are_passed_not_found(catalog: Any, spark: Any) -> None:
    """Planning, the physical rules and the compiler keep what they read in the caches they
    are given: a query planned and run with an object of its own leaves the process's caches
    empty, and the object holds the manifests, the scan, the delete file read and the
    positions resolved."""
    _table(catalog)
    caches().clear()
    own = ProcessCaches()
    with applied({"resolve_equality_deletes": True, "resolve_at_read": 1}, "test"):
        planned = plan_query(SQL, catalog=catalog, cache=own)
        compiler = Compiler(spark, own)
        ids = sorted(r.id for r in compiler.compile(planned.optimized).collect())
    assert ids == LIVE
    assert compiler.executed  # the resolving step ran, and kept its positions in `own`
    held = {k.name: len(k) for k in own.kept()}
    for name in ("manifest lists", "manifests", "planned scans", "resolved positions"):
        assert held[name], (name, held)
    assert held["position deletes"] + held["bitmaps"], held
    assert {k.name: len(k) for k in caches().kept() if len(k)} == {}


def test_decisions_are_taken_once_in_the_plan(catalog: Any) -> None:
    """The plan holds every decision: with a broadcast limit of 1 byte, the delete sides are
    shuffled and compacted in the plan, and EXPLAIN says so from the same nodes."""
    _table(catalog)
    planned = plan_query(SQL, catalog=catalog)
    with applied({"resolve_equality_deletes": False}, "test"):
        physical = plan_physical(planned.optimized, SessionFacts(broadcast_limit=1), caches())
        text, formatted = describe_plan(physical, SessionFacts(broadcast_limit=1))
    sides = [n for n in formatted if isinstance(n, ReadEqDeletes)]
    assert sides and not any(s.broadcast for s in sides)
    assert "(shuffled, not broadcast" in text
    scans = [n for n in formatted if isinstance(n, ReadData)]
    assert any(s.positions is not None for s in scans)
    assert all(s.reading.listed for s in scans)


def test_session_facts_asked_while_planning_obey_the_callers_settings(
    catalog: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mor_sql asks the session's facts on a thread of their own while it plans
    (physical/scan/reads.early_facts): the thread must see the settings of the call that started
    it (a context variable a plain thread does not carry), and the query is compiled with
    them: file_lists off, the facts say so and no file list is written for the query."""
    from mor import mor_sql
    from mor.physical.scan import file_lists
    from mor.physical.scan.reads import early_facts
    from mor.physical.spark.session import is_connect

    with applied({"file_lists": False}):
        facts = early_facts(spark)
    assert facts().lists == "setting file_lists is off"

    _table(catalog)
    written: list[list] = []

    def spy(entries: Any) -> str:
        entries = list(entries)
        written.append(entries)
        return real(entries)

    real = file_lists.write
    monkeypatch.setattr(file_lists, "write", spy)
    df = mor_sql(SQL, catalog=catalog, spark=spark, settings={"file_lists": False})
    assert sorted(r[0] for r in df.collect()) == LIVE
    assert written == [], written
    df = mor_sql(SQL, catalog=catalog, spark=spark)
    assert sorted(r[0] for r in df.collect()) == LIVE
    if not is_connect(spark):  # a Spark Connect server may not see the lists' folder
        assert written, "file lists on: the scan is read through one"
