"""Maintenance: equality deletes converted to position deletes, committed through the catalog.

`convert_equality_deletes(table)` (CLI: `mor convert-equality-deletes TABLE`):

1. the branch's head is read once; everything below is computed on that snapshot;
2. mor plans `SELECT *` of it (the equality-delete rewrite applied) and takes the data files
   equality deletes reach (`--where`: those of the partitions a filter keeps);
3. the positions those deletes remove from each file are found by the step a query of mor
   runs to resolve them (physical/maintenance.py: one Spark job per set of id sets);
4. each file's positions are written as one position delete file naming that file alone (v2),
   or, on a v3 table, as one deletion vector per file holding them together with every
   position the file's current deletion vector and position delete files delete (the vector
   replaces the one it had, as the spec asks of a writer), all vectors in one Puffin file;
5. the equality delete files no live data file needs any more are removed: a file is kept
   while it applies to a data file left unconverted (outside `--where`);
6. one snapshot (`replace`: no row changes) is committed atomically through the table's
   catalog, rebased over commits that landed meanwhile unless one conflicts
   (planner/commit.py); nothing is left behind when it fails.

`--dry-run` stops after step 3 and reports what it would write and remove. Format versions 2
and 3, for compaction (below) too: on v3 the rows it moves keep their row lineage.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from mor.planner.commit import Rewrite, commit_rewrite, v3_field, write_position_deletes
from mor.planner.errors import InternalError, MorError, TableNotFoundError, UnsupportedError


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


def _table(
    catalog: Any, warehouse: str | None, table: str, versions: tuple[int, ...], why: str
) -> tuple[Any, Any]:
    """The catalog and the table a maintenance command commits through; a table of another
    format version than `versions` refused in one line (`why`: what the command writes)."""
    from mor.api import resolve_catalog

    cat = resolve_catalog(catalog, warehouse)
    try:
        tbl = cat.load_table(table)
    except Exception as e:  # noqa: BLE001 - NoSuchTableError and kin: one line
        raise TableNotFoundError(f"{table}: {e}") from e
    version = tbl.metadata.format_version
    if version not in versions:
        raise UnsupportedError(f"{table}: format version {version}; {why}")
    return cat, tbl


def _session(spark: Any) -> Any:
    """`spark`: a session, a function making one, or None (mor's local one); only called
    when there is something for Spark to do."""
    from mor.physical import local_session, prepare_session

    if spark is None:
        return local_session()
    return spark() if callable(spark) else prepare_session(spark)


def _kept_by(where: str, sql: str, cat: Any, schema: Any, table: str, cache: Any) -> set[str]:
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
            raise MorError(f"--where {where}: {table} has no column {col.name}")
    conjuncts = list(tree.flatten()) if isinstance(tree, exp.And) else [tree]
    plan = plan_query(sql, catalog=cat, cache=cache).optimized
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
    catalog: Any = None,
    warehouse: str | None = None,
    where: str | None = None,
    branch: str = "main",
    dry_run: bool = False,
    spark: Any = None,
    progress: Any = None,
    _before_commit: Any = None,
) -> ConvertReport:
    """Convert the equality deletes of `table` (a name in `catalog`) into position deletes
    and remove the equality delete files no data file needs any more, in one atomic commit.
    `where`: SQL over the table's columns; only the data files of the partitions it keeps
    are converted. `spark`: a session, or a function making one (called only when there is
    something to resolve). `progress(text)`: called at each phase. `_before_commit(attempt)`:
    called before each commit attempt (tests land concurrent commits there)."""
    from pyiceberg.manifest import DataFileContent, FileFormat

    from mor.api import plan_query
    from mor.physical.maintenance import deleted_positions, only_files
    from mor.planner.nodes import IcebergScan
    from mor.planner.state import ProcessCaches

    started = time.perf_counter()
    note = progress or (lambda text: None)
    cat, tbl = _table(
        catalog,
        warehouse,
        table,
        (2, 3),
        "convert-equality-deletes writes position delete files (v2) or deletion vectors (v3)",
    )
    v3 = tbl.metadata.format_version == 3
    head = tbl.metadata.snapshot_by_name(branch)
    if head is None:
        raise MorError(f"{table}: no branch {branch!r}")
    report = ConvertReport(table, branch, head.snapshot_id, dry_run)

    note(f"planning {table} at snapshot {head.snapshot_id}")
    sql = f"SELECT * FROM {table} VERSION AS OF {head.snapshot_id}"
    cache = ProcessCaches()  # this command's own: the --where plan reuses its manifests
    full = plan_query(sql, catalog=cat, cache=cache).optimized
    scans = [n for n in full.walk() if isinstance(n, IcebergScan) and n.files is not None]
    tasks = {t.path: (t, s) for s in scans for t in s.data_files()}
    reached = {p for p, (t, _) in tasks.items() if t.eq_deletes}
    chosen = reached
    if where is not None:
        chosen = reached & _kept_by(where, f"{sql} WHERE {where}", cat, tbl.schema(), table, cache)
    needed = {
        s.deletes_by_id()[i].path
        for p, (t, s) in tasks.items()
        if p not in chosen
        for i in t.eq_deletes
    }

    io = tbl.io
    data_files, eq_files, pos_files = {}, {}, {}
    for manifest in head.manifests(io):
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            f = entry.data_file
            if f.content == DataFileContent.DATA and f.file_path in chosen:
                data_files[f.file_path] = f
            elif f.content == DataFileContent.EQUALITY_DELETES:
                eq_files[f.file_path] = (f, entry.sequence_number or 0)
            elif v3 and f.file_format != FileFormat.PUFFIN:  # Parquet position deletes
                pos_files[f.file_path] = f
    removed = {p for p in eq_files if p not in needed}
    report.kept = len(eq_files) - len(removed)
    report.removed = [
        FileOut(p, eq_files[p][0].record_count, eq_files[p][0].file_size_in_bytes)
        for p in sorted(removed)
    ]
    report.data_files = len(chosen)
    report.data_rows = sum(tasks[p][0].record_count for p in chosen)

    found = {}
    if chosen:
        note(f"resolving the equality deletes of {len(chosen)} data files")
        found = deleted_positions(_session(spark), only_files(full, chosen))
    report.positions = sum(len(v) for v in found.values())
    report.vectors = v3
    if dry_run:
        report.written = [FileOut("", len(v), 0) for v in found.values() if len(v)]
        report.seconds = time.perf_counter() - started
        return report
    if not found and not removed:
        report.seconds = time.perf_counter() - started
        return report

    change = Rewrite(
        added=[],
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
    for p in found:
        if p not in data_files:
            raise InternalError(f"{table}: resolved {p}, which is no live data file")
    if v3:
        note(f"writing {sum(1 for v in found.values() if len(v))} deletion vectors")
        _vectors(tbl, table, tasks, found, data_files, pos_files, change)
        report.replaced = len(change.removed_dvs)
        report.merged = [
            FileOut(p, pos_files[p].record_count, pos_files[p].file_size_in_bytes)
            for p in sorted(change.removed - removed)
        ]
    else:
        note(f"writing {len(found)} position delete files")
        try:
            for path, positions in sorted(found.items()):
                if len(positions):
                    change.added.append(write_position_deletes(tbl, data_files[path], positions))
        except BaseException as e:
            _undo(io, [f.file_path for f in change.added], e)
            raise
    report.written = [
        FileOut(
            f.file_path,
            f.record_count,
            _content_size(f),
            v3_field(f, "referenced_data_file") or "",
        )
        for f in change.added
    ]
    note("committing")
    done = commit_rewrite(cat, table, head, branch, change, before_commit=_before_commit)
    report.snapshot = done.snapshot.snapshot_id
    report.attempts = done.attempts
    report.rebased_over = done.rebased_over
    report.seconds = time.perf_counter() - started
    return report


def _undo(io: Any, paths: list[str], error: BaseException) -> None:
    """Delete the files this command wrote before a commit could take them over (`error`
    stopped it); a MorError names those the store refused to delete, so that they can be
    removed by hand (the commit's own clean-up does the same)."""
    from mor.planner.commit import _delete

    left = _delete(io, paths)
    if left and isinstance(error, MorError):
        raise type(error)(
            f"{error}; files it wrote could not be removed: {', '.join(left)}"
        ) from error


def _content_size(f: Any) -> int:
    """A delete file's bytes: a deletion vector's blob, else the whole file."""
    size = v3_field(f, "content_size_in_bytes")
    return int(size) if size is not None else int(f.file_size_in_bytes)


def _vectors(
    tbl: Any,
    table: str,
    tasks: dict,
    found: dict,
    data_files: dict,
    pos_files: dict,
    change: Rewrite,
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

    import pyarrow as pa
    import pyarrow.compute as pc

    from mor.physical.delete_files import read_positions
    from mor.physical.dv import puffin
    from mor.planner.commit import _named_file, dv_file
    from mor.planner.state import ProcessCaches

    paths = sorted(p for p, v in found.items() if len(v))
    if not paths:
        return
    by_scan: dict[int, tuple[Any, list]] = {}
    for p in paths:
        t, s = tasks[p]
        by_scan.setdefault(id(s), (s, []))[1].append(t)
    merged: dict[str, list[int]] = {}
    old_rows = old_bytes = merged_files = 0
    for s, ts in by_scan.values():
        deletes = s.deletes_by_id()
        current = read_positions(ts, deletes, table, s.source_key, ProcessCaches())
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
                elif d.path in pos_files and _named_file(pos_files[d.path]) == t.path:
                    change.removed.add(d.path)
                    merged_files += 1
                    old_rows += d.record_count
                    old_bytes += d.size_bytes
    data, placed = puffin([(p, merged[p]) for p in paths], "mor convert-equality-deletes")
    path = f"{tbl.metadata.location.rstrip('/')}/data/mor-{uuid.uuid4()}-deletes.puffin"
    with tbl.io.new_output(path).create(overwrite=False) as out:
        out.write(data)
    try:
        for p, (offset, length) in zip(paths, placed):
            change.added.append(
                dv_file(data_files[p], path, len(data), offset, length, len(merged[p]))
            )
    except BaseException as e:
        _undo(tbl.io, [path], e)
        raise
    change.summary.update(
        {
            "added-dvs": str(len(paths)),
            "removed-dvs": str(len(change.removed_dvs)),
            "removed-position-delete-files": str(merged_files),
            "removed-position-deletes": str(old_rows),
            "removed-files-size": str(int(change.summary["removed-files-size"]) + old_bytes),
        }
    )


# Iceberg's defaults for rewrite_data_files (SizeBasedFileRewritePlanner, BinPackRewriteFilePlanner)
TARGET_FILE_SIZE = 512 * 1024 * 1024  # write.target-file-size-bytes
MIN_INPUT_FILES = 5
DELETE_RATIO = 0.3
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


def _writable(schema: Any, table: str) -> None:
    """Refuse, by column, a schema Spark's Parquet writer cannot write as Iceberg reads it."""
    from pyiceberg.types import DecimalType, StructType

    def check(name: str, t: Any) -> None:
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


def _output_files(size: float, target: int) -> int:
    """How many files of about `target` bytes `size` bytes make: a remainder above the
    smallest size worth a file (75% of the target) is a file of its own."""
    n = int(size // target)
    if n == 0 or size - n * target > 0.75 * target:
        n += 1
    return n


def compact(
    table: str,
    *,
    catalog: Any = None,
    warehouse: str | None = None,
    where: str | None = None,
    branch: str = "main",
    target_file_size: int | None = None,
    delete_ratio_threshold: float = DELETE_RATIO,
    delete_file_threshold: int | None = None,
    min_input_files: int = MIN_INPUT_FILES,
    dry_run: bool = False,
    spark: Any = None,
    progress: Any = None,
    _before_commit: Any = None,
) -> CompactReport:
    """Rewrite the data files of `table` that deletes weigh on or whose size is off the
    target, with every delete applied, and remove the delete files that then reach no live
    data file, in one atomic commit (as Iceberg's `rewrite_data_files`, bin-packing).

    A data file qualifies when `delete_file_threshold` or more delete files apply to it,
    when the rows its file-scoped position deletes remove are `delete_ratio_threshold` of its
    rows or more, or when it is under 75% or over 180% of `target_file_size` (default: the
    table's `write.target-file-size-bytes`, else 512 MiB). A partition's qualifying files
    are rewritten when one qualifies by its deletes, when there are `min_input_files` of them
    or when together they make more than one target file. The new files are written in the
    partition and spec they came from (files of an older partition spec stay in it, as
    Iceberg's `output-spec-id` allows: moving their rows into the current spec could put them
    out of reach of a partition-scoped equality delete committed meanwhile, which applies to
    its own spec's files only) and keep the data sequence number of the snapshot read. On a
    v3 table each row is written with the `_row_id` and `_last_updated_sequence_number` it
    read as (stored, else inherited), so every row keeps its lineage."""
    import re
    import uuid as uuidlib

    from pyiceberg.manifest import DataFileContent, ManifestContent

    from mor.api import plan_query
    from mor.physical.maintenance import GROUP, Column, Group, only_files, write_compacted
    from mor.planner.commit import _named_file, data_file_of, list_files
    from mor.planner.manifests import read_manifest
    from mor.planner.nodes import LINEAGE_COLUMNS, IcebergScan
    from mor.planner.sources import PathMap
    from mor.planner.state import ProcessCaches

    started = time.perf_counter()
    note = progress or (lambda text: None)
    if target_file_size is not None and target_file_size <= 0:
        raise MorError("--target-file-size must be a positive number of bytes")
    if not 0 < delete_ratio_threshold <= 1:
        raise MorError("--delete-ratio-threshold must be in (0, 1]")
    if delete_file_threshold is not None and delete_file_threshold < 1:
        raise MorError("--delete-file-threshold must be 1 or more")
    if min_input_files < 1:
        raise MorError("--min-input-files must be 1 or more")
    cat, tbl = _table(catalog, warehouse, table, (2, 3), "compact rewrites v2 and v3 tables")
    lineage = tbl.metadata.format_version >= 3  # rows keep their _row_id and its sequence
    _writable(tbl.schema(), table)
    head = tbl.metadata.snapshot_by_name(branch)
    if head is None:
        if branch == "main" and not tbl.metadata.snapshots:
            raise MorError(f"{table}: the table has no snapshot yet; nothing to compact")
        raise MorError(f"{table}: no branch {branch!r}")
    # the schema mor reads the head with (planner/schemas.schema_at: a branch head other
    # than the current snapshot is read with its own), the one the new files are written in
    schema = tbl.schema()
    if head.snapshot_id != tbl.metadata.current_snapshot_id and head.schema_id is not None:
        schema = next((s for s in tbl.metadata.schemas if s.schema_id == head.schema_id), schema)
        _writable(schema, table)
    props = tbl.metadata.properties
    target = target_file_size or int(props.get("write.target-file-size-bytes", TARGET_FILE_SIZE))
    report = CompactReport(table, branch, head.snapshot_id, dry_run, target)

    note(f"planning {table} at snapshot {head.snapshot_id}")
    sql = f"SELECT * FROM {table} VERSION AS OF {head.snapshot_id}"
    cache = ProcessCaches()
    full = plan_query(sql, catalog=cat, cache=cache).optimized
    scans = [n for n in full.walk() if isinstance(n, IcebergScan) and n.files is not None]
    tasks = {t.path: (t, s) for s in scans for t in s.data_files()}
    kept = (
        None
        if where is None
        else _kept_by(where, f"{sql} WHERE {where}", cat, schema, table, cache)
    )

    io = tbl.io
    live: dict[str, Any] = {}
    # every live delete file of the head, dangling ones too, by path (a deletion vector: by
    # its Puffin file and offset, several sharing one file); read by mor's manifest reader,
    # which keeps the v3 fields (pyiceberg 0.12 reads `referenced_data_file` and
    # `content_offset` away)
    deletes: dict[Any, tuple[Any, int]] = {}
    for manifest in head.manifests(io):
        if manifest.content == ManifestContent.DELETES:
            for entry in read_manifest(io, manifest):
                f = entry.data_file
                at = f.content_offset
                deletes[f.file_path if at is None else (f.file_path, at)] = (
                    f,
                    entry.sequence_number or 0,
                )
            continue
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            live[entry.data_file.file_path] = entry.data_file
    if set(live) != set(tasks):
        raise InternalError(f"{table}: the plan of snapshot {head.snapshot_id} misses data files")

    default = tbl.metadata.default_spec_id
    small, large = 0.75 * target, 1.8 * target
    groups: dict[tuple[int, int], list[tuple[Any, bool, float]]] = {}
    for path, (t, s) in tasks.items():
        if kept is not None and path not in kept:
            continue
        by_id = s.deletes_by_id()
        n_deletes = len(t.pos_deletes) + len(t.eq_deletes)
        known = sum(
            by_id[i].record_count
            for i in t.pos_deletes
            if _named_file(deletes[_key(by_id[i])][0]) == path
        )
        ratio = min(known, t.record_count) / t.record_count if t.record_count else 1.0
        heavy = n_deletes > 0 and (
            ratio >= delete_ratio_threshold
            or (delete_file_threshold is not None and n_deletes >= delete_file_threshold)
        )
        if not heavy and small <= t.size_bytes <= large:
            continue
        live_share = 1.0 - ratio if n_deletes else 1.0
        groups.setdefault((t.spec_id, t.partition_id), []).append((t, heavy, live_share))
    chosen: list[list[tuple[Any, bool, float]]] = []
    for files in groups.values():
        size = sum(t.size_bytes for t, _, _ in files)
        if (
            any(heavy for _, heavy, _ in files)
            or len(files) >= min_input_files
            or (len(files) > 1 and size > target)
            or size > large
        ):
            chosen.append(sorted(files, key=lambda x: x[0].path))
    rewritten = {t.path for files in chosen for t, _, _ in files}
    report.older_specs = sum(1 for p in rewritten if tasks[p][0].spec_id != default)
    needed = {
        _key(s.deletes_by_id()[i])
        for p, (t, s) in tasks.items()
        if p not in rewritten
        for i in (*t.pos_deletes, *t.eq_deletes)
    }
    removed = {k for k in deletes if k not in needed}  # dangling ones too
    plan_groups = [
        Group(
            tuple(t.path for t, _, _ in files),
            _output_files(sum(t.size_bytes * share for t, _, share in files), target),
        )
        for files in chosen
    ]
    report.partitions = len(chosen)
    report.data_files = len(rewritten)
    report.data_rows = sum(live[p].record_count for p in rewritten)
    report.data_bytes = sum(live[p].file_size_in_bytes for p in rewritten)
    report.estimated_files = sum(g.files for g in plan_groups)
    report.removed = [_removed(deletes[k][0]) for k in sorted(removed, key=str)]
    if dry_run or not (rewritten or removed):
        report.seconds = time.perf_counter() - started
        return report

    folder = f"{tbl.metadata.location.rstrip('/')}/data/mor-compact-{uuidlib.uuid4()}"
    added = []
    try:
        if rewritten:
            note(f"rewriting {len(rewritten)} data files of {len(chosen)} partitions")
            session = _session(spark)
            columns = [
                Column(f.name, f.field_id, f.field_type.model_dump_json()) for f in schema.fields
            ]
            if lineage:  # v3: each row's lineage, as read (stored, else inherited), kept
                columns += [Column(n, i, '"long"') for n, i in LINEAGE_COLUMNS.items()]
            names = ", ".join("`" + c.name.replace("`", "``") + "`" for c in columns)
            rows_sql = f"SELECT {names}, _file, _pos FROM {table} VERSION AS OF {head.snapshot_id}"
            rows = only_files(plan_query(rows_sql, catalog=cat, cache=cache).optimized, rewritten)
            write_compacted(
                session,
                rows,
                columns,
                plan_groups,
                PathMap.of(None)(folder),
                props.get("write.parquet.compression-codec", "zstd"),
            )
            note("reading the new files' footers")
            for path in list_files(io, folder):
                name = path.rsplit("/", 1)[-1]
                m = re.search(rf"/{GROUP}=(\d+)/", path)
                if m is None or not name.endswith(".parquet") or name[0] in "._":
                    continue
                first = plan_groups[int(m.group(1))].paths[0]
                spec_id = tasks[first][0].spec_id
                f = data_file_of(tbl, path, live[first].partition, spec_id, schema)
                if f.record_count:  # Spark writes an empty file where no row is left
                    added.append(f)
        report.written = [FileOut(f.file_path, f.record_count, f.file_size_in_bytes) for f in added]
        eq_removed = {
            k for k in removed if deletes[k][0].content == DataFileContent.EQUALITY_DELETES
        }
        pos_removed = removed - eq_removed
        dvs = {k for k in removed if isinstance(k, tuple)}
        change = Rewrite(
            added=[],
            removed=removed - dvs,
            removed_dvs=dvs,
            data=set(rewritten),
            reach_seq=max((deletes[p][1] for p in eq_removed), default=0),
            added_data=added,
            removed_data=set(rewritten),
            data_seq=head.sequence_number,
            summary={
                "deleted-records": str(report.data_rows),
                "removed-position-deletes": str(
                    sum(deletes[p][0].record_count for p in pos_removed)
                ),
                "removed-equality-deletes": str(
                    sum(deletes[p][0].record_count for p in eq_removed)
                ),
                "removed-files-size": str(report.data_bytes + sum(f.bytes for f in report.removed)),
                **({"removed-dvs": str(len(dvs))} if dvs else {}),
                "mor.operation": "compact",
            },
        )
        note("committing")
        done = commit_rewrite(cat, table, head, branch, change, before_commit=_before_commit)
    except BaseException:
        _clear(io, folder)
        raise
    # what Spark wrote beside the data files (checksums): referenced by no snapshot
    if rewritten:
        _clear(io, folder, keep={f.file_path for f in added})
    report.snapshot = done.snapshot.snapshot_id
    report.attempts = done.attempts
    report.rebased_over = done.rebased_over
    report.seconds = time.perf_counter() - started
    return report


def _key(d: Any) -> Any:
    """A delete file of a plan (DeleteTask) as compaction keys the head's: by path, a
    deletion vector by (Puffin path, offset)."""
    return (d.path, d.dv.offset) if d.is_dv else d.path


def _removed(f: Any) -> FileOut:
    """A removed delete file of the head's manifests (a deletion vector: its blob's bytes and
    the data file it names, as the conversion reports the ones it replaces)."""
    if f.content_offset is None:
        return FileOut(f.file_path, f.record_count, f.file_size_in_bytes)
    return FileOut(f.file_path, f.record_count, f.content_size_in_bytes, f.referenced_data_file)


def _clear(io: Any, folder: str, keep: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Delete what mor wrote under `folder` but `keep` (best effort: a file that cannot be
    deleted is referenced by no snapshot); a local folder left empty is removed."""
    import os
    import shutil

    from mor.planner.commit import _delete, list_files

    try:
        made = list_files(io, folder)
    except Exception:  # noqa: BLE001 - nothing written, or a store that refused listing
        made = []
    _delete(io, [p for p in made if p not in keep])
    local = folder.removeprefix("file://").removeprefix("file:")
    if not keep and "://" not in local and os.path.isdir(local):
        shutil.rmtree(local, ignore_errors=True)
