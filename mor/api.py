"""The public Python API: queries (`mor_sql`, `table`), their plans (`explain`, `plan_query`,
`metrics`), row-level changes (`changes`), table health (`health`), the catalogs they read
(`default_catalog`, `resolve_catalog`) and the process's caches (`clear_caches`,
`cache_figures`). The CLI and the shell call these; nothing here starts a JVM unless a query
runs or is checked."""

from __future__ import annotations

import functools
import inspect
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from pyiceberg.catalog import Catalog

from mor.planner.attach import attach_files
from mor.planner.errors import ArgumentError, MorError, TableNotFoundError
from mor.planner.nodes import Plan
from mor.planner.query_metrics import MorMetrics, static_metrics
from mor.planner.requests import counting
from mor.planner.settings import (
    Settings,
    applied,
    default_catalog_name,
    effective_path_map,
    user_config,
    warehouse_dir,
)
from mor.planner.sources import (
    PathMap,
    Resolver,
    catalog_failure,
    is_table_path,
    load_named_catalog,
)
from mor.planner.sql import Statement, bind, one_statement
from mor.planner.state import CacheFigures, ProcessCaches, caches
from mor.rules import MOR_RULES, TraceStep, optimize

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULT_CATALOG_NAME = "mor"
_F = TypeVar("_F", bound=Callable[..., Any])


def _kind(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def _mapping_of_text(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, (str, int, float, bool)) for k, v in value.items()
    )


# what each argument of the public functions must be, and how to say so
_ARGS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "sql": (
        lambda v: (isinstance(v, str) and v.strip() != "") or isinstance(v, Statement),
        "a SQL text (one SELECT)",
    ),
    "name": (lambda v: isinstance(v, str) and v.strip() != "", "a table name or path"),
    "table": (lambda v: isinstance(v, str) and v.strip() != "", "a table name or path"),
    "catalog": (
        lambda v: v is None or isinstance(v, (Catalog, str)),
        "a pyiceberg Catalog, a catalog name or None",
    ),
    "spark": (
        lambda v: v is None or (hasattr(v, "createDataFrame") and hasattr(v, "sql")),
        "a SparkSession (classic or Spark Connect) or None",
    ),
    "path_map": (
        lambda v: (
            v is None or (_mapping_of_text(v) and all(isinstance(x, str) for x in v.values()))
        ),
        "a dict of recorded prefix -> actual prefix, or None",
    ),
    "io_properties": (
        lambda v: v is None or _mapping_of_text(v),
        "a dict of FileIO properties (str -> str), or None",
    ),
    "settings": (
        lambda v: v is None or isinstance(v, (Settings, Mapping)),
        "a dict of settings, a Settings or None",
    ),
    "warehouse": (lambda v: v is None or isinstance(v, (str, os.PathLike)), "a folder or None"),
    "snapshot_id": (
        lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
        "a snapshot id (int) or None",
    ),
    "where": (lambda v: v is None or isinstance(v, str), "a Spark SQL condition or None"),
    "checkpoint": (
        lambda v: isinstance(v, (str, os.PathLike)) and os.fspath(v).strip() != "",
        "a checkpoint file's path",
    ),
    "max_commits": (
        lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1),
        "a number of commits, 1 or more, or None",
    ),
    "start_snapshot_id": (
        lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
        "a snapshot id (int) or None",
    ),
    "columns": (
        lambda v: (
            v is None or (isinstance(v, (list, tuple)) and all(isinstance(c, str) for c in v))
        ),
        "a list of column names or None",
    ),
}


def checked(fn: _F) -> _F:
    """Check the arguments of a public function before anything runs: a wrong kind is one
    ArgumentError naming the function and the argument (`explain(None)`), not an
    AttributeError from deep inside."""
    sig = inspect.signature(fn)
    names = [n for n in sig.parameters if n in _ARGS]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise ArgumentError(f"{fn.__name__}(): {e}") from None
        for n in names:
            if n in bound.arguments:
                ok, what = _ARGS[n]
                value = bound.arguments[n]
                if not ok(value):
                    raise ArgumentError(f"{fn.__name__}(): {n} must be {what}, not {_kind(value)}")
        return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


SettingsArg = Settings | Mapping[str, Any] | None


def default_catalog(warehouse: str | None = None) -> Catalog:
    """The embedded catalog: SQLite at <warehouse>/catalog.db, created on first use."""
    from pyiceberg.catalog.sql import SqlCatalog

    wh = warehouse_dir(warehouse)
    os.makedirs(wh, exist_ok=True)
    return SqlCatalog(
        DEFAULT_CATALOG_NAME,
        # SQLAlchemy decodes %-escapes in the URL: a folder named `a b%20c` must be escaped
        uri=f"sqlite:///{quote(os.path.join(wh, 'catalog.db'))}",
        warehouse=f"file://{wh}",
    )


def resolve_catalog(catalog: Catalog | str | None, warehouse: str | None = None) -> Catalog:
    """The catalog to read from. The embedded one must exist: a read creates nothing."""
    if catalog is None:
        catalog = default_catalog_name(warehouse)
    if catalog is None:
        db = os.path.join(warehouse_dir(warehouse), "catalog.db")
        if not os.path.exists(db):
            raise TableNotFoundError(
                f"no embedded catalog at {db} (the warehouse is --warehouse, $MOR_WAREHOUSE, "
                f"`warehouse` in {user_config().path} or ./warehouse): run `mor demo` to "
                "create one there, or name your catalog with --catalog / catalog="
            )
        return default_catalog(warehouse)
    if isinstance(catalog, str):
        try:
            return load_named_catalog(catalog)
        except MorError:
            raise
        except Exception as e:  # noqa: BLE001 - pyiceberg raises several kinds here
            raise catalog_failure(catalog, e) from e
    if isinstance(catalog, Catalog):
        return catalog
    raise MorError(f"catalog must be a pyiceberg Catalog, a catalog name or None, not {catalog!r}")


@dataclass(frozen=True)
class Planned:
    """A query planned end to end, JVM-free: the bound plan (a SparkQuery over one IcebergScan
    per table reference), the plan after scan planning and the merge-on-read rules, the trace."""

    logical: Plan
    optimized: Plan
    trace: tuple[TraceStep, ...]
    planning_seconds: float = 0.0

    def metrics(self) -> MorMetrics:
        """Delete files and bytes read by kind, data rows, planning time (no data is read)."""
        return static_metrics(self.optimized, self.planning_seconds)


@checked
def plan_query(
    sql: str | Statement,
    *,
    catalog: Catalog | str | None = None,
    path_map: dict[str, str] | None = None,
    io_properties: dict[str, str] | None = None,
    warehouse: str | None = None,
    settings: SettingsArg = None,
    cache: ProcessCaches | None = None,
) -> Planned:
    """The one planning pipeline (API, EXPLAIN and CLI all call it): bind the statement (find
    its table references and what each needs), plan each scan's files, apply the merge-on-read
    rules. `sql`: one statement's text, or a Statement from `planner.sql.split_statements`.
    `cache`: what planning keeps and reuses (default: this process's caches)."""
    with applied(settings):
        return _plan(sql, catalog, path_map, io_properties, warehouse, cache or caches())


def _plan(
    sql: str | Statement,
    catalog: Catalog | str | None,
    path_map: dict[str, str] | None,
    io_properties: dict[str, str] | None,
    warehouse: str | None,
    cache: ProcessCaches,
) -> Planned:
    if isinstance(catalog, str):
        catalog = resolve_catalog(catalog)  # an unknown catalog name fails even for iceberg_scan
    # the embedded catalog is created only when a query names a table
    resolver = Resolver(
        lambda: resolve_catalog(catalog, warehouse),
        PathMap.of(effective_path_map(path_map)),
        io_properties,
    )
    started = time.perf_counter()
    stmt = one_statement(sql) if isinstance(sql, str) else sql
    logical = bind(stmt, resolver)
    trace = [TraceStep("bind (table references, their columns and filters)", True, logical)]
    planned = attach_files(logical, resolver, cache)
    trace.append(TraceStep("plan_files (scan planning)", planned is not logical, planned))
    optimized, rule_steps = optimize(planned, MOR_RULES)
    return Planned(logical, optimized, tuple(trace + rule_steps), time.perf_counter() - started)


@checked
def mor_sql(
    sql: str,
    *,
    catalog: Catalog | str | None = None,
    spark: SparkSession | None = None,
    path_map: dict[str, str] | None = None,
    io_properties: dict[str, str] | None = None,
    settings: SettingsArg = None,
) -> DataFrame:
    """Run one SELECT over Iceberg tables; returns a lazy DataFrame of exactly the live rows.

    Spark analyses the query before this returns: an unknown function or column is a MorError
    naming it, with its line and column in `sql`. `settings`: tuning settings for this call,
    e.g. `{"position_bitmap_bytes": 0}`, over the environment's (docs/configuration.md).

    `DELETE FROM t [WHERE ...]`, `UPDATE t SET ... [WHERE ...]` and `MERGE INTO t USING ...`
    run at once, each as one merge-on-read commit on the table's main branch
    (`ns.t.branch_<name>`: that branch; mor/dml.py, mor/merge.py), and return a one-row
    DataFrame: `num_affected_rows` (a MERGE's also by kind: `num_updated_rows`,
    `num_deleted_rows`, `num_inserted_rows`) and the `snapshot_id` committed (NULL when
    nothing changed)."""
    from mor.dml import is_row_write
    from mor.execution import QueryExecution

    stmt = one_statement(sql)

    if is_row_write(stmt.tree):
        from mor.dml import run_row_write
        from mor.physical import local_session

        with applied(settings):
            session = spark if spark is not None else local_session()
            report = run_row_write(stmt, catalog=catalog, spark=session)
        if report.statement == "MERGE":  # the counts Spark 4's and Delta's MERGE return
            return session.createDataFrame(
                [(report.rows, report.updated, report.deleted, report.inserted, report.snapshot)],
                "num_affected_rows bigint, num_updated_rows bigint, num_deleted_rows bigint, "
                "num_inserted_rows bigint, snapshot_id bigint",
            )
        return session.createDataFrame(
            [(report.rows, report.snapshot)], "num_affected_rows bigint, snapshot_id bigint"
        )
    return QueryExecution(
        stmt,
        catalog=catalog,
        path_map=path_map,
        io_properties=io_properties,
        settings=settings,
        spark=spark,
    ).dataframe


@contextmanager
def mor_errors(df: DataFrame | None = None) -> Iterator[None]:
    """Spark actions inside raise mor's errors where mor can tell what failed:

        with mor_errors(df):
            rows = df.collect()

    A failure of one of mor's guards inside Spark's tasks (a data file with more rows than its
    metadata records), a data or delete file missing, truncated, not Parquet or failing its
    checksum, becomes the MorError subclass naming it (DataFileError, InternalError, ...),
    raised from Spark's exception. With `df` (a DataFrame `mor_sql` or `table` returned), a
    failure that names no file is checked against that query's files for a column stored with
    another type. Any other exception passes unchanged."""
    try:
        yield
    except MorError:
        raise
    except Exception as e:
        from mor.execution import execution_of
        from mor.physical.spark.spark_errors import recognised

        run = execution_of(df)
        found = recognised(e, run.plan if run is not None else None)
        if found is None:
            raise
        raise found from e


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
) -> str:
    """The plan of `sql`: the query Spark runs, over the merge-on-read scans mor plans.

    Reads metadata only, no data file. `check` has Spark analyse the query around the scans
    over empty views (so an unknown function or column is reported here too, and the output
    columns are shown); it needs a Spark session (started when none is given). With
    `check=False` no JVM is started. `verbose` adds the planning trace; `physical` lists the
    DataFrame operations in order. `analyze` adds the merge-on-read metrics and, running counts
    on Spark, the rows each kind of delete removed.
    """
    from mor.dml import explained, is_row_write
    from mor.execution import QueryExecution

    stmt = one_statement(sql) if isinstance(sql, str) else sql
    head = ""
    if is_row_write(stmt.tree):  # DELETE: the plan of the rows it deletes
        stmt, head = explained(stmt, resolve_catalog(catalog, warehouse))
    run = QueryExecution(
        stmt,
        catalog=catalog,
        path_map=path_map,
        io_properties=io_properties,
        warehouse=warehouse,
        settings=settings,
        spark=spark,
    )
    return head + run.explain(verbose=verbose, physical=physical, analyze=analyze, check=check)


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
) -> dict[str, Any]:
    """How much the table's deletes cost its readers, and what to run (mor/health_figures.py):
    a JSON-ready dict with the table's counts at top level (data_files, data_records,
    position_delete_files, equality_delete_files, deletion_vectors, deleted_records,
    delete_ratio, equality_keys, small_files, read_amplification, advice) and a `partitions`
    list of the same counts. Metadata and position delete files only, no Spark, unless
    `exact`: the rows equality deletes remove are then counted by running the anti-joins."""
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
    )
