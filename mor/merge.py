"""`MERGE INTO` as one merge-on-read commit, as Iceberg's Spark writer makes it in merge-on-read
mode (its delta-based `RewriteMergeIntoTable`), with Spark SQL's semantics:

    MERGE INTO t [AS a] USING <table or (query)> [AS s] ON <condition>
    WHEN MATCHED [AND <condition>] THEN UPDATE SET <column> = <value>, ... | UPDATE SET * | DELETE
    WHEN NOT MATCHED [BY TARGET] [AND <condition>] THEN INSERT (<columns>) VALUES (...) | INSERT *
    WHEN NOT MATCHED BY SOURCE [AND <condition>] THEN UPDATE SET ... | DELETE

1. The head of the branch is read once (as DELETE and UPDATE read it, mor/dml.py).
2. One query, planned by mor and run by Spark, joins the target at that snapshot (every
   committed delete applied, with `_file`, `_pos` and on v3 `_row_id`) with the source: an
   inner join when every clause is WHEN MATCHED, a right join with WHEN NOT MATCHED, a left one
   with WHEN NOT MATCHED BY SOURCE, a full one with both. Each joined row gets the first clause
   of its kind whose condition is true (none: the row is left as it is), and the values that
   clause gives every column of the table, cast to the column's type (a value whose type does
   not widen to it without loss is refused, as UPDATE refuses it).
3. As Spark and Iceberg do, a target row matched by several source rows stops the statement
   (unless the only WHEN MATCHED clause is an unconditional DELETE): which source row would
   win is undefined.
4. The rows of the clauses that apply come to the driver as Arrow. Those an UPDATE or a DELETE
   removes are deleted by position (v2: file-scoped position delete files; v3: deletion vectors
   merged with the current ones); the rows an UPDATE or an INSERT writes are written as new data
   files of the current spec and sort order (updated rows keep their `_row_id` on v3, inserted
   ones get new ones), as UPDATE writes them.
5. One snapshot (`overwrite`; `delete` or `append` when it only deletes or only adds) is
   committed with Iceberg's row-delta validations for `write.merge.isolation-level`
   (serializable by default).

Names in the clauses resolve as Spark resolves them: an unqualified column in a WHEN NOT MATCHED
clause is the source's (there is no target row), in a WHEN NOT MATCHED BY SOURCE clause the
target's; a reference to the other side there is refused.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mor.commits import FileOut, SparkArg, session_of
from mor.dml import (
    RowWriteReport,
    _head_of,
    _is_target,
    _isolation,
    _positions_of_rows,
    _source,
    _table_name,
    _updatable,
    check_value_types,
    load_target,
    pinned_at,
    write_rows_and_commit,
)
from mor.planner.errors import ColumnNotFoundError, InternalError, MorError, UnsupportedError

if TYPE_CHECKING:
    from collections.abc import Callable

    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from sqlglot import exp

    from mor.commits import HeadRead
    from mor.planner.sql import Statement

MERGE_ISOLATION = "write.merge.isolation-level"
MATCHED, NOT_MATCHED, BY_SOURCE = "WHEN MATCHED", "WHEN NOT MATCHED", "WHEN NOT MATCHED BY SOURCE"
MARK = "_mor_present"  # the source's marker column: NULL on a target row no source row matched


@dataclass
class Clause:
    when: str  # MATCHED, NOT_MATCHED or BY_SOURCE
    condition: exp.Expression | None
    action: str  # "update", "delete" or "insert"
    values: dict[str, exp.Expression]  # column (the table's name) -> its new value


@dataclass
class Merge:
    """A MERGE statement as mor runs it: the target (its name as written, `alias` the name
    the clauses use), the source as a relation with the `MARK` column, the ON condition and
    the clauses in their order."""

    target: exp.Table
    alias: str
    source: str  # SQL: `(SELECT *, true AS _mor_present FROM ...)`
    source_alias: str
    on: exp.Expression
    clauses: list[Clause]

    def of(self, when: str) -> list[tuple[int, Clause]]:
        """The clauses of one kind, with their numbers (1, 2, ... in the statement's order)."""
        return [(i, c) for i, c in enumerate(self.clauses, 1) if c.when == when]

    @property
    def join(self) -> str:
        inserts, by_source = bool(self.of(NOT_MATCHED)), bool(self.of(BY_SOURCE))
        return {
            (False, False): "INNER",
            (True, False): "RIGHT OUTER",
            (False, True): "LEFT OUTER",
            (True, True): "FULL OUTER",
        }[(inserts, by_source)]

    @property
    def check_cardinality(self) -> bool:
        """Spark's rule: a target row matched by several source rows is an error unless the
        only WHEN MATCHED clause is an unconditional DELETE (or there is none)."""
        matched = [c for _, c in self.of(MATCHED)]
        if not matched:
            return False
        return not (
            len(matched) == 1 and matched[0].action == "delete" and not matched[0].condition
        )


def parse_merge(stmt: Statement, schema: Any) -> Merge:
    """The statement's target, source, condition and clauses, every name resolved as Spark
    resolves it in a MERGE; one line for what Spark SQL's MERGE would refuse (or mor cannot
    write)."""
    from sqlglot import exp

    tree = stmt.tree
    target = tree.this
    if not isinstance(target, exp.Table) or not target.name:
        raise UnsupportedError("MERGE INTO needs a table name")
    name = _table_name(target)
    if target.args.get("version") is not None:
        raise UnsupportedError(
            f"MERGE INTO {name} VERSION AS OF: a snapshot cannot be changed; use --branch"
        )
    if tree.args.get("using_cond"):
        raise UnsupportedError(f"MERGE INTO {name} ... USING (columns): write ON <condition>")
    alias = target.alias or target.name
    src = tree.args.get("using")
    if isinstance(src, exp.Table) and isinstance(src.this, exp.Identifier):
        source_alias = src.alias or src.name
        plain = src.copy()
        plain.set("alias", None)
        relation = f"(SELECT *, true AS {MARK} FROM {plain.sql(dialect='spark')})"
    elif isinstance(src, exp.Subquery):
        source_alias = src.alias or "_mor_source"
        relation = f"(SELECT *, true AS {MARK} FROM ({src.this.sql(dialect='spark')}) AS _mor_s)"
    else:
        raise UnsupportedError(f"MERGE INTO {name} USING: a table or a (query) as the source")
    if source_alias.lower() == alias.lower():
        raise UnsupportedError(
            f"MERGE INTO {name}: the target and the source are both named {alias}; "
            "give one an alias"
        )
    on = tree.args.get("on")
    if on is None:
        raise UnsupportedError(f"MERGE INTO {name}: ON <condition> is missing")
    on = on.copy()
    whens = tree.args.get("whens")
    if whens is None or not whens.expressions:
        raise UnsupportedError(f"MERGE INTO {name}: no WHEN clause")
    by_name = {f.name.lower(): f for f in schema.fields}
    columns = [f.name for f in schema.fields]
    clauses = []
    for w in whens.expressions:
        when = (
            MATCHED if w.args.get("matched") else BY_SOURCE if w.args.get("source") else NOT_MATCHED
        )
        then = w.args.get("then")
        condition = w.args.get("condition")
        condition = condition.copy() if condition is not None else None
        if isinstance(then, exp.Var) and then.name.upper() == "DELETE":
            action, values = "delete", {}
        elif isinstance(then, exp.Update):
            action = "update"
            values = _assignments(then, name, alias, source_alias, by_name, columns)
        elif isinstance(then, exp.Insert):
            action = "insert"
            values = _inserted(then, name, source_alias, by_name, columns)
        else:
            raise UnsupportedError(f"MERGE INTO {name} {when} THEN {then.sql(dialect='spark')}")
        allowed = ("insert",) if when == NOT_MATCHED else ("update", "delete")
        if action not in allowed:
            raise UnsupportedError(
                f"MERGE INTO {name}: {when} THEN {action.upper()}: Spark allows "
                f"{' or '.join(a.upper() for a in allowed)} there"
            )
        clauses.append(Clause(when, condition, action, values))
    for when in (MATCHED, NOT_MATCHED, BY_SOURCE):
        kind = [c for c in clauses if c.when == when]
        if any(c.condition is None for c in kind[:-1]):
            raise UnsupportedError(
                f"MERGE INTO {name}: only the last {when} clause can omit its condition "
                "(a later one could never apply)"
            )
    merge = Merge(target, alias, relation, source_alias, on, clauses)
    if not target.alias:
        _shorten(merge, target)
    if isinstance(src, exp.Table) and not src.alias:
        _shorten(merge, src, source_alias)
    for c in clauses:
        if c.when == NOT_MATCHED:
            _only_side(c, name, source_alias, alias, "a source row no target row matched")
        elif c.when == BY_SOURCE:
            _only_side(c, name, alias, source_alias, "a target row no source row matched")
    return merge


def _assignments(
    then: exp.Update,
    name: str,
    alias: str,
    source_alias: str,
    by_name: dict[str, Any],
    columns: list[str],
) -> dict[str, exp.Expression]:
    from sqlglot import exp

    if len(then.expressions) == 1 and isinstance(then.expressions[0], exp.Star):
        return {c: _column(source_alias, c) for c in columns}
    values: dict[str, exp.Expression] = {}
    for e in then.expressions:
        if not isinstance(e, exp.EQ) or not isinstance(e.this, exp.Column):
            raise UnsupportedError(
                f"MERGE INTO {name} ... UPDATE SET {e.sql(dialect='spark')}: needs column = value"
            )
        column = e.this
        qualifier = column.table
        if qualifier and qualifier.lower() != alias.lower():
            what = (
                "a field of a struct column cannot be set yet"
                if qualifier.lower() in by_name
                else f"it sets a column of {alias}"
            )
            raise UnsupportedError(
                f"MERGE INTO {name} ... UPDATE SET {column.sql(dialect='spark')}: {what}"
            )
        field = by_name.get(column.name.lower())
        if field is None:
            raise ColumnNotFoundError(
                f"MERGE INTO {name} ... UPDATE SET {column.sql(dialect='spark')}: no such column "
                f"of {name}; its columns are {', '.join(columns)}"
            )
        if field.name in values:
            raise UnsupportedError(f"MERGE INTO {name} ... UPDATE SET {field.name} twice")
        values[field.name] = e.expression.copy()
    return values


def _inserted(
    then: exp.Insert, name: str, source_alias: str, by_name: dict[str, Any], columns: list[str]
) -> dict[str, exp.Expression]:
    from sqlglot import exp

    if isinstance(then.this, exp.Star):
        return {c: _column(source_alias, c) for c in columns}
    names = then.this.expressions if isinstance(then.this, exp.Tuple) else []
    vals = then.expression.expressions if isinstance(then.expression, exp.Tuple) else []
    if not names or len(names) != len(vals):
        raise UnsupportedError(
            f"MERGE INTO {name} ... INSERT: {len(names)} columns, {len(vals)} values"
        )
    values: dict[str, exp.Expression] = {}
    for n, v in zip(names, vals):
        field = by_name.get(n.name.lower())
        if field is None:
            raise ColumnNotFoundError(
                f"MERGE INTO {name} ... INSERT ({n.sql(dialect='spark')}): no such column of "
                f"{name}; its columns are {', '.join(columns)}"
            )
        if field.name in values:
            raise UnsupportedError(f"MERGE INTO {name} ... INSERT names {field.name} twice")
        values[field.name] = v.copy()
    for f in by_name.values():
        if f.required and f.name not in values and f.write_default is None:
            raise UnsupportedError(
                f"MERGE INTO {name} ... INSERT: column {f.name} is NOT NULL and given no value "
                "(it has no default)"
            )
    return values


def _column(table: str, name: str) -> exp.Column:
    from sqlglot import exp

    return exp.column(exp.to_identifier(name, quoted=True), table=exp.to_identifier(table))


def _expressions(merge: Merge) -> list[exp.Expression]:
    out = [merge.on]
    for c in merge.clauses:
        out += ([c.condition] if c.condition is not None else []) + list(c.values.values())
    return out


def _shorten(merge: Merge, table: exp.Table, alias: str | None = None) -> None:
    """Without an alias, Spark lets the clauses name a table's columns as `db.t.c`: in mor's
    query the table has its name as an alias, so such a reference becomes `t.c`."""
    from sqlglot import exp

    parts = [p.name.lower() for p in table.parts]
    short = alias or table.name
    for e in _expressions(merge):
        for col in list(e.find_all(exp.Column)):
            named = [p.name.lower() for p in col.parts[:-1]]
            if len(named) > 1 and parts[-len(named) :] == named:
                col.set("table", exp.to_identifier(short))
                col.set("db", None)
                col.set("catalog", None)


def _only_side(clause: Clause, name: str, own: str, other: str, what: str) -> None:
    """Qualify the clause's unqualified columns with `own` (outside subqueries and lambdas);
    refuse a reference to `other`."""
    from sqlglot import exp

    exprs = ([clause.condition] if clause.condition is not None else []) + list(
        clause.values.values()
    )
    for e in exprs:
        for col in list(e.find_all(exp.Column)):
            if col.find_ancestor(exp.Select, exp.Subquery) is not None:
                continue
            lam = col.find_ancestor(exp.Lambda)
            if lam is not None and col.name.lower() in {p.name.lower() for p in lam.expressions}:
                continue
            if not col.table:
                col.set("table", exp.to_identifier(own))
            elif col.table.lower() == other.lower():
                raise UnsupportedError(
                    f"MERGE INTO {name} {clause.when}: {col.sql(dialect='spark')} is a column of "
                    f"{other}, which {what} does not have"
                )


def _default(field: Any, kind: str) -> str:
    """The value an INSERT gives a column it does not name: the field's `write-default` (v3),
    as the spec asks of a writer that does not supply a value; else NULL."""
    import datetime as dt
    import decimal
    import math

    value = field.write_default
    if value is None:
        return f"CAST(NULL AS {kind})"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float, decimal.Decimal)):
        # a decimal and a float's NaN and infinities as text, which CAST reads exactly
        text = repr(value) if isinstance(value, int) or math.isfinite(value) else f"'{value}'"
        text = f"'{value}'" if isinstance(value, decimal.Decimal) else text
    elif isinstance(value, str):
        text = "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    elif isinstance(value, (bytes, bytearray)):
        text = f"X'{bytes(value).hex()}'"
    elif isinstance(value, (dt.date, dt.datetime, dt.time)):
        text = f"'{value.isoformat()}'"
    else:
        raise UnsupportedError(
            f"column {field.name}: its write-default {value!r} ({type(value).__name__}) is "
            "not one mor can write yet"
        )
    return f"CAST({text} AS {kind})"


def rows_query(
    merge: Merge, schema: Any, version: int | str | None, v3: bool, empty: bool = False
) -> tuple[str, list]:
    """The query whose rows the MERGE acts on: `_mor_file`, `_mor_pos` (and `_mor_row_id`) of
    the target row, `_mor_clause` (the number of the clause that applies; 0: a matched row no
    clause applies to, -1: an unmatched row no clause applies to), and for each clause that
    writes rows, each column's value (cast to the column's type, and as computed, for the type
    check); and, per column, the names of those value columns by clause. `empty`: the table
    has no snapshot yet, and its place is taken by a relation of its columns without rows."""
    from sqlglot import exp

    from mor.physical.scan.types import spark_type

    t, s = merge.alias, merge.source_alias
    q = "`" + t.replace("`", "``") + "`"
    pinned = pinned_at(merge.target, version)

    def cases(when: str, default: int) -> str:
        arms = [
            f"WHEN {c.condition.sql(dialect='spark') if c.condition is not None else 'true'} "
            f"THEN {i}"
            for i, c in merge.of(when)
        ]
        return f"CASE {' '.join(arms)} ELSE {default} END" if arms else str(default)

    present = f"`{s}`.{MARK} IS NOT NULL"
    clause = (
        f"CASE WHEN {q}._file IS NOT NULL AND {present} THEN {cases(MATCHED, 0)} "
        f"WHEN {present} THEN {cases(NOT_MATCHED, -1)} "
        f"ELSE {cases(BY_SOURCE, -1)} END"
    )
    select = [f"{q}._file AS _mor_file", f"{q}._pos AS _mor_pos"]
    if v3:
        select.append(f"{q}._row_id AS _mor_row_id")
    select.append(f"{clause} AS _mor_clause")
    made: dict[str, str] = {}  # value SQL -> its column
    picks: list[list[tuple[int, str]]] = []
    checks: list[tuple[str, str, str]] = []  # (what, value column, raw column)
    for f in schema.fields:
        kind = spark_type(f.field_type.model_dump_json(), f.name).simpleString()
        quoted = "`" + f.name.replace("`", "``") + "`"
        per: list[tuple[int, str]] = []
        for i, c in enumerate(merge.clauses, 1):
            if c.action == "delete":
                continue
            given = c.values.get(f.name)
            if given is None:  # kept by an UPDATE; an INSERT's unnamed column: its default
                sql = f"{q}.{quoted}" if c.action == "update" else _default(f, kind)
            else:
                sql = f"CAST(({given.sql(dialect='spark')}) AS {kind})"
            if sql not in made:
                made[sql] = f"_mor_v{len(made)}"
                select.append(f"{sql} AS {made[sql]}")
                if given is not None:
                    raw = f"_mor_raw{len(made) - 1}"
                    select.append(f"({given.sql(dialect='spark')}) AS {raw}")
                    verb = "UPDATE SET" if c.action == "update" else "INSERT"
                    checks.append((f"{c.when} ... {verb} {f.name}", made[sql], raw))
            per.append((i, made[sql]))
        picks.append(per)
    alias = exp.to_identifier(t).sql(dialect="spark")
    relation = pinned.sql(dialect="spark")
    if empty:
        nothing = [
            f"CAST(NULL AS {spark_type(f.field_type.model_dump_json(), f.name).simpleString()})"
            f" AS `{f.name.replace('`', '``')}`"
            for f in schema.fields
        ] + ["CAST(NULL AS STRING) AS _file", "CAST(NULL AS BIGINT) AS _pos"]
        nothing += ["CAST(NULL AS BIGINT) AS _row_id"] if v3 else []
        relation = f"(SELECT {', '.join(nothing)} WHERE false)"
    text = (
        f"SELECT {', '.join(select)} FROM {relation} AS {alias} "
        f"{merge.join} JOIN {merge.source} AS {exp.to_identifier(s).sql(dialect='spark')} "
        f"ON {merge.on.sql(dialect='spark')}"
    )
    return text, [picks, checks]


def merge_rows(
    sql: str | Statement,
    *,
    catalog: Catalog | str | None = None,
    warehouse: str | None = None,
    branch: str = "main",
    dry_run: bool = False,
    spark: SparkArg = None,
    progress: Callable[[str], None] | None = None,
) -> RowWriteReport:
    """Run a `MERGE INTO` statement (Spark SQL) as one merge-on-read commit on `branch`."""
    from mor.planner.sql import one_statement

    started = time.perf_counter()
    note = progress or (lambda text: None)
    stmt = one_statement(sql) if isinstance(sql, str) else sql
    target, _, name, branch, read = _head_of(
        stmt,
        catalog,
        warehouse,
        branch,
        "MERGE writes position deletes (v2) or deletion vectors (v3) and data files",
    )
    if read is None:  # no snapshot yet: every source row is not matched
        read = _no_snapshot(catalog, warehouse, name, branch)
    base = read.head.snapshot_id if read.head is not None else None
    md = read.table.metadata
    schema = read.table.schema()
    _updatable(schema, name)
    merge = parse_merge(stmt, schema)
    merge.target = target  # `ns.t.branch_b`: `ns.t`
    isolation = _isolation(md.properties, name, MERGE_ISOLATION)
    report = RowWriteReport("MERGE", name, branch, base, dry_run, isolation)
    report.vectors = md.format_version == 3
    note(f"joining {name} at snapshot {base} with the source")
    rows, may = _merged(stmt, merge, read, spark)
    found, new = _outcome(merge, rows, name, report)
    for p in found:
        if p not in read.data:
            raise InternalError(f"{name}: rows to change in {p}, which is no live data file")
    report.data_files = len(found)
    if dry_run:
        report.written = [FileOut("", len(v), 0, p) for p, v in sorted(found.items())]
    elif found or new.num_rows:
        note(f"writing {new.num_rows} rows")
        write_rows_and_commit(read, report, found, may, note, new)
    report.seconds = time.perf_counter() - started
    return report


def _merged(
    stmt: Statement, merge: Merge, read: HeadRead, spark: SparkArg
) -> tuple[pa.Table, Callable[[Any], bool] | None]:
    """The joined rows a clause applies to (and, for the cardinality check, every matched
    row's position), with each column's new value; and the conflict detection filter."""
    from pyspark.sql import functions as F

    from mor.api import mor_errors
    from mor.dml import collect_arrow
    from mor.execution import QueryExecution
    from mor.planner.scan_planning import may_hold

    v3 = read.table.metadata.format_version >= 3
    schema = read.table.schema()
    base = read.head.snapshot_id if read.head is not None else None
    text, (picks, checks) = rows_query(merge, schema, base, v3, empty=read.head is None)
    with _in_statement(stmt):
        run = QueryExecution(text, catalog=read.catalog, cache=read.cache, spark=None)
        bound = [n for n in run.planned.logical.walk() if _is_target(n)]
        run.use(session_of(spark))
        df = run.dataframe
    check_value_types(df, [(f"MERGE INTO {read.name} {what}", v, raw) for what, v, raw in checks])
    clause = F.col("_mor_clause")
    out = [F.col("_mor_file"), F.col("_mor_pos"), clause]
    updates = [i for i, c in enumerate(merge.clauses, 1) if c.action == "update"]
    if v3:
        keep = F.col("_mor_row_id") if updates else F.lit(None)
        out.append(F.when(clause.isin(updates), keep).cast("bigint").alias("_row_id"))
    for f, per in zip(schema.fields, picks):
        value = None
        for i, column in per:
            value = (value if value is not None else F).when(clause == i, F.col(column))
        out.append((value if value is not None else F.lit(None)).alias(f.name))
    df = df.where(clause >= 0).select(*out)
    with mor_errors(df):
        rows = collect_arrow(df)
    may = may_hold(_source(read), schema, bound[0]) if len(bound) == 1 else None
    return rows, may


def _outcome(
    merge: Merge, rows: pa.Table, name: str, report: RowWriteReport
) -> tuple[dict[str, pa.Array], pa.Table]:
    """From the joined rows: the positions each data file loses (rows updated or deleted),
    and the rows to write (updated and inserted: the table's columns, and `_row_id` on v3).
    Counts go to `report`; a target row matched by several source rows stops it all."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if not rows.num_rows:
        return {}, pa.table({})
    clause = rows.column("_mor_clause").to_numpy(zero_copy_only=False)
    action = np.array(["none"] + [c.action for c in merge.clauses])
    matched = np.zeros(len(merge.clauses) + 1, dtype=bool)
    matched[0] = True
    for i, _ in merge.of(MATCHED):
        matched[i] = True
    acts = action[clause]
    if merge.check_cardinality:
        m = rows.filter(pa.array(matched[clause]))
        counted = m.group_by(["_mor_file", "_mor_pos"]).aggregate([("_mor_pos", "count")])
        twice = counted.filter(pc.greater(counted.column("_mor_pos_count"), 1))
        if twice.num_rows:
            first = twice.slice(0, 1).to_pylist()[0]
            raise MorError(
                f"MERGE INTO {name}: the ON condition matched one row of {name} with "
                f"{first['_mor_pos_count']} rows of the source (position {first['_mor_pos']} "
                f"of {first['_mor_file']}), "
                "and Spark and Iceberg refuse that (MERGE_CARDINALITY_VIOLATION): which one "
                "would win is undefined; make the source's rows unique on the ON condition"
            )
    report.updated = int((acts == "update").sum())
    deletes = rows.filter(pa.array(acts == "delete")).select(["_mor_file", "_mor_pos"])
    # rows, not matches: without the check, a row two source rows match is deleted once
    report.deleted = deletes.group_by(["_mor_file", "_mor_pos"]).aggregate([]).num_rows
    report.inserted = int((acts == "insert").sum())
    report.rows = report.updated + report.deleted + report.inserted
    gone = rows.filter(pa.array((acts == "update") | (acts == "delete")))
    found = _positions_of_rows(gone, "_mor_file", "_mor_pos")
    new = rows.filter(pa.array((acts == "update") | (acts == "insert")))
    return found, new.drop_columns(["_mor_file", "_mor_pos", "_mor_clause"])


def _no_snapshot(catalog: Any, warehouse: str | None, name: str, branch: str) -> HeadRead:
    """The read of a table without a snapshot: nothing in it, the commit its first."""
    from mor.api import resolve_catalog
    from mor.commits import HeadRead
    from mor.planner.state import ProcessCaches

    cat = resolve_catalog(catalog, warehouse)
    table = load_target(cat, name)
    return HeadRead(cat, table, name, branch, None, ProcessCaches(), None, {}, {}, {})  # type: ignore[arg-type]


class _in_statement:
    """Errors about mor's query for a MERGE name the statement's first line and column (the
    query is mor's rewrite of the statement: `mor explain` shows it), not the rewrite's."""

    def __init__(self, stmt: Statement) -> None:
        before = stmt.source[: stmt.offset]
        self.line = before.count("\n") + 1
        self.col = stmt.offset - (before.rfind("\n") + 1) + 1

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        if not isinstance(error, MorError):
            return
        message = re.sub(
            r"line \d+, column \d+",
            f"in the MERGE at line {self.line}, column {self.col}",
            str(error),
        )
        message = re.sub(r" VERSION AS OF \d+", "", message)
        message = re.sub(r",? `[^`]*`\.`_mor_present`", "", message)  # mor's marker column
        if message != str(error):
            error.args = (message, *error.args[1:])


def explained_merge(stmt: Statement, catalog: Catalog) -> tuple[str, str]:
    """EXPLAIN of a MERGE: the query whose rows it acts on (at the head of the branch)."""
    from mor.dml import _branch_of

    target = stmt.tree.this
    target, branch = _branch_of(target, "main", catalog)
    table = load_target(catalog, _table_name(target))
    merge = parse_merge(stmt, table.schema())
    merge.target = target
    version = None if branch == "main" else branch
    text, _ = rows_query(merge, table.schema(), version, table.metadata.format_version >= 3)
    on = "" if branch == "main" else f" (branch {branch})"
    head = (
        f"MERGE INTO {_table_name(target)}{on}: acts on the rows of this query (_mor_clause: "
        "the clause that applies to each), deleting (_mor_file, _mor_pos) of those it updates "
        "or deletes and writing those it updates or inserts\n"
    )
    return text, head
