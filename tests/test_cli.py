"""The CLI on bad input: exit code 1 or 2, one line on stderr, no stdout, warehouse intact."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from legs import soak_in
from mor.cli import main
from mor.planner.errors import ConfigError

# the legs beyond pyspark 3.5 classic that run this file (markers: pyproject.toml)
pytestmark = [pytest.mark.connect]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mor.demo import build_demo_table

    d = tmp_path_factory.mktemp("cli") / "wh"
    build_demo_table(str(d))
    return d


def _digest(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_line_error(code: int, want_code: int, out: str, err: str, *needles: str) -> None:
    assert code == want_code, err
    assert out == ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("mor: "), err
    for n in needles:
        assert n in lines[0], lines[0]


BAD_QUERIES = [
    ("SELECT order_id,\nFROM WHERE", 1, ["line 2, column 6"]),
    ("SELECT * FROM demo.nope", 1, ["demo.nope", "not found"]),
    (
        "SELECT amountt FROM demo.orders",
        1,
        ["`amountt`", "line 1, column 8", "columns of demo.orders: order_id, region, customer"],
    ),
    ("SELECT foo(amount) FROM demo.orders", 1, ["`foo`", "line 1, column 8"]),
    (
        "SELECT order_id\nFROM demo.orders WHERE array(1) = amount",
        1,
        ["DATATYPE_MISMATCH", "line 2, column 24"],
    ),
    (
        "MERGE INTO demo.orders t USING demo.orders s ON t.order_id = s.order_id "
        "WHEN NOT MATCHED THEN DELETE",
        1,
        ["MERGE INTO demo.orders", "WHEN NOT MATCHED THEN DELETE", "Spark allows INSERT there"],
    ),
    ("INSERT INTO demo.orders VALUES (1, 'EU')", 1, ["INSERT INTO demo.orders", "columns"]),
    (
        "INSERT INTO demo.orders (order_id, nope) VALUES (1, 2)",
        1,
        ["INSERT INTO demo.orders", "no column nope"],
    ),
    ("DROP TABLE demo.nope", 1, ["demo.nope", "not found"]),
    ("ALTER TABLE demo.orders DROP COLUMN nope", 1, ["ALTER TABLE demo.orders", "nope"]),
    ("-- nothing here\n;", 1, ["empty statement"]),
    ("SELECT * FROM demo.orders VERSION AS OF 42", 1, ["no snapshot 42"]),
]


@pytest.mark.parametrize("sql,code,needles", BAD_QUERIES)
def test_bad_queries(
    sql: str, code: int, needles: list[str], wh: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _digest(wh)
    for cmd in ("explain", "run"):
        got = _run(capsys, cmd, "-e", sql, "--warehouse", str(wh))
        _one_line_error(*got[:1], code, *got[1:], *needles)
    assert _digest(wh) == before


def test_usage_errors(wh: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "run", str(tmp_path / "missing.sql"), "--warehouse", str(wh))
    _one_line_error(code, 2, out, err, "missing.sql")
    code, out, err = _run(
        capsys,
        "run",
        "-e",
        "SELECT 1 FROM demo.orders",
        "--format",
        "parquet",
        "--warehouse",
        str(wh),
    )
    _one_line_error(code, 2, out, err, "--output")
    code, out, err = _run(
        capsys, "run", "-e", "SELECT 1", "--path-map", "nothing", "--warehouse", str(wh)
    )
    _one_line_error(code, 2, out, err, "OLD=NEW")
    assert main(["run", "--format", "xml", "-e", "x"]) == 2


def test_unknown_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "run", "-e", "SELECT * FROM a.b", "--catalog", "nosuch")
    _one_line_error(code, 1, out, err, "unknown catalog 'nosuch'")


def _copy(wh: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "wh"
    shutil.copytree(wh, dst)
    # the catalog records absolute paths: point the copy's reads back at itself
    return dst


def test_broken_data_and_delete_files(
    wh: Path, tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    data = sorted(p for p in wh.rglob("*.parquet") if not p.name.startswith("delete-"))[0]
    delete = sorted(p for p in wh.rglob("delete-*.parquet"))[0]
    saved_data, saved_delete = data.read_bytes(), delete.read_bytes()
    try:
        data.write_bytes(saved_data[:100])  # truncated
        code, out, err = _run(
            capsys, "run", "-e", "SELECT * FROM demo.orders", "--warehouse", str(wh)
        )
        _one_line_error(code, 1, out, err, data.name, "is 100 bytes", "replaced or truncated")
        data.write_bytes(saved_data)
        os.remove(delete)
        code, out, err = _run(
            capsys, "run", "-e", "SELECT count(*) FROM demo.orders", "--warehouse", str(wh)
        )
        _one_line_error(code, 1, out, err, delete.name)
    finally:
        data.write_bytes(saved_data)
        delete.write_bytes(saved_delete)
    # and a good statement before a bad one prints nothing at all
    sql = "SELECT count(*) FROM demo.orders; SELECT nope FROM demo.orders"
    code, out, err = _run(capsys, "run", "-e", sql, "--warehouse", str(wh))
    _one_line_error(code, 1, out, err, "`nope`", "line 1, column 42")


def test_unsupported_file_format_is_refused(
    catalog: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import pyarrow as pa
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    from helpers import small_table

    w = small_table(catalog)
    real = w.data_files(
        pa.table({"id": pa.array([2], pa.int64()), "p": ["b"], "v": pa.array([2], pa.int64())})
    )[0]
    orc = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=real.file_path.replace(".parquet", ".orc"),
        file_format=FileFormat.ORC,
        partition=real.partition,
        record_count=1,
        file_size_in_bytes=10,
    )
    orc.spec_id = real.spec_id
    w.commit(data=[orc])
    code, out, err = _run(
        capsys, "explain", "-e", "SELECT * FROM s.t", "--warehouse", str(tmp_path / "wh")
    )
    _one_line_error(code, 1, out, err, ".orc is ORC", "only Parquet")


def test_run_formats(
    wh: Path, tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    sql = "SELECT region, count(*) AS n FROM demo.orders GROUP BY region ORDER BY region"
    code, out, _ = _run(capsys, "run", "-e", sql, "--format", "csv", "--warehouse", str(wh))
    assert code == 0 and out == "region,n\nEU,8\nUS,8\n"
    # several statements: CSV results follow each other, JSON Lines without blank lines, and
    # with --output one file per statement
    two = f"{sql}; SELECT count(*) FROM demo.orders"
    code, out, _ = _run(capsys, "run", "-e", two, "--format", "csv", "--warehouse", str(wh))
    assert code == 0 and out == "region,n\nEU,8\nUS,8\ncount(1)\n16\n"
    code, out, _ = _run(capsys, "run", "-e", two, "--format", "json", "--warehouse", str(wh))
    assert code == 0 and [json.loads(ln) for ln in out.splitlines()] == [
        {"region": "EU", "n": 8},
        {"region": "US", "n": 8},
        {"count(1)": 16},
    ]
    each = tmp_path / "each.csv"
    code, _, _ = _run(
        capsys, "run", "-e", two, "--format", "csv", "--output", str(each), "--warehouse", str(wh)
    )
    assert code == 0 and not each.exists()
    assert (tmp_path / "each.csv.1").read_text() == "count(1)\n16\n"
    code, out, _ = _run(capsys, "run", "-e", sql, "--format", "json", "--warehouse", str(wh))
    assert code == 0 and out.splitlines() == [
        '{"region": "EU", "n": 8}',
        '{"region": "US", "n": 8}',
    ]
    code, out, _ = _run(capsys, "run", "-e", sql, "--warehouse", str(wh), "--limit", "1")
    assert code == 0 and "| EU     | 8 |" in out and "(1 row)" in out
    target = tmp_path / "out.parquet"
    code, out, _ = _run(
        capsys,
        "run",
        "-e",
        sql,
        "--format",
        "parquet",
        "--output",
        str(target),
        "--warehouse",
        str(wh),
    )
    assert code == 0 and out == ""
    import pyarrow.parquet as pq

    assert pq.read_table(str(target)).to_pylist() == [
        {"region": "EU", "n": 8},
        {"region": "US", "n": 8},
    ]


def test_run_has_its_one_query_analysed_by_its_execution_alone(
    wh: Path, spark: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mor run` of one query prints what the DataFrame `mor_sql` returns holds, columns
    included when no row comes back (duplicate names kept). On Spark Connect the query is not
    analysed on its own before it runs (a round trip of its own, 0.2 s of a command against a
    server): its errors are the same lines (test_bad_queries)."""
    from mor.api import mor_sql, resolve_catalog
    from mor.physical.spark.session import is_connect

    analysed: list[str] = []
    if is_connect(spark):
        from pyspark.sql.connect.client.core import SparkConnectClient

        ask = SparkConnectClient._analyze

        def counted(self: Any, method: str, **kwargs: Any) -> Any:
            if method == "schema" and "mor_scan_" in str(kwargs.get("plan")):
                analysed.append(method)
            return ask(self, method, **kwargs)

        monkeypatch.setattr(SparkConnectClient, "_analyze", counted)
    sql = "SELECT region, region AS r2, count(*) AS n FROM demo.orders GROUP BY region"
    code, out, err = _run(capsys, "run", "-e", sql, "--format", "json", "--warehouse", str(wh))
    assert code == 0, err
    assert analysed == []
    want = mor_sql(sql, catalog=resolve_catalog(None, str(wh)), spark=spark).collect()
    assert sorted(out.splitlines()) == sorted(json.dumps(r.asDict()) for r in want)
    analysed.clear()  # mor_sql's DataFrame is analysed when built: the caller holds it
    empty = "SELECT region AS a, amount AS a FROM demo.orders WHERE order_id < 0"
    code, out, err = _run(capsys, "run", "-e", empty, "--format", "csv", "--warehouse", str(wh))
    assert (code, out) == (0, "a,a\n"), err
    assert analysed == (["schema"] if is_connect(spark) else [])  # no rows: columns asked


def test_output_never_replaces_what_was_not_asked_for(
    wh: Path, tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing file or non-empty folder is refused without --overwrite (and stays as it
    was); with it, it is replaced whole; a missing folder or a negative --limit is refused
    before any query runs; a failing query leaves nothing behind."""
    import pyarrow.parquet as pq

    sql = "SELECT region, count(*) AS n FROM demo.orders GROUP BY region ORDER BY region"
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    base = ["run", "-e", sql, "--warehouse", str(wh)]
    parquet = [*base, "--format", "parquet", "--output", str(folder)]
    code, out, err = _run(capsys, *parquet)
    _one_line_error(code, 2, out, err, "already exists", "--overwrite")
    assert (folder / "keep.txt").read_text() == "mine"
    code, _, err = _run(capsys, *parquet, "--overwrite")
    assert code == 0, err
    assert not (folder / "keep.txt").exists()
    assert pq.read_table(str(folder)).to_pylist() == [
        {"region": "EU", "n": 8},
        {"region": "US", "n": 8},
    ]
    csv = tmp_path / "out.csv"
    csv.write_text("old")
    code, out, err = _run(capsys, *base, "--format", "csv", "--output", str(csv))
    _one_line_error(code, 2, out, err, "already exists")
    assert csv.read_text() == "old"
    code, _, _ = _run(capsys, *base, "--format", "csv", "--output", str(csv), "--overwrite")
    assert code == 0 and csv.read_text().startswith("region,n")
    code, out, err = _run(capsys, *base, "--format", "csv", "--output", "/nonexistent/x.csv")
    _one_line_error(code, 2, out, err, "/nonexistent", "does not exist")
    code, out, err = _run(capsys, *base, "--limit", "-1")
    _one_line_error(code, 2, out, err, "--limit")
    # a query that fails at run time leaves no output, not even a temporary one
    bad = ["run", "-e", "SELECT raise_error('boom') FROM demo.orders", "--warehouse", str(wh)]
    code, out, err = _run(capsys, *bad, "--format", "csv", "--output", str(tmp_path / "b.csv"))
    assert code == 1 and not (tmp_path / "b.csv").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_explain_analyze_counts_rows_removed_by_each_kind(
    wh: Path, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(
        capsys,
        "explain",
        "--analyze",
        "-e",
        "SELECT count(*) FROM demo.orders",
        "--warehouse",
        str(wh),
    )
    assert code == 0
    metrics = out[out.index("== Merge-on-read metrics ==") :]
    # demo.orders: 22 rows written; order 2 by position; 3 and NULL by {1}; (4,c4), (12,c5),
    # (13,NULL) by {1,3}; the re-appended order 3 lives
    assert "rows removed  by position deletes 1\n" in metrics
    assert "rows removed  by equality deletes {1} 2\n" in metrics
    assert "rows removed  by equality deletes {1,3} 3\n" in metrics
    assert "rows live     16 (of 22 in the files read)" in metrics
    held = out[out.index("== Process caches (after the counts) ==") :]
    assert "manifests: " in held and "planned scans: " in held  # what a later query reuses
    from mor import metrics as mor_metrics
    from mor.api import default_catalog

    m = mor_metrics("SELECT * FROM demo.orders", catalog=default_catalog(str(wh)))
    assert (m.data_files, m.pos_delete_files, m.eq_delete_files) == (3, 1, {"{1}": 1, "{1,3}": 2})
    assert m.planning_seconds > 0


def test_a_read_creates_no_warehouse_and_says_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MOR_WAREHOUSE", raising=False)
    code, out, err = _run(capsys, "explain", "--no-check", "-e", "SELECT * FROM demo.orders")
    _one_line_error(code, 1, out, err, f"no embedded catalog at {tmp_path}/warehouse/catalog.db")
    assert list(tmp_path.iterdir()) == []
    # a query that names no catalog table needs no warehouse at all
    code, out, err = _run(capsys, "explain", "--no-check", "-e", "SELECT 1 AS one")
    assert code == 0 and "SparkQuery #0: no scans" in out
    assert list(tmp_path.iterdir()) == []


def test_config_file_points_at_the_warehouse_once(
    wh: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`warehouse` in the config file (relative to it) is where the embedded catalog is, from
    any directory; --warehouse and $MOR_WAREHOUSE override it; `mor config` says which is in
    effect; a bad file is one line naming it."""
    cfg = tmp_path / "cfg" / "config.toml"
    cfg.parent.mkdir()
    shutil.copytree(wh, tmp_path / "cfg" / "wh")
    moved = tmp_path / "cfg" / "wh"
    cfg.write_text('warehouse = "wh"\n[path-map]\n"' + str(wh) + '" = "' + str(moved) + '"\n')
    monkeypatch.setenv("MOR_CONFIG", str(cfg))
    monkeypatch.delenv("MOR_WAREHOUSE", raising=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    before = _digest(moved)
    code, out, err = _run(
        capsys, "run", "-e", "SELECT count(*) AS n FROM demo.orders", "--format", "csv"
    )
    assert (code, out) == (0, "n\n16\n"), err
    assert _digest(moved) == before and list(elsewhere.iterdir()) == []
    code, out, err = _run(capsys, "config")
    assert code == 0, err
    assert f"warehouse    {moved} (config file {cfg}; catalog.db present)" in out
    assert f"path-map     {wh} = {moved} (config file)" in out
    monkeypatch.setenv("MOR_WAREHOUSE", str(elsewhere))
    code, out, err = _run(capsys, "explain", "--no-check", "-e", "SELECT * FROM demo.orders")
    _one_line_error(code, 1, out, err, f"no embedded catalog at {elsewhere}/catalog.db", str(cfg))
    cfg.write_text('warehouse = "wh"\nwarehose = "x"\n')
    code, out, err = _run(capsys, "config")
    _one_line_error(code, 1, out, err, str(cfg), "unknown setting 'warehose'")
    monkeypatch.setenv("MOR_CONFIG", str(tmp_path / "none.toml"))
    code, out, err = _run(capsys, "config")
    _one_line_error(code, 1, out, err, "MOR_CONFIG names", "none.toml")


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").glob("*.sql")))
def test_examples_run_as_written(
    example: str, wh: Path, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mor run examples/<file>` against the demo warehouse: no placeholder to fill in."""
    code, out, err = _run(capsys, "run", str(ROOT / "examples" / example), "--warehouse", str(wh))
    assert code == 0, err
    assert "row" in out.splitlines()[-1]
    if example.startswith("03_"):
        assert "| 21 " in out  # the first load: order ids 1-20 and a NULL id


def test_version_conf_and_master(wh: Path, spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--version")
    assert code == 0 and out.startswith("mor ") and "pyspark" in out
    sql = "SELECT '${spark.mor.probe}' AS p"  # Spark substitutes settings in SQL text
    code, out, err = _run(capsys, "run", "-e", sql, "--conf", "spark.mor.probe=yes")
    assert code == 0, err
    assert "| yes |" in out
    code, out, err = _run(capsys, "run", "-e", sql, "--conf", "novalue")
    _one_line_error(code, 2, out, err, "--conf needs KEY=VALUE")
    code, out, err = _run(capsys, "run", "-e", "SELECT 1", "--master", "spark://127.0.0.1:1")
    _one_line_error(code, 1, out, err, "--master spark://127.0.0.1:1", "already runs")


def test_tables_and_describe(wh: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "tables", "--warehouse", str(wh))
    assert code == 0, err
    assert "demo.orders" in out.splitlines()
    code, out, _ = _run(capsys, "tables", "demo", "--warehouse", str(wh))
    assert code == 0 and "demo.orders" in out.splitlines()
    code, out, err = _run(capsys, "tables", "nowhere", "--warehouse", str(wh))
    _one_line_error(code, 1, out, err, "namespace nowhere not found")
    code, out, err = _run(capsys, "describe", "demo.orders", "--warehouse", str(wh))
    assert code == 0, err
    for needle in [
        "table      demo.orders",
        "order_id  long",
        "0: region identity as region",
        "snapshots  5",
        "first_load  tag",
        "metadata file:",
    ]:
        assert needle in out, needle
    code, out, err = _run(capsys, "describe", "demo.nope", "--warehouse", str(wh))
    _one_line_error(code, 1, out, err, "demo.nope not found")


def test_shell_runs_statements_dot_commands_and_explain(
    wh: Path, spark: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One session for every statement; a statement may span lines and ends at a `;` outside
    strings; an error is one line and the shell goes on; `.quit` leaves."""
    import io

    script = "\n".join(
        [
            "SELECT region,",
            "  count(*) AS n FROM demo.orders GROUP BY region ORDER BY region;",
            ".tables",
            "SELECT foo(1);",
            "SELECT ';' AS semi; EXPLAIN SELECT count(*) FROM demo.orders;",
            ".schema demo.orders",
            ".quit",
            "SELECT 'never run';",
        ]
    )
    monkeypatch.setattr("sys.stdin", io.StringIO(script + "\n"))
    code, out, err = _run(capsys, "shell", "--warehouse", str(wh))
    assert code == 0
    assert "| EU     | 8 |" in out and "(2 rows)" in out
    assert "demo.orders\n" in out  # .tables
    assert "| ; " in out  # the ';' inside the string did not end the statement
    assert "== Query (Spark SQL" in out and "SparkQuery #0: scan_1=demo.orders" in out
    assert "schema 0" in out  # .schema
    assert "never run" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "`foo`" in lines[0] and "(line 1, column 8)" in lines[0]


def test_an_internal_error_is_one_line_with_its_own_exit_code(
    wh: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An invariant of mor's own plan that fails (here: a union whose branch lacks a column)
    is one line saying it is mor's bug, exit code 3, never rows from a plan that may be
    wrong."""
    from dataclasses import replace

    from mor.planner.nodes import IcebergScan, Union

    def broken(plan: Any, ctx: Any) -> Any:
        scan = next(n for n in plan.walk() if isinstance(n, IcebergScan))
        return Union(inputs=(scan,), columns=(replace(scan.output[0], name="$nowhere"),))

    broken.__name__ = "broken_rule"
    monkeypatch.setattr("mor.planning.MOR_RULES", (broken,))
    code, out, err = _run(
        capsys, "explain", "--no-check", "--warehouse", str(wh), "-e", "SELECT * FROM demo.orders"
    )
    _one_line_error(code, 3, out, err, "internal error (a bug in mor; please report it)")


def test_spark_connect_needs_a_pyspark_4_client(capsys: pytest.CaptureFixture[str]) -> None:
    """pyspark 3.5's Connect client cannot carry a query with its scans: refused by name
    before connecting. With pyspark 4, an unreachable server is one line naming it."""
    import pyspark

    code, out, err = _run(capsys, "run", "--remote", "sc://127.0.0.1:1", "-e", "SELECT 1")
    if int(pyspark.__version__.split(".")[0]) < 4:
        _one_line_error(
            code, 1, out, err, "Spark Connect needs pyspark 4.0 or later", pyspark.__version__
        )
    else:  # at once, not after the Connect client's minutes of retries
        _one_line_error(code, 1, out, err, "sc://127.0.0.1:1", "nothing answers at 127.0.0.1:1")
        code, out, err = _run(capsys, "run", "--remote", "http://h:1", "-e", "SELECT 1")
        _one_line_error(code, 1, out, err, "not a Spark Connect URL: 'http://h:1'")


@soak_in("connect")  # a classic subprocess: the 3.5 leg runs it in CI
def test_early_session_gives_the_same_rows_and_a_new_jvm_after_stop(
    wh: Path, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mor run` with its session started on a thread while it plans (`early_session=on`;
    `auto` keeps it off on CI's 2 cores) prints what the session started after planning
    prints, and nothing of the JVM's on stdout; `stop_started` ends that JVM, and the next
    session mor starts runs on a new one (what the early start does when a plan turns out to
    need the s3a connector)."""
    sql = "SELECT region, count(*) AS n, sum(amount) AS s FROM demo.orders GROUP BY 1 ORDER BY 1"
    code, want, err = _run(capsys, "run", "-e", sql, "--warehouse", str(wh), "--format", "csv")
    assert code == 0, err
    script = f"""
import sys
from mor.cli import main
rc = main(["run", "-e", {sql!r}, "--warehouse", {str(wh)!r}, "--format", "csv",
           "--set", "early_session=on"])
assert rc == 0, rc
from pyspark import SparkContext
from mor.physical.spark import session
first = SparkContext._gateway.proc
assert session.STARTED is not None
session.stop_started()
assert first.wait(timeout=60) is not None and SparkContext._gateway is None
again = session.local_session()
assert SparkContext._gateway.proc.pid != first.pid
print("again", again.range(3).count())
"""
    # a classic JVM here, also on the Connect leg (whose client marks this process's
    # environment as Connect's)
    connect = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE")
    env = {k: v for k, v in os.environ.items() if k not in connect}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == want + "again 3\n"


def test_early_session_restarts_spark_when_the_plan_needs_s3a(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The early session starts without the s3a connector; a plan that reads s3a:// paths
    gets a new session with it (the one started is stopped first); one that does not keeps
    it. No JVM: the session functions are stand-ins that record what they were asked."""
    import argparse

    import mor.options as options
    import mor.physical.spark.session as session

    calls: list[str] = []
    monkeypatch.setattr(
        options, "spark_session", lambda args, s3a=False: calls.append(f"start s3a={s3a}") or s3a
    )
    monkeypatch.setattr(session, "is_connect", lambda spark: False)

    def check(spark: Any, conf: Any = None) -> None:
        if not spark:
            raise ConfigError("no s3a connector")

    monkeypatch.setattr(session, "check_s3a", check)
    monkeypatch.setattr(session, "stop_started", lambda: calls.append("stop"))
    args = argparse.Namespace(conf=[], remote=None, master=None)
    assert options.EarlySession(args).session(s3a=False) is False
    assert calls == ["start s3a=False"]
    calls.clear()
    assert options.EarlySession(args).session(s3a=True) is True
    assert calls == ["start s3a=False", "stop", "start s3a=True"]


def test_early_session_is_wanted_only_where_the_plan_cannot_change_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import argparse

    from mor.options import EarlySession
    from mor.planner.settings import applied

    monkeypatch.setenv("MOR_CONFIG", str(tmp_path / "mor.toml"))
    (tmp_path / "mor.toml").write_text("")
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.delenv("MOR_WAREHOUSE", raising=False)
    monkeypatch.setattr("mor.physical.spark.session.active_session", lambda: None)

    def wanted(sql: str, mode: str = "on", **kw: Any) -> bool:
        ns = {"conf": [], "remote": None, "catalog": None, "warehouse": None, "path_map": []}
        with applied({"early_session": mode, "s3a_packages": "true"}):
            return EarlySession.wanted(argparse.Namespace(**{**ns, **kw}), sql)

    assert wanted("SELECT * FROM demo.orders")
    assert not wanted("SELECT * FROM iceberg_scan('s3://b/t')")
    assert not wanted("SELECT * FROM ns.t", catalog="prod")
    assert not wanted("SELECT * FROM ns.t", warehouse="s3a://bucket/wh")
    assert not wanted("SELECT * FROM ns.t", path_map=["/data=s3://b/data"])
    assert wanted("SELECT * FROM iceberg_scan('s3://b/t')", mode="always")
    assert wanted("SELECT * FROM iceberg_scan('s3://b/t')", remote="sc://localhost:15002")
    assert not wanted("SELECT * FROM demo.orders", mode="off")
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert not wanted("SELECT * FROM demo.orders", mode="auto")
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert wanted("SELECT * FROM demo.orders", mode="auto")


def test_a_script_is_checked_whole_before_its_first_statement_runs(
    tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error in statement 3 runs none: no rows printed, the DELETE of statement 2 not
    committed; the line names the file, line and column. A failure only running finds (a
    MERGE's cardinality rule) stops the script there and names what committed before it."""
    from mor.api import default_catalog
    from mor.demo import build_demo_table

    d = tmp_path / "wh"
    build_demo_table(str(d))
    head = default_catalog(str(d)).load_table("demo.orders").metadata.current_snapshot_id
    script = tmp_path / "s.sql"
    script.write_text(
        "SELECT count(*) AS n FROM demo.orders;\n"
        "DELETE FROM demo.orders WHERE order_id = 6;\n"
        "SELECT nope FROM demo.orders;\n"
    )
    code, out, err = _run(capsys, "run", str(script), "--warehouse", str(d))
    _one_line_error(code, 1, out, err, f"{script}: ", "nope", "line 3, column 8")
    table = default_catalog(str(d)).load_table("demo.orders")
    assert table.metadata.current_snapshot_id == head

    script.write_text(
        "DELETE FROM demo.orders WHERE order_id = 6;\n"
        "MERGE INTO demo.orders t USING (SELECT 5 AS id UNION ALL SELECT 5) s\n"
        "  ON t.order_id = s.id WHEN MATCHED THEN UPDATE SET amount = 1;\n"
        "SELECT count(*) FROM demo.orders;\n"
    )
    code, out, err = _run(capsys, "run", str(script), "--warehouse", str(d))
    table = default_catalog(str(d)).load_table("demo.orders")
    snap = table.metadata.current_snapshot_id
    assert code == 1 and snap != head
    assert out.startswith("demo.orders: deleted 1 rows") and out.count("\n") == 1, out
    assert err.count("\n") == 1 and "MERGE_CARDINALITY_VIOLATION" in err, err
    assert err.endswith(f"; committed before it: statement 1 (DELETE at line 1, snapshot {snap})\n")


def test_explain_is_one_statement_language(
    wh: Path, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`EXPLAIN [VERBOSE|PHYSICAL|ANALYZE]` runs in `mor run` and `mor_sql` as in the shell;
    EXPLAIN of a write shows the rows' plan and what it would write, and commits nothing."""
    from mor import mor_sql
    from mor.api import default_catalog

    head = default_catalog(str(wh)).load_table("demo.orders").metadata.current_snapshot_id
    sql = "EXPLAIN PHYSICAL DELETE FROM demo.orders WHERE order_id = 5"
    code, out, err = _run(capsys, "run", "--warehouse", str(wh), "-e", sql)
    assert code == 0, err
    assert out.startswith("DELETE FROM demo.orders: deletes the rows (_file, _pos)")
    assert "writes one file-scoped position delete file per data file changed" in out
    assert "== Physical" in out
    merge = (
        "EXPLAIN MERGE INTO demo.orders t USING (SELECT 5 AS id) s ON t.order_id = s.id "
        "WHEN MATCHED THEN UPDATE SET amount = 1"
    )
    got = mor_sql(merge, catalog=default_catalog(str(wh)), spark=spark).collect()
    assert len(got) == 1 and got[0]["plan"].startswith("MERGE INTO demo.orders: acts on")
    assert "the new rows as Parquet data files" in got[0]["plan"]
    table = default_catalog(str(wh)).load_table("demo.orders")
    assert table.metadata.current_snapshot_id == head
