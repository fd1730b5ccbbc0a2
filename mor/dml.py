"""Row-level writes without Iceberg's runtime: `DELETE FROM t WHERE ...` as a merge-on-read
commit, as Iceberg's Spark writer makes it in merge-on-read mode.

`delete_rows(sql)` (the API's `mor_sql("DELETE ...")`, the CLI's `mor run`):

1. the head of the branch is read once; everything below is computed on that snapshot;
2. the rows to delete are those of `SELECT _file, _pos FROM t VERSION AS OF <head> WHERE
   <condition>`, planned by mor and run by Spark: every delete already committed applied
   (a deleted row is not deleted again), the condition with Spark SQL's semantics (a row
   whose condition is NULL stays), subqueries over any table included;
3. each data file's positions are written as one position delete file naming that file
   alone (v2: Iceberg's file granularity), or, on a v3 table, as one deletion vector per file
   holding them together with every position its current vector and file-scoped position
   delete files delete (the vector replaces the old one, as the spec asks), all in one
   Puffin file;
4. one snapshot (operation `delete`) is committed atomically through the table's catalog
   (writer/producer.py), with Iceberg's `RowDelta` validations against every snapshot
   committed meanwhile: a data file it deletes from removed, or given new position deletes
   or a vector, conflicts; so do new equality deletes that may hold rows its condition
   matches, and under `write.delete.isolation-level=serializable` (the default) new data
   files that may (judged by their partition values and column metrics, as Iceberg's
   conflict detection filter). Anything else is rebased over. Nothing is left behind when
   it fails.

A statement that matches no row commits nothing. `dry_run` stops after step 2 and reports
what it would write.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from mor.commits import (
    FileOut,
    HeadRead,
    SparkArg,
    commit_change,
    delete_files_of,
    file_out,
    read_head,
    session_of,
    undo_written,
    write_vectors,
)
from mor.planner.errors import InternalError, MorError, NotAQueryError, UnsupportedError
from mor.writer.files import content_size, v3_field, write_position_deletes
from mor.writer.producer import Change

if TYPE_CHECKING:
    from collections.abc import Callable

    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from sqlglot import exp

    from mor.planner.sql import Statement

ISOLATION = "write.delete.isolation-level"
ISOLATION_LEVELS = ("serializable", "snapshot")


@dataclass
class RowWriteReport:
    """What a row-level statement deleted and wrote (or would, with `dry_run`)."""

    statement: str  # DELETE
    table: str
    branch: str
    base_snapshot: int | None  # the snapshot read (None: the table had none)
    dry_run: bool
    isolation: str = "serializable"
    rows: int = 0  # rows deleted
    data_files: int = 0  # data files they were in
    written: list[FileOut] = field(default_factory=list)  # position delete files / vectors
    vectors: bool = False  # v3: deletion vectors (in one Puffin file)
    replaced: int = 0  # v3: deletion vectors the new ones replace
    merged: list[FileOut] = field(default_factory=list)  # v3: position delete files merged
    snapshot: int | None = None  # committed
    attempts: int = 0
    rebased_over: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """One line: what the statement did."""
        what = (
            f"{len(self.written)} {'deletion vectors' if self.vectors else 'position delete files'}"
        )
        if not self.dry_run and self.written:
            what += f" ({sum(f.bytes for f in self.written)} bytes"
            if self.vectors:
                what += f", replacing {self.replaced}"
                if self.merged:
                    what += f" and {len(self.merged)} position delete files"
            what += ")"
        rows = f"{self.rows} rows of {self.data_files} data files"
        if self.dry_run:
            head = (
                f"{self.table}: dry run on snapshot {self.base_snapshot}, nothing written; "
                f"would delete {rows}, writing {what}"
            )
        elif self.snapshot is not None:
            head = (
                f"{self.table}: deleted {rows}; wrote {what}; snapshot {self.snapshot} "
                f"committed on {self.branch}"
            )
            if self.rebased_over:
                head += f" (rebased over {len(self.rebased_over)} commits, {self.isolation})"
        else:
            head = (
                f"{self.table}: no row matches in snapshot {self.base_snapshot}; nothing committed"
            )
        return f"{head}; {self.seconds:.1f} s"


def is_row_write(tree: exp.Expression) -> bool:
    """Whether a parsed statement is one of the row-level writes mor commits."""
    from sqlglot import exp

    return isinstance(tree, exp.Delete)


def delete_rows(
    sql: str | Statement,
    *,
    catalog: Catalog | str | None = None,
    warehouse: str | None = None,
    branch: str = "main",
    dry_run: bool = False,
    spark: SparkArg = None,
    progress: Callable[[str], None] | None = None,
) -> RowWriteReport:
    """Run `DELETE FROM <table> [WHERE <condition>]` (Spark SQL) as one merge-on-read commit
    on `branch` of the table in `catalog`. `spark`: a session, or a function making one (the
    rows to delete are found by Spark). `progress(text)`: called at each phase."""
    from mor.planner.sql import one_statement

    started = time.perf_counter()
    note = progress or (lambda text: None)
    stmt = one_statement(sql) if isinstance(sql, str) else sql
    target, where_at = _target(stmt)
    name = _table_name(target)
    why = "DELETE writes position delete files (v2) or deletion vectors (v3)"
    try:
        read = read_head(catalog, warehouse, name, branch, why, empty="nothing to delete")
    except MorError as e:
        if "has no snapshot yet" not in str(e):
            raise
        return RowWriteReport("DELETE", name, branch, None, dry_run)
    isolation = _isolation(read.table.metadata.properties, name)
    report = RowWriteReport("DELETE", name, branch, read.head.snapshot_id, dry_run, isolation)
    report.vectors = read.table.metadata.format_version == 3
    note(f"finding the rows to delete in {name} at snapshot {read.head.snapshot_id}")
    found, may = _positions(stmt, target, where_at, read, spark)
    for p in found:
        if p not in read.data:
            raise InternalError(f"{name}: rows to delete in {p}, which is no live data file")
    report.rows = sum(len(v) for v in found.values())
    report.data_files = len(found)
    if dry_run:
        report.written = [FileOut("", len(v), 0, p) for p, v in sorted(found.items())]
    elif found:
        _write_and_commit(read, report, found, may, note)
    report.seconds = time.perf_counter() - started
    return report


def _target(stmt: Statement) -> tuple[exp.Table, int | None]:
    """The table a DELETE deletes from, and where its WHERE keyword starts in the statement's
    text (None: no WHERE); a clause Spark SQL's DELETE does not have is refused."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.tokens import TokenType

    from mor.planner.sql import DIALECT

    tree = stmt.tree
    if not isinstance(tree, exp.Delete):
        kind = tree.key.upper()
        raise NotAQueryError(f"{kind} statements are not supported: mor writes DELETE FROM")
    for arg, clause in (
        ("using", "USING"),
        ("returning", "RETURNING"),
        ("order", "ORDER BY"),
        ("limit", "LIMIT"),
        ("tables", "several tables"),
    ):
        if tree.args.get(arg):
            raise UnsupportedError(f"DELETE with {clause}: Spark SQL's DELETE FROM has no {clause}")
    target = tree.this
    if not isinstance(target, exp.Table) or not target.name:
        raise UnsupportedError("DELETE FROM needs a table name")
    if target.args.get("version") is not None:
        raise UnsupportedError(
            f"DELETE FROM {_table_name(target)} VERSION AS OF: a snapshot cannot be changed; "
            "use --branch"
        )
    if tree.args.get("where") is None:
        return target, None
    depth = 0
    for t in sqlglot.Dialect.get_or_raise(DIALECT).tokenize(stmt.text):
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif t.token_type == TokenType.WHERE and depth == 0:
            return target, t.start
    raise InternalError(f"DELETE: no WHERE keyword found in {stmt.text!r}")


def target_name(stmt: Statement) -> str:
    """The table a DELETE statement names."""
    return _table_name(_target(stmt)[0])


def _table_name(t: exp.Table) -> str:
    return ".".join(p.name for p in t.parts)


def _isolation(props: dict[str, str], name: str) -> str:
    level = props.get(ISOLATION, "serializable").strip().lower()
    if level not in ISOLATION_LEVELS:
        raise MorError(
            f"{name}: {ISOLATION}={props[ISOLATION]!r}; Iceberg knows serializable and snapshot"
        )
    return level


def _positions(
    stmt: Statement, target: exp.Table, where_at: int | None, read: HeadRead, spark: SparkArg
) -> tuple[dict[str, pa.Array], Callable[[Any], bool] | None]:
    """The positions of the rows to delete (sorted int64) by data file, and the conflict
    detection filter of the condition (None: any file may hold such rows)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from mor.api import mor_errors
    from mor.execution import QueryExecution
    from mor.planner.scan_planning import may_hold

    text, where_col = _rows_query(stmt, target, where_at, read.head.snapshot_id)
    run = QueryExecution(text, catalog=read.catalog, cache=read.cache, spark=None)
    with _positions_of(stmt, where_at, where_col):
        # the target's scan: one as bound, one per branch of the equality-delete rewrite after
        bound = [n for n in run.planned.logical.walk() if _is_target(n)]
        branches = [n for n in run.plan.walk() if _is_target(n)]
        run.use(session_of(spark))
        df = run.dataframe  # Spark analyses the statement: its errors, even with no file left
        got = []
        if any(n.files is None or n.files.data for n in branches):
            per_file = df.groupBy("_file").agg(F.collect_list("_pos").alias("p"))
            with mor_errors(df):
                got = per_file.collect()
    may = may_hold(_source(read), read.table.schema(), bound[0]) if len(bound) == 1 else None
    found = {r["_file"]: pa.array(sorted(r["p"]), pa.int64()) for r in got}
    return found, may


def _is_target(node: Any) -> bool:
    """A scan reading `_file` and `_pos`: the rows query's target (a subquery reading them
    too makes two, and the conflict filter the most cautious)."""
    from mor.planner.nodes import IcebergScan

    return isinstance(node, IcebergScan) and {"_file", "_pos"} <= set(node.hidden)


def _rows_query(
    stmt: Statement, target: exp.Table, where_at: int | None, snapshot_id: int | None
) -> tuple[str, int]:
    """`SELECT _file, _pos FROM <table> [VERSION AS OF <snapshot_id>] [AS alias]` and the
    statement's text from its WHERE on; and the column its WHERE starts at in that text."""
    from sqlglot import exp

    pinned = target.copy()
    pinned.set("alias", None)
    if snapshot_id is not None:
        pinned.set(
            "version",
            exp.Version(this="VERSION", kind="AS OF", expression=exp.Literal.number(snapshot_id)),
        )
    alias = target.args.get("alias")
    prefix = f"SELECT _file, _pos FROM {pinned.sql(dialect='spark')}"
    if alias is not None:
        prefix += f" AS {alias.sql(dialect='spark')}"
    text = prefix if where_at is None else f"{prefix} {stmt.text[where_at:]}"
    return text, len(prefix) + 2


def explained(stmt: Statement) -> tuple[Statement, str]:
    """What EXPLAIN prints for a DELETE: the plan of the query whose rows it deletes (at the
    current snapshot), under a line saying so."""
    from mor.planner.sql import one_statement

    target, where_at = _target(stmt)
    text, _ = _rows_query(stmt, target, where_at, None)
    head = f"DELETE FROM {_table_name(target)}: deletes the rows (_file, _pos) of this query\n"
    return one_statement(text), head


def _source(read: HeadRead) -> Any:
    from mor.api import effective_path_map
    from mor.planner.sources import PathMap, Resolver

    resolver = Resolver(read.catalog, PathMap.of(effective_path_map(None)), None)
    return resolver.loaded(read.name, read.name, read.table)


class _positions_of:
    """Errors about the generated query name lines and columns of the user's statement: the
    generated text is `SELECT _file, _pos FROM <table> ` followed by the statement's text from
    its WHERE on (which starts at column `where_col` of the generated line 1)."""

    def __init__(self, stmt: Statement, where_at: int | None, where_col: int) -> None:
        self.stmt = stmt
        self.where_at = where_at
        self.where_col = where_col

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        if not isinstance(error, MorError) or self.where_at is None:
            return
        start = self.stmt.offset + self.where_at  # the WHERE in the whole input
        before = self.stmt.source[:start]
        line0 = before.count("\n") + 1
        col0 = start - (before.rfind("\n") + 1) + 1

        def moved(m: re.Match[str]) -> str:
            line, col = int(m.group(1)), int(m.group(2))
            if line == 1:
                line, col = line0, max(col0, col0 + col - self.where_col)
            else:
                line = line0 + line - 1
            return f"line {line}, column {col}"

        message = re.sub(r"line (\d+), column (\d+)", moved, str(error))
        message = re.sub(r" VERSION AS OF \d+", "", message)  # the generated query's pin
        if message != str(error):
            error.args = (message, *error.args[1:])


def _write_and_commit(
    read: HeadRead,
    report: RowWriteReport,
    found: dict[str, pa.Array],
    may: Callable[[Any], bool] | None,
    note: Callable[[str], None],
) -> None:
    from pyiceberg.table.snapshots import Operation

    change = Change(
        data=set(found),
        operation=Operation.DELETE,
        conflict_filter=may,
        isolation=report.isolation,
    )
    if report.vectors:
        note(f"writing {len(found)} deletion vectors")
        pos_files = {k: f for k, (f, _) in delete_files_of(read, "pos").items()}
        write_vectors(read, found, pos_files, change, by="mor DELETE")
        report.replaced = len(change.removed_dvs)
        report.merged = [file_out(pos_files[p]) for p in sorted(change.removed)]
        # the Puffin file's counts in the summary are a replace's: a row delta counts its own
        change.summary.pop("added-dvs", None)
    else:
        note(f"writing {len(found)} position delete files")
        try:
            for path, positions in sorted(found.items()):
                change.added.append(write_position_deletes(read.table, read.data[path], positions))
        except BaseException as e:
            undo_written(read.table.io, [f.file_path for f in change.added], e)
            raise
    # each file written is for one data file (a vector names it; a v2 file, by construction)
    named = sorted(found) if not report.vectors else [None] * len(change.added)
    report.written = [
        FileOut(
            f.file_path,
            f.record_count,
            content_size(f),
            v3_field(f, "referenced_data_file") or path or "",
        )
        for f, path in zip(change.added, named)
    ]
    note("committing")
    commit_change(report, read, change)
