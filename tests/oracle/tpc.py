"""TPC-H's 22 and TPC-DS's 99 queries over Java-written merge-on-read tables: mor against
Iceberg's own reader.

    python -m tests.oracle.tpc tpch --sf 0.01    # the tiny runs of make test (test_oracle.py)
    python -m tests.oracle.tpc tpcds --sf 0.01
    python -m tests.oracle.tpc tpch --sf 1       # a larger one (bench/README.md)

Data and the standard query text come from DuckDB's tpch and tpcds extensions (the packages
duckdb-extension-tpch/-tpcds and duckdb 1.5.5, which they pin, in an environment of their own
under the cache); sqlglot turns the text into Spark SQL. Spark + Iceberg 1.10.2 writes each
table in merge-on-read mode over two commits, then DELETE and UPDATE write position delete
files, RowDelta commits equality delete files
(partition-scoped on partitioned tables, global on the others, some with NULL-count metrics), and
a few deleted rows are appended again (live: newer than their delete). Every query runs through
`mor_sql` and through Iceberg's reader in one session; results must be equal as multisets.

Exit code 0: no differences; 1: differences or a query only one reader answers; 2: the runtime
or the generator cannot be set up here (the reason is printed).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.oracle.histories import eq_delete_file  # noqa: E402
from tests.oracle.runtime import RuntimeUnavailable, iceberg_session  # noqa: E402

CACHE = ROOT / ".venv" / "mor-oracle"
DUCKDB = ("duckdb==1.5.5", "duckdb-extension-tpch==1.5.5", "duckdb-extension-tpcds==1.5.5")


@dataclass(frozen=True)
class Suite:
    name: str
    tables: tuple[str, ...]
    generate: str  # DuckDB's call that makes the data
    queries: str  # DuckDB's table function of the query text
    partitions: dict[str, str]  # table -> identity partition column
    position_deletes: tuple[str, ...]  # DELETE / UPDATE statements over local.<name>.<table>
    eq_deletes: tuple[tuple[str, tuple[str, ...], str, bool], ...]  # table, keys, where, metrics
    reinsert: tuple[str, str]  # table, rows (of the source) appended again after their delete


TPCH = Suite(
    name="tpch",
    tables=("nation", "region", "part", "supplier", "partsupp", "customer", "orders", "lineitem"),
    generate="CALL dbgen(sf={sf})",
    queries="tpch_queries()",
    partitions={"lineitem": "l_returnflag", "orders": "o_orderstatus", "customer": "c_mktsegment"},
    position_deletes=(
        "DELETE FROM local.tpch.lineitem WHERE l_orderkey % 53 = 1",
        "DELETE FROM local.tpch.partsupp WHERE ps_availqty < 300",
        "UPDATE local.tpch.orders SET o_comment = concat(o_comment, '!') WHERE o_orderkey % 47 = 2",
        "UPDATE local.tpch.customer SET c_acctbal = c_acctbal + 1 WHERE c_custkey % 9 = 4",
    ),
    eq_deletes=(
        ("lineitem", ("l_orderkey", "l_linenumber"), "l_orderkey % 59 = 7", True),
        ("orders", ("o_orderkey",), "o_orderkey % 61 = 3", False),
        ("customer", ("c_custkey",), "c_custkey % 43 = 5", True),
        ("supplier", ("s_suppkey",), "s_suppkey % 17 = 2", False),
        ("part", ("p_partkey",), "p_partkey % 37 = 11", True),
    ),
    reinsert=("lineitem", "l_orderkey % 59 = 7 AND l_linenumber = 1"),
)

TPCDS = Suite(
    name="tpcds",
    tables=(
        "call_center",
        "catalog_page",
        "catalog_returns",
        "catalog_sales",
        "customer",
        "customer_address",
        "customer_demographics",
        "date_dim",
        "household_demographics",
        "income_band",
        "inventory",
        "item",
        "promotion",
        "reason",
        "ship_mode",
        "store",
        "store_returns",
        "store_sales",
        "time_dim",
        "warehouse",
        "web_page",
        "web_returns",
        "web_sales",
        "web_site",
    ),
    generate="CALL dsdgen(sf={sf})",
    queries="tpcds_queries()",
    partitions={"item": "i_category", "store_sales": "ss_store_sk", "web_sales": "ws_web_site_sk"},
    position_deletes=(
        "DELETE FROM local.tpcds.store_sales WHERE ss_ticket_number % 41 = 3",
        "DELETE FROM local.tpcds.catalog_sales WHERE cs_order_number % 37 = 5",
        "DELETE FROM local.tpcds.inventory WHERE inv_quantity_on_hand < 20",
        "UPDATE local.tpcds.customer SET c_last_name = concat(c_last_name, 'x') "
        "WHERE c_customer_sk % 11 = 2",
    ),
    eq_deletes=(
        ("store_sales", ("ss_item_sk", "ss_ticket_number"), "ss_ticket_number % 43 = 8", True),
        ("web_sales", ("ws_order_number",), "ws_order_number % 29 = 4", False),
        ("item", ("i_item_sk",), "i_item_sk % 31 = 6", True),
        ("customer", ("c_customer_sk",), "c_customer_sk % 47 = 9", False),
        ("store_returns", ("sr_ticket_number",), "sr_ticket_number % 23 = 1", True),
    ),
    reinsert=("store_sales", "ss_ticket_number % 43 = 8 AND ss_quantity > 50"),
)
SUITES = {s.name: s for s in (TPCH, TPCDS)}

_GENERATE = """
import duckdb, glob, json, os, sys
import duckdb_extension_tpch, duckdb_extension_tpcds
out, sf, call, queries = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
for m in (duckdb_extension_tpch, duckdb_extension_tpcds):
    for ext in glob.glob(os.path.join(os.path.dirname(m.__file__), "**", "*.duckdb_extension"),
                         recursive=True):
        con.load_extension(ext)
con.execute(call.format(sf=sf))
for (t,) in con.execute("SHOW TABLES").fetchall():
    con.execute(f"COPY {t} TO '{os.path.join(out, t)}.parquet' (FORMAT parquet)")
q = con.execute(f"SELECT query_nr, query FROM {queries} ORDER BY query_nr").fetchall()
with open(os.path.join(out, "queries.json"), "w") as f:
    json.dump([[n, text] for n, text in q], f)
"""


def generate(suite: Suite, cache: Path, sf: float) -> Path:
    """Parquet files of the suite's tables and its queries (DuckDB's text), made once."""
    out = cache / f"{suite.name}-sf{sf:g}"
    if (out / "queries.json").exists():
        return out
    venv = cache / "duckdb-venv"
    py = venv / "bin" / "python"
    try:
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(py), "-m", "pip", "install", "-q", *DUCKDB], check=True, capture_output=True
        )
        tmp = cache / f"{suite.name}-sf{sf:g}.{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        subprocess.run(
            [str(py), "-c", _GENERATE, str(tmp), str(sf), suite.generate, suite.queries],
            check=True,
            capture_output=True,
        )
    except subprocess.CalledProcessError as e:
        err = (e.stderr or b"").decode(errors="replace").strip().splitlines()
        raise RuntimeUnavailable(
            f"cannot generate {suite.name} data with {' '.join(DUCKDB)}: {err[-1] if err else e}"
        ) from e
    tmp.rename(out)
    return out


class Builder:
    """Writes a suite's tables as merge-on-read Iceberg tables through the Java writer."""

    def __init__(self, spark: Any, suite: Suite, data: Path) -> None:
        self.spark = spark
        self.suite = suite
        self.data = data
        self.jvm = spark._jvm
        self.log: list[str] = []
        self.coverage: Counter = Counter()

    def sql(self, text: str) -> None:
        self.spark.sql(text)
        self.log.append(text)

    def name(self, t: str) -> str:
        return f"local.{self.suite.name}.{t}"

    def table(self, t: str) -> Any:
        return self.jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, self.name(t)
        )

    def build(self) -> None:
        for t in self.suite.tables:
            self.create(t)
        for stmt in self.suite.position_deletes:  # DELETE and UPDATE in merge-on-read mode
            self.sql(stmt)
            self.coverage["position deletes (" + stmt.split()[0] + ")"] += 1
        for t, cols, where, metrics in self.suite.eq_deletes:
            self.eq_delete(t, cols, where, metrics)
        # some deleted rows come back: appended after their delete, so they are live
        t, where = self.suite.reinsert
        src = self.spark.read.parquet(str(self.data / f"{t}.parquet"))
        src.where(where).writeTo(self.name(t)).append()
        self.log.append(f"-- appended again: {t} rows with {where}")

    def create(self, t: str) -> None:
        src = self.spark.read.parquet(str(self.data / f"{t}.parquet"))
        key = src.columns[0]
        props = {
            "format-version": "2",
            "write.delete.mode": "merge-on-read",
            "write.update.mode": "merge-on-read",
            "write.merge.mode": "merge-on-read",
        }
        first = src.where(f"pmod({key}, 3) <> 0 OR {key} IS NULL")
        w = first.writeTo(self.name(t)).using("iceberg")
        for k, v in props.items():
            w = w.tableProperty(k, v)
        part = self.suite.partitions.get(t)
        if part is not None:
            from pyspark.sql import functions as F

            w = w.partitionedBy(F.col(part))
        w.create()
        src.where(f"pmod({key}, 3) = 0").writeTo(self.name(t)).append()
        self.log.append(f"-- {t}: two commits" + (f", by {part}" if part else ""))

    def eq_delete(self, t: str, cols: tuple[str, ...], where: str, metrics: bool) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = self.table(t)
        schema = table.schema()
        ids = [schema.findField(c).fieldId() for c in cols]
        keys = self.spark.sql(f"SELECT {', '.join(cols)} FROM {self.name(t)} WHERE {where}")
        rows = [tuple(r) for r in keys.collect()] + [tuple(None for _ in cols)]  # a NULL key
        types = pq.read_schema(self.data / f"{t}.parquet")
        fields = [
            pa.field(c, types.field(c).type, metadata={b"PARQUET:field_id": str(i).encode()})
            for c, i in zip(cols, ids)
        ]
        delta = table.newRowDelta()
        for spec, partition in self._scopes(table):
            path = f"{table.location()}/data/eqdel-{uuid.uuid4()}.parquet"
            local = path[len("file:") :] if path.startswith("file:") else path
            pq.write_table(
                pa.table(
                    {f.name: pa.array([r[i] for r in rows], f.type) for i, f in enumerate(fields)},
                    schema=pa.schema(fields),
                ),
                local,
            )
            delta = delta.addDeletes(
                eq_delete_file(self.spark, table, spec, partition, path, ids, len(rows), metrics)
            )
            self.coverage[
                "partition eq delete" if partition is not None else "global eq delete"
            ] += 1
        delta.commit()
        self.log.append(f"-- RowDelta on {t} {cols} ({len(rows)} keys): {where}")

    def _scopes(self, table: Any) -> list[tuple[Any, Any]]:
        if table.spec().isUnpartitioned():
            return [(table.spec(), None)]
        seen: dict[str, tuple[Any, Any]] = {}
        it = table.newScan().planFiles().iterator()
        while it.hasNext():
            f = it.next().file()
            seen.setdefault(str(f.partition()), (table.spec(), f.partition()))
        it.close()
        return list(seen.values())


def queries(suite: Suite, data: Path, warehouse: Path) -> list[tuple[int, str, str]]:
    """(number, SQL for Iceberg's reader, SQL for mor): DuckDB's text in Spark's dialect, each
    table named in the Hadoop catalog, or read with iceberg_scan('<table directory>')."""
    import sqlglot
    from sqlglot import exp

    out = []
    for n, text in json.loads((data / "queries.json").read_text()):
        tree = sqlglot.parse_one(text, read="duckdb")

        def swap(node: exp.Expression, mor: bool) -> exp.Expression:
            if (
                isinstance(node, exp.Table)
                and node.name in suite.tables
                and not node.args.get("db")
            ):
                alias = node.alias or node.name
                if mor:
                    src: exp.Expression = exp.Anonymous(
                        this="iceberg_scan",
                        expressions=[exp.Literal.string(str(warehouse / suite.name / node.name))],
                    )
                else:
                    src = exp.to_identifier(node.name)
                return exp.Table(
                    this=src,
                    db=None if mor else exp.to_identifier(suite.name),
                    catalog=None if mor else exp.to_identifier("local"),
                    alias=exp.TableAlias(this=exp.to_identifier(alias)),
                )
            return node

        theirs = tree.copy().transform(lambda x: swap(x, False)).sql("spark")
        ours = tree.copy().transform(lambda x: swap(x, True)).sql("spark")
        out.append((int(n), theirs, ours))
    return out


def _norm(v: Any) -> Any:
    if isinstance(v, float):
        return None if math.isnan(v) else float(f"{v:.9g}")
    if isinstance(v, Decimal):
        return v.normalize()
    return v


def _bag(rows: list[Any]) -> Counter:
    return Counter(tuple(_norm(v) for v in r) for r in rows)


def bag_difference(n: int, got: Counter, expected: Counter, whose: str) -> str | None:
    """One line on how query n's rows differ from `whose` (None when they are equal)."""
    if got == expected:
        return None
    missing = list((expected - got).elements())[:3]
    extra = list((got - expected).elements())[:3]
    return (
        f"Q{n}: {sum(got.values())} rows vs {whose}{sum(expected.values())}; "
        f"missing {missing}; extra {extra}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite", choices=sorted(SUITES))
    ap.add_argument("--sf", type=float, default=0.01)
    ap.add_argument("--keep", help="keep the warehouse here")
    ap.add_argument(
        "--export",
        help="keep the warehouse in DIR/warehouse and write each query with Iceberg's result to "
        "DIR/results.pickle, for the test matrix's other Spark versions (tests/test_matrix.py)",
    )
    args = ap.parse_args(argv)
    suite = SUITES[args.suite]
    CACHE.mkdir(parents=True, exist_ok=True)
    export = Path(args.export) if args.export else None
    if export is not None:
        import shutil

        shutil.rmtree(export, ignore_errors=True)
        export.mkdir(parents=True)
        args.keep = str(export / "warehouse")
    wh = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix=f"mor-{suite.name}-"))
    try:
        data = generate(suite, CACHE, args.sf)
        spark = iceberg_session(wh, small_data=args.sf < 0.1)
    except RuntimeUnavailable as e:
        print(f"{suite.name} oracle unavailable: {e}")
        return 2
    from mor import mor_sql

    started = time.time()
    builder = Builder(spark, suite, data)
    builder.build()
    title = f"{suite.name.upper()} sf={args.sf:g}"
    print(f"{title}: tables written in {time.time() - started:.0f}s; {dict(builder.coverage)}")
    failures = []
    rows = 0
    ratios = []
    exported: list[tuple[int, str, Counter]] = []
    todo = queries(suite, data, wh)
    times: list[str] = []

    def iceberg(text: str) -> tuple[Counter, float]:
        t0 = time.perf_counter()
        bag = _bag(spark.sql(text).collect())
        return bag, time.perf_counter() - t0

    for i, (n, theirs, ours) in enumerate(todo):
        # each reader goes first on every other query: the first to run a query also pays
        # the first read of its files and Spark's first run of its operators
        iceberg_first = i % 2 == 1
        if iceberg_first:
            b, theirs_s = iceberg(theirs)
        t0 = time.perf_counter()
        try:
            a = _bag(mor_sql(ours, spark=spark).collect())
        except Exception as e:  # noqa: BLE001 - reported as a failure with its text
            failures.append(f"Q{n}: mor failed: {str(e).splitlines()[0][:300]}\n{ours}")
            continue
        ours_s = time.perf_counter() - t0
        if not iceberg_first:
            b, theirs_s = iceberg(theirs)
        ratios.append(ours_s / max(theirs_s, 1e-6))
        times.append(f"Q{n} {ours_s:.2f}/{theirs_s:.2f}{'*' if iceberg_first else ''}")
        rows += sum(b.values())
        exported.append((n, ours, b))
        diff = bag_difference(n, a, b, "Iceberg's ")
        if diff is not None:
            failures.append(f"{diff}\n{ours}")
    for f in failures:
        print("DIFFERENCE " + f)
    print(
        f"{title}: {len(todo)} queries, {rows} result rows, {len(failures)} differences "
        f"({time.time() - started:.0f}s)"
    )
    if ratios:  # one cold run each: a correctness run, not a benchmark
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"{title}: mor / Iceberg reader time per query, geometric mean {geo:.2f}")
        print(f"{title}: seconds mor/Iceberg (* Iceberg's reader ran first): {', '.join(times)}")
    spark.stop()
    if export is not None and not failures:
        import pickle

        with open(export / "results.pickle", "wb") as f:
            pickle.dump({"suite": suite.name, "sf": args.sf, "queries": exported}, f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
