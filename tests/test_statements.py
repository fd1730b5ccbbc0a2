"""Every statement kind bound into its plan, and the catalog's statements run, without Spark:
names resolved by Spark's rule (planner/names.py), CREATE/REPLACE/DROP TABLE and NAMESPACE,
ALTER TABLE in each form Spark's and Iceberg's SQL take, SHOW and DESCRIBE answered from the
metadata, a script checked whole against what its earlier statements create, and the one-line
errors of bad input (nothing committed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mor.planner.binding import bind_statement
from mor.planner.errors import (
    AmbiguousNameError,
    ColumnNotFoundError,
    MorError,
    SqlSyntaxError,
    TableNotFoundError,
    UnsupportedError,
)
from mor.planner.names import SparkNames
from mor.planner.sources import PathMap, Resolver
from mor.planner.sql import one_statement, owner_of, split_statements
from mor.planner.statement_plans import (
    AlterTable,
    CreateNamespace,
    CreateTable,
    CreateView,
    DescribeQuery,
    DescribeTable,
    DropNamespace,
    DropTable,
    Explain,
    InsertRows,
    Query,
    RowLevelWrite,
    ShowCreateTable,
    ShowNamespaces,
    ShowProperties,
    ShowTables,
    SparkStatement,
)
from mor.statements import StatementExecution

pytestmark = [pytest.mark.check]


class FakeSpark(SparkNames):
    """A Spark session holding the relations named here, with the catalogs named here."""

    def __init__(self, relations: dict[tuple[str, ...], str], catalogs: set[str] = frozenset()):
        self.relations = {tuple(p.lower() for p in k): v for k, v in relations.items()}
        self.catalogs = catalogs

    def relation(self, parts: tuple[str, ...]) -> str | None:
        return self.relations.get(tuple(p.lower() for p in parts))

    def is_catalog(self, name: str) -> bool:
        return super().is_catalog(name) or name in self.catalogs


def _resolver(catalog: Any, spark: SparkNames | None = None, given: tuple = ()) -> Resolver:
    return Resolver(catalog, PathMap.of({}), spark=spark, given=given)


def _run(catalog: Any, sql: str) -> Any:
    return StatementExecution(sql, catalog=catalog).run()


@pytest.fixture()
def lake(catalog: Any) -> Any:
    """The embedded catalog with a namespace `db` and a table `db.t` made by mor's DDL."""
    _run(catalog, "CREATE NAMESPACE db")
    _run(
        catalog,
        "CREATE TABLE db.t (id BIGINT NOT NULL COMMENT 'key', p STRING, ts TIMESTAMP, "
        "amt DECIMAL(10,2), n INT, st STRUCT<a: INT, b: STRING>) "
        "PARTITIONED BY (p, days(ts)) TBLPROPERTIES ('k' = 'v')",
    )
    return catalog


# --- names --------------------------------------------------------------------------------------


def test_names_resolve_as_spark_resolves_them(lake: Any) -> None:
    spark = FakeSpark(
        {("staging",): "temporary view staging", ("db", "dim"): "table spark_catalog.db.dim"},
        catalogs={"other"},
    )
    r = _resolver(lake, spark, given=("handed",))
    assert owner_of(("staging",), False, r) == "spark"  # a one-part name: Spark's (views first)
    assert owner_of(("handed",), False, r) == "given"  # a DataFrame handed in by name
    assert owner_of(("global_temp", "v"), False, r) == "spark"
    assert owner_of(("parquet", "/data/x.parquet"), True, r) == "spark"  # a file source
    assert owner_of(("db", "t"), False, r) == "mor"
    assert owner_of(("db", "dim"), False, r) == "spark"  # Spark's session holds it, mor's not
    assert owner_of(("other", "ns", "x"), False, r) == "spark"  # a catalog of Spark's
    assert owner_of(("db", "t", "snapshots"), False, r) == "mor"  # a metadata table
    # held by both: never taken silently from one of them
    both = _resolver(lake, FakeSpark({("db", "t"): "table spark_catalog.db.t"}))
    with pytest.raises(AmbiguousNameError, match=r"db\.t names both a table of mor's catalog"):
        owner_of(("db", "t"), False, both)
    # held by neither: one line naming where it looked
    with pytest.raises(TableNotFoundError, match=r"not found in catalog 'mor'.*nor is db\.nope in"):
        owner_of(("db", "nope"), False, r)


def test_a_query_binds_spark_relations_untouched_and_handed_views_by_name(lake: Any) -> None:
    from mor.planner.sql import bind

    r = _resolver(lake, FakeSpark({("staging",): "temporary view staging"}), given=("d",))
    q = bind(
        one_statement("SELECT * FROM db.t JOIN staging s ON t.id = s.id JOIN d ON d.id = t.id"), r
    )
    assert len(q.scans) == 1 and q.relations == ("d",)
    text, _ = q.text_with(("scan_1", "view_1"))
    assert text == (
        "SELECT * FROM scan_1 AS t JOIN staging s ON t.id = s.id JOIN view_1 AS d ON d.id = t.id"
    )
    with pytest.raises(TableNotFoundError, match=r"line 1, column 15"):
        bind(one_statement("SELECT * FROM db.nope"), r)


class _Recorded(FakeSpark):
    """FakeSpark recording the order of what is asked of it."""

    def __init__(self, events: list[tuple[str, str]], relations: dict) -> None:
        super().__init__(relations)
        self.events = events

    def ask_ahead(self, parts: tuple[str, ...]) -> None:
        self.events.append(("ahead", ".".join(parts)))

    def relation(self, parts: tuple[str, ...]) -> str | None:
        self.events.append(("spark", ".".join(parts)))
        return super().relation(parts)


def test_spark_is_asked_ahead_of_mors_catalog_for_names_both_may_hold(
    lake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A two-part name is asked of both sides: Spark's lookup starts before mor's catalog
    loads the table (the two overlap), and Spark's answer is still the one the rule uses."""
    events: list[tuple[str, str]] = []
    load = lake.load_table

    def recorded(ident: Any) -> Any:
        events.append(("mor", ".".join(ident) if isinstance(ident, tuple) else str(ident)))
        return load(ident)

    monkeypatch.setattr(lake, "load_table", recorded)
    spark = _Recorded(events, {("db", "dim"): "table spark_catalog.db.dim"})
    from mor.planner.sql import bind

    cases = {  # a query's names (db.dim: Spark's), an INSERT's target
        "SELECT * FROM db.t JOIN db.dim USING (id)": (bind, {"db.t", "db.dim"}),
        "INSERT INTO db.t SELECT * FROM db.t": (bind_statement, {"db.t"}),
    }
    for sql, (binder, names) in cases.items():
        events.clear()
        binder(one_statement(sql), _resolver(lake, spark))
        assert {n for k, n in events if k == "mor"} == names, events
        for name in names:
            kinds = [k for k, n in events if n == name]
            assert kinds.index("ahead") < kinds.index("mor") < kinds.index("spark"), (sql, events)


def test_a_session_asks_ahead_on_a_thread_and_answers_once() -> None:
    """SessionNames.ask_ahead returns while the session's catalog call is still running, and
    `relation` then gives that call's answer without asking again."""
    import threading

    from mor.physical.spark.names import SessionNames

    release, calls = threading.Event(), []

    class Table:
        isTemporary, tableType, catalog, name = False, "MANAGED", "spark_catalog", "dim"
        namespace = ["db"]

    class Catalog:
        def getTable(self, name: str) -> Any:  # noqa: N802 - Spark's name
            calls.append((name, threading.current_thread().name))
            assert release.wait(30), "ask_ahead waited for the catalog call"
            return Table()

    class Session:
        catalog = Catalog()

    names = SessionNames(Session())
    names.ask_ahead(("db", "dim"))  # returns with the call still blocked
    assert len(calls) <= 1
    release.set()
    assert names.relation(("db", "dim")) == "table spark_catalog.db.dim"
    assert names.relation(("DB", "dim")) == "table spark_catalog.db.dim"  # kept, not asked again
    assert calls == [("`db`.`dim`", "mor-spark-names")]


# --- binding ------------------------------------------------------------------------------------


def _bind(catalog: Any, sql: str, spark: SparkNames | None = None) -> Any:
    return bind_statement(one_statement(sql), _resolver(catalog, spark))


def test_every_statement_kind_binds_to_its_plan(lake: Any) -> None:
    cases = {
        "SELECT 1": Query,
        "VALUES (1, 2)": Query,
        "DELETE FROM db.t WHERE id = 1": RowLevelWrite,
        "CREATE NAMESPACE IF NOT EXISTS x": CreateNamespace,
        "DROP NAMESPACE x CASCADE": DropNamespace,
        "CREATE TABLE db.u (a INT)": CreateTable,
        "CREATE TABLE db.u AS SELECT * FROM db.t": CreateTable,
        "REPLACE TABLE db.t AS SELECT 1 AS a": CreateTable,
        "CREATE OR REPLACE TABLE db.t (a INT)": CreateTable,
        "DROP TABLE IF EXISTS db.t PURGE": DropTable,
        "INSERT INTO db.t SELECT * FROM db.t": InsertRows,
        "INSERT OVERWRITE db.t PARTITION (p = 'a') SELECT id, ts, amt, n, st FROM db.t": InsertRows,
        "ALTER TABLE db.t ADD COLUMN c INT": AlterTable,
        "SHOW NAMESPACES": ShowNamespaces,
        "SHOW TABLES IN db LIKE 't*'": ShowTables,
        "DESCRIBE TABLE EXTENDED db.t": DescribeTable,
        "DESC db.t id": DescribeTable,
        "DESCRIBE SELECT 1 AS a": DescribeQuery,
        "SHOW CREATE TABLE db.t": ShowCreateTable,
        "SHOW TBLPROPERTIES db.t ('k')": ShowProperties,
        "CREATE TEMPORARY VIEW v AS SELECT * FROM db.t": CreateView,
        "CREATE TEMPORARY VIEW v AS SELECT 1": SparkStatement,
        "SET spark.sql.shuffle.partitions = 4": SparkStatement,
        "SHOW FUNCTIONS": SparkStatement,
        # as Spark resolves them: a one-part name and another format are Spark's tables
        "CREATE TABLE t (a INT)": SparkStatement,
        "CREATE TABLE db.u (a INT) USING parquet": SparkStatement,
        "DROP TABLE t": SparkStatement,
        "EXPLAIN INSERT INTO db.t SELECT * FROM db.t": Explain,
    }
    for sql, kind in cases.items():
        assert type(_bind(lake, sql)) is kind, sql


def test_create_table_binds_columns_partitions_and_properties(lake: Any) -> None:
    plan = _bind(
        lake,
        "CREATE TABLE IF NOT EXISTS db.u (id BIGINT NOT NULL COMMENT 'the id', s STRING, "
        "d DECIMAL(12,3), ts TIMESTAMP, ntz TIMESTAMP_NTZ, b TINYINT, tags ARRAY<STRING>, "
        "m MAP<STRING, INT>, st STRUCT<a: INT, `b c`: STRING>) USING iceberg "
        "PARTITIONED BY (bucket(16, id), days(ts), truncate(s, 4), years(ntz), s) "
        "LOCATION '/somewhere' COMMENT 'a table' TBLPROPERTIES ('format-version' = '3', "
        "write.delete.mode = 'merge-on-read')",
    )
    assert plan.if_not_exists and plan.location == "/somewhere" and plan.mode == "create"
    fields = {f.name: (str(f.field_type), f.required, f.doc) for f in plan.schema.fields}
    assert fields["id"] == ("long", True, "the id")
    assert fields["d"][0] == "decimal(12, 3)" and fields["b"][0] == "int"
    assert fields["ts"][0] == "timestamptz" and fields["ntz"][0] == "timestamp"
    assert [(p.source, p.transform, p.name) for p in plan.partition] == [
        (("id",), "bucket[16]", "id_bucket"),
        (("ts",), "day", "ts_day"),
        (("s",), "truncate[4]", "s_trunc"),
        (("ntz",), "year", "ntz_year"),
        (("s",), "identity", "s"),
    ]
    assert dict(plan.properties) == {
        "format-version": "3",
        "write.delete.mode": "merge-on-read",
        "comment": "a table",
    }


def test_alter_table_binds_each_form(lake: Any) -> None:
    def changes(sql: str) -> list[tuple[str, dict[str, Any]]]:
        return [(c.kind, dict(c.args)) for c in _bind(lake, sql).changes]

    add = changes("ALTER TABLE db.t ADD COLUMNS (a INT, b STRING COMMENT 'x' FIRST)")
    assert [k for k, _ in add] == ["add_column", "add_column"]
    assert add[1][1]["doc"] == "x" and add[1][1]["first"] is True
    assert changes("ALTER TABLE db.t ALTER COLUMN n TYPE BIGINT")[0][1][
        "type"
    ].__class__.__name__ == ("LongType")
    assert changes("ALTER TABLE db.t ALTER COLUMN n AFTER id") == [
        ("move_column", {"column": ("n",), "after": ("id",)})
    ]
    assert changes("ALTER TABLE db.t REPLACE PARTITION FIELD ts_day WITH hours(ts) AS hr")[1][
        1
    ] == {
        "source": ("ts",),
        "transform": "hour",
        "name": "hr",
        "named": True,
    }
    assert (
        changes("ALTER TABLE db.t WRITE DISTRIBUTED BY PARTITION LOCALLY ORDERED BY n DESC")[0][1][
            "distribution"
        ]
        == "hash"
    )
    assert changes("ALTER TABLE db.t WRITE UNORDERED") == [
        ("write_order", {"fields": (), "distribution": "none"})
    ]
    branch = changes(
        "ALTER TABLE db.t CREATE BRANCH IF NOT EXISTS b AS OF VERSION 5 RETAIN 2 DAYS "
        "WITH SNAPSHOT RETENTION 3 SNAPSHOTS 4 HOURS"
    )[0][1]
    assert branch == {
        "name": "b",
        "replace": False,
        "if_not_exists": True,
        "snapshot": 5,
        "max_ref_age_ms": 2 * 86_400_000,
        "min_snapshots": 3,
        "max_snapshot_age_ms": 4 * 3_600_000,
    }
    assert changes("ALTER TABLE db.t UNSET TBLPROPERTIES IF EXISTS ('k', 'x')") == [
        ("unset_properties", {"keys": ("k", "x"), "if_exists": True})
    ]


def test_bad_statements_are_one_line_at_their_place(lake: Any) -> None:
    spark = FakeSpark({("staging",): "temporary view staging"})
    bad = {
        "CREATE TABLE t USING parquet AS SELECT * FROM db.t": (UnsupportedError, "names db.t"),
        "CREATE TABLE db.u (a INTERVAL DAY)": (UnsupportedError, "Iceberg has no such type"),
        "CREATE TABLE db.u (a INT, A STRING)": (UnsupportedError, "defined twice"),
        "INSERT INTO staging VALUES (1)": (UnsupportedError, "temporary view staging is not a"),
        "INSERT INTO parquet.`/x` VALUES (1)": (UnsupportedError, "file source"),
        "ALTER TABLE db.t FROB": (SqlSyntaxError, "line 1, column 18"),
        "ALTER TABLE db.t ADD PARTITION FIELD bucket(id)": (SqlSyntaxError, "bucket takes"),
        "ALTER TABLE db.t ADD PARTITION FIELD frob(id)": (UnsupportedError, "unknown partition"),
        "CALL mor.system.migrate(table => 'db.t')": (UnsupportedError, "CALL"),
        "CACHE TABLE db.t": (MorError, ""),
        "CREATE VIEW v AS SELECT * FROM db.t": (UnsupportedError, "TEMPORARY VIEW"),
        "ANALYZE TABLE db.t COMPUTE STATISTICS": (UnsupportedError, "names db.t, a table of mor"),
    }
    for sql, (kind, text) in bad.items():
        try:
            plan = _bind(lake, sql, spark)
        except kind as e:
            assert text in str(e), (sql, str(e))
            assert "\n" not in str(e)
            continue
        assert isinstance(plan, SparkStatement) and kind is MorError, (sql, plan)


# --- the catalog's statements, run ----------------------------------------------------------------


def test_create_describe_show_and_drop(lake: Any) -> None:
    t = lake.load_table("db.t")
    schema = t.schema()
    assert [(f.field_id, f.name) for f in schema.fields] == [
        (1, "id"), (2, "p"), (3, "ts"), (4, "amt"), (5, "n"), (6, "st"),
    ]  # fmt: skip
    assert [(f.field_id, f.name) for f in schema.find_field("st").field_type.fields] == [
        (7, "a"), (8, "b"),
    ]  # fmt: skip
    assert [(f.field_id, str(f.transform), f.name) for f in t.spec().fields] == [
        (1000, "identity", "p"),
        (1001, "day", "ts_day"),
    ]
    assert t.properties["k"] == "v" and t.properties["write.parquet.compression-codec"] == "zstd"
    out = _run(lake, "SHOW TABLES IN db")
    assert out.columns == ["namespace", "tableName", "isTemporary"]
    assert out.rows == [("db", "t", False)]
    assert _run(lake, "SHOW NAMESPACES").rows == [("db",)]
    desc = _run(lake, "DESCRIBE EXTENDED db.t").rows
    assert desc[0] == ("id", "bigint NOT NULL", "key")
    assert ("Part 1", "days(ts)", "") in desc and ("Provider", "iceberg", "") in desc
    assert _run(lake, "DESC db.t st").rows[1] == ("data_type", "struct<a:int,b:string>")
    assert _run(lake, "SHOW TBLPROPERTIES db.t ('k')").rows == [("k", "v")]
    # SHOW CREATE TABLE prints a statement that makes the same table
    text = _run(lake, "SHOW CREATE TABLE db.t").rows[0][0]
    again = text.replace("CREATE TABLE db.t", "CREATE TABLE db.t2").split("LOCATION")[0]
    _run(lake, again + "TBLPROPERTIES ('k' = 'v')")
    t2 = lake.load_table("db.t2")
    assert t2.schema() == schema and t2.spec() == t.spec()
    # CREATE over an existing table, DROP of a missing one: one line, nothing changed
    with pytest.raises(MorError, match="already exists"):
        _run(lake, "CREATE TABLE db.t (a INT)")
    assert _run(lake, "CREATE TABLE IF NOT EXISTS db.t (a INT)").report["created"] is False
    with pytest.raises(TableNotFoundError, match="db.nope"):
        _run(lake, "DROP TABLE db.nope")
    with pytest.raises(TableNotFoundError, match="namespace nope not found"):
        _run(lake, "CREATE TABLE nope.x (a INT)")
    _run(lake, "DROP TABLE db.t2")
    assert not lake.table_exists("db.t2")
    with pytest.raises(MorError, match="not empty"):
        _run(lake, "DROP NAMESPACE db")


def test_alter_table_changes_as_iceberg_does(lake: Any) -> None:
    for sql in (
        "ALTER TABLE db.t ADD COLUMNS (c INT COMMENT 'cc', d STRING AFTER id)",
        "ALTER TABLE db.t ADD COLUMN st.z DOUBLE",
        "ALTER TABLE db.t RENAME COLUMN c TO c2",
        "ALTER TABLE db.t ALTER COLUMN n TYPE BIGINT",
        "ALTER TABLE db.t ALTER COLUMN amt TYPE DECIMAL(12,2)",
        "ALTER TABLE db.t ALTER COLUMN d COMMENT 'dd'",
        "ALTER TABLE db.t ALTER COLUMN c2 FIRST",
        "ALTER TABLE db.t SET TBLPROPERTIES ('k' = 'v2', 'x' = '1')",
        "ALTER TABLE db.t UNSET TBLPROPERTIES ('x')",
        "ALTER TABLE db.t ADD PARTITION FIELD bucket(8, id) AS shard",
        "ALTER TABLE db.t REPLACE PARTITION FIELD ts_day WITH hours(ts)",
        "ALTER TABLE db.t DROP PARTITION FIELD shard",
        "ALTER TABLE db.t WRITE ORDERED BY n DESC NULLS LAST, id",
        "ALTER TABLE db.t SET IDENTIFIER FIELDS id",
        "ALTER TABLE db.t DROP COLUMN st.b",
    ):
        _run(lake, sql)
    t = lake.load_table("db.t")
    s = t.schema()
    assert [f.name for f in s.fields] == ["c2", "id", "d", "p", "ts", "amt", "n", "st"]
    assert str(s.find_type("n")) == "long" and str(s.find_type("amt")) == "decimal(12, 2)"
    assert s.find_field("d").doc == "dd" and s.find_field("c2").doc == "cc"
    assert [f.name for f in s.find_field("st").field_type.fields] == ["a", "z"]
    assert t.properties["k"] == "v2" and "x" not in t.properties
    # one new spec a statement (REPLACE PARTITION FIELD: one), field ids never reused
    specs = [[(f.field_id, str(f.transform), f.name) for f in s.fields] for s in t.specs().values()]
    assert specs == [
        [(1000, "identity", "p"), (1001, "day", "ts_day")],
        [(1000, "identity", "p"), (1001, "day", "ts_day"), (1002, "bucket[8]", "shard")],
        [(1000, "identity", "p"), (1002, "bucket[8]", "shard"), (1003, "hour", "ts_hour")],
        [(1000, "identity", "p"), (1003, "hour", "ts_hour")],
    ]
    order = t.sort_order()
    fields = [
        (s.find_column_name(f.source_id), f.direction.value, f.null_order.value)
        for f in order.fields
    ]
    assert fields == [("n", "desc", "nulls-last"), ("id", "asc", "nulls-first")]
    assert t.properties["write.distribution-mode"] == "range"
    assert s.identifier_field_ids == [s.find_field("id").field_id]
    # what Iceberg refuses: one line each, the table as it was
    before = lake.load_table("db.t").metadata_location
    for sql, text in (
        ("ALTER TABLE db.t ALTER COLUMN n TYPE INT", "n"),
        ("ALTER TABLE db.t ADD COLUMN r INT NOT NULL", "required column"),
        ("ALTER TABLE db.t ALTER COLUMN d SET NOT NULL", "optional column required"),
        ("ALTER TABLE db.t DROP COLUMN p", "partition field p uses it"),
        ("ALTER TABLE db.t DROP COLUMN id", "identifier field"),
        ("ALTER TABLE db.t SET IDENTIFIER FIELDS d", "not a required field"),
        ("ALTER TABLE db.t DROP COLUMN n", "sort order uses it"),
        ("ALTER TABLE db.t RENAME COLUMN nope TO x", "nope"),
        ("ALTER TABLE db.t DROP PARTITION FIELD bucket(3, id)", "no partition field"),
        ("ALTER TABLE db.t SET TBLPROPERTIES ('format-version' = '1')", "format-version 1"),
        ("ALTER TABLE db.t DROP BRANCH nope", "no such branch"),
        ("ALTER TABLE db.t CREATE TAG x", "no snapshot yet"),
    ):
        with pytest.raises((MorError, ColumnNotFoundError), match=text) as e:
            _run(lake, sql)
        assert "\n" not in str(e.value), sql
    assert lake.load_table("db.t").metadata_location == before


def test_a_table_upgraded_to_v3_and_created_v3(lake: Any) -> None:
    _run(lake, "ALTER TABLE db.t SET TBLPROPERTIES ('format-version' = '3')")
    md = lake.load_table("db.t").metadata
    assert md.format_version == 3 and md.next_row_id == 0
    _run(lake, "CREATE TABLE db.v3 (a INT) TBLPROPERTIES ('format-version' = '3')")
    md = lake.load_table("db.v3").metadata
    assert md.format_version == 3 and md.next_row_id == 0 and "format-version" not in md.properties


def test_a_script_is_checked_whole_against_what_it_creates(lake: Any, tmp_path: Path) -> None:
    """Statements naming a table or namespace an earlier statement of the script creates are
    checked against it (nothing run); one naming a table an earlier one drops fails, before
    any statement ran."""
    from mor.planner.pending import Pending

    script = split_statements(
        "CREATE NAMESPACE s2;\n"
        "CREATE TABLE s2.a (x INT, y STRING) PARTITIONED BY (y);\n"
        "ALTER TABLE s2.a ADD COLUMN z DOUBLE;\n"
        "DESCRIBE s2.a;\n"
        "SHOW CREATE TABLE s2.a;\n"
        "DROP TABLE s2.a;\n"
        "DESCRIBE s2.a"
    )
    pending = Pending()
    for stmt in script[:-1]:
        StatementExecution(stmt, catalog=lake).check(pending)
    with pytest.raises(TableNotFoundError, match="an earlier statement of the script drops it"):
        StatementExecution(script[-1], catalog=lake).check(pending)
    assert not lake.namespace_exists("s2")  # nothing ran
    # the pending table is the one the script makes: DESCRIBE of it, checked, sees column z
    pending = Pending()
    for stmt in script[:3]:
        StatementExecution(stmt, catalog=lake).check(pending)
    md = pending.tables["mor:s2.a"]
    assert [f.name for f in md.schema().fields] == ["x", "y", "z"]


# --- commits: Iceberg's validations ---------------------------------------------------------------


def test_overwrite_isolation_as_icebergs(catalog: Any, tmp_path: Path) -> None:
    """INSERT OVERWRITE's commit (OverwriteFiles) with a concurrent append landing between the
    head the statement read and its commit: by default the filter applies at commit time, so
    the file added meanwhile is replaced too (Iceberg's overwriteByRowFilter); under
    `serializable` it is a conflict naming the file and nothing commits (validateNoConflictingData);
    `snapshot` lets it through. ReplacePartitions likewise, only for a partition it replaces."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.typedef import Record
    from pyiceberg.types import LongType, NestedField, StringType

    from mor.planner.scan_planning import live_entries
    from mor.planner.state import ProcessCaches
    from mor.writer.conflicts import ConflictError
    from mor.writer.files import data_file_of
    from mor.writer.operations import OverwriteFiles
    from mor.writer.producer import SnapshotProducer

    catalog.create_namespace("w")
    rows = pa.table({"id": pa.array([1, 2], pa.int64()), "p": pa.array(["a", "b"])})
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "p", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))

    def ids(name: str) -> list[int]:
        return sorted(catalog.load_table(name).scan().to_arrow()["id"].to_pylist())

    for isolation, dynamic in [
        (None, False), ("snapshot", False), ("serializable", False), ("serializable", True),
        ("serializable", "other"),
    ]:  # fmt: skip
        name = f"w.t_{isolation}_{dynamic}"
        table = catalog.create_table(name, schema=schema, partition_spec=spec)
        table.append(rows)
        table = catalog.load_table(name)
        head = table.current_snapshot()
        src = Resolver(catalog, PathMap.of({})).by_name(tuple(name.split(".")))
        entries = live_entries(src, head, ProcessCaches())
        # the statement's new file (partition a), written before the concurrent append lands
        path = f"{table.metadata.location}/data/p=a/new-{isolation}.parquet"
        pq.write_table(  # with the field ids, as mor's tasks write them
            pa.table({"id": pa.array([10], pa.int64()), "p": pa.array(["a"])}).cast(
                schema_to_pyarrow(table.schema())
            ),
            path.removeprefix("file://"),
        )
        new = data_file_of(table, path, Record("a"), 0)
        late = "b" if dynamic == "other" else "a"
        table.append(pa.table({"id": pa.array([99], pa.int64()), "p": pa.array([late])}))
        op = OverwriteFiles(added_data=[new], replace_partitions=bool(dynamic), isolation=isolation)
        if dynamic:
            op.replaces = lambda f: f.partition[0] == "a"
            removed = [e for e in entries if e.file.partition[0] == "a"]
        else:
            op.replaces = lambda f: True
            removed = list(entries)
        for e in removed:
            e.file.spec_id = e.spec_id
            op.remove(e.file)
        producer = SnapshotProducer(catalog, name)
        if isolation == "serializable" and dynamic != "other":
            with pytest.raises(ConflictError, match=r"added data file .*validateNoConflictingData"):
                producer.commit(op, head)
            assert ids(name) == [1, 2, 99]  # nothing committed
        else:
            producer.commit(op, head)
            want = {(None, False): [10], ("snapshot", False): [10]}.get((isolation, dynamic))
            assert ids(name) == (want if want is not None else [2, 10, 99]), name
