"""TPC-H over tables a streaming writer makes: many small commits, each with data, position
deletes and equality deletes. mor vs Iceberg's own Spark reader vs plain Parquet of the live rows.

    .venv/bin/python bench/streaming.py                       # TPC-H sf 0.1, 80 commits per table
    .venv/bin/python bench/streaming.py --sf 1 --reps 3       # the scale-factor-1 run
    .venv/bin/python bench/streaming.py --convert             # convert-equality-deletes on them

The tables are written by Iceberg 1.10.2's Java writer through Spark (the runtime that
`make test` installs). The fact tables (lineitem, orders, partsupp, customer) are streamed:
each of `--commits` commits appends one key range of rows (one data file per partition),
then a merge-on-read DELETE removes some rows of that same range (position delete files
next to the new data files, as a streaming writer deletes rows it wrote in the same
checkpoint), then a RowDelta adds an equality delete file of keys written by an earlier
commit (as an upsert or a CDC delete does). lineitem and orders are partitioned (identity on
l_returnflag / o_orderstatus, the delete files partition-scoped), the others not (global
equality deletes). The small tables are written in one commit. Tables are cached in
`--warehouse` by scale factor and commit count.

Queries: TPC-H's 22 (DuckDB's text, in Spark's dialect) and four scans of lineitem (count,
grouped aggregate, a key range, SELECT * to Spark's noop sink). Each runs through `mor_sql`
("ours"), Iceberg's reader ("native") and over Parquet copies of the live rows ("plain"): a
first call of each (mor with its caches cleared, as in a new process), then alternating, after
an untimed warm-up of each (repeated queries); ours and native must give equal results before
any time is printed. Before the first calls, each reader runs one untimed grouped aggregate of
lineitem (the JVM warm for both). Prints first calls (`--first-reps N`: the median of N, in
turns) and medians of the repeats, ratios and their geometric means; `--json` saves them.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository

from bench.harness import action, clear_caches, fingerprint, write_json  # noqa: E402
from tests.oracle.histories import eq_delete_file  # noqa: E402
from tests.oracle.runtime import iceberg_session  # noqa: E402
from tests.oracle.tpc import CACHE, TPCH, _bag, generate, queries  # noqa: E402

# table -> (range column, equality key columns, identity partition column or None)
STREAMED = {
    "lineitem": ("l_orderkey", ("l_orderkey", "l_linenumber"), "l_returnflag"),
    "orders": ("o_orderkey", ("o_orderkey",), "o_orderstatus"),
    "partsupp": ("ps_partkey", ("ps_partkey", "ps_suppkey"), None),
    "customer": ("c_custkey", ("c_custkey",), None),
}
PROPS = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.distribution-mode": "none",
}
SCANS = {
    "scan_count": "SELECT count(*) FROM {t}",
    "scan_group_agg": "SELECT l_returnflag, l_linestatus, count(*) AS n, sum(l_quantity) AS q "
    "FROM {t} GROUP BY l_returnflag, l_linestatus",
    "scan_range": "SELECT l_orderkey, l_extendedprice FROM {t} "
    "WHERE l_orderkey BETWEEN {lo} AND {hi}",
    "scan_select_star": "SELECT * FROM {t}",
}


class StreamBuilder:
    def __init__(self, spark: Any, data: Path, commits: int) -> None:
        self.spark = spark
        self.data = data
        self.commits = commits
        self.counts = {"snapshots": 0, "position deletes": 0, "equality deletes": 0}

    def name(self, t: str) -> str:
        return f"local.tpch.{t}"

    def jtable(self, t: str) -> Any:
        return self.spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, self.name(t)
        )

    def build(self) -> None:
        for t in TPCH.tables:
            src = self.spark.read.parquet(str(self.data / f"{t}.parquet"))
            if t not in STREAMED:
                w = src.coalesce(1).writeTo(self.name(t)).using("iceberg")
                for k, v in PROPS.items():
                    w = w.tableProperty(k, v)
                w.create()
                continue
            self.stream(t, src)

    def stream(self, t: str, src: Any) -> None:
        from pyspark.sql import functions as F

        col, keys, part = STREAMED[t]
        w = src.limit(0).writeTo(self.name(t)).using("iceberg")
        for k, v in PROPS.items():
            w = w.tableProperty(k, v)
        if part is not None:
            w = w.partitionedBy(F.col(part))
        w.create()
        lo, hi = src.agg(F.min(col), F.max(col)).collect()[0]
        width = (hi - lo) // self.commits + 1
        started = time.time()
        for i in range(self.commits):
            a, b = lo + i * width, lo + (i + 1) * width
            batch = f"{col} >= {a} AND {col} < {b}"
            src.where(batch).coalesce(1).writeTo(self.name(t)).append()
            # rows of this commit's own data files deleted by position
            self.spark.sql(f"DELETE FROM {self.name(t)} WHERE {batch} AND pmod({col}, 23) = 5")
            self.counts["position deletes"] += 1
            if i:  # keys of an earlier commit deleted by equality
                j = i // 2
                older = f"{col} >= {lo + j * width} AND {col} < {lo + (j + 1) * width}"
                self.eq_delete(t, keys, f"{older} AND pmod({col}, 29) = {i % 29}")
            self.counts["snapshots"] += 3 if i else 2
        print(f"  {t}: {self.commits} commits in {time.time() - started:.0f}s", flush=True)

    def eq_delete(self, t: str, cols: tuple[str, ...], where: str) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = self.jtable(t)
        schema = table.schema()
        ids = [schema.findField(c).fieldId() for c in cols]
        rows = [
            tuple(r)
            for r in self.spark.sql(
                f"SELECT {', '.join(cols)} FROM {self.name(t)} WHERE {where}"
            ).collect()
        ]
        types = pq.read_schema(self.data / f"{t}.parquet")
        fields = [
            pa.field(c, types.field(c).type, metadata={b"PARQUET:field_id": str(i).encode()})
            for c, i in zip(cols, ids)
        ]
        arrow = pa.table(
            {f.name: pa.array([r[i] for r in rows], f.type) for i, f in enumerate(fields)},
            schema=pa.schema(fields),
        )
        delta = table.newRowDelta()
        for spec, partition in self._scopes(table):
            path = f"{table.location()}/data/eqdel-{uuid.uuid4()}.parquet"
            local = path[len("file:") :] if path.startswith("file:") else path
            pq.write_table(arrow, local)  # every key in each partition's file: keys are unique
            delta = delta.addDeletes(
                eq_delete_file(self.spark, table, spec, partition, path, ids, len(rows), True)
            )
            self.counts["equality deletes"] += 1
        delta.commit()

    @staticmethod
    def _scopes(table: Any) -> list[tuple[Any, Any]]:
        if table.spec().isUnpartitioned():
            return [(table.spec(), None)]
        seen: dict[str, tuple[Any, Any]] = {}
        it = table.newScan().planFiles().iterator()
        while it.hasNext():
            f = it.next().file()
            seen.setdefault(str(f.partition()), (table.spec(), f.partition()))
        it.close()
        return list(seen.values())


def plain_copies(spark: Any, warehouse: Path) -> None:
    """Parquet files of each table's live rows (read by Iceberg's reader), as temp views."""
    for t in TPCH.tables:
        out = warehouse / "plain" / t
        if not (out / "_SUCCESS").exists():
            spark.table(f"local.tpch.{t}").write.mode("overwrite").parquet(str(out))
        spark.read.parquet(str(out)).createOrReplaceTempView(f"plain_{t}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--commits", type=int, default=80)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument(
        "--first-reps", type=int, default=1, help="first calls per query (their median)"
    )
    ap.add_argument("--only", nargs="*", help="query names to run (q1 ... q22, scan_*)")
    ap.add_argument("--warehouse", default=str(Path(tempfile.gettempdir()) / "mor-streaming"))
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument(
        "--convert",
        action="store_true",
        help="time mor convert-equality-deletes on each streamed table instead of the queries",
    )
    args = ap.parse_args(argv)
    wh = Path(args.warehouse) / f"sf{args.sf:g}-c{args.commits}"
    CACHE.mkdir(parents=True, exist_ok=True)
    data = generate(TPCH, CACHE, args.sf)
    spark = iceberg_session(wh)
    from mor import mor_sql

    if not (wh / "BUILT").exists():
        started = time.time()
        b = StreamBuilder(spark, data, args.commits)
        b.build()
        (wh / "BUILT").write_text(json.dumps(b.counts))
        print(f"tables written in {time.time() - started:.0f}s: {b.counts}", flush=True)
    if args.convert:
        convert(spark, wh, args.reps)
        spark.stop()
        return 0
    plain_copies(spark, wh)
    todo: list[tuple[str, str, str, str]] = []  # name, ours, native, plain
    for n, theirs, ours in queries(TPCH, data, wh):
        plain = theirs.replace("local.tpch.", "plain_")
        todo.append((f"q{n}", ours, theirs, plain))
    lineitem = f"iceberg_scan('{wh / 'tpch' / 'lineitem'}')"
    lo = int(spark.table("local.tpch.lineitem").agg({"l_orderkey": "max"}).collect()[0][0]) // 3
    for name, text in SCANS.items():
        q = text.replace("{lo}", str(lo)).replace("{hi}", str(lo + 5000))
        todo.append(
            (
                name,
                q.format(t=lineitem),
                q.format(t="local.tpch.lineitem"),
                q.format(t="plain_lineitem"),
            )
        )
    if args.only:
        todo = [x for x in todo if x[0] in args.only]
    # Both readers run once, untimed, before any first call: the JVM's classes loaded and code
    # compiled for each (the build and the plain copies, when this process made them, ran
    # Iceberg's reader over every table), so that a "first" call compares what each keeps
    # across queries, not which reader the JVM met first. A new process's first call, JVM and
    # all, is bench/process.py's.
    warm = SCANS["scan_group_agg"]
    action(mor_sql(warm.format(t=lineitem), spark=spark), "warm-up")
    action(spark.sql(warm.format(t="local.tpch.lineitem")), "warm-up")
    print(f"TPC-H sf={args.sf:g}, {args.commits} commits per streamed table, {args.reps} reps")
    out = []
    for name, ours_sql, native_sql, plain_sql in todo:
        peers = {
            "ours": lambda s=ours_sql: mor_sql(s, spark=spark),
            "native": lambda s=native_sql: spark.sql(s),
            "plain": lambda s=plain_sql: spark.sql(s),
        }
        # first call: mor with nothing kept from earlier queries (bench/run.py clear_caches);
        # the others on their first run of this query. With --first-reps N, the median of N
        # such calls in turns (Iceberg's reader keeps its executors' delete caches between
        # them, so its later "first" calls are if anything cheaper than a new process's)
        firsts: dict[str, list[float]] = {k: [] for k in peers}
        for _ in range(args.first_reps):
            clear_caches()
            for label, make in peers.items():
                t0 = time.perf_counter()
                action(make(), name)
                firsts[label].append(time.perf_counter() - t0)
        first = {k: statistics.median(v) for k, v in firsts.items()}
        if name == "scan_select_star":
            same = fingerprint(peers["ours"]()) == fingerprint(peers["native"]())
        else:
            same = _bag(peers["ours"]().collect()) == _bag(peers["native"]().collect())
        if not same:
            raise SystemExit(f"RESULTS DIFFER for {name}: no time reported")
        times: dict[str, list[float]] = {k: [] for k in peers}
        for _ in range(args.warmup):
            for make in peers.values():
                action(make(), name)
        for _ in range(args.reps):
            for label, make in peers.items():
                t0 = time.perf_counter()
                action(make(), name)
                times[label].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        row = {
            "query": name,
            **{f"{k}_s": v for k, v in med.items()},
            "ours/native": med["ours"] / med["native"],
            "ours/plain": med["ours"] / med["plain"],
            **{f"first_{k}_s": v for k, v in first.items()},
            "first ours/native": first["ours"] / first["native"],
            "first ours/plain": first["ours"] / first["plain"],
        }
        out.append(row)
        print(
            f"{name:<17} ours {med['ours']:6.2f}s  native {med['native']:6.2f}s  "
            f"plain {med['plain']:6.2f}s  ours/native {row['ours/native']:5.2f}  "
            f"ours/plain {row['ours/plain']:5.2f}  | first: ours {first['ours']:6.2f}s  "
            f"native {first['native']:6.2f}s  ours/native {row['first ours/native']:5.2f}",
            flush=True,
        )

    def geo(key: str, rows: list[dict[str, Any]]) -> float:
        return math.exp(sum(math.log(r[key]) for r in rows) / len(rows))

    tpch = [r for r in out if r["query"].startswith("q")]
    summary = {}
    for label, rows in (("TPC-H", tpch), ("all", out)):
        if rows:
            summary[label] = {
                "queries": len(rows),
                "geomean ours/native": geo("ours/native", rows),
                "geomean ours/plain": geo("ours/plain", rows),
                "max ours/native": max(r["ours/native"] for r in rows),
                "first: geomean ours/native": geo("first ours/native", rows),
                "first: geomean ours/plain": geo("first ours/plain", rows),
                "first: max ours/native": max(r["first ours/native"] for r in rows),
            }
            s = summary[label]
            print(
                f"{label}: {s['queries']} queries, repeated: geometric mean ours/native "
                f"{s['geomean ours/native']:.2f}, ours/plain {s['geomean ours/plain']:.2f}, "
                f"max ours/native {s['max ours/native']:.2f}; first calls: geometric mean "
                f"ours/native {s['first: geomean ours/native']:.2f}, ours/plain "
                f"{s['first: geomean ours/plain']:.2f}, max {s['first: max ours/native']:.2f}"
            )
    write_json(args.json, {"rows": out, "summary": summary})
    spark.stop()
    return 0


def convert(spark: Any, wh: Path, reps: int) -> None:
    """`mor convert-equality-deletes` of each streamed table against one resolving read: the
    table's current metadata registered in a SQLite catalog of its own (pyiceberg's), then, per
    round (medians of `reps`), in a process state as a new `mor` process has it: a `count(*)`
    by mor (its first: the equality deletes resolved against the key columns), the
    conversion, and the reads after by mor and by Iceberg's reader (the new metadata file by
    path), rows checked equal to those before. Between rounds the catalog is pointed back at
    the registered metadata and every file the round wrote under the table is deleted, so
    the cached warehouse stays as the builder wrote it."""
    import os

    from pyiceberg.catalog.sql import SqlCatalog

    from mor import mor_sql
    from mor.maintenance import convert_equality_deletes

    work = Path(tempfile.mkdtemp(prefix="mor-convert-"))
    cat = SqlCatalog("conv", uri=f"sqlite:///{work}/catalog.db", warehouse=f"file://{work}")
    cat.create_namespace("s")
    fp = "SELECT count(*), sum(xxhash64(*)) FROM {t}"
    print(f"convert-equality-deletes on the streamed tables ({wh.name}), medians of {reps}")
    for t in STREAMED:
        meta = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            spark._jsparkSession, f"local.tpch.{t}"
        )
        registered = meta.operations().current().metadataFileLocation()
        root = Path(meta.location().removeprefix("file:"))
        files = {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}
        want = tuple(spark.sql(fp.format(t=f"local.tpch.{t}")).first())
        times: dict[str, list[float]] = {"read": [], "convert": [], "mor after": [], "ice": []}
        ice_before = []
        for _ in range(reps):
            cat.register_table(f"s.{t}", registered)
            clear_caches()
            t0 = time.perf_counter()
            mor_sql(f"SELECT count(*) FROM s.{t}", catalog=cat, spark=spark).collect()
            times["read"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            spark.sql(f"SELECT count(*) FROM local.tpch.{t}").collect()
            ice_before.append(time.perf_counter() - t0)
            clear_caches()
            t0 = time.perf_counter()
            report = convert_equality_deletes(f"s.{t}", catalog=cat, spark=spark)
            times["convert"].append(time.perf_counter() - t0)
            clear_caches()
            t0 = time.perf_counter()
            mor_sql(f"SELECT count(*) FROM s.{t}", catalog=cat, spark=spark).collect()
            times["mor after"].append(time.perf_counter() - t0)
            new = cat.load_table(f"s.{t}").metadata_location
            t0 = time.perf_counter()
            spark.read.format("iceberg").load(new).selectExpr("count(*)").collect()
            times["ice"].append(time.perf_counter() - t0)
            got = tuple(mor_sql(fp.format(t=f"s.{t}"), catalog=cat, spark=spark).first())
            spark.read.format("iceberg").load(new).createOrReplaceTempView("converted")
            theirs = tuple(spark.sql(fp.format(t="converted")).first())
            if got != want or theirs != want:
                raise SystemExit(f"{t}: rows after conversion differ: {got} {theirs} {want}")
            cat.drop_table(f"s.{t}")
            for path in {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs} - files:
                os.remove(path)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"  {t}: {report.data_files} data files, {len(report.removed)} equality delete "
            f"files removed, {report.positions:,} positions in {len(report.written)} files; "
            f"conversion {med['convert']:.2f} s = {med['convert'] / med['read']:.2f} first "
            f"reads by mor ({med['read']:.2f} s); count(*) first call by mor "
            f"{med['read']:.2f} -> {med['mor after']:.2f} s, by Iceberg's reader "
            f"{statistics.median(ice_before):.2f} -> {med['ice']:.2f} s",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
