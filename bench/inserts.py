"""mor's INSERT INTO ... SELECT and CREATE TABLE AS SELECT against Iceberg's own Spark writer:
time and the driver's memory, each statement in a new process, first call and repeated.

    .venv/bin/python -m bench.inserts --rows 20000000
    .venv/bin/python -m bench.inserts --rows 1000000          # the driver's memory at 1M rows
    .venv/spark41/bin/python -m bench.inserts --rows 20000000 --version 3

The rows come from Parquet files Spark writes once into `--work` (`src`: id bigint, k int,
grp string, v double, ts timestamp, pad string; `--files` files), a temporary view of the
session both peers read (mor resolves the name as Spark does). One JDBC catalog on
PostgreSQL (tests/pgcatalog.py) is shared by Iceberg's Spark catalog and pyiceberg's SqlCatalog.
For each statement and peer a new process starts Spark (`spark.driver.memory=1g`, local[2],
Iceberg's runtime in both so that the JVMs are alike) and runs the statement on a fresh table
("first": the first statement of the process), then on another ("again"); an INSERT's table
is created empty beforehand by Iceberg's SQL for both peers (not timed). Each run is timed, and
the driver's memory sampled every 20 ms while it runs (bench/row_writes.py's sampler).

- Iceberg: `spark.sql(<statement>)` on `lake.b.<t>`;
- mor: `mor_sql(<statement>)` on `b.<t>` (pyiceberg's catalog; Spark's tasks write the files).

Statements: `insert` and `ctas` into an unpartitioned table; `insert_bucket` and
`ctas_bucket` into one partitioned by bucket(16, id) (Iceberg's default distribution there:
hash, one shuffle); `insert_days` by days(ts) with a sort order (range distribution).
Before any figure is printed, Iceberg's reader reads the same rows (count and two sums of a
64-bit hash of every column) from both peers' tables, and the same number of data files.
Prints the seconds, the ratio mor / Iceberg (below 1.0: mor is faster) and the memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.row_writes import Cells, _jvm_pid, _Sampler, each_statement, worker_output

COLUMNS = "id BIGINT, k INT, grp STRING, v DOUBLE, ts TIMESTAMP, pad STRING"
# (statement, the table's clauses: PARTITIONED BY and, for an INSERT, the sort order)
STATEMENTS = {
    "insert": ("INSERT INTO <t> SELECT * FROM src", "", ""),
    "insert_bucket": (
        "INSERT INTO <t> SELECT * FROM src",
        "PARTITIONED BY (bucket(16, id))",
        "",
    ),
    "insert_days": ("INSERT INTO <t> SELECT * FROM src", "PARTITIONED BY (days(ts))", "k"),
    "ctas": ("CREATE TABLE <t> USING iceberg <props> AS SELECT * FROM src", "", ""),
    "ctas_bucket": (
        "CREATE TABLE <t> USING iceberg PARTITIONED BY (bucket(16, id)) <props> "
        "AS SELECT * FROM src",
        "",
        "",
    ),
}
DEFAULT = ["insert", "insert_bucket", "insert_days", "ctas", "ctas_bucket"]
FINGERPRINT = (
    "SELECT count(*), sum(CAST(xxhash64(id, k, grp, v, ts, pad) AS DECIMAL(38, 0))), "
    "sum(pmod(xxhash64(id, k, grp, v, ts, pad), 1000003)) FROM {t}"
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--files", type=int, default=8, help="Parquet files of the source")
    ap.add_argument("--version", type=int, choices=(2, 3), default=2)
    ap.add_argument("--statements", nargs="*", default=DEFAULT, choices=list(STATEMENTS))
    ap.add_argument("--peers", nargs="*", default=["iceberg", "mor"], choices=["iceberg", "mor"])
    ap.add_argument("--work", default=None, help="folder for the source and tables")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--statement", help=argparse.SUPPRESS)
    ap.add_argument("--pg", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args)

    from tests.pgcatalog import Postgres

    work = Path(args.work or tempfile.mkdtemp(prefix="mor-inserts-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    with Postgres(keep=str(work / "pg")) as pg:
        pgarg = f"{pg.port}/{pg.database}"
        _run_worker(args, work, pgarg, "build", "")
        from importlib.metadata import version

        print(
            f"INSERT ... SELECT and CTAS of {args.rows:,} rows ({args.files} Parquet files), "
            f"v{args.version}; pyspark {version('pyspark')} {args.master}; a new process per "
            "statement and peer, spark.driver.memory=1g"
        )
        print(
            f"  {'statement':<14} {'Iceberg':>8} {'again':>7} {'mor':>7} {'again':>7}"
            f" {'mor/Ice':>8} {'again':>6} {'files (Ice/mor)':>16}   {'Python MiB (Ice/mor)':>22}"
            f"   {'JVM growth MiB (Ice/mor)':>26}"
        )
        figures = each_statement(
            args.statements,
            args.peers,
            lambda peer, name: _run_worker(args, work, pgarg, peer, name),
            _print,
            "the rows written differ",
        )
        if figures is None:
            return 1
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


def _print(name: str, got: dict[str, Any]) -> None:
    c = Cells(name, got, 14)
    if not c.any():
        return
    ice, mor = c.ice, c.mor
    files = "/".join(str(p["first"]["files"]) if p else "-" for p in (ice, mor))
    print(
        f"  {name:<14} {c.t(ice, 'first'):>8} {c.t(ice, 'again'):>7} {c.t(mor, 'first'):>7} "
        f"{c.t(mor, 'again'):>7} {c.ratio('first'):>8} {c.ratio('again'):>6} {files:>16}   "
        f"{c.growth('py_growth'):>22}   {c.growth('jvm_growth'):>26}"
    )


def _run_worker(args: argparse.Namespace, work: Path, pg: str, peer: str, statement: str) -> Any:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    cmd = [
        sys.executable, "-m", "bench.inserts", "--worker", peer, "--statement", statement,
        "--pg", pg, "--work", str(work), "--rows", str(args.rows), "--files", str(args.files),
        "--version", str(args.version), "--master", args.master,
    ]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=7200, cwd=str(work))
    return worker_output(done, None if statement else "the process writing the source failed")


def _source(spark: Any, work: Path, rows: int, files: int) -> str:
    """The source's Parquet folder, written once per size."""
    folder = work / f"src_{rows}_{files}"
    if not (folder / "_SUCCESS").exists():
        spark.range(0, rows, 1, files).selectExpr(
            "id",
            "CAST(id % 1000 AS INT) AS k",
            "concat('g', CAST(id % 50 AS STRING)) AS grp",
            "CAST(id % 9973 AS DOUBLE) / 7 AS v",
            "timestamp_micros(1700000000000000 + (id % 30) * 86400000000 + id) AS ts",
            "repeat('x', 20) AS pad",
        ).write.mode("overwrite").parquet(str(folder))
    return str(folder)


def _worker(args: argparse.Namespace) -> int:
    from tests.oracle.runtime import iceberg_session
    from tests.pgcatalog import CATALOG, Postgres

    port, database = args.pg.split("/")
    pg = Postgres.running(int(port), database)
    work = Path(args.work)
    warehouse = f"file://{work}/lake"
    conf = {**pg.spark_conf(warehouse), "spark.driver.memory": "1g", "spark.master": args.master}
    spark = iceberg_session(work / "java", conf=conf)
    src = _source(spark, work, args.rows, args.files)
    if args.worker == "build":
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.b")
        print(json.dumps({"source": src}))
        return 0
    spark.read.parquet(src).createOrReplaceTempView("src")
    template, partitioned, ordered = STATEMENTS[args.statement]
    props = f"TBLPROPERTIES ('format-version' = '{args.version}')"
    template = template.replace("<props>", props)
    out: dict[str, Any] = {}
    if args.worker == "mor":
        from pyiceberg.catalog import load_catalog

        from mor import mor_sql

        cat = load_catalog(CATALOG, **pg.pyiceberg_properties(warehouse))
    for run in ("first", "again"):
        name = f"b.{args.worker}_{args.statement}_{run}_{uuid.uuid4().hex[:8]}"
        full = f"{CATALOG}.{name}"
        if template.startswith("INSERT"):  # the empty table, made alike for both (untimed)
            spark.sql(f"CREATE TABLE {full} ({COLUMNS}) USING iceberg {partitioned} {props}")
            if ordered:
                spark.sql(f"ALTER TABLE {full} WRITE ORDERED BY {ordered}")
        if args.worker == "iceberg":
            statement = template.replace("<t>", full)

            def go(statement: str = statement) -> None:
                spark.sql(statement).collect()
        else:
            statement = template.replace("<t>", name)

            def go(statement: str = statement) -> None:
                mor_sql(statement, catalog=cat, spark=spark).collect()

        with _Sampler(_jvm_pid()) as mem:
            t0 = time.perf_counter()
            go()
            seconds = time.perf_counter() - t0
        spark.sql(f"REFRESH TABLE {full}")
        fp = spark.sql(FINGERPRINT.format(t=full)).first()
        files = spark.sql(f"SELECT count(*) FROM {full}.files").first()[0]
        out[run] = {
            "seconds": seconds,
            "fingerprint": [str(x) for x in fp],
            "files": int(files),
            **mem.figures(),
        }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
