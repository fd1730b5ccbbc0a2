"""Scale benchmark: mor against Iceberg's reader on tables of 20,000 to 1,000,000 data files.

    .venv/bin/python bench/scale.py                         # 20,000 and 100,000 files
    .venv/bin/python bench/scale.py --files 20000 --reps 3 --queries count group
    .venv/bin/python bench/scale.py --files 1000000 --plan-only

The tables (tests/oracle/many_files.py says how they are made: manifests written with fastavro
in the schemas Iceberg's Java writer uses, over hard links to a few hundred real Parquet files)
hold `--files` data files of 100 rows in 100 identity partitions, two position deletes in a
tenth of the files; per size two tables by default:
- `ids`: files with Parquet field ids, no equality deletes (pyiceberg can plan it);
- `mapped`: files without field ids read through a name mapping (as `add_files` and
  migrations leave tables), and equality deletes on `id` reaching a quarter of the files;
and with `--tables`:
- `migrated`: the table the issue measured: files without field ids under a name mapping, no
  deletes (what `add_files` leaves; pyiceberg can plan it);
- `all-pos`: two position deletes in every data file;
- `eq10m`: `mapped` with 10,000,000 equality delete keys (100,000 a partition).

Printed per table:
- planning: mor's `plan_query` cold (its manifest caches cleared) and warm, against pyiceberg's
  `plan_files()` cold on the same table (the `ids` table: pyiceberg refuses equality deletes);
  and the peak RSS of each planner, each in a fresh process (`--plan-only` stops there);
- per query, for mor: building the DataFrame (`mor_sql`: planning, file lists, DataFrame
  operations) and running it; for Iceberg's reader (`spark.sql` over its catalog), the whole
  query. The first call of each in the session, then the median of `--reps` more; which reader
  goes first alternates from one repetition and one query to the next, after a Spark job and a
  read of one data file that neither is timed for (the JVM's first of each). Results are
  compared (the row count for `SELECT * ... LIMIT`) before any time is printed;
- the driver JVM's peak RSS (VmHWM) at the end.
Queries: count(*), a grouped aggregate, a selective id range (column bounds prune to a few
files), a one-partition filter, and SELECT * LIMIT 100.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository

from bench.harness import ROOT, write_json  # noqa: E402
from tests.oracle.many_files import ScaleSpec, build  # noqa: E402

QUERIES = {
    "count": "SELECT count(*) FROM {t}",
    "group": "SELECT p, count(*) AS n, sum(v) AS s FROM {t} GROUP BY p",
    "selective": "SELECT id, v FROM {t} WHERE id BETWEEN {lo} AND {hi}",
    "partition": "SELECT count(*), sum(v) FROM {t} WHERE p = 7",
    "limit": "SELECT * FROM {t} LIMIT 100",
}


def specs(files: int) -> dict[str, ScaleSpec]:
    return {
        "ids": ScaleSpec(files=files, pos_frac=0.1, eq_keys=0),
        "mapped": ScaleSpec(files=files, mapping=True, pos_frac=0.1, eq_keys=10),
        "migrated": ScaleSpec(files=files, mapping=True, pos_frac=0.0, eq_keys=0),
        # deletes at scale: two positions deleted in every data file; 100,000 equality delete
        # keys a partition (10,000,000 in all, most matching no row)
        "all-pos": ScaleSpec(files=files, pos_frac=1.0, eq_keys=0),
        "eq10m": ScaleSpec(files=files, mapping=True, pos_frac=0.1, eq_keys=100_000),
    }


def _peak_mb(pid: int | str = "self") -> float | None:
    """A process's peak RSS (Linux's VmHWM), None where /proc cannot tell."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _rss_mb() -> float:
    """This process's peak RSS. VmHWM first: getrusage's ru_maxrss survives exec, so a child
    started from a large parent would report the parent's size at the fork."""
    peak = _peak_mb()
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def plan_child(location: str, who: str, where: str) -> None:
    """In a fresh process: plan once, print seconds and peak RSS (MB) as JSON."""
    sql_where = f" WHERE {where}" if where else ""
    if who == "mor":
        from mor.api import plan_query

        t0 = time.perf_counter()
        plan = plan_query(f"SELECT * FROM iceberg_scan('{location}'){sql_where}")
        seconds = time.perf_counter() - t0
        files = sum(len(s.data_files()) for s in plan.optimized.walk() if hasattr(s, "data_files"))
    else:
        from pyiceberg.expressions import AlwaysTrue, EqualTo
        from pyiceberg.table import StaticTable

        meta = max(Path(location, "metadata").glob("v*.metadata.json"), key=_version)
        table = StaticTable.from_metadata(str(meta))
        t0 = time.perf_counter()
        flt = EqualTo("p", 7) if where else AlwaysTrue()
        files = len(list(table.scan(row_filter=flt).plan_files()))
        seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "rss_mb": _rss_mb(), "files": files}))


def _version(p: Path) -> int:
    return int(p.name.split(".")[0].lstrip("v"))


def planning(location: Path, spec: ScaleSpec, reps: int) -> dict[str, Any]:
    """Cold and warm planning in this process, and each planner's peak RSS in a child."""
    from mor.api import plan_query
    from mor.planner.scan_planning import clear_manifest_cache
    from mor.planner.state import caches

    out: dict[str, Any] = {}
    for label, where in (("full", ""), ("p = 7", "p = 7")):
        sql = f"SELECT * FROM iceberg_scan('{location}')" + (f" WHERE {where}" if where else "")
        cold, warm = [], []
        for _ in range(reps):
            clear_manifest_cache(caches())
            t0 = time.perf_counter()
            plan_query(sql)
            cold.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            plan_query(sql)
            warm.append(time.perf_counter() - t0)
        children = {}
        for who in ("mor", "pyiceberg") if spec.eq_keys == 0 else ("mor",):
            proc = subprocess.run(
                [sys.executable, __file__, "--plan-child", str(location), who, where],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            if proc.returncode != 0:
                children[who] = {"error": proc.stderr.strip().splitlines()[-1][:200]}
            else:
                children[who] = json.loads(proc.stdout.strip().splitlines()[-1])
        row = {
            "cold_s": statistics.median(cold),
            "warm_s": statistics.median(warm),
            **{f"{w}_{k}": v for w, c in children.items() for k, v in c.items()},
        }
        if "pyiceberg_seconds" in row:
            row["cold/pyiceberg"] = row["cold_s"] / row["pyiceberg_seconds"]
        out[label] = row
        print(
            f"  planning {label:<6} mor cold {row['cold_s']:6.2f}s warm {row['warm_s']:6.2f}s "
            f"(child {row.get('mor_seconds', float('nan')):6.2f}s, "
            f"{row.get('mor_rss_mb', float('nan')):5.0f} MB)"
            + (
                f" | pyiceberg {row['pyiceberg_seconds']:6.2f}s, "
                f"{row['pyiceberg_rss_mb']:5.0f} MB | cold/pyiceberg {row['cold/pyiceberg']:.2f}"
                if "pyiceberg_seconds" in row
                else ""
            ),
            flush=True,
        )
    return out


def _bag(rows: list[Any]) -> list[tuple]:
    return sorted(tuple(float(f"{x:.9g}") if isinstance(x, float) else x for x in r) for r in rows)


def queries(
    spark: Any,
    name: str,
    location: Path,
    spec: ScaleSpec,
    reps: int,
    chosen: list[str],
    settings: dict[str, Any] | None = None,
    native: bool = True,
) -> dict[str, Any]:
    from mor import mor_sql

    ours_t = f"iceberg_scan('{location}')"
    lo = spec.first_id(40, 1)
    out = {}
    # neither reader's first call pays for the JVM's first job and first Parquet read (the one
    # going first would, and the other find the JVM warm): a job and a read of one data file
    spark.range(1000).selectExpr("sum(id)").collect()
    one = next(Path(location, "data").rglob("*.parquet"), None)
    if one is not None:
        spark.read.parquet(str(one)).count()
    for qi, q in enumerate(chosen):
        sql = QUERIES[q].replace("{lo}", str(lo)).replace("{hi}", str(lo + 50))
        timings: dict[str, list[float]] = {"build": [], "run": [], "native": []}
        answers = {}
        for rep in range(1 + reps):
            # alternate which reader goes first, from one query to the next too: neither always
            # finds the JVM warmer
            order = ("ours", "native") if (rep + qi) % 2 == 0 else ("native", "ours")
            for who in order:
                if who == "ours":
                    t0 = time.perf_counter()
                    df = mor_sql(sql.format(t=ours_t), spark=spark, settings=settings)
                    t1 = time.perf_counter()
                    rows = df.collect()
                    t2 = time.perf_counter()
                    shown = tuple(rows[0]) if len(rows) == 1 else f"{len(rows)} rows"
                    timings["build"].append(t1 - t0)
                    timings["run"].append(t2 - t1)
                elif native:
                    t0 = time.perf_counter()
                    rows = spark.sql(sql.format(t=name)).collect()
                    timings["native"].append(time.perf_counter() - t0)
                else:
                    continue
                answers[who] = len(rows) if q == "limit" else _bag(rows)
            if native and answers["ours"] != answers["native"]:
                raise SystemExit(f"RESULTS DIFFER for {name} {q}: no time reported")
        if not native:
            timings["native"] = [float("nan")] * (1 + reps)
        first = {k: v[0] for k, v in timings.items()}
        again = {k: statistics.median(v[1:]) if reps else float("nan") for k, v in timings.items()}
        row = {"first": first, "again": again}
        for when, t in (("first", first), ("again", again)):
            row[f"{when} ours/native"] = (t["build"] + t["run"]) / t["native"]
        out[q] = row
        if not native:
            row["ours"] = str(shown)
            print(
                f"  {q:<10} first: ours {first['build']:6.2f}s build + {first['run']:7.2f}s run "
                f"| again: {again['build']:5.2f}s + {again['run']:7.2f}s | {shown}",
                flush=True,
            )
            continue
        print(
            f"  {q:<10} first: ours {first['build']:6.2f}s build + {first['run']:7.2f}s run, "
            f"native {first['native']:7.2f}s, ours/native {row['first ours/native']:5.2f} | "
            f"again: {again['build']:5.2f}s + {again['run']:7.2f}s, native "
            f"{again['native']:7.2f}s, ours/native {row['again ours/native']:5.2f}",
            flush=True,
        )
    return out


def _jvm_peak_mb(spark: Any) -> float | None:
    try:
        pid = spark.sparkContext._jvm.ProcessHandle.current().pid()
    except Exception:  # noqa: BLE001 - no JVM here (Connect): not reported
        return None
    return _peak_mb(pid)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--plan-child"]:
        plan_child(argv[1], argv[2], argv[3] if len(argv) > 3 else "")
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, nargs="*", default=[20_000, 100_000])
    ap.add_argument(
        "--tables",
        nargs="*",
        default=["ids", "mapped"],
        choices=["ids", "mapped", "migrated", "all-pos", "eq10m"],
    )
    ap.add_argument(
        "--settings",
        type=json.loads,
        default=None,
        help="mor settings for the queries, as JSON: '{\"position_bitmap_bytes\": 0}'",
    )
    ap.add_argument("--queries", nargs="*", default=list(QUERIES), choices=list(QUERIES))
    ap.add_argument("--reps", type=int, default=2, help="repeated calls after the first")
    ap.add_argument("--plan-reps", type=int, default=3)
    ap.add_argument("--plan-only", action="store_true", help="planning and memory only")
    ap.add_argument(
        "--no-native",
        action="store_true",
        help="mor alone (Iceberg's reader takes minutes a query at 10^5 files with deletes): "
        "nothing is compared, the counts are printed",
    )
    ap.add_argument("--warehouse", default=str(Path(tempfile.gettempdir()) / "mor-scale"))
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    from tests.oracle.runtime import iceberg_session

    warehouse = Path(args.warehouse)
    spark = iceberg_session(warehouse)
    results: dict[str, Any] = {}
    for files in args.files:
        for label in args.tables:
            spec = specs(files)[label]
            name, location = build(spark, warehouse, spec)
            print(f"{label} table, {files} files ({spec.name}):", flush=True)
            entry: dict[str, Any] = {"planning": planning(location, spec, args.plan_reps)}
            if not args.plan_only:
                entry["queries"] = queries(
                    spark,
                    name,
                    location,
                    spec,
                    args.reps,
                    args.queries,
                    args.settings,
                    not args.no_native,
                )
            results[f"{files}/{label}"] = entry
    results["jvm_peak_mb"] = _jvm_peak_mb(spark)
    print(f"driver JVM peak RSS: {results['jvm_peak_mb']:.0f} MB" if results["jvm_peak_mb"] else "")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-memory 4g pyspark-shell")
    sys.exit(main())
