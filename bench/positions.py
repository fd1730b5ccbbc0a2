"""Where a read with position deletes spends its time over a plain Parquet read (issue 58).

    .venv/bin/python bench/positions.py                          # 5M rows, 1% position deletes
    .venv/spark41/bin/python bench/positions.py --queries group_agg select_star

bench/run.py's table (Iceberg's Java writer, Spark SQL `DELETE` in merge-on-read mode: one
position delete file per data file) is read as a ladder of plans over the same data files,
each one step closer to what mor runs, so the difference between two rungs is what that step
costs per query:

- `plain`: `spark.read.parquet(files)`, deletes ignored (bench/run.py's plain peer);
- `row_index`: the same read with `_metadata.row_index`, tested per row (it cannot be pruned);
- `file_key`: and the file key mor joins on (the file's modification time in milliseconds
  when it tells the files apart, as it does here; else its size or path);
- `join`: and a broadcast left join of one row per data file (its recorded row count), on
  the key, as mor's bitmap table is joined, with the row-count test;
- `mor`: `mor_sql` (its DataFrame built for each run: the bitmap words, the bit test);
- `native`: Iceberg's own Spark reader.

Rungs alternate in one session after a warm-up; medians of `--reps`, with the DataFrame's
build time apart. mor's and Iceberg's results are compared first.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository

from bench.harness import action, check_same, parser, write_json  # noqa: E402
from bench.run import QUERIES  # noqa: E402
from bench.tables import build, data_files, table_name  # noqa: E402
from tests.oracle.runtime import iceberg_session  # noqa: E402


def ladder(spark: Any, location: Path, name: str, q: str) -> dict[str, Any]:
    """The rungs of query `q`, each a function making its DataFrame."""
    from pyspark.sql import functions as F

    from mor import mor_sql

    files = data_files(location)
    raw = spark.read.parquet(*files)
    key = F.unix_millis(F.col("_metadata.file_modification_time"))
    keys = raw.select(key.alias("k")).distinct().count()
    if keys != len(files):
        raise SystemExit(f"{name}: modification times do not tell its {len(files)} files apart")
    # one row per data file: its key and row count (what mor's bitmap table holds beside the
    # words), a small inline table as mor's is
    counts = [
        (r["fkey"], r["n"])
        for r in raw.groupBy(key.alias("fkey")).agg(F.count("*").alias("n")).collect()
    ]
    table = spark.createDataFrame(counts, "fkey bigint, n bigint")
    lo = 5_000_000 // 3
    sql = QUERIES[q].replace("{lo}", str(lo)).replace("{hi}", str(lo + 5000))
    cols = ["id", "k", "grp", "v", "pad"]

    def over(df: Any) -> Any:
        df.select(*cols).createOrReplaceTempView("rung")
        return spark.sql(sql.format(t="rung"))

    def row_index() -> Any:
        return over(raw.select(*cols, F.col("_metadata.row_index").alias("p")).where("p >= 0"))

    def file_key() -> Any:
        d = raw.select(*cols, F.col("_metadata.row_index").alias("p"), key.alias("fkey"))
        return over(d.where("p >= 0 AND fkey > 0"))

    def join() -> Any:
        d = raw.select(*cols, F.col("_metadata.row_index").alias("p"), key.alias("fkey"))
        d = d.join(F.broadcast(table), "fkey", "left")
        return over(d.where("n IS NULL OR p < n"))

    return {
        "plain": lambda: over(raw),
        "row_index": row_index,
        "file_key": file_key,
        "join": join,
        "mor": lambda: mor_sql(sql.format(t=f"iceberg_scan('{location}')"), spark=spark),
        "native": lambda: spark.sql(sql.format(t=f"local.bench.{name}")),
    }


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__.splitlines()[0], reps=9)
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--pos", type=float, default=0.01)
    ap.add_argument("--queries", nargs="*", default=["group_agg", "select_star", "range"])
    args = ap.parse_args(argv)
    import pyspark

    warehouse = Path(args.warehouse)
    spark = iceberg_session(warehouse)
    build(spark, warehouse, args.rows, args.pos, 0.0, 1)
    name = table_name(args.rows, args.pos, 0.0, 1)
    location = warehouse / "bench" / name
    out = []
    for q in args.queries:
        rungs = ladder(spark, location, name, q)
        check_same(rungs["mor"], rungs["native"], q, f"{name} {q}")
        for _ in range(2):  # JIT and code generation, for every rung alike
            for make in rungs.values():
                action(make(), q)
        took: dict[str, list[float]] = {k: [] for k in rungs}
        built: dict[str, list[float]] = {k: [] for k in rungs}
        for i in range(args.reps):
            order = list(rungs)[i % len(rungs) :] + list(rungs)[: i % len(rungs)]
            for label in order:
                t0 = time.perf_counter()
                df = rungs[label]()
                t1 = time.perf_counter()
                action(df, q)
                took[label].append(time.perf_counter() - t0)
                built[label].append(t1 - t0)
        plain = statistics.median(took["plain"])
        print(f"pyspark {pyspark.__version__}, {name}, {q} (medians of {args.reps}):")
        for label in rungs:
            m, b = statistics.median(took[label]), statistics.median(built[label])
            print(f"  {label:<10} {m:6.3f} s  (build {b:5.3f} s)  / plain {m / plain:5.2f}")
            out.append({"spark": pyspark.__version__, "query": q, "rung": label, "s": m})
    if args.json:
        write_json(args.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
