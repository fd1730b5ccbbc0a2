"""TPC-H over tables Flink's upsert sink wrote as CDC streams: mor vs Iceberg's Spark reader vs
Trino vs DuckDB's iceberg extension vs plain Parquet of the live rows, in one run.

    .venv/bin/python bench/flink_cdc.py                     # TPC-H sf 0.1, 40 commits per table
    .venv/bin/python bench/flink_cdc.py --sf 1 --commits 80

lineitem and orders are streamed by Flink 2.1.3 with Iceberg 1.11.0's Flink runtime
(bench/flink_cdc_job.py): each commit one key range of `+I`, `+U` of a slice of an earlier
range (a changed measure), `-D` of a slice of an older one; in upsert mode every written key is
also deleted by equality, so each commit carries an equality delete file per partition as long
as its data (the shape Flink CDC tables have), and position deletes for keys written twice in
it. The other tables are written once by Spark. All of them live in one JDBC catalog on a
PostgreSQL server kept with the tables (tests/pgcatalog.py), which every peer reads by name:
mor (`catalog="lake"`), Iceberg's reader (`lake.tpch.*`), Trino 476 (its Iceberg connector on
the same catalog, tests/trino.py, the query text turned into Trino's dialect by sqlglot) and
DuckDB 1.5.5 with `duckdb-extension-iceberg` (each table's current metadata file; a process of
its own per query, stopped after `--duckdb-timeout` seconds).

Each query: a first call per peer (mor with its caches cleared, as in a new process; DuckDB in
a new process), then after an untimed warm-up the peers alternate `--reps` times; medians.
Every peer's rows must equal Iceberg's reader's (numbers to 6 significant digits, dates as
text) before any time is printed. Prints the ratios ours/native, ours/trino, ours/duckdb and
their geometric means, first and repeated; `--json` saves them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository

from bench.harness import ROOT, clear_caches, write_json  # noqa: E402
from tests.oracle.runtime import iceberg_session  # noqa: E402
from tests.oracle.tpc import CACHE, DUCKDB, TPCH, generate  # noqa: E402
from tests.pgcatalog import CATALOG, Postgres  # noqa: E402
from tests.trino import TRINO_VERSION, Trino  # noqa: E402

FLINK_ENV = ROOT / ".venv" / "flink"
DB = "tpch"
# table -> range column, key (with the partition column, as Flink's upsert sink requires),
# identity partition column, the measure an upsert changes
STREAMED = {
    "lineitem": (
        "l_orderkey",
        ("l_orderkey", "l_linenumber", "l_returnflag"),
        "l_returnflag",
        "l_quantity",
    ),
    "orders": ("o_orderkey", ("o_orderkey", "o_orderstatus"), "o_orderstatus", "o_totalprice"),
}
SCANS = {
    "scan_count": "SELECT count(*) FROM lineitem",
    "scan_group_agg": "SELECT l_returnflag, l_linestatus, count(*) AS n, sum(l_quantity) AS q "
    "FROM lineitem GROUP BY l_returnflag, l_linestatus",
    "scan_range": "SELECT l_orderkey, l_extendedprice FROM lineitem "
    "WHERE l_orderkey BETWEEN {lo} AND {hi}",
}
# the iceberg extension and the avro one it loads (DuckDB would download it: not reachable here)
DUCKDB_ICEBERG = ("duckdb-extension-avro==1.5.5", "duckdb-extension-iceberg==1.5.5")

_DUCKDB_RUN = """
import duckdb, glob, json, os, sys, time
import duckdb_extension_avro, duckdb_extension_iceberg
spec = json.loads(sys.argv[1])
con = duckdb.connect(
    config={"allow_unsigned_extensions": "true", "autoinstall_known_extensions": "false"}
)
for m in (duckdb_extension_avro, duckdb_extension_iceberg):
    d = os.path.dirname(m.__file__)
    for ext in glob.glob(os.path.join(d, "**", "*.duckdb_extension"), recursive=True):
        con.load_extension(ext)
for t, meta in spec["views"].items():
    con.execute(f"CREATE VIEW {t} AS SELECT * FROM iceberg_scan('{meta}')")
times, rows = [], None
for i in range(1 + spec["warmup"] + spec["reps"]):
    t0 = time.perf_counter()
    got = con.execute(spec["sql"]).fetchall()
    took = time.perf_counter() - t0
    if i == 0 or i > spec["warmup"]:
        times.append(took)
    rows = got
    print(json.dumps({"times": times}), flush=True)
print(json.dumps({"times": times, "rows": [[str(v) for v in r] for r in rows]}), flush=True)
"""


def _norm(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float, Decimal)):
        f = float(v)
        return None if math.isnan(f) else float(f"{f:.6g}")
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    if isinstance(v, str):
        try:
            return float(f"{float(v):.6g}")
        except ValueError:
            return v
    return str(v)


def _bag(rows: Any) -> Counter:
    return Counter(tuple(_norm(v) for v in r) for r in rows)


def _close(a: Any, b: Any) -> bool:
    """Equal rows but for the rounding of numbers: Trino's avg of a decimal keeps its scale
    (25.61 where Spark gives 25.6118), so a number may differ by half a cent."""

    def key(r: tuple) -> tuple:
        return tuple(("", round(v, 1)) if isinstance(v, float) else (str(v), 0.0) for v in r)

    xs = sorted((tuple(_norm(v) for v in r) for r in a), key=key)
    ys = sorted((tuple(_norm(v) for v in r) for r in b), key=key)
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys, strict=True):
        for u, v in zip(x, y, strict=True):
            if isinstance(u, float) and isinstance(v, float):
                if abs(u - v) > max(0.006, 1e-5 * abs(v)):
                    return False
            elif u != v:
                return False
    return True


def build(spark: Any, pg: Postgres, data: Path, warehouse: str, commits: int, tmp: Path) -> dict:
    """Flink streams lineitem and orders, Spark writes the rest: the counts of events."""
    spec = {
        "jars": str(FLINK_ENV / "jars"),
        "catalog_name": CATALOG,
        "catalog": pg.flink_options(warehouse),
        "database": DB,
        "tables": [
            {
                "name": t,
                "parquet": str(data / f"{t}.parquet"),
                "range": rc,
                "key": list(key),
                "partition": part,
                "measure": measure,
                "commits": commits,
            }
            for t, (rc, key, part, measure) in STREAMED.items()
        ],
    }
    path = tmp / "flink-spec.json"
    path.write_text(json.dumps(spec))
    started = time.monotonic()
    proc = subprocess.run(
        [str(FLINK_ENV / "bin" / "python"), str(ROOT / "bench" / "flink_cdc_job.py"), str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "FLINK_LOG_DIR": str(tmp)},
    )
    if proc.returncode != 0:
        raise SystemExit(f"the Flink job failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    print("\n".join(ln for ln in proc.stdout.splitlines() if ln.startswith(("  ", "{"))))
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    counts["flink seconds"] = round(time.monotonic() - started)
    for t in TPCH.tables:
        if t not in STREAMED:
            spark.read.parquet(str(data / f"{t}.parquet")).coalesce(1).writeTo(
                f"{CATALOG}.{DB}.{t}"
            ).using("iceberg").tableProperty("format-version", "2").create()
    return counts


def query_texts(data: Path, lo: int) -> list[tuple[str, str]]:
    """(name, DuckDB's text over bare table names): TPC-H's 22, then the lineitem scans."""
    out = [(f"q{n}", text) for n, text in json.loads((data / "queries.json").read_text())]
    out += [
        (k, v.replace("{lo}", str(lo)).replace("{hi}", str(lo + 5000))) for k, v in SCANS.items()
    ]
    return out


def dialects(text: str) -> dict[str, str]:
    """The query for each peer: tables named through the catalog, in its dialect."""
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(text, read="duckdb")

    def named(db: str | None, cat: str | None) -> Any:
        def swap(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Table) and node.name in TPCH.tables and not node.args.get("db"):
                alias = node.alias or node.name
                return exp.Table(
                    this=exp.to_identifier(node.name if db else f"plain_{node.name}"),
                    db=exp.to_identifier(db) if db else None,
                    catalog=exp.to_identifier(cat) if cat else None,
                    alias=exp.TableAlias(this=exp.to_identifier(alias)),
                )
            return node

        return tree.copy().transform(swap)

    return {
        "ours": named(DB, None).sql("spark"),
        "native": named(DB, CATALOG).sql("spark"),
        "plain": named(None, None).sql("spark"),
        "trino": _group_by_expressions(named(DB, CATALOG)).sql("trino"),
        "duckdb": text,
    }


def _group_by_expressions(tree: Any) -> Any:
    """GROUP BY an output alias (DuckDB and Spark allow it, Trino does not: q15) becomes the
    aliased expression."""
    from sqlglot import exp

    for sel in tree.find_all(exp.Select):
        aliases = {a.alias: a.this for a in sel.expressions if isinstance(a, exp.Alias)}
        group = sel.args.get("group")
        for e in list(group.expressions) if group else []:
            if isinstance(e, exp.Column) and not e.table and e.name in aliases:
                e.replace(aliases[e.name].copy())
    return tree


def duckdb_python() -> Path:
    venv = CACHE / "duckdb-venv"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", DUCKDB[0], *DUCKDB_ICEBERG],
        check=True,
        capture_output=True,
    )
    return py


def run_duckdb(
    py: Path, views: dict[str, str], sql: str, warmup: int, reps: int, timeout: float
) -> dict:
    """{"times": [first, repeats...], "rows": ...} or {"timeout": seconds} / {"error": ...}."""
    spec = json.dumps({"views": views, "sql": sql, "warmup": warmup, "reps": reps})
    try:
        proc = subprocess.run(
            [str(py), "-c", _DUCKDB_RUN, spec], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if "Error" in ln] or ["?"]
        return {"error": lines[-1][:200]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--commits", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--duckdb-timeout", type=float, default=180, help="seconds per query")
    ap.add_argument("--only", nargs="*", help="query names to run (q1 ... q22, scan_*)")
    ap.add_argument("--warehouse", default=str(Path(tempfile.gettempdir()) / "mor-flink-cdc"))
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    wh = Path(args.warehouse) / f"sf{args.sf:g}-c{args.commits}"
    wh.mkdir(parents=True, exist_ok=True)
    warehouse = f"file://{wh}/lake"
    CACHE.mkdir(parents=True, exist_ok=True)
    data = generate(TPCH, CACHE, args.sf)
    duck = duckdb_python()
    with Postgres(keep=str(wh / "pg")) as pg, Trino(pg, warehouse) as trino:
        os.environ.update(pg.environment(warehouse))
        spark = iceberg_session(wh / "unused", conf=pg.spark_conf(warehouse))
        if not (wh / "BUILT").exists():
            counts = build(spark, pg, data, warehouse, args.commits, wh)
            (wh / "BUILT").write_text(json.dumps(counts))
        counts = json.loads((wh / "BUILT").read_text())
        files = spark.sql(
            f"SELECT content, count(*) n, sum(record_count) r FROM {CATALOG}.{DB}.lineitem"
            ".files GROUP BY content ORDER BY content"
        ).collect()
        print(
            f"lineitem files by content (0 data, 1 position, 2 equality): "
            f"{[tuple(r) for r in files]}; {counts}",
            flush=True,
        )
        for t in TPCH.tables:
            out = wh / "plain" / t
            if not (out / "_SUCCESS").exists():
                spark.table(f"{CATALOG}.{DB}.{t}").write.mode("overwrite").parquet(str(out))
            spark.read.parquet(str(out)).createOrReplaceTempView(f"plain_{t}")
        from pyiceberg.catalog import load_catalog

        cat = load_catalog(CATALOG)
        views = {
            t: cat.load_table(f"{DB}.{t}").metadata_location.removeprefix("file:")
            for t in TPCH.tables
        }
        lo = (
            int(spark.table(f"{CATALOG}.{DB}.lineitem").agg({"l_orderkey": "max"}).collect()[0][0])
            // 3
        )
        todo = query_texts(data, lo)
        if args.only:
            todo = [x for x in todo if x[0] in args.only]
        print(
            f"TPC-H sf={args.sf:g}, {args.commits} Flink commits per streamed table, "
            f"{args.reps} reps; Trino {TRINO_VERSION}, {DUCKDB[0]} + {DUCKDB_ICEBERG[1]}"
        )
        rows_out = [_one(spark, trino, duck, views, name, text, args) for name, text in todo]
        spark.stop()
    summary = _summary(rows_out)
    write_json(args.json, {"rows": rows_out, "summary": summary, "build": counts})
    return 0


# queries DuckDB gave no answer to in time, with the Flink-written tables they read
_DUCK_GAVE_UP: dict[str, set[str]] = {}


def _streamed(text: str) -> set[str]:
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(text, read="duckdb")
    return {t.name for t in tree.find_all(exp.Table)} & set(STREAMED)


def _one(spark: Any, trino: Any, duck: Path, views: dict, name: str, text: str, args: Any) -> dict:
    from mor import mor_sql

    q = dialects(text)
    peers = {
        "ours": lambda: mor_sql(q["ours"], catalog=CATALOG, spark=spark).collect(),
        "native": lambda: spark.sql(q["native"]).collect(),
        "plain": lambda: spark.sql(q["plain"]).collect(),
        "trino": lambda: trino.query(q["trino"]),
    }
    clear_caches()
    first: dict[str, float] = {}
    got: dict[str, Any] = {}
    for label, run in peers.items():
        t0 = time.perf_counter()
        got[label] = run()
        first[label] = time.perf_counter() - t0
    want = _bag(got["native"])
    for label in ("ours", "plain", "trino"):
        mine = _bag(got[label])
        if mine != want and not (label == "trino" and _close(got[label], got["native"])):
            raise SystemExit(
                f"RESULTS DIFFER for {name}: {label} against Iceberg's reader: only "
                f"{label}'s {list((mine - want).elements())[:3]}, only Iceberg's "
                f"{list((want - mine).elements())[:3]}"
            )
    times: dict[str, list[float]] = {k: [] for k in peers}
    for _ in range(args.warmup):
        for run in peers.values():
            run()
    for _ in range(args.reps):
        for label, run in peers.items():
            t0 = time.perf_counter()
            run()
            times[label].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    reads = _streamed(text)
    gave_up = [other for other, t in _DUCK_GAVE_UP.items() if t & reads]
    if gave_up:  # a query over the same Flink-written table would wait as long
        duck_out = {"error": f"not run: no answer to {gave_up[0]} in time"}
    else:
        duck_out = run_duckdb(duck, views, q["duckdb"], args.warmup, args.reps, args.duckdb_timeout)
        if "timeout" in duck_out:
            _DUCK_GAVE_UP[name] = reads
    if "times" in duck_out:
        if not _close(duck_out["rows"], got["native"]):
            duck_out = {"error": "rows differ from Iceberg's reader"}
        else:
            first["duckdb"] = duck_out["times"][0]
            med["duckdb"] = statistics.median(duck_out["times"][1:])
    row: dict[str, Any] = {
        "query": name,
        **{f"{k}_s": v for k, v in med.items()},
        **{f"first_{k}_s": v for k, v in first.items()},
    }
    for peer in ("native", "plain", "trino", "duckdb"):
        if peer in med:
            row[f"ours/{peer}"] = med["ours"] / med[peer]
            row[f"first ours/{peer}"] = first["ours"] / first[peer]
    if "duckdb" not in med:
        row["duckdb"] = duck_out.get("error") or f"no answer in {duck_out['timeout']:.0f}s"
    duck_text = (
        f"duckdb {med['duckdb']:6.2f}s" if "duckdb" in med else f"duckdb {row['duckdb'][:30]}"
    )
    print(
        f"{name:<15} ours {med['ours']:6.2f}s native {med['native']:6.2f}s trino "
        f"{med['trino']:6.2f}s {duck_text} plain {med['plain']:6.2f}s | ours/native "
        f"{row['ours/native']:5.2f} ours/trino {row['ours/trino']:5.2f} | first: ours/native "
        f"{row['first ours/native']:5.2f} ours/trino {row['first ours/trino']:5.2f}",
        flush=True,
    )
    return row


def _summary(rows: list[dict]) -> dict:
    def geo(key: str) -> tuple[float, int]:
        xs = [r[key] for r in rows if key in r]
        return (math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan"), len(xs))

    out = {}
    for peer in ("native", "trino", "duckdb", "plain"):
        for kind in ("", "first "):
            g, n = geo(f"{kind}ours/{peer}")
            out[f"{kind}ours/{peer}"] = {"geomean": g, "queries": n}
    print(
        "geometric means (queries with an answer): "
        + ", ".join(f"{k} {v['geomean']:.2f} ({v['queries']})" for k, v in out.items())
    )
    return out


if __name__ == "__main__":
    sys.exit(main())
