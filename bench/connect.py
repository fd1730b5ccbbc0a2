"""Spark Connect against a classic session: mor's overhead on the bench queries, pyspark 4.x.

    .venv/spark4/bin/python bench/connect.py                  # 2M rows, 1% pos, 10% eq deletes
    .venv/spark4/bin/python bench/connect.py --rows 5000000 --reps 7

Two child processes (pyspark allows no classic and Connect session in one): a classic local
session (`local[2]`), then a Spark Connect session to a server started from pyspark's own jars
on 127.0.0.1 with the same master and settings. Every query runs through `mor_sql`, an untimed
warm-up and then `--reps` times; results of the two must be equal before any time is printed.
Reported per query: the median of `mor_sql()` alone
(planning and building the DataFrame: where Connect adds round trips to the server) and of
`mor_sql()` plus the action, and the ratio Connect / classic. The table is written with
pyiceberg (mor.writer.tables), position and equality deletes in each data file, and cached in
`--warehouse`.
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

from bench.harness import action, bag, fingerprint, write_json  # noqa: E402
from bench.run import QUERIES  # noqa: E402


def build_table(warehouse: Path, rows: int, files: int, pos: float, eq: float) -> str:
    """`bench.c<rows>` in the embedded catalog at `warehouse` (built once): columns as
    bench/tables.py, `files` data files, every m-th row of each deleted by position and every
    n-th id by one equality delete file."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType

    from mor.api import default_catalog
    from mor.writer.tables import TableWriter

    name = "bench.c" + f"{rows}_f{files}_pos{pos}_eq{eq}".replace(".", "p")
    catalog = default_catalog(str(warehouse))
    if catalog.table_exists(name):
        return name
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "k", IntegerType(), required=False),
        NestedField(3, "grp", StringType(), required=False),
        NestedField(4, "v", DoubleType(), required=False),
        NestedField(5, "pad", StringType(), required=False),
    )
    w = TableWriter(catalog, name, schema)
    per = rows // files
    data = []
    for i in range(files):
        ids = pa.array(range(i * per, (i + 1) * per), pa.int64())
        ints = pa.array([x % 1000 for x in range(i * per, (i + 1) * per)], pa.int32())
        table = pa.table(
            {
                "id": ids,
                "k": ints,
                "grp": pa.array([f"g{x % 50}" for x in range(i * per, (i + 1) * per)]),
                "v": pa.array([(x % 9973) / 7 for x in range(i * per, (i + 1) * per)]),
                "pad": pa.array(["x" * 20] * per),
            }
        )
        data += w.data_files(table)
    w.commit(data=data)
    deletes = []
    if pos:
        m = round(1 / pos)
        for f in data:
            deletes.append(w.position_delete_file({f.file_path: range(0, f.record_count, m)}, f))
    if eq:
        n = round(1 / eq)
        deletes.append(w.equality_delete_file([1], [{1: x} for x in range(1, rows, n)]))
    w.commit(deletes=deletes)
    return name


def measure(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    """In this process, on one session of `mode`: each query's results and its median times."""
    from mor import mor_sql
    from mor.api import default_catalog

    warehouse = Path(args.warehouse)
    name = build_table(warehouse, args.rows, args.files, args.pos, args.eq)
    catalog = default_catalog(str(warehouse))
    server = None
    if mode == "connect":
        from pyspark.sql import SparkSession

        from tests.spark_modes import ConnectServer

        server = ConnectServer()
        spark = SparkSession.builder.remote(server.url).getOrCreate()
    else:
        from mor.physical import local_session

        spark = local_session()
    try:
        lo = args.rows // 3
        out: dict[str, Any] = {"table": name, "queries": {}}
        for q in args.queries:
            sql = QUERIES[q].format(t=name, lo=lo, hi=lo + 5000)
            if q == "select_star":
                result = list(fingerprint(mor_sql(sql, catalog=catalog, spark=spark)))
            else:
                result = bag(mor_sql(sql, catalog=catalog, spark=spark).collect())
            build, total = [], []
            for i in range(args.reps + 1):  # the first is an untimed warm-up
                t0 = time.perf_counter()
                df = mor_sql(sql, catalog=catalog, spark=spark)
                t1 = time.perf_counter()
                action(df, q)
                if i:
                    build.append(t1 - t0)
                    total.append(time.perf_counter() - t0)
            out["queries"][q] = {
                "result": repr(result),
                "mor_sql_s": statistics.median(build),
                "total_s": statistics.median(total),
            }
        return out
    finally:
        spark.stop()
        if server is not None:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--pos", type=float, default=0.01)
    ap.add_argument("--eq", type=float, default=0.1)
    ap.add_argument("--queries", nargs="*", default=list(QUERIES), choices=list(QUERIES))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warehouse", default=str(Path(tempfile.gettempdir()) / "mor-bench-connect"))
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--mode", choices=["classic", "connect"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    import pyspark

    if int(pyspark.__version__.split(".")[0]) < 4:
        raise SystemExit(
            f"bench/connect.py needs pyspark 4.x (its jars hold the Connect server); this is "
            f"pyspark {pyspark.__version__}: run it with .venv/spark4/bin/python"
        )
    os.environ.setdefault("MOR_SPARK_MASTER", "local[2]")
    if args.mode:  # a child: one session of one kind in this process (pyspark allows no mix)
        print(json.dumps(measure(args, args.mode)))
        return 0
    build_table(Path(args.warehouse), args.rows, args.files, args.pos, args.eq)
    runs = {}
    for mode in ("classic", "connect"):
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                *(argv if argv is not None else sys.argv[1:]),
                "--mode",
                mode,
            ],
            capture_output=True,
            text=True,
        )
        if child.returncode != 0:
            raise SystemExit(f"the {mode} run failed:\n{child.stderr[-3000:]}")
        runs[mode] = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"pyspark {pyspark.__version__}, {runs['classic']['table']}, medians of {args.reps}")
    out = []
    for q in args.queries:
        c, r = runs["classic"]["queries"][q], runs["connect"]["queries"][q]
        if c["result"] != r["result"]:
            raise SystemExit(f"RESULTS DIFFER between classic and Connect for {q}")
        row = {
            "query": q,
            "classic_mor_sql_s": c["mor_sql_s"],
            "classic_total_s": c["total_s"],
            "connect_mor_sql_s": r["mor_sql_s"],
            "connect_total_s": r["total_s"],
            "connect/classic": r["total_s"] / c["total_s"],
        }
        out.append(row)
        print(
            f"{q:<12} classic {row['classic_total_s']:6.2f}s "
            f"(mor_sql {row['classic_mor_sql_s']:5.2f}s)  connect "
            f"{row['connect_total_s']:6.2f}s (mor_sql {row['connect_mor_sql_s']:5.2f}s)  "
            f"connect/classic {row['connect/classic']:5.2f}",
            flush=True,
        )
    geo = statistics.geometric_mean([r["connect/classic"] for r in out])
    print(f"geometric mean connect/classic over {len(out)} queries: {geo:.2f}")
    write_json(args.json, {"rows": out, "geomean": geo})
    return 0


if __name__ == "__main__":
    sys.exit(main())
