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
from typing import TYPE_CHECKING, Any

from mor import interrupts
from mor.commits import (
    DeleteKey,
    FileOut,
    HeadRead,
    SparkArg,
    commit_change,
    delete_files_of,
    delete_key_of,
    file_out,
    read_head,
    session_of,
    undo_written,
    write_vectors,
)
from mor.planner.errors import InternalError, MorError, UnsupportedError
from mor.writer.files import (
    content_size,
    data_file_of,
    delete_files,
    list_files,
    named_data_file,
    v3_field,
    write_position_deletes,
)
from mor.writer.operations import RewriteFiles
from mor.writer.policy import (
    DELETE_RATIO,
    MIN_INPUT_FILES,
    TARGET_FILE_SIZE,
    Candidate,
    RewriteGroup,
    Thresholds,
    choose_rewrites,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyspark.sql import SparkSession

    from mor.planner.manifests import EntryFile


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
    from mor.physical.rewrite_jobs import deleted_positions
    from mor.planner.nodes import only_files

    started = time.perf_counter()
    note = progress or (lambda text: None)
    why = "convert-equality-deletes writes position delete files (v2) or deletion vectors (v3)"
    read = read_head(catalog, warehouse, table, branch, why)
    report = ConvertReport(table, branch, read.head.snapshot_id, dry_run)
    note(f"planning {table} at snapshot {read.head.snapshot_id}")
    chosen = {p for p, (t, _) in read.tasks.items() if t.eq_deletes}
    kept = read.kept_by(where, read.table.schema())
    if kept is not None:
        chosen &= kept
    eq_files = delete_files_of(read, "eq")
    needed = read.needed(chosen, ("eq",))
    removed = {p for p in eq_files if isinstance(p, str) and p not in needed}  # by path
    report.kept = len(eq_files) - len(removed)
    report.removed = [file_out(eq_files[p][0]) for p in sorted(removed)]
    report.data_files = len(chosen)
    report.data_rows = sum(read.tasks[p][0].record_count for p in chosen)
    found: dict[str, pa.Array] = {}
    if chosen:
        note(f"resolving the equality deletes of {len(chosen)} data files")
        with interrupts.spark_action():
            found = deleted_positions(session_of(spark), only_files(read.plan, chosen))
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


def _convert(
    read: HeadRead,
    report: ConvertReport,
    found: dict[str, pa.Array],
    chosen: set[str],
    removed: set[str],
    eq_files: dict[DeleteKey, tuple[EntryFile, int]],
    note: Callable[[str], None],
) -> None:
    """Write what the conversion found and commit it, with the removed equality deletes."""
    change = RewriteFiles(
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
        pos_files = {k: f for k, (f, _) in delete_files_of(read, "pos").items()}
        write_vectors(read, found, pos_files, change)
        report.replaced = len(change.removed_dvs)
        report.merged = [file_out(pos_files[p]) for p in sorted(change.removed - removed)]
    else:
        note(f"writing {len(found)} position delete files")
        try:
            for path, positions in sorted(found.items()):
                if len(positions):
                    change.added.append(
                        write_position_deletes(read.table, read.data[path], positions)
                    )
        except BaseException as e:
            undo_written(read.table.io, [f.file_path for f in change.added], e)
            raise
    report.written = [
        FileOut(
            f.file_path, f.record_count, content_size(f), v3_field(f, "referenced_data_file") or ""
        )
        for f in change.added
    ]
    note("committing")
    commit_change(report, read, change)


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
    read = read_head(
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
    report.removed = [file_out(read.deletes[k][0]) for k in sorted(removed, key=str)]
    if not dry_run and (rewritten or removed):
        _rewrite(read, report, schema, groups, removed, spark, note)
    report.seconds = time.perf_counter() - started
    return report


def _schema_of(read: HeadRead) -> Schema:
    """The schema mor reads the head with (planner/schemas.schema_at: a branch head other
    than the current snapshot is read with its own), the one the new files are written in;
    refused when Spark's writer cannot write it as Iceberg reads it."""
    tbl, head = read.table, read.head
    schema = tbl.schema()  # checked by read_head
    if head.snapshot_id != tbl.metadata.current_snapshot_id and head.schema_id is not None:
        schema = next((s for s in tbl.metadata.schemas if s.schema_id == head.schema_id), schema)
        _writable(schema, read.name)
    return schema


def _candidates(read: HeadRead, kept: set[str] | None) -> list[Candidate]:
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
            if named_data_file(read.deletes[delete_key_of(by_id[i])][0]) == path
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
    read: HeadRead,
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
            with interrupts.spark_action():
                added = _write_groups(read, schema, groups, folder, session_of(spark))
        report.written = [FileOut(f.file_path, f.record_count, f.file_size_in_bytes) for f in added]
        change = _compaction(read, report, rewritten, removed, added)
        note("committing")
        commit_change(report, read, change)
    except KeyboardInterrupt as e:
        if report.snapshot is not None:
            raise  # committed before the interrupt took effect (its detail says so)
        what = f"compact of {read.name}"
        raise interrupts.not_committed(what, read.name, lambda: _clear(tbl.io, folder)) from e
    except BaseException:
        _clear(tbl.io, folder)
        raise
    # what Spark wrote beside the data files (checksums): referenced by no snapshot
    if rewritten:
        _clear(tbl.io, folder, keep=frozenset(f.file_path for f in added))


def _write_groups(
    read: HeadRead, schema: Schema, groups: list[RewriteGroup], folder: str, session: SparkSession
) -> list[DataFile]:
    """One Spark job writing each group's live rows (planned by mor at the read's snapshot,
    every delete applied) under `folder`, one sub-folder per group; the manifest records of
    the files written (by the writer `arrow_store` chooses)."""
    import io

    import pyarrow.parquet as pq

    from mor.physical.rewrite_jobs import (
        Column,
        Group,
        arrow_store,
        write_arrow,
        write_compacted,
    )
    from mor.physical.spark.store_access import access_for
    from mor.planner.nodes import LINEAGE_COLUMNS, only_files
    from mor.planner.sources import PathMap
    from mor.planning import plan_query

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
    read: HeadRead, schema: Schema, group: RewriteGroup, path: str, footer: Any = None
) -> DataFile:
    """The manifest record of a new file of `group`: in the partition and spec of the
    group's files, its metrics from `footer` (as its writer returned it) or read from it."""
    first = group.paths[0]
    spec_id = read.tasks[first][0].spec_id
    return data_file_of(read.table, path, read.data[first].partition, spec_id, schema, footer)


def _new_files(
    read: HeadRead, schema: Schema, groups: list[RewriteGroup], folder: str
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
    read: HeadRead,
    report: CompactReport,
    rewritten: set[str],
    removed: set[DeleteKey],
    added: list[DataFile],
) -> RewriteFiles:
    """The replace a compaction commits: the new data files at the read's data sequence
    number in place of the rewritten ones, the removed delete files and vectors."""
    from pyiceberg.manifest import DataFileContent

    deletes = read.deletes
    eq_removed = {k for k in removed if deletes[k][0].content == DataFileContent.EQUALITY_DELETES}
    pos_removed = removed - eq_removed
    dvs = {k for k in removed if isinstance(k, tuple)}
    return RewriteFiles(
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


def _clear(io: FileIO, folder: str, keep: frozenset[str] = frozenset()) -> int:
    """Delete what mor wrote under `folder` but `keep` (best effort: a file that cannot be
    deleted is referenced by no snapshot); a local folder left empty is removed. The number
    of files left (-1: a store that refused the listing; a folder never made lists empty)."""
    import os
    import shutil

    try:
        made = list_files(io, folder)
    except Exception:  # noqa: BLE001 - a store that refused listing: `mor orphans` finds them
        return -1
    left = delete_files(io, [p for p in made if p not in keep])
    local = folder.removeprefix("file://").removeprefix("file:")
    if not keep and "://" not in local and os.path.isdir(local):
        shutil.rmtree(local, ignore_errors=True)
    return len(left)
