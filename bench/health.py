"""Does `mor health`'s read amplification order tables the way their read times do?

    .venv/bin/python bench/health.py                   # 2M rows, six delete shapes
    .venv/bin/python bench/health.py --rows 5000000 --reps 5

Builds the bench tables of bench/tables.py (Iceberg's Java writer) with different deletes, and a
compacted copy of each table's live rows (one Parquet write through Iceberg's reader). Per
table: the estimated `read_amplification` of `mor health --exact`, and the measured one, the
median time of a full scan (`SELECT *` to Spark's noop sink) through mor and through Iceberg's
own reader divided by the same scan of the compacted copy, alternating the three. Prints the
table and Spearman's rank correlation between the estimate and each measurement.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository

from bench.harness import write_json  # noqa: E402
from bench.tables import build, table_name  # noqa: E402
from tests.oracle.runtime import iceberg_session  # noqa: E402

# (position fraction, equality fraction, equality id sets)
SHAPES = [
    (0.0, 0.0, 1),
    (0.01, 0.0, 1),
    (0.2, 0.0, 1),
    (0.01, 0.1, 1),
    (0.01, 0.1, 2),
    (0.2, 0.3, 2),
]


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):  # ties share their mean rank
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    sa = sum((x - ma) ** 2 for x in ra) ** 0.5
    sb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (sa * sb) if sa and sb else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warehouse", default=str(Path(tempfile.gettempdir()) / "mor-bench"))
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)

    from mor import health, mor_sql

    warehouse = Path(args.warehouse)
    spark = iceberg_session(warehouse)
    out = []
    for pos, eq, sets in SHAPES:
        name = build(spark, warehouse, args.rows, pos, eq, sets)
        location = warehouse / "bench" / table_name(args.rows, pos, eq, sets)
        compact = warehouse / "compacted" / location.name
        if not compact.exists():
            spark.table(name).write.parquet(str(compact))
        report = health(str(location), exact=True, spark=spark)

        def scan(df: Any) -> None:
            df.write.format("noop").mode("overwrite").save()

        peers = {
            "ours": lambda: mor_sql(f"SELECT * FROM iceberg_scan('{location}')", spark=spark),
            "native": lambda: spark.table(name),  # noqa: B023 - used in this iteration only
            "compacted": lambda: spark.read.parquet(str(compact)),  # noqa: B023
        }
        times: dict[str, list[float]] = {k: [] for k in peers}
        for make in peers.values():  # warm-up
            scan(make())
        for _ in range(args.reps):
            for k, make in peers.items():
                t0 = time.perf_counter()
                scan(make())
                times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        row = {
            "table": location.name,
            "delete_ratio": report["delete_ratio"],
            "delete_files": report["position_delete_files"] + report["equality_delete_files"],
            "estimated": report["read_amplification"],
            "ours": med["ours"] / med["compacted"],
            "native": med["native"] / med["compacted"],
            "seconds": med,
        }
        out.append(row)
        print(
            f"{row['table']:<26} delete ratio {row['delete_ratio']:<7} estimated "
            f"{row['estimated']:6.2f}x  measured: ours {row['ours']:5.2f}x  native "
            f"{row['native']:5.2f}x  (compacted {med['compacted']:.2f}s)",
            flush=True,
        )
    est = [r["estimated"] for r in out]
    for peer in ("ours", "native"):
        rho = spearman(est, [r[peer] for r in out])
        print(f"Spearman rank correlation, estimated vs measured ({peer}): {rho:.2f}")
    write_json(args.json, out)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
