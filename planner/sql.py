"""SQL text -> a SparkQuery: mor plans the table reads, Spark plans the query around them.

sqlglot parses each statement (Spark dialect) only to find its Iceberg table references
(`ns.t`, `cat.ns.t`, `iceberg_scan('<path>')`, with `VERSION AS OF` / `TIMESTAMP AS OF`) and
what each needs (planner/pushdown.py). Each reference becomes an IcebergScan; the statement's
own text, with each reference (and its time-travel clause) replaced by the name of a view of its
scan, is what Spark runs. Nothing else in the text is changed, so nothing the user wrote can be
lost: whatever Spark SQL accepts runs with Spark's semantics.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from mor.planner.defaults import check_nested, default_sql
from mor.planner.errors import (
    AmbiguousNameError,
    NotAQueryError,
    SqlSyntaxError,
    TableNotFoundError,
    UnsupportedError,
)
from mor.planner.names import is_spark_only
from mor.planner.nodes import (
    LINEAGE_COLUMNS,
    METADATA_TABLES,
    SNAPSHOT_METADATA_TABLES,
    Col,
    Expr,
    IcebergScan,
    MetadataTable,
    Plan,
    Pred,
    ReadField,
    SparkQuery,
    TableChanges,
    TextEdit,
    line_col,
)
from mor.planner.pushdown import analyze, to_pred
from mor.planner.schemas import TableSchema, schema_at, spark_sql_type
from mor.planner.sources import Resolver, TableSource

DIALECT = "spark"


@dataclass(frozen=True)
class Statement:
    """One statement of the user's input: its text, where it starts, and its parse tree."""

    text: str
    offset: int
    source: str  # the whole input, for line and column numbers
    tree: exp.Expression


@contextmanager
def deep_enough(what: str) -> Iterator[None]:
    """Room for deeply nested statements (sqlglot parses and walks them recursively: 150
    nested subqueries need ~2,000 frames); a statement deeper still is a one-line error."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20_000))
    try:
        yield
    except RecursionError:
        raise SqlSyntaxError(f"the statement nests too deeply for mor to {what} it") from None
    finally:
        sys.setrecursionlimit(old)


def split_statements(source: str) -> list[Statement]:
    """The `;`-separated statements of `source`; syntax errors carry the line and column in it.
    A statement holding only comments is empty, not a query."""
    with deep_enough("parse"):
        return _split(source)


def _split(source: str) -> list[Statement]:
    try:
        tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(source)
    except TokenError as e:
        near = str(e).splitlines()[0].removeprefix("Error tokenizing ").strip()
        raise SqlSyntaxError(
            f"cannot read the SQL near {near}: a quote or comment that is not closed?"
        ) from e
    groups: list[list[Token]] = [[]]
    for t in tokens:
        if t.token_type == TokenType.SEMICOLON:
            groups.append([])
        else:
            groups[-1].append(t)
    out = []
    for g in groups:
        if not g:
            continue
        start, end = g[0].start, g[-1].end + 1
        text = source[start:end]
        tree = _read_by_mor(text, g)
        if tree is None:
            tree = _parse(_for_parsing(text, g), start, source)
        out.append(Statement(text, start, source, tree))
    return out


# statements mor reads from their tokens (planner/ddl_parse.py, planner/binding.py): sqlglot
# models only some of their forms (Iceberg's ALTER TABLE extensions, SHOW, DESCRIBE t col)
_BY_MOR = (("ALTER", "TABLE"), ("SHOW",), ("DESCRIBE",), ("DESC",), ("CALL",))


def _read_by_mor(text: str, tokens: list[Token]) -> exp.Expression | None:
    words = [t.text.upper() for t in tokens[:2]]
    for lead in _BY_MOR:
        if words[: len(lead)] == list(lead):
            return exp.Command(this=words[0], expression=exp.Literal.string(text))
    return None


def _for_parsing(text: str, tokens: list[Token]) -> str:
    """`text` as sqlglot can parse it, every offset unchanged: Spark's `FOR SYSTEM_VERSION AS
    OF` (sqlglot knows only `VERSION AS OF`) becomes `VERSION AS OF` padded with spaces. Only
    the parse sees this; Spark receives the user's text (the time-travel clause is replaced by
    the scan's view anyway)."""
    base = tokens[0].start
    out = list(text)
    first = [t.text.upper() for t in tokens[:2]]
    if first == ["REPLACE", "TABLE"]:
        # Iceberg's REPLACE TABLE, read as CREATE TABLE (planner/binding.py tells them apart)
        out[0:7] = list("CREATE ")
    for a, b in zip(tokens, tokens[1:]):
        if a.text.upper() == "FOR" and b.text.upper() == "SYSTEM_VERSION":
            lo, hi = a.start - base, b.end - base + 1
            out[lo:hi] = list("VERSION".rjust(hi - lo))
    return "".join(out)


def _parse(text: str, offset: int, source: str) -> exp.Expression:
    quiet = logging.getLogger("sqlglot")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "falling back to a Command": mor says why in one line
    try:
        stmts = [s for s in sqlglot.parse(text, read=DIALECT) if s is not None]
    except ParseError as e:
        first = e.errors[0] if e.errors else {}
        desc = readable_syntax_error(
            str(first.get("description") or e).split(". Line")[0],
            first.get("highlight") or "",
            not (first.get("end_context") or "").strip(),
        )
        line, col = first.get("line"), first.get("col")
        if line is None or col is None:
            raise SqlSyntaxError(desc) from e
        if first.get("highlight"):
            col = max(1, col - len(first["highlight"]) + 1)  # sqlglot points at the token's end
        lines = text.split("\n")
        at = sum(len(x) + 1 for x in lines[: line - 1]) + col - 1
        raise SqlSyntaxError(desc, *line_col(source, offset + at)) from e
    finally:
        quiet.setLevel(level)
    if len(stmts) != 1:
        raise SqlSyntaxError("expected one statement", *line_col(source, offset))
    return stmts[0]


# what a clause or operator sqlglot found incomplete needs next, in SQL's words
_NEEDS = {
    "Where": "a condition after WHERE",
    "Having": "a condition after HAVING",
    "Qualify": "a condition after QUALIFY",
    "Not": "a condition after NOT",
    "Order": "an expression after ORDER BY",
    "Group": "an expression after GROUP BY",
    "Limit": "a number after LIMIT",
    "Offset": "a number after OFFSET",
    "Union": "a query after UNION",
    "Intersect": "a query after INTERSECT",
    "Except": "a query after EXCEPT",
    "Between": "AND and an upper bound after BETWEEN",
    "Whens": "WHEN MATCHED or WHEN NOT MATCHED clauses after MERGE's ON condition",
    "Join": "a table after JOIN",
    "Alias": "a name after AS",
    "In": "values or a query after IN",
    "Cast": "a type after AS",
}
_CLASS = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>")


def readable_syntax_error(desc: str, token: str, at_end: bool) -> str:
    """sqlglot's description of a parse error in SQL's words: the token it stopped at and
    what was expected there, never a parser class (`at_end`: the token is the statement's
    last)."""
    where = "at the end of the statement" if at_end else f"at '{token}'"
    m = _CLASS.search(desc)
    if m:
        kind = m.group(2)
        if kind in _NEEDS:
            return f"expected {_NEEDS[kind]}, {where}"
        if at_end:
            return f"expected an expression after '{token}', at the end of the statement"
        return f"expected an expression before '{token}'"
    if desc.startswith("Invalid expression / Unexpected token"):
        return f"unexpected '{token}'" if token else "unexpected end of the statement"
    m = re.match(r"Expecting (\S+)", desc)
    if m:
        return f"expected '{m.group(1)}' {where}"
    m = re.match(r"Expected (.+?) (?:after (\S+)|but got .*)$", desc)
    if m:
        what = {"TYPE": "a type"}.get(m.group(1), m.group(1))
        return f"expected {what}" + (f" after {m.group(2)}" if m.group(2) else "") + f", {where}"
    desc = re.sub(r"<Token token_type: TokenType\.SENTINEL.*?>", "the end of the statement", desc)
    desc = re.sub(r"<Token token_type: [^,]+, text: ([^,]*), line.*?>", r"'\1'", desc)
    desc = re.sub(r"<class '[\w.]*?(\w+)'>", lambda c: c.group(1).lower(), desc)
    return desc


def check_is_query(stmt: exp.Expression) -> None:
    if isinstance(stmt, (exp.Query, exp.Values)):  # VALUES (...), (...) is a query in Spark
        return
    kind = stmt.key.upper()
    if isinstance(stmt, exp.Command):
        kind = str(stmt.this).upper()
    raise NotAQueryError(f"{kind} is not a query: it has no rows to plan")


def one_statement(sql: str) -> Statement:
    stmts = split_statements(sql)
    if not stmts:
        raise SqlSyntaxError("empty statement: nothing to run")
    if len(stmts) > 1:
        raise SqlSyntaxError(f"expected one statement, got {len(stmts)}")
    return stmts[0]


@dataclass(frozen=True, eq=False)
class _Ref:
    node: exp.Table
    source: TableSource
    snapshot_id: int | None
    schema: TableSchema
    label: str  # the table as EXPLAIN names it
    span: tuple[int, int]  # [start, end) of the reference in the statement (see _span)
    kind: str | None = None  # a metadata table (`snapshots`, `files`, ...) or "changes"
    changes: tuple[int | None, int | None] = (None, None)  # table_changes: (start, end) ids


def bind(stmt: Statement, resolver: Resolver) -> SparkQuery:
    """The statement as a SparkQuery over one IcebergScan per Iceberg table reference."""
    with deep_enough("analyse"):
        return _bind(stmt, resolver)


def _bind(stmt: Statement, resolver: Resolver) -> SparkQuery:
    check_is_query(stmt.tree)
    refs: list[_Ref] = []
    given: list[exp.Table] = []  # DataFrames the call hands in by name
    for t in iceberg_tables(stmt.tree):
        owner = _owner(stmt, t, resolver)
        if owner == "given":
            given.append(t)
        elif owner == "mor":
            refs.append(_resolve(stmt, t, resolver))
    refs.sort(key=lambda r: _start(r.node))
    data = [r for r in refs if r.kind is None]
    analysis = analyze(
        stmt.tree,
        [r.node for r in data],
        [
            {f.name.lower(): spark_sql_type(f.field_type) for f in r.schema.top_level()}
            for r in data
        ],
    )
    scans: list[Plan] = []
    edits: list[TextEdit] = []
    k = 0  # position among the data scans (never look a reference up by equality: two
    # references written alike are equal sqlglot trees, yet each has its own filters)
    for i, r in enumerate(refs):
        if r.kind == "changes":
            scans.append(_changes(r))
        elif r.kind is not None:
            snap = r.snapshot_id if r.kind in SNAPSHOT_METADATA_TABLES else None
            scans.append(
                MetadataTable(table=r.label, source_key=r.source.key, kind=r.kind, snapshot_id=snap)
            )
        else:
            hidden = analysis.hidden[k]
            if r.source.metadata.format_version < 3:
                # as Iceberg's reader: no row lineage before v3 (an unknown column to Spark)
                hidden = tuple(h for h in hidden if h not in LINEAGE_COLUMNS)
            if hidden and analysis.columns[k] is None:
                raise UnsupportedError(
                    f"metadata column {hidden[0]} of {r.label} cannot be read in a query that "
                    "also expands * (mor binds each table as a view, and a view cannot hide a "
                    "column from *): list the columns you need instead of *"
                )
            scan = _scan(r, analysis.columns[k], analysis.filters[k], analysis.limits[k])
            scans.append(replace(scan, hidden=hidden) if hidden else scan)
            k += 1
        edits += _edits(stmt, r, i)
    edits += _qualifier_edits(stmt, refs)
    relations = sorted({t.name.lower() for t in given})
    for t in given:
        start = _start(t)
        end = max(p.meta["end"] for p in t.parts) + 1
        edits.append(TextEdit(start=start, end=end, relation=relations.index(t.name.lower())))
        if not t.alias:  # Spark names an unaliased relation by its name: keep that name
            edits.append(TextEdit(start=end, end=end, text=f" AS {t.this.sql(DIALECT)}"))
    return SparkQuery(
        statement=stmt.text,
        offset=stmt.offset,
        source=stmt.source,
        edits=tuple(sorted(edits, key=lambda e: (e.start, e.end))),
        scans=tuple(scans),
        refs=tuple(stmt.text[slice(*r.span)] for r in refs),
        note=analysis.note,
        columns=tuple(tuple(r.schema.top_level_names()) if r.kind is None else () for r in refs),
        relations=tuple(relations),
    )


def iceberg_tables(tree: exp.Expression) -> list[exp.Table]:
    """Table references mor reads: named tables that are not CTEs, and iceberg_scan(...).
    Other table functions (range, explode, ...) are Spark's."""
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    out = []
    for t in tree.find_all(exp.Table):
        if t.find_ancestor(exp.Hint) is not None:
            continue  # BROADCAST(b) names an alias of the query, not a table to read
        if isinstance(t.this, exp.Identifier):
            if not t.args.get("db") and t.name.lower() in ctes:
                continue
            out.append(t)
        elif _function_name(t) in ("iceberg_scan", "table_changes"):
            out.append(t)
    return out


def _function_name(t: exp.Table) -> str:
    fn = t.this
    if isinstance(fn, exp.Anonymous):
        return str(fn.name).lower()
    if isinstance(fn, exp.Func):
        return fn.sql_name().lower()
    return ""


def _resolve(stmt: Statement, t: exp.Table, resolver: Resolver) -> _Ref:
    try:
        return _resolve_at(stmt, t, resolver)
    except TableNotFoundError as e:
        line, col = line_col(stmt.source, stmt.offset + _start(t))
        raise TableNotFoundError(f"{e} (line {line}, column {col})") from e


def _owner(stmt: Statement, t: exp.Table, resolver: Resolver) -> str:
    """Whose relation a table reference is (planner/names.py): "mor" (a table of mor's
    catalog, iceberg_scan(...), table_changes(...)), "given" (a DataFrame the call hands in
    by name) or "spark" (left in the text for Spark's analyzer to resolve)."""
    if not isinstance(t.this, exp.Identifier):
        return "mor"
    try:
        return owner_of(tuple(p.name for p in t.parts), t.this.quoted, resolver)
    except (TableNotFoundError, AmbiguousNameError) as e:
        line, col = line_col(stmt.source, stmt.offset + _start(t))
        raise type(e)(f"{e} (line {line}, column {col})") from e


def owner_of(parts: tuple[str, ...], quoted_last: bool, resolver: Resolver) -> str:
    """Whose relation `parts` names: "given", "spark" or "mor", by the rule of
    planner/names.py; a name both mor's catalog and Spark's session hold is an
    AmbiguousNameError, one neither holds a TableNotFoundError naming where it looked."""
    spark = resolver.spark
    shown = ".".join(parts)
    if len(parts) == 1:
        return "given" if parts[0].lower() in resolver.given else "spark"
    if is_spark_only(parts, quoted_last):
        return "spark"
    # three parts are Spark's only when the first names one of its catalogs (Spark reads
    # `a.b.c` as catalog `a`'s table `b.c`); else mor's (`ns.t.snapshots`, `ns.t.branch_b`)
    spark_catalog = len(parts) == 3 and spark.is_catalog(parts[0])
    if spark_catalog and not resolver.is_mor_catalog(parts[0]):
        return "spark"
    if len(parts) > 3 or (len(parts) == 3 and not spark_catalog):
        return "mor"
    spark.ask_ahead(parts)  # both sides asked, at once
    try:
        _mor_source(parts, resolver)
    except TableNotFoundError as e:
        held = spark.relation(parts)
        if held is not None:
            return "spark"
        if spark_catalog:
            raise TableNotFoundError(
                f"{e}; nor does Spark's catalog {parts[0]} hold {shown}"
            ) from e
        raise TableNotFoundError(f"{e}; nor is {shown} in {spark.where()}") from e
    held = spark.relation(parts)
    if held is not None:
        name = resolver.catalog_name() or "mor's catalog"
        raise AmbiguousNameError(
            f"{shown} names both a table of mor's catalog {name!r} and {held} of Spark's "
            f"session: name one of them whole ({name}.{shown} for mor's, or Spark's by its "
            "catalog) or rename one"
        )
    return "mor"


def _mor_source(parts: tuple[str, ...], resolver: Resolver) -> TableSource:
    """The table of mor's catalog `parts` names: a table, or (`ns.t.snapshots`, when no
    table has that name) the table of a metadata table."""
    try:
        return resolver.by_name(parts)
    except TableNotFoundError:
        if len(parts) < 3 or parts[-1].lower() not in METADATA_TABLES:
            raise
        return resolver.by_name(parts[:-1])


def _resolve_at(stmt: Statement, t: exp.Table, resolver: Resolver) -> _Ref:
    kind = None
    if isinstance(t.this, exp.Identifier):
        parts = tuple(p.name for p in t.parts)
        try:
            src = resolver.by_name(parts)
        except TableNotFoundError:
            # ns.t.snapshots: a metadata table, when no table has that name (as Iceberg does)
            if len(parts) < 3 or parts[-1].lower() not in METADATA_TABLES:
                raise
            parts, kind = parts[:-1], parts[-1].lower()
            src = resolver.by_name(parts)
        label = ".".join(parts)
    elif _function_name(t) == "table_changes":
        return _changes_ref(stmt, t, resolver)
    else:
        args = t.this.expressions
        if len(args) != 1 or not isinstance(args[0], exp.Literal) or not args[0].is_string:
            where = line_col(stmt.source, stmt.offset + _start(t))
            raise SqlSyntaxError("iceberg_scan takes one string: the table's path", *where)
        src = resolver.by_path(args[0].this)
        label = f"iceberg_scan('{args[0].this}')"
    snapshot_id = _time_travel(t, src)
    span = _span(stmt, t)
    return _Ref(t, src, snapshot_id, schema_at(src, snapshot_id), label, span, kind)


def _changes_ref(stmt: Statement, t: exp.Table, resolver: Resolver) -> _Ref:
    """table_changes('<table>' [, start [, end]]): start and end are snapshot ids or
    timestamps (a string or TIMESTAMP literal); start NULL or absent: from the first commit,
    end NULL or absent: the current snapshot."""
    where = line_col(stmt.source, stmt.offset + _start(t))
    usage = (
        "table_changes takes the table (a string: 'ns.t' or its path), then a start and an end, "
        "each a snapshot id, a timestamp or NULL"
    )
    args = t.this.expressions
    if not 1 <= len(args) <= 3 or not (isinstance(args[0], exp.Literal) and args[0].is_string):
        raise SqlSyntaxError(usage, *where)
    if t.args.get("version") is not None:
        raise UnsupportedError(
            f"table_changes names its snapshots itself: VERSION/TIMESTAMP AS OF does not apply "
            f"(line {where[0]}, column {where[1]})"
        )
    name = args[0].this
    src = resolver.by_text(name)
    bounds: list[int | None] = []
    for i, what in ((1, "start"), (2, "end")):
        a = args[i] if i < len(args) else None
        if a is None or isinstance(a, exp.Null):
            bounds.append(None if what == "start" else src.metadata.current_snapshot_id)
            continue
        value = a.this if isinstance(a, exp.Cast) else a
        if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
            if isinstance(a, exp.Cast):
                raise SqlSyntaxError(usage, *where)
            sid = int(value.this)
            if src.metadata.snapshot_by_id(sid) is None:
                raise TableNotFoundError(f"table {src.name} has no snapshot {sid}")
            bounds.append(sid)
        elif isinstance(value, exp.Literal) and value.is_string:
            from mor.planner.changes import snapshot_at

            bounds.append(snapshot_at(src, _timestamp_ms(value), what))
        else:
            raise SqlSyntaxError(usage, *where)
    label = f"table_changes('{name}')"
    end = bounds[1]
    schema = schema_at(src, end)
    return _Ref(t, src, end, schema, label, _span(stmt, t), "changes", (bounds[0], end))


def _changes(r: _Ref) -> TableChanges:
    fields = []
    for f in r.schema.top_level():
        check_nested(f, r.label)
        fields.append(
            ReadField(
                col=Col(name=f.name, label=f.name, field_id=f.field_id),
                field_id=f.field_id,
                type_str=f.field_type.model_dump_json(),
                default=default_sql(f, r.label),
            )
        )
    ids = set(r.schema.schema.identifier_field_ids)
    return TableChanges(
        table=r.label,
        source_key=r.source.key,
        io=r.source.io.inner,
        start_id=r.changes[0],
        end_id=r.changes[1],
        schema_id=r.schema.schema_id,
        fields=tuple(fields),
        identifier=tuple(f.name for f in r.schema.top_level() if f.field_id in ids),
    )


def _start(t: exp.Table) -> int:
    if isinstance(t.this, exp.Identifier):
        return min(p.meta["start"] for p in t.parts)
    return int(t.this.meta["start"])


def _span(stmt: Statement, t: exp.Table) -> tuple[int, int]:
    """[start, end) of the reference in the statement: the name (or iceberg_scan call) and its
    time-travel clause; never the alias, sample or pivot that follow."""
    start = _start(t)
    version = t.args.get("version")
    if version is not None:
        value = version.expression
        if "end" not in value.meta:
            where = line_col(stmt.source, stmt.offset + start)
            raise UnsupportedError(
                f"time travel needs a literal snapshot id, branch, tag or timestamp, "
                f"not {value.sql(DIALECT)} (line {where[0]}, column {where[1]})"
            )
        return start, value.meta["end"] + 1
    if isinstance(t.this, exp.Identifier):
        return start, max(p.meta["end"] for p in t.parts) + 1
    return start, _call_end(stmt, start)


def _call_end(stmt: Statement, start: int) -> int:
    """The end of the function call starting at `start`: just past its closing parenthesis."""
    depth = 0
    for tok in sqlglot.Dialect.get_or_raise(DIALECT).tokenize(stmt.text):
        if tok.start < start:
            continue
        if tok.token_type == TokenType.L_PAREN:
            depth += 1
        elif tok.token_type == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return tok.end + 1
    raise SqlSyntaxError("a table function call is not closed", *line_col(stmt.source, start))


def _edits(stmt: Statement, r: _Ref, i: int) -> list[TextEdit]:
    start, end = r.span
    edits = [TextEdit(start=start, end=end, scan=i)]
    if not r.node.alias and isinstance(r.node.this, exp.Identifier):
        # Spark names an unaliased table by its last part (`orders.id`): keep that name
        at = _after_sample(stmt, end) if r.node.args.get("sample") is not None else end
        alias = r.node.this.sql(DIALECT)
        edits.append(TextEdit(start=at, end=at, text=f" AS {alias}"))
    return edits


def _qualifier_edits(stmt: Statement, refs: list[_Ref]) -> list[TextEdit]:
    """Spark lets a query name a table's columns by any trailing part of the table's name as
    written (`demo.orders.id` and `orders.id` for `FROM demo.orders` without an alias); the view
    that replaces the table is named by the last part only (`_edits`), so the leading parts of
    such a qualifier are removed (`orders.id`). An aliased table is named by its alias alone,
    in Spark as here: nothing to do."""
    names = [
        [p.name.lower() for p in r.node.parts]
        for r in refs
        if not r.node.alias and isinstance(r.node.this, exp.Identifier) and len(r.node.parts) > 1
    ]
    if not names:
        return []
    out = []
    for c in stmt.tree.find_all(exp.Column):
        parts = c.parts
        low = [p.name.lower() for p in parts]
        for written in names:
            # the longest trailing part of the name the column starts with (at least two
            # parts: one is the view's own name), leaving the column itself after it
            m = next(
                (m for m in range(len(written), 1, -1) if m < len(low) and low[:m] == written[-m:]),
                None,
            )
            if m is not None and all("start" in p.meta for p in parts[:m]):
                out.append(TextEdit(start=parts[0].meta["start"], end=parts[m - 1].meta["start"]))
                break
    return out


def _after_sample(stmt: Statement, end: int) -> int:
    """The end of the TABLESAMPLE (...) clause that follows a table name ending at `end`."""
    tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(stmt.text)
    depth = 0
    started = False
    for t in tokens:
        if t.start < end:
            continue
        if t.token_type == TokenType.L_PAREN:
            depth += 1
            started = True
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
            if started and depth == 0:
                return t.end + 1
    return end


def _scan(
    r: _Ref, columns: set[str] | None, filters: list[exp.Expression], limit: int | None = None
) -> IcebergScan:
    seen: dict[str, str] = {}
    for f in r.schema.top_level():
        other = seen.setdefault(f.name.lower(), f.name)
        if other != f.name:
            raise UnsupportedError(
                f"table {r.label} has columns {other!r} and {f.name!r}, whose names differ only "
                "in case: Spark resolves names without case and cannot tell them apart"
            )
    fields = []
    for f in r.schema.top_level():
        if columns is not None and f.name.lower() not in columns:
            continue
        col = Col(name=f.name, label=f.name, field_id=f.field_id)
        check_nested(f, r.label)
        fields.append(
            ReadField(
                col=col,
                field_id=f.field_id,
                type_str=f.field_type.model_dump_json(),
                default=default_sql(f, r.label),
            )
        )
    pushed, converted = _pushed(r, fields, filters)
    return IcebergScan(
        table=r.label,
        source_key=r.source.key,
        io=r.source.io.inner,
        snapshot_id=r.snapshot_id,
        schema_id=r.schema.schema_id,
        fields=tuple(fields),
        pushed=pushed,
        # under a WHERE, the limit holds only if each of its conjuncts is a predicate planning
        # may find decided by partition values (planner.scan_planning checks which are)
        limit=limit if converted == len(filters) else None,
    )


def _pushed(
    r: _Ref, fields: list[ReadField], filters: list[exp.Expression]
) -> tuple[tuple[Expr, ...], int]:
    """The filters that become simple predicates over a column this scan reads, renamed to the
    scan's column names; and how many of `filters` did."""
    by_lower = {f.col.name.lower(): f.col.name for f in fields}
    types = {
        f.name.lower(): str(f.field_type)
        for f in r.schema.top_level()
        if f.name.lower() in by_lower
    }
    out: list[Expr] = []
    converted = 0
    for c in filters:
        pred = to_pred(c, types)
        if pred is None:
            continue
        converted += 1
        names = {n.name.lower() for n in c.find_all(exp.Column)}
        e = Expr(
            tree=_renamed(c, lambda n: exp.to_identifier(by_lower[n], quoted=True)),
            text=_renamed(c, lambda n: exp.to_identifier(by_lower[n])).sql(DIALECT),
            refs=frozenset(by_lower[n] for n in names),
            pred=Pred(column=by_lower[pred.column], op=pred.op, values=pred.values),
        )
        if e not in out:
            out.append(e)
    return tuple(out), converted


def _renamed(c: exp.Expression, ident: Callable[[str], exp.Identifier]) -> exp.Expression:
    """A copy of `c` with each column (lower-case name) renamed by `ident`."""
    return c.copy().transform(
        lambda n: exp.column(ident(n.name.lower())) if isinstance(n, exp.Column) else n
    )


def _time_travel(table: exp.Table, src: TableSource) -> int | None:
    version = table.args.get("version")
    md = src.metadata
    if version is None:
        return md.current_snapshot_id
    kind = str(version.this).upper()
    value = version.expression
    if value is None:  # `VERSION AS OF AS t`: sqlglot parses it without a value
        raise SqlSyntaxError(
            f"table {src.name}: {kind} AS OF needs a value (a snapshot id, branch or tag, or a "
            "timestamp)"
        )
    if kind == "VERSION":
        if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
            sid = int(value.this)
            if md.snapshot_by_id(sid) is None:
                raise TableNotFoundError(f"table {src.name} has no snapshot {sid}")
            return sid
        ref = md.refs.get(value.name) if isinstance(value, exp.Literal) else None
        if ref is None:
            raise TableNotFoundError(
                f"table {src.name} has no snapshot, branch or tag {value.sql(DIALECT)}"
            )
        return ref.snapshot_id
    if kind == "TIMESTAMP":
        ms = _timestamp_ms(value)
        best = None
        for entry in md.snapshot_log:
            if entry.timestamp_ms <= ms:
                best = entry.snapshot_id
        if best is None:
            raise TableNotFoundError(
                f"table {src.name} has no snapshot at or before {value.sql(DIALECT)}"
            )
        return best
    raise UnsupportedError(f"time travel {kind} AS OF is not supported")


def _timestamp_ms(value: exp.Expression) -> int:
    if isinstance(value, exp.Literal) and not value.is_string:
        return int(float(value.this) * 1000)
    text = value.name if isinstance(value, exp.Literal) else value.sql(DIALECT)
    try:
        t = dt.datetime.fromisoformat(text.strip())
    except ValueError as e:
        raise SqlSyntaxError(
            f"TIMESTAMP AS OF needs a timestamp like '2024-01-31 12:00:00', got {text!r}"
        ) from e
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)  # mor's local Spark session runs in UTC
    return int(t.timestamp() * 1000)
