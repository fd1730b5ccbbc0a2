"""SQL text -> logical plan: parse with sqlglot (Spark dialect), bind names to Iceberg field ids.

Table references are resolved first (catalog names, `iceberg_scan('<path>')`, time travel),
each replaced by a synthetic name so sqlglot's `qualify` can expand stars and qualify every
column against the schema of the snapshot being read. The qualified tree is then turned into
plan nodes whose expressions are Spark SQL text over unique internal column names.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError, TokenError
from sqlglot.optimizer.qualify import qualify

from planner.errors import (
    ColumnNotFoundError,
    MorError,
    NotAQueryError,
    SqlSyntaxError,
    TableNotFoundError,
    UnsupportedError,
)
from planner.nodes import (
    Aggregate,
    Col,
    Distinct,
    Expr,
    Filter,
    IcebergScan,
    Join,
    Limit,
    Plan,
    Pred,
    Project,
    ReadField,
    SetOp,
    Sort,
    SortKey,
)
from planner.schemas import TableSchema, schema_at
from planner.sources import Resolver, TableSource

DIALECT = "spark"
_AGG_SCOPE = "__mor_agg"


def parse_statements(sql: str) -> list[exp.Expression]:
    """Parse `;`-separated statements; syntax errors carry line and column."""
    try:
        stmts = sqlglot.parse(sql, read=DIALECT)
    except ParseError as e:
        first = e.errors[0] if e.errors else {}
        desc = str(first.get("description") or e).split(". Line")[0]
        desc = re.sub(r"<Token token_type: [^,]+, text: ([^,]*), line.*?>", r"'\1'", desc)
        col = first.get("col")
        if col is not None and first.get("highlight"):
            col = max(1, col - len(first["highlight"]) + 1)  # sqlglot points at the token's end
        raise SqlSyntaxError(desc, first.get("line"), col) from e
    except TokenError as e:
        raise SqlSyntaxError(str(e)) from e
    # a statement holding only comments parses as a bare Semicolon: it is empty, not a query
    return [s for s in stmts if s is not None and not isinstance(s, exp.Semicolon)]


def build_plan(sql: str | exp.Expression, resolver: Resolver) -> Plan:
    """Bind one SELECT statement into a logical plan."""
    if isinstance(sql, str):
        stmts = parse_statements(sql)
        if not stmts:
            raise SqlSyntaxError("empty statement: nothing to run")
        if len(stmts) > 1:
            raise SqlSyntaxError(f"expected one statement, got {len(stmts)}")
        stmt = stmts[0]
    else:
        stmt = sql
    check_is_query(stmt)
    return _Binder(resolver).bind(stmt)


def check_is_query(stmt: exp.Expression) -> None:
    if isinstance(stmt, exp.Query):
        return
    kind = stmt.key.upper()
    if isinstance(stmt, exp.Command):
        kind = str(stmt.this).upper()
    raise NotAQueryError(f"{kind} statements are not supported: mor only reads tables (SELECT)")


@dataclass
class _Rel:
    """A planned relation: its plan and its columns as the user can name them."""

    plan: Plan
    cols: list[tuple[str, Col]]  # (lower-case name, column), in output order


@dataclass
class _TableRef:
    source: TableSource
    snapshot_id: int | None
    schema: TableSchema
    label: str


@dataclass
class _Scope:
    by_qual: dict[str, list[tuple[str, Col]]] = field(default_factory=dict)

    def add(self, qual: str, rel: _Rel) -> None:
        if qual in self.by_qual:
            raise SqlSyntaxError(f"the name {qual!r} is used for two tables in one FROM clause")
        self.by_qual[qual] = rel.cols

    def lookup(self, qual: str, name: str) -> Col | None:
        for n, c in self.by_qual.get(qual, []):
            if n == name:
                return c
        return None


class _Binder:
    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver
        self.tables: dict[str, _TableRef] = {}
        self.types: dict[str, str] = {}  # internal column name -> Iceberg type string
        self._ids = itertools.count()

    def fresh(self, label: str) -> str:
        safe = re.sub(r"[^A-Za-z0-9_]", "_", label)[:40]
        return f"c{next(self._ids)}_{safe}"

    # ---- table references -------------------------------------------------------------
    def bind(self, stmt: exp.Expression) -> Plan:
        stmt = stmt.copy()
        cte_names = {c.alias_or_name.lower() for c in stmt.find_all(exp.CTE)}
        schema: dict[str, dict[str, str]] = {}
        for i, table in enumerate(list(stmt.find_all(exp.Table))):
            if (
                isinstance(table.this, exp.Identifier)
                and not table.db
                and (table.name.lower() in cte_names)
            ):
                continue
            ref = self._resolve_table(table)
            synthetic = f"__mor_t{i}"
            self.tables[synthetic] = ref
            alias = table.alias or (table.name if isinstance(table.this, exp.Identifier) else "t")
            schema[synthetic] = {c.lower(): "string" for c in ref.schema.top_level_names()}
            new = exp.Table(
                this=exp.to_identifier(synthetic),
                alias=exp.TableAlias(this=exp.to_identifier(alias)),
            )
            table.replace(new)
        try:
            qualified = qualify(
                stmt,
                schema=schema,
                dialect=DIALECT,
                validate_qualify_columns=True,
                quote_identifiers=False,
                identify=False,
            )
        except OptimizeError as e:
            raise self._column_error(str(e)) from e
        rel = self._query(qualified, {})
        return rel.plan

    def _column_error(self, message: str) -> MorError:
        m = re.match(
            r"Column '([^']*)' could not be resolved(?:\. Line: (\d+), Col: (\d+))?", message
        )
        if not m:
            return ColumnNotFoundError(message.splitlines()[0])
        name = m.group(1).split(".")[-1]
        where = ""
        if m.group(2):  # sqlglot points at the name's last character
            where = f" at line {m.group(2)}, column {max(1, int(m.group(3)) - len(name) + 1)}"
        hints = []
        for label in sorted({t.label for t in self.tables.values()}):
            t = next(x for x in self.tables.values() if x.label == label)
            hints.append(f"columns of {label}: {', '.join(t.schema.top_level_names())}")
        return ColumnNotFoundError(f"unknown column {name!r}{where}; {'; '.join(hints)}")

    def _resolve_table(self, table: exp.Table) -> _TableRef:
        if isinstance(table.this, exp.Anonymous) or isinstance(table.this, exp.Func):
            fn = table.this
            name = (fn.name if isinstance(fn, exp.Anonymous) else fn.sql_name()).lower()
            args = fn.expressions if isinstance(fn, exp.Anonymous) else list(fn.args.values())
            if name != "iceberg_scan" or len(args) != 1 or not isinstance(args[0], exp.Literal):
                raise UnsupportedError(
                    f"table function {name}(...) is not supported; use iceberg_scan('<path>')"
                )
            src = self.resolver.by_path(args[0].this)
            label = f"iceberg_scan('{args[0].this}')"
        else:
            parts = tuple(p.name for p in table.parts)
            src = self.resolver.by_name(parts)
            label = ".".join(parts)
        snapshot_id = _time_travel(table, src)
        return _TableRef(src, snapshot_id, schema_at(src, snapshot_id), label)

    # ---- queries -----------------------------------------------------------------------
    def _query(self, q: exp.Expression, ctes: dict[str, _Rel]) -> _Rel:
        ctes = dict(ctes)
        with_ = q.args.get("with_") or q.args.get("with")
        if with_ is not None:
            if with_.args.get("recursive"):
                raise UnsupportedError("WITH RECURSIVE is not supported")
            for cte in with_.expressions:
                ctes[cte.alias_or_name.lower()] = self._query(cte.this, ctes)
        if isinstance(q, exp.Subquery):
            return self._finish(q, self._query(q.this, ctes), ctes)
        if isinstance(q, exp.SetOperation):
            return self._setop(q, ctes)
        if isinstance(q, exp.Select):
            return self._select(q, ctes)
        raise UnsupportedError(f"{q.key.upper()} queries are not supported")

    def _setop(self, q: exp.SetOperation, ctes: dict[str, _Rel]) -> _Rel:
        left = self._query(q.this, ctes)
        right = self._query(q.expression, ctes)
        kind = {exp.Union: "union", exp.Intersect: "intersect", exp.Except: "except"}[type(q)]
        distinct = bool(q.args.get("distinct", True))
        plan = SetOp(left=left.plan, right=right.plan, kind=kind, distinct=distinct)
        return self._finish(q, _Rel(plan, list(left.cols)), ctes)

    def _finish(self, q: exp.Expression, rel: _Rel, ctes: dict[str, _Rel]) -> _Rel:
        """ORDER BY / LIMIT / OFFSET attached to a set operation or parenthesised query."""
        order = q.args.get("order")
        if order is not None:
            keys = []
            for o in order.expressions:
                target = self._output_ref(o.this, rel.cols)
                if target is None:
                    raise UnsupportedError(
                        f"ORDER BY {o.this.sql(DIALECT)} after a set operation must name "
                        "an output column"
                    )
                keys.append(_sort_key(o, _col_expr(target)))
            rel = _Rel(Sort(child=rel.plan, keys=tuple(keys)), rel.cols)
        return _Rel(_limit(q, rel.plan), rel.cols)

    def _select(self, q: exp.Select, ctes: dict[str, _Rel]) -> _Rel:
        scope = _Scope()
        from_ = q.args.get("from_") or q.args.get("from")
        if from_ is None:
            raise UnsupportedError("SELECT without FROM is not supported: mor reads tables")
        qual, rel = self._source(from_.this, ctes)
        scope.add(qual, rel)
        plan = rel.plan
        for j in q.args.get("joins") or []:
            plan = self._join(plan, j, scope, ctes)
        where = q.args.get("where")
        if where is not None:
            plan = Filter(child=plan, conditions=tuple(self._conjuncts(where.this, scope)))

        selects = list(q.expressions)
        having = q.args.get("having")
        order = q.args.get("order")
        aggs = _aggregates(
            selects
            + ([having.this] if having else [])
            + ([o.this for o in order.expressions] if order else [])
        )
        group = q.args.get("group")
        if group is not None or aggs:
            plan, scope = self._aggregate(plan, group, aggs, scope)
            selects = [_replace_aggs(s, aggs, group) for s in selects]
            if having is not None:
                plan = Filter(
                    child=plan,
                    conditions=tuple(
                        self._conjuncts(_replace_aggs(having.this, aggs, group), scope)
                    ),
                )
            if order is not None:
                order = order.copy()
                for o in order.expressions:
                    o.set("this", _replace_aggs(o.this, aggs, group))
        elif having is not None:
            raise SqlSyntaxError("HAVING needs GROUP BY or an aggregate")

        out_cols: list[tuple[str, Col]] = []
        exprs: list[tuple[Col, Expr]] = []
        for s in selects:
            label = s.alias_or_name
            inner = s.this if isinstance(s, exp.Alias) else s
            col = Col(name=self.fresh(label), label=label)
            bound = self._expr(inner, scope)
            if isinstance(inner, exp.Column) and len(bound.refs) == 1:
                ref_col = _find_col(scope, next(iter(bound.refs)))
                if ref_col is not None and ref_col.field_id is not None:
                    col = Col(name=col.name, label=label, field_id=ref_col.field_id)
            out_cols.append((label.lower(), col))
            exprs.append((col, bound))

        hidden: list[tuple[Col, Expr]] = []
        keys: list[SortKey] = []
        if order is not None:
            for o in order.expressions:
                target = self._output_ref(o.this, out_cols)
                if target is not None:
                    keys.append(_sort_key(o, _col_expr(target)))
                    continue
                if q.args.get("distinct"):
                    raise UnsupportedError(
                        "ORDER BY of a SELECT DISTINCT must name selected columns"
                    )
                hcol = Col(name=self.fresh("sort"), label="$sort")
                hidden.append((hcol, self._expr(o.this, scope)))
                keys.append(_sort_key(o, _col_expr(hcol)))

        plan = Project(child=plan, exprs=tuple(exprs) + tuple(hidden))
        if q.args.get("distinct"):
            if q.args["distinct"].args.get("on"):
                raise UnsupportedError("DISTINCT ON is not supported")
            plan = Distinct(child=plan)
        if keys:
            plan = Sort(child=plan, keys=tuple(keys))
        plan = _limit(q, plan)
        if hidden:
            plan = Project(child=plan, exprs=tuple((c, _col_expr(c)) for c, _ in exprs))
        return _Rel(plan, out_cols)

    def _output_ref(self, e: exp.Expression, cols: list[tuple[str, Col]]) -> Col | None:
        """An ORDER BY key that names an output column (by alias or ordinal)."""
        if isinstance(e, exp.Column) and not e.table:
            for n, c in cols:
                if n == e.name.lower():
                    return c
        if isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
            i = int(e.this)
            if not 1 <= i <= len(cols):
                raise SqlSyntaxError(f"ORDER BY position {i} is not in the select list")
            return cols[i - 1][1]
        return None

    def _aggregate(
        self, plan: Plan, group: exp.Group | None, aggs: list[exp.Expression], scope: _Scope
    ) -> tuple[Plan, _Scope]:
        groups: list[tuple[Col, Expr]] = []
        out: list[tuple[str, Col]] = []
        for i, g in enumerate(group.expressions if group is not None else []):
            if isinstance(g, (exp.Cube, exp.Rollup, exp.GroupingSets)):
                raise UnsupportedError("GROUPING SETS, CUBE and ROLLUP are not supported")
            bound = self._expr(g, scope)
            label = g.name if isinstance(g, exp.Column) else f"group{i}"
            col = Col(name=f"$g{i}_{self.fresh(label)}", label=label)
            groups.append((col, bound))
            out.append((f"$g{i}", col))
        bound_aggs: list[tuple[Col, Expr]] = []
        for i, a in enumerate(aggs):
            bound = self._expr(a, scope)
            col = Col(name=f"$a{i}_{self.fresh('agg')}", label=bound.text)
            bound_aggs.append((col, bound))
            out.append((f"$a{i}", col))
        new_scope = _Scope()
        new_scope.by_qual[_AGG_SCOPE] = out
        return Aggregate(child=plan, groups=tuple(groups), aggs=tuple(bound_aggs)), new_scope

    def _source(self, node: exp.Expression, ctes: dict[str, _Rel]) -> tuple[str, _Rel]:
        if isinstance(node, exp.Table):
            alias = node.alias_or_name.lower()
            name = node.name.lower()
            if name in self.tables:
                return alias, self._scan(self.tables[name], alias)
            if name in ctes:
                return alias, self._rename(ctes[name])
            raise TableNotFoundError(f"table {node.sql(DIALECT)} not found")
        if isinstance(node, exp.Subquery):
            rel = self._finish(node, self._query(node.this, ctes), ctes)
            alias = node.alias_or_name.lower()
            col_aliases = [
                c.name for c in (node.args.get("alias").columns if node.args.get("alias") else [])
            ]
            if col_aliases:
                rel = _Rel(rel.plan, [(a.lower(), c) for a, (_, c) in zip(col_aliases, rel.cols)])
            return alias, rel
        raise UnsupportedError(f"{node.key.upper()} in FROM is not supported")

    def _scan(self, ref: _TableRef, alias: str) -> _Rel:
        fields = []
        for f in ref.schema.top_level():
            col = Col(name=self.fresh(f.name), label=f.name, field_id=f.field_id)
            self.types[col.name] = str(f.field_type)
            fields.append(
                ReadField(col=col, field_id=f.field_id, type_str=f.field_type.model_dump_json())
            )
        scan = IcebergScan(
            table=ref.label,
            source_key=ref.source.key,
            snapshot_id=ref.snapshot_id,
            schema_id=ref.schema.schema_id,
            fields=tuple(fields),
        )
        return _Rel(scan, [(f.col.label.lower(), f.col) for f in fields])

    def _rename(self, rel: _Rel) -> _Rel:
        """A fresh copy of a CTE's columns, so one CTE can be referenced twice (self-join)."""
        exprs = []
        cols = []
        for n, c in rel.cols:
            new = Col(name=self.fresh(c.label), label=c.label, field_id=c.field_id)
            exprs.append((new, _col_expr(c)))
            cols.append((n, new))
        return _Rel(Project(child=rel.plan, exprs=tuple(exprs)), cols)

    def _join(self, left: Plan, j: exp.Join, scope: _Scope, ctes: dict[str, _Rel]) -> Plan:
        qual, rel = self._source(j.this, ctes)
        side = (j.side or "").lower()
        kind = (j.kind or "").lower()
        if kind in ("semi", "anti"):
            jk = f"left_{kind}"
        elif kind == "cross" or (not side and not j.args.get("on") and not j.args.get("using")):
            jk = "cross" if not j.args.get("on") else "inner"
        else:
            jk = side or "inner"
        left_scope = _Scope(dict(scope.by_qual))
        scope.add(qual, rel)
        cond: Expr | None = None
        if j.args.get("on") is not None:
            cond = self._expr(j.args["on"], scope)
        elif j.args.get("using"):
            parts = []
            for ident in j.args["using"]:
                name = ident.name.lower()
                lcol = next(
                    (c for q in left_scope.by_qual for c in [left_scope.lookup(q, name)] if c), None
                )
                rcol = scope.lookup(qual, name)
                if lcol is None or rcol is None:
                    raise ColumnNotFoundError(f"USING column {ident.name!r} is not on both sides")
                parts.append(f"`{lcol.name}` = `{rcol.name}`")
            cond = Expr(
                sql=" AND ".join(parts),
                text=f"USING ({', '.join(i.name for i in j.args['using'])})",
                refs=frozenset(re.findall(r"`([^`]+)`", " ".join(parts))),
            )
        if jk == "inner" and cond is None:
            jk = "cross"
        return Join(left=left, right=rel.plan, kind=jk, condition=cond)

    # ---- expressions -------------------------------------------------------------------
    def _conjuncts(self, e: exp.Expression, scope: _Scope) -> list[Expr]:
        return [self._expr(c, scope) for c in _flatten_and(e)]

    def _expr(self, e: exp.Expression, scope: _Scope) -> Expr:
        for bad in (exp.Subquery, exp.Exists):
            if e.find(bad) is not None or (isinstance(e, exp.In) and e.args.get("query")):
                raise UnsupportedError(
                    f"subqueries inside expressions are not supported yet: {e.sql(DIALECT)[:80]}"
                )
        refs: set[str] = set()

        def to_internal(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Column):
                col = self._lookup(node, scope)
                refs.add(col.name)
                return exp.column(exp.to_identifier(col.name, quoted=True))
            return node

        labels: list[str] = []

        def to_label(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Column):
                labels.append(self._lookup(node, scope).label)
                return exp.column(f"__mor_label{len(labels) - 1}__")
            return node

        spark_sql = e.copy().transform(to_internal).sql(DIALECT)
        text = e.copy().transform(to_label).sql(DIALECT)
        for i in reversed(range(len(labels))):  # EXPLAIN shows names as the user wrote them
            text = text.replace(f"__mor_label{i}__", labels[i])
        return Expr(sql=spark_sql, text=text, refs=frozenset(refs), pred=self._pred(e, scope))

    def _lookup(self, c: exp.Column, scope: _Scope) -> Col:
        if c.table:
            col = scope.lookup(c.table.lower(), c.name.lower())
        else:
            hits = [x for q in scope.by_qual for x in [scope.lookup(q, c.name.lower())] if x]
            col = hits[0] if len(hits) == 1 else None
        if col is None:
            if _AGG_SCOPE in scope.by_qual:
                raise ColumnNotFoundError(
                    f"column {c.name!r} must appear in GROUP BY or inside an aggregate function"
                )
            raise ColumnNotFoundError(f"unknown column {c.sql(DIALECT)!r}")
        return col

    def _pred(self, e: exp.Expression, scope: _Scope) -> Pred | None:
        """A simple `column op literal` form of `e` for pruning, when types make it safe."""
        ops = {exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
        flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}
        if type(e) in ops:
            left, right, op = e.this, e.expression, ops[type(e)]
            if isinstance(right, exp.Column) and not isinstance(left, exp.Column):
                left, right, op = right, left, flip[op]
            if not isinstance(left, exp.Column):
                return None
            col = self._lookup(left, scope)
            value = _literal_for(right, self.types.get(col.name))
            return None if value is _NO else Pred(column=col.name, op=op, values=(value,))
        if isinstance(e, exp.In) and isinstance(e.this, exp.Column) and not e.args.get("query"):
            col = self._lookup(e.this, scope)
            vals = [_literal_for(v, self.types.get(col.name)) for v in e.expressions]
            if any(v is _NO for v in vals) or not vals:
                return None
            return Pred(column=col.name, op="in", values=tuple(vals))
        if (
            isinstance(e, exp.Is)
            and isinstance(e.this, exp.Column)
            and isinstance(e.expression, exp.Null)
        ):
            return Pred(column=self._lookup(e.this, scope).name, op="isnull")
        if (
            isinstance(e, exp.Not)
            and isinstance(e.this, exp.Is)
            and isinstance(e.this.this, exp.Column)
            and isinstance(e.this.expression, exp.Null)
        ):
            return Pred(column=self._lookup(e.this.this, scope).name, op="notnull")
        return None


_NO = object()
_INTS = {"int", "long"}
_FLOATS = {"float", "double"}


def _literal_for(e: exp.Expression, iceberg_type: str | None) -> Any:
    """The Python value of a literal, only where Spark and Iceberg compare it the same way."""
    if iceberg_type is None:
        return _NO
    if isinstance(e, exp.Neg) and isinstance(e.this, exp.Literal) and not e.this.is_string:
        v = _literal_for(e.this, iceberg_type)
        return _NO if v is _NO else -v
    if not isinstance(e, exp.Literal):
        if isinstance(e, exp.Boolean) and iceberg_type == "boolean":
            return bool(e.this)
        return _NO
    if e.is_string:
        if iceberg_type == "string":
            return e.this
        if iceberg_type == "date" and re.fullmatch(r"\d{4}-\d{2}-\d{2}", e.this):
            return dt.date.fromisoformat(e.this).isoformat()
        return _NO
    text = e.this
    if iceberg_type in _INTS and re.fullmatch(r"\d+", text):
        return int(text)
    if iceberg_type in _FLOATS and re.fullmatch(r"\d+(\.\d*)?([eE][-+]?\d+)?", text):
        return float(text)
    return _NO


def _time_travel(table: exp.Table, src: TableSource) -> int | None:
    version = table.args.get("version")
    md = src.metadata
    if version is None:
        return md.current_snapshot_id
    kind = str(version.this).upper()
    value = version.expression
    if kind == "VERSION":
        if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
            sid = int(value.this)
            if md.snapshot_by_id(sid) is None:
                raise TableNotFoundError(f"table {src.name} has no snapshot {sid}")
            return sid
        ref = md.refs.get(value.name) if isinstance(value, exp.Literal) else None
        if ref is None:
            raise TableNotFoundError(
                f"table {src.name} has no snapshot, branch or tag {value.sql()}"
            )
        return ref.snapshot_id
    if kind == "TIMESTAMP":
        ms = _timestamp_ms(value)
        best = None
        for entry in md.snapshot_log:
            if entry.timestamp_ms <= ms:
                best = entry.snapshot_id
        if best is None:
            raise TableNotFoundError(f"table {src.name} has no snapshot at or before {value.sql()}")
        return best
    raise UnsupportedError(f"time travel {kind} AS OF is not supported")


def _timestamp_ms(value: exp.Expression) -> int:
    if isinstance(value, exp.Literal) and not value.is_string:
        return int(float(value.this) * 1000)
    text = value.name if isinstance(value, exp.Literal) else value.sql()
    try:
        t = dt.datetime.fromisoformat(text.strip())
    except ValueError as e:
        raise SqlSyntaxError(
            f"TIMESTAMP AS OF needs a timestamp like '2024-01-31 12:00:00', got {text!r}"
        ) from e
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)  # mor's local Spark session runs in UTC
    return int(t.timestamp() * 1000)


def _flatten_and(e: exp.Expression) -> list[exp.Expression]:
    if isinstance(e, exp.Paren):
        return _flatten_and(e.this)
    if isinstance(e, exp.And):
        return _flatten_and(e.this) + _flatten_and(e.expression)
    if isinstance(e, exp.Between):
        # x BETWEEN a AND b is x >= a AND x <= b: two conjuncts that can each prune files
        return [
            exp.GTE(this=e.this.copy(), expression=e.args["low"].copy()),
            exp.LTE(this=e.this.copy(), expression=e.args["high"].copy()),
        ]
    return [e]


def _aggregates(exprs: list[exp.Expression]) -> list[exp.Expression]:
    seen: list[exp.Expression] = []
    for e in exprs:
        for a in e.find_all(exp.AggFunc):
            if _is_window_func(a):
                continue
            if a.find_ancestor(exp.AggFunc) is not None:
                continue
            if a not in seen:
                seen.append(a)
    return seen


def _is_window_func(a: exp.Expression) -> bool:
    """`sum(x) OVER (...)` is a window function, not a grouping aggregate."""
    return isinstance(a.parent, exp.Window) and a.parent.this is a


def _replace_aggs(
    e: exp.Expression, aggs: list[exp.Expression], group: exp.Group | None
) -> exp.Expression:
    groups = list(group.expressions) if group is not None else []

    def rep(node: exp.Expression) -> exp.Expression:
        for i, a in enumerate(aggs):
            if node == a and not _is_window_func(node):
                return exp.column(f"$a{i}", table=_AGG_SCOPE)
        for i, g in enumerate(groups):
            if node == g and not isinstance(node, exp.Literal):
                return exp.column(f"$g{i}", table=_AGG_SCOPE)
        return node

    return e.copy().transform(rep)


def _find_col(scope: _Scope, name: str) -> Col | None:
    for cols in scope.by_qual.values():
        for _, c in cols:
            if c.name == name:
                return c
    return None


def _col_expr(c: Col) -> Expr:
    return Expr(sql=f"`{c.name}`", text=c.label, refs=frozenset({c.name}))


def _sort_key(o: exp.Expression, e: Expr) -> SortKey:
    desc = bool(o.args.get("desc"))
    nf = o.args.get("nulls_first")
    nulls_first = (not desc) if nf is None else bool(nf)
    return SortKey(expr=e, ascending=not desc, nulls_first=nulls_first)


def _limit(q: exp.Expression, plan: Plan) -> Plan:
    lim = q.args.get("limit")
    off = q.args.get("offset")
    if lim is None and off is None:
        return plan
    n = _int_arg(lim.expression if lim is not None else None, "LIMIT")
    o = _int_arg(off.expression if off is not None else None, "OFFSET") or 0
    return Limit(child=plan, limit=n, offset=o)


def _int_arg(e: exp.Expression | None, what: str) -> int | None:
    if e is None:
        return None
    if isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit():
        return int(e.this)
    raise SqlSyntaxError(f"{what} needs a whole number, got {e.sql(DIALECT)}")
