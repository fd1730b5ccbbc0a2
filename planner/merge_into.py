"""`MERGE INTO` as mor plans it, with Spark SQL's semantics, before anything runs:

    MERGE INTO t [AS a] USING <table or (query)> [AS s] ON <condition>
    WHEN MATCHED [AND <condition>] THEN UPDATE SET <column> = <value>, ... | UPDATE SET * | DELETE
    WHEN NOT MATCHED [BY TARGET] [AND <condition>] THEN INSERT (<columns>) VALUES (...) | INSERT *
    WHEN NOT MATCHED BY SOURCE [AND <condition>] THEN UPDATE SET ... | DELETE

`parse_merge` resolves every name as Spark resolves it in a MERGE (an unqualified column in a
WHEN NOT MATCHED clause is the source's, in a WHEN NOT MATCHED BY SOURCE clause the target's;
naming the other side there is refused) and refuses what Spark's MERGE refuses. `merge_query`
is the one query whose rows the MERGE acts on: the target at the snapshot read (with `_file`,
`_pos`, and `_row_id` on v3) joined with the source, an inner join when every clause is WHEN
MATCHED, right with WHEN NOT MATCHED, left with WHEN NOT MATCHED BY SOURCE, full with both;
each joined row gets the number of the first clause of its kind whose condition is TRUE, and
each column's value under each clause that writes rows. Over it, the projection the write's
tasks take: per row its action (`_mor_act`), whether a source row matched it (the cardinality
rule: a target row matched by several source rows stops the statement, unless the only WHEN
MATCHED clause is an unconditional DELETE) and the values written.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from mor.planner.errors import ColumnNotFoundError, UnsupportedError
from mor.planner.schemas import spark_sql_type
from mor.planner.sql import Statement
from mor.planner.write_statements import ValueCheck, pinned_at, quoted, refuse_version, table_name

MATCHED, NOT_MATCHED, BY_SOURCE = "WHEN MATCHED", "WHEN NOT MATCHED", "WHEN NOT MATCHED BY SOURCE"
MARK = "_mor_present"  # the source's marker column: NULL on a target row no source row matched
ACTIONS = {"update": 1, "delete": 2, "insert": 3}  # _mor_act (physical/tasks/row_files.py)


@dataclass
class Clause:
    when: str  # MATCHED, NOT_MATCHED or BY_SOURCE
    condition: exp.Expression | None
    action: str  # "update", "delete" or "insert"
    values: dict[str, exp.Expression]  # column (the table's name) -> its new value


@dataclass
class Merge:
    """A MERGE as mor runs it: the target (its name as written, `alias` the name the clauses
    use), the source as a relation with the `MARK` column, the ON condition, the clauses in
    their order."""

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


def parse_merge(stmt: Statement, target: exp.Table, schema: Any) -> Merge:
    """The statement's source, condition and clauses (`target`: its table, a branch's name
    `ns.t.branch_b` already made `ns.t`), every name resolved as Spark resolves it in a
    MERGE; one line for what Spark SQL's MERGE would refuse."""
    tree = stmt.tree
    name = table_name(target)
    refuse_version(tree.this, "MERGE INTO")
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
    whens = tree.args.get("whens")
    if whens is None or not whens.expressions:
        raise UnsupportedError(f"MERGE INTO {name}: no WHEN clause")
    by_name = {f.name.lower(): f for f in schema.fields}
    columns = [f.name for f in schema.fields]
    clauses = [_clause(w, name, alias, source_alias, by_name, columns) for w in whens.expressions]
    for when in (MATCHED, NOT_MATCHED, BY_SOURCE):
        kind = [c for c in clauses if c.when == when]
        if any(c.condition is None for c in kind[:-1]):
            raise UnsupportedError(
                f"MERGE INTO {name}: only the last {when} clause can omit its condition "
                "(a later one could never apply)"
            )
    merge = Merge(target, alias, relation, source_alias, on.copy(), clauses)
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


def _clause(
    w: exp.When, name: str, alias: str, source_alias: str, by_name: dict[str, Any], columns: list
) -> Clause:
    when = MATCHED if w.args.get("matched") else BY_SOURCE if w.args.get("source") else NOT_MATCHED
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
    return Clause(when, condition, action, values)


def _assignments(
    then: exp.Update,
    name: str,
    alias: str,
    source_alias: str,
    by_name: dict[str, Any],
    columns: list[str],
) -> dict[str, exp.Expression]:
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
                "a field of a struct column: MERGE sets whole columns (UPDATE sets fields)"
                if qualifier.lower() in by_name
                else f"it sets a column of {alias} ({qualifier} is not {alias})"
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
    return exp.column(exp.to_identifier(name, quoted=True), table=exp.to_identifier(table))


def _expressions(merge: Merge) -> list[exp.Expression]:
    out = [merge.on]
    for c in merge.clauses:
        out += ([c.condition] if c.condition is not None else []) + list(c.values.values())
    return out


def _shorten(merge: Merge, table: exp.Table, alias: str | None = None) -> None:
    """Without an alias, Spark lets the clauses name a table's columns as `db.t.c`: in mor's
    query the table has its name as an alias, so such a reference becomes `t.c`."""
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


def spark_literal(value: str) -> str:
    """A Spark SQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def default_value(field: Any, kind: str) -> str:
    """The value an INSERT gives a column it does not name: the field's `write-default` (v3),
    as the spec asks of a writer that does not supply a value; else NULL."""
    value = field.write_default
    if value is None:
        return f"CAST(NULL AS {kind})"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, decimal.Decimal):
        text = f"'{value}'"
    elif isinstance(value, (int, float)):
        # a float's NaN and infinities as text, which CAST reads exactly
        text = repr(value) if isinstance(value, int) or math.isfinite(value) else f"'{value}'"
    elif isinstance(value, str):
        text = spark_literal(value)
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


@dataclass(frozen=True)
class MergeQuery:
    """The query a MERGE's rows come from, and the projection its write's tasks take."""

    text: str
    checks: tuple[ValueCheck, ...]  # each written value's type against its column's
    where: str  # over `text`: the rows a clause acts on (and matched ones, for the check)
    select: tuple[str, ...]  # over `text`: _file, _pos, _mor_act, _mor_matched, the values


def merge_query(
    merge: Merge, schema: Any, version: int | str | None, v3: bool, empty: bool = False
) -> MergeQuery:
    """The MERGE's rows query at `version` (a snapshot id or a branch; None: the head of
    main), and the projection over it. `empty`: the table has no snapshot yet, and its place
    is taken by a relation of its columns without rows."""
    t, s = merge.alias, merge.source_alias
    q = quoted(t)

    def cases(when: str, default: int) -> str:
        arms = [
            f"WHEN {c.condition.sql(dialect='spark') if c.condition is not None else 'true'} "
            f"THEN {i}"
            for i, c in merge.of(when)
        ]
        return f"CASE {' '.join(arms)} ELSE {default} END" if arms else str(default)

    present = f"{quoted(s)}.{MARK} IS NOT NULL"
    clause = (
        f"CASE WHEN {q}._file IS NOT NULL AND {present} THEN {cases(MATCHED, 0)} "
        f"WHEN {present} THEN {cases(NOT_MATCHED, -1)} "
        f"ELSE {cases(BY_SOURCE, -1)} END"
    )
    select = [
        f"{q}._file AS _mor_file",
        f"{q}._pos AS _mor_pos",
        f"{q}._file IS NOT NULL AND {present} AS _mor_matched",
    ]
    if v3:
        select.append(f"{q}._row_id AS _mor_row_id")
    select.append(f"{clause} AS _mor_clause")
    made: dict[str, str] = {}  # value SQL -> its column
    checks: list[ValueCheck] = []
    projection = []
    for f in schema.fields:
        kind = spark_sql_type(f.field_type)
        arms = []
        for i, c in enumerate(merge.clauses, 1):
            if c.action == "delete":
                continue
            given = c.values.get(f.name)
            if given is None:  # kept by an UPDATE; an INSERT's unnamed column: its default
                sql = f"{q}.{quoted(f.name)}" if c.action == "update" else default_value(f, kind)
            else:
                sql = f"CAST(({given.sql(dialect='spark')}) AS {kind})"
            if sql not in made:
                made[sql] = f"_mor_v{len(made)}"
                select.append(f"{sql} AS {made[sql]}")
                if given is not None:
                    raw = f"_mor_raw{len(made) - 1}"
                    select.append(f"({given.sql(dialect='spark')}) AS {raw}")
                    verb = "UPDATE SET" if c.action == "update" else "INSERT"
                    checks.append(ValueCheck(f"{c.when} ... {verb} {f.name}", raw, made[sql]))
            arms.append(f"WHEN {i} THEN {made[sql]}")
        value = f"CASE _mor_clause {' '.join(arms)} END" if arms else f"CAST(NULL AS {kind})"
        projection.append(f"{value} AS {quoted(f.name)}")
    acts = " ".join(f"WHEN {i} THEN {ACTIONS[c.action]}" for i, c in enumerate(merge.clauses, 1))
    head = [
        "_mor_file AS _file",
        "_mor_pos AS _pos",
        f"CAST(CASE _mor_clause {acts} ELSE 0 END AS TINYINT) AS _mor_act",
        "_mor_matched",
    ]
    if v3:
        updates = [str(i) for i, c in enumerate(merge.clauses, 1) if c.action == "update"]
        keep = (
            f"CASE WHEN _mor_clause IN ({', '.join(updates)}) THEN _mor_row_id END"
            if updates
            else "NULL"
        )
        head.append(f"CAST({keep} AS BIGINT) AS _row_id")
    relation = pinned_at(merge.target, version).sql(dialect="spark")
    if empty:
        nothing = [
            f"CAST(NULL AS {spark_sql_type(f.field_type)}) AS {quoted(f.name)}"
            for f in schema.fields
        ] + ["CAST(NULL AS STRING) AS _file", "CAST(NULL AS BIGINT) AS _pos"]
        nothing += ["CAST(NULL AS BIGINT) AS _row_id"] if v3 else []
        relation = f"(SELECT {', '.join(nothing)} WHERE false)"
    text = (
        f"SELECT {', '.join(select)} FROM {relation} AS {exp.to_identifier(t).sql('spark')} "
        f"{merge.join} JOIN {merge.source} AS {exp.to_identifier(s).sql(dialect='spark')} "
        f"ON {merge.on.sql(dialect='spark')}"
    )
    # the rows a clause acts on; matched ones no clause acts on too, for the cardinality rule
    where = "_mor_clause > 0" if not merge.check_cardinality else "_mor_clause >= 0"
    return MergeQuery(text, tuple(checks), where, tuple(head + projection))
