"""CREATE TABLE, INSERT, INSERT OVERWRITE, CTAS, REPLACE TABLE and ALTER TABLE by mor against the
same statements by Iceberg's own Spark catalog and writer, on twin tables.

    .venv/bin/python -m tests.oracle.writes --versions 2,3 --rows 3000

One JDBC catalog on PostgreSQL (tests/pgcatalog.py) is shared by Iceberg's Spark catalog `lake`
and pyiceberg's SqlCatalog: every statement runs twice in one Spark session, through Iceberg's
Spark SQL (its runtime jar, its SQL extensions) on `lake.wr.<case>_ice`, and through mor
(`mor_sql`, pyiceberg's catalog, no Iceberg class involved) on `wr.<case>_mor`. The rows come
from a temporary view `src` of the session (mor resolves it as Spark does): ids, strings with
NULLs, decimals, timestamps, dates, doubles, booleans, lists, structs and maps.

Cases: v2 and v3; unpartitioned, identity, bucket, days, truncate and two fields; with a sort
order (`WRITE ORDERED BY`, range distribution) or none. After each statement:

- metadata: the schema (field ids, names, types, required, docs), the partition specs (spec
  ids, field ids, names, transforms), the sort orders, the format version;
- rows: each table read by Iceberg's reader and by mor, the two the same (mor reads what
  Iceberg wrote, Iceberg what mor wrote);
- files: per partition, the data files' record counts (range distribution: the partition's
  total: Spark's range partitioner samples each job anew); each file's metrics (value, null and
  NaN counts, lower and upper bounds) as Iceberg's `files` table gives them, matched by
  partition and record count;
- the snapshot: its operation and its summary's counts (added/deleted data files and records,
  changed partitions, totals; `replace-partitions` for a dynamic overwrite);
- v3: the table's `next-row-id`, and every row's `_row_id` distinct and below it.

Prints "writes: N comparisons, M differences"; exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections import Counter
from typing import Any

from tests.oracle.pipelines import _diff
from tests.pgcatalog import CATALOG

COLUMNS = (
    "id BIGINT NOT NULL COMMENT 'the key', p STRING, s STRING, n INT, amt DECIMAL(10,2), "
    "ts TIMESTAMP, d DATE, f DOUBLE, flag BOOLEAN, tags ARRAY<STRING>, "
    "st STRUCT<a: INT, b: STRING>, m MAP<STRING, INT>"
)
# ts: 7 hours apart, over at most 175 days (600 ids) whatever the rows: Iceberg 1.12.0's writer
# stopped its JVM (1 GB driver, local[2]) writing 3000 rows into 875 day partitions
SOURCE = """
    SELECT id,
      CASE WHEN id % 11 = 0 THEN NULL ELSE concat('p', CAST(id % 3 AS STRING)) END AS p,
      CASE WHEN id % 7 = 0 THEN NULL ELSE concat('s-', CAST(id * 7919 % 1000 AS STRING),
        repeat('x', CAST(id % 20 AS INT))) END AS s,
      CAST(id % 97 AS INT) AS n,
      CAST(id * 1.25 AS DECIMAL(10,2)) AS amt,
      timestamp_micros(1700000000000000 + (id % 600) * 3600000000 * 7 + id DIV 600) AS ts,
      date_add(DATE'2023-12-30', CAST(id % 40 AS INT)) AS d,
      CASE WHEN id % 13 = 0 THEN double('NaN') ELSE id / 3.0 END AS f,
      id % 2 = 0 AS flag,
      CASE WHEN id % 5 = 0 THEN NULL ELSE array(concat('t', CAST(id % 4 AS STRING))) END AS tags,
      named_struct('a', CAST(id % 10 AS INT), 'b', CAST(id AS STRING)) AS st,
      map('k', CAST(id % 3 AS INT)) AS m
    FROM range({start}, {end})
"""
# (name, PARTITIONED BY, WRITE ORDERED BY)
LAYOUTS = (
    ("plain", "", ""),
    ("ident", "PARTITIONED BY (p)", ""),
    ("bucket", "PARTITIONED BY (bucket(4, id))", ""),
    ("days", "PARTITIONED BY (days(ts))", ""),
    ("trunc", "PARTITIONED BY (truncate(3, s))", ""),
    ("two", "PARTITIONED BY (p, bucket(3, id))", ""),
    ("sorted", "", "n DESC NULLS LAST, id"),
    ("psorted", "PARTITIONED BY (months(d))", "s"),
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", default="2,3")
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--layouts", default=",".join(n for n, _, _ in LAYOUTS))
    ap.add_argument(
        "--cases",
        default="",
        help="layout:version pairs (ident:3,bucket:2) run instead of every version of every "
        "layout --versions and --layouts name",
    )
    ap.add_argument(
        "--connect",
        action="store_true",
        help="through Spark Connect (pyspark 4.x): a server started with Iceberg's runtime, "
        "mor's statements and Iceberg's on the one remote session",
    )
    ap.add_argument(
        "--row-writes",
        default=None,
        metavar="ARGS",
        help="then tests/oracle/row_writes.py with these arguments, in the same JVM and "
        "catalog (one Spark start-up for both harnesses)",
    )
    args = ap.parse_args(argv)
    then = None
    if args.row_writes is not None:
        from tests.oracle import row_writes

        then = row_writes.parse(shlex.split(args.row_writes))

    from tests.oracle import on_jdbc_catalog

    def run(spark: Any, pg: Any, warehouse: str, java_wh: str) -> int:
        rc = _run(spark, pg, warehouse, args)
        if then is not None:
            from tests.oracle import row_writes

            rw_args, seeds, versions = then
            more = row_writes._run(spark, pg, warehouse, java_wh, seeds, versions, rw_args)
            rc = max(rc, more)
        return rc

    return on_jdbc_catalog("writes", run, _connect_session if args.connect else None)


def _connect_session(conf: dict[str, str], java_wh: str) -> tuple[Any, Any]:
    """A Spark Connect session on a server of this pyspark started with Iceberg's runtime
    and its SQL extensions, and `conf` (the JDBC catalog): mor runs as a Connect client.
    Returns it and what stops both (`java_wh` unused: the server has no Hadoop catalog)."""
    from pyspark.sql import SparkSession

    from tests.oracle.runtime import iceberg_coordinates, merged, packages_conf
    from tests.spark_modes import ConnectServer

    extensions = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
    server = ConnectServer(
        merged(
            {**packages_conf(iceberg_coordinates()), "spark.sql.extensions": extensions},
            {**conf, "spark.sql.shuffle.partitions": "2"},
        )
    )
    spark = SparkSession.builder.remote(server.url).getOrCreate()

    def stop() -> None:
        spark.stop()
        server.stop()

    return spark, stop


class Twins:
    """The comparisons of one run: each statement on both tables, then every check."""

    def __init__(self, spark: Any, cat: Any) -> None:
        self.spark = spark
        self.cat = cat
        self.n = 0
        self.diffs: list[str] = []
        self.counts: Counter = Counter()

    # --- running ------------------------------------------------------------------------

    def both(self, template: str, case: str) -> None:
        """`template` with <t> the table, run by Iceberg's Spark SQL and by mor."""
        from mor import mor_sql

        failed = []
        for who, run in (
            (
                "Iceberg",
                lambda: self.spark.sql(template.replace("<t>", f"{CATALOG}.wr.{case}_ice")),
            ),
            (
                "mor",
                lambda: mor_sql(
                    template.replace("<t>", f"wr.{case}_mor"), catalog=self.cat, spark=self.spark
                ),
            ),
        ):
            try:
                run()
            except Exception as e:  # noqa: BLE001 - one side refusing is a difference
                failed.append(f"{who}: {str(e).strip().splitlines()[0][:300]}")
        self.n += 1
        if len(failed) == 1:
            self.diffs.append(f"{case}: {template[:80]}: only {failed[0]}")
        self.counts[template.split()[0] + " " + template.split()[1]] += 1

    def same(self, what: str, ours: Any, theirs: Any) -> None:
        self.n += 1
        if ours == theirs:
            return
        if isinstance(ours, Counter) and "files" in what:
            self.diffs.append(f"{what}: {_file_diff(ours, theirs)}")
        elif isinstance(ours, Counter):
            self.diffs.append(f"{what}: {_diff(ours, theirs)[:600]}")
        elif isinstance(ours, dict):
            keys = [k for k in ours if ours.get(k) != theirs.get(k)]
            shown = "; ".join(f"{k}: mor {ours.get(k)} | Iceberg {theirs.get(k)}" for k in keys)
            self.diffs.append(f"{what}: {shown[:900]}")
        else:
            self.diffs.append(f"{what}: mor {str(ours)[:400]} | Iceberg {str(theirs)[:400]}")

    # --- the checks ---------------------------------------------------------------------

    def check(self, case: str, step: str, ranged: bool = False) -> None:
        try:
            self._check(case, step, ranged)
            self.counts[f"checked after {step}"] += 1
        except Exception as e:  # noqa: BLE001 - a check that cannot run is a difference
            self.n += 1
            self.diffs.append(f"{case} after {step}: the check failed: {str(e).strip()[:300]}")

    def _check(self, case: str, step: str, ranged: bool) -> None:
        ours, theirs = f"{CATALOG}.wr.{case}_mor", f"{CATALOG}.wr.{case}_ice"
        at = f"{case} after {step}"
        for t in (ours, theirs):
            self.spark.sql(f"REFRESH TABLE {t}")
        self.same(
            f"{at}: metadata", self.metadata(f"wr.{case}_mor"), self.metadata(f"wr.{case}_ice")
        )
        rows = self.iceberg_rows(ours)
        self.same(f"{at}: rows (Iceberg's reader)", rows, self.iceberg_rows(theirs))
        self.same(f"{at}: mor reads Iceberg's table", self.mor_rows(f"wr.{case}_ice"), rows)
        self.same(f"{at}: mor reads its own", self.mor_rows(f"wr.{case}_mor"), rows)
        self.same(f"{at}: files", self.files(ours, ranged), self.files(theirs, ranged))
        self.same(f"{at}: snapshot", self.snapshot(ours), self.snapshot(theirs))
        if self.cat.load_table(f"wr.{case}_mor").metadata.format_version >= 3:
            self.same(
                f"{at}: row lineage",
                self.lineage(ours, f"wr.{case}_mor"),
                self.lineage(theirs, f"wr.{case}_ice"),
            )

    def metadata(self, name: str) -> dict[str, Any]:
        from pyiceberg.typedef import IcebergBaseModel

        md = self.cat.load_table(name).metadata
        # pyiceberg 0.12 refuses to serialize v3 metadata through the model's own method
        doc = json.loads(IcebergBaseModel.model_dump_json(md, exclude_none=True))
        return {
            "format-version": doc["format-version"],
            "current-schema": [
                s for s in doc["schemas"] if s["schema-id"] == doc["current-schema-id"]
            ][0]["fields"],
            "schemas": len(doc["schemas"]),
            "specs": doc["partition-specs"],
            "default-spec-id": doc["default-spec-id"],
            "last-partition-id": doc["last-partition-id"],
            "last-column-id": doc["last-column-id"],
            "sort-orders": doc["sort-orders"],
            "default-sort-order-id": doc["default-sort-order-id"],
            "refs": sorted((k, v["type"]) for k, v in (doc.get("refs") or {}).items()),
            "properties": {
                k: v
                for k, v in doc.get("properties", {}).items()
                if k in ("write.distribution-mode", "format-version", "comment", "k1")
            },
        }

    def iceberg_rows(self, table: str) -> Counter:
        return _bag(self.spark.sql(f"SELECT * FROM {table}").collect())

    def mor_rows(self, name: str) -> Counter:
        from mor import mor_sql

        return _bag(mor_sql(f"SELECT * FROM {name}", catalog=self.cat, spark=self.spark).collect())

    def files(self, table: str, ranged: bool) -> Counter:
        """Per data file: spec, partition, record count and metrics (range distribution: per
        partition, the file count and the records; metrics left out, the files' bounds
        depending on the range partitioner's samples)."""
        files = self.spark.table(f"{table}.files")
        part = "partition" if "partition" in files.columns else "NULL AS partition"
        rows = self.spark.sql(
            f"SELECT spec_id, {part}, record_count, value_counts, null_value_counts, "
            f"nan_value_counts, lower_bounds, upper_bounds FROM {table}.files "
            "WHERE content = 0"
        ).collect()
        if ranged:
            per: Counter = Counter()
            count: Counter = Counter()
            for r in rows:
                key = (r["spec_id"], str(r["partition"]))
                per[key] += r["record_count"]
                count[key] += 1
            return Counter({(k, count[k], v): 1 for k, v in per.items()})
        out: Counter = Counter()
        for r in rows:
            out[
                (
                    r["spec_id"],
                    str(r["partition"]),
                    r["record_count"],
                    _sorted(r["value_counts"]),
                    _sorted(r["null_value_counts"]),
                    _sorted(r["nan_value_counts"]),
                    _sorted(r["lower_bounds"]),
                    _sorted(r["upper_bounds"]),
                )
            ] += 1
        return out

    def snapshot(self, table: str) -> tuple[Any, ...]:
        row = self.spark.sql(
            f"SELECT operation, summary FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
        ).first()
        if row is None:
            return ()
        keys = (
            "added-data-files", "deleted-data-files", "added-records", "deleted-records",
            "changed-partition-count", "total-records", "total-data-files",
            "total-delete-files", "replace-partitions", "removed-delete-files",
        )  # fmt: skip
        summary = row["summary"] or {}
        return (row["operation"], tuple((k, summary.get(k)) for k in keys))

    def lineage(self, table: str, name: str) -> tuple[Any, ...]:
        """Every row's `_row_id` distinct and below the table's `next-row-id`, which both
        writers advance alike. (Which of a commit's ids a row gets follows the order of the
        files in its manifest: Iceberg's fanout writer reports a task's files in the order
        of a Java HashMap, so two writers' rows of one commit may swap ids.)"""
        nxt = self.cat.load_table(name).metadata.next_row_id
        row = self.spark.sql(
            f"SELECT count(*), count(DISTINCT _row_id), min(_row_id) >= 0, "
            f"max(_row_id) < {nxt} FROM {table}"
        ).first()
        return (*tuple(row), nxt)


_FILE_FIELDS = (
    "spec",
    "partition",
    "records",
    "value counts",
    "null counts",
    "NaN counts",
    "lower bounds",
    "upper bounds",
)


def _file_diff(ours: Counter, theirs: Counter) -> str:
    """The files only one side has, and for the first pair of the same spec and partition
    the fields that differ."""
    a, b = sorted((ours - theirs).elements()), sorted((theirs - ours).elements())
    head = (
        f"{sum(ours.values())} files vs {sum(theirs.values())}; {len(a)} only mor's, "
        f"{len(b)} only Iceberg's"
    )
    for x in a:
        y = next((y for y in b if y[:2] == x[:2]), None)
        if y is None:
            return f"{head}; mor's {x[:3]} has no twin"
        fields = [
            f"{name}: mor {x[i]} | Iceberg {y[i]}"
            for i, name in enumerate(_FILE_FIELDS)
            if i < len(x) and x[i] != y[i]
        ]
        return f"{head}; in {x[:2]}: " + "; ".join(fields)[:900]
    return head


def _hashable(v: Any) -> Any:
    """A value as a hashable, comparable one: rows and lists as tuples, maps as sorted pairs,
    NaN as a marker (never equal to NULL)."""
    import math

    if isinstance(v, float):
        return "NaN" if math.isnan(v) else float(f"{v:.12g}")
    if isinstance(v, dict):
        return tuple(sorted((_hashable(k), _hashable(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    return v


def _bag(rows: Any) -> Counter:
    return Counter(_hashable(tuple(r)) for r in rows)


def _sorted(m: Any) -> tuple[Any, ...]:
    if m is None:
        return ()
    return tuple(
        sorted((k, bytes(v) if isinstance(v, (bytes, bytearray)) else v) for k, v in m.items())
    )


def _run(spark: Any, pg: Any, warehouse: str, args: argparse.Namespace) -> int:
    from pyiceberg.catalog import load_catalog

    from mor import mor_sql

    cat = load_catalog(CATALOG, **pg.pyiceberg_properties(warehouse))
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.wr")
    twins = Twins(spark, cat)
    started = time.monotonic()
    half = args.rows // 2
    spark.sql(SOURCE.format(start=0, end=args.rows)).createOrReplaceTempView("src")
    spark.sql(SOURCE.format(start=args.rows, end=args.rows + half)).createOrReplaceTempView("more")
    for name, partitioned, ordered, version in _cases(args):
        case = f"{name}_v{version}"
        ranged = bool(ordered)
        props = f"TBLPROPERTIES ('format-version' = '{version}', 'k1' = 'v1')"
        twins.both(f"CREATE TABLE <t> ({COLUMNS}) USING iceberg {partitioned} {props}", case)
        if ordered:
            twins.both(f"ALTER TABLE <t> WRITE ORDERED BY {ordered}", case)
        twins.check(case, "CREATE TABLE", ranged)
        twins.both("INSERT INTO <t> SELECT * FROM src", case)
        twins.check(case, "INSERT INTO ... SELECT", ranged)
        twins.both(
            "INSERT INTO <t> (id, p, s, n, amt, ts, d, f, flag, tags, st, m) VALUES "
            "(900001, 'p1', 'z', 1, 1.5, TIMESTAMP'2024-02-01 00:00:00', DATE'2024-02-01', "
            "1.0, true, array('a'), named_struct('a', 1, 'b', 'b'), map('k', 1)), "
            "(900002, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
            case,
        )
        twins.check(case, "INSERT INTO ... VALUES", ranged)
        if partitioned == "PARTITIONED BY (p)":
            twins.both(
                "INSERT OVERWRITE <t> PARTITION (p = 'p1') SELECT id, s, n, amt, ts, d, f, "
                "flag, tags, st, m FROM more WHERE p = 'p1'",
                case,
            )
            twins.check(case, "INSERT OVERWRITE ... PARTITION", ranged)
        if partitioned:
            spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
            try:
                twins.both("INSERT OVERWRITE <t> SELECT * FROM more WHERE id % 4 = 0", case)
            finally:
                spark.conf.set("spark.sql.sources.partitionOverwriteMode", "static")
            twins.check(case, "INSERT OVERWRITE (dynamic)", ranged)
        else:
            twins.both("INSERT OVERWRITE <t> SELECT * FROM more WHERE id % 2 = 0", case)
            twins.check(case, "INSERT OVERWRITE (static, every row)", ranged)
        if name in ("ident", "plain"):
            _evolve(twins, case, ranged)
        ctas = f"{case}_ctas"
        twins.both(
            f"CREATE TABLE <t> USING iceberg {partitioned} {props} AS SELECT * FROM src "
            "WHERE id % 3 <> 1",
            ctas,
        )
        twins.check(ctas, "CREATE TABLE AS SELECT", ranged)
        if name in ("ident", "bucket"):
            twins.both(
                f"REPLACE TABLE <t> USING iceberg PARTITIONED BY (truncate(2, s)) {props} "
                "AS SELECT id, p, s, amt FROM more",
                ctas,
            )
            twins.check(ctas, "REPLACE TABLE AS SELECT", ranged)
    elapsed = time.monotonic() - started
    for k, v in sorted(twins.counts.items()):
        print(f"  {k}: {v}")
    print(f"writes: {twins.n} comparisons, {len(twins.diffs)} differences ({elapsed:.0f} s)")
    for d in twins.diffs:
        print(f"  DIFF {d}")
    _ = mor_sql
    return 1 if twins.diffs else 0


def _cases(args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    """(layout, PARTITIONED BY, WRITE ORDERED BY, format version) of each case to run."""
    layouts = {n: (n, p, o) for n, p, o in LAYOUTS}
    if args.cases:
        pairs = [c.split(":") for c in args.cases.split(",")]
    else:
        pairs = [[n, v] for v in args.versions.split(",") for n in args.layouts.split(",")]
    bad = [":".join(c) for c in pairs if len(c) != 2 or c[0] not in layouts or c[1] not in "23"]
    if bad:
        raise SystemExit(f"writes: unknown case {bad[0]!r} (layouts: {', '.join(layouts)})")
    return [(*layouts[n], v) for n, v in pairs]


def _evolve(twins: Twins, case: str, ranged: bool) -> None:
    """ALTER TABLE on both, then an INSERT under the evolved schema and spec."""
    for statement in (
        "ALTER TABLE <t> ADD COLUMN extra STRING COMMENT 'added'",
        "ALTER TABLE <t> ADD COLUMNS (e2 INT, e3 STRUCT<x: INT, y: STRING>)",
        "ALTER TABLE <t> RENAME COLUMN extra TO extra2",
        "ALTER TABLE <t> ALTER COLUMN n TYPE BIGINT",
        "ALTER TABLE <t> ALTER COLUMN e2 COMMENT 'second'",
        "ALTER TABLE <t> ALTER COLUMN e2 FIRST",
        "ALTER TABLE <t> ADD PARTITION FIELD bucket(2, id)",
        "ALTER TABLE <t> SET TBLPROPERTIES ('k1' = 'v2', 'write.distribution-mode' = 'hash')",
        "ALTER TABLE <t> DROP COLUMN e3",
    ):
        twins.both(statement, case)
        twins.check(case, statement.split("<t> ")[1], ranged)
    twins.both(
        "INSERT INTO <t> SELECT 7, id + 500000, p, s, n, amt, ts, d, f, flag, tags, st, m, 'x' "
        "FROM more",
        case,
    )
    twins.check(case, "INSERT after evolution", ranged)
    twins.both("ALTER TABLE <t> REPLACE PARTITION FIELD bucket(2, id) WITH truncate(10, id)", case)
    twins.both("ALTER TABLE <t> CREATE TAG first", case)
    twins.both("ALTER TABLE <t> CREATE BRANCH audit RETAIN 7 DAYS", case)
    twins.check(case, "partition field replaced, a tag and a branch", ranged)


if __name__ == "__main__":
    sys.exit(main())
