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

    statement: str  # DELETE, UPDATE or MERGE
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
    data_written: list[FileOut] = field(default_factory=list)  # UPDATE: the rows written again
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
        verb = "deleted" if self.statement == "DELETE" else "updated"
        if self.statement == "MERGE":
            verb = "merged"
            rows = (
                f"{self.rows} rows ({self.updated} updated, {self.deleted} deleted, "
                f"{self.inserted} inserted; {self.data_files} data files changed)"
            )
        if self.statement != "DELETE" and not self.dry_run:
            what += (
                f" and {len(self.data_written)} data files ("
                f"{sum(f.rows for f in self.data_written)} rows, "
                f"{sum(f.bytes for f in self.data_written)} bytes)"
            )
        if self.dry_run:
            head = (
                f"{self.table}: dry run on snapshot {self.base_snapshot}, nothing written; "
                f"would {'merge' if verb == 'merged' else verb[:-1]} {rows}, writing {what}"
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


def is_row_write(tree: exp.Expression) -> bool:
    """Whether a parsed statement is one of the row-level writes mor commits."""
    from sqlglot import exp

    return isinstance(tree, (exp.Delete, exp.Update, exp.Merge))


def run_row_write(
    sql: str | Statement,
    *,
    catalog: Catalog | str | None = None,
    warehouse: str | None = None,
    branch: str = "main",
    dry_run: bool = False,
    spark: SparkArg = None,
    progress: Callable[[str], None] | None = None,
) -> RowWriteReport:
    """Run a DELETE, an UPDATE or a MERGE statement (`delete_rows`, `update_rows`,
    mor/merge.py's `merge_rows`)."""
    from sqlglot import exp

    from mor.merge import merge_rows
    from mor.planner.sql import one_statement

    stmt = one_statement(sql) if isinstance(sql, str) else sql
    run = (
        update_rows
        if isinstance(stmt.tree, exp.Update)
        else merge_rows
        if isinstance(stmt.tree, exp.Merge)
        else delete_rows
    )
    return run(
        stmt,
        catalog=catalog,
        warehouse=warehouse,
        branch=branch,
        dry_run=dry_run,
        spark=spark,
        progress=progress,
    )


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
    target, where_at, name, branch, read = _head_of(
        stmt,
        catalog,
        warehouse,
        branch,
        "DELETE writes position delete files (v2) or deletion vectors (v3)",
    )
    if read is None:  # a table without a snapshot: nothing to change
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


def _head_of(
    stmt: Statement, catalog: Catalog | str | None, warehouse: str | None, branch: str, why: str
) -> tuple[exp.Table, int | None, str, str, HeadRead | None]:
    """What DELETE and UPDATE read first: the statement's table (its branch named either
    way), where its WHERE starts, and the head of the branch (None: the table has no
    snapshot yet)."""
    from mor.api import resolve_catalog

    target, where_at = _target(stmt)
    cat = resolve_catalog(catalog, warehouse)
    target, branch = _branch_of(target, branch, cat)
    name = _table_name(target)
    try:
        read = read_head(cat, warehouse, name, branch, why, empty="nothing to change")
    except MorError as e:
        if "has no snapshot yet" not in str(e):
            raise
        return target, where_at, name, branch, None
    return target, where_at, name, branch, read


def _target(stmt: Statement) -> tuple[exp.Table, int | None]:
    """The table a DELETE deletes from, and where its WHERE keyword starts in the statement's
    text (None: no WHERE); a clause Spark SQL's DELETE does not have is refused."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.tokens import TokenType

    from mor.planner.sql import DIALECT

    tree = stmt.tree
    if isinstance(tree, exp.Merge):  # its clauses: mor/merge.py
        return tree.this, None
    if not isinstance(tree, (exp.Delete, exp.Update)):
        kind = tree.key.upper()
        raise NotAQueryError(
            f"{kind} statements are not supported: mor writes DELETE, UPDATE and MERGE"
        )
    verb = "DELETE FROM" if isinstance(tree, exp.Delete) else "UPDATE"
    for arg, clause in (
        ("using", "USING"),
        ("returning", "RETURNING"),
        ("order", "ORDER BY"),
        ("limit", "LIMIT"),
        ("tables", "several tables"),
        ("from", "FROM"),
        ("from_", "FROM"),
    ):
        if tree.args.get(arg):
            raise UnsupportedError(f"{verb} with {clause}: Spark SQL's {verb} has no {clause}")
    target = tree.this
    if not isinstance(target, exp.Table) or not target.name:
        raise UnsupportedError(f"{verb} needs a table name")
    if target.args.get("version") is not None:
        raise UnsupportedError(
            f"{verb} {_table_name(target)} VERSION AS OF: a snapshot cannot be changed; "
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
    raise InternalError(f"{verb}: no WHERE keyword found in {stmt.text!r}")


def _branch_of(target: exp.Table, branch: str, catalog: Catalog) -> tuple[exp.Table, str]:
    """Spark's name of a table's branch, `ns.t.branch_<name>` (when no table has that name):
    the table and the branch; else `target` and `branch` as given. A branch named both ways
    must be the same."""
    from sqlglot import exp

    parts = target.parts
    last = parts[-1].name
    if (
        len(parts) < 3
        or not last.startswith("branch_")
        or catalog.table_exists(_table_name(target))
    ):
        return target, branch
    named = last.removeprefix("branch_")
    if branch not in ("main", named):
        raise MorError(
            f"DELETE FROM {_table_name(target)}: branch {named!r} in the name, "
            f"{branch!r} given as --branch"
        )
    table = exp.Table(
        this=parts[-2].copy(),
        db=parts[-3].copy(),
        catalog=parts[-4].copy() if len(parts) > 3 else None,
        alias=target.args.get("alias"),
    )
    return table, named


def target_name(stmt: Statement, catalog: Catalog) -> str:
    """The table a DELETE statement deletes from (`ns.t.branch_b`: `ns.t`)."""
    return _table_name(_branch_of(_target(stmt)[0], "main", catalog)[0])


def _table_name(t: exp.Table) -> str:
    return ".".join(p.name for p in t.parts)


def _isolation(props: dict[str, str], name: str, key: str = ISOLATION) -> str:
    level = props.get(key, "serializable").strip().lower()
    if level not in ISOLATION_LEVELS:
        raise MorError(f"{name}: {key}={props[key]!r}; Iceberg knows serializable and snapshot")
    return level


def _positions(
    stmt: Statement, target: exp.Table, where_at: int | None, read: HeadRead, spark: SparkArg
) -> tuple[dict[str, pa.Array], Callable[[Any], bool] | None]:
    """The positions of the rows to delete (sorted int64) by data file, and the conflict
    detection filter of the condition (None: any file may hold such rows)."""

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
        found: dict[str, pa.Array] = {}
        if any(n.files is None or n.files.data for n in branches):
            with mor_errors(df):  # as Arrow, straight from the JVM where it can
                found = _positions_of_rows(collect_arrow(df))
    may = may_hold(_source(read), read.table.schema(), bound[0]) if len(bound) == 1 else None
    return found, may


def _is_target(node: Any) -> bool:
    """A scan reading `_file` and `_pos`: the rows query's target (a subquery reading them
    too makes two, and the conflict filter the most cautious)."""
    from mor.planner.nodes import IcebergScan

    return isinstance(node, IcebergScan) and {"_file", "_pos"} <= set(node.hidden)


def pinned_at(target: exp.Table, version: int | str | None) -> exp.Table:
    """The table without its alias, `VERSION AS OF <version>` (a snapshot id, or a branch's
    name) when one is given."""
    from sqlglot import exp

    pinned = target.copy()
    pinned.set("alias", None)
    if version is not None:
        value = (
            exp.Literal.number(version) if isinstance(version, int) else exp.Literal.string(version)
        )
        pinned.set("version", exp.Version(this="VERSION", kind="AS OF", expression=value))
    return pinned


def _rows_query(
    stmt: Statement,
    target: exp.Table,
    where_at: int | None,
    version: int | str | None,
    columns: str = "_file, _pos",
) -> tuple[str, int]:
    """`SELECT <columns> FROM <table> [VERSION AS OF <version>] [AS alias]` (a snapshot id,
    or a branch's name) and the statement's text from its WHERE on; and the column its WHERE
    starts at in that text."""

    pinned = pinned_at(target, version)
    alias = target.args.get("alias")
    prefix = f"SELECT {columns} FROM {pinned.sql(dialect='spark')}"
    if alias is not None:
        prefix += f" AS {alias.sql(dialect='spark')}"
    text = prefix if where_at is None else f"{prefix} {stmt.text[where_at:]}"
    return text, len(prefix) + 2


def explained(stmt: Statement, catalog: Catalog) -> tuple[Statement, str]:
    """What EXPLAIN prints for a DELETE: the plan of the query whose rows it deletes (at the
    head of the branch), under a line saying so."""
    from sqlglot import exp

    from mor.planner.sql import one_statement

    if isinstance(stmt.tree, exp.Merge):
        from mor.merge import explained_merge

        text, head = explained_merge(stmt, catalog)
        return one_statement(text), head
    target, where_at = _target(stmt)
    target, branch = _branch_of(target, "main", catalog)
    version = None if branch == "main" else branch
    on = "" if branch == "main" else f" (branch {branch})"
    if isinstance(stmt.tree, exp.Update):
        table = load_target(catalog, _table_name(target))
        columns = _updated_columns(stmt.tree, table.schema(), table.metadata.format_version)
        text, _ = _rows_query(stmt, target, where_at, version, columns)
        head = (
            f"UPDATE {_table_name(target)}{on}: deletes the rows (_file, _pos) of this query "
            "and writes its other columns as new rows\n"
        )
        return one_statement(text), head
    text, _ = _rows_query(stmt, target, where_at, version)
    head = f"DELETE FROM {_table_name(target)}{on}: deletes the rows (_file, _pos) of this query\n"
    return one_statement(text), head


def load_target(catalog: Catalog, name: str) -> Any:
    """The statement's table; one line naming it when the catalog has none."""
    from mor.planner.errors import TableNotFoundError

    try:
        return catalog.load_table(name)
    except Exception as e:  # noqa: BLE001 - NoSuchTableError and kin: one line
        raise TableNotFoundError(f"{name}: {e}") from e


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
    new_data: list[Any] | None = None,
) -> None:
    """The positions as delete files (v2) or merged vectors (v3), and an UPDATE's new data
    files, committed as one row delta (`delete`, or `overwrite` with data files)."""
    from pyiceberg.table.snapshots import Operation

    change = Change(
        data=set(found),
        added_data=list(new_data or ()),
        # as Iceberg's RowDelta names it: only deletes, only new rows, or both
        operation=(
            Operation.OVERWRITE
            if new_data and found
            else Operation.APPEND
            if new_data
            else Operation.DELETE
        ),
        conflict_filter=may,
        isolation=report.isolation,
        row_level=True,
    )
    report.data_written = [
        FileOut(f.file_path, f.record_count, f.file_size_in_bytes) for f in new_data or ()
    ]
    if report.vectors:
        note(f"writing {len(found)} deletion vectors")
        pos_files = {k: f for k, (f, _) in delete_files_of(read, "pos").items()}
        write_vectors(read, found, pos_files, change, by=f"mor {report.statement}")
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


UPDATE_ISOLATION = "write.update.isolation-level"
# Spark types a SET value may have besides the column's own: what widens without loss or
# surprise (an int literal for a bigint column, NULL for any); anything else must be CAST in
# the statement (a cast mor added could turn 'abc' into NULL or wrap an overflow silently)
_WIDENS = {
    "bigint": ("tinyint", "smallint", "int"),
    "int": ("tinyint", "smallint"),
    "smallint": ("tinyint",),
    "double": ("float", "tinyint", "smallint", "int"),
    "float": ("tinyint", "smallint"),
}


def update_rows(
    sql: str | Statement,
    *,
    catalog: Catalog | str | None = None,
    warehouse: str | None = None,
    branch: str = "main",
    dry_run: bool = False,
    spark: SparkArg = None,
    progress: Callable[[str], None] | None = None,
) -> RowWriteReport:
    """Run `UPDATE <table> SET <column> = <expression>, ... [WHERE <condition>]` (Spark SQL) as
    one merge-on-read commit on `branch`, as Iceberg's Spark writer does: the rows it changes
    are deleted by position (as DELETE deletes them) and written again, with their new values,
    as new data files in the table's current partition spec and sort order; on v3 each keeps
    its `_row_id` (its `_last_updated_sequence_number` becomes the commit's)."""
    from mor.planner.sql import one_statement

    started = time.perf_counter()
    note = progress or (lambda text: None)
    stmt = one_statement(sql) if isinstance(sql, str) else sql
    target, where_at, name, branch, read = _head_of(
        stmt,
        catalog,
        warehouse,
        branch,
        "UPDATE writes position deletes (v2) or deletion vectors (v3) and data files",
    )
    if read is None:  # a table without a snapshot: nothing to change
        return RowWriteReport("UPDATE", name, branch, None, dry_run)
    md = read.table.metadata
    schema = read.table.schema()
    _updatable(schema, name)
    columns = _updated_columns(stmt.tree, schema, md.format_version)
    isolation = _isolation(md.properties, name, UPDATE_ISOLATION)
    report = RowWriteReport("UPDATE", name, branch, read.head.snapshot_id, dry_run, isolation)
    report.vectors = md.format_version == 3
    note(f"finding the rows to update in {name} at snapshot {read.head.snapshot_id}")
    rows, may = _matched_rows(stmt, target, where_at, read, spark, columns)
    found = _positions_of_rows(rows)
    for p in found:
        if p not in read.data:
            raise InternalError(f"{name}: rows to update in {p}, which is no live data file")
    report.rows = rows.num_rows
    report.data_files = len(found)
    if dry_run:
        report.written = [FileOut("", len(v), 0, p) for p, v in sorted(found.items())]
    elif found:
        note(f"writing {rows.num_rows} updated rows")
        write_rows_and_commit(read, report, found, may, note, rows.drop_columns(["_file", "_pos"]))
    report.seconds = time.perf_counter() - started
    return report


def _updatable(schema: Any, name: str) -> None:
    """Refuse, by column, a type UPDATE does not write back yet."""
    from pyiceberg.types import DecimalType, ListType, MapType, StructType

    plain = {
        "boolean", "int", "long", "float", "double", "date", "timestamp", "timestamptz",
        "string", "binary",
    }  # fmt: skip

    def check(path: str, t: Any) -> None:
        if isinstance(t, StructType):
            for f in t.fields:
                check(f"{path}.{f.name}", f.field_type)
        elif isinstance(t, (ListType, MapType)) or not (
            isinstance(t, DecimalType) or str(t) in plain
        ):
            raise UnsupportedError(
                f"{name}: column {path} is of type {t}, which UPDATE does not write yet"
            )

    for f in schema.fields:
        check(f.name, f.field_type)


def _updated_columns(tree: exp.Update, schema: Any, version: int) -> str:
    """The rows query's columns for an UPDATE: every column of the table in order, those it
    sets as their new value cast to the column's type (and, as `_mor_set_<i>`, the value as
    the statement computes it: its type is checked before anything is written), then
    `_file`, `_pos` and on v3 `_row_id`."""
    from sqlglot import exp

    from mor.physical.scan.types import spark_type
    from mor.planner.errors import ColumnNotFoundError

    by_name = {f.name.lower(): f for f in schema.fields}
    sets: dict[str, tuple[int, str]] = {}
    for i, e in enumerate(tree.expressions):
        if not isinstance(e, exp.EQ) or not isinstance(e.this, exp.Column):
            raise UnsupportedError(f"UPDATE ... SET {e.sql(dialect='spark')}: needs column = value")
        field = by_name.get(e.this.name.lower())
        if field is None:
            raise ColumnNotFoundError(
                f"UPDATE ... SET {e.this.sql(dialect='spark')}: no such column; the columns "
                f"are {', '.join(f.name for f in schema.fields)}"
            )
        if field.name in sets:
            raise UnsupportedError(f"UPDATE ... SET {field.name} twice")
        sets[field.name] = (i, e.expression.sql(dialect="spark"))
    out = []
    for f in schema.fields:
        quoted = "`" + f.name.replace("`", "``") + "`"
        if f.name in sets:
            i, value = sets[f.name]
            kind = spark_type(f.field_type.model_dump_json(), f.name).simpleString()
            out.append(f"CAST(({value}) AS {kind}) AS {quoted}, ({value}) AS _mor_set_{i}")
        else:
            out.append(quoted)
    out += ["_file", "_pos"] + (["_row_id"] if version >= 3 else [])
    return ", ".join(out)


def _matched_rows(
    stmt: Statement,
    target: exp.Table,
    where_at: int | None,
    read: HeadRead,
    spark: SparkArg,
    columns: str,
) -> tuple[pa.Table, Callable[[Any], bool] | None]:
    """The rows an UPDATE changes, with their new values, `_file` and `_pos` (and `_row_id`),
    collected as Arrow; and the conflict detection filter of the condition."""
    import pyarrow as pa

    from mor.api import mor_errors
    from mor.execution import QueryExecution
    from mor.planner.scan_planning import may_hold

    text, where_col = _rows_query(stmt, target, where_at, read.head.snapshot_id, columns)
    run = QueryExecution(text, catalog=read.catalog, cache=read.cache, spark=None)
    with _positions_of(stmt, where_at, where_col):
        bound = [n for n in run.planned.logical.walk() if _is_target(n)]
        branches = [n for n in run.plan.walk() if _is_target(n)]
        run.use(session_of(spark))
        df = run.dataframe
    _check_set_types(df, stmt)
    df = df.drop(*[c for c in df.columns if c.startswith("_mor_set_")])
    rows = None
    if any(n.files is None or n.files.data for n in branches):
        with mor_errors(df):
            rows = collect_arrow(df)
    may = may_hold(_source(read), read.table.schema(), bound[0]) if len(bound) == 1 else None
    if rows is None:
        rows = pa.table({"_file": pa.array([], pa.string())})
    return rows, may


def collect_arrow(df: Any) -> pa.Table:
    """Every row of `df` on the driver as one Arrow table, the values as Spark's Arrow
    conversion gives them (no Python object per value), straight from the JVM where the
    session can (`toArrow`: pyspark 4, classic and Connect; `_collect_as_arrow`: 3.5
    classic), else through each task's Arrow batches as IPC (`mapInArrow`)."""
    import pyarrow as pa

    if hasattr(df, "toArrow"):
        return df.toArrow()
    if hasattr(df, "_collect_as_arrow"):
        batches = df._collect_as_arrow()
        if batches:
            return pa.Table.from_batches(batches)
    got = df.mapInArrow(_as_ipc, "ipc binary").collect()
    tables = [pa.ipc.open_stream(r["ipc"]).read_all() for r in got]
    return pa.concat_tables(tables) if tables else pa.table({})


def _as_ipc(batches: Any) -> Any:
    """In Spark's tasks: each Arrow batch as one Arrow IPC stream (the driver gets the rows'
    values as Arrow holds them, not as Python objects)."""
    import pyarrow as pa

    for b in batches:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, b.schema) as w:
            w.write_batch(b)
        yield pa.RecordBatch.from_arrays([pa.array([sink.getvalue().to_pybytes()])], ["ipc"])


def _check_set_types(df: Any, stmt: Statement) -> None:
    """Each SET value's Spark type is the column's or widens to it; else one line asking for
    a CAST in the statement."""
    fields = {f.name for f in df.schema.fields}
    checks = []
    for i, e in enumerate(stmt.tree.expressions):
        column = next(
            (n for n in fields if n.lower() == e.this.name.lower() and not n.startswith("_")),
            e.this.name,
        )
        checks.append((f"UPDATE ... SET {e.sql(dialect='spark')}", column, f"_mor_set_{i}"))
    check_value_types(df, checks)


def check_value_types(df: Any, checks: list[tuple[str, str, str]]) -> None:
    """For each (what, column, value column) of `df`: the value's Spark type is the column's
    or widens to it without loss; else one line asking for a CAST in the statement."""
    fields = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    for what, column, value in checks:
        got, want = fields.get(value), fields.get(column)
        if got is None or want is None or got in (want, "void"):
            continue
        if got in _WIDENS.get(want, ()) or (
            want.startswith("decimal") and got in ("tinyint", "smallint", "int", "bigint")
        ):
            continue
        raise UnsupportedError(
            f"{what}: the value is {got}, the column {want}; "
            f"write CAST(... AS {want}) in the statement"
        )


def _positions_of_rows(
    rows: pa.Table, file: str = "_file", pos: str = "_pos"
) -> dict[str, pa.Array]:
    """The matched rows' positions (sorted int64, each once) by data file."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not rows.num_rows:
        return {}
    by = rows.select([file, pos]).group_by(file).aggregate([(pos, "distinct")])
    out = {}
    for i, path in enumerate(by.column(file).to_pylist()):
        positions = by.column(f"{pos}_distinct")[i].values.cast(pa.int64())
        out[path] = pc.take(positions, pc.sort_indices(positions))
    return out


def write_rows_and_commit(
    read: HeadRead,
    report: RowWriteReport,
    found: dict[str, pa.Array],
    may: Callable[[Any], bool] | None,
    note: Callable[[str], None],
    rows: pa.Table,
) -> None:
    """UPDATE's and MERGE's end: `rows` (if any) written as new data files, then committed
    with the positions in `found`; the data files deleted again when no commit took them."""
    files = _write_rows(read, rows) if rows.num_rows else []
    try:
        _write_and_commit(read, report, found, may, note, files)
    except BaseException as e:
        if report.snapshot is None:
            undo_written(read.table.io, [f.file_path for f in files], e)
        raise


def _write_rows(read: HeadRead, rows: pa.Table) -> list[Any]:
    """The updated rows as new Parquet data files of the table's current partition spec,
    each partition's rows in the table's sort order (its identity fields), under
    `<location>/data/mor-<uuid>-<n>.parquet`, with their manifest records (metrics from the
    footer). On v3 the files carry `_row_id`, each row's own."""
    import uuid

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    from mor.planner.nodes import LINEAGE_COLUMNS
    from mor.writer.files import data_file_of

    tbl = read.table
    md = tbl.metadata
    schema = tbl.schema()
    arrow = schema_to_pyarrow(schema)
    try:
        data = rows.select([f.name for f in schema.fields]).cast(arrow)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
        raise UnsupportedError(f"{read.name}: the updated rows do not fit its schema: {e}") from e
    if md.format_version >= 3:
        ids = rows.column("_row_id").cast(pa.int64())
        field = pa.field(
            "_row_id", pa.int64(), metadata={b"PARQUET:field_id": str(LINEAGE_COLUMNS["_row_id"])}
        )
        data = data.append_column(field, ids)
    spec = md.spec()
    parts = [(None, data)] if spec.is_unpartitioned() else _partitions(spec, schema, data)
    order = [
        schema.find_column_name(f.source_id)
        for f in md.sort_order_by_id(md.default_sort_order_id).fields
        if str(f.transform) == "identity"
    ] if md.sort_order_by_id(md.default_sort_order_id) else []  # fmt: skip
    codec = md.properties.get("write.parquet.compression-codec", "zstd")
    written: list[Any] = []
    stem = f"{md.location.rstrip('/')}/data/mor-{uuid.uuid4()}"
    try:
        for n, (partition, part) in enumerate(parts):
            if order:
                part = part.sort_by([(c, "ascending") for c in order])
            path = f"{stem}-{n}.parquet"
            written.append(path)
            with tbl.io.new_output(path).create(overwrite=False) as out:
                pq.write_table(part, out, compression=codec)
            values = () if partition is None else partition
            written[-1] = data_file_of(tbl, path, values, md.default_spec_id, schema)
    except BaseException as e:
        undo_written(tbl.io, [w if isinstance(w, str) else w.file_path for w in written], e)
        raise
    return written


def _partitions(spec: Any, schema: Any, data: pa.Table) -> list[tuple[Any, pa.Table]]:
    """The rows of `data` grouped by their partition in `spec`: each row's values through
    pyiceberg's own transforms (their Python form: pyiceberg's Arrow form of bucket and
    truncate needs the optional pyiceberg-core), dates and timestamps as the spec's days and
    microseconds."""
    import pyarrow as pa
    from pyiceberg.typedef import Record
    from pyiceberg.types import DateType, TimestampType, TimestamptzType

    columns = []
    for f in spec.fields:
        source = schema.find_field(f.source_id)
        values = data.column(schema.find_column_name(f.source_id))
        if isinstance(source.field_type, DateType):
            values = values.cast(pa.int32())
        elif isinstance(source.field_type, (TimestampType, TimestamptzType)):
            values = values.cast(pa.timestamp("us", tz=values.type.tz)).cast(pa.int64())
        fn = f.transform.transform(source.field_type)
        columns.append([fn(v) for v in values.to_pylist()])
    groups: dict[tuple[Any, ...], list[int]] = {}
    for row, key in enumerate(zip(*columns)):
        groups.setdefault(key, []).append(row)
    return [(Record(*key), data.take(pa.array(rows))) for key, rows in groups.items()]
