"""Planning benchmark: mor's scan planning vs pyiceberg's `plan_files()` on a many-file table.

    .venv/bin/python bench/planning.py [--files 2000 --manifests 50 --reps 7]

The table (written with mor.writer.tables, no equality deletes so pyiceberg can plan it) has
`--files` data files in `--manifests` manifests, identity-partitioned on `p`, plus position
deletes on a few files. Timed: the full plan, a partition filter (`p = 7`), and a metrics-only
filter (`id < 100`). Four kinds of mor runs, each against pyiceberg in the same turn:

- "cold": nothing cached, in this process or on disk (`manifest_disk_cache_mb=0`);
- "first": nothing cached, the disk cache on: what a first process pays, storing what it decoded;
- "second": this process's caches cleared, the disk cache holding what "first" stored (what a
  second process, e.g. the next `mor run`, pays: planner/manifest_store.py);
- "warm": this process's caches kept (a long-lived process planning many queries).

pyiceberg has no such caches. The disk cache lives in a folder of the run's own (`$MOR_CACHE_DIR`
is set to it), removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from mor.planner.state import caches

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository


def build(warehouse: Path, files: int, manifests: int) -> object:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    from mor.api import default_catalog
    from mor.writer.tables import TableWriter

    cat = default_catalog(str(warehouse))
    if cat.table_exists("bench.many"):
        return cat
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "p", LongType(), required=False),
        NestedField(3, "s", StringType(), required=False),
    )
    w = TableWriter(
        cat, "bench.many", schema, PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
    )
    per = files // manifests
    for m in range(manifests):
        ps = [m * per + j for j in range(per)]
        ids = [p * 10 + r for p in ps for r in range(3)]
        rows = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "p": pa.array([i // 10 for i in ids], pa.int64()),
                "s": [f"v{i}" for i in ids],
            }
        )
        _, written = w.append(rows)
        if m % 10 == 0:
            f = written[0]
            w.commit(deletes=[w.position_delete_file({f.file_path: [0]}, f)])
    return cat


def _bound(cat: object, sql: str) -> tuple[object, object]:
    """The bound plan (scans with their columns and filters), and its resolver (table loaded
    once)."""
    from mor.planner.sources import PathMap, Resolver
    from mor.planner.sql import bind, one_statement

    resolver = Resolver(cat, PathMap.of(None))  # type: ignore[arg-type]
    return bind(one_statement(sql), resolver), resolver


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--manifests", type=int, default=50)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--warehouse", default=str(Path(tempfile.gettempdir()) / "mor-bench-planning"))
    args = ap.parse_args(argv)

    from pyiceberg.expressions import AlwaysTrue, EqualTo, LessThan

    from mor.api import plan_query
    from mor.planner import scan_planning
    from mor.planner.attach import attach_files
    from mor.planner.nodes import IcebergScan
    from mor.planner.settings import applied

    cat = build(Path(args.warehouse), args.files, args.manifests)
    table = cat.load_table("bench.many")  # type: ignore[attr-defined]
    cases = [
        ("full", AlwaysTrue(), ""),
        ("p = 7", EqualTo("p", 7), " WHERE p = 7"),
        ("id < 100", LessThan("id", 100), " WHERE id < 100"),
    ]
    print(f"table: {args.files} data files in {args.manifests} data manifests (+ delete manifests)")
    print(
        "scan planning alone (same loaded metadata, same filter), medians of "
        f"{args.reps}; end to end adds SQL binding and loading the table from the catalog"
    )
    print(
        f"{'filter':<10} {'pyiceberg':>10} {'cold':>8} {'first':>8} {'second':>8} {'warm':>8} "
        f"{'cold/py':>8} {'first/py':>8} {'second/py':>9} {'warm/py':>8} {'end-to-end':>11}  files"
    )
    store = tempfile.mkdtemp(prefix="mor-bench-planning-cache-")
    os.environ["MOR_CACHE_DIR"] = store
    try:
        for label, expr, where in cases:
            py, cold, first, second, warm, e2e = [], [], [], [], [], []
            n_py = n_mor = 0
            bound, resolver = _bound(cat, f"SELECT id FROM bench.many{where}")
            for _ in range(args.reps):
                t0 = time.perf_counter()
                n_py = len(list(table.scan(row_filter=expr).plan_files()))
                py.append(time.perf_counter() - t0)
                with applied({"manifest_disk_cache_mb": 0}, "bench"):
                    scan_planning.clear_manifest_cache(caches())
                    t0 = time.perf_counter()
                    attach_files(bound, resolver, caches())
                    cold.append(time.perf_counter() - t0)
                with applied(None):  # as in a query: settings loaded once, not per scan
                    shutil.rmtree(store, ignore_errors=True)
                    scan_planning.clear_manifest_cache(caches())
                    t0 = time.perf_counter()
                    attach_files(bound, resolver, caches())
                    first.append(time.perf_counter() - t0)
                    scan_planning.clear_manifest_cache(caches())
                    t0 = time.perf_counter()
                    attach_files(bound, resolver, caches())
                    second.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    planned = attach_files(bound, resolver, caches())
                    warm.append(time.perf_counter() - t0)
                t0 = time.perf_counter()  # end to end: settings, binding, the table loaded
                plan_query(f"SELECT id FROM bench.many{where}", catalog=cat)
                e2e.append(time.perf_counter() - t0)
                n_mor = sum(
                    len(s.files.data) for s in planned.walk() if isinstance(s, IcebergScan)
                )
            p, c, f, s2, w, e = (statistics.median(x) for x in (py, cold, first, second, warm, e2e))
            print(
                f"{label:<10} {p * 1000:>8.1f}ms {c * 1000:>6.1f}ms {f * 1000:>6.1f}ms "
                f"{s2 * 1000:>6.1f}ms {w * 1000:>6.1f}ms {c / p:>8.2f} {f / p:>8.2f} "
                f"{s2 / p:>9.2f} {w / p:>8.2f} {e * 1000:>9.1f}ms  pyiceberg {n_py}, mor {n_mor}"
            )
            if n_py != n_mor:
                print(f"  FILE COUNTS DIFFER for {label}")
                return 1
    finally:
        shutil.rmtree(store, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
