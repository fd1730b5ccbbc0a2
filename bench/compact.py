"""`mor compact` against Iceberg's `rewrite_data_files`, on the same table, in one run; and
what `mor convert-equality-deletes` costs and gains.

    .venv/bin/python -m bench.compact --rows 5000000 --reps 3

bench/tables.py's table (Iceberg's Java writer: 8 data files, 1% position deletes through
Spark's DELETE, 10% equality deletes over two id sets through RowDelta) is registered in a
JDBC catalog on PostgreSQL that Iceberg's Spark catalog and pyiceberg's SqlCatalog share
(tests/pgcatalog.py). Each round compacts the same snapshot twice, once by each, in an order
that alternates: `CALL lake.system.rewrite_data_files(table, options =>
map('delete-file-threshold', '1'))` and `mor.maintenance.compact(table,
delete_file_threshold=1)`, both bin-packing to the same target size in the same Spark session
(the same cores), each followed by `rollback_to_snapshot` to the snapshot read. Before any
time is printed, the rows each compaction committed must equal the rows before it, read by
Iceberg's reader (count and two sums of a 64-bit hash of every column). Then the reads of
the compacted table against the uncompacted one: `count(*)` and a grouped aggregate, by mor
and by Iceberg's reader, repeated (medians).

Then conversion, on the same snapshot: `convert_equality_deletes` timed (rolled back between
rounds) against one read by mor of the unconverted snapshot in a fresh process cache (its
first `count(*)`: the anti-join over the key columns), and the reads before and after it by
mor, Iceberg's reader and DuckDB 1.5.5's iceberg extension (a process of its own per query,
`--duckdb-timeout` seconds at most), rows checked equal.

Prints the medians and the ratio mor / Iceberg (below 1.0: mor is faster). `--version 3`:
the table is v3 (deletion vectors from Spark's DELETE); the rows each compaction committed
must also keep their lineage (two sums of `_row_id` and `_last_updated_sequence_number`,
read by Iceberg's reader), and the conversion writes deletion vectors merged with those.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

QUERIES = {
    "count": "SELECT count(*) FROM {t}",
    "group_agg": "SELECT grp, count(*), sum(v) FROM {t} GROUP BY grp",
}


FINGERPRINT = (
    "SELECT count(*), sum(xxhash64(id, k, grp, v, pad)), "
    "sum(pmod(xxhash64(id, k, grp, v, pad), 1000003)) FROM {t}"
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", default=None, help="folder for the tables (default: a temp dir)")
    ap.add_argument("--duckdb-timeout", type=float, default=300)
    ap.add_argument(
        "--version",
        type=int,
        choices=(2, 3),
        default=2,
        help="format version (3: deletion vectors, row lineage checked)",
    )
    args = ap.parse_args(argv)

    from pyiceberg.catalog import load_catalog

    from bench.tables import build
    from mor import mor_sql
    from mor.maintenance import compact
    from tests.oracle.runtime import iceberg_session
    from tests.pgcatalog import CATALOG, Postgres

    work = Path(args.work or tempfile.mkdtemp(prefix="mor-compact-bench-"))
    warehouse = f"file://{work}/lake"
    with Postgres() as pg:
        spark = iceberg_session(work / "java", conf=pg.spark_conf(warehouse))
        local = build(spark, work / "java", args.rows, 0.01, 0.1, 2, version=args.version)
        meta = (
            spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
                spark._jsparkSession, local
            )
            .operations()
            .current()
            .metadataFileLocation()
        )
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.b")
        spark.sql(
            f"CALL {CATALOG}.system.register_table(table => 'b.t', metadata_file => '{meta}')"
        )
        cat = load_catalog(CATALOG, **pg.pyiceberg_properties(warehouse))
        java = f"{CATALOG}.b.t"
        base = cat.load_table("b.t").current_snapshot().snapshot_id
        lineage = (  # v3: each row's lineage kept, as Iceberg's reader reads it
            ", sum(_row_id), sum(_last_updated_sequence_number), count(_row_id)"
            if args.version == 3
            else ""
        )
        fingerprint = FINGERPRINT.replace(" FROM {t}", lineage + " FROM {t}")
        rows = tuple(spark.sql(fingerprint.format(t=java)).first())

        def rollback() -> None:
            spark.sql(f"CALL {CATALOG}.system.rollback_to_snapshot('b.t', {base})")
            spark.sql(f"REFRESH TABLE {java}")

        def iceberg() -> str:
            spark.sql(
                f"CALL {CATALOG}.system.rewrite_data_files(table => 'b.t', "
                "options => map('delete-file-threshold', '1'))"
            ).collect()
            return "Iceberg"

        def mor() -> str:
            compact("b.t", catalog=cat, spark=spark, delete_file_threshold=1)
            return "mor"

        times: dict[str, list[float]] = {"Iceberg": [], "mor": []}
        for r in range(args.reps + 1):  # the first round warms both up, untimed
            for run in (iceberg, mor) if r % 2 else (mor, iceberg):
                t0 = time.perf_counter()
                who = run()
                took = time.perf_counter() - t0
                spark.sql(f"REFRESH TABLE {java}")
                after = tuple(spark.sql(fingerprint.format(t=java)).first())
                if after != rows:
                    print(f"{who}'s compaction changed the rows: {after} against {rows}")
                    return 1
                if r:
                    times[who].append(took)
                last = cat.load_table("b.t").current_snapshot().snapshot_id
                rollback()
        print(
            f"compaction of {args.rows:,} rows, 8 files, pos 1%, eq 10% (2 id sets), "
            f"reps {args.reps}"
        )
        m, i = statistics.median(times["mor"]), statistics.median(times["Iceberg"])
        print(f"  mor compact {m:.2f} s, Iceberg rewrite_data_files {i:.2f} s: ratio {m / i:.2f}")

        # reads before and after (the last compaction, by whichever ran last, made current)
        spark.sql(f"CALL {CATALOG}.system.set_current_snapshot('b.t', {last})")
        print("reads, repeated (medians), before -> after compaction:")
        for name, q in QUERIES.items():
            out = []
            for at in (base, last):
                sql = q.format(t=f"b.t VERSION AS OF {at}")
                jsql = q.format(t=f"{java} VERSION AS OF {at}")
                ts: dict[str, list[float]] = {"mor": [], "Iceberg": []}
                for _ in range(args.reps + 1):
                    t0 = time.perf_counter()
                    mor_sql(sql, catalog=cat, spark=spark).collect()
                    ts["mor"].append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    spark.sql(jsql).collect()
                    ts["Iceberg"].append(time.perf_counter() - t0)
                out.append({k: statistics.median(v[1:]) for k, v in ts.items()})
            b, a = out
            print(
                f"  {name}: mor {b['mor']:.2f} -> {a['mor']:.2f} s, Iceberg's reader "
                f"{b['Iceberg']:.2f} -> {a['Iceberg']:.2f} s"
            )
        spark.sql(f"CALL {CATALOG}.system.rollback_to_snapshot('b.t', {base})")
        _conversion(spark, cat, java, base, args)
    return 0


def _same(a: Any, b: Any) -> bool:
    """The same rows, numbers equal to 1e-9 relative: sums of doubles differ in their last
    bits with the order they are added in (which neither a reader nor a layout fixes)."""

    def num(v: Any) -> Any:
        try:
            return float(v)
        except (TypeError, ValueError):
            return str(v)

    def rows(x: Any) -> list:
        return sorted(
            (tuple(num(v) for v in r) for r in x),
            key=lambda r: tuple(v if isinstance(v, str) else "" for v in r),
        )

    xs, ys = rows(a), rows(b)
    return len(xs) == len(ys) and all(
        len(x) == len(y)
        and all(
            abs(u - v) <= 1e-9 * max(abs(u), abs(v), 1.0)
            if isinstance(u, float) and isinstance(v, float)
            else u == v
            for u, v in zip(x, y)
        )
        for x, y in zip(xs, ys)
    )


def _conversion(spark: Any, cat: Any, java: str, base: int, args: Any) -> None:
    from bench.flink_cdc import duckdb_python, run_duckdb
    from mor import mor_sql
    from mor.api import plan_query
    from mor.maintenance import convert_equality_deletes
    from mor.physical.compile import to_dataframe
    from mor.planner.state import ProcessCaches
    from tests.pgcatalog import CATALOG

    def rollback() -> None:
        spark.sql(f"CALL {CATALOG}.system.rollback_to_snapshot('b.t', {base})")
        spark.sql(f"REFRESH TABLE {java}")

    took, reads = [], []
    for r in range(args.reps + 1):
        t0 = time.perf_counter()
        plan = plan_query(f"SELECT count(*) FROM b.t VERSION AS OF {base}", catalog=cat)
        to_dataframe(plan.optimized, spark, ProcessCaches()).collect()  # a fresh cache
        reads.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        report = convert_equality_deletes("b.t", catalog=cat, spark=spark)
        took.append(time.perf_counter() - t0)
        conv = report.snapshot
        if r < args.reps:
            rollback()
    c, one = statistics.median(took[1:]), statistics.median(reads[1:])
    print(
        f"conversion: {c:.2f} s ({report.positions:,} positions in {len(report.written)} "
        f"files, {len(report.removed)} equality delete files removed); one read by mor "
        f"(count(*), fresh cache) {one:.2f} s: {c / one:.1f} reads"
    )
    spark.sql(f"REFRESH TABLE {java}")
    after_meta = cat.load_table("b.t").metadata_location
    spark.sql(f"CALL {CATALOG}.system.set_current_snapshot('b.t', {base})")
    before_meta = cat.load_table("b.t").metadata_location  # the base current again
    duck = duckdb_python()
    print("reads, repeated (medians), before -> after conversion:")
    for name, q in QUERIES.items():
        line = []
        for at, meta in ((base, before_meta), (conv, after_meta)):
            ts: dict[str, list[float]] = {"mor": [], "Iceberg": []}
            got = {}
            for _ in range(args.reps + 1):
                t0 = time.perf_counter()
                got["mor"] = mor_sql(
                    q.format(t=f"b.t VERSION AS OF {at}"), catalog=cat, spark=spark
                ).collect()
                ts["mor"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                got["Iceberg"] = spark.sql(q.format(t=f"{java} VERSION AS OF {at}")).collect()
                ts["Iceberg"].append(time.perf_counter() - t0)
            out = {k: statistics.median(v[1:]) for k, v in ts.items()}
            d = run_duckdb(duck, {"t": meta}, q.format(t="t"), 1, args.reps, args.duckdb_timeout)
            if "times" in d:
                out["DuckDB"] = statistics.median(d["times"][1:])
                if not _same(got["mor"], d["rows"]):
                    print(f"  {name}: DuckDB's rows differ from mor's at snapshot {at}")
                    out["DuckDB"] = float("nan")
            else:
                out["DuckDB"] = float("inf")  # refused or timed out
                print(f"  {name}: DuckDB at snapshot {at}: {d}")
            if not _same(got["mor"], got["Iceberg"]):
                print(f"  {name}: mor's rows differ from Iceberg's at snapshot {at}")
            line.append(out)
        b, a = line
        print(
            f"  {name}: "
            + ", ".join(f"{k} {b[k]:.2f} -> {a[k]:.2f} s ({a[k] / b[k]:.2f})" for k in b)
        )


if __name__ == "__main__":
    sys.exit(main())
