"""What the benchmarks share: the repository on the import path, the action that runs a query,
the fingerprint that proves two peers returned the same rows, clearing mor's caches between a
process's runs, medians and geometric means, the common options and the JSON figures.

A benchmark is run as a script (`.venv/bin/python bench/run.py ...`); its first lines put the
repository on the path and import from here:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository
    from bench.harness import ROOT, action, fingerprint  # noqa: E402

Every figure a benchmark prints is a ratio against a peer measured in the same run
(Iceberg's Spark reader, a plain Parquet read of the same files, Trino, DuckDB), never a
duration held against a number written down somewhere.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# decoded manifests kept on disk (planner/manifest_store.py) go to the benchmarks' own folder,
# inherited by the processes a benchmark starts: never the user's cache. A "first call" after
# a table's first run finds them there, as a user's next process does
os.environ.setdefault("MOR_CACHE_DIR", str(Path(tempfile.gettempdir()) / "mor-bench-cache"))

# queries whose rows are written to Spark's no-op sink rather than collected to the driver
WRITTEN = frozenset({"select_star", "scan_select_star"})


def action(df: Any, query: str) -> Any:
    """Run the query: its rows collected, or for a `SELECT *` (WRITTEN) written to Spark's
    no-op sink, so that the driver does not time the transfer of millions of rows."""
    if query in WRITTEN:
        df.write.format("noop").mode("overwrite").save()
        return None
    return df.collect()


def fingerprint(df: Any) -> tuple:
    """(rows, a sum of row hashes): equal for two peers that returned the same rows."""
    from pyspark.sql import functions as F

    # a decimal sum: a long one overflows under ANSI mode (Spark 4's default)
    digest = F.sum(F.xxhash64(*df.columns).cast("decimal(38,0)"))
    return tuple(df.agg(F.count(F.lit(1)), digest).collect()[0])


def bag(rows: Iterable[Any]) -> list[tuple]:
    """Rows as a sorted list; doubles to 9 significant digits (sums depend on their order)."""
    return sorted(tuple(float(f"{x:.9g}") if isinstance(x, float) else x for x in r) for r in rows)


def check_same(ours: Any, native: Any, query: str, what: str) -> None:
    """Stop, printing no time, unless the DataFrames `ours()` and `native()` give the same
    rows (a fingerprint for a written `SELECT *`, else the collected rows as a bag)."""
    if query in WRITTEN:
        same = fingerprint(ours()) == fingerprint(native())
    else:
        same = bag(ours().collect()) == bag(native().collect())
    if not same:
        raise SystemExit(f"RESULTS DIFFER for {what}: no time reported")


def clear_caches() -> None:
    """Forget what mor keeps across queries of a process, as a new process would have it."""
    import mor

    mor.clear_caches()


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def geomean(values: Sequence[float]) -> float:
    """The geometric mean of ratios (1.0 for none)."""
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 1.0


def parser(description: str, reps: int, warehouse: str = "mor-bench") -> argparse.ArgumentParser:
    """The options every benchmark has: --reps (timed runs of each peer), --warehouse (where
    its tables are built, kept between runs) and --json (where its figures go)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--reps", type=int, default=reps)
    ap.add_argument("--warehouse", default=str(Path(tempfile.gettempdir()) / warehouse))
    ap.add_argument("--json", help="write the figures here")
    return ap


def write_json(path: str | None, figures: Any) -> None:
    """The figures as JSON at `path` (nothing without one)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(figures, indent=1))
