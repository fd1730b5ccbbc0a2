"""Maintenance: equality deletes converted to position deletes, committed through the catalog.

`convert_equality_deletes(table)` (CLI: `mor convert-equality-deletes TABLE`):

1. the branch's head is read once; everything below is computed on that snapshot;
2. mor plans `SELECT *` of it (the equality-delete rewrite applied) and takes the data files
   equality deletes reach (`--where`: those of the partitions a filter keeps);
3. the positions those deletes remove from each file are found by the step a query of mor
   runs to resolve them (physical/rewrite_jobs.py: one Spark job per set of id sets);
4. each file's positions are written as one position delete file naming that file alone (v2),
   or, on a v3 table, as one deletion vector per file holding them together with every
   position the file's current deletion vector and position delete files delete (the vector
   replaces the one it had, as the spec asks of a writer), all vectors in one Puffin file;
5. the equality delete files no live data file needs any more are removed: a file is kept
   while it applies to a data file left unconverted (outside `--where`);
6. one snapshot (`replace`: no row changes) is committed atomically through the table's
   catalog, rebased over commits that landed meanwhile unless one conflicts
   (writer/producer.py); nothing is left behind when it fails.

`--dry-run` stops after step 3 and reports what it would write and remove. Format versions 2
and 3, for compaction (below) too: on v3 the rows it moves keep their row lineage.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeAlias

from mor.planner.errors import InternalError, MorError, TableNotFoundError, UnsupportedError
from mor.writer.files import (
    content_size,
    data_file_of,
    delete_files,
    dv_file,
    list_files,
    named_data_file,
    v3_field,
    write_object,
    write_position_deletes,
)
from mor.writer.policy import (
    DELETE_RATIO,
    MIN_INPUT_FILES,
    TARGET_FILE_SIZE,
    Candidate,
    RewriteGroup,
    Thresholds,
    choose_rewrites,
)
from mor.writer.producer import Change, SnapshotProducer

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot
    from pyspark.sql import SparkSession

    from mor.planner.manifests import EntryFile
    from mor.planner.nodes import DataTask, DeleteTask, IcebergScan, Plan
    from mor.planner.state import ProcessCaches

# a live delete file of a snapshot, as its manifests record it: by path, a deletion vector by
# (Puffin path, blob offset), several vectors sharing one Puffin file
DeleteKey = str | tuple[str, int]
# what a command runs Spark with: a session, a function making one (called only when there is
# something for Spark to do), or None (mor's own local session)
SparkArg: TypeAlias = "SparkSession | Callable[[], SparkSession] | None"


@dataclass
class FileOut:
    path: str
    rows: int
    bytes: int
    data_file: str = ""  # a deletion vector's: the data file it applies to


@dataclass
class ConvertReport:
    """What a conversion read, wrote and removed (or would, with `dry_run`)."""

    table: str
    branch: str
    base_snapshot: int
    dry_run: bool
    data_files: int = 0  # data files equality deletes reach, converted
    data_rows: int = 0  # their rows, read by the resolving job
    positions: int = 0  # positions the equality deletes remove, written
    written: list[FileOut] = field(default_factory=list)  # position delete files / vectors
    vectors: bool = False  # v3: deletion vectors (in one Puffin file) instead of files
    replaced: int = 0  # v3: deletion vectors replaced by the new ones
    # v3: file-scoped position delete files whose positions the new vectors hold, removed
    merged: list[FileOut] = field(default_factory=list)
    removed: list[FileOut] = field(default_factory=list)  # equality delete files
    kept: int = 0  # equality delete files kept: they reach data files left unconverted
    snapshot: int | None = None  # committed
    attempts: int = 0
    rebased_over: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """The summary line the CLI ends with."""
        wrote = sum(f.bytes for f in self.written)
        gone = sum(f.bytes for f in self.removed)
        head = (
            f"{self.table}: dry run on snapshot {self.base_snapshot}, nothing written"
            if self.dry_run
            else f"{self.table}: snapshot {self.snapshot} committed on {self.branch}"
            if self.snapshot is not None
            else f"{self.table}: nothing to convert in snapshot {self.base_snapshot}"
        )
        what = (
            f"{len(self.written)} deletion vectors"
            + (
                ""
                if self.dry_run
                else f" ({wrote} bytes, replacing {self.replaced}"
                + (f" and {len(self.merged)} position delete files" if self.merged else "")
                + ")"
            )
            if self.vectors
            else f"{len(self.written)} position delete files ({wrote} bytes)"
        )
        return (
            f"{head}; {self.data_files} data files ({self.data_rows} rows) read; "
            f"{'would write' if self.dry_run else 'wrote'} {self.positions} positions in "
            f"{what}; "
            f"{'would remove' if self.dry_run else 'removed'} {len(self.removed)} equality "
            f"delete files ({sum(f.rows for f in self.removed)} rows, {gone} bytes), "
            f"kept {self.kept}; {self.seconds:.1f} s"
        )


@dataclass
class _Read:
    """A maintenance command's read of one snapshot: the table, the head of the branch it
    reads, mor's plan of `SELECT *` at that snapshot (the equality-delete rewrite applied),
    its data files' tasks (by recorded path, with their scans) and the snapshot's live files
    as its manifests record them (read by planner's manifest reader)."""

    catalog: Catalog
    table: Table
    name: str
    branch: str
    head: Snapshot
    cache: ProcessCaches  # the command's own: later plans reuse its manifests
    plan: Plan
    tasks: dict[str, tuple[DataTask, IcebergScan]]
    data: dict[str, EntryFile]  # live data files by path
    deletes: dict[DeleteKey, tuple[EntryFile, int]]  # with its data sequence number

    @property
    def sql(self) -> str:
        return f"SELECT * FROM {self.name} VERSION AS OF {self.head.snapshot_id}"

    def kept_by(self, where: str | None, schema: Schema) -> set[str] | None:
        """The data files a `--where` filter keeps (None: no filter)."""
        if where is None:
            return None
        return _kept_by(where, f"{self.sql} WHERE {where}", self, schema)

    def needed(self, rewritten: set[str], kinds: tuple[str, ...]) -> set[DeleteKey]:
        """The keys of the delete files (of `kinds`: "pos", "eq") some data file outside
        `rewritten` still needs."""
        return {
            _key(s.deletes_by_id()[i])
            for p, (t, s) in self.tasks.items()
            if p not in rewritten
            for i in (*(t.pos_deletes if "pos" in kinds else ()), *t.eq_deletes)
        }


def _read(
    catalog: Catalog | str | None,
    warehouse: str | None,
    name: str,
    branch: str,
    why: str,
    empty: str = "",
    check: Callable[[Table], None] = lambda tbl: None,
) -> _Read:
    """Plan the head of `branch` of `name` (a table of format version 2 or 3; `why`: what
    the command writes, in the refusal of another version; `empty`: what to say of a table
    without a snapshot; `check(table)`: refuses what the command cannot write, first)."""
    from mor.api import plan_query, resolve_catalog
    from mor.planner.nodes import IcebergScan
    from mor.planner.state import ProcessCaches

    cat = resolve_catalog(catalog, warehouse)
    try:
        tbl = cat.load_table(name)
    except Exception as e:  # noqa: BLE001 - NoSuchTableError and kin: one line
        raise TableNotFoundError(f"{name}: {e}") from e
    version = tbl.metadata.format_version
    if version not in (2, 3):
        raise UnsupportedError(f"{name}: format version {version}; {why}")
    check(tbl)
    head = tbl.metadata.snapshot_by_name(branch)
    if head is None:
        if empty and branch == "main" and not tbl.metadata.snapshots:
            raise MorError(f"{name}: the table has no snapshot yet; {empty}")
        raise MorError(f"{name}: no branch {branch!r}")
    cache = ProcessCaches()
    sql = f"SELECT * FROM {name} VERSION AS OF {head.snapshot_id}"
    plan = plan_query(sql, catalog=cat, cache=cache).optimized
    scans = [n for n in plan.walk() if isinstance(n, IcebergScan) and n.files is not None]
    tasks = {t.path: (t, s) for s in scans for t in s.data_files()}
    data, deletes = _live(cat, name, tbl, head, cache)
    if set(data) != set(tasks):
        raise InternalError(f"{name}: the plan of snapshot {head.snapshot_id} misses data files")
    return _Read(cat, tbl, name, branch, head, cache, plan, tasks, data, deletes)


def _live(
    cat: Catalog, name: str, tbl: Table, head: Snapshot, cache: ProcessCaches
) -> tuple[dict[str, EntryFile], dict[DeleteKey, tuple[EntryFile, int]]]:
    """The live data files of `head` by path, and its live delete files (dangling ones too)
    with their data sequence numbers, by path (a deletion vector: by its Puffin file and
    offset, several sharing one file), through planner's manifest reader (pyiceberg 0.12
    reads `referenced_data_file` and `content_offset` away) and the command's caches, where
    planning the head left the manifests it decoded (none is fetched twice)."""
    from pyiceberg.manifest import DataFileContent

    from mor.api import effective_path_map
    from mor.planner.scan_planning import live_entries
    from mor.planner.sources import PathMap, Resolver

    src = Resolver(cat, PathMap.of(effective_path_map(None)), None).loaded(name, name, tbl)
    data: dict[str, EntryFile] = {}
    deletes: dict[DeleteKey, tuple[EntryFile, int]] = {}
    for entry in live_entries(src, head, cache):
        f = entry.file
        if f.content == DataFileContent.DATA:
            data[f.file_path] = f
            continue
        at = f.content_offset
        deletes[f.file_path if at is None else (f.file_path, at)] = (f, entry.seq)
    return data, deletes


def _session(spark: SparkArg) -> SparkSession:
    """`spark`: a session, a function making one, or None (mor's local one); only called
    when there is something for Spark to do."""
    from mor.physical import local_session, prepare_session

    if spark is None:
        return local_session()
    return spark() if callable(spark) else prepare_session(spark)


def _kept_by(where: str, sql: str, read: _Read, schema: Schema) -> set[str]:
    """The recorded paths of the data files a `--where` filter keeps (by their partition
    values and column bounds). Every conjunct must be a comparison mor evaluates on file
    metadata: a filter it could not apply would silently convert every file."""
    import sqlglot
    from sqlglot import exp

    from mor.api import plan_query
    from mor.planner.errors import SqlSyntaxError
    from mor.planner.nodes import IcebergScan
    from mor.planner.sql import DIALECT

    try:
        tree = sqlglot.parse_one(where, dialect=DIALECT)
    except sqlglot.errors.ParseError as e:
        raise SqlSyntaxError(f"--where {where}: {str(e).splitlines()[0]}") from None
    names = {f.name.lower() for f in schema.fields}
    for col in tree.find_all(exp.Column):
        if col.name.lower() not in names:
            raise MorError(f"--where {where}: {read.name} has no column {col.name}")
    conjuncts = list(tree.flatten()) if isinstance(tree, exp.And) else [tree]
    plan = plan_query(sql, catalog=read.catalog, cache=read.cache).optimized
    scans = [n for n in plan.walk() if isinstance(n, IcebergScan)]
    applied = [e for e in scans[0].pushed if e.pred is not None] if scans else []
    if len(applied) < len(conjuncts):
        raise MorError(
            f"--where {where}: only comparisons of the table's columns with literals (=, <, "
            "IN, IS NULL, ... joined by AND) select data files by their metadata"
        )
    return {t.path for n in scans for t in n.data_files()}


def convert_equality_deletes(
    table: str,
    *,
    catalog: Catalog | str | None = None,
    warehouse: str | None = None,
    where: str | None = None,
    branch: str = "main",
    dry_run: bool = False,
    spark: SparkArg = None,
    progress: Callable[[str], None] | None = None,
) -> ConvertReport:
    """Convert the equality deletes of `table` (a name in `catalog`) into position deletes
    and remove the equality delete files no data file needs any more, in one atomic commit.
    `where`: SQL over the table's columns; only the data files of the partitions it keeps
    are converted. `spark`: a session, or a function making one (called only when there is
    something to resolve). `progress(text)`: called at each phase."""
    from mor.physical.rewrite_jobs import deleted_positions, only_files

    started = time.perf_counter()
    note = progress or (lambda text: None)
    why = "convert-equality-deletes writes position delete files (v2) or deletion vectors (v3)"
    read = _read(catalog, warehouse, table, branch, why)
    report = ConvertReport(table, branch, read.head.snapshot_id, dry_run)
    note(f"planning {table} at snapshot {read.head.snapshot_id}")
    chosen = {p for p, (t, _) in read.tasks.items() if t.eq_deletes}
    kept = read.kept_by(where, read.table.schema())
    if kept is not None:
        chosen &= kept
    eq_files = _of_kind(read, "eq")
    needed = read.needed(chosen, ("eq",))
    removed = {p for p in eq_files if isinstance(p, str) and p not in needed}  # by path
    report.kept = len(eq_files) - len(removed)
    report.removed = [_removed(eq_files[p][0]) for p in sorted(removed)]
    report.data_files = len(chosen)
    report.data_rows = sum(read.tasks[p][0].record_count for p in chosen)
    found: dict[str, pa.Array] = {}
    if chosen:
        note(f"resolving the equality deletes of {len(chosen)} data files")
        found = deleted_positions(_session(spark), only_files(read.plan, chosen))
    for p in found:
        if p not in chosen:
            raise InternalError(f"{table}: resolved {p}, which is no live data file")
    report.positions = sum(len(v) for v in found.values())
    report.vectors = read.table.metadata.format_version == 3
    if dry_run:
        report.written = [FileOut("", len(v), 0) for v in found.values() if len(v)]
    elif found or removed:
        _convert(read, report, found, chosen, removed, eq_files, note)
    report.seconds = time.perf_counter() - started
    return report


def _of_kind(read: _Read, kind: str) -> dict[DeleteKey, tuple[EntryFile, int]]:
    """The live delete files of the read: "eq" equality deletes, "pos" position delete
    files (Parquet: deletion vectors are not among them)."""
    from pyiceberg.manifest import DataFileContent, FileFormat

    content = DataFileContent.EQUALITY_DELETES if kind == "eq" else DataFileContent.POSITION_DELETES
    return {
        k: v
        for k, v in read.deletes.items()
        if v[0].content == content and v[0].file_format != FileFormat.PUFFIN
    }


def _convert(
    read: _Read,
    report: ConvertReport,
    found: dict[str, pa.Array],
    chosen: set[str],
    removed: set[str],
    eq_files: dict[DeleteKey, tuple[EntryFile, int]],
    note: Callable[[str], None],
) -> None:
    """Write what the conversion found and commit it, with the removed equality deletes."""
    change = Change(
        removed=set(removed),  # v3: the position delete files merged into vectors join it
        data=set(chosen),
        reach_seq=max((eq_files[p][1] for p in removed), default=0),
        summary={
            "removed-equality-delete-files": str(len(removed)),
            "removed-equality-deletes": str(sum(f.rows for f in report.removed)),
            "removed-files-size": str(sum(f.bytes for f in report.removed)),
            "mor.operation": "convert-equality-deletes",
        },
    )
    if report.vectors:
        note(f"writing {sum(1 for v in found.values() if len(v))} deletion vectors")
        pos_files = {k: f for k, (f, _) in _of_kind(read, "pos").items()}
        _vectors(read, found, pos_files, change)
        report.replaced = len(change.removed_dvs)
        report.merged = [_removed(pos_files[p]) for p in sorted(change.removed - removed)]
    else:
        note(f"writing {len(found)} position delete files")
        try:
            for path, positions in sorted(found.items()):
                if len(positions):
                    change.added.append(
                        write_position_deletes(read.table, read.data[path], positions)
                    )
        except BaseException as e:
            _undo(read.table.io, [f.file_path for f in change.added], e)
            raise
    report.written = [
        FileOut(
            f.file_path, f.record_count, content_size(f), v3_field(f, "referenced_data_file") or ""
        )
        for f in change.added
    ]
    note("committing")
    _committed(report, read, change)


def _committed(report: ConvertReport | CompactReport, read: _Read, change: Change) -> None:
    """Commit `change` on the read's head through the one snapshot producer."""
    done = SnapshotProducer(read.catalog, read.name, read.branch).commit(change, read.head)
    report.snapshot = done.snapshot.snapshot_id
    report.attempts = done.attempts
    report.rebased_over = done.rebased_over


def _undo(io: FileIO, paths: list[str], error: BaseException) -> None:
    """Delete the files this command wrote before a commit could take them over (`error`
    stopped it); a MorError names those the store refused to delete, so that they can be
    removed by hand (the commit's own clean-up does the same)."""
    left = delete_files(io, paths)
    if left and isinstance(error, MorError):
        raise type(error)(
            f"{error}; files it wrote could not be removed: {', '.join(left)}"
        ) from error


def _vectors(
    read: _Read, found: dict[str, pa.Array], pos_files: dict[DeleteKey, EntryFile], change: Change
) -> None:
    """v3: one deletion vector per data file with positions in `found` (what its equality
    deletes remove), merged with every position its current deletion vector and position
    delete files delete, all in one new Puffin file under `<location>/data/`; the vectors
    they replace go to `change.removed_dvs`, the position delete files (`pos_files`, by
    path) that name that data file alone to `change.removed` (their positions are in the
    vector now, as the spec asks of a writer adding one; a file naming several data files
    stays), and the new vectors to `change.added`, with the summary's counts. The Puffin
    file is deleted again when anything fails before the commit takes it over."""
    import uuid

    from mor.physical.deletes.dv import puffin

    paths = sorted(p for p, v in found.items() if len(v))
    if not paths:
        return
    merged, old = _merged_positions(read, paths, found, pos_files, change)
    data, placed = puffin([(p, merged[p]) for p in paths], "mor convert-equality-deletes")
    tbl = read.table
    path = f"{tbl.metadata.location.rstrip('/')}/data/mor-{uuid.uuid4()}-deletes.puffin"
    write_object(tbl.io, path, data)
    try:
        for p, (offset, length) in zip(paths, placed):
            change.added.append(
                dv_file(read.data[p], path, len(data), offset, length, len(merged[p]))
            )
    except BaseException as e:
        _undo(tbl.io, [path], e)
        raise
    change.summary.update(
        {
            "added-dvs": str(len(paths)),
            "removed-dvs": str(len(change.removed_dvs)),
            "removed-position-delete-files": str(old[2]),
            "removed-position-deletes": str(old[0]),
            "removed-files-size": str(int(change.summary["removed-files-size"]) + old[1]),
        }
    )


def _merged_positions(
    read: _Read,
    paths: list[str],
    found: dict[str, pa.Array],
    pos_files: dict[DeleteKey, EntryFile],
    change: Change,
) -> tuple[dict[str, list[int]], tuple[int, int, int]]:
    """Per data file of `paths`: its new positions merged with those its current deletes
    delete (the vectors and file-scoped position delete files they replace go to `change`),
    and (rows, bytes, position delete files) of what they replace."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from mor.physical.deletes.delete_files import read_positions
    from mor.planner.state import ProcessCaches

    by_scan: dict[int, tuple[IcebergScan, list[DataTask]]] = {}
    for p in paths:
        t, s = read.tasks[p]
        by_scan.setdefault(id(s), (s, []))[1].append(t)
    merged: dict[str, list[int]] = {}
    old_rows = old_bytes = merged_files = 0
    for s, ts in by_scan.values():
        deletes = s.deletes_by_id()
        current = read_positions(ts, deletes, read.name, s.io, ProcessCaches())
        for t in ts:
            parts = [found[t.path].cast(pa.int64())]
            if t.file_id in current:
                parts.append(current[t.file_id])
            merged[t.path] = pc.unique(pa.concat_arrays(parts)).sort().to_pylist()
            for d in (deletes[i] for i in t.pos_deletes):
                if d.dv is not None:
                    change.removed_dvs.add((d.path, d.dv.offset))
                    old_rows += d.record_count
                    old_bytes += d.dv.length
                elif d.path in pos_files and named_data_file(pos_files[d.path]) == t.path:
                    change.removed.add(d.path)
                    merged_files += 1
                    old_rows += d.record_count
                    old_bytes += d.size_bytes
    return merged, (old_rows, old_bytes, merged_files)


# column types Spark's Parquet writer writes as Iceberg's readers expect (with field ids):
# lists and maps lose the ids of their elements, keys and values; uuid and fixed are written
# as plain binary; the rest has no Spark type
_WRITABLE = {
    "boolean", "int", "long", "float", "double", "date", "timestamp", "timestamptz",
    "string", "binary",
}  # fmt: skip


@dataclass
class CompactReport:
    """What a compaction read, wrote and removed (or would, with `dry_run`)."""

    table: str
    branch: str
    base_snapshot: int
    dry_run: bool
    target_file_size: int
    partitions: int = 0  # partitions (groups) rewritten
    data_files: int = 0  # data files rewritten
    data_rows: int = 0  # their rows as recorded (deleted ones included)
    data_bytes: int = 0
    written: list[FileOut] = field(default_factory=list)  # new data files
    estimated_files: int = 0  # the files the job was asked to write
    removed: list[FileOut] = field(default_factory=list)  # delete files removed
    older_specs: int = 0  # data files rewritten in the older partition spec they are of
    snapshot: int | None = None
    attempts: int = 0
    rebased_over: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        head = (
            f"{self.table}: dry run on snapshot {self.base_snapshot}, nothing written"
            if self.dry_run
            else f"{self.table}: snapshot {self.snapshot} committed on {self.branch}"
            if self.snapshot is not None
            else f"{self.table}: nothing to compact in snapshot {self.base_snapshot}"
        )
        out = (
            f"about {self.estimated_files} files"
            if self.dry_run
            else f"{len(self.written)} files ({sum(f.rows for f in self.written)} rows, "
            f"{sum(f.bytes for f in self.written)} bytes)"
        )
        verb = "would rewrite" if self.dry_run else "rewrote"
        gone = "would remove" if self.dry_run else "removed"
        older = (
            f" ({self.older_specs} of them in their older partition spec)"
            if self.older_specs
            else ""
        )
        vectors = sum(1 for f in self.removed if f.data_file)  # blobs of Puffin files
        what = (
            f"{len(self.removed) - vectors} delete files and {vectors} deletion vectors"
            if vectors
            else f"{len(self.removed)} delete files"
        )
        return (
            f"{head}; {verb} {self.data_files} data files ({self.data_rows} rows recorded, "
            f"{self.data_bytes} bytes) in {self.partitions} partitions{older} into {out}; "
            f"{gone} {what} ({sum(f.rows for f in self.removed)} "
            f"rows, {sum(f.bytes for f in self.removed)} bytes); {self.seconds:.1f} s"
        )


def _writable(schema: Schema, table: str) -> None:
    """Refuse, by column, a schema Spark's Parquet writer cannot write as Iceberg reads it."""
    from pyiceberg.types import DecimalType, IcebergType, StructType

    def check(name: str, t: IcebergType) -> None:
        if isinstance(t, StructType):
            for f in t.fields:
                check(f"{name}.{f.name}", f.field_type)
            return
        if isinstance(t, DecimalType) or str(t) in _WRITABLE:
            return
        raise UnsupportedError(
            f"{table}: column {name} is of type {t}, which mor's compaction does not write "
            "yet (Spark's Parquet writer loses the field ids of list elements and map keys "
            "and values, and writes uuid and fixed as plain binary)"
        )

    for f in schema.fields:
        check(f.name, f.field_type)


def compact(
    table: str,
    *,
    catalog: Catalog | str | None = None,
    warehouse: str | None = None,
    where: str | None = None,
    branch: str = "main",
    target_file_size: int | None = None,
    delete_ratio_threshold: float = DELETE_RATIO,
    delete_file_threshold: int | None = None,
    min_input_files: int = MIN_INPUT_FILES,
    dry_run: bool = False,
    spark: SparkArg = None,
    progress: Callable[[str], None] | None = None,
) -> CompactReport:
    """Rewrite the data files of `table` that deletes weigh on or whose size is off the
    target, with every delete applied, and remove the delete files that then reach no live
    data file, in one atomic commit (as Iceberg's `rewrite_data_files`, bin-packing; which
    files: writer/policy.py's `choose_rewrites`, the target by default the table's
    `write.target-file-size-bytes`, else 512 MiB).

    The new files are written in the partition and spec they came from (files of an older
    partition spec stay in it, as Iceberg's `output-spec-id` allows: moving their rows into
    the current spec could put them out of reach of a partition-scoped equality delete
    committed meanwhile, which applies to its own spec's files only) and keep the data
    sequence number of the snapshot read. On a v3 table each row is written with the
    `_row_id` and `_last_updated_sequence_number` it read as (stored, else inherited), so
    every row keeps its lineage."""
    started = time.perf_counter()
    note = progress or (lambda text: None)
    try:
        limits = Thresholds(
            TARGET_FILE_SIZE if target_file_size is None else target_file_size,
            delete_ratio_threshold,
            delete_file_threshold,
            min_input_files,
        )
    except ValueError as e:
        raise MorError(str(e)) from None
    read = _read(
        catalog,
        warehouse,
        table,
        branch,
        "compact rewrites v2 and v3 tables",
        "nothing to compact",
        lambda tbl: _writable(tbl.schema(), table),
    )
    schema = _schema_of(read)
    props = read.table.metadata.properties
    if target_file_size is None:
        target = int(props.get("write.target-file-size-bytes", TARGET_FILE_SIZE))
        limits = replace(limits, target=target)
    report = CompactReport(table, branch, read.head.snapshot_id, dry_run, limits.target)
    note(f"planning {table} at snapshot {read.head.snapshot_id}")
    groups = choose_rewrites(_candidates(read, read.kept_by(where, schema)), limits)
    rewritten = {p for g in groups for p in g.paths}
    default = read.table.metadata.default_spec_id
    report.older_specs = sum(1 for p in rewritten if read.tasks[p][0].spec_id != default)
    removed = set(read.deletes) - read.needed(rewritten, ("pos", "eq"))  # dangling ones too
    report.partitions = len(groups)
    report.data_files = len(rewritten)
    report.data_rows = sum(read.data[p].record_count for p in rewritten)
    report.data_bytes = sum(read.data[p].file_size_in_bytes for p in rewritten)
    report.estimated_files = sum(g.files for g in groups)
    report.removed = [_removed(read.deletes[k][0]) for k in sorted(removed, key=str)]
    if not dry_run and (rewritten or removed):
        _rewrite(read, report, schema, groups, removed, spark, note)
    report.seconds = time.perf_counter() - started
    return report


def _schema_of(read: _Read) -> Schema:
    """The schema mor reads the head with (planner/schemas.schema_at: a branch head other
    than the current snapshot is read with its own), the one the new files are written in;
    refused when Spark's writer cannot write it as Iceberg reads it."""
    tbl, head = read.table, read.head
    schema = tbl.schema()  # checked by _read
    if head.snapshot_id != tbl.metadata.current_snapshot_id and head.schema_id is not None:
        schema = next((s for s in tbl.metadata.schemas if s.schema_id == head.schema_id), schema)
        _writable(schema, read.name)
    return schema


def _candidates(read: _Read, kept: set[str] | None) -> list[Candidate]:
    """The live data files the policy weighs (those `kept` by a `--where`): their sizes, the
    delete files that apply to each and the rows its file-scoped deletes remove."""
    out = []
    for path, (t, s) in read.tasks.items():
        if kept is not None and path not in kept:
            continue
        by_id = s.deletes_by_id()
        known = sum(
            by_id[i].record_count
            for i in t.pos_deletes
            if named_data_file(read.deletes[_key(by_id[i])][0]) == path
        )
        out.append(
            Candidate(
                path,
                (t.spec_id, t.partition_id),
                t.size_bytes,
                t.record_count,
                len(t.pos_deletes) + len(t.eq_deletes),
                known,
            )
        )
    return out


def _rewrite(
    read: _Read,
    report: CompactReport,
    schema: Schema,
    groups: list[RewriteGroup],
    removed: set[DeleteKey],
    spark: SparkArg,
    note: Callable[[str], None],
) -> None:
    """Write the groups' live rows as new data files and commit them in place of the old
    ones, with the delete files no other data file needs removed; what was written is
    cleared when anything fails before the commit."""
    import uuid as uuidlib

    tbl = read.table
    folder = f"{tbl.metadata.location.rstrip('/')}/data/mor-compact-{uuidlib.uuid4()}"
    rewritten = {p for g in groups for p in g.paths}
    added: list[DataFile] = []
    try:
        if rewritten:
            note(f"rewriting {len(rewritten)} data files of {len(groups)} partitions")
            added = _write_groups(read, schema, groups, folder, _session(spark))
        report.written = [FileOut(f.file_path, f.record_count, f.file_size_in_bytes) for f in added]
        change = _compaction(read, report, rewritten, removed, added)
        note("committing")
        _committed(report, read, change)
    except BaseException:
        _clear(tbl.io, folder)
        raise
    # what Spark wrote beside the data files (checksums): referenced by no snapshot
    if rewritten:
        _clear(tbl.io, folder, keep=frozenset(f.file_path for f in added))


def _write_groups(
    read: _Read, schema: Schema, groups: list[RewriteGroup], folder: str, session: SparkSession
) -> list[DataFile]:
    """One Spark job writing each group's live rows (planned by mor at the read's snapshot,
    every delete applied) under `folder`, one sub-folder per group; the manifest records of
    the files written (by the writer `arrow_store` chooses)."""
    import io

    import pyarrow.parquet as pq

    from mor.api import plan_query
    from mor.physical.rewrite_jobs import (
        Column,
        Group,
        arrow_store,
        only_files,
        write_arrow,
        write_compacted,
    )
    from mor.physical.spark.store_access import access_for
    from mor.planner.nodes import LINEAGE_COLUMNS
    from mor.planner.sources import PathMap

    columns = [Column(f.name, f.field_id, f.field_type.model_dump_json()) for f in schema.fields]
    if read.table.metadata.format_version >= 3:  # each row's lineage, as read, kept
        columns += [Column(n, i, '"long"') for n, i in LINEAGE_COLUMNS.items()]
    names = ", ".join("`" + c.name.replace("`", "``") + "`" for c in columns)
    rows_sql = f"SELECT {names}, _file, _pos FROM {read.name} VERSION AS OF {read.head.snapshot_id}"
    planned = plan_query(rows_sql, catalog=read.catalog, cache=read.cache).optimized
    rewritten = {p for g in groups for p in g.paths}
    plan, cut = only_files(planned, rewritten), [Group(g.paths, g.files) for g in groups]
    codec = read.table.metadata.properties.get("write.parquet.compression-codec", "zstd")
    access = access_for(read.table.metadata.location, read.table.io, writing=True)
    store = arrow_store(folder, access)
    if store is None:
        write_compacted(session, plan, columns, cut, PathMap.of(None)(folder), codec, access)
        return _new_files(read, schema, groups, folder)
    return [
        _record(
            read, schema, groups[w.group], w.path, (pq.read_metadata(io.BytesIO(w.footer)), w.size)
        )
        for w in write_arrow(session, plan, columns, cut, folder, store, codec)
    ]


def _record(
    read: _Read, schema: Schema, group: RewriteGroup, path: str, footer: Any = None
) -> DataFile:
    """The manifest record of a new file of `group`: in the partition and spec of the
    group's files, its metrics from `footer` (as its writer returned it) or read from it."""
    first = group.paths[0]
    spec_id = read.tasks[first][0].spec_id
    return data_file_of(read.table, path, read.data[first].partition, spec_id, schema, footer)


def _new_files(
    read: _Read, schema: Schema, groups: list[RewriteGroup], folder: str
) -> list[DataFile]:
    """The manifest records of the Parquet files Spark's writer wrote under `folder`, each
    in the partition and spec of its group's files (Spark writes an empty file where no row
    is left: not recorded)."""
    import re

    from mor.physical.rewrite_jobs import GROUP

    out = []
    for path in list_files(read.table.io, folder):
        name = path.rsplit("/", 1)[-1]
        m = re.search(rf"/{GROUP}=(\d+)/", path)
        if m is None or not name.endswith(".parquet") or name[0] in "._":
            continue
        f = _record(read, schema, groups[int(m.group(1))], path)
        if f.record_count:
            out.append(f)
    return out


def _compaction(
    read: _Read,
    report: CompactReport,
    rewritten: set[str],
    removed: set[DeleteKey],
    added: list[DataFile],
) -> Change:
    """The replace a compaction commits: the new data files at the read's data sequence
    number in place of the rewritten ones, the removed delete files and vectors."""
    from pyiceberg.manifest import DataFileContent

    deletes = read.deletes
    eq_removed = {k for k in removed if deletes[k][0].content == DataFileContent.EQUALITY_DELETES}
    pos_removed = removed - eq_removed
    dvs = {k for k in removed if isinstance(k, tuple)}
    return Change(
        removed={k for k in removed if isinstance(k, str)},
        removed_dvs=dvs,
        data=set(rewritten),
        reach_seq=max((deletes[p][1] for p in eq_removed), default=0),
        added_data=added,
        removed_data=set(rewritten),
        data_seq=read.head.sequence_number,
        summary={
            "deleted-records": str(report.data_rows),
            "removed-position-deletes": str(sum(deletes[p][0].record_count for p in pos_removed)),
            "removed-equality-deletes": str(sum(deletes[p][0].record_count for p in eq_removed)),
            "removed-files-size": str(report.data_bytes + sum(f.bytes for f in report.removed)),
            **({"removed-dvs": str(len(dvs))} if dvs else {}),
            "mor.operation": "compact",
        },
    )


def _key(d: DeleteTask) -> DeleteKey:
    """A delete file of a plan (DeleteTask) as the snapshot's files are keyed: by path, a
    deletion vector by (Puffin path, offset)."""
    return (d.path, d.dv.offset) if d.dv is not None else d.path


def _removed(f: EntryFile) -> FileOut:
    """A removed delete file of the head's manifests (a deletion vector: its blob's bytes and
    the data file it names, as the conversion reports the ones it replaces)."""
    if f.content_offset is None:
        return FileOut(f.file_path, f.record_count, f.file_size_in_bytes)
    return FileOut(f.file_path, f.record_count, f.content_size_in_bytes, f.referenced_data_file)


def _clear(io: FileIO, folder: str, keep: frozenset[str] = frozenset()) -> None:
    """Delete what mor wrote under `folder` but `keep` (best effort: a file that cannot be
    deleted is referenced by no snapshot); a local folder left empty is removed."""
    import os
    import shutil

    try:
        made = list_files(io, folder)
    except Exception:  # noqa: BLE001 - nothing written, or a store that refused listing
        made = []
    delete_files(io, [p for p in made if p not in keep])
    local = folder.removeprefix("file://").removeprefix("file:")
    if not keep and "://" not in local and os.path.isdir(local):
        shutil.rmtree(local, ignore_errors=True)
