"""Every statement mor runs, bound as a plan before anything runs (no Spark, no commit).

As Catalyst binds each statement into a logical plan (`CreateTableAsSelect`, `AppendData`,
`OverwriteByExpression`, `OverwritePartitionsDynamic`, `AlterTable`, `ShowTables`, ...), the
planner binds each statement mor runs into one of these frozen plans (planner/binding.py);
mor's statement execution (mor/statements.py) runs a plan by its class, one runner each, and
the writer commits it as one of Iceberg's operations. EXPLAIN prints `describe()`.

- `Query`: a SELECT (mor plans its scans, Spark the rest: mor/execution.py);
- `RowLevelWrite`: DELETE, UPDATE, MERGE (planner/row_writes.py, mor/row_writes.py);
- `SparkStatement`: a statement naming none of mor's tables (SET, a temporary view over
  files, a table of Spark's own catalog, ...), run by Spark as it is;
- `CreateView`: `CREATE TEMPORARY VIEW v AS <query>` over mor's tables;
- the catalog's: `CreateNamespace`, `DropNamespace`, `CreateTable` (with `AS SELECT`, and
  REPLACE TABLE), `DropTable`, `AlterTable`;
- rows written: `InsertRows` (INSERT INTO / INSERT OVERWRITE, static or dynamic);
- what the catalog holds: `ShowNamespaces`, `ShowTables`, `DescribeTable`, `ShowCreateTable`,
  `ShowProperties`;
- `Explain`: EXPLAIN of any of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mor.planner.sql import Statement


@dataclass(frozen=True, kw_only=True)
class StatementPlan:
    """A bound statement: what it is, with every name and type resolved; nothing run."""

    statement: Statement

    @property
    def label(self) -> str:
        return type(self).__name__

    # a query returns rows Spark computes; a command changes something (a table, the catalog,
    # the session) or answers from the catalog alone
    changes: bool = field(default=True, init=False)

    def describe(self) -> str:
        """What EXPLAIN prints for the statement (a query: its whole plan, elsewhere)."""
        return self.label


@dataclass(frozen=True, kw_only=True)
class Query(StatementPlan):
    """A SELECT: its rows, planned by mor, run by Spark."""

    changes: bool = field(default=False, init=False)


@dataclass(frozen=True, kw_only=True)
class RowLevelWrite(StatementPlan):
    """DELETE, UPDATE or MERGE: one merge-on-read commit (planner/row_writes.py)."""

    kind: str


@dataclass(frozen=True, kw_only=True)
class SparkStatement(StatementPlan):
    """A statement of Spark's own, naming none of mor's tables: run by Spark as it is."""

    kind: str  # its first words (SET, CREATE TEMPORARY VIEW, CACHE TABLE, ...)

    def describe(self) -> str:
        return f"SparkStatement: {self.kind}, run by Spark as written"


@dataclass(frozen=True, kw_only=True)
class CreateView(StatementPlan):
    """`CREATE [OR REPLACE] [GLOBAL] TEMPORARY VIEW name AS <query>`, the query reading mor's
    tables: the view is the query's DataFrame, registered in the session."""

    name: str
    replace: bool
    is_global: bool
    query: Statement

    def describe(self) -> str:
        kind = "global temporary" if self.is_global else "temporary"
        return f"CreateView {self.name}: a {kind} view of the query below"


@dataclass(frozen=True, kw_only=True)
class TableName:
    """A table of mor's catalog as a statement names it: the catalog's name when written,
    the namespace and the table."""

    catalog: str | None
    namespace: str
    table: str

    @property
    def name(self) -> str:
        """`ns.t`, as the catalog takes it."""
        return f"{self.namespace}.{self.table}"

    def __str__(self) -> str:
        return f"{self.catalog}.{self.name}" if self.catalog else self.name


@dataclass(frozen=True, kw_only=True)
class CreateNamespace(StatementPlan):
    catalog: str | None
    namespace: str
    if_not_exists: bool
    properties: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        return f"CreateNamespace {self.namespace}" + (
            " if not exists" if self.if_not_exists else ""
        )


@dataclass(frozen=True, kw_only=True)
class DropNamespace(StatementPlan):
    catalog: str | None
    namespace: str
    if_exists: bool
    cascade: bool

    def describe(self) -> str:
        return f"DropNamespace {self.namespace}" + (" cascade" if self.cascade else "")


@dataclass(frozen=True, kw_only=True)
class PartitionField:
    """A partition field of a new spec: its source column (a path of names), Iceberg's
    transform (`identity`, `bucket[16]`, `truncate[4]`, `year`, `month`, `day`, `hour`,
    `void`) and its name (Iceberg's default: `id_bucket`, `ts_day`, ...)."""

    source: tuple[str, ...]
    transform: str
    name: str

    def __str__(self) -> str:
        src = ".".join(self.source)
        t = self.transform
        if t == "identity":
            return src
        if "[" in t:
            kind, arg = t[:-1].split("[")
            return f"{kind}({arg}, {src})"
        return f"{t}s({src})" if t in ("year", "month", "day", "hour") else f"{t}({src})"


@dataclass(frozen=True, kw_only=True)
class SortField:
    """A field of a sort order: its source column, transform, direction and null order."""

    source: tuple[str, ...]
    transform: str = "identity"
    descending: bool = False
    nulls_first: bool = True

    def __str__(self) -> str:
        src = ".".join(self.source)
        head = src if self.transform == "identity" else f"{self.transform}({src})"
        order = "DESC" if self.descending else "ASC"
        return f"{head} {order} NULLS {'FIRST' if self.nulls_first else 'LAST'}"


@dataclass(frozen=True, kw_only=True)
class CreateTable(StatementPlan):
    """`CREATE TABLE`, `CREATE TABLE ... AS SELECT`, `REPLACE TABLE [AS SELECT]` and `CREATE
    OR REPLACE TABLE`: the schema (a pyiceberg Schema, field ids as the new table gets them;
    for AS SELECT: None, the query's columns when Spark has analysed it), the partition spec,
    sort order, properties, location and comment; `mode`: create, replace or
    create_or_replace; `query`: the AS SELECT's statement."""

    target: TableName
    schema: Any  # pyiceberg Schema, or None with a query
    partition: tuple[PartitionField, ...] = ()
    sort: tuple[SortField, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()
    location: str | None = None
    comment: str | None = None
    if_not_exists: bool = False
    mode: str = "create"
    query: Statement | None = None

    def describe(self) -> str:
        verb = {"create": "CreateTable", "replace": "ReplaceTable"}.get(
            self.mode, "CreateOrReplaceTable"
        )
        parts = [f"{verb} {self.target}"]
        if self.schema is not None:
            parts.append(
                "columns "
                + ", ".join(
                    f"{f.name} {f.field_type}{' NOT NULL' if f.required else ''}"
                    for f in self.schema.fields
                )
            )
        if self.partition:
            parts.append("partitioned by " + ", ".join(str(p) for p in self.partition))
        if self.sort:
            parts.append("ordered by " + ", ".join(str(s) for s in self.sort))
        if self.properties:
            parts.append("properties " + ", ".join(f"{k}={v}" for k, v in self.properties))
        if self.location:
            parts.append(f"location {self.location}")
        if self.query is not None:
            parts.append("rows: the query below, written by Spark's tasks, one commit")
        return "\n  ".join(parts)


@dataclass(frozen=True, kw_only=True)
class DropTable(StatementPlan):
    target: TableName
    if_exists: bool
    purge: bool

    def describe(self) -> str:
        return f"DropTable {self.target}" + (" purge" if self.purge else "")


@dataclass(frozen=True, kw_only=True)
class InsertRows(StatementPlan):
    """`INSERT INTO t [(cols)] <query>` (mode "append": Iceberg's AppendFiles), `INSERT
    OVERWRITE t [PARTITION (...)] <query>` (mode "overwrite": static, OverwriteFiles by the
    PARTITION clause's filter or every row without one; or dynamic, ReplacePartitions of the
    partitions the rows land in, as the session's `spark.sql.sources.partitionOverwriteMode`
    says when it runs, as Spark's analyzer reads it).
    `columns`: the table's columns the query's fill, in order (None: every column but
    those `static` sets); `static`: (column, Spark SQL literal) of a PARTITION clause;
    `by_name`: INSERT ... BY NAME."""

    target: TableName
    branch: str
    query: Statement
    mode: str = "append"
    columns: tuple[str, ...] | None = None
    static: tuple[tuple[str, str], ...] = ()
    by_name: bool = False
    # static or dynamic, when the caller says (a DataFrame's overwritePartitions); None: the
    # session's spark.sql.sources.partitionOverwriteMode
    overwrite_mode: str | None = None
    isolation: str | None = None  # Iceberg's `isolation-level` write option

    def describe(self) -> str:
        where = " AND ".join(f"{c} = {v}" for c, v in self.static)
        head = {
            "append": "AppendFiles: the rows below, appended",
            "overwrite": "the rows below replace "
            + (f"the rows where {where}" if where else "every row of the table")
            + " (OverwriteFiles), or with spark.sql.sources.partitionOverwriteMode=dynamic "
            "the partitions they land in (ReplacePartitions)",
        }[self.mode]
        on = "" if self.branch == "main" else f" (branch {self.branch})"
        return f"InsertRows {self.target}{on}: {head}"


@dataclass(frozen=True, kw_only=True)
class AlterTable(StatementPlan):
    """`ALTER TABLE t <change>`: one change, as Spark's and Iceberg's SQL extensions spell
    them (`changes`: one `Change` each; several for `ADD COLUMNS (...)`)."""

    target: TableName
    changes: tuple[Change, ...]

    def describe(self) -> str:
        return f"AlterTable {self.target}: " + "; ".join(str(c) for c in self.changes)


@dataclass(frozen=True, kw_only=True)
class CallProcedure(StatementPlan):
    """`CALL [catalog.]system.<procedure>(...)`: one of Iceberg's procedures on a table of
    mor's catalog (planner/procedures.py binds the arguments; writer/procedures.py runs it).
    `args`: the arguments given, by parameter name, typed (a timestamp in milliseconds)."""

    procedure: str
    target: TableName
    args: tuple[tuple[str, Any], ...]

    def describe(self) -> str:
        shown = ", ".join(f"{k} => {v!r}" for k, v in self.args if k != "table")
        return f"CallProcedure {self.procedure} on {self.target}" + (f": {shown}" if shown else "")


@dataclass(frozen=True, kw_only=True)
class Change:
    """One change of an ALTER TABLE: `kind` and its arguments (planner/binding.py lists the
    kinds and mor/catalog_commands.py applies them)."""

    kind: str
    args: tuple[tuple[str, Any], ...] = ()

    def arg(self, name: str, default: Any = None) -> Any:
        for k, v in self.args:
            if k == name:
                return v
        return default

    def __str__(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.args if v is not None and v != ())
        return f"{self.kind}({shown})"


@dataclass(frozen=True, kw_only=True)
class ShowNamespaces(StatementPlan):
    """`SHOW NAMESPACES [IN parent] [LIKE 'pattern']` of mor's catalog."""

    catalog: str | None
    parent: str | None
    pattern: str | None = None
    changes: bool = field(default=False, init=False)


@dataclass(frozen=True, kw_only=True)
class ShowTables(StatementPlan):
    """`SHOW TABLES [IN ns] [LIKE 'pattern']` of mor's catalog (every namespace when none is
    named: mor has no current namespace)."""

    catalog: str | None
    namespace: str | None
    pattern: str | None = None
    changes: bool = field(default=False, init=False)


@dataclass(frozen=True, kw_only=True)
class DescribeTable(StatementPlan):
    """`DESCRIBE [TABLE] [EXTENDED] t [column]`."""

    target: TableName
    extended: bool
    column: tuple[str, ...] | None = None
    changes: bool = field(default=False, init=False)


@dataclass(frozen=True, kw_only=True)
class DescribeQuery(StatementPlan):
    """`DESCRIBE [QUERY] <query>`: the query's columns as Spark analyses them."""

    query: Statement
    changes: bool = field(default=False, init=False)


@dataclass(frozen=True, kw_only=True)
class ShowCreateTable(StatementPlan):
    target: TableName
    changes: bool = field(default=False, init=False)


@dataclass(frozen=True, kw_only=True)
class ShowProperties(StatementPlan):
    target: TableName
    key: str | None
    changes: bool = field(default=False, init=False)


@dataclass(frozen=True, kw_only=True)
class Explain(StatementPlan):
    """`EXPLAIN [VERBOSE|PHYSICAL|ANALYZE] <statement>`: the plan of `inner`."""

    mode: str
    inner: StatementPlan
    changes: bool = field(default=False, init=False)


def reads_rows(plan: StatementPlan) -> Statement | None:
    """The query a plan's rows come from, when it has one (a query, a CTAS, an INSERT, a
    view): what EXPLAIN plans below the statement's own line."""
    if isinstance(plan, Query):
        return plan.statement
    if isinstance(plan, (InsertRows, CreateView, DescribeQuery)):
        return plan.query
    if isinstance(plan, CreateTable):
        return plan.query
    return None
