"""Maintenance: equality deletes converted to position deletes, committed through the catalog.

`convert_equality_deletes(table)` (CLI: `mor convert-equality-deletes TABLE`):

1. the branch's head is read once; everything below is computed on that snapshot;
2. mor plans `SELECT *` of it (the equality-delete rewrite applied) and takes the data files
   equality deletes reach (`--where`: those of the partitions a filter keeps);
3. the positions those deletes remove from each file are found by the step a query of mor
   runs to resolve them (physical/maintenance.py: one Spark job per set of id sets);
4. each file's positions are written as one position delete file naming that file alone;
5. the equality delete files no live data file needs any more are removed: a file is kept
   while it applies to a data file left unconverted (outside `--where`);
6. one snapshot (`replace`: no row changes) is committed atomically through the table's
   catalog, rebased over commits that landed meanwhile unless one conflicts
   (planner/commit.py); nothing is left behind when it fails.

`--dry-run` stops after step 3 and reports what it would write and remove. Format version 2
tables only; a v3 table (deletion vectors) is refused by name.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from mor.planner.commit import Rewrite, commit_rewrite, write_position_deletes
from mor.planner.errors import InternalError, MorError, TableNotFoundError, UnsupportedError


@dataclass
class FileOut:
    path: str
    rows: int
    bytes: int


@dataclass
class ConvertReport:
    """What a conversion read, wrote and removed (or would, with `dry_run`)."""

    table: str
    branch: str
    base_snapshot: int
    dry_run: bool
    data_files: int = 0  # data files equality deletes reach, converted
    data_rows: int = 0  # their rows, read by the resolving job
    positions: int = 0  # positions written
    written: list[FileOut] = field(default_factory=list)  # position delete files
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
        return (
            f"{head}; {self.data_files} data files ({self.data_rows} rows) read; "
            f"{'would write' if self.dry_run else 'wrote'} {self.positions} positions in "
            f"{len(self.written)} position delete files ({wrote} bytes); "
            f"{'would remove' if self.dry_run else 'removed'} {len(self.removed)} equality "
            f"delete files ({sum(f.rows for f in self.removed)} rows, {gone} bytes), "
            f"kept {self.kept}; {self.seconds:.1f} s"
        )


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
    from pyiceberg.manifest import DataFileContent

    from mor.api import plan_query, resolve_catalog
    from mor.physical import local_session, prepare_session
    from mor.physical.maintenance import deleted_positions, only_files
    from mor.planner.nodes import IcebergScan
    from mor.planner.state import ProcessCaches

    started = time.perf_counter()
    note = progress or (lambda text: None)
    cat = resolve_catalog(catalog, warehouse)
    try:
        tbl = cat.load_table(table)
    except Exception as e:  # noqa: BLE001 - NoSuchTableError and kin: one line
        raise TableNotFoundError(f"{table}: {e}") from e
    version = tbl.metadata.format_version
    if version != 2:
        raise UnsupportedError(
            f"{table}: format version {version}; convert-equality-deletes writes position "
            "delete files of v2 tables (deletion vectors of v3 tables are not written yet)"
        )
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
    data_files, eq_files = {}, {}
    for manifest in head.manifests(io):
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            f = entry.data_file
            if f.content == DataFileContent.DATA and f.file_path in chosen:
                data_files[f.file_path] = f
            elif f.content == DataFileContent.EQUALITY_DELETES:
                eq_files[f.file_path] = (f, entry.sequence_number or 0)
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
        session = (
            local_session()
            if spark is None
            else spark()
            if callable(spark)
            else prepare_session(spark)
        )
        found = deleted_positions(session, only_files(full, chosen))
    report.positions = sum(len(v) for v in found.values())
    if dry_run:
        report.written = [FileOut("", len(v), 0) for v in found.values() if len(v)]
        report.seconds = time.perf_counter() - started
        return report
    if not found and not removed:
        report.seconds = time.perf_counter() - started
        return report

    note(f"writing {len(found)} position delete files")
    added = []
    try:
        for path, positions in sorted(found.items()):
            if path not in data_files:
                raise InternalError(f"{table}: resolved {path}, which is no live data file")
            if len(positions):
                added.append(write_position_deletes(tbl, data_files[path], positions))
    except BaseException:
        for f in added:
            try:
                io.delete(f.file_path)
            except Exception:  # noqa: BLE001 - best effort; the commit never references it
                pass
        raise
    report.written = [FileOut(f.file_path, f.record_count, f.file_size_in_bytes) for f in added]
    change = Rewrite(
        added=added,
        removed=removed,
        data=set(chosen),
        reach_seq=max((eq_files[p][1] for p in removed), default=0),
        summary={
            "removed-equality-delete-files": str(len(removed)),
            "removed-equality-deletes": str(sum(f.rows for f in report.removed)),
            "removed-files-size": str(sum(f.bytes for f in report.removed)),
            "mor.operation": "convert-equality-deletes",
        },
    )
    note("committing")
    done = commit_rewrite(cat, table, head, branch, change, before_commit=_before_commit)
    report.snapshot = done.snapshot.snapshot_id
    report.attempts = done.attempts
    report.rebased_over = done.rebased_over
    report.seconds = time.perf_counter() - started
    return report
