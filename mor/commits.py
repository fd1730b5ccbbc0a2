"""What mor's write commands share: one read of a branch's head, the Spark session they run,
the deletion vectors they write, and their commit through the one snapshot producer.

The maintenance commands (mor/maintenance.py: conversion, compaction) and the row-level writes
(mor/dml.py: DELETE) each read the head of a branch once (`read_head`: mor's plan of `SELECT *`
at that snapshot, its live files as the manifests record them), compute their change on it, and
commit it with `commit_change` (writer/producer.py: rebased over commits that landed meanwhile
unless one conflicts). What they write before the commit takes it over is deleted again when
anything fails (`undo_written`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

from mor.planner.errors import InternalError, MorError, TableNotFoundError, UnsupportedError
from mor.writer.files import delete_files, dv_file, named_data_file, write_object
from mor.writer.operations import Operation
from mor.writer.producer import SnapshotProducer

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
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
class HeadRead:
    """A write command's read of one snapshot: the table, the head of the branch it
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
            delete_key_of(s.deletes_by_id()[i])
            for p, (t, s) in self.tasks.items()
            if p not in rewritten
            for i in (*(t.pos_deletes if "pos" in kinds else ()), *t.eq_deletes)
        }


def read_head(
    catalog: Catalog | str | None,
    warehouse: str | None,
    name: str,
    branch: str,
    why: str,
    empty: str = "",
    check: Callable[[Table], None] = lambda tbl: None,
) -> HeadRead:
    """Plan the head of `branch` of `name` (a table of format version 2 or 3; `why`: what
    the command writes, in the refusal of another version; `empty`: what to say of a table
    without a snapshot; `check(table)`: refuses what the command cannot write, first)."""
    from mor.catalogs import resolve_catalog
    from mor.planner.nodes import IcebergScan
    from mor.planner.state import ProcessCaches
    from mor.planning import plan_query

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
    return HeadRead(cat, tbl, name, branch, head, cache, plan, tasks, data, deletes)


def _live(
    cat: Catalog, name: str, tbl: Table, head: Snapshot, cache: ProcessCaches
) -> tuple[dict[str, EntryFile], dict[DeleteKey, tuple[EntryFile, int]]]:
    """The live data files of `head` by path, and its live delete files (dangling ones too)
    with their data sequence numbers, by path (a deletion vector: by its Puffin file and
    offset, several sharing one file), through planner's manifest reader (pyiceberg 0.12
    reads `referenced_data_file` and `content_offset` away) and the command's caches, where
    planning the head left the manifests it decoded (none is fetched twice)."""
    from pyiceberg.manifest import DataFileContent

    from mor.planner.scan_planning import live_entries
    from mor.planner.settings import effective_path_map
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


def session_of(spark: SparkArg) -> SparkSession:
    """`spark`: a session, a function making one, or None (mor's local one); only called
    when there is something for Spark to do (physical/spark/session.py)."""
    from mor.physical import session_of as made

    return made(spark)


def _kept_by(where: str, sql: str, read: HeadRead, schema: Schema) -> set[str]:
    """The recorded paths of the data files a `--where` filter keeps (by their partition
    values and column bounds). Every conjunct must be a comparison mor evaluates on file
    metadata: a filter it could not apply would silently convert every file."""
    import sqlglot
    from sqlglot import exp

    from mor.planner.errors import SqlSyntaxError
    from mor.planner.nodes import IcebergScan
    from mor.planner.sql import DIALECT
    from mor.planning import plan_query

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


def delete_files_of(read: HeadRead, kind: str) -> dict[DeleteKey, tuple[EntryFile, int]]:
    """The live delete files of the read: "eq" equality deletes, "pos" position delete
    files (Parquet: deletion vectors are not among them)."""
    from pyiceberg.manifest import DataFileContent, FileFormat

    content = DataFileContent.EQUALITY_DELETES if kind == "eq" else DataFileContent.POSITION_DELETES
    return {
        k: v
        for k, v in read.deletes.items()
        if v[0].content == content and v[0].file_format != FileFormat.PUFFIN
    }


class Reported(Protocol):
    """A command's report: what its commit made."""

    snapshot: int | None
    attempts: int
    rebased_over: list[int]


def commit_change(report: Reported, read: HeadRead, change: Operation) -> None:
    """Commit `change` on the read's head through the one snapshot producer; what it made
    goes to `report`."""
    from mor import interrupts

    operation = change.summary.get("mor.operation", "the commit")

    def outcome() -> str:
        return (
            f"{operation} of {read.name} committed as snapshot {report.snapshot} before it "
            "took effect"
        )

    with interrupts.held(outcome):  # never asked once interrupted; the catalog's answer awaited
        done = SnapshotProducer(read.catalog, read.name, read.branch).commit(change, read.head)
        report.snapshot = done.snapshot.snapshot_id  # known before a held signal is raised
        report.attempts = done.attempts
        report.rebased_over = done.rebased_over


def undo_written(io: FileIO, paths: list[str], error: BaseException) -> None:
    """Delete the files this command wrote before a commit could take them over (`error`
    stopped it); a MorError names those the store refused to delete, so that they can be
    removed by hand (the commit's own clean-up does the same)."""
    left = delete_files(io, paths)
    if left and isinstance(error, MorError):
        raise type(error)(
            f"{error}; files it wrote could not be removed: {', '.join(left)}"
        ) from error


def write_vectors(
    read: HeadRead,
    found: dict[str, pa.Array],
    pos_files: dict[DeleteKey, EntryFile],
    change: Operation,
    by: str = "mor convert-equality-deletes",
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
    data, placed = puffin([(p, merged[p]) for p in paths], by)
    tbl = read.table
    path = f"{tbl.metadata.location.rstrip('/')}/data/mor-{uuid.uuid4()}-deletes.puffin"
    write_object(tbl.io, path, data)
    try:
        for p, (offset, length) in zip(paths, placed):
            d = read.data[p]
            change.added.append(
                dv_file(p, d.partition, d.spec_id, path, len(data), offset, length, len(merged[p]))
            )
    except BaseException as e:
        undo_written(tbl.io, [path], e)
        raise
    change.summary.update(
        {
            "added-dvs": str(len(paths)),
            "removed-dvs": str(len(change.removed_dvs)),
            "removed-position-delete-files": str(old[2]),
            "removed-position-deletes": str(old[0]),
            "removed-files-size": str(int(change.summary.get("removed-files-size", 0)) + old[1]),
        }
    )


def _merged_positions(
    read: HeadRead,
    paths: list[str],
    found: dict[str, pa.Array],
    pos_files: dict[DeleteKey, EntryFile],
    change: Operation,
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


def delete_key_of(d: DeleteTask) -> DeleteKey:
    """A delete file of a plan (DeleteTask) as the snapshot's files are keyed: by path, a
    deletion vector by (Puffin path, offset)."""
    return (d.path, d.dv.offset) if d.dv is not None else d.path


def file_out(f: EntryFile) -> FileOut:
    """A removed delete file of the head's manifests (a deletion vector: its blob's bytes and
    the data file it names, as the conversion reports the ones it replaces)."""
    if f.content_offset is None:
        return FileOut(f.file_path, f.record_count, f.file_size_in_bytes)
    return FileOut(f.file_path, f.record_count, f.content_size_in_bytes, f.referenced_data_file)
