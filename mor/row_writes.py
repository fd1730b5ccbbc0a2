"""Row-level writes without Iceberg's runtime: DELETE, UPDATE and MERGE as merge-on-read
commits, as Iceberg's Spark writer makes them in merge-on-read mode.

`run_row_write(sql)` (what `mor_sql`, `mor run`, `mor explain` and `mor shell` run for such a
statement, through mor/statements.py):

1. the statement is parsed and bound to the table's schema by the planner
   (planner/row_writes.py, planner/merge_into.py): its target and branch, the query whose
   rows it changes, the types of the values it writes;
2. the head of the branch is read once; everything below is computed on that snapshot;
3. a DELETE whose whole condition the metadata can evaluate drops the data files every row
   of which it selects (by their partition values or column metrics), as Iceberg's metadata
   delete does, and writes no position for them;
4. mor plans the rows query and Spark runs it as one job whose tasks write the files
   (physical/row_writes.py): each touched data file's positions as a position delete file
   naming it alone (v2) or a deletion vector merged with its current ones (v3), and the rows
   an UPDATE or a MERGE writes as data files of the table's current partition spec and sort
   order (v3 rows keep their `_row_id`). The driver gets one record per file, never a row;
5. one `RowDelta` (writer/operations.py) is committed atomically through the table's
   catalog by the snapshot producer, with Iceberg's validations against every snapshot
   committed meanwhile for the table's isolation level. What the statement wrote is removed
   when anything fails before the commit, and what no commit references after it.

A statement that changes no row commits nothing. `dry_run` stops after step 3 and reports
what it would change, counted by Spark.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from mor import interrupts
from mor.catalogs import resolve_catalog
from mor.commits import FileOut, SparkArg, session_of
from mor.execution import QueryExecution, mor_errors
from mor.planner.errors import InternalError, MorError, UnsupportedError
from mor.planner.nodes import LINEAGE_COLUMNS, only_files
from mor.planner.row_writes import (
    RowsQuery,
    RowWrite,
    count_query,
    is_rows_target,
    parse_row_write,
    rows_query,
    whole_where,
    without_files,
)
from mor.planner.scan_planning import live_entries, may_hold, must_hold
from mor.planner.settings import effective_path_map
from mor.planner.sources import PathMap, Resolver, TableSource
from mor.planner.sql import Statement, one_statement
from mor.planner.write_statements import check_values, isolation_level, told_in
from mor.writer.files import data_file_of, delete_file_of, dv_file
from mor.writer.operations import RowDelta
from mor.writer.producer import CommitUnknownError, SnapshotProducer

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import Schema
    from pyiceberg.table.snapshots import Snapshot

    from mor.planner.nodes import DataTask, IcebergScan


@dataclass
class RowWriteReport:
    """What a row-level statement changed and wrote (or would, with `dry_run`)."""

    statement: str  # DELETE, UPDATE or MERGE
    table: str
    branch: str
    base_snapshot: int | None  # the snapshot read (None: the table had none)
    dry_run: bool
    isolation: str = "serializable"
    rows: int = 0  # rows deleted, updated, or merged (updated + deleted + inserted)
    data_files: int = 0  # data files they were in
    written: list[FileOut] = field(default_factory=list)  # position delete files / vectors
    vectors: bool = False  # v3: deletion vectors (in Puffin files)
    replaced: int = 0  # v3: deletion vectors the new ones replace
    merged: list[FileOut] = field(default_factory=list)  # v3: position delete files merged
    data_written: list[FileOut] = field(default_factory=list)  # rows written again or inserted
    dropped: list[FileOut] = field(default_factory=list)  # data files removed whole
    snapshot: int | None = None  # committed
    updated: int = 0  # MERGE: rows updated, deleted and inserted (their sum is `rows`)
    deleted: int = 0
    inserted: int = 0
    attempts: int = 0
    rebased_over: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """One line: what the statement did."""
        kind = "deletion vectors" if self.vectors else "position delete files"
        what = f"{len(self.written)} {kind}"
        if not self.dry_run and self.written:
            what += f" ({sum(f.bytes for f in self.written)} bytes"
            if self.vectors:
                what += f", replacing {self.replaced}"
                if self.merged:
                    what += f" and {len(self.merged)} position delete files"
            what += ")"
        rows = f"{self.rows} rows of {self.data_files} data files"
        verb = {"DELETE": "deleted", "UPDATE": "updated", "MERGE": "merged"}[self.statement]
        if self.statement == "MERGE":
            rows = (
                f"{self.rows} rows ({self.updated} updated, {self.deleted} deleted, "
                f"{self.inserted} inserted; {self.data_files} data files changed)"
            )
        if self.dropped:
            what += f", {len(self.dropped)} data files removed whole"
        if self.statement != "DELETE" and not self.dry_run:
            what += (
                f" and {len(self.data_written)} data files ("
                f"{sum(f.rows for f in self.data_written)} rows, "
                f"{sum(f.bytes for f in self.data_written)} bytes)"
            )
        if self.dry_run:
            would = {"DELETE": "delete", "UPDATE": "update", "MERGE": "merge"}[self.statement]
            head = (
                f"{self.table}: dry run on snapshot {self.base_snapshot}, nothing written; "
                f"would {would} {rows}, writing {what}"
            )
        elif self.snapshot is not None:
            head = (
                f"{self.table}: {verb} {rows}; wrote {what}; snapshot {self.snapshot} "
                f"committed on {self.branch}"
            )
            if self.rebased_over:
                head += f" (rebased over {len(self.rebased_over)} commits, {self.isolation})"
        else:
            head = (
                f"{self.table}: no row matches in snapshot {self.base_snapshot}; nothing committed"
            )
        return f"{head}; {self.seconds:.1f} s"


@dataclass(frozen=True)
class _Target:
    """The table a statement writes, read once: its source (the call's path map and store
    settings), the branch's head (None: no snapshot yet) and the schema rows are written in."""

    catalog: Catalog
    src: TableSource
    head: Snapshot | None
    schema: Schema

    @property
    def v3(self) -> bool:
        return self.src.metadata.format_version >= 3


@dataclass(frozen=True)
class _Work:
    """One statement's write, once planned: what its tasks change and what it removes whole."""

    rw: RowWrite
    target: _Target
    rq: RowsQuery
    tasks: dict[str, tuple[DataTask, IcebergScan]]  # the rows query's data files, by path
    dropped: set[str]  # data files removed whole
    may: Callable[[Any], bool] | None  # the conflict detection filter


def run_row_write(
    sql: str | Statement,
    *,
    catalog: Catalog | str | None = None,
    warehouse: str | None = None,
    path_map: dict[str, str] | None = None,
    io_properties: dict[str, str] | None = None,
    branch: str = "main",
    dry_run: bool = False,
    spark: SparkArg = None,
    progress: Callable[[str], None] | None = None,
    check_only: bool = False,
    views: dict[str, Any] | None = None,
    names: Any = None,
) -> RowWriteReport:
    """Run a DELETE, UPDATE or MERGE statement (Spark SQL) as one merge-on-read commit on
    `branch` of its table (Spark's `ns.t.branch_<name>` names one too), its files read
    through `path_map` and `io_properties` as a query's are. `spark`: a session, or a
    function making one; `progress(text)`: called at each phase. `check_only`: stop once
    the statement is checked (its target, branch, clauses, and Spark's analysis of its rows
    query with the written values' types), before any Spark job. `views` and `names`: what
    else the statement's names may be (the DataFrames handed in, Spark's session:
    planner/names.py), for its source and subqueries."""
    started = time.perf_counter()
    note = progress or (lambda text: None)
    stmt = one_statement(sql) if isinstance(sql, str) else sql
    cat = resolve_catalog(catalog, warehouse)
    rw = parse_row_write(stmt, branch, cat.table_exists)
    target = _read_target(cat, rw, path_map, io_properties)
    md, head = target.src.metadata, target.head
    report = RowWriteReport(
        rw.kind, rw.name, rw.branch, head.snapshot_id if head else None, dry_run,
        isolation_level(md.properties, rw.kind, rw.name), vectors=target.v3,
    )  # fmt: skip
    if head is None and rw.kind != "MERGE":  # a table without a snapshot: nothing to change
        return report
    version = head.snapshot_id if head else None
    rq = rows_query(rw, target.schema, md.format_version, version, empty=head is None)
    run = QueryExecution(
        rq.text, catalog=cat, path_map=path_map, io_properties=io_properties, warehouse=warehouse,
        views=views, names=names,
    )  # fmt: skip
    with told_in(stmt, rq.moved, rw.kind):
        planned = run.planned
    bound = [n for n in planned.logical.walk() if is_rows_target(n)]
    scans = [n for n in planned.optimized.walk() if is_rows_target(n)]
    tasks = {t.path: (t, s) for s in scans for t in s.data_files()}
    dropped = _dropped(rw, target, bound, tasks, run) if rw.kind == "DELETE" else set()
    if dropped:
        run.narrow(lambda plan: without_files(plan, dropped))
    may = may_hold(target.src, target.schema, bound[0]) if len(bound) == 1 else None
    note(f"finding the rows to change in {rw.name} at snapshot {report.base_snapshot}")
    if spark is not None:  # else mor's own session (with s3a when the plan reads s3a://)
        run.use(session_of(spark))
    with told_in(stmt, rq.moved, rw.kind):
        df = _rows(run, rq)  # Spark analyses the statement: its errors, even with no file left
    if check_only:
        return report
    if rw.kind != "MERGE" and all(p in dropped for p in tasks):
        df = None  # no data file to read: no Spark job
    gone = _live_rows(run, rw, version, dropped) if dropped else 0
    if not gone:  # files of deleted rows only: no row to delete, nothing to commit for them
        dropped = set()
    work = _Work(rw, target, rq, tasks, dropped, may)
    if dry_run:
        _counted(report, work, df)
    elif df is not None or dropped:
        _write_and_commit(work, report, df, note)
    if dropped:
        report.dropped = [
            FileOut(p, tasks[p][0].record_count, tasks[p][0].size_bytes) for p in sorted(dropped)
        ]
        report.deleted += gone
        report.rows += gone
        report.data_files += len(dropped)
    report.seconds = time.perf_counter() - started
    return report


def _read_target(
    cat: Catalog, rw: RowWrite, path_map: dict[str, str] | None, io: dict[str, str] | None
) -> _Target:
    """The statement's table through the call's path map and store settings, and the head of
    its branch."""
    resolver = Resolver(cat, PathMap.of(effective_path_map(path_map)), io)
    src = resolver.by_name(tuple(rw.name.split(".")))
    md = src.metadata
    if md.format_version not in (2, 3):
        raise UnsupportedError(
            f"{rw.name}: format version {md.format_version}; {rw.kind} writes position "
            "deletes (v2) or deletion vectors (v3)"
        )
    head = md.snapshot_by_name(rw.branch)
    if head is None and (rw.branch != "main" or md.snapshots):
        raise MorError(f"{rw.name}: no branch {rw.branch!r}")
    return _Target(cat, src, head, md.schema())


def _dropped(
    rw: RowWrite, target: _Target, bound: list[IcebergScan], tasks: dict[str, Any], run: Any
) -> set[str]:
    """The data files a DELETE removes whole: every row of them is selected by a condition
    the metadata evaluates whole (the pushed predicates are its every conjunct)."""
    if len(bound) != 1 or target.head is None or not tasks or not whole_where(rw, bound[0]):
        return set()
    must = must_hold(target.src, target.schema, bound[0])
    if must is None:
        return set()
    entries = live_entries(target.src, target.head, run.cache)  # decoded by planning already
    return {e.file.file_path for e in entries if e.file.file_path in tasks and must(e.file)}


def _rows(run: QueryExecution, rq: RowsQuery) -> Any:
    """The rows query's DataFrame as the write's tasks take it: the written values' types
    checked, the columns kept for that dropped, a MERGE's filter and projection applied."""
    df = run.dataframe
    check_values(rq.checks, {f.name: f.dataType.jsonValue() for f in df.schema.fields})
    if rq.drop:
        df = df.drop(*rq.drop)
    if rq.where is not None:
        df = df.where(rq.where)
    if rq.select is not None:
        df = df.selectExpr(*rq.select)
    return df


def _live_rows(run: QueryExecution, rw: RowWrite, version: int | None, paths: set[str]) -> int:
    """The live rows of the data files a DELETE removes whole (every delete applied), counted
    as mor counts (from metadata where it can)."""
    assert version is not None
    count = QueryExecution(
        count_query(rw, version),
        catalog=run.catalog,
        path_map=run.path_map,
        io_properties=run.io_properties,
        warehouse=run.warehouse,
    )
    count.narrow(lambda plan: only_files(plan, paths))
    df = count.use(run.session).dataframe
    return int(spark_call(lambda: df.first()[0], df))


def spark_call(fn: Callable[[], Any], df: Any) -> Any:
    """A Spark action over one of mor's DataFrames; its failure as one line."""
    with mor_errors(df), interrupts.spark_action():
        try:
            return fn()
        except MorError:
            raise
        except Exception as e:  # noqa: BLE001 - Spark's failure: one line
            from mor.physical.spark.spark_errors import spark_failure

            raise spark_failure(e) from e


def _counted(report: RowWriteReport, work: _Work, df: Any) -> None:
    """A dry run: the rows and data files the statement would change, counted by Spark per
    data file (a MERGE's cardinality rule checked too)."""
    from pyspark.sql import functions as F

    if df is None:
        return
    kind = work.rw.kind
    act = F.col("_mor_act") if kind == "MERGE" else F.lit(2 if kind == "DELETE" else 1)
    matched = F.col("_mor_matched") if work.rq.check_cardinality else F.lit(False)
    counts = df.groupBy("_file").agg(
        F.sum(F.when(act == 1, 1).otherwise(0)).alias("u"),
        F.countDistinct(F.when(act == 2, F.col("_pos"))).alias("d"),
        F.sum(F.when(act == 3, 1).otherwise(0)).alias("i"),
        F.sum(F.when(matched, 1).otherwise(0)).alias("m"),
        F.countDistinct(F.when(matched, F.col("_pos"))).alias("md"),
    )
    rows = spark_call(counts.collect, df)  # a row per data file changed
    for r in rows:
        if r["m"] != r["md"]:
            raise MorError(_cardinality(report.table, r["_file"]))
    report.updated = sum(r["u"] for r in rows)
    report.deleted = sum(r["d"] for r in rows)
    report.inserted = sum(r["i"] for r in rows)
    report.rows = report.updated + report.deleted + report.inserted
    changed = sorted((r["_file"], r["u"] + r["d"]) for r in rows if r["_file"] and r["u"] + r["d"])
    report.data_files = len(changed)
    report.written = [FileOut("", n, 0, p) for p, n in changed]


def _cardinality(table: str, where: str) -> str:
    return (
        f"MERGE INTO {table}: the ON condition matched one row of {table} with more than one "
        f"row of the source (in {where}), and Spark and Iceberg refuse that "
        "(MERGE_CARDINALITY_VIOLATION): which one would win is undefined; make the source's "
        "rows unique on the ON condition"
    )


def _write_and_commit(
    work: _Work, report: RowWriteReport, df: Any, note: Callable[[str], None]
) -> None:
    """Run the write's Spark job, then commit what it wrote (and the files removed whole)
    as one row delta; the statement's folder is cleared of what no commit references, even
    when it fails or is interrupted."""
    from mor.physical.row_writes import arrow_place, run_row_write_job

    rw, md = work.rw, work.target.src.metadata
    folder = f"{md.location.rstrip('/')}/data/mor-{rw.kind.lower()}-{uuid.uuid4()}"
    place = arrow_place(work.target.src.io, work.target.src.read_path(folder))
    committed: set[str] = set()
    unknown = False

    def outcome() -> str:
        return (
            f"{rw.kind} on {rw.name} committed as snapshot {report.snapshot} before it took effect"
        )

    try:
        records: list[dict[str, Any]] = []
        if df is not None:
            note(f"changing rows of {rw.name}")
            with interrupts.spark_action():
                records = run_row_write_job(df, _job(work, place))
        op = _operation(work, report, records, folder)
        if not (op.added or op.added_data or op.removed_data):
            return
        note("committing")
        src = work.target.src  # its manifests read and written as its files are
        mapped = src.path_map if src.path_map.pairs else None
        producer = SnapshotProducer(
            work.target.catalog, rw.name, rw.branch, io=src.io.inner, path_map=mapped
        )
        # never asked once interrupted; a signal while the catalog is asked waits for its
        # answer: committed, or not at all
        with interrupts.held(outcome):
            done = producer.commit(op, work.target.head)
            committed = {f.file_path for f in (*op.added, *op.added_data)}
            report.snapshot = done.snapshot.snapshot_id  # known before a held signal is raised
            report.attempts = done.attempts
            report.rebased_over = done.rebased_over
    except CommitUnknownError:
        unknown = True  # the commit may have landed: its files stay (the error names them)
        raise
    except KeyboardInterrupt as e:
        if report.snapshot is not None:
            raise  # committed before the interrupt took effect (its detail says so)
        what = f"{rw.kind} on {rw.name}"
        raise interrupts.not_committed(
            what, rw.name, lambda: clear_folder(place, folder, committed)
        ) from e
    finally:
        if not unknown:
            clear_folder(place, folder, committed)


def clear_folder(place: Any, folder: str, keep: set[str]) -> int:
    """Delete the files of the statement's folder no commit references (a failed or repeated
    task attempt's; all of them when nothing was committed); an empty local folder too. The
    number of such files left (-1: a store that refused the listing)."""
    from pyarrow.fs import FileSelector, FileType

    fs, root = place.fs, place.path.rstrip("/")
    try:
        infos = fs.get_file_info(FileSelector(root, recursive=True, allow_not_found=True))
    except OSError:  # a store that refused the listing: what is left is `mor orphans`'
        return -1
    left = 0
    for i in infos:
        recorded = folder + i.path[len(root) :]
        if i.type == FileType.File and recorded not in keep:
            try:
                fs.delete_file(i.path)
            except OSError:
                left += 1
    if not keep and type(fs).__name__ == "LocalFileSystem":
        try:
            fs.delete_dir(root)
        except OSError:
            pass
    return left


def clear_failed(place: Any, folder: str, quiet: float = 2.5, timeout: float = 20.0) -> int:
    """`clear_folder` after a failed Spark job, nothing committed: the job's other tasks may
    still write for a moment after it failed (Spark cancels them, and kills a Python task's
    worker `spark.python.task.killTimeout`, 2 s by default, after that; through Spark Connect
    the server does, unseen), so the folder is cleared again until no file has appeared in
    it for `quiet` seconds (at most `timeout`). The number of files left, as clear_folder."""
    left = clear_folder(place, folder, set())
    start = calm = time.monotonic()
    while time.monotonic() - calm < quiet and time.monotonic() - start < timeout:
        time.sleep(0.5)
        if _has_files(place):
            left = clear_folder(place, folder, set())
            calm = time.monotonic()
    return left


def _has_files(place: Any) -> bool:
    from pyarrow.fs import FileSelector, FileType

    try:
        infos = place.fs.get_file_info(
            FileSelector(place.path.rstrip("/"), recursive=True, allow_not_found=True)
        )
    except OSError:
        return False
    return any(i.type == FileType.File for i in infos)


def _job(work: _Work, place: Any) -> Any:
    """What the tasks of the write's Spark job are told: the table's layout for the rows they
    write (its Arrow schema with field ids, `_row_id` on v3; its current partition spec and
    sort order; its codec and target file size) and, on v3, each data file's current
    deletes, which a new deletion vector holds too."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.table.sorting import NullOrder, SortDirection

    from mor.physical.row_writes import RowWriteJob

    md, schema, rw = work.target.src.metadata, work.target.schema, work.rw
    arrow = None
    if rw.kind != "DELETE":
        fields = schema_to_pyarrow(schema)
        if work.target.v3:  # each row's lineage: an updated row keeps its id
            fields = fields.append(pa_field("_row_id", LINEAGE_COLUMNS["_row_id"]))
        arrow = fields.serialize().to_pybytes()
    spec = md.spec()
    partition = tuple(
        (f.name, str(f.transform), str(schema.find_type(f.source_id)), _path(schema, f.source_id))
        for f in spec.fields
    )
    order = md.sort_order_by_id(md.default_sort_order_id)
    sort = tuple(
        (
            str(f.transform),
            str(schema.find_type(f.source_id)),
            _path(schema, f.source_id),
            f.direction == SortDirection.DESC,
            f.null_order == NullOrder.NULLS_FIRST,
        )
        for f in (order.fields if order is not None else ())
    )
    current, filesystems = _current_deletes(work) if work.target.v3 else ({}, {})
    props = md.properties
    return RowWriteJob(
        kind=rw.kind,
        table=rw.name,
        v3=work.target.v3,
        folder=place,
        check=work.rq.check_cardinality,
        schema=arrow,
        partition=partition,
        sort=sort,
        codec=props.get("write.parquet.compression-codec", "zstd"),
        target_bytes=int(props.get("write.target-file-size-bytes", 512 << 20)),
        current=current,
        filesystems=filesystems,
        created_by=f"mor {rw.kind}",
    )


def pa_field(name: str, field_id: int) -> Any:
    import pyarrow as pa

    return pa.field(name, pa.int64(), metadata={b"PARQUET:field_id": str(field_id).encode()})


def _path(schema: Schema, field_id: int) -> list[str]:
    """The names from a top-level column down to a field (a partition or sort source)."""
    from mor.planner.schemas import find_path

    return find_path(schema, field_id)


def _current_deletes(work: _Work) -> tuple[dict[str, list[tuple[Any, ...]]], dict[str, Any]]:
    """v3: per data file the rows query reads (as recorded), the deletes it has now: its
    vector (file system, path, offset, length, cardinality) and its position delete files
    (file system, path); and the file systems, by scheme and bucket."""
    from mor.physical.row_writes import arrow_place

    current: dict[str, list[tuple[Any, ...]]] = {}
    filesystems: dict[str, Any] = {}
    for path, (task, scan) in work.tasks.items():
        if path in work.dropped or not task.pos_deletes:
            continue
        deletes = scan.deletes_by_id()
        for i in task.pos_deletes:
            d = deletes[i]
            if d.kind != "position":
                continue
            place = arrow_place(scan.io, d.read_path)
            key = d.read_path.split("://", 1)[0] + "://" + _bucket(d.read_path)
            filesystems.setdefault(key, place.fs)
            where = d.dv
            current.setdefault(path, []).append(
                (key, place.path, where.offset, where.length, d.record_count)
                if where is not None
                else (key, place.path, None, None, None)
            )
    return current, filesystems


def _bucket(path: str) -> str:
    rest = path.split("://", 1)[1] if "://" in path else ""
    return rest.split("/", 1)[0]


def _operation(
    work: _Work, report: RowWriteReport, records: list[dict[str, Any]], folder: str
) -> RowDelta:
    """The row delta of what the tasks wrote (their records) and the files removed whole;
    the counts go to `report`."""
    import io

    import pyarrow.parquet as pq
    from pyiceberg.manifest import DataFileContent

    from mor.writer.files import POSITION_DELETE_SCHEMA

    src, schema, tasks = work.target.src, work.target.schema, work.tasks
    md = src.metadata
    op = RowDelta(conflict_filter=work.may, isolation=report.isolation)
    counts = {"updated": 0, "deleted": 0, "inserted": 0}
    new_positions = 0
    for r in records:
        kind, path = r["kind"], f"{folder}/{r['name']}" if r["name"] else ""
        if kind == "counts":
            for k in counts:
                counts[k] += r[k] or 0
        elif kind == "data":
            values = partition_values(md.spec(), schema, json.loads(r["partition"]))
            footer = (pq.read_metadata(io.BytesIO(r["footer"])), r["size"])
            nans = json.loads(r["metrics"])["nan"] if r.get("metrics") else None
            op.added_data.append(
                data_file_of(src, path, values, md.default_spec_id, schema, footer, nans)
            )
        elif kind in ("delete_file", "dv"):
            data = r["file"]
            if data not in tasks:
                raise InternalError(f"{report.table}: rows changed in {data}, no file it read")
            task = tasks[data][0]
            values = tuple(v for _, v in task.partition)
            new_positions += r["deleted"] or 0
            op.data.add(data)
            if kind == "dv":
                op.added.append(dv_file(data, values, task.spec_id, path, r["size"], r["offset"],
                                        r["length"], r["rows"]))  # fmt: skip
                report.written.append(FileOut(path, r["rows"], r["length"], data))
            else:
                meta = pq.read_metadata(io.BytesIO(r["footer"]))
                op.added.append(delete_file_of(path, meta, r["size"], POSITION_DELETE_SCHEMA,
                                               DataFileContent.POSITION_DELETES, values,
                                               task.spec_id))  # fmt: skip
                report.written.append(FileOut(path, r["rows"], r["size"], data))
        else:
            raise InternalError(f"{report.table}: a task's record of kind {kind!r}")
    report.data_written = [FileOut(f.file_path, f.record_count, f.file_size_in_bytes)
                           for f in op.added_data]  # fmt: skip
    report.data_files = len(op.data)
    report.updated, report.inserted = counts["updated"], counts["inserted"]
    report.deleted = new_positions - counts["updated"]
    report.rows = report.updated + report.deleted + report.inserted
    _replaced(work, report, op)
    return op


def _replaced(work: _Work, report: RowWriteReport, op: RowDelta) -> None:
    """The deletes the new vectors replace (v3: the data file's vector and file-scoped
    position delete files), and the data files removed whole with theirs; their counts in
    the summary, as Iceberg's."""
    removed_rows = removed_bytes = pos_files = deleted_records = 0
    merged = []
    for path in sorted(op.data if work.target.v3 else ()) + sorted(work.dropped):
        task, scan = work.tasks[path]
        deletes = scan.deletes_by_id()
        for i in task.pos_deletes:
            d = deletes[i]
            if d.kind != "position" or (d.dv is None and d.names_one != path):
                continue
            removed_rows += d.record_count
            if d.dv is not None:
                op.removed_dvs.add((d.path, d.dv.offset))
                removed_bytes += d.dv.length
            else:
                op.removed.add(d.path)
                pos_files += 1
                removed_bytes += d.size_bytes
                merged.append(FileOut(d.path, d.record_count, d.size_bytes))
        if path in work.dropped:
            op.removed_data.add(path)
            deleted_records += task.record_count
            removed_bytes += task.size_bytes
    report.replaced = sum(1 for _ in op.removed_dvs)
    report.merged = merged
    op.summary.update(
        {
            k: str(v)
            for k, v in (
                ("removed-dvs", len(op.removed_dvs)),
                ("removed-position-delete-files", pos_files),
                ("removed-position-deletes", removed_rows),
                ("removed-files-size", removed_bytes),
                ("deleted-records", deleted_records),
            )
            if v
        }
    )


def partition_values(spec: Any, schema: Schema, values: list[Any]) -> tuple[Any, ...]:
    """A new data file's partition values as the tasks return them (JSON: bytes as {"b":
    hex}, a decimal as {"d": text}), in the form pyiceberg's manifest writer takes."""
    import decimal

    from pyiceberg.types import BinaryType, FixedType, UUIDType

    out = []
    for f, v in zip(spec.fields, values):
        if isinstance(v, dict):
            v = bytes.fromhex(v["b"]) if "b" in v else decimal.Decimal(v["d"])
        kind = f.transform.result_type(schema.find_type(f.source_id))
        if v is not None and isinstance(kind, UUIDType):
            v = uuid.UUID(bytes=v)
        elif v is not None and isinstance(kind, (FixedType, BinaryType)):
            v = bytes(v)
        out.append(v)
    return tuple(out)
