"""What each table reference of a query needs: the columns it must expose, and the filters that
may prune its files. Spark plans the query itself; this only narrows what the scans read.

Columns: a table column is read when its name appears anywhere in the statement (as any
identifier); every column of a table a star expands (the star's own SELECT reads it: `starred`),
and of every table when the statement pivots or joins naturally. An
over-approximation on purpose: a column left out would make Spark's analysis fail, one read too
many costs only bytes, and Spark prunes it again.

Filters: sqlglot qualifies the statement (each column names its source), then every SELECT
scope, from the outermost inwards, hands its WHERE and join conditions to its sources. A
conjunct reaches a table only where it cannot remove a row that reaches the output:
- WHERE conjuncts go to a source only when no outer join makes that source null-supplying (a
  WHERE that tests for NULL there must see the NULL-extended rows);
- an ON conjunct goes only to the non-preserved side of its join (both sides of an inner join);
- a conjunct reaches a derived table or CTE only when that SELECT has no LIMIT/OFFSET, window,
  aggregate, QUALIFY or generator (each of those changes with its input rows), and the output
  column it tests is a plain column; a CTE read twice gets only the conjuncts all readers share;
- never a table that is sampled (TABLESAMPLE) or pivoted;
- only simple deterministic predicates (column op literal, IN list, IS [NOT] NULL, BETWEEN) whose
  literal Spark and Iceberg compare alike (`to_pred`); anything else stays Spark's alone.

Row limits: a table reference needs at most n + m rows when it is the only source of a SELECT
with `LIMIT n [OFFSET m]` (integer literals) that turns each row it reads into one output row:
no join, LATERAL VIEW, grouping, DISTINCT, ordering, window, sample or pivot, and a projection
built only of columns, literals, casts, field and element access and operators (a function
could be an aggregate or a generator sqlglot does not know). A WHERE is allowed only when each
of its conjuncts reaches the table (its filters are then the whole WHERE): the planner applies
the limit only if every one is a predicate its partition values decide exactly. Which rows a
LIMIT without ORDER BY returns is Spark's choice; any n + m rows of the table that pass the
WHERE are a correct input.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope

from mor.planner.nodes import HIDDEN_COLUMNS, Pred

DIALECT = "spark"
_BLOCKERS = (exp.AggFunc, exp.Window, exp.Explode, exp.Posexplode, exp.Inline)


@dataclass
class Analysis:
    """Per table reference (in the order given): the column names it needs (None: all of
    them) and the conjuncts, over its own column names, that may prune it."""

    columns: list[set[str] | None]
    filters: list[list[exp.Expression]]
    note: str = ""  # why no filter could be placed, when qualification failed
    hidden: list[tuple[str, ...]] = field(default_factory=list)  # metadata columns named
    # rows the reference needs at most (a LIMIT over it alone, see the module's docstring)
    limits: list[int | None] = field(default_factory=list)


def needed_columns(tree: exp.Expression) -> set[str] | None:
    """Lower-case names of every identifier in the statement; None when all columns are needed
    (of every table: a star needs those of the tables it expands, `starred`)."""
    if any(True for _ in tree.find_all(exp.Pivot)):
        return None  # PIVOT groups by every column it does not name
    for j in tree.find_all(exp.Join):
        if str(j.args.get("method") or "").upper() == "NATURAL":
            return None  # joins on every column the two sides share
    return {i.name.lower() for i in tree.find_all(exp.Identifier)}


def starred(tree: exp.Expression, tables: list[exp.Table]) -> list[bool]:
    """Which of `tables` a star expands (`SELECT *`, `t.*`, `struct(*)`; not `count(*)`): each
    star expands the sources of its own SELECT (those its qualifier names). A derived table or
    CTE among them passes on only the columns its own SELECT lists (names counted by
    `needed_columns`) or, with a star of its own, those of the tables that one expands; any
    other source (a parenthesised join, ...) counts every table in it as expanded."""
    hit: set[int] = set()
    for star in tree.find_all(exp.Star):
        if isinstance(star.parent, exp.Count):
            continue
        sel = star.find_ancestor(exp.Select)
        if sel is None:
            return [True] * len(tables)
        qualifier = star.parent.table if isinstance(star.parent, exp.Column) else ""
        from_ = sel.args.get("from_") or sel.args.get("from")
        sources = [from_.this] if from_ is not None else []
        sources += [j.this for j in sel.args.get("joins") or ()]
        sources += list(sel.args.get("laterals") or ())
        for src in sources:
            if qualifier and src.alias_or_name.lower() != qualifier.lower():
                continue
            if isinstance(src, exp.Table):
                hit.add(id(src))
            elif not (
                isinstance(src, exp.Subquery)
                and isinstance(src.this, (exp.Select, exp.SetOperation))
            ):
                hit.update(id(t) for t in src.find_all(exp.Table))
    return [id(t) in hit for t in tables]


_HIDDEN_TYPES = {"_file": "string", "_spec_id": "int", "_partition": "string"}


def _hidden(
    tree: exp.Expression, tables: list[exp.Table], schemas: list[dict[str, str]]
) -> list[tuple[str, ...]]:
    """The metadata columns each table reference exposes: those a column reference names (`id
    AS _pos` is an alias), unqualified, or qualified by the reference's alias or name from
    inside the SELECT that reads it (`t._file` is not another table's, nor that of a table
    also named `t` in a subquery). `_partition.region` parses as column `region` of a table
    `_partition`: any part of a reference counts, qualified by the part before it."""
    unqualified: set[str] = set()
    qualified: list[tuple[str, str, exp.Column]] = []
    for c in tree.find_all(exp.Column):
        parts = [p.name.lower() for p in c.parts]
        for k, p in enumerate(parts):
            if p in HIDDEN_COLUMNS:
                if k:
                    qualified.append((p, parts[k - 1], c))
                else:
                    unqualified.add(p)
    out = []
    for t, s in zip(tables, schemas):
        own = (t.alias_or_name or "").lower()
        scope = t.find_ancestor(exp.Select)

        def sees(c: exp.Column, scope: exp.Select | None = scope) -> bool:
            node: exp.Expression | None = c
            while node is not None and scope is not None:
                if node is scope:
                    return True
                node = node.parent
            return scope is None

        out.append(
            tuple(
                h
                for h in HIDDEN_COLUMNS
                if h not in s
                and (
                    h in unqualified
                    or any(n == h and q == own and sees(c) for n, q, c in qualified)
                )
            )
        )
    return out


def analyze(
    tree: exp.Expression, tables: list[exp.Table], schemas: list[dict[str, str]]
) -> Analysis:
    """`tables`: the Iceberg table references of `tree`; `schemas`: each one's column names
    (lower case) and Spark types."""
    every = needed_columns(tree)
    out = Analysis(
        columns=[None if star else every for star in starred(tree, tables)],
        filters=[[] for _ in tables],
        hidden=_hidden(tree, tables, schemas),
        limits=[None for _ in tables],
    )
    if not tables:
        return out
    copy = tree.copy()
    originals = list(tree.find_all(exp.Table))
    copies = list(copy.find_all(exp.Table))  # the same walk over an equal tree: same order
    names: dict[str, int] = {}
    schema: dict[str, dict[str, str]] = {}
    for i, t in enumerate(tables):
        node = copies[next(k for k, o in enumerate(originals) if o is t)]
        synthetic = f"__mor_t{i}"
        names[synthetic] = i
        alias = node.alias or (node.name if isinstance(node.this, exp.Identifier) else synthetic)
        node.set("this", exp.to_identifier(synthetic))
        for arg in ("db", "catalog", "version"):
            node.set(arg, None)
        if not node.alias:
            node.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
        # the metadata columns it exposes too (else `t._file` fails qualification)
        schema[synthetic] = {
            **schemas[i],
            **{h: _HIDDEN_TYPES.get(h, "bigint") for h in out.hidden[i]},
        }
    try:
        qualified = qualify(
            copy,
            schema=schema,
            dialect=DIALECT,
            validate_qualify_columns=False,
            quote_identifiers=False,
            identify=False,
        )
        scopes = list(traverse_scope(qualified))
    except Exception as e:  # noqa: BLE001 - pruning is an optimisation: Spark still runs it
        out.note = f"no filter pushed: {str(e).splitlines()[0][:120] if str(e) else type(e)}"
        return out
    _Pusher(names, out).run(scopes)
    return out


@dataclass
class _Pusher:
    names: dict[str, int]
    out: Analysis
    # per derived-table / CTE scope: one list of conjuncts per reader
    incoming: dict[int, list[list[exp.Expression]]] = field(default_factory=dict)
    readers: dict[int, int] = field(default_factory=dict)

    def run(self, scopes: list[Scope]) -> None:
        for s in scopes:  # count the readers of each scope first
            for child in _sources(s).values():
                if isinstance(child, Scope):
                    self.readers[id(child)] = self.readers.get(id(child), 0) + 1
        for s in reversed(scopes):  # outermost first: readers before what they read
            if isinstance(s.expression, exp.Select):
                self._select(s)

    def _from_above(self, scope: Scope) -> list[exp.Expression]:
        lists = self.incoming.get(id(scope), [])
        if not lists or len(lists) != self.readers.get(id(scope), 0):
            return []
        common = [c for c in lists[0] if all(any(c == d for d in other) for other in lists[1:])]
        return _through_select(scope.expression, common)

    def _select(self, scope: Scope) -> None:
        sel = scope.expression
        sources = _sources(scope)
        null_side, on_pushed = _joins(sel, sources)
        where = sel.args.get("where")
        terms = conjuncts(where.this) if where is not None else []
        terms += self._from_above(scope)
        routed: dict[str, list[exp.Expression]] = {a: [] for a in sources}
        for c in terms:
            alias = _single_source(c, sources)
            if alias is not None and alias not in null_side:
                routed[alias].append(c)
        for alias, c in on_pushed:
            routed[alias].append(c)
        rows = rows_needed(sel)
        if rows is not None and len(sources) == 1:
            ((alias, only),) = sources.items()
            if (
                isinstance(only, exp.Table)
                and only.name in self.names
                and len(routed[alias]) == len(terms)  # the whole WHERE reaches it
            ):
                self.out.limits[self.names[only.name]] = rows
        for alias, cs in routed.items():
            target = sources[alias]
            if isinstance(target, Scope):
                lst = [_unqualified(c) for c in cs]
                self.incoming.setdefault(id(target), []).append(lst)
            elif isinstance(target, exp.Table) and target.name in self.names:
                self.out.filters[self.names[target.name]].extend(_unqualified(c) for c in cs)


# what a SELECT that passes its source's rows through one by one may hold besides its projection
_ROW_BY_ROW_ARGS = {
    "expressions",
    "from",
    "from_",
    "where",
    "limit",
    "offset",
    "hint",
    "with",
    "with_",
}
# what its projection may be built of: nothing that could aggregate, generate or drop rows
_ROW_BY_ROW_NODES = (
    exp.Column,
    exp.Star,
    exp.Identifier,
    exp.Literal,
    exp.Alias,
    exp.Cast,
    exp.TryCast,
    exp.DataType,
    exp.DataTypeParam,
    exp.Dot,
    exp.Paren,
    exp.Null,
    exp.Boolean,
    exp.Bracket,
    exp.Neg,
    exp.Not,
    exp.Binary,
)


def rows_needed(sel: exp.Select) -> int | None:
    """The rows that pass its WHERE a SELECT needs of its sources at most: n + m for `LIMIT n
    [OFFSET m]` over a source read row by row (the module's docstring), else None."""
    limit = sel.args.get("limit")
    if not isinstance(limit, exp.Limit):
        return None
    if any(v for k, v in sel.args.items() if k not in _ROW_BY_ROW_ARGS):
        return None  # joins, GROUP BY, DISTINCT, ORDER BY, windows, laterals, ...
    n = _count(limit.expression)
    offset = sel.args.get("offset")
    m = _count(offset.expression) if isinstance(offset, exp.Offset) else 0
    if n is None or m is None or limit.args.get("offset") is not None:
        return None
    for e in sel.expressions:
        if any(not isinstance(node, _ROW_BY_ROW_NODES) for node in e.walk()):
            return None
    return n + m


def _count(e: Any) -> int | None:
    if isinstance(e, exp.Literal) and not e.is_string and re.fullmatch(r"\d+", e.this):
        return int(e.this)
    return None


def _sources(scope: Scope) -> dict[str, Any]:
    """alias -> Table or Scope, for what this SELECT's FROM and JOINs read (semi and anti
    joined sources included: their ON conditions may prune them)."""
    sel = scope.expression
    if not isinstance(sel, exp.Select):
        return {}
    from_ = sel.args.get("from_") or sel.args.get("from")
    nodes = ([from_.this] if from_ is not None else []) + [
        j.this for j in sel.args.get("joins") or []
    ]
    out = {}
    for n in nodes:
        if n.args.get("sample") is not None or n.args.get("pivots"):
            continue  # a sample or a (un)pivot sees every row: nothing is pushed below it
        alias = n.alias_or_name
        if alias in scope.sources:
            out[alias] = scope.sources[alias]
    return out


def _joins(
    sel: exp.Select, sources: dict[str, Any]
) -> tuple[set[str], list[tuple[str, exp.Expression]]]:
    """Sources an outer join makes null-supplying, and the ON conjuncts that may go to one
    source: (alias, conjunct)."""
    from_ = sel.args.get("from_") or sel.args.get("from")
    seen = {from_.this.alias_or_name} if from_ is not None else set()
    null_side: set[str] = set()
    pushed: list[tuple[str, exp.Expression]] = []
    for j in sel.args.get("joins") or []:
        right = j.this.alias_or_name
        side = (j.side or "").upper()
        kind = (j.kind or "").upper()
        on = j.args.get("on")
        for c in conjuncts(on) if on is not None else []:
            alias = _single_source(c, sources)
            if alias is None:
                continue
            if alias == right and side not in ("RIGHT", "FULL"):
                # right rows failing an ON conjunct never match, and only matches of a
                # non-preserved side reach the output (inner, left outer, semi, anti)
                pushed.append((alias, c))
            elif alias in seen and side in ("", "RIGHT") and kind not in ("SEMI", "ANTI"):
                # an inner or right join drops left rows failing it too, unless an earlier
                # outer join NULL-extended that source (the conjunct then sees the NULLs)
                if alias not in null_side:
                    pushed.append((alias, c))
        if side == "LEFT" and kind not in ("SEMI", "ANTI"):
            null_side.add(right)
        elif side == "RIGHT":
            null_side |= seen
        elif side == "FULL":
            null_side |= seen | {right}
        if kind in ("SEMI", "ANTI"):
            null_side.add(right)  # its columns are gone after the join: WHERE cannot use them
        seen.add(right)
    return null_side, pushed


def _through_select(sel: exp.Select, conjuncts: list[exp.Expression]) -> list[exp.Expression]:
    """Conjuncts over this SELECT's output names, rewritten over its sources' columns; none
    when the SELECT's output depends on which rows its input has beyond one row at a time."""
    if not conjuncts:
        return []
    for arg in ("limit", "offset", "group", "having", "qualify", "laterals"):
        if sel.args.get(arg):
            return []
    if any(e.find(*_BLOCKERS) or _nondeterministic(e) for e in sel.expressions):
        return []
    outputs: dict[str, list[exp.Expression]] = {}
    for e in sel.expressions:
        outputs.setdefault(e.alias_or_name.lower(), []).append(e.unalias())
    out = []
    for c in conjuncts:
        ok = True

        def swap(node: exp.Expression) -> exp.Expression:
            nonlocal ok
            if isinstance(node, exp.Column):
                hits = outputs.get(node.name.lower(), [])
                if len(hits) != 1 or not isinstance(hits[0], exp.Column):
                    ok = False
                    return node
                return hits[0].copy()
            return node

        new = c.copy().transform(swap)
        if ok:
            out.append(new)
    return out


_NONDETERMINISTIC = {
    "rand",
    "randn",
    "random",
    "uuid",
    "shuffle",
    "monotonically_increasing_id",
    "spark_partition_id",
    "input_file_name",
    "input_file_block_start",
    "input_file_block_length",
}


def _nondeterministic(e: exp.Expression) -> bool:
    """A projection whose values depend on which rows come before (Spark does not push a
    filter through it either)."""
    for f in e.find_all(exp.Func):
        name = f.name if isinstance(f, exp.Anonymous) else f.sql_name()
        if name.lower() in _NONDETERMINISTIC:
            return True
    return False


def conjuncts(e: exp.Expression) -> list[exp.Expression]:
    """The AND-ed terms of `e`, in order; iterative, for statements with thousands of them."""
    out: list[exp.Expression] = []
    todo = [e]
    while todo:
        node = todo.pop()
        if isinstance(node, exp.Paren):
            todo.append(node.this)
        elif isinstance(node, exp.And):
            todo += [node.expression, node.this]  # popped left first
        elif isinstance(node, exp.Between):
            # x BETWEEN a AND b is x >= a AND x <= b: two conjuncts that can each prune files
            out.append(exp.GTE(this=node.this.copy(), expression=node.args["low"].copy()))
            out.append(exp.LTE(this=node.this.copy(), expression=node.args["high"].copy()))
        else:
            out.append(node)
    return out


def _single_source(c: exp.Expression, sources: dict[str, Any]) -> str | None:
    """The one source of this scope a simple conjunct reads, if it reads exactly one."""
    if c.find(exp.Subquery, exp.Exists, exp.Query) is not None:
        return None
    tables = {col.table for col in c.find_all(exp.Column)}
    if len(tables) != 1:
        return None
    (t,) = tables
    return t if t in sources else None


def _unqualified(c: exp.Expression) -> exp.Expression:
    def strip(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column):
            return exp.column(exp.to_identifier(node.name))
        return node

    return c.copy().transform(strip)


# ---- simple predicates, for pruning by metadata ---------------------------------------------

_OPS = {exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}
_NO = object()
_INTS = {"int", "long"}
_FLOATS = {"float", "double"}


def to_pred(e: exp.Expression, types: dict[str, str]) -> Pred | None:
    """`column op literal` (and IN, IS [NOT] NULL) over a column of `types` (lower-case name ->
    Iceberg type), when the literal compares the same way in Spark and in Iceberg's metrics."""
    if type(e) in _OPS:
        left, right, op = e.this, e.expression, _OPS[type(e)]
        if isinstance(right, exp.Column) and not isinstance(left, exp.Column):
            left, right, op = right, left, _FLIP[op]
        if not isinstance(left, exp.Column):
            return None
        name = left.name.lower()
        if not _bounds_follow_spark(types.get(name), op):
            return None
        value = literal_for(right, types.get(name))
        return None if value is _NO else Pred(column=name, op=op, values=(value,))
    if isinstance(e, exp.In) and isinstance(e.this, exp.Column) and not e.args.get("query"):
        name = e.this.name.lower()
        if not _bounds_follow_spark(types.get(name), "in"):
            return None
        vals = [literal_for(v, types.get(name)) for v in e.expressions]
        if not vals or any(v is _NO for v in vals):
            return None
        return Pred(column=name, op="in", values=tuple(vals))
    if (
        isinstance(e, exp.Is)
        and isinstance(e.this, exp.Column)
        and isinstance(e.expression, exp.Null)
    ):
        return Pred(column=e.this.name.lower(), op="isnull")
    if (
        isinstance(e, exp.Not)
        and isinstance(e.this, exp.Is)
        and isinstance(e.this.this, exp.Column)
        and isinstance(e.this.expression, exp.Null)
    ):
        return Pred(column=e.this.this.name.lower(), op="notnull")
    return None


def _bounds_follow_spark(iceberg_type: str | None, op: str) -> bool:
    """Whether Iceberg's column bounds can prune `column op literal` as Spark evaluates it.

    Spark orders NaN above every number (`d > 5` is true for NaN), while Iceberg's bounds leave
    NaN out: `>`, `>=` and `!=` on a double could prune a file whose NaN rows match (Iceberg's
    own Spark reader loses them). A float column is compared with a double literal in Spark, but
    with the literal rounded to float by Iceberg's evaluators: never pruned by a literal."""
    if iceberg_type == "float":
        return False
    return not (iceberg_type == "double" and op in (">", ">=", "!="))


def literal_for(e: exp.Expression, iceberg_type: str | None) -> Any:
    """The Python value of a literal, only where Spark and Iceberg compare it the same way."""
    if iceberg_type is None:
        return _NO
    if isinstance(e, exp.Neg) and isinstance(e.this, exp.Literal) and not e.this.is_string:
        v = literal_for(e.this, iceberg_type)
        return _NO if v is _NO else -v
    if isinstance(e, (exp.Cast, exp.TryCast)) and iceberg_type == "date":
        # DATE '1994-01-01' and CAST('1994-01-01' AS DATE), as TPC-H writes dates
        if e.to.this == exp.DataType.Type.DATE and isinstance(e.this, exp.Literal):
            return _date(e.this)
        return _NO
    if not isinstance(e, exp.Literal):
        if isinstance(e, exp.Boolean) and iceberg_type == "boolean":
            return bool(e.this)
        return _NO
    if e.is_string:
        if iceberg_type == "string":
            return e.this
        if iceberg_type == "uuid":
            # the column is the canonical string (lower-case 8-4-4-4-12), and canonical
            # strings order as Iceberg orders the uuids (unsigned bytes); another spelling
            # ('ABC...', no dashes) compares as text in Spark, not as that uuid: never pruned
            return e.this if _canonical_uuid(e.this) else _NO
        if iceberg_type == "date":
            return _date(e)
        return _NO
    text = e.this
    if iceberg_type in _INTS and re.fullmatch(r"\d+", text):
        return int(text)
    if iceberg_type in _FLOATS and re.fullmatch(r"\d+(\.\d*)?([eE][-+]?\d+)?", text):
        return float(text)
    return _NO


def _canonical_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


def _date(lit: exp.Literal) -> Any:
    if lit.is_string and re.fullmatch(r"\d{4}-\d{2}-\d{2}", lit.this):
        try:
            return dt.date.fromisoformat(lit.this).isoformat()
        except ValueError:
            return _NO  # '2024-13-01': Spark's cast gives NULL, which prunes nothing here
    return _NO
