"""mor's DELETE, UPDATE and MERGE against Iceberg's own merge-on-read ones, on one table, in one
run.

    .venv/bin/python -m bench.row_writes --rows 6000000 --reps 3
    .venv/spark41/bin/python -m bench.row_writes --version 3

bench/tables.py's table (Iceberg's Java writer: 8 data files, 1% position deletes through
Spark's DELETE, 10% equality deletes over two id sets through RowDelta, as a CDC table carries)
is registered in a JDBC catalog on PostgreSQL that Iceberg's Spark catalog and pyiceberg's
SqlCatalog share (tests/pgcatalog.py). Each statement runs on the same snapshot by both
peers, in an order that alternates, in the same Spark session (the same cores), each followed
by `rollback_to_snapshot` to the snapshot read:

- `spread`: 1% of the rows, every data file touched (`id % 100 = 7`: keys scattered, as a
  GDPR purge);
- `range`: 1% of the rows, one contiguous range of ids (one data file touched);
- `none`: a condition no row matches (what a statement costs with nothing to write);
- `update`: an UPDATE of two columns of 1% of the rows, every data file touched;
- `update_range`: an UPDATE of one column of 1% of the rows, one contiguous range of ids;
- `merge`: a MERGE of 100,000 rows (at 6M; a query over the table, keys shifted by 3) that
  updates the rows it matches (every column) and inserts the others.

Iceberg: `spark.sql("DELETE FROM lake.b.t WHERE ...")` / `UPDATE` / `MERGE` (merge-on-read: position
delete files on v2, deletion vectors on v3, and the updated rows as new data files). mor:
`mor.row_writes.run_row_write`, first with its process caches
cleared ("first": what a new `mor run` pays, the JVM warm) and then repeated. Before any time
is printed, the rows each peer's commit leaves must be equal, read by Iceberg's reader (count
and two sums of a 64-bit hash of every column). Prints the medians and the ratio mor /
Iceberg (below 1.0: mor is faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STATEMENTS = {
    "spread": "DELETE FROM <t> WHERE id % 100 = 7",
    "range": "DELETE FROM <t> WHERE id >= <lo> AND id < <hi>",
    "none": "DELETE FROM <t> WHERE id < 0",
    "update": "UPDATE <t> SET v = v + 1, grp = concat(grp, '!') WHERE id % 100 = 7",
    "update_range": "UPDATE <t> SET v = v + 1 WHERE id >= <lo> AND id < <hi>",
    # an upsert of 100,000 rows (at 6M): keys of every file, most matched, those whose target
    # row was deleted inserted
    "merge": (
        "MERGE INTO <t> t USING (SELECT id + 3 AS id, k, grp, v + 1 AS v, pad FROM <t> "
        "WHERE id % 60 = 7) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    ),
}

# decimal sums: a sum of 64-bit hashes overflows a bigint, an error under Spark 4's ANSI mode
FINGERPRINT = (
    "SELECT count(*), sum(CAST(xxhash64(id, k, grp, v, pad) AS DECIMAL(38, 0))), "
    "sum(pmod(xxhash64(id, k, grp, v, pad), 1000003)) FROM {t}"
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=6_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--eq", type=float, default=0.1, help="equality deletes in the table")
    ap.add_argument("--work", default=None, help="folder for the tables (default: a temp dir)")
    ap.add_argument("--version", type=int, choices=(2, 3), default=2)
    ap.add_argument("--statements", nargs="*", default=list(STATEMENTS), choices=list(STATEMENTS))
    args = ap.parse_args(argv)

    from pyiceberg.catalog import load_catalog

    from bench.harness import clear_caches
    from bench.tables import build
    from mor.row_writes import run_row_write
    from tests.oracle.runtime import iceberg_session
    from tests.pgcatalog import CATALOG, Postgres

    work = Path(args.work or tempfile.mkdtemp(prefix="mor-writes-bench-"))
    warehouse = f"file://{work}/lake"
    with Postgres() as pg:
        spark = iceberg_session(work / "java", conf=pg.spark_conf(warehouse))
        eq_sets = 2 if args.eq else 1
        local = build(spark, work / "java", args.rows, 0.01, args.eq, eq_sets, version=args.version)
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
        lo = args.rows // 2
        hi = lo + args.rows // 100
        conds = {
            k: STATEMENTS[k].replace("<lo>", str(lo)).replace("<hi>", str(hi))
            for k in args.statements
        }

        def fingerprint() -> tuple:
            spark.sql(f"REFRESH TABLE {java}")
            return tuple(spark.sql(FINGERPRINT.format(t=java)).first())

        def rollback() -> None:
            spark.sql(f"CALL {CATALOG}.system.rollback_to_snapshot('b.t', {base})")
            spark.sql(f"REFRESH TABLE {java}")

        print(
            f"DELETE, UPDATE and MERGE on {args.rows:,} rows, 8 files, pos 1%, eq {args.eq:.0%}, "
            f"v{args.version}, reps {args.reps} (medians, s)"
        )
        print(
            f"  {'statement':<12} {'rows':>8} {'Iceberg':>8} {'mor first':>10} {'mor again':>10}"
            f" {'first/Ice':>10} {'again/Ice':>10}"
        )
        for name, cond in conds.items():
            times: dict[str, list[float]] = {"Iceberg": [], "first": [], "again": []}
            want: tuple | None = None
            deleted = 0

            def iceberg(cond: str = cond) -> None:
                spark.sql(cond.replace("<t>", java))

            def first(cond: str = cond) -> None:
                nonlocal deleted
                clear_caches()
                deleted = run_row_write(cond.replace("<t>", "b.t"), catalog=cat, spark=spark).rows

            def again(cond: str = cond) -> None:
                run_row_write(cond.replace("<t>", "b.t"), catalog=cat, spark=spark)

            for r in range(args.reps + 1):  # the first round warms all up, untimed
                order = [("Iceberg", iceberg), ("first", first), ("again", again)]
                for who, run in order if r % 2 else list(reversed(order)):
                    spark.sql(f"REFRESH TABLE {java}")
                    t0 = time.perf_counter()
                    run()
                    took = time.perf_counter() - t0
                    got = fingerprint()
                    if want is None:
                        want = got
                    elif not _same(got, want):
                        print(f"{who}: the rows after {name} differ: {got} against {want}")
                        return 1
                    if r:
                        times[who].append(took)
                    rollback()
            m = {k: statistics.median(v) for k, v in times.items()}
            print(
                f"  {name:<12} {deleted:>8,} {m['Iceberg']:>8.2f} {m['first']:>10.2f} "
                f"{m['again']:>10.2f} {m['first'] / m['Iceberg']:>10.2f} "
                f"{m['again'] / m['Iceberg']:>10.2f}"
            )
    return 0


def _same(a: Any, b: Any) -> bool:
    """The same rows; sums of doubles may differ in their last bits with the order they are
    added in."""
    return all(
        x == y or (isinstance(x, float) and abs(x - y) <= 1e-9 * max(abs(x), abs(y)))
        for x, y in zip(a, b)
    )


if __name__ == "__main__":
    sys.exit(main())
