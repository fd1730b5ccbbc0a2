"""mor inside the user's Spark session: statements naming whatever Spark holds (temporary and
global temporary views, file sources, Spark's own catalog, DataFrames handed in) beside mor's
tables, and tables created and filled (CREATE TABLE [AS SELECT], INSERT INTO, INSERT OVERWRITE
static and dynamic, REPLACE TABLE, mor.write) against a model of their rows, with Spark's
store-assignment rules, one-line errors and nothing committed or left behind when a statement
fails. Iceberg's own writer is the oracle of tests/oracle/writes.py (test_oracle.py)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import mor
from mor import mor_sql
from mor.planner.errors import (
    AmbiguousNameError,
    ColumnNotFoundError,
    MorError,
    QueryError,
    TableNotFoundError,
    UnsupportedError,
)

# pyspark 3.5 classic and Spark Connect (4.3); the Python data source on 4.1 classic too
pytestmark = [pytest.mark.connect]

Row = tuple[Any, ...]


def _rows(spark: Any, catalog: Any, sql: str) -> Counter:
    return Counter(tuple(r) for r in mor_sql(sql, catalog=catalog, spark=spark).collect())


def _snapshots(catalog: Any, name: str) -> int:
    return len(catalog.load_table(name).metadata.snapshots)


def _files(catalog: Any, name: str) -> set[str]:
    """Every file under the table's data folder (what a failed statement must not leave)."""
    root = catalog.load_table(name).metadata.location.removeprefix("file://") + "/data"
    return {str(p) for p in Path(root).rglob("*") if p.is_file()} if os.path.isdir(root) else set()


@pytest.fixture()
def lake(spark: Any, catalog: Any) -> Any:
    mor_sql("CREATE NAMESPACE w", catalog=catalog, spark=spark)
    return catalog


def test_statements_name_what_spark_holds(spark: Any, lake: Any, tmp_path: Path) -> None:
    run = lambda sql, **kw: mor_sql(sql, catalog=lake, spark=spark, **kw)  # noqa: E731
    run("CREATE TABLE w.t (id BIGINT, p STRING, v DOUBLE) PARTITIONED BY (p)")
    run("INSERT INTO w.t VALUES (1, 'a', 1.0), (2, 'b', 2.0), (3, 'a', 3.0), (4, NULL, 4.0)")
    staging = spark.createDataFrame(
        [(1, "a", 10.0), (5, "c", 50.0), (None, "x", 0.0)], "id long, p string, v double"
    )
    staging.createOrReplaceTempView("staging")
    spark.createDataFrame([("a", "Apple"), ("b", "Banana")], "p string, name string") \
        .createOrReplaceGlobalTempView("names")  # fmt: skip
    pq = str(tmp_path / "dim.parquet")
    spark.createDataFrame([(1, "one"), (3, "three")], "id long, word string").write.parquet(pq)
    given = spark.createDataFrame([(2, True)], "id long, flag boolean")
    got = run(
        "SELECT t.id, t.p, n.name, d.word, g.flag, s.v AS staged FROM w.t "
        "LEFT JOIN global_temp.names n ON t.p = n.p "
        f"LEFT JOIN parquet.`{pq}` d ON t.id = d.id "
        "LEFT JOIN handed g ON t.id = g.id "
        "LEFT JOIN staging s ON t.id = s.id ORDER BY t.id",
        views={"handed": given},
    ).collect()
    assert [tuple(r) for r in got] == [
        (1, "a", "Apple", "one", None, 10.0),
        (2, "b", "Banana", None, True, None),
        (3, "a", "Apple", "three", None, None),
        (4, None, None, None, None, None),
    ]
    # the upsert every CDC job runs: a batch of changes from a temporary view
    out = run(
        "MERGE INTO w.t t USING staging s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
    ).first()
    assert (out["num_updated_rows"], out["num_inserted_rows"]) == (1, 2)
    # a DELETE whose condition's subquery reads Spark's view
    run("DELETE FROM w.t WHERE id IN (SELECT id FROM staging WHERE v > 40)")
    assert _rows(spark, lake, "SELECT id, p, v FROM w.t") == Counter(
        [(1, "a", 10.0), (2, "b", 2.0), (3, "a", 3.0), (4, None, 4.0), (None, "x", 0.0)]
    )
    # an INSERT from a file source, a CREATE TABLE AS SELECT from a view
    run(f"INSERT INTO w.t SELECT id + 100, 'f', CAST(id AS DOUBLE) FROM parquet.`{pq}`")
    run("CREATE TABLE w.u AS SELECT p, count(*) AS n FROM w.t JOIN staging USING (p) GROUP BY p")
    assert _rows(spark, lake, "SELECT * FROM w.u") == Counter([("a", 2), ("x", 1)])
    # a temporary view over mor's table: the DataFrame of the statement, kept by Spark
    run("CREATE OR REPLACE TEMPORARY VIEW fs AS SELECT * FROM w.t WHERE p = 'f'")
    assert sorted(r[0] for r in spark.sql("SELECT id FROM fs").collect()) == [101, 103]
    # a name both sides hold is never taken from one; one neither holds names where it looked
    spark.sql("CREATE DATABASE IF NOT EXISTS w")
    spark.sql("CREATE TABLE IF NOT EXISTS w.t USING parquet AS SELECT 1 AS x")
    try:
        with pytest.raises(AmbiguousNameError, match=r"w\.t names both a table of mor's catalog"):
            run("SELECT * FROM w.t")
        assert run("SELECT count(*) FROM mor.w.t").first()[0] == 7  # named whole: mor's
        assert run("SELECT x FROM spark_catalog.w.t").first()[0] == 1  # and Spark's
    finally:
        spark.sql("DROP TABLE IF EXISTS spark_catalog.w.t")
        spark.sql("DROP DATABASE IF EXISTS spark_catalog.w")
    with pytest.raises(TableNotFoundError, match=r"w\.nope not found in catalog 'mor'.*nor is"):
        run("SELECT * FROM w.nope")
    with pytest.raises(QueryError, match="nope_view"):
        run("SELECT * FROM nope_view JOIN w.t ON true")
    spark.catalog.dropTempView("staging")
    spark.catalog.dropGlobalTempView("names")
    spark.catalog.dropTempView("fs")


def test_tables_created_and_filled_against_a_model(spark: Any, lake: Any) -> None:
    """A partitioned v2 table (identity and bucket) and a sorted v3 one, filled by every
    statement kind; after each, mor's rows are the model's, and a hash-distributed INSERT
    writes one file per partition."""
    run = lambda sql, **kw: mor_sql(sql, catalog=lake, spark=spark, **kw)  # noqa: E731
    run(
        "CREATE TABLE w.p (id BIGINT NOT NULL, k STRING, n INT) "
        "PARTITIONED BY (k, bucket(3, id)) TBLPROPERTIES ('format-version' = '2')"
    )
    run("CREATE TABLE w.s (id BIGINT, k STRING, n INT) TBLPROPERTIES ('format-version' = '3')")
    run("ALTER TABLE w.s WRITE ORDERED BY n DESC NULLS LAST")
    model: dict[str, Counter] = {"w.p": Counter(), "w.s": Counter()}
    spark.range(0, 60).selectExpr(
        "id", "CASE WHEN id % 5 = 0 THEN NULL ELSE concat('k', id % 3) END AS k",
        "CAST(id % 7 AS INT) AS n",
    ).createOrReplaceTempView("src")  # fmt: skip
    src = [(i, None if i % 5 == 0 else f"k{i % 3}", i % 7) for i in range(60)]

    def check(step: str) -> None:
        for t, want in model.items():
            assert _rows(spark, lake, f"SELECT * FROM {t}") == want, f"{t} after {step}"

    for t in model:
        out = run(f"INSERT INTO {t} SELECT * FROM src").first()
        assert out["num_affected_rows"] == 60
        model[t] += Counter(src)
    check("INSERT ... SELECT")
    files = mor_sql(
        "SELECT partition, count(*) AS n FROM w.p.files GROUP BY partition",
        catalog=lake,
        spark=spark,
    ).collect()
    assert all(r["n"] == 1 for r in files)  # clustered by partition: a file each
    run("INSERT INTO w.p (n, id, k) VALUES (1, 1000, 'k1'), (2, 1001, NULL)")
    model["w.p"] += Counter([(1000, "k1", 1), (1001, None, 2)])
    check("INSERT ... (columns) VALUES")
    run("INSERT OVERWRITE w.p PARTITION (k = 'k1') SELECT id + 2000, n FROM src WHERE id < 9")
    model["w.p"] = Counter({r: c for r, c in model["w.p"].items() if r[1] != "k1"})
    model["w.p"] += Counter([(i + 2000, "k1", i % 7) for i in range(9)])
    check("INSERT OVERWRITE ... PARTITION (static)")
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        run("INSERT OVERWRITE w.p SELECT id + 3000, k, n FROM src WHERE id % 3 = 2 AND id < 20")
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    new = [(i + 3000, None if i % 5 == 0 else f"k{i % 3}", i % 7) for i in range(20) if i % 3 == 2]
    table = lake.load_table("w.p")
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import LongType

    bucket = BucketTransform(3).transform(LongType())
    parts = {(r[1], bucket(r[0])) for r in new}
    model["w.p"] = Counter(
        {r: c for r, c in model["w.p"].items() if (r[1], bucket(r[0])) not in parts}
    )
    model["w.p"] += Counter(new)
    check("INSERT OVERWRITE (dynamic)")
    assert table.current_snapshot().summary["replace-partitions"] == "true"
    run("INSERT OVERWRITE w.s SELECT * FROM src WHERE id < 10")
    model["w.s"] = Counter(src[:10])
    check("INSERT OVERWRITE (every row)")
    mor.write(
        spark.createDataFrame([(7, 77, "z")], "id long, n int, k string"), "w.s", catalog=lake
    )
    model["w.s"] += Counter([(7, "z", 77)])
    check("mor.write (append, by name)")
    run("REPLACE TABLE w.s AS SELECT id, k FROM src WHERE id < 3")
    md = lake.load_table("w.s").metadata
    assert len(md.snapshots) == 4 and [f.name for f in md.schema().fields] == ["id", "k"]
    assert _rows(spark, lake, "SELECT * FROM w.s") == Counter([(0, None), (1, "k1"), (2, "k2")])
    assert md.next_row_id is not None and md.next_row_id >= 74  # v3: row lineage advanced


def test_bad_input_is_one_line_and_commits_nothing(spark: Any, lake: Any) -> None:
    run = lambda sql: mor_sql(sql, catalog=lake, spark=spark)  # noqa: E731
    run("CREATE TABLE w.b (id BIGINT NOT NULL, n INT, d DECIMAL(5,2), s STRING) PARTITIONED BY (s)")
    run("INSERT INTO w.b VALUES (1, 1, 1.5, 'a')")
    snaps, files = _snapshots(lake, "w.b"), _files(lake, "w.b")
    bad = {
        "INSERT INTO w.b VALUES (2, 2147483648, 1.0, 'a')": (MorError, "column n is int"),
        "INSERT INTO w.b VALUES (2, 1, 12345.678, 'a')": (MorError, "does not fit it"),
        "INSERT INTO w.b VALUES (2, 'x', 1.0, 'a')": (UnsupportedError, "does not cast string"),
        "INSERT INTO w.b VALUES (NULL, 1, 1.0, 'a')": (MorError, "NOT NULL"),
        "INSERT INTO w.b VALUES (2, 1)": (UnsupportedError, "takes 4 columns"),
        "INSERT INTO w.b (id, nope) VALUES (2, 1)": (ColumnNotFoundError, "no column nope"),
        "INSERT INTO w.b (id, n) VALUES (2, 1)": (UnsupportedError, "no value for column d"),
        "INSERT INTO w.nope VALUES (1)": (TableNotFoundError, "w.nope"),
        "INSERT OVERWRITE w.b PARTITION (n = 1) SELECT 1, 1.0, 'a'": (UnsupportedError, "identity"),
        "CREATE TABLE w.b (x INT)": (MorError, "already exists"),
        "CREATE TABLE nope.c AS SELECT 1 AS x": (TableNotFoundError, "namespace nope"),
        "CREATE TABLE w.c AS SELECT NULL AS x": (UnsupportedError, "CAST it"),
        "ALTER TABLE w.b ALTER COLUMN n TYPE STRING": (MorError, "ALTER TABLE w.b"),
    }
    for sql, (kind, text) in bad.items():
        with pytest.raises(kind, match=text) as e:
            run(sql).collect()
            pytest.fail(f"no error: {sql}")
        assert "\n" not in str(e.value), sql
        assert _snapshots(lake, "w.b") == snaps and _files(lake, "w.b") == files, sql
    assert not lake.table_exists("w.c")
    # Spark's other store-assignment policies, as the session says
    spark.conf.set("spark.sql.storeAssignmentPolicy", "LEGACY")
    try:
        run("INSERT INTO w.b VALUES (3, 'x', 1.0, 'a')")  # LEGACY: CAST, 'x' becomes NULL
    finally:
        spark.conf.unset("spark.sql.storeAssignmentPolicy")
    assert _rows(spark, lake, "SELECT n FROM w.b WHERE id = 3") == Counter([(None,)])


def test_a_script_creates_fills_and_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mor run FILE` from an empty warehouse: every statement checked first against what the
    ones before it create (an error anywhere runs none), then each in turn."""
    from mor.cli import main

    wh = str(tmp_path / "wh")
    script = tmp_path / "s.sql"
    script.write_text(
        "CREATE NAMESPACE shop;\n"
        "CREATE TABLE shop.orders (id BIGINT, region STRING, amount DECIMAL(8,2)) "
        "PARTITIONED BY (region);\n"
        "INSERT INTO shop.orders VALUES (1, 'EU', 10.00), (2, 'US', 20.50), (3, 'EU', 5.25);\n"
        "CREATE TEMPORARY VIEW eu AS SELECT * FROM shop.orders WHERE region = 'EU';\n"
        "SELECT count(*) AS n, sum(amount) AS total FROM eu;\n"
        "SHOW TABLES IN shop;\n"
        "DESCRIBE shop.orders\n"
    )
    assert main(["run", str(script), "--warehouse", wh]) == 0
    out = capsys.readouterr().out
    assert "namespace shop: created" in out and "table shop.orders: created" in out
    assert "wrote 3 rows" in out and "| 2 | 15.25 |" in out
    assert "| shop      | orders    | false       |" in out
    assert "Part 0" in out
    # an error in the last statement: none of the script runs
    bad = tmp_path / "bad.sql"
    bad.write_text(
        "CREATE NAMESPACE other;\nCREATE TABLE other.t (a INT);\n"
        "INSERT INTO other.t (b) VALUES (1)\n"
    )
    assert main(["run", str(bad), "--warehouse", wh]) == 1
    err = capsys.readouterr().err
    assert "no column b" in err and err.count("\n") == 1
    from mor.api import default_catalog

    assert not default_catalog(wh).namespace_exists("other")


@pytest.mark.spark41
def test_spark_writer_format_mor(spark: Any, lake: Any, tmp_path: Path) -> None:
    """`df.write.format("mor")` on pyspark 4.x (a Python data source: the tasks write the
    files, the driver commits once; columns by name; a failed job leaves no file behind);
    pyspark 3.5 has no Python data sources: registering says what to use instead."""
    import pyspark

    if int(pyspark.__version__.split(".")[0]) < 4:
        with pytest.raises(UnsupportedError, match=r"pyspark 4\.0 or later.*mor\.write"):
            mor.register(spark)
        return
    mor.register(spark)
    wh = str(tmp_path / "wh")
    mor_sql("CREATE TABLE w.d (id BIGINT, s STRING, v DOUBLE) PARTITIONED BY (s)", catalog=lake,
            spark=spark)  # fmt: skip
    df = spark.range(100).selectExpr("concat('s', id % 4) AS s", "id", "id / 2 AS v")
    model = Counter((i, f"s{i % 4}", i / 2) for i in range(100))
    df.write.format("mor").mode("append").option("warehouse", wh).save("w.d")
    assert _rows(spark, lake, "SELECT id, s, v FROM w.d") == model
    df.filter("id < 10").write.format("mor").mode("overwrite").option("warehouse", wh).save("w.d")
    assert _rows(spark, lake, "SELECT id, s, v FROM w.d") == Counter(
        (i, f"s{i % 4}", i / 2) for i in range(10)
    )
    table = lake.load_table("w.d")
    assert table.current_snapshot().summary.operation.value == "overwrite"
    snaps, files = _snapshots(lake, "w.d"), _files(lake, "w.d")
    with pytest.raises(Exception, match="no column v in the DataFrame"):
        df.drop("v").write.format("mor").mode("append").option("warehouse", wh).save("w.d")
    # a task fails after others wrote their files: the job aborts, every file is deleted
    failing = df.repartition(4).selectExpr(
        "s", "id", "CASE WHEN id = 77 THEN CAST(raise_error('row 77') AS DOUBLE) ELSE v END AS v"
    )
    with pytest.raises(Exception, match="row 77"):
        failing.write.format("mor").mode("append").option("warehouse", wh).save("w.d")
    assert _snapshots(lake, "w.d") == snaps and _files(lake, "w.d") == files


def test_legacy_store_assignment_casts_as_spark_without_ansi(spark: Any) -> None:
    """LEGACY store assignment casts as Spark's non-ANSI CAST even in a session whose ANSI
    mode is on (Spark 4's default): mor's expressions against Spark's own CAST run with
    ANSI off, on values that overflow, NaN, infinities and strings that do not parse."""
    from pyspark.sql import types as T

    from mor.physical.appends import legacy_cast

    values = {
        T.LongType(): [None, 0, 2**31, -(2**31) - 1, 2**40 + 7, 2**63 - 1, -(2**63), 300, -129],
        T.DoubleType(): [None, 1.9, -1.9, 3e9, -3e9, 1e19, -1e19, float("nan"), float("inf"),
                         70000.5, -200.25],
        T.StringType(): [None, "12", " 7 ", "x", "2147483648", "1e3", "-0"],
        T.IntegerType(): [None, 40000, -40000, 200, 2**31 - 1],
    }  # fmt: skip
    targets = [T.ByteType(), T.ShortType(), T.IntegerType(), T.LongType(), T.FloatType()]
    for got, vals in values.items():
        df = spark.createDataFrame([(v,) for v in vals], T.StructType([T.StructField("v", got)]))
        for want in targets:
            if want == got:
                continue
            spark.conf.set("spark.sql.ansi.enabled", "false")
            try:
                ref = [r[0] for r in df.selectExpr(f"CAST(v AS {want.simpleString()})").collect()]
            finally:
                spark.conf.unset("spark.sql.ansi.enabled")
            spark.conf.set("spark.sql.ansi.enabled", "true")
            try:
                ours = [r[0] for r in df.selectExpr(legacy_cast("v", got, want)).collect()]
            finally:
                spark.conf.unset("spark.sql.ansi.enabled")
            same = lambda v: "NaN" if isinstance(v, float) and v != v else v  # noqa: E731
            assert [same(v) for v in ours] == [same(v) for v in ref], (got, want)


def test_bucket_in_sparks_expressions_is_icebergs(spark: Any) -> None:
    """The bucket key a write clusters by, computed in Spark's own expressions (murmur3 of a
    64-bit value, in bigint arithmetic under ANSI mode), against pyiceberg's transform: ints,
    longs at both ends, dates before 1970, timestamps with time zone, NULL."""
    import datetime as dt

    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import DateType, IntegerType, LongType, TimestamptzType

    from mor.physical.appends import _integral_bucket, bucket_column

    utc = dt.timezone.utc
    cases = {
        ("long", LongType()): [0, 1, -1, 34, 2**31, -(2**31) - 5, 2**63 - 1, -(2**63), None],
        ("int", IntegerType()): [0, -7, 2**31 - 1, -(2**31), 123456, None],
        ("date", DateType()): [dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(2024, 2, 29)],
        ("timestamptz", TimestamptzType()): [
            dt.datetime(2024, 5, 1, 12, 30, 0, 123456, tzinfo=utc),
            dt.datetime(1960, 1, 1, tzinfo=utc),
        ],
    }
    spark_types = {"long": "long", "int": "int", "date": "date", "timestamptz": "timestamp"}
    spark.conf.set("spark.sql.ansi.enabled", "true")
    lateral = "spark.sql.lateralColumnAlias.enableImplicitResolution"
    try:
        # one projection naming its earlier aliases, and a column a step where a session
        # turns those references off
        for aliases in ("true", "false"):
            spark.conf.set(lateral, aliases)
            for (source, itype), values in cases.items():
                for n in (1, 7, 16, 1000):
                    df = spark.createDataFrame([(v,) for v in values], f"c {spark_types[source]}")
                    sql = _integral_bucket(f"bucket[{n}]", source, ["c"])
                    assert sql is not None
                    out, col = bucket_column(df, sql, n, "_t_")
                    assert out.columns == ["c", col]
                    got = [r[col] for r in out.collect()]
                    b = BucketTransform(n).transform(itype)
                    want = [None if v is None else b(_iceberg_value(v, source)) for v in values]
                    assert got == want, (source, n, aliases)
    finally:
        spark.conf.unset("spark.sql.ansi.enabled")
        spark.conf.unset(lateral)


def _iceberg_value(v: Any, source: str) -> Any:
    """A Python value as pyiceberg's transform takes it (days, microseconds)."""
    import datetime as dt

    if source == "date":
        return (v - dt.date(1970, 1, 1)).days
    if source == "timestamptz":
        return (v - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(microseconds=1)
    return v
