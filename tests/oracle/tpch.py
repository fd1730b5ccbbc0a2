"""TPC-H's 22 queries over Java-written merge-on-read tables: mor against Iceberg's own reader.

    python -m tests.oracle.tpch --sf 0.01     # the tiny run of make test (tests/test_oracle.py)
    python -m tests.oracle.tpch --sf 0.1      # a larger one (bench/README.md)

Data and the standard query text come from DuckDB's tpch extension (the packages
duckdb-extension-tpch and duckdb 1.5.5, which it pins, in an environment of their own under the
cache). Spark + Iceberg 1.10.2 writes each table in merge-on-read mode over several commits, then
DELETE and UPDATE write position delete files, RowDelta commits equality delete files
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
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.oracle.runtime import RuntimeUnavailable, iceberg_session  # noqa: E402

CACHE = ROOT / ".venv" / "mor-oracle"
DUCKDB = ("duckdb==1.5.5", "duckdb-extension-tpch==1.5.5")
TABLES = ("nation", "region", "part", "supplier", "partsupp", "customer", "orders", "lineitem")
PARTITIONS = {"lineitem": "l_returnflag", "orders": "o_orderstatus", "customer": "c_mktsegment"}

_GENERATE = """
import duckdb, glob, json, os, sys
import duckdb_extension_tpch as m
out, sf = sys.argv[1], float(sys.argv[2])
ext = glob.glob(os.path.join(os.path.dirname(m.__file__), "**", "tpch.duckdb_extension"),
                recursive=True)[0]
con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
con.load_extension(ext)
con.execute(f"CALL dbgen(sf={sf})")
for t in %r:
    con.execute(f"COPY {t} TO '{os.path.join(out, t)}.parquet' (FORMAT parquet)")
q = con.execute("SELECT query_nr, query FROM tpch_queries() ORDER BY query_nr").fetchall()
with open(os.path.join(out, "queries.json"), "w") as f:
    json.dump([[n, text] for n, text in q], f)
""" % (TABLES,)


def generate(cache: Path, sf: float) -> Path:
    """Parquet files of the 8 tables and the 22 queries (DuckDB's text), made once per scale."""
    out = cache / f"tpch-sf{sf:g}"
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
        tmp = cache / f"tpch-sf{sf:g}.{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        subprocess.run(
            [str(py), "-c", _GENERATE, str(tmp), str(sf)], check=True, capture_output=True
        )
    except subprocess.CalledProcessError as e:
        err = (e.stderr or b"").decode(errors="replace").strip().splitlines()
        raise RuntimeUnavailable(
            f"cannot generate TPC-H data with {' '.join(DUCKDB)}: {err[-1] if err else e}"
        ) from e
    tmp.rename(out)
    return out


class Builder:
    """Writes the TPC-H tables as merge-on-read Iceberg tables through the Java writer."""

    def __init__(self, spark: Any, data: Path) -> None:
        self.spark = spark
        self.data = data
        self.jvm = spark._jvm
        self.log: list[str] = []
        self.coverage: Counter = Counter()

    def sql(self, text: str) -> None:
        self.spark.sql(text)
        self.log.append(text)

    def table(self, name: str) -> Any:
        return self.jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, f"local.tpch.{name}"
        )

    def build(self) -> None:
        for t in TABLES:
            self.create(t)
        # position deletes: DELETE and UPDATE in merge-on-read mode
        self.sql("DELETE FROM local.tpch.lineitem WHERE l_orderkey % 53 = 1")
        self.sql("DELETE FROM local.tpch.partsupp WHERE ps_availqty < 300")
        self.sql(
            "UPDATE local.tpch.orders SET o_comment = concat(o_comment, '!') "
            "WHERE o_orderkey % 47 = 2"
        )
        self.sql("UPDATE local.tpch.customer SET c_acctbal = c_acctbal + 1 WHERE c_custkey % 9 = 4")
        # equality deletes, partition-scoped where the table is partitioned
        self.eq_delete("lineitem", ("l_orderkey", "l_linenumber"), "l_orderkey % 59 = 7", True)
        self.eq_delete("orders", ("o_orderkey",), "o_orderkey % 61 = 3", False)
        self.eq_delete("customer", ("c_custkey",), "c_custkey % 43 = 5", True)
        self.eq_delete("supplier", ("s_suppkey",), "s_suppkey % 17 = 2", False)
        self.eq_delete("part", ("p_partkey",), "p_partkey % 37 = 11", True)
        # some deleted rows come back: appended after their delete, so they are live
        src = self.spark.read.parquet(str(self.data / "lineitem.parquet"))
        back = src.where("l_orderkey % 59 = 7 AND l_linenumber = 1")
        back.writeTo("local.tpch.lineitem").append()
        self.log.append("-- appended again: lineitem rows with l_orderkey % 59 = 7, line 1")

    def create(self, t: str) -> None:
        src = self.spark.read.parquet(str(self.data / f"{t}.parquet"))
        key = src.columns[0]
        props = {
            "format-version": "2",
            "write.delete.mode": "merge-on-read",
            "write.update.mode": "merge-on-read",
            "write.merge.mode": "merge-on-read",
        }
        w = src.where(f"pmod({key}, 3) <> 0").writeTo(f"local.tpch.{t}").using("iceberg")
        for k, v in props.items():
            w = w.tableProperty(k, v)
        if t in PARTITIONS:
            from pyspark.sql import functions as F

            w = w.partitionedBy(F.col(PARTITIONS[t]))
        w.create()
        src.where(f"pmod({key}, 3) = 0").writeTo(f"local.tpch.{t}").append()
        self.log.append(
            f"-- {t}: two commits" + (f", by {PARTITIONS[t]}" if t in PARTITIONS else "")
        )

    def eq_delete(self, t: str, cols: tuple[str, ...], where: str, metrics: bool) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = self.table(t)
        schema = table.schema()
        ids = [schema.findField(c).fieldId() for c in cols]
        keys = self.spark.sql(f"SELECT {', '.join(cols)} FROM local.tpch.{t} WHERE {where}")
        rows = [tuple(r) for r in keys.collect()] + [tuple(None for _ in cols)]  # a NULL key
        types = pq.read_schema(self.data / f"{t}.parquet")
        fields = [
            pa.field(c, types.field(c).type, metadata={b"PARQUET:field_id": str(i).encode()})
            for c, i in zip(cols, ids)
        ]
        builder = self.jvm.org.apache.iceberg.FileMetadata
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
            arr = self.spark.sparkContext._gateway.new_array(self.jvm.int, len(ids))
            for i, v in enumerate(ids):
                arr[i] = v
            b = (
                builder.deleteFileBuilder(spec)
                .ofEqualityDeletes(arr)
                .withPath(path)
                .withFormat("parquet")
                .withFileSizeInBytes(Path(local).stat().st_size)
                .withRecordCount(len(rows))
            )
            if partition is not None:
                b = b.withPartition(partition)
            if metrics:
                iceberg = self.jvm.org.apache.iceberg
                b = b.withMetrics(
                    iceberg.parquet.ParquetUtil.fileMetrics(
                        table.io().newInputFile(path), iceberg.MetricsConfig.forTable(table)
                    )
                )
            delta = delta.addDeletes(b.build())
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


def queries(data: Path, warehouse: Path) -> list[tuple[int, str, str]]:
    """(number, SQL for Iceberg's reader, SQL for mor): DuckDB's text in Spark's dialect, each
    table named in the Hadoop catalog, or read with iceberg_scan('<table directory>')."""
    import sqlglot
    from sqlglot import exp

    out = []
    for n, text in json.loads((data / "queries.json").read_text()):
        tree = sqlglot.parse_one(text, read="duckdb")

        def swap(node: exp.Expression, mor: bool) -> exp.Expression:
            if isinstance(node, exp.Table) and node.name in TABLES and not node.args.get("db"):
                alias = node.alias or node.name
                if mor:
                    src: exp.Expression = exp.Anonymous(
                        this="iceberg_scan",
                        expressions=[exp.Literal.string(str(warehouse / "tpch" / node.name))],
                    )
                else:
                    src = exp.to_identifier(node.name)
                return exp.Table(
                    this=src,
                    db=None if mor else exp.to_identifier("tpch"),
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=0.01)
    ap.add_argument("--keep", help="keep the warehouse here")
    args = ap.parse_args(argv)
    CACHE.mkdir(parents=True, exist_ok=True)
    wh = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="mor-tpch-"))
    try:
        data = generate(CACHE, args.sf)
        spark = iceberg_session(wh, CACHE, small_data=args.sf < 0.1)
    except RuntimeUnavailable as e:
        print(f"TPC-H oracle unavailable: {e}")
        return 2
    from mor import mor_sql

    started = time.time()
    builder = Builder(spark, data)
    builder.build()
    print(
        f"TPC-H sf={args.sf:g}: tables written in {time.time() - started:.0f}s; "
        f"{dict(builder.coverage)}"
    )
    failures = []
    rows = 0
    for n, theirs, ours in queries(data, wh):
        try:
            a = _bag(mor_sql(ours, spark=spark).collect())
        except Exception as e:  # noqa: BLE001 - reported as a failure with its text
            failures.append(f"Q{n}: mor failed: {str(e).splitlines()[0][:300]}\n{ours}")
            continue
        b = _bag(spark.sql(theirs).collect())
        rows += sum(b.values())
        if a != b:
            missing = list((b - a).elements())[:3]
            extra = list((a - b).elements())[:3]
            failures.append(
                f"Q{n}: {sum(a.values())} rows vs Iceberg's {sum(b.values())}; "
                f"missing {missing}; extra {extra}\n{ours}"
            )
    for f in failures:
        print("DIFFERENCE " + f)
    print(
        f"TPC-H sf={args.sf:g}: 22 queries, {rows} result rows, {len(failures)} differences "
        f"({time.time() - started:.0f}s)"
    )
    spark.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
