"""A row-level write statement (DELETE, UPDATE, MERGE) as a plan, before anything runs.

`parse_row_write` reads the statement: its target table and branch (`--branch`, or Spark's
`ns.t.branch_<name>`), and refuses what Spark SQL's statement would (DELETE ... LIMIT, a
VERSION AS OF target, ...). `rows_query` binds it to the table's schema and gives the query
whose rows it changes, at the snapshot read:

- DELETE: `SELECT _file, _pos FROM t VERSION AS OF <snapshot> [AS a] <its WHERE ...>`;
- UPDATE: every column of the table, those it sets as their new value cast to the column's
  type (a field of a struct rebuilt around it), then `_file`, `_pos` and on v3 `_row_id`;
  each value as the statement computes it beside it, for the type rule
  (planner/write_statements.value_fits), dropped after;
- MERGE: planner/merge_into.py.

Everything here is a function of the statement's text and the table's schema: no Spark, no
I/O but the question whether a table named `ns.t.branch_b` exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from mor.planner.errors import ColumnNotFoundError, InternalError, NotAQueryError, UnsupportedError
from mor.planner.merge_into import Merge, merge_query, parse_merge, spark_literal
from mor.planner.nodes import IcebergScan, Plan
from mor.planner.pushdown import conjuncts
from mor.planner.schemas import spark_sql_type
from mor.planner.sql import DIALECT, Statement
from mor.planner.write_statements import (
    ValueCheck,
    branch_of,
    is_row_write,
    kind_of,
    pinned_at,
    quoted,
    refuse_version,
    table_name,
    where_mover,
)

__all__ = [
    "RowWrite",
    "RowsQuery",
    "is_row_write",
    "count_query",
    "is_rows_target",
    "parse_row_write",
    "rows_query",
    "whole_where",
    "without_files",
]

# types a row-level write does not write (what Spark cannot hold, or mor cannot write yet)
_UNWRITTEN = ("time", "timestamp_ns", "timestamptz_ns", "unknown", "variant", "geometry",
              "geography")  # fmt: skip


@dataclass(frozen=True)
class RowWrite:
    """A DELETE, UPDATE or MERGE as parsed: `kind`, the statement, its target (`ns.t`,
    alias kept; a branch's name `ns.t.branch_b` made `ns.t`), the branch it commits to, and
    where its WHERE keyword starts in the statement's text (DELETE and UPDATE; None: none)."""

    kind: str
    statement: Statement
    target: exp.Table
    branch: str
    where_at: int | None = None

    @property
    def name(self) -> str:
        return table_name(self.target)

    @property
    def alias(self) -> str:
        """The name the statement's columns are qualified by: its alias, else the table's."""
        return self.target.alias or self.target.name


def parse_row_write(
    stmt: Statement, branch: str = "main", table_exists: Callable[[str], bool] = lambda n: True
) -> RowWrite:
    """The statement's target and branch; one line for a clause Spark SQL's statement does
    not have. `table_exists(name)`: whether the catalog has a table `name` (for
    `ns.t.branch_b`, a branch only when no table has that name)."""
    tree = stmt.tree
    if not is_row_write(tree):
        raise NotAQueryError(
            f"{tree.key.upper()} statements are not supported: mor writes DELETE, UPDATE and MERGE"
        )
    kind = kind_of(tree)
    verb = {"DELETE": "DELETE FROM", "UPDATE": "UPDATE", "MERGE": "MERGE INTO"}[kind]
    target = tree.this
    if not isinstance(target, exp.Table) or not target.name:
        raise UnsupportedError(f"{verb} needs a table name")
    if kind == "MERGE":
        target, branch = branch_of(target, branch, table_exists, verb)
        return RowWrite(kind, stmt, target, branch)
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
    refuse_version(target, verb)
    target, branch = branch_of(target, branch, table_exists, verb)
    return RowWrite(kind, stmt, target, branch, _where_at(stmt, verb))


def _where_at(stmt: Statement, verb: str) -> int | None:
    """Where the statement's top-level WHERE keyword starts in its text (None: no WHERE)."""
    if stmt.tree.args.get("where") is None:
        return None
    depth = 0
    for t in sqlglot.Dialect.get_or_raise(DIALECT).tokenize(stmt.text):
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif t.token_type == TokenType.WHERE and depth == 0:
            return t.start
    raise InternalError(f"{verb}: no WHERE keyword found in {stmt.text!r}")


@dataclass(frozen=True)
class RowsQuery:
    """The query whose rows a statement changes, and what is done with its analysed result
    before the write's tasks take it: the type checks of the values written (their columns
    dropped after), for a MERGE a filter and a projection (planner/merge_into.py), and how
    an error's position in it maps to the statement's (`moved`; None: the statement's
    start)."""

    kind: str
    text: str
    checks: tuple[ValueCheck, ...] = ()
    drop: tuple[str, ...] = ()
    where: str | None = None
    select: tuple[str, ...] | None = None
    check_cardinality: bool = False
    moved: Callable[[int, int], tuple[int, int]] | None = None
    merge: Merge | None = None


def rows_query(
    rw: RowWrite, schema: Any, format_version: int, version: int | str | None, empty: bool = False
) -> RowsQuery:
    """The rows query of `rw` over the table of schema `schema` at `version` (a snapshot id
    or a branch's name; None: the head of main). `empty`: the table has no snapshot yet (a
    MERGE then only inserts)."""
    writable(schema, rw.name, rw.kind)
    if rw.kind == "MERGE":
        merge = parse_merge(rw.statement, rw.target, schema)
        q = merge_query(merge, schema, version, format_version >= 3, empty)
        return RowsQuery(
            "MERGE", q.text, q.checks, where=q.where, select=q.select,
            check_cardinality=merge.check_cardinality, merge=merge,
        )  # fmt: skip
    checks: tuple[ValueCheck, ...] = ()
    columns = "_file, _pos"
    if rw.kind == "UPDATE":
        columns, checks = _updated_columns(rw, schema, format_version)
    pinned = pinned_at(rw.target, version)
    prefix = f"SELECT {columns} FROM {pinned.sql(dialect='spark')}"
    alias = rw.target.args.get("alias")
    if alias is not None:
        prefix += f" AS {alias.sql(dialect='spark')}"
    if rw.where_at is None:
        return RowsQuery(rw.kind, prefix, checks, _drops(checks))
    text = f"{prefix} {rw.statement.text[rw.where_at :]}"
    moved = where_mover(rw.statement, rw.where_at, len(prefix) + 2)
    return RowsQuery(rw.kind, text, checks, _drops(checks), moved=moved)


def _drops(checks: tuple[ValueCheck, ...]) -> tuple[str, ...]:
    return tuple(n for c in checks for n in (c.value, c.column) if n.startswith("_mor_"))


def writable(schema: Any, name: str, kind: str) -> None:
    """Refuse, by column, a type the statement cannot write back (a DELETE writes no row:
    every type)."""
    if kind == "DELETE":
        return

    from pyiceberg.types import ListType, MapType, StructType

    def check(path: str, t: Any) -> None:
        if isinstance(t, StructType):
            for f in t.fields:
                check(f"{path}.{f.name}", f.field_type)
        elif isinstance(t, ListType):
            check(f"{path}.element", t.element_type)
        elif isinstance(t, MapType):
            check(f"{path}.key", t.key_type)
            check(f"{path}.value", t.value_type)
        elif str(t).split("(")[0].split("[")[0] in _UNWRITTEN:
            raise UnsupportedError(
                f"{name}: column {path} is of type {t}, which {kind} cannot write"
            )

    for f in schema.fields:
        check(f.name, f.field_type)


def _updated_columns(rw: RowWrite, schema: Any, version: int) -> tuple[str, tuple[ValueCheck, ...]]:
    """An UPDATE's rows query columns: every column of the table in order, those it sets as
    their new value cast to the column's type (a struct with a field set: rebuilt around the
    new value), then `_file`, `_pos` and on v3 `_row_id`; each value as the statement computes
    it (`_mor_set_<i>`) and the column or field it goes to (`_mor_col_<i>`), for the checks."""
    sets = _assignments(rw, schema)
    by_column: dict[str, dict[tuple[str, ...], tuple[int, str]]] = {}
    for i, (path, value) in enumerate(sets):
        by_column.setdefault(path[0], {})[path[1:]] = (i, value)
    q = quoted(rw.alias)
    out, checks = [], []
    for f in schema.fields:
        mine = by_column.get(f.name)
        if mine is None:
            out.append(quoted(f.name))
            continue
        kind = spark_sql_type(f.field_type)
        value = _rebuilt(f"{q}.{quoted(f.name)}", f.field_type, mine)
        out.append(f"CAST(({value}) AS {kind}) AS {quoted(f.name)}")
    for i, (path, value) in enumerate(sets):
        out.append(f"({value}) AS _mor_set_{i}")
        out.append(f"{q}.{'.'.join(quoted(p) for p in path)} AS _mor_col_{i}")
        shown = ".".join(path)
        checks.append(
            ValueCheck(f"UPDATE ... SET {shown} = {value}", f"_mor_set_{i}", f"_mor_col_{i}")
        )
    out += ["_file", "_pos"] + (["_row_id"] if version >= 3 else [])
    return ", ".join(out), tuple(checks)


def _rebuilt(at: str, t: Any, sets: dict[tuple[str, ...], tuple[int, str]]) -> str:
    """The new value of a column or field (`at`: its current value) given the values set
    in it, by path below it: the value itself, or a struct whose fields are rebuilt so (as
    Spark's UPDATE of a struct's field builds it: the other fields as they were)."""
    if () in sets:
        return sets[()][1]
    parts = []
    for f in t.fields:
        below = {p[1:]: v for p, v in sets.items() if p[0] == f.name}
        inner = f"{at}.{quoted(f.name)}"
        value = _rebuilt(inner, f.field_type, below) if below else inner
        parts.append(f"{spark_literal(f.name)}, CAST(({value}) AS {spark_sql_type(f.field_type)})")
    return f"named_struct({', '.join(parts)})"


def _assignments(rw: RowWrite, schema: Any) -> list[tuple[tuple[str, ...], str]]:
    """Each `SET <column or field> = <value>`: the path of names it sets (the table's own
    spelling) and the value's SQL."""
    out: list[tuple[tuple[str, ...], str]] = []
    for e in rw.statement.tree.expressions:
        if not isinstance(e, exp.EQ) or not isinstance(e.this, exp.Column):
            raise UnsupportedError(f"UPDATE ... SET {e.sql(dialect='spark')}: needs column = value")
        path = _path(e.this, rw, schema)
        for other, _ in out:
            short = min(len(other), len(path))
            if other[:short] == path[:short]:
                what = "twice" if other == path else f"and {'.'.join(other)} both"
                raise UnsupportedError(f"UPDATE ... SET {'.'.join(path)} {what}")
        out.append((path, e.expression.sql(dialect="spark")))
    return out


def _path(col: exp.Column, rw: RowWrite, schema: Any) -> tuple[str, ...]:
    """A SET target as the table's names: `c`, `s.a` (a field of struct column s), with the
    table's alias or name in front allowed (`t.c`)."""
    names = [p.name for p in col.parts]
    qualifiers = {rw.alias.lower(), rw.target.name.lower()}
    top = {f.name.lower(): f for f in schema.fields}
    if len(names) > 1 and names[0].lower() in qualifiers and names[0].lower() not in top:
        names = names[1:]
    path: list[str] = []
    fields = top
    for n in names:
        field = fields.get(n.lower())
        if field is None:
            where = ".".join(path) or rw.name
            what = "column" if not path else "field"
            choices = ", ".join(f.name for f in fields.values())
            raise ColumnNotFoundError(
                f"UPDATE ... SET {col.sql(dialect='spark')}: no such {what} of {where}; its "
                f"{what}s are {choices}"
            )
        path.append(field.name)
        t = field.field_type
        fields = {f.name.lower(): f for f in t.fields} if t.is_struct else {}
    return tuple(path)


def is_rows_target(node: Any) -> bool:
    """A scan reading `_file` and `_pos`: the table a rows query changes rows of (a subquery
    over the table reading them too makes two, and the conflict filter the most cautious)."""
    return isinstance(node, IcebergScan) and {"_file", "_pos"} <= set(node.hidden)


def without_files(plan: Plan, paths: set[str]) -> Plan:
    """`plan` with the target scans' data files recorded as `paths` cut out."""

    def cut(node: Plan) -> Plan:
        if is_rows_target(node) and node.files is not None:
            data = tuple(t for t in node.files.data if t.path not in paths)
            return replace(node, files=replace(node.files, data=data))
        return node

    return plan.transform_up(cut)


def whole_where(rw: RowWrite, bound: IcebergScan) -> bool:
    """Whether the scan's pushed predicates are the statement's whole WHERE, each conjunct
    one predicate mor reads from metadata (so that a file they select whole is a file every
    row of which the statement deletes)."""
    where = rw.statement.tree.args.get("where")
    if where is None:
        return False
    terms = conjuncts(where.this)
    preds = [e for e in bound.pushed if e.pred is not None]
    return len(preds) == len(terms) == len(bound.pushed)


def count_query(rw: RowWrite, version: int) -> str:
    """`SELECT count(*)` of the statement's table at `version`: the live rows of the files a
    DELETE removes whole, once cut to them (`only_files`)."""
    return f"SELECT count(*) FROM {pinned_at(rw.target, version).sql(dialect='spark')}"
