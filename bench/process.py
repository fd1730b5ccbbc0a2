"""Whole processes: each query as a user runs it once, in a new process with a new JVM.

    .venv/bin/python bench/process.py                          # the default cases, --reps 3
    .venv/bin/python bench/process.py --cases pos eq --queries count group_agg --reps 5
    .venv/bin/python bench/process.py --cases tpch --tpch q1 q6 q14

Every `mor run` is a new process; so is a scheduled job, a `spark-submit` and a restarted
notebook. For each case and query, three processes run in turns, `--reps` times (the order
rotating each round):

- **mor run**: the CLI as a user types it, `mor run -e SQL --format csv`, timed from launch to
  exit (Python start, imports, the Spark session, planning, the query, printing);
- **mor query**: a Python process that starts the session as `mor run` does, then times
  `mor_sql(SQL).collect()` alone (session start excluded);
- **native**: a Python process with Iceberg's Spark runtime (the jar given as `spark.jars`,
  as on a cluster that has it installed: no Ivy resolution at start) and a Hadoop catalog on the
  same tables, timed from launch to exit and, inside, `spark.sql(SQL).collect()` alone.

`--eager` adds mor's CLI and query processes with `resolve_at_read = keep_at_read = 1` (what
mor did before those settings: the first query resolves equality deletes and caches delete
sides for later ones) on the cases with equality deletes, in the same turns.

Both sessions are local with the same cores, driver memory (4g) and shuffle partitions (8).
Ratios: whole process `mor run / native`, query alone `mor query / native query` (medians).
The rows of mor's and Iceberg's query processes must be equal before any time is printed.

Cases: `pos`, `eq` (bench/run.py's tables: `--rows` rows, 1% position deletes; `eq` adds 10%
equality deletes over two id sets), `tpch` (bench/streaming.py's sf 0.1 tables, 80 commits:
`--tpch` queries), `files` (bench/scale.py's `ids` table of `--files` files, two position
deletes in a tenth of them: `--scale-queries`). Tables are built once, in the warehouse of the
benchmark they come from.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository

from bench.harness import ROOT, geomean, write_json  # noqa: E402

QUERIES = {
    "count": "SELECT count(*) FROM {t}",
    "group_agg": "SELECT k % 10 AS b, count(*) AS n, sum(v) AS s FROM {t} GROUP BY k % 10",
    "range": "SELECT id, v FROM {t} WHERE id BETWEEN {lo} AND {hi}",
}
VENV = Path(sys.executable).parent
EAGER = {"MOR_RESOLVE_AT_READ": "1", "MOR_KEEP_AT_READ": "1"}


# --- the worker: one process, one query -------------------------------------------------


def _native_session(warehouse: str) -> Any:
    from pyspark.sql import SparkSession

    from tests.oracle.runtime import iceberg_coordinates, ivy_home

    group, artifact, version = iceberg_coordinates().split(":")
    jar = ivy_home() / "jars" / f"{group}_{artifact}-{version}.jar"
    if not jar.exists():
        raise SystemExit(f"{jar} is missing: run `python -m tests.oracle.runtime` once")
    log_conf = ROOT / "physical" / "spark" / "log4j2.properties"
    spark = (
        SparkSession.builder.master("local[*]")
        .appName("native")
        .config("spark.jars", str(jar))
        .config(
            "spark.sql.extensions",
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        )
        .config("spark.sql.catalog.local", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.local.type", "hadoop")
        .config("spark.sql.catalog.local.warehouse", warehouse)
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{log_conf}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("FATAL")
    return spark


def worker(peer: str, sql: str, warehouse: str) -> int:
    """Start the peer's session, run the query once, print {"query_s", "bag"} as JSON."""
    from tests.oracle.tpc import _bag

    if peer == "native":
        spark = _native_session(warehouse)
        t0 = time.perf_counter()
        rows = spark.sql(sql).collect()
    else:
        from mor import mor_sql
        from mor.physical import local_session

        spark = local_session()
        t0 = time.perf_counter()
        rows = mor_sql(sql, spark=spark).collect()
    took = time.perf_counter() - t0
    bag = sorted((repr(k), n) for k, n in _bag(rows).items())
    print(json.dumps({"query_s": took, "bag": bag}))
    return 0


# --- the driver: cases, turns, medians ----------------------------------------------------


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed: {done.stderr.strip()[-600:]}")
    return took, done.stdout


def _cases(args: argparse.Namespace) -> list[tuple[str, str, str, str, str]]:
    """(case, query, mor SQL, native SQL, native warehouse), building tables as needed."""
    out = []
    wanted = set(args.cases)
    if wanted & {"pos", "eq"}:
        from bench.tables import build, table_name
        from tests.oracle.runtime import iceberg_session

        wh = Path(tempfile.gettempdir()) / "mor-bench"  # bench/run.py's warehouse
        spark = iceberg_session(wh)
        for case, eq, sets in (("pos", 0.0, 1), ("eq", 0.1, 2)):
            if case not in wanted:
                continue
            name = build(spark, wh, args.rows, 0.01, eq, sets)
            location = wh / "bench" / table_name(args.rows, 0.01, eq, sets, 2, 8)
            lo = args.rows // 3
            for q in args.queries:
                sql = QUERIES[q].replace("{lo}", str(lo)).replace("{hi}", str(lo + 5000))
                out.append(
                    (
                        case,
                        q,
                        sql.format(t=f"iceberg_scan('{location}')"),
                        sql.format(t=name),
                        str(wh),
                    )
                )
        spark.stop()
    if "tpch" in wanted:
        from tests.oracle.tpc import CACHE, TPCH, generate, queries

        wh = Path(tempfile.gettempdir()) / "mor-streaming" / "sf0.1-c80"
        if not (wh / "BUILT").exists():
            raise SystemExit(f"{wh} is not built: run bench/streaming.py once (it writes it)")
        data = generate(TPCH, CACHE, 0.1)
        for n, theirs, ours in queries(TPCH, data, wh):
            if f"q{n}" in args.tpch:
                out.append(("tpch", f"q{n}", ours, theirs, str(wh)))
    if "files" in wanted:
        from bench.scale import QUERIES as SCALE_QUERIES
        from bench.scale import specs
        from tests.oracle.many_files import build as build_many
        from tests.oracle.runtime import iceberg_session

        wh = Path(tempfile.gettempdir()) / "mor-scale"  # bench/scale.py's warehouse
        spark = iceberg_session(wh)
        spec = specs(args.files)["ids"]
        name, location = build_many(spark, wh, spec)
        spark.stop()
        lo = spec.first_id(40, 1)
        for q in args.scale_queries:
            sql = SCALE_QUERIES[q].replace("{lo}", str(lo)).replace("{hi}", str(lo + 50))
            out.append(
                (
                    "files",
                    q,
                    sql.format(t=f"iceberg_scan('{location}')"),
                    sql.format(t=name),
                    str(wh),
                )
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", choices=["mor", "native"], help=argparse.SUPPRESS)
    ap.add_argument("--sql", help=argparse.SUPPRESS)
    ap.add_argument("--cases", nargs="*", default=["pos", "eq", "tpch"])
    ap.add_argument("--queries", nargs="*", default=list(QUERIES), choices=list(QUERIES))
    ap.add_argument("--tpch", nargs="*", default=["q1", "q3", "q6", "q14"])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument(
        "--scale-queries",
        nargs="*",
        default=["count", "group", "selective", "limit"],
        help="bench/scale.py's queries for the `files` case",
    )
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warehouse", help=argparse.SUPPRESS)  # the worker's catalog
    ap.add_argument(
        "--eager",
        action="store_true",
        help="also run mor with resolve_at_read=1 and keep_at_read=1 (what mor did before "
        "they were settings) on the cases with equality deletes",
    )
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.sql, args.warehouse)

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SPARK_REMOTE", None)
    mor_cli = str(VENV / "mor")
    me = [sys.executable, str(Path(__file__).resolve())]
    results = []
    print(f"{args.reps} reps; whole = launch to exit; query = the query alone, session started")
    for case, q, ours, theirs, wh in _cases(args):
        peers = ["run", "mor", "native"]
        if args.eager and case != "pos":  # the eager settings matter with equality deletes
            peers += ["run1", "mor1"]
        runs: dict[str, list[float]] = {k: [] for k in peers + ["mq", "nq", "mq1"]}
        bags = {}
        for rep in range(args.reps):
            order = peers[rep % len(peers) :] + peers[: rep % len(peers)]
            for peer in order:
                penv = {**env, **EAGER} if peer.endswith("1") else env
                if peer.startswith("run"):
                    took, _ = _timed([mor_cli, "run", "-e", ours, "--format", "csv"], penv)
                    runs[peer].append(took)
                    continue
                who = "native" if peer == "native" else "mor"
                sql = theirs if who == "native" else ours
                took, text = _timed([*me, "--worker", who, "--sql", sql, "--warehouse", wh], penv)
                got = json.loads(text.strip().splitlines()[-1])
                runs[peer].append(took)
                runs[{"mor": "mq", "native": "nq", "mor1": "mq1"}[peer]].append(got["query_s"])
                bags[peer] = got["bag"]
        same = (
            sum(n for _, n in bags["mor"]) == sum(n for _, n in bags["native"])
            if q == "limit"  # any 100 rows: the count is what both must agree on
            else bags["mor"] == bags["native"] == bags.get("mor1", bags["mor"])
        )
        if not same:
            raise SystemExit(f"RESULTS DIFFER for {case} {q}: no time reported")
        med = {k: statistics.median(v) for k, v in runs.items() if v}
        row = {
            "case": case,
            "query": q,
            "mor_run_s": med["run"],
            "mor_process_s": med["mor"],
            "native_process_s": med["native"],
            "mor_query_s": med["mq"],
            "native_query_s": med["nq"],
            "run/native": med["run"] / med["native"],
            "query mor/native": med["mq"] / med["nq"],
        }
        eager = ""
        if "run1" in med:
            row.update(
                {
                    "eager_run_s": med["run1"],
                    "eager_query_s": med["mq1"],
                    "eager run/native": med["run1"] / med["native"],
                    "eager query mor/native": med["mq1"] / med["nq"],
                }
            )
            eager = (
                f"  | eager (resolve_at_read=keep_at_read=1): run ratio "
                f"{row['eager run/native']:5.2f}, query ratio {row['eager query mor/native']:5.2f}"
            )
        results.append(row)
        print(
            f"{case:<6} {q:<10} whole: mor run {med['run']:6.2f}s  native {med['native']:6.2f}s"
            f"  ratio {row['run/native']:5.2f}  | query alone: mor {med['mq']:6.2f}s  native "
            f"{med['nq']:6.2f}s  ratio {row['query mor/native']:5.2f}  "
            f"(mor worker process {med['mor']:.2f}s){eager}",
            flush=True,
        )
    if results:
        print(
            f"geometric means: whole {geomean([r['run/native'] for r in results]):.2f}, "
            f"query alone {geomean([r['query mor/native'] for r in results]):.2f}"
        )
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
