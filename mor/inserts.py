"""Rows written into tables without Iceberg's runtime: INSERT INTO, INSERT OVERWRITE, CREATE
TABLE AS SELECT, REPLACE TABLE [AS SELECT], and DataFrames written to tables (mor/write.py).

1. the statement is bound by the planner (planner/binding.py): its target, column list,
   PARTITION clause, mode;
2. the head of the branch is read once; the query's rows are planned by mor and analysed by
   Spark, then assigned to the table's columns (physical/appends.store_assigned: Spark's
   store-assignment rules, the session's policy);
3. one Spark job lays the rows out as Iceberg's writer asks Spark to (distribution and sort
   order) and its tasks write the data files (physical/tasks/append_files.py); the driver
   gets one record per file;
4. one commit, as Iceberg's: `AppendFiles` (INSERT INTO; a CTAS's first snapshot, in the same
   catalog commit that creates the table), `OverwriteFiles` (static INSERT OVERWRITE: what
   the PARTITION clause selects, or every row) or `ReplacePartitions` (dynamic: the
   partitions the new rows land in), through the snapshot producer with Iceberg's rules.
   What the statement wrote is removed when anything fails before the commit.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mor import interrupts
from mor.catalog_statements import catalog_of, new_metadata, table_exists
from mor.outcome import Outcome, RunContext
from mor.planner.errors import MorError, TableNotFoundError, UnsupportedError
from mor.planner.statement_plans import CreateTable, InsertRows
from mor.planner.write_statements import quoted
from mor.row_writes import spark_call
from mor.writer.files import partition_key

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame

    from mor.planner.sources import TableSource


@dataclass
class WriteReport:
    """What an INSERT, CTAS or DataFrame write did (or would, `dry_run`)."""

    statement: str
    table: str
    branch: str
    mode: str  # append, overwrite (static), dynamic
    base_snapshot: int | None
    dry_run: bool
    rows: int = 0
    files: int = 0
    bytes: int = 0
    replaced_files: int = 0
    replaced_rows: int = 0
    snapshot: int | None = None
    seconds: float = 0.0

    def line(self) -> str:
        if self.dry_run:
            return (
                f"{self.table}: dry run on snapshot {self.base_snapshot}, nothing written; would "
                f"write {self.rows} rows"
                + (f", replacing {self.replaced_files} data files" if self.mode != "append" else "")
            )
        what = f"{self.rows} rows in {self.files} data files ({self.bytes} bytes)"
        if self.mode != "append":
            what += (
                f", replacing {self.replaced_files} data files ({self.replaced_rows} rows, "
                f"{'the partitions written' if self.mode == 'dynamic' else 'by filter'})"
            )
        if self.snapshot is None:
            return f"{self.table}: no rows; nothing committed; {self.seconds:.1f} s"
        on = f" on {self.branch}" if self.branch != "main" else ""
        return (
            f"{self.table}: wrote {what}; snapshot {self.snapshot} committed{on}; "
            f"{self.seconds:.1f} s"
        )

    def as_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


# --- the table written ------------------------------------------------------------------------


def _source(ctx: RunContext, cat: Catalog, name: str) -> TableSource:
    """The target through the call's path map and store settings (a check: the table as the
    script leaves it)."""
    from mor.planner.settings import effective_path_map
    from mor.planner.sources import PathMap, Resolver

    resolver = Resolver(
        cat, PathMap.of(effective_path_map(ctx.path_map)), ctx.io_properties, pending=ctx.pending
    )
    src = resolver.by_name(tuple(name.split(".")))
    if src.metadata.format_version not in (2, 3):
        raise UnsupportedError(
            f"{name}: format version {src.metadata.format_version}; mor writes v2 and v3 tables"
        )
    return src


def table_columns(schema: Any, table: str) -> list[Any]:
    """The table's columns as the append job assigns to them (Spark types as the table
    presents them: uuid as text)."""
    from mor.physical.appends import TableColumn
    from mor.physical.scan.types import spark_type
    from mor.planner.row_writes import writable

    writable(schema, table, "INSERT")
    return [
        TableColumn(f.name, spark_type(f.field_type.model_dump_json(), table), f.required)
        for f in schema.fields
    ]


def _layout(md: Any, schema: Any, spec: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The spec's fields and the sort order's, as the tasks take them."""
    from pyiceberg.table.sorting import NullOrder, SortDirection

    from mor.planner.schemas import find_path

    partition = tuple(
        (
            f.name,
            str(f.transform),
            str(schema.find_type(f.source_id)),
            find_path(schema, f.source_id),
        )
        for f in spec.fields
    )
    order = md.sort_order_by_id(md.default_sort_order_id)
    sort = tuple(
        (
            str(f.transform),
            str(schema.find_type(f.source_id)),
            find_path(schema, f.source_id),
            f.direction == SortDirection.DESC,
            f.null_order == NullOrder.NULLS_FIRST,
        )
        for f in (order.fields if order is not None else ())
    )
    return partition, sort


def _rows_frame(ctx: RunContext, query: Any, cat: Catalog) -> Any:
    """The query's rows: mor's plan of it, Spark's analysis (its errors here)."""
    from mor.execution import QueryExecution

    run = QueryExecution(
        query,
        catalog=cat,
        path_map=ctx.path_map,
        io_properties=ctx.io_properties,
        warehouse=ctx.warehouse,
        settings=ctx.settings,
        views=ctx.views,
        names=ctx.names,
    )
    run.use(ctx.session())
    if ctx.checking:
        return run, analysed(run)
    return run, run.dataframe


def analysed(run: Any) -> Any:
    """The query over empty scans (no file read): what a check has Spark analyse."""
    from mor.physical import to_dataframe
    from mor.planner.settings import applied

    with applied(run.settings):
        return to_dataframe(run.plan, run.session, None, analyse_only=True, relations=run.views)


# --- the job and the commit -------------------------------------------------------------------


def append_job(src: TableSource, schema: Any, spec: Any, verb: str) -> tuple[Any, str, Any]:
    """The append job of a statement over `src` (its layout, codec and sizes, as the table's
    properties say), the folder its files go to (as recorded) and where the tasks reach it."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    from mor.physical.appends import AppendJob, distribution_mode
    from mor.physical.row_writes import arrow_place

    md = src.metadata
    props = md.properties
    partition, sort = _layout(md, schema, spec)
    folder = f"{md.location.rstrip('/')}/data/mor-{verb.split()[0].lower()}-{uuid.uuid4()}"
    place = arrow_place(src.io, src.read_path(folder))
    job = AppendJob(
        table=src.name,
        folder=place,
        schema=schema_to_pyarrow(schema).serialize().to_pybytes(),
        partition=partition,
        sort=sort,
        codec=props.get("write.parquet.compression-codec", "zstd"),
        target_bytes=int(props.get("write.target-file-size-bytes", 512 << 20)),
        row_group_bytes=int(props.get("write.parquet.row-group-size-bytes", 128 << 20)),
        distribution=distribution_mode(props, bool(spec.fields), bool(sort)),
    )
    return job, folder, place


def files_of(
    records: list[dict[str, Any]], src: TableSource, schema: Any, spec: Any, folder: str
) -> list[Any]:
    """The manifest records of the data files the tasks wrote (their footers, partitions and
    NaN counts in `records`)."""
    import io as _io
    import json

    import pyarrow.parquet as pq

    from mor.row_writes import partition_values
    from mor.writer.files import data_file_of

    files = []
    for r in records:
        if r["kind"] != "data":
            continue
        values = partition_values(spec, schema, json.loads(r["partition"]))
        footer = (pq.read_metadata(_io.BytesIO(r["footer"])), r["size"])
        nans = json.loads(r["metrics"])["nan"] if r.get("metrics") else None
        path = f"{folder}/{r['name']}"
        files.append(data_file_of(src, path, values, spec.spec_id, schema, footer, nans))
    return files


def write_rows(
    df: DataFrame,
    src: TableSource,
    schema: Any,
    spec: Any,
    verb: str,
    note: Callable[[str], None],
) -> tuple[list[Any], str, Any]:
    """Run the append job over `df` (the table's columns): the data files written (their
    manifest records), the folder they are in and where the tasks wrote it."""
    from mor.physical.appends import run_append_job

    job, folder, place = append_job(src, schema, spec, verb)
    note(f"writing rows of {src.name}")
    try:
        with interrupts.spark_action():
            records = run_append_job(df, job)
        return files_of(records, src, schema, spec, folder), folder, place
    except KeyboardInterrupt as e:  # the cancelled tasks stopped, then what they wrote removed
        raise interrupts.not_committed(
            f"{verb} {src.name}", src.name, lambda: _clear(place, folder, set())
        ) from e
    except BaseException:
        from mor.row_writes import clear_failed

        # what the job's tasks wrote, the ones still stopping too: nothing commits them
        clear_failed(place, folder)
        raise


def _clear(place: Any, folder: str, keep: set[str]) -> int:
    from mor.row_writes import clear_folder

    return clear_folder(place, folder, keep)


def _committed(
    op: Any,
    cat: Catalog,
    src: TableSource,
    name: str,
    branch: str,
    head: Any,
    report: WriteReport,
    place: Any,
    folder: str,
    verb: str,
) -> None:
    """Commit `op` through the snapshot producer; the statement's folder cleared of what no
    commit references, even when it fails or is interrupted."""
    from mor.writer.producer import CommitUnknownError, SnapshotProducer

    committed: set[str] = set()
    unknown = False

    def outcome() -> str:
        return f"{verb} {name} committed as snapshot {report.snapshot} before it took effect"

    try:
        mapped = src.path_map if src.path_map.pairs else None
        producer = SnapshotProducer(cat, name, branch, io=src.io.inner, path_map=mapped)
        with interrupts.held(outcome):
            done = producer.commit(op, head)
            committed = {f.file_path for f in op.added_data}
            report.snapshot = done.snapshot.snapshot_id
    except CommitUnknownError:
        unknown = True
        raise
    except KeyboardInterrupt as e:
        if report.snapshot is not None:
            raise
        raise interrupts.not_committed(
            f"{verb} {name}", name, lambda: _clear(place, folder, committed)
        ) from e
    finally:
        if not unknown:
            _clear(place, folder, committed)


# --- INSERT -----------------------------------------------------------------------------------


def run_insert(plan: InsertRows, ctx: RunContext) -> Outcome:
    """INSERT INTO / INSERT OVERWRITE (module docstring)."""
    from mor.physical.appends import assignment_policy, store_assigned

    started = time.perf_counter()
    cat = catalog_of(ctx, plan.target.catalog)
    name = plan.target.name
    verb = "INSERT OVERWRITE" if plan.mode == "overwrite" else "INSERT INTO"
    src = _source(ctx, cat, name)
    md = src.metadata
    head = md.snapshot_by_name(plan.branch)
    if head is None and plan.branch != "main":
        raise MorError(
            f"{verb} {name}: no branch {plan.branch!r} (ALTER TABLE {name} CREATE "
            f"BRANCH {plan.branch} first)"
        )
    schema = md.schema()
    spec = md.spec()
    columns = table_columns(schema, name)
    into = None
    if plan.columns is not None:
        from mor.planner.binding import check_columns

        into = list(check_columns(plan.columns, schema, f"{verb} {name}"))
    static = _static(plan, spec, schema, f"{verb} {name}")
    session = ctx.session()
    run, rows = _rows_frame(ctx, plan.query, cat)
    df = store_assigned(
        rows, f"{verb} {name}", columns, into, static, plan.by_name, assignment_policy(session)
    )
    dynamic = plan.mode == "overwrite" and (
        bool(spec.fields) and plan.overwrite_mode == "dynamic"
        if plan.overwrite_mode is not None
        else _dynamic(session, plan, spec)
    )
    mode = "dynamic" if dynamic else ("overwrite" if plan.mode == "overwrite" else "append")
    report = WriteReport(
        verb, name, plan.branch, mode, head.snapshot_id if head else None, ctx.dry_run
    )
    if ctx.checking:
        return Outcome(verb, f"{name}: checked")
    if ctx.dry_run:
        report.rows = int(spark_call(lambda: df.count(), df))
        if mode != "append":
            removing = _replaced(src, schema, head, plan, static, None, run.cache)
            report.replaced_files = len(removing)
        report.seconds = time.perf_counter() - started
        return _outcome(verb, report)
    files, folder, place = write_rows(df, src, schema, spec, verb, ctx.progress)
    report.rows = sum(f.record_count for f in files)
    report.files = len(files)
    report.bytes = sum(f.file_size_in_bytes for f in files)
    op = _operation(src, schema, head, plan, static, files, mode, run.cache)
    report.replaced_files = len(getattr(op, "removed_data", ()))
    report.replaced_rows = sum(
        r.records for r in getattr(op, "removing", {}).values() if r.content.value == 0
    )
    if files or (mode == "overwrite" and op.removed_data):
        ctx.progress("committing")
        _committed(op, cat, src, name, plan.branch, head, report, place, folder, verb)
    else:
        _clear(place, folder, set())
    report.seconds = time.perf_counter() - started
    return _outcome(verb, report)


def _outcome(verb: str, report: WriteReport) -> Outcome:
    return Outcome(
        verb, report.line(), report.as_dict(), snapshot=report.snapshot, affected=report.rows
    )


def _static(plan: InsertRows, spec: Any, schema: Any, what: str) -> list[tuple[str, str]]:
    """The PARTITION clause's values, each column an identity partition column of the
    table's current spec (as Spark requires of a partition column)."""
    identity = {
        (schema.find_column_name(f.source_id) or "").lower(): schema.find_column_name(f.source_id)
        for f in spec.fields
        if str(f.transform) == "identity"
    }
    out = []
    for col, value in plan.static:
        spelled = identity.get(col.lower())
        if spelled is None:
            raise UnsupportedError(
                f"{what} PARTITION ({col} = {value}): {col} is not an identity partition column "
                f"of the table (its: {', '.join(v for v in identity.values() if v) or 'none'})"
            )
        out.append((spelled, value))
    return out


def _dynamic(session: Any, plan: InsertRows, spec: Any) -> bool:
    """Whether INSERT OVERWRITE replaces the partitions it writes: the session's
    `spark.sql.sources.partitionOverwriteMode` is dynamic and the table is partitioned."""
    try:
        mode = str(session.conf.get("spark.sql.sources.partitionOverwriteMode", "static"))
    except Exception:  # noqa: BLE001 - Spark's default
        mode = "static"
    return mode.lower() == "dynamic" and bool(spec.fields)


def _filter_sql(static: list[tuple[str, str]]) -> str | None:
    if not static:
        return None
    return " AND ".join(
        f"{quoted(c)} IS NULL" if v.strip().upper() == "NULL" else f"{quoted(c)} = {v}"
        for c, v in static
    )


def _replaced(
    src: TableSource,
    schema: Any,
    head: Any,
    plan: InsertRows,
    static: list[tuple[str, str]],
    files: list[Any] | None,
    cache: Any,
) -> list[Any]:
    """The live data files a static overwrite removes (every file without a PARTITION
    clause; a file the filter selects in part is refused, as Iceberg refuses it)."""
    from mor.planner.scan_planning import live_entries, must_hold

    if head is None:
        return []
    entries = [e for e in live_entries(src, head, cache) if e.file.content.value == 0]
    where = _filter_sql(static)
    if where is None:
        return [e.file for e in entries]
    scan, may = _bound_filter(src, schema, head, where)
    must = must_hold(src, schema, scan) if scan is not None else None
    out = []
    for e in entries:
        if may is not None and not may(e.file):
            continue
        if must is None or not must(e.file):
            clause = ", ".join(f"{c} = {v}" for c, v in static)
            raise MorError(
                f"INSERT OVERWRITE {src.name} PARTITION ({clause}): "
                f"data file {e.file.file_path} holds rows of it and others (written under another "
                "partition spec): Iceberg cannot replace part of a file; compact the table first"
            )
        out.append(e.file)
    return out


def _bound_filter(src: TableSource, schema: Any, head: Any, where: str) -> tuple[Any, Any]:
    """The scan of `SELECT * FROM t WHERE <where>` at `head` as mor binds it (its pushed
    predicates), and the filter of what may hold such rows."""
    from mor.planner.nodes import IcebergScan
    from mor.planner.scan_planning import may_hold
    from mor.planner.sources import Resolver
    from mor.planner.sql import bind, one_statement

    resolver = Resolver(None, src.path_map)
    resolver.by_name = lambda parts: src  # type: ignore[method-assign] - the table read
    text = f"SELECT * FROM {src.name} VERSION AS OF {head.snapshot_id} WHERE {where}"
    plan = bind(one_statement(text), resolver)
    scans = [n for n in plan.walk() if isinstance(n, IcebergScan)]
    scan = scans[0] if scans else None
    return scan, may_hold(src, schema, scan) if scan is not None else None


def _operation(
    src: TableSource,
    schema: Any,
    head: Any,
    plan: InsertRows,
    static: list[tuple[str, str]],
    files: list[Any],
    mode: str,
    cache: Any,
) -> Any:
    from mor.writer.operations import AppendFiles, OverwriteFiles

    if mode == "append":
        return AppendFiles(added_data=list(files))
    op = OverwriteFiles(
        added_data=list(files), replace_partitions=mode == "dynamic", isolation=plan.isolation
    )
    if head is None:
        return op
    from mor.planner.scan_planning import live_entries

    entries = live_entries(src, head, cache)
    spec_id = src.metadata.default_spec_id
    if mode == "dynamic":
        parts = {partition_key(f.partition) for f in files}
        op.replaces = lambda f: f.spec_id == spec_id and partition_key(f.partition) in parts
        for e in entries:
            if e.spec_id == spec_id and partition_key(e.file.partition) in parts:
                op.remove(_with_spec(e))
        return op
    removed = {f.file_path for f in _replaced(src, schema, head, plan, static, files, cache)}
    where = _filter_sql(static)
    if where is None:
        op.replaces = lambda f: True
        for e in entries:
            op.remove(_with_spec(e))
        return op
    scan, may = _bound_filter(src, schema, head, where)
    from mor.planner.scan_planning import must_hold

    must = must_hold(src, schema, scan) if scan is not None else None
    op.replaces = (lambda f: bool(may is None or may(f))) if scan is not None else None
    for e in entries:
        if e.file.content.value == 0:
            if e.file.file_path in removed:
                op.remove(_with_spec(e))
            continue
        if must is not None and must(e.file):  # a delete file of what is replaced
            op.remove(_with_spec(e))
    return op


def _with_spec(e: Any) -> Any:
    f = e.file
    f.spec_id = e.spec_id
    return f


# --- CREATE TABLE AS SELECT, REPLACE TABLE --------------------------------------------------------


def iceberg_schema_of(spark_schema: Any, table: str) -> Any:
    """A new table's schema from a query's (Spark types to Iceberg's; every column
    nullable, as Spark's CREATE TABLE AS SELECT makes it; placeholder field ids)."""
    import itertools

    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BinaryType,
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        FloatType,
        IntegerType,
        ListType,
        LongType,
        MapType,
        NestedField,
        StringType,
        StructType,
        TimestampType,
        TimestamptzType,
    )
    from pyspark.sql import types as T

    ids = itertools.count(1)

    def conv(t: Any, where: str) -> Any:
        atomic = {
            T.BooleanType: BooleanType(),
            T.ByteType: IntegerType(),
            T.ShortType: IntegerType(),
            T.IntegerType: IntegerType(),
            T.LongType: LongType(),
            T.FloatType: FloatType(),
            T.DoubleType: DoubleType(),
            T.StringType: StringType(),
            T.BinaryType: BinaryType(),
            T.DateType: DateType(),
            T.TimestampType: TimestamptzType(),
            T.TimestampNTZType: TimestampType(),
        }
        for k, v in atomic.items():
            if isinstance(t, k):
                return v
        if isinstance(t, T.DecimalType):
            return DecimalType(t.precision, t.scale)
        if isinstance(t, T.ArrayType):
            return ListType(next(ids), conv(t.elementType, where), element_required=False)
        if isinstance(t, T.MapType):
            return MapType(
                next(ids),
                conv(t.keyType, where),
                next(ids),
                conv(t.valueType, where),
                value_required=False,
            )
        if isinstance(t, T.StructType):
            return StructType(
                *[
                    NestedField(next(ids), f.name, conv(f.dataType, where), required=False)
                    for f in t.fields
                ]
            )
        if isinstance(t, T.NullType):
            raise UnsupportedError(
                f"{table}: column {where} is NULL of no type: CAST it in the query"
            )
        raise UnsupportedError(
            f"{table}: column {where} is {t.simpleString()}, which Iceberg has no type for"
        )

    fields = [
        NestedField(next(ids), f.name, conv(f.dataType, f.name), required=False)
        for f in spark_schema.fields
    ]
    lower = [f.name.lower() for f in fields]
    dup = next((n for n in lower if lower.count(n) > 1), None)
    if dup is not None:
        raise UnsupportedError(f"{table}: the query has two columns named {dup}: give one an alias")
    return Schema(*fields)


def run_ctas(plan: CreateTable, ctx: RunContext) -> Outcome:
    """CREATE TABLE ... AS SELECT: the query's rows written into the table's location, then
    the table created with its first snapshot in one catalog commit (Iceberg's staged
    CTAS): it appears whole, or not at all."""
    from mor.writer.catalog_changes import commit_new_table, stage_table
    from mor.writer.operations import AppendFiles
    from mor.writer.producer import new_table_snapshot

    started = time.perf_counter()
    cat = catalog_of(ctx, plan.target.catalog, create=True)
    name = plan.target.name
    verb = "CREATE TABLE"
    if table_exists(ctx, cat, name):
        if plan.if_not_exists:
            return Outcome(verb, f"table {name}: exists already; nothing changed")
        raise MorError(f"CREATE TABLE {name}: the table already exists in catalog {cat.name!r}")
    ns = name.rsplit(".", 1)[0]
    from mor.catalog_statements import namespace_exists

    if not namespace_exists(ctx, cat, ns):
        raise TableNotFoundError(
            f"CREATE TABLE {name}: namespace {ns} not found in catalog {cat.name!r} "
            f"(CREATE NAMESPACE {ns} first)"
        )
    run, rows = _rows_frame(ctx, plan.query, cat)
    schema = iceberg_schema_of(rows.schema, name)
    if ctx.checking or ctx.dry_run:
        md = new_metadata(cat, plan, schema)
        if ctx.pending is not None:
            ctx.pending.created(cat.name, name, md)
        report = WriteReport(verb, name, "main", "append", None, True)
        if ctx.dry_run:
            report.rows = int(spark_call(lambda: rows.count(), rows))
        return _outcome(verb, report)
    txn = stage_table(
        cat, name, schema, plan.partition, plan.sort, dict(plan.properties), plan.location
    )
    staged = txn._table
    md = staged.metadata
    src = _staged_source(ctx, staged, name)
    columns = table_columns(md.schema(), name)
    from mor.physical.appends import assignment_policy, store_assigned

    df = store_assigned(
        rows, f"{verb} {name}", columns, None, [], False, assignment_policy(ctx.session())
    )
    report = WriteReport(verb, name, "main", "append", None, False)
    files, folder, place = write_rows(df, src, md.schema(), md.spec(), verb, ctx.progress)
    report.rows = sum(f.record_count for f in files)
    report.files = len(files)
    report.bytes = sum(f.file_size_in_bytes for f in files)
    committed = False
    written: list[str] = []
    try:
        ctx.progress("committing")
        updates: tuple = ()
        if files:
            snap, updates = new_table_snapshot(staged, AppendFiles(added_data=files), written)
            report.snapshot = snap.snapshot_id
        with interrupts.held(lambda: f"{verb} {name} committed before it took effect"):
            commit_new_table(cat, txn, updates)
        committed = True
    except KeyboardInterrupt as e:
        raise interrupts.not_committed(
            f"{verb} {name}", name, lambda: _clear(place, folder, set())
        ) from e
    finally:
        if not committed:
            _clear(place, folder, set())
            _delete(src, written)
    report.seconds = time.perf_counter() - started
    out = _outcome(verb, report)
    out.line = f"table {name}: created; " + report.line().split(": ", 1)[1]
    return out


def _staged_source(ctx: RunContext, staged: Any, name: str) -> TableSource:
    """A staged table as a source: its files read and written through the call's path map
    and the staged table's FileIO."""
    from mor.planner.settings import effective_path_map
    from mor.planner.sources import MappedFileIO, PathMap, TableSource, io_defaults, with_region

    pm = PathMap.of(effective_path_map(ctx.path_map))
    from pyiceberg.io import load_file_io

    props = with_region(
        {**io_defaults(), **dict(staged.io.properties), **(ctx.io_properties or {})}
    )
    io = MappedFileIO(load_file_io(props, staged.metadata.location), pm)
    return TableSource(f"staged:{name}", name, staged.metadata, io, pm, "")


def _delete(src: Any, paths: list[str]) -> None:
    from mor.writer.files import delete_files

    if paths:
        delete_files(src.io.inner, paths)


def run_replace_table(plan: CreateTable, ctx: RunContext) -> Outcome:
    """REPLACE TABLE [AS SELECT] and CREATE OR REPLACE TABLE: a new schema, spec, sort
    order and properties in the table's own history (its snapshots stay; main points at the
    new rows, or at none), as Iceberg's replace transaction; a table that does not exist is
    created (CREATE OR REPLACE), or refused (REPLACE)."""
    from mor.catalog_statements import run_create_table

    cat = catalog_of(ctx, plan.target.catalog, create=True)
    name = plan.target.name
    if not table_exists(ctx, cat, name):
        if plan.mode == "replace":
            raise TableNotFoundError(
                f"REPLACE TABLE {name}: table {name} not found in catalog {cat.name!r}"
            )
        from dataclasses import replace

        created = replace(plan, mode="create")
        return run_ctas(created, ctx) if plan.query is not None else run_create_table(created, ctx)
    from mor.writer.replace import replace_table

    started = time.perf_counter()
    verb = "REPLACE TABLE"
    rows = None
    if plan.query is not None:
        _, rows = _rows_frame(ctx, plan.query, cat)
        schema = iceberg_schema_of(rows.schema, name)
    else:
        schema = plan.schema
    if ctx.checking or ctx.dry_run:
        md = new_metadata(cat, plan, schema)
        if ctx.pending is not None:
            ctx.pending.created(cat.name, name, md)
        return Outcome(verb, f"table {name}: would be replaced")

    def write(staged_md: Any, staged_io: Any) -> tuple[list[Any], Any, str]:
        from mor.physical.appends import assignment_policy, store_assigned
        from mor.planner.settings import effective_path_map
        from mor.planner.sources import MappedFileIO, PathMap, TableSource

        pm = PathMap.of(effective_path_map(ctx.path_map))
        src = TableSource(f"replace:{name}", name, staged_md, MappedFileIO(staged_io, pm), pm, "")
        assert rows is not None
        df = store_assigned(
            rows,
            f"{verb} {name}",
            table_columns(staged_md.schema(), name),
            None,
            [],
            False,
            assignment_policy(ctx.session()),
        )
        files, folder, place = write_rows(
            df, src, staged_md.schema(), staged_md.spec(), verb, ctx.progress
        )
        return files, place, folder

    snapshot, files = replace_table(
        cat,
        name,
        schema,
        plan.partition,
        plan.sort,
        dict(plan.properties),
        plan.location,
        write if rows is not None else None,
        _clear,
    )
    report = WriteReport(verb, name, "main", "overwrite", None, False, snapshot=snapshot)
    report.rows = sum(f.record_count for f in files)
    report.files = len(files)
    report.bytes = sum(f.file_size_in_bytes for f in files)
    report.seconds = time.perf_counter() - started
    out = _outcome(verb, report)
    out.line = f"table {name}: replaced" + (
        f"; wrote {report.rows} rows in {report.files} data files; snapshot {snapshot}"
        if snapshot is not None
        else " (no rows: main has no snapshot)"
    )
    return out
