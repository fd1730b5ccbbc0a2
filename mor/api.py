"""The public Python API: queries (`mor_sql`, `table`), their plans (`explain`, `plan_query`,
`metrics`), row-level changes (`changes`), table health (`health`), the catalogs they read
(`default_catalog`, `resolve_catalog`) and the process's caches (`clear_caches`,
`cache_figures`). The CLI and the shell call these; nothing here starts a JVM unless a query
runs or is checked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyiceberg.catalog import Catalog

from mor.catalogs import DEFAULT_CATALOG_NAME, default_catalog, resolve_catalog
from mor.execution import mor_errors
from mor.planner.errors import ArgumentError, MorError, UnsupportedError
from mor.planner.query_metrics import MorMetrics
from mor.planner.requests import counting
from mor.planner.settings import effective_path_map, warehouse_dir
from mor.planner.sources import PathMap, Resolver, is_table_path
from mor.planner.sql import Statement
from mor.planner.state import CacheFigures, caches
from mor.planning import Planned, SettingsArg, checked, plan_query

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "DEFAULT_CATALOG_NAME",
    "Planned",
    "SettingsArg",
    "cache_figures",
    "changes",
    "checked",
    "clear_caches",
    "default_catalog",
    "effective_path_map",
    "explain",
    "health",
    "metrics",
    "mor_errors",
    "mor_sql",
    "plan_query",
    "resolve_catalog",
    "table",
    "warehouse_dir",
    "write",
    "register",
]


@checked
def mor_sql(
    sql: str,
    *,
    catalog: Catalog | str | None = None,
    spark: SparkSession | None = None,
    path_map: dict[str, str] | None = None,
    io_properties: dict[str, str] | None = None,
    settings: SettingsArg = None,
    branch: str = "main",
    dry_run: bool = False,
    views: dict[str, DataFrame] | None = None,
) -> DataFrame:
    """Run one statement over Iceberg tables, and anything else Spark's session names.

    A query (SELECT ...) returns a lazy DataFrame of exactly the live rows. Spark analyses it
    before this returns: an unknown function or column is a MorError naming it, with its line
    and column in `sql`. `settings`: tuning settings for this call, e.g.
    `{"position_bitmap_bytes": 0}`, over the environment's (docs/configuration.md).

    `DELETE FROM t [WHERE ...]`, `UPDATE t SET ... [WHERE ...]` and `MERGE INTO t USING ...`
    run at once, each as one merge-on-read commit on `branch` of the table (Spark's name
    `ns.t.branch_<name>` names one too; mor/row_writes.py), and return a one-row DataFrame:
    `num_affected_rows` (a MERGE's also by kind: `num_updated_rows`, `num_deleted_rows`,
    `num_inserted_rows`) and the `snapshot_id` committed (NULL when nothing changed, and
    with `dry_run`, which counts and commits nothing). `EXPLAIN [VERBOSE|PHYSICAL|ANALYZE]
    <statement>` returns one row, its `plan`.

    Names are resolved as Spark resolves them (docs/semantics.md, "Names"): a table of
    mor's catalog (`ns.t`, `cat.ns.t`), else whatever Spark's session holds (temporary
    views, `parquet.`/path``, tables of `spark_catalog` and other catalogs), and the
    DataFrames handed in by name: `views={"staging": df}`. A name both mor's catalog and
    Spark's session hold is an error, never a guess.

    Tables are created, filled and changed in SQL too: CREATE TABLE [AS SELECT], REPLACE
    TABLE, DROP TABLE, CREATE/DROP NAMESPACE, ALTER TABLE (columns, properties, partition
    fields, write order, branches and tags), INSERT INTO / INSERT OVERWRITE (a row:
    `num_affected_rows`, `snapshot_id`); SHOW NAMESPACES/TABLES/CREATE TABLE/TBLPROPERTIES and
    DESCRIBE return their rows; a statement naming none of mor's tables (SET, CREATE
    TEMPORARY VIEW ... USING, ...) is Spark's and runs as it is."""
    from mor.statements import StatementExecution

    return StatementExecution(
        sql,
        catalog=catalog,
        path_map=path_map,
        io_properties=io_properties,
        settings=settings,
        spark=spark,
        branch=branch,
        dry_run=dry_run,
        views=views,
    ).dataframe()


@checked
def explain(
    sql: str | Statement,
    *,
    catalog: Catalog | str | None = None,
    path_map: dict[str, str] | None = None,
    io_properties: dict[str, str] | None = None,
    verbose: bool = False,
    physical: bool = False,
    analyze: bool = False,
    spark: SparkSession | None = None,
    check: bool = True,
    warehouse: str | None = None,
    settings: SettingsArg = None,
    branch: str = "main",
) -> str:
    """The plan of `sql`: the query Spark runs, over the merge-on-read scans mor plans (of a
    DELETE, UPDATE or MERGE: the query whose rows it changes, at the head of `branch`).

    Reads metadata only, no data file. `check` has Spark analyse the query around the scans
    over empty views (so an unknown function or column is reported here too, and the output
    columns are shown); it needs a Spark session (started when none is given). With
    `check=False` no JVM is started. `verbose` adds the planning trace; `physical` lists the
    DataFrame operations in order. `analyze` adds the merge-on-read metrics and, running counts
    on Spark, the rows each kind of delete removed.
    """
    from mor.statements import StatementExecution

    return StatementExecution(
        sql,
        catalog=catalog,
        path_map=path_map,
        io_properties=io_properties,
        warehouse=warehouse,
        settings=settings,
        spark=spark,
        branch=branch,
    ).explain(verbose=verbose, physical=physical, analyze=analyze, check=check)


@checked
def write(
    df: DataFrame,
    table: str,
    mode: str = "append",
    *,
    partition: dict[str, Any] | None = None,
    partitioned_by: list[str] | None = None,
    properties: dict[str, str] | None = None,
    catalog: Catalog | str | None = None,
    branch: str = "main",
    isolation: str | None = None,
    path_map: dict[str, str] | None = None,
    io_properties: dict[str, str] | None = None,
    settings: SettingsArg = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Write a DataFrame's rows into a table of mor's catalog, by column name, as
    `df.writeTo(table)` does with Iceberg's runtime, on any Spark (3.5, 4.x, Spark Connect):
    Spark's tasks write the data files (laid out as Iceberg's writer lays them out: by
    partition, in the table's sort order), one commit.

    `mode`: "append" (`append()`), "overwrite" (every row, or the rows of `partition`:
    {column: value} of identity partition columns, which the DataFrame then does not carry),
    "overwrite_partitions" (`overwritePartitions()`: the partitions the rows land in),
    "create", "create_or_replace", "replace" (`create()`, ...: the table made from the
    DataFrame's columns, `partitioned_by` transforms such as "days(ts)", `properties`).
    `isolation`: "serializable" or "snapshot" for an overwrite (Iceberg's `isolation-level`):
    a commit landing meanwhile on what it replaces then stops it. Returns what was written
    (rows, files, the snapshot committed) as a dict."""
    from mor.dataframe_writes import write_statement

    if partition:
        present = [c for c in partition if c.lower() in {x.lower() for x in df.columns}]
        if present:
            raise ArgumentError(
                f"write(): the DataFrame carries {present[0]}, which partition= sets: drop it"
            )
    ex = write_statement(
        df,
        table,
        mode,
        partition=partition,
        partitioned_by=partitioned_by,
        properties=properties,
        branch=branch,
        isolation=isolation,
        catalog=catalog,
        path_map=path_map,
        io_properties=io_properties,
        settings=settings,
        dry_run=dry_run,
    )
    return ex.run().report


def register(spark: SparkSession | None = None) -> None:
    """Register mor's Python data source in a pyspark 4.x session (the active one by
    default), so that Spark's own writer forms write tables of mor's catalog:
    `df.write.format("mor").mode("append").save("ns.t")` (the catalog: the option
    `catalog`, else mor's configured one)."""
    from mor.physical.spark.session import active_session

    session = spark if spark is not None else active_session()
    if session is None:
        raise UnsupportedError("register(): no Spark session is active: pass spark=")
    if not hasattr(session, "dataSource"):
        raise UnsupportedError(
            "register(): Python data sources need pyspark 4.0 or later; on pyspark 3.5 write "
            "with mor.write(df, table)"
        )
    from mor.datasource import register_data_source

    register_data_source(session)


def clear_caches() -> None:
    """Forget everything this process keeps between queries (planner/state.py: manifests,
    planned scans, delete files read, resolved positions, DataFrames built): the next query
    plans and reads as a new process's first query would. Results never depend on it."""
    import mor.physical.scan.reads  # noqa: F401 - registers its per-session probes
    import mor.physical.spark.reuse  # noqa: F401 - registers what physical/ keeps per Spark session

    caches().clear()


def cache_figures() -> list[CacheFigures]:
    """Every cache of this process: what it holds, its entries and weight now, its bound."""
    import mor.physical.scan.reads  # noqa: F401 - registers its per-session probes
    import mor.physical.spark.reuse  # noqa: F401 - registers what physical/ keeps per Spark session

    return caches().figures()


@checked
def metrics(
    sql: str,
    *,
    catalog: Catalog | str | None = None,
    path_map: dict[str, str] | None = None,
    io_properties: dict[str, str] | None = None,
    settings: SettingsArg = None,
) -> MorMetrics:
    """Merge-on-read metrics of `sql` known from planning: delete files, bytes, planning time,
    the object-store requests planning made from the driver."""
    with counting() as requests:
        m = plan_query(
            sql, catalog=catalog, path_map=path_map, io_properties=io_properties, settings=settings
        ).metrics()
    m.store_requests = requests.figures()
    return m


@checked
def table(
    name: str,
    *,
    catalog: Catalog | str | None = None,
    spark: SparkSession | None = None,
    path_map: dict[str, str] | None = None,
    io_properties: dict[str, str] | None = None,
    snapshot_id: int | None = None,
    columns: list[str] | tuple[str, ...] | None = None,
    where: str | None = None,
    settings: SettingsArg = None,
) -> DataFrame:
    """The live rows of one table, for DataFrame users.

    `name`: `ns.table` or `catalog.ns.table`, or the path of a table directory or metadata file.
    `columns`: the columns to return (all by default). `where`: a Spark SQL condition, used to
    prune files and applied to the rows. Read through the same plan as `mor_sql`.
    """
    ref = _table_ref(name)
    if snapshot_id is not None:
        ref += f" VERSION AS OF {int(snapshot_id)}"
    cols = ", ".join(f"`{c.replace('`', '``')}`" for c in columns) if columns else "*"
    sql = f"SELECT {cols} FROM {ref}" + (f" WHERE {where}" if where else "")
    return mor_sql(
        sql,
        catalog=catalog,
        spark=spark,
        path_map=path_map,
        io_properties=io_properties,
        settings=settings,
    )


def _table_literal(name: str) -> str:
    return "'" + name.replace("'", "''") + "'"


def _table_ref(name: str) -> str:
    """A table named as users write it, as a table reference in SQL: iceberg_scan('<path>') for
    a path, else each part of the name quoted."""
    if is_table_path(name):
        return f"iceberg_scan({_table_literal(name)})"
    return ".".join(f"`{p.replace('`', '``')}`" for p in name.split("."))


def _bound(snapshot_id: int | None, timestamp: Any, what: str) -> str:
    """One end of a change range as table_changes takes it: a snapshot id, a timestamp
    (datetime, ISO text or epoch milliseconds) or NULL."""
    import datetime as dt

    if snapshot_id is not None and timestamp is not None:
        raise MorError(f"give {what}_snapshot_id or {what}_timestamp, not both")
    if snapshot_id is not None:
        return str(int(snapshot_id))
    if timestamp is None:
        return "NULL"
    if isinstance(timestamp, (int, float)) and not isinstance(timestamp, bool):
        when = dt.datetime.fromtimestamp(timestamp / 1000, tz=dt.timezone.utc)
    elif isinstance(timestamp, dt.datetime):
        when = timestamp if timestamp.tzinfo else timestamp.replace(tzinfo=dt.timezone.utc)
    elif isinstance(timestamp, str):
        return _table_literal(timestamp)
    else:
        raise MorError(
            f"{what}_timestamp must be a datetime, ISO text or epoch milliseconds, not "
            f"{timestamp!r}"
        )
    return _table_literal(when.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds"))


@checked
def changes(
    table: str,
    *,
    start_snapshot_id: int | None = None,
    end_snapshot_id: int | None = None,
    start_timestamp: Any = None,
    end_timestamp: Any = None,
    catalog: Catalog | str | None = None,
    spark: SparkSession | None = None,
    path_map: dict[str, str] | None = None,
    io_properties: dict[str, str] | None = None,
    settings: SettingsArg = None,
) -> DataFrame:
    """The rows each commit after the start (exclusive; default: the table's first commit) up
    to the end (inclusive; default: the current snapshot) inserted or deleted, every delete
    applied: the end snapshot's columns plus `_change_type` (INSERT, DELETE, and with identifier
    fields UPDATE_BEFORE / UPDATE_AFTER), `_change_ordinal` and `_commit_snapshot_id`.

    The same as `SELECT * FROM table_changes('<table>', start, end)` in `mor_sql`; timestamps
    (datetime, ISO text, epoch milliseconds) name the snapshot current at that time."""
    sql = (
        f"SELECT * FROM table_changes({_table_literal(table)}, "
        f"{_bound(start_snapshot_id, start_timestamp, 'start')}, "
        f"{_bound(end_snapshot_id, end_timestamp, 'end')})"
    )
    return mor_sql(
        sql,
        catalog=catalog,
        spark=spark,
        path_map=path_map,
        io_properties=io_properties,
        settings=settings,
    )


@checked
def health(
    table: str,
    *,
    catalog: Catalog | str | None = None,
    warehouse: str | None = None,
    path_map: dict[str, str] | None = None,
    io_properties: dict[str, str] | None = None,
    snapshot_id: int | None = None,
    exact: bool = False,
    spark: SparkSession | None = None,
    thresholds: Any = None,
    orphans: bool = False,
) -> dict[str, Any]:
    """How much the table's deletes cost its readers, and what to run (mor/health_figures.py):
    a JSON-ready dict with the table's counts at top level (data_files, data_records,
    position_delete_files, equality_delete_files, deletion_vectors, deleted_records,
    delete_ratio, equality_keys, small_files, read_amplification, advice) and a `partitions`
    list of the same counts. Metadata and position delete files only, no Spark, unless
    `exact`: the rows equality deletes remove are then counted by running the anti-joins.
    `history` says what expiry with the table's retention would remove; with `orphans`, the
    store is listed for files nothing references (remove_orphan_files' dry run)."""
    from mor.health_advice import Thresholds
    from mor.health_figures import health as report

    # the catalog is loaded once (a path needs none): planning and the exact count share it
    cat = None if is_table_path(table) else resolve_catalog(catalog, warehouse)
    resolver = Resolver(lambda: cat, PathMap.of(effective_path_map(path_map)), io_properties)
    src = resolver.by_text(table)
    ref = _table_ref(table)

    def live_rows(sid: int) -> dict[str, int]:
        df = mor_sql(
            f"SELECT _file, count(*) AS n FROM {ref} VERSION AS OF {int(sid)} GROUP BY _file",
            catalog=cat,
            spark=spark,
            path_map=path_map,
            io_properties=io_properties,
        )
        with mor_errors(df):
            return {r[0]: r[1] for r in df.collect()}

    name = cat.name if cat is not None else "catalog"
    return report(
        src,
        caches(),
        snapshot_id=snapshot_id,
        live_rows=live_rows if exact else None,
        catalog_name=name,
        thresholds=thresholds
        if isinstance(thresholds, Thresholds)
        else Thresholds(**(thresholds or {})),
        orphans=orphans,
    )
