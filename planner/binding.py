"""Every statement bound into its plan (planner/statement_plans.py) before anything runs.

`bind_statement(stmt, resolver, branch)` reads the statement's kind and names and returns its
plan: no Spark, no commit; the catalog is asked only what a name is (planner/names.py). A
statement mor does not run itself and that names none of mor's tables is Spark's
(`SparkStatement`: SET, USE, temporary views over files, Spark's own tables, ...); one that
names mor's tables in a form mor does not run is refused in one line, never passed on.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from sqlglot import exp
from sqlglot.tokens import TokenType

from mor.planner.ddl_parse import (
    DIALECT,
    Words,
    keys,
    order_fields,
    properties,
    spark_type,
    transform,
    transforms_of,
)
from mor.planner.errors import (
    ColumnNotFoundError,
    NotAQueryError,
    SqlSyntaxError,
    TableNotFoundError,
    UnsupportedError,
)
from mor.planner.iceberg_types import iceberg_schema, iceberg_type
from mor.planner.names import is_spark_only
from mor.planner.nodes import line_col
from mor.planner.procedures import read_call
from mor.planner.sources import Resolver
from mor.planner.sql import Statement, iceberg_tables, owner_of, split_statements
from mor.planner.statement_plans import (
    AlterTable,
    CallProcedure,
    Change,
    CreateNamespace,
    CreateTable,
    CreateView,
    DescribeQuery,
    DescribeTable,
    DropNamespace,
    DropTable,
    Explain,
    InsertRows,
    PartitionField,
    Query,
    RowLevelWrite,
    ShowCreateTable,
    ShowNamespaces,
    ShowProperties,
    ShowTables,
    SortField,
    SparkStatement,
    StatementPlan,
    TableName,
)
from mor.planner.write_statements import KINDS, branch_of

_EXPLAIN = re.compile(r"\s*EXPLAIN(?:\s+(VERBOSE|PHYSICAL|ANALYZE))?\s+", re.IGNORECASE)


def explained_statement(stmt: Statement) -> tuple[str | None, Statement]:
    """`EXPLAIN [mode] <statement>`: its mode ("" for none) and the statement it explains,
    positioned where it stands in the input (errors name the user's line and column); any
    other statement: (None, itself)."""
    m = _EXPLAIN.match(stmt.text)
    if m is None or not stmt.text[: m.end()].strip().upper().startswith("EXPLAIN"):
        return None, stmt
    # the words EXPLAIN [mode] blanked, so that every position is the input's
    text = " " * m.end() + stmt.text[m.end() :]
    source = stmt.source[: stmt.offset] + text + stmt.source[stmt.offset + len(stmt.text) :]
    end = stmt.offset + len(stmt.text)
    inner = next(s for s in split_statements(source) if stmt.offset <= s.offset < end)
    return (m.group(1) or "").upper(), inner


def bind_statement(stmt: Statement, resolver: Resolver, branch: str = "main") -> StatementPlan:
    """The plan of one statement (planner/statement_plans.py)."""
    mode, inner = explained_statement(stmt)
    if mode is not None:
        return Explain(statement=stmt, mode=mode, inner=bind_statement(inner, resolver, branch))
    tree = stmt.tree
    if isinstance(tree, (exp.Query, exp.Values)):
        return Query(statement=stmt)
    if type(tree) in KINDS:
        return RowLevelWrite(statement=stmt, kind=KINDS[type(tree)])
    binder = _BINDERS.get(type(tree))
    if binder is not None:
        return binder(stmt, resolver, branch)
    if isinstance(tree, exp.Command):
        return _command(stmt, resolver, branch)
    return _spark_statement(stmt, resolver)


# --- Spark's own statements -----------------------------------------------------------------


_KIND_WORDS = frozenset(
    "CREATE OR REPLACE TEMPORARY TEMP GLOBAL EXTERNAL TABLE VIEW DATABASE SCHEMA NAMESPACE "
    "FUNCTION DROP ALTER INSERT INTO OVERWRITE LOCAL DIRECTORY SET RESET CACHE UNCACHE LAZY "
    "REFRESH ADD JAR JARS FILE FILES LIST USE ANALYZE MSCK REPAIR LOAD DATA TRUNCATE COMMENT "
    "CLEAR DECLARE VARIABLE".split()
)


def statement_kind(text: str) -> str:
    """What a statement is, by its leading keywords (`CREATE TEMPORARY VIEW`, `SET`,
    `CACHE TABLE`): at most four, never a name."""
    words = []
    for w in text.split()[:4]:
        if w.upper() not in _KIND_WORDS:
            break
        words.append(w.upper())
    return " ".join(words) or text.split()[0].upper()


def _spark_statement(stmt: Statement, resolver: Resolver) -> StatementPlan:
    """A statement for Spark as it is: it must name none of mor's tables (Spark knows none of
    them: it would fail, or find another table of the same name)."""
    kind = statement_kind(stmt.text)
    for t in iceberg_tables(stmt.tree):
        if not isinstance(t.this, exp.Identifier):
            continue
        parts = tuple(p.name for p in t.parts)
        try:
            mine = owner_of(parts, t.this.quoted, resolver) == "mor"
        except TableNotFoundError:
            mine = False  # Spark's to find, or to say it is missing
        if mine:
            line, col = line_col(stmt.source, stmt.offset + _start(t))
            raise UnsupportedError(
                f"{kind} statements are Spark's, and this one names {'.'.join(parts)}, a "
                f"table of mor's catalog (line {line}, column {col}): mor runs queries, "
                "DELETE, UPDATE, MERGE, INSERT, CREATE/REPLACE/DROP/ALTER TABLE, CREATE "
                "TEMPORARY VIEW ... AS SELECT, SHOW and DESCRIBE over its tables"
            )
    return SparkStatement(statement=stmt, kind=kind)


def _start(t: exp.Table) -> int:
    return min(p.meta.get("start", 0) for p in t.parts)


# --- names of mor's tables ------------------------------------------------------------------


def _target(
    table: exp.Table, stmt: Statement, resolver: Resolver, verb: str, create: bool = False
) -> TableName | None:
    """The table of mor's catalog a DDL or write statement names; None when the name is
    Spark's (a table of one of its catalogs). A view, a file source or a one-part name is
    refused as mor's target."""
    parts = tuple(p.name for p in table.parts)
    shown = ".".join(parts)
    where = line_col(stmt.source, stmt.offset + _start(table))
    at = f" (line {where[0]}, column {where[1]})"
    if is_spark_only(parts, bool(table.this.quoted)):
        raise UnsupportedError(
            f"{verb} {shown}: a file source or global temporary view is not a table mor writes{at}"
        )
    spark = resolver.spark
    if len(parts) == 1:
        held = spark.relation(parts)
        if held is not None and "view" in held:
            raise UnsupportedError(f"{verb} {shown}: {held} is not a table mor writes{at}")
        return None  # as Spark resolves it: its current catalog and database's
    if len(parts) == 3 and spark.is_catalog(parts[0]) and not resolver.is_mor_catalog(parts[0]):
        return None
    if len(parts) > 3:
        raise UnsupportedError(
            f"{verb} {shown}: a name of namespace.table or catalog.namespace.table{at}"
        )
    if len(parts) == 2 and not create:
        spark.ask_ahead(parts)
        mine = resolver.catalog_has(parts)
        held = spark.relation(parts)
        if held is not None and "view" in held and not mine:
            raise UnsupportedError(f"{verb} {shown}: {held} is not a table mor writes{at}")
        if held is not None and mine:
            raise TableNotFoundError(
                f"{shown} names both a table of mor's catalog and {held} of Spark's session: "
                f"name it whole (catalog.{shown}){at}"
            )
        if held is not None:
            return None
    catalog = parts[0] if len(parts) == 3 else None
    return TableName(catalog=catalog, namespace=parts[-2], table=parts[-1])


# --- CREATE ---------------------------------------------------------------------------------


def _create(stmt: Statement, resolver: Resolver, branch: str) -> StatementPlan:
    tree = stmt.tree
    kind = str(tree.args.get("kind") or "").upper()
    if kind in ("NAMESPACE", "DATABASE", "SCHEMA"):
        return _create_namespace(stmt, resolver)
    if kind == "VIEW":
        return _create_view(stmt, resolver)
    if kind != "TABLE":
        return _spark_statement(stmt, resolver)
    head = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    mode = "create"
    if stmt.text.lstrip()[:7].upper() == "REPLACE":
        mode = "replace"
    elif tree.args.get("replace"):
        mode = "create_or_replace"
    verb = {"create": "CREATE TABLE", "replace": "REPLACE TABLE"}.get(
        mode, "CREATE OR REPLACE TABLE"
    )
    props = tree.args.get("properties")
    for p in props.expressions if props is not None else ():
        if isinstance(p, exp.FileFormatProperty) and p.this is not None:
            if p.this.name.lower() != "iceberg":  # USING parquet, delta, ...: Spark's table
                return _spark_statement(stmt, resolver)
    target = _target(head, stmt, resolver, verb, create=True)
    if target is None:
        return _spark_statement(stmt, resolver)
    w = Words(stmt.text, stmt.offset, stmt.source)
    table_props: list[tuple[str, str]] = []
    partition: tuple[PartitionField, ...] = ()
    location = comment = None
    for p in props.expressions if props is not None else ():
        if isinstance(p, exp.FileFormatProperty):
            continue  # USING iceberg (any other: Spark's table, above)
        if isinstance(p, exp.PartitionedByProperty):
            found = p.this.expressions if isinstance(p.this, exp.Schema) else [p.this]
            partition = tuple(
                PartitionField(source=t.source, transform=t.transform, name=t.default_name())
                for t in transforms_of(found, w)
            )
        elif isinstance(p, exp.LocationProperty):
            location = p.this.name
        elif isinstance(p, exp.SchemaCommentProperty):
            comment = p.this.name
        elif isinstance(p, exp.Property):
            key = p.this.name if isinstance(p.this, exp.Literal) else p.this.sql(DIALECT)
            value = p.args["value"]
            table_props.append(
                (key, value.name if isinstance(value, exp.Literal) else value.sql(DIALECT))
            )
        else:
            raise UnsupportedError(
                f"{verb} {target}: {p.sql(DIALECT)} is not a clause of Iceberg's CREATE TABLE"
            )
    if comment is not None:
        table_props.append(("comment", comment))
    query = tree.args.get("expression")
    schema = None
    if isinstance(tree.this, exp.Schema):
        if query is not None:
            raise UnsupportedError(
                f"{verb} {target} (columns) AS SELECT: the columns come from the query"
            )
        schema = iceberg_schema(tree.this.expressions, w)
    elif query is None:
        raise UnsupportedError(f"{verb} {target}: give its columns, or AS SELECT ...")
    return CreateTable(
        statement=stmt,
        target=target,
        schema=schema,
        partition=partition,
        properties=tuple(table_props),
        location=location,
        comment=comment,
        if_not_exists=bool(tree.args.get("exists")),
        mode=mode,
        query=_sub_statement(stmt, _after_as(stmt)) if query is not None else None,
    )


def _sub_statement(stmt: Statement, after: int) -> Statement:
    """The statement's query (it starts at the first query keyword at the top level after
    offset `after` of its text, and ends the statement) as a statement of its own,
    positioned where it stands in the input: errors keep the user's line and column."""
    start = _query_start(stmt, after)
    blank = "".join(c if c == "\n" else " " for c in stmt.text[:start])
    source = stmt.source[: stmt.offset] + blank + stmt.text[start:]
    found = [s for s in split_statements(source) if s.offset >= stmt.offset]
    if len(found) != 1:
        raise SqlSyntaxError(
            "cannot read the statement's query", *line_col(stmt.source, stmt.offset + start)
        )
    inner = found[0]
    return Statement(inner.text, inner.offset, stmt.source, inner.tree)


_OPENERS = ("SELECT", "WITH", "VALUES", "FROM", "TABLE")


def _query_start(stmt: Statement, after: int) -> int:
    """Where the statement's query starts: its first top-level SELECT, WITH, VALUES, FROM or
    TABLE at or after `after`, or a parenthesis opening one."""
    tokens = Words(stmt.text).tokens
    depth = 0
    for k, t in enumerate(tokens):
        if t.token_type == TokenType.L_PAREN:
            if t.start >= after and depth == 0 and k + 1 < len(tokens):
                if tokens[k + 1].text.upper() in ("SELECT", "WITH", "VALUES", "FROM"):
                    return t.start
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and t.start >= after and t.text.upper() in _OPENERS:
            return t.start
    raise SqlSyntaxError("expected a query", *line_col(stmt.source, stmt.offset + after))


def _after_as(stmt: Statement) -> int:
    """Just past the statement's first top-level AS (CREATE ... AS <query>)."""
    depth = 0
    for t in Words(stmt.text).tokens:
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and t.text.upper() == "AS":
            return t.end + 1
    raise SqlSyntaxError("expected AS <query>", *line_col(stmt.source, stmt.offset))


def _after_table(t: exp.Table) -> int:
    return max(p.meta.get("end", 0) for p in t.parts) + 1


def _create_namespace(stmt: Statement, resolver: Resolver) -> StatementPlan:
    tree = stmt.tree
    parts = tuple(p.name for p in tree.this.parts)
    catalog, ns = _namespace(parts, resolver)
    if ns is None:
        return SparkStatement(statement=stmt, kind="CREATE NAMESPACE")
    props = tree.args.get("properties")
    kv: list[tuple[str, str]] = []
    for p in props.expressions if props is not None else ():
        if isinstance(p, exp.Property):
            kv.append((p.this.name, p.args["value"].name))
        elif isinstance(p, exp.SchemaCommentProperty):
            kv.append(("comment", p.this.name))
        elif isinstance(p, exp.LocationProperty):
            kv.append(("location", p.this.name))
    return CreateNamespace(
        statement=stmt,
        catalog=catalog,
        namespace=ns,
        if_not_exists=bool(tree.args.get("exists")),
        properties=tuple(kv),
    )


def _namespace(parts: tuple[str, ...], resolver: Resolver) -> tuple[str | None, str | None]:
    """(catalog, namespace) of mor's catalog a namespace name means; (None, None) when it is
    a namespace of a Spark catalog (`spark_catalog.db`)."""
    if (
        len(parts) >= 2
        and resolver.spark.is_catalog(parts[0])
        and not resolver.is_mor_catalog(parts[0])
    ):
        return None, None
    if len(parts) == 2 and resolver.is_mor_catalog(parts[0]):
        return parts[0], parts[1]
    return None, ".".join(parts)


def _create_view(stmt: Statement, resolver: Resolver) -> StatementPlan:
    tree = stmt.tree
    props = tree.args.get("properties")
    kinds = {type(p) for p in (props.expressions if props is not None else ())}
    query = tree.args.get("expression")
    temporary = exp.TemporaryProperty in kinds
    reads_mor = query is not None and _reads_mor(query, resolver)
    if not reads_mor:
        return _spark_statement(stmt, resolver)
    name = ".".join(p.name for p in tree.this.parts)
    if not temporary:
        raise UnsupportedError(
            f"CREATE VIEW {name} reads tables of mor's catalog, which Spark's catalogs cannot "
            "store a view of (Spark would read them without mor): create a TEMPORARY VIEW"
        )
    if tree.args.get("exists"):
        raise UnsupportedError(
            f"CREATE TEMPORARY VIEW IF NOT EXISTS {name}: Spark's temporary views take "
            "OR REPLACE, not IF NOT EXISTS"
        )
    return CreateView(
        statement=stmt,
        name=name,
        replace=bool(tree.args.get("replace")),
        is_global=exp.GlobalProperty in kinds,
        query=_sub_statement(stmt, _after_as(stmt)),
    )


def _reads_mor(tree: exp.Expression, resolver: Resolver) -> bool:
    for t in iceberg_tables(tree):
        if not isinstance(t.this, exp.Identifier):
            return True  # iceberg_scan(...), table_changes(...)
        try:
            if owner_of(tuple(p.name for p in t.parts), t.this.quoted, resolver) == "mor":
                return True
        except TableNotFoundError:
            continue
    return False


# --- DROP -----------------------------------------------------------------------------------


def _drop(stmt: Statement, resolver: Resolver, branch: str) -> StatementPlan:
    tree = stmt.tree
    kind = str(tree.args.get("kind") or "").upper()
    if kind in ("NAMESPACE", "DATABASE", "SCHEMA"):
        parts = (
            tuple(p.name for p in tree.this.parts)
            if tree.this is not None
            else tuple(p.name for p in tree.args["tables"][0].parts)
        )
        catalog, ns = _namespace(parts, resolver)
        if ns is None:
            return SparkStatement(statement=stmt, kind="DROP NAMESPACE")
        return DropNamespace(
            statement=stmt,
            catalog=catalog,
            namespace=ns,
            if_exists=bool(tree.args.get("exists")),
            cascade=bool(tree.args.get("cascade")),
        )
    if kind != "TABLE":
        return _spark_statement(stmt, resolver)
    tables = tree.args.get("tables") or ([tree.this] if tree.this is not None else [])
    if len(tables) != 1:
        raise UnsupportedError("DROP TABLE drops one table a statement")
    target = _target(tables[0], stmt, resolver, "DROP TABLE", create=True)
    if target is None:
        return _spark_statement(stmt, resolver)
    return DropTable(
        statement=stmt,
        target=target,
        if_exists=bool(tree.args.get("exists")),
        purge=bool(tree.args.get("purge")),
    )


# --- INSERT ---------------------------------------------------------------------------------


def _insert(stmt: Statement, resolver: Resolver, branch: str) -> StatementPlan:
    tree = stmt.tree
    head = tree.this
    columns = None
    if isinstance(head, exp.Schema):
        columns = tuple(c.name for c in head.expressions)
        head = head.this
    if not isinstance(head, exp.Table):
        raise UnsupportedError("INSERT needs a table: INSERT INTO t ... or INSERT OVERWRITE t ...")
    overwrite = bool(tree.args.get("overwrite"))
    verb = "INSERT OVERWRITE" if overwrite else "INSERT INTO"
    after = _after_table(head)
    parts = tuple(p.name for p in head.parts)
    if len(parts) >= 3 and parts[-1].startswith("branch_") and not resolver.catalog_has(parts):
        head, branch = branch_of(head, branch, lambda n: False, verb)
        for p in head.parts:
            p.meta["start"] = _start(tree.this if isinstance(tree.this, exp.Table) else head)
    target = _target(head, stmt, resolver, verb)
    if target is None:
        return _spark_statement(stmt, resolver)
    for arg in ("where", "returning", "conflict", "alternative"):
        if tree.args.get(arg):
            raise UnsupportedError(f"{verb} {target}: {arg.upper()} is not Spark SQL's INSERT")
    static: list[tuple[str, str]] = []
    partition = head.args.get("partition")
    dynamic_named: list[str] = []
    for e in partition.expressions if partition is not None else ():
        if isinstance(e, exp.EQ) and isinstance(e.this, exp.Column):
            static.append((e.this.name, e.expression.sql(DIALECT)))
        elif isinstance(e, exp.Column):
            dynamic_named.append(e.name)
        else:
            raise UnsupportedError(
                f"{verb} {target} PARTITION ({e.sql(DIALECT)}): name a column = value"
            )
    if static and not overwrite and columns is None:
        pass  # INSERT INTO t PARTITION (c = v) SELECT ...: the other columns by position
    query = tree.args.get("expression")
    if query is None:
        raise UnsupportedError(f"{verb} {target}: VALUES or a query is missing")
    return InsertRows(
        statement=stmt,
        target=target,
        branch=branch,
        query=_sub_statement(stmt, after),
        mode="overwrite" if overwrite else "append",
        columns=columns,
        static=tuple(static),
        by_name=bool(tree.args.get("by_name")),
    )


# --- ALTER, SHOW, DESCRIBE (read from the tokens) ---------------------------------------------


def _command(stmt: Statement, resolver: Resolver, branch: str) -> StatementPlan:
    w = Words(stmt.text, stmt.offset, stmt.source)
    first = w.word()
    if first == "ALTER" and w.word(1) == "TABLE":
        return _alter(stmt, w, resolver)
    if first == "SHOW":
        return _show(stmt, w, resolver)
    if first in ("DESCRIBE", "DESC"):
        return _describe(stmt, w, resolver)
    if first == "CALL":
        return _call(stmt, w, resolver)
    return SparkStatement(statement=stmt, kind=" ".join(stmt.text.split()[:3]).upper())


def _call(stmt: Statement, w: Words, resolver: Resolver) -> StatementPlan:
    """`CALL [catalog.]system.<procedure>(...)` (planner/procedures.py): its `table` argument
    resolved as mor's table, in the CALL's catalog when it names one."""
    call = read_call(w)
    verb = f"CALL {call.procedure.name}"
    text = call.args["table"]
    where = line_col(stmt.source, call.table_start)
    try:
        parsed = exp.to_table(text, dialect=DIALECT)
    except Exception:  # noqa: BLE001 - sqlglot's errors for a name are many kinds
        parsed = None
    if not isinstance(parsed, exp.Table) or not parsed.name:
        raise SqlSyntaxError(f"{verb}: {text!r} is not a table name", *where)
    parts = [p.name for p in parsed.parts]
    if call.catalog is not None:
        if len(parts) == 3 and parts[0] != call.catalog:
            raise UnsupportedError(
                f"{verb}: table {text} is in catalog {parts[0]}, the procedure in catalog "
                f"{call.catalog} (line {where[0]}, column {where[1]})"
            )
        if len(parts) == 2:
            parts = [call.catalog, *parts]
    table = exp.Table(
        this=exp.to_identifier(parts[-1]),
        db=exp.to_identifier(parts[-2]) if len(parts) > 1 else None,
        catalog=exp.to_identifier(parts[-3]) if len(parts) > 2 else None,
    )
    for p in table.parts:
        p.meta["start"] = call.table_start - stmt.offset
    target = _target(table, stmt, resolver, verb)
    if target is None:
        raise UnsupportedError(
            f"{verb}: {text} is not a table of mor's catalog (Spark's own tables take "
            f"Iceberg's procedures through Iceberg's runtime) (line {where[0]}, column {where[1]})"
        )
    return CallProcedure(
        statement=stmt,
        procedure=call.procedure.name,
        target=target,
        args=tuple(call.args.items()),
    )


def _table_at(w: Words, stmt: Statement, resolver: Resolver, verb: str) -> TableName | None:
    t = w.peek()
    start = t.start if t is not None else 0
    parts = w.dotted("a table name")
    table = exp.Table(
        this=exp.to_identifier(parts[-1]),
        db=exp.to_identifier(parts[-2]) if len(parts) > 1 else None,
        catalog=exp.to_identifier(parts[-3]) if len(parts) > 2 else None,
    )
    for p in table.parts:
        p.meta["start"] = start
    if len(parts) > 3:
        raise UnsupportedError(f"{verb} {'.'.join(parts)}: a table name has at most 3 parts")
    return _target(table, stmt, resolver, verb)


def _alter(stmt: Statement, w: Words, resolver: Resolver) -> StatementPlan:
    w.expect("ALTER", "TABLE")
    target = _table_at(w, stmt, resolver, "ALTER TABLE")
    if target is None:
        return SparkStatement(statement=stmt, kind="ALTER TABLE")
    changes = _alter_changes(w, str(target))
    w.end()
    return AlterTable(statement=stmt, target=target, changes=tuple(changes))


def _change(kind: str, **args: Any) -> Change:
    return Change(kind=kind, args=tuple(args.items()))


def _alter_changes(w: Words, table: str) -> list[Change]:
    if w.take("ADD", "PARTITION", "FIELD"):
        t = transform(w)
        name = w.name("the field's name") if w.take("AS") else None
        return [
            _change(
                "add_partition_field",
                source=t.source,
                transform=t.transform,
                name=name or t.default_name(),
                named=name is not None,
            )
        ]
    if w.take("DROP", "PARTITION", "FIELD"):
        t = transform(w)
        return [_change("drop_partition_field", source=t.source, transform=t.transform)]
    if w.take("REPLACE", "PARTITION", "FIELD"):
        old = transform(w)
        w.expect("WITH")
        new = transform(w)
        name = w.name("the field's name") if w.take("AS") else None
        return [
            _change("drop_partition_field", source=old.source, transform=old.transform),
            _change(
                "add_partition_field",
                source=new.source,
                transform=new.transform,
                name=name or new.default_name(),
                named=name is not None,
            ),
        ]
    if w.take("WRITE"):
        return [_write_spec(w)]
    if w.at("SET", "IDENTIFIER", "FIELDS") or w.at("DROP", "IDENTIFIER", "FIELDS"):
        verb = w.word()
        w.i += 3
        fields = [w.dotted("a column")]
        while w.punct(TokenType.COMMA):
            fields.append(w.dotted("a column"))
        kind = "set_identifier_fields" if verb == "SET" else "drop_identifier_fields"
        return [_change(kind, fields=tuple(fields))]
    ref = _ref_change(w)
    if ref is not None:
        return [ref]
    if w.take("SET", "TBLPROPERTIES") or w.take("SET", "PROPERTIES"):
        return [_change("set_properties", properties=tuple(properties(w)))]
    if w.take("UNSET", "TBLPROPERTIES") or w.take("UNSET", "PROPERTIES"):
        if_exists = w.take("IF", "EXISTS")
        return [_change("unset_properties", keys=tuple(keys(w)), if_exists=if_exists)]
    if w.take("RENAME", "TO"):
        return [_change("rename_table", to=w.dotted("the new name"))]
    if w.take("RENAME", "COLUMN"):
        col = w.dotted("a column")
        w.expect("TO")
        return [_change("rename_column", column=col, to=w.name("the new name"))]
    if w.take("ADD", "COLUMNS") or w.take("ADD", "COLUMN"):
        return _add_columns(w)
    if w.take("DROP", "COLUMNS") or w.take("DROP", "COLUMN"):
        if_exists = w.take("IF", "EXISTS")
        wrapped = w.punct(TokenType.L_PAREN)
        cols = [w.dotted("a column")]
        while w.punct(TokenType.COMMA):
            cols.append(w.dotted("a column"))
        if wrapped and not w.punct(TokenType.R_PAREN):
            w.fail("expected ')'")
        return [_change("drop_column", column=c, if_exists=if_exists) for c in cols]
    if w.take("ALTER", "COLUMN") or w.take("ALTER") or w.take("CHANGE", "COLUMN"):
        return [_alter_column(w)]
    w.fail(
        f"ALTER TABLE {table}: expected ADD/DROP/RENAME COLUMN, ALTER COLUMN, SET/UNSET "
        "TBLPROPERTIES, ADD/DROP/REPLACE PARTITION FIELD, WRITE ..., CREATE/REPLACE/DROP "
        "BRANCH or TAG, SET/DROP IDENTIFIER FIELDS or RENAME TO"
    )
    raise AssertionError  # unreachable


def _add_columns(w: Words) -> list[Change]:
    wrapped = w.punct(TokenType.L_PAREN)
    out = []
    while True:
        col = w.dotted("a column name")
        type_text = w.until("NOT", "COMMENT", "FIRST", "AFTER", "DEFAULT")
        dtype = spark_type(type_text, w)
        required = False
        doc = None
        position: tuple[str, ...] | None = None
        first = False
        while True:
            if w.take("NOT", "NULL"):
                required = True
            elif w.take("COMMENT"):
                doc = w.string("the comment")
            elif w.take("FIRST"):
                first = True
            elif w.take("AFTER"):
                position = w.dotted("a column")
            elif w.at("DEFAULT"):
                raise UnsupportedError(
                    f"ADD COLUMN {'.'.join(col)} DEFAULT: column defaults are not written by mor"
                )
            else:
                break
        out.append(
            _change(
                "add_column",
                column=col,
                type=iceberg_type(dtype, w),
                required=required,
                doc=doc,
                first=first,
                after=position,
            )
        )
        if not w.punct(TokenType.COMMA):
            break
    if wrapped and not w.punct(TokenType.R_PAREN):
        w.fail("expected ')' after the columns")
    return out


def _alter_column(w: Words) -> Change:
    col = w.dotted("a column")
    if w.take("TYPE"):
        dtype = spark_type(w.until(), w)
        return _change("update_column", column=col, type=iceberg_type(dtype, w))
    if w.take("SET", "NOT", "NULL"):
        return _change("update_column", column=col, required=True)
    if w.take("DROP", "NOT", "NULL"):
        return _change("update_column", column=col, required=False)
    if w.take("COMMENT"):
        return _change("update_column", column=col, doc=w.string("the comment"))
    if w.take("FIRST"):
        return _change("move_column", column=col, first=True)
    if w.take("AFTER"):
        return _change("move_column", column=col, after=w.dotted("a column"))
    w.fail("expected TYPE, SET NOT NULL, DROP NOT NULL, COMMENT, FIRST or AFTER")
    raise AssertionError  # unreachable


def _write_spec(w: Words) -> Change:
    """Iceberg's `WRITE [DISTRIBUTED BY PARTITION] [[LOCALLY] ORDERED BY ... | UNORDERED]`:
    the table's sort order and `write.distribution-mode` (hash for DISTRIBUTED BY PARTITION,
    none for UNORDERED, range for ORDERED BY, unchanged for LOCALLY ORDERED BY)."""
    distributed = locally = unordered = False
    order = None
    while not w.done():
        if w.take("DISTRIBUTED", "BY", "PARTITION"):
            distributed = True
        elif w.take("LOCALLY", "ORDERED", "BY"):
            locally = True
            order = order_fields(w)
        elif w.take("ORDERED", "BY"):
            order = order_fields(w)
        elif w.take("UNORDERED"):
            unordered = True
        else:
            break
    if not (distributed or order is not None or unordered):
        w.fail(
            "ALTER TABLE ... WRITE has no changes: expected DISTRIBUTED BY PARTITION, "
            "ORDERED BY, LOCALLY ORDERED BY or UNORDERED"
        )
    mode = "hash" if distributed else "none" if unordered else None if locally else "range"
    fields = tuple(
        SortField(
            source=f.source,
            transform=f.transform,
            descending=f.descending,
            nulls_first=f.nulls_first,
        )
        for f in order or ()
    )
    return _change("write_order", fields=fields, distribution=mode)


_UNITS = {"DAYS": 86_400_000, "HOURS": 3_600_000, "MINUTES": 60_000}


def _ms(w: Words) -> int:
    n = w.number()
    unit = w.word()
    if unit not in _UNITS:
        w.fail("expected DAYS, HOURS or MINUTES")
    w.i += 1
    return n * _UNITS[unit]


def _ref_change(w: Words) -> Change | None:
    """CREATE [OR REPLACE] BRANCH|TAG [IF NOT EXISTS] name [AS OF VERSION n] [RETAIN n unit]
    [WITH SNAPSHOT RETENTION [n SNAPSHOTS] [n unit]]; REPLACE BRANCH|TAG ...; DROP
    BRANCH|TAG [IF EXISTS] name (Iceberg's SQL extensions)."""
    if w.at("DROP", "BRANCH") or w.at("DROP", "TAG"):
        kind = w.word(1).lower()
        w.i += 2
        if_exists = w.take("IF", "EXISTS")
        return _change(f"drop_{kind}", name=w.name(f"the {kind}'s name"), if_exists=if_exists)
    create = replace_ = False
    if w.take("CREATE", "OR", "REPLACE"):
        create = replace_ = True
    elif w.take("CREATE"):
        create = True
    elif w.at("REPLACE", "BRANCH") or w.at("REPLACE", "TAG"):
        w.take("REPLACE")
        replace_ = True
    else:
        return None
    if not (w.at("BRANCH") or w.at("TAG")):
        w.fail("expected BRANCH or TAG")
    kind = w.word().lower()
    w.i += 1
    if_not_exists = create and not replace_ and w.take("IF", "NOT", "EXISTS")
    name = w.name(f"the {kind}'s name")
    snapshot = None
    retain = min_snapshots = max_age = None
    if w.take("AS", "OF", "VERSION"):
        snapshot = w.number("a snapshot id")
    if w.take("RETAIN"):
        retain = _ms(w)
    if kind == "branch" and w.take("WITH", "SNAPSHOT", "RETENTION"):
        if w.peek() is not None and w.word(1) == "SNAPSHOTS":
            min_snapshots = w.number()
            w.expect("SNAPSHOTS")
        if not w.done():
            max_age = _ms(w)
    return _change(
        f"{'create' if create else 'replace'}_{kind}",
        name=name,
        replace=replace_,
        if_not_exists=if_not_exists,
        snapshot=snapshot,
        max_ref_age_ms=retain,
        min_snapshots=min_snapshots,
        max_snapshot_age_ms=max_age,
    )


def _show(stmt: Statement, w: Words, resolver: Resolver) -> StatementPlan:
    w.expect("SHOW")
    if w.take("NAMESPACES") or w.take("DATABASES") or w.take("SCHEMAS"):
        parent = None
        if w.take("FROM") or w.take("IN"):
            parent = w.dotted("a namespace")
            if resolver.spark.is_catalog(parent[0]) and not resolver.is_mor_catalog(parent[0]):
                return SparkStatement(statement=stmt, kind="SHOW NAMESPACES")
        pattern = _pattern(w)
        catalog = None
        if parent is not None and resolver.is_mor_catalog(parent[0]):
            catalog, parent = parent[0], parent[1:] or None
        return ShowNamespaces(
            statement=stmt,
            catalog=catalog,
            parent=".".join(parent) if parent else None,
            pattern=pattern,
        )
    if w.take("TABLES"):
        ns = None
        if w.take("FROM") or w.take("IN"):
            ns = w.dotted("a namespace")
            if resolver.spark.is_catalog(ns[0]) and not resolver.is_mor_catalog(ns[0]):
                return SparkStatement(statement=stmt, kind="SHOW TABLES")
        pattern = _pattern(w)
        catalog = None
        if ns is not None and len(ns) > 1 and resolver.is_mor_catalog(ns[0]):
            catalog, ns = ns[0], ns[1:]
        return ShowTables(
            statement=stmt,
            catalog=catalog,
            namespace=".".join(ns) if ns else None,
            pattern=pattern,
        )
    if w.take("CREATE", "TABLE"):
        target = _table_at(w, stmt, resolver, "SHOW CREATE TABLE")
        if target is None:
            return SparkStatement(statement=stmt, kind="SHOW CREATE TABLE")
        if w.take("AS", "SERDE"):
            raise UnsupportedError("SHOW CREATE TABLE ... AS SERDE: Iceberg tables have no SerDe")
        w.end()
        return ShowCreateTable(statement=stmt, target=target)
    if w.take("TBLPROPERTIES"):
        target = _table_at(w, stmt, resolver, "SHOW TBLPROPERTIES")
        if target is None:
            return SparkStatement(statement=stmt, kind="SHOW TBLPROPERTIES")
        key = None
        if w.punct(TokenType.L_PAREN):
            t = w.peek()
            key = (
                w.string()
                if t is not None and t.token_type == TokenType.STRING
                else ".".join(w.dotted("a property key"))
            )
            if not w.punct(TokenType.R_PAREN):
                w.fail("expected ')'")
        w.end()
        return ShowProperties(statement=stmt, target=target, key=key)
    return SparkStatement(statement=stmt, kind=" ".join(stmt.text.split()[:2]).upper())


def _pattern(w: Words) -> str | None:
    w.take("LIKE")
    t = w.peek()
    if t is not None and t.token_type == TokenType.STRING:
        return w.string()
    w.end()
    return None


def _describe(stmt: Statement, w: Words, resolver: Resolver) -> StatementPlan:
    w.i += 1  # DESCRIBE / DESC
    if w.take("QUERY") or w.at("SELECT") or w.at("WITH") or w.at("VALUES"):
        t = w.peek()
        if t is None:
            w.fail("expected a query")
        assert t is not None
        start = t.start
        text = " " * start + stmt.text[start:]
        blank = stmt.source[: stmt.offset] + text
        inner = [s for s in split_statements(blank) if s.offset >= stmt.offset][0]
        query = Statement(inner.text, inner.offset, stmt.source, inner.tree)
        return DescribeQuery(statement=stmt, query=query)
    w.take("TABLE")
    extended = w.take("EXTENDED") or w.take("FORMATTED")
    target = _table_at(w, stmt, resolver, "DESCRIBE")
    if target is None:
        return SparkStatement(statement=stmt, kind="DESCRIBE")
    column = None
    if not w.done():
        column = w.dotted("a column")
    w.end()
    return DescribeTable(statement=stmt, target=target, extended=extended, column=column)


_BINDERS: dict[type, Any] = {
    exp.Create: _create,
    exp.Drop: _drop,
    exp.Insert: _insert,
}


def check_columns(names: tuple[str, ...], schema: Any, what: str) -> tuple[str, ...]:
    """`names` as the table spells them; one line for a name that is not a column."""
    by_lower = {f.name.lower(): f.name for f in schema.fields}
    out = []
    for n in names:
        if n.lower() not in by_lower:
            raise ColumnNotFoundError(
                f"{what}: no column {n}; its columns are {', '.join(f.name for f in schema.fields)}"
            )
        out.append(by_lower[n.lower()])
    if len(set(out)) != len(out):
        raise UnsupportedError(f"{what}: a column is named twice in the column list")
    return tuple(out)


def not_a_query(stmt: Statement) -> NotAQueryError:
    return NotAQueryError(f"{stmt.tree.key.upper()} statements are not supported")


__all__ = ["bind_statement", "explained_statement", "replace"]
