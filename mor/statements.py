"""One execution for every kind of statement mor runs, with one set of options: what
`mor_sql`, `explain`, `mor run`, `mor explain` and `mor shell` all build, so that each runs
everything the others run the same way.

The statement is bound by the planner into its plan (planner/binding.py,
planner/statement_plans.py: a query, a row-level write, a table or namespace created,
replaced, dropped or altered, rows inserted, what the catalog holds, a statement of Spark's
own, an EXPLAIN of any of them), and `run()` runs the plan with the runner its class has in
`RUNNERS`: one runner a plan class, no list of `is_*` branches. `check(pending)` runs the
same runners in their checking mode: what the statement would refuse, found without running
it, against a script's catalog as its earlier statements leave it (`mor run FILE` checks a
script whole before its first statement runs).

The options are those of every entry point: the catalog (or the warehouse of the embedded
one), the path map and FileIO properties the tables' files are read (and written) through,
the settings, the Spark session (or a function making one, called only when Spark has
something to do), the branch a write commits to and whether it only counts, and the
DataFrames a statement may name (`views`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from mor.catalogs import load_target, resolve_catalog
from mor.execution import QueryExecution
from mor.outcome import Outcome, RunContext
from mor.planner.binding import bind_statement, explained_statement
from mor.planner.errors import MorError, UnsupportedError
from mor.planner.row_writes import RowWrite, parse_row_write, rows_query
from mor.planner.settings import Settings, applied, current, effective_path_map
from mor.planner.sources import PathMap, Resolver
from mor.planner.sql import Statement, one_statement
from mor.planner.statement_plans import (
    AlterTable,
    CallProcedure,
    CreateNamespace,
    CreateTable,
    CreateView,
    DescribeQuery,
    DescribeTable,
    DropNamespace,
    DropTable,
    Explain,
    InsertRows,
    Query,
    RowLevelWrite,
    ShowCreateTable,
    ShowNamespaces,
    ShowProperties,
    ShowTables,
    SparkStatement,
    StatementPlan,
    reads_rows,
)

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame

    from mor.planner.pending import Pending
    from mor.planning import Names
    from mor.row_writes import RowWriteReport

MODES = ("VERBOSE", "PHYSICAL", "ANALYZE")
__all__ = ["MODES", "RUNNERS", "StatementExecution", "explained_statement"]


class StatementExecution:
    """One statement, of any kind, with the options of the call that runs it."""

    def __init__(
        self,
        sql: str | Statement,
        *,
        catalog: Catalog | str | None = None,
        path_map: dict[str, str] | None = None,
        io_properties: dict[str, str] | None = None,
        warehouse: str | None = None,
        settings: Any = None,
        spark: Any = None,
        branch: str = "main",
        dry_run: bool = False,
        progress: Callable[[str], None] | None = None,
        views: dict[str, DataFrame] | None = None,
        names: Names | None = None,
    ) -> None:
        stmt = one_statement(sql) if isinstance(sql, str) else sql
        self.source = stmt
        self.mode, self.statement = explained_statement(stmt)
        self.catalog = catalog
        self.path_map = path_map
        self.io_properties = io_properties
        self.warehouse = warehouse
        self.settings: Settings = current().overridden(settings, "settings")
        self.spark = spark  # a session, a function making one, or None (mor's own)
        self.branch = branch
        self.dry_run = dry_run
        self.progress = progress
        self.views = dict(views or {})
        self._names = names

    # --- the plan ------------------------------------------------------------------------

    @property
    def names(self) -> Names:
        """What the statement's names may be besides mor's tables: Spark's session's (the
        given one, asked when needed; else the session mor runs on), the views handed in,
        a script's tables to come."""
        from mor.planning import Names

        base = self._names if self._names is not None else Names()
        spark = base.spark
        if spark is None:
            from mor.physical.spark.names import spark_names

            spark = spark_names(self.spark)
        if base.pending is not None and base.pending.views:
            from mor.planner.names import PendingNames

            spark = PendingNames(spark, base.pending.views)
        given = tuple(dict.fromkeys((*base.given, *self.views)))
        return Names(spark=spark, given=given, pending=base.pending)

    def resolver(self, pending: Pending | None = None) -> Resolver:
        names = self.names
        return Resolver(
            lambda: resolve_catalog(self.catalog, self.warehouse),
            PathMap.of(effective_path_map(self.path_map)),
            self.io_properties,
            spark=names.spark,
            given=names.given,
            pending=pending if pending is not None else names.pending,
        )

    @cached_property
    def plan(self) -> StatementPlan:
        """The statement bound (planner/binding.py): nothing run."""
        with applied(self.settings):
            return bind_statement(self.source, self.resolver(), self.branch)

    @property
    def inner(self) -> StatementPlan:
        """The plan an EXPLAIN explains, or the plan itself."""
        plan = self.plan
        return plan.inner if isinstance(plan, Explain) else plan

    @property
    def is_query(self) -> bool:
        """A query (SELECT ...): rows, no effect."""
        return isinstance(self.plan, Query)

    @property
    def is_write(self) -> bool:
        """A DELETE, UPDATE or MERGE (not one under EXPLAIN)."""
        return isinstance(self.plan, RowLevelWrite)

    @property
    def is_explain(self) -> bool:
        return isinstance(self.plan, Explain)

    # --- queries ---------------------------------------------------------------------------

    @cached_property
    def query(self) -> QueryExecution:
        """The execution of the statement's rows: a query's, a write's rows query, an
        INSERT's or a CREATE TABLE AS SELECT's query (under EXPLAIN too)."""
        return self._query_execution()

    def _query_execution(self, names: Names | None = None) -> QueryExecution:
        plan = self.inner
        sql: Statement | str | None = reads_rows(plan)
        if isinstance(plan, RowLevelWrite):
            sql = self._rows_query()[0]
        if sql is None:
            raise UnsupportedError(f"{plan.label} has no rows to plan")
        return QueryExecution(
            sql,
            catalog=self.catalog,
            path_map=self.path_map,
            io_properties=self.io_properties,
            warehouse=self.warehouse,
            settings=self.settings,
            views=self.views,
            names=names or self.names,
        )

    def session(self) -> Any:
        """The Spark session the statement runs on (made now when given as a function)."""
        # from physical/, not mor.commits: the write path brings pyiceberg's pyarrow FileIO,
        # pyarrow.dataset and pandas (0.36 s of a read's first call, bench/scale.py)
        from mor.physical import session_of

        if "_session" not in self.__dict__:
            with applied(self.settings):
                self.__dict__["_session"] = session_of(self.spark)
        return self.__dict__["_session"]

    # --- running ---------------------------------------------------------------------------

    def context(self, pending: Pending | None = None) -> RunContext:
        names = self.names
        if pending is not None:
            from mor.planning import Names

            names = Names(spark=names.spark, given=names.given, pending=pending)
        return RunContext(
            catalog=lambda: resolve_catalog(self.catalog, self.warehouse),
            session=self.session,
            names=names,
            path_map=self.path_map,
            io_properties=self.io_properties,
            warehouse=self.warehouse,
            branch=self.branch,
            dry_run=self.dry_run,
            progress=self.progress or (lambda text: None),
            views=self.views,
            settings=self.settings,
            pending=pending,
        )

    def run(self) -> Outcome:
        """Run the statement (a query: its lazy DataFrame; a command: what it did)."""
        plan = self.plan
        runner = RUNNERS.get(type(plan))
        if runner is None:
            raise MorError(f"{plan.label} statements are not run by mor")
        with applied(self.settings):
            return runner(self, plan, self.context())

    def check(self, pending: Pending | None = None) -> None:
        """What running the statement would refuse, found without running it: the SQL, its
        tables, columns and types as Spark's analysis resolves them, a write's target and
        clauses. No Spark job runs and nothing is written: with `pending` (a script's catalog
        as its earlier statements leave it), what the statement would create, change or drop
        is recorded there for the statements after it."""
        from mor.planner.pending import Pending

        pending = pending if pending is not None else Pending()
        self.__dict__.pop("plan", None)  # bound again against what the script will hold
        handed = self.views
        # the views earlier statements create, as DataFrames Spark analysed (the ones handed
        # in win, as they do when the script runs)
        self.views = {**pending.frames, **handed}
        self._names = self._with_pending(pending)
        try:
            plan = self.plan
            checker = CHECKERS.get(type(plan), RUNNERS.get(type(plan)))
            if checker is None:
                raise MorError(f"{plan.label} statements are not run by mor")
            with applied(self.settings):
                checker(self, plan, self.context(pending))
        finally:
            self.views = handed
            self.__dict__.pop("plan", None)
            self.__dict__.pop("query", None)
            self._names = None if self._names is None else self._without_pending()

    def _with_pending(self, pending: Pending) -> Names:
        from mor.planning import Names

        base = self._names if self._names is not None else Names()
        return Names(spark=base.spark, given=base.given, pending=pending)

    def _without_pending(self) -> Names | None:
        from mor.planning import Names

        base = self._names
        if base is None:
            return None
        return Names(spark=base.spark, given=base.given, pending=None)

    def write(self) -> RowWriteReport:
        """Run the DELETE, UPDATE or MERGE (or count what it would change, `dry_run`)."""
        return self._row_write(check_only=False)

    def _row_write(self, check_only: bool) -> RowWriteReport:
        from mor.row_writes import run_row_write

        with applied(self.settings):
            return run_row_write(
                self.statement,
                catalog=self.catalog,
                warehouse=self.warehouse,
                path_map=self.path_map,
                io_properties=self.io_properties,
                branch=self.branch,
                dry_run=self.dry_run,
                spark=self.session if self.spark is not None else None,
                progress=None if check_only else self.progress,
                check_only=check_only,
                views=self.views,
                names=self.names,
            )

    def _rows_query(self) -> tuple[str, str]:
        """A write's rows query at the head of its branch, and the line EXPLAIN prints above
        its plan."""
        cat = resolve_catalog(self.catalog, self.warehouse)
        rw: RowWrite = parse_row_write(self.statement, self.branch, cat.table_exists)
        table = load_target(cat, rw.name)
        version = None if rw.branch == "main" else rw.branch
        rq = rows_query(rw, table.schema(), table.metadata.format_version, version)
        on = "" if rw.branch == "main" else f" (branch {rw.branch})"
        head = {
            "DELETE": f"DELETE FROM {rw.name}{on}: deletes the rows (_file, _pos) of this query",
            "UPDATE": (
                f"UPDATE {rw.name}{on}: deletes the rows (_file, _pos) of this query and "
                "writes its other columns as new rows"
            ),
            "MERGE": (
                f"MERGE INTO {rw.name}{on}: acts on the rows of this query (_mor_clause: the "
                "clause that applies to each), deleting (_mor_file, _mor_pos) of those it "
                "updates or deletes and writing those it updates or inserts"
            ),
        }[rw.kind]
        if table.metadata.format_version >= 3:
            deletes = (
                "one deletion vector per data file changed (merged with the file's current "
                "deletes), the vectors of a task in one Puffin file"
            )
        else:
            deletes = "one file-scoped position delete file per data file changed"
        writes = f"writes {deletes}"
        if rw.kind != "DELETE":
            writes += ", and the new rows as Parquet data files placed by the table's spec"
        else:
            writes += (
                "; a data file whose every row the condition selects by metadata is removed whole"
            )
        return rq.text, f"{head}\n{writes}; one commit (a row delta, as Iceberg's writer makes)\n"

    # --- EXPLAIN ---------------------------------------------------------------------------

    def explain(
        self,
        *,
        verbose: bool = False,
        physical: bool = False,
        analyze: bool = False,
        check: bool = True,
    ) -> str:
        """The plan as text (docs/explain.md): EXPLAIN's own mode and the flags together;
        `check` (or `analyze`) has Spark analyse the query, on the statement's session. A
        statement with no rows of its own (DDL, SHOW) prints its bound plan."""
        mode = self.mode or ""
        verbose, physical, analyze = (
            verbose or mode == "VERBOSE",
            physical or mode == "PHYSICAL",
            analyze or mode == "ANALYZE",
        )
        plan = self.inner
        if isinstance(plan, RowLevelWrite):
            head = self._rows_query()[1]
        elif isinstance(plan, Query):
            head = ""
        else:
            head = f"== Statement ==\n{plan.describe()}\n"
            if reads_rows(plan) is None:
                return head
            head += "\n"
        run = self.query
        if (check or analyze) and self.spark is not None:
            run.use(self.session())  # else mor's own (with s3a when the plan reads s3a://)
        return head + run.explain(verbose=verbose, physical=physical, analyze=analyze, check=check)

    # --- what mor_sql returns --------------------------------------------------------------

    def dataframe(self) -> DataFrame:
        """`mor_sql`'s answer: a query's lazy DataFrame; a write's one row (run now:
        `num_affected_rows`, a MERGE's counts by kind, the `snapshot_id` committed); an
        EXPLAIN's one row (`plan`, as Spark's EXPLAIN answers); SHOW and DESCRIBE their rows;
        a DDL statement an empty DataFrame (as Spark's)."""
        out = self.run()
        if out.df is not None:
            return out.df
        session = self.session()
        if out.rows is not None:
            return session.createDataFrame(out.rows, out.types)
        if out.answer is not None:
            return out.answer()
        if out.affected is not None:
            return _counts(
                session, ["num_affected_rows", "snapshot_id"], [out.affected, out.snapshot]
            )
        from pyspark.sql import types as T

        return session.createDataFrame([], T.StructType([]))


# --- runners ----------------------------------------------------------------------------------


def _query(ex: StatementExecution, plan: Query, ctx: RunContext) -> Outcome:
    run = ex.query
    if ex.spark is not None:
        run.use(ex.session())
    if ctx.checking:
        analysed(run)
        return Outcome("QUERY")
    return Outcome("QUERY", df=run.dataframe)


def analysed(run: QueryExecution) -> Any:
    from mor.inserts import analysed as analysed

    return analysed(run)


def _row_write(ex: StatementExecution, plan: RowLevelWrite, ctx: RunContext) -> Outcome:
    if ctx.checking:
        known = _pending_target(ex, ctx)
        if not known:
            ex._row_write(check_only=True)
        return Outcome(plan.kind)
    report = ex.write()
    return Outcome(
        plan.kind,
        report.line(),
        report.as_dict(),
        snapshot=report.snapshot,
        affected=report.rows,
        answer=_report_row(ex, report),
    )


def _pending_target(ex: StatementExecution, ctx: RunContext) -> bool:
    """Whether a row-level write's target is created earlier in the script (its deep check
    waits for the run: the table has no row yet)."""
    if ctx.pending is None or not ctx.pending.tables:
        return False
    try:
        rw = parse_row_write(ex.statement, ex.branch, lambda n: True)
    except MorError:
        return False
    try:
        cat = ctx.catalog()
    except MorError:
        return True
    return ctx.pending.has_table(cat.name, rw.name) is True


def _report_row(ex: StatementExecution, report: RowWriteReport) -> Any:
    """The one row mor_sql returns for a row-level write (made lazily: the CLI prints the
    line instead)."""

    class _Lazy:
        def __call__(self) -> Any:
            session = ex.session()
            if report.statement == "MERGE":  # the counts Spark 4's and Delta's MERGE return
                return _counts(
                    session,
                    [
                        "num_affected_rows",
                        "num_updated_rows",
                        "num_deleted_rows",
                        "num_inserted_rows",
                        "snapshot_id",
                    ],
                    [report.rows, report.updated, report.deleted, report.inserted, report.snapshot],
                )
            return _counts(
                session, ["num_affected_rows", "snapshot_id"], [report.rows, report.snapshot]
            )

    return _Lazy()


def _counts(session: Any, names: list[str], values: list[int | None]) -> DataFrame:
    """One row of bigint counts: a local relation (on a classic session an inline VALUES,
    which collects without a Spark job; createDataFrame's costs one, ~0.2 s)."""
    from pyspark.sql import types as T

    from mor.physical.scan.tables import local_table

    return local_table(session, [(n, T.LongType()) for n in names], [tuple(values)])


def _explain(ex: StatementExecution, plan: Explain, ctx: RunContext) -> Outcome:
    if ctx.checking:
        inner = RUNNERS.get(type(plan.inner))
        if isinstance(plan.inner, (Query, RowLevelWrite)):
            ex.query  # noqa: B018 - planned: its tables and columns bound
        elif inner is None:
            raise MorError(f"{plan.inner.label} statements are not run by mor")
        return Outcome("EXPLAIN")
    text = ex.explain()
    return Outcome("EXPLAIN", text, columns=["plan"], types="plan string", rows=[(text,)])


def _spark_statement(ex: StatementExecution, plan: SparkStatement, ctx: RunContext) -> Outcome:
    """A statement of Spark's own, run by Spark as written (its answer, if any, as rows)."""
    if ctx.checking:
        tree = plan.statement.tree
        from sqlglot import exp

        if isinstance(tree, exp.Create) and str(tree.args.get("kind")).upper() == "VIEW":
            assert ctx.pending is not None
            name = tree.this.name.lower()
            ctx.pending.views.add(name)
            ctx.pending.frames.pop(name, None)
            if isinstance(tree.expression, exp.Query):
                try:  # Spark analyses the view's query (nothing read); else run time says
                    ctx.pending.frames[name] = ex.session().sql(
                        tree.expression.sql(dialect="spark")
                    )
                except Exception:  # noqa: BLE001, S110 - it names what the script makes first
                    pass
        return Outcome(plan.kind)
    session = ex.session()
    from mor.physical.spark.spark_errors import spark_failure

    try:
        df = session.sql(plan.statement.text)
    except Exception as e:  # noqa: BLE001 - Spark's refusal, as one line
        from mor.physical.spark.spark_errors import query_error
        from mor.planner.nodes import SparkQuery

        wrapped = SparkQuery(
            statement=plan.statement.text,
            offset=plan.statement.offset,
            source=plan.statement.source,
            edits=(),
            scans=(),
            refs=(),
        )
        try:
            raise query_error(e, wrapped, ()) from e
        except MorError:
            raise
        except Exception:  # noqa: BLE001
            raise spark_failure(e) from e
    if df.columns:
        return Outcome(plan.kind, df=df)
    from sqlglot import exp

    tree = plan.statement.tree
    if isinstance(tree, exp.Create) and str(tree.args.get("kind")).upper() == "VIEW":
        name = tree.this.sql(dialect="spark") if tree.this is not None else "?"
        kind = "temporary view" if tree.args.get("properties") else "view"
        line = f"{kind} {name}: created (by Spark)"
        return Outcome(plan.kind, line, {"statement": plan.kind, "view": name})
    return Outcome(plan.kind, f"{plan.kind}: done (run by Spark)", {"statement": plan.kind})


def _create_view(ex: StatementExecution, plan: CreateView, ctx: RunContext) -> Outcome:
    """CREATE TEMPORARY VIEW over mor's tables: the query's DataFrame registered under the
    view's name (the session keeps its plan: the view reads the snapshots read now)."""
    run = ex.query
    run.use(ex.session())
    if ctx.checking:
        assert ctx.pending is not None
        if not plan.is_global:
            ctx.pending.views.add(plan.name.lower())
            ctx.pending.frames[plan.name.lower()] = analysed(run)
        else:
            analysed(run)
        return Outcome("CREATE VIEW")
    df = run.dataframe
    try:
        if plan.is_global:
            (df.createOrReplaceGlobalTempView if plan.replace else df.createGlobalTempView)(
                plan.name.split(".")[-1]
            )
        else:
            (df.createOrReplaceTempView if plan.replace else df.createTempView)(plan.name)
    except Exception as e:  # noqa: BLE001 - Spark's refusal (the view exists): one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MorError(f"CREATE TEMPORARY VIEW {plan.name}: {first}") from e
    kind = "global temporary" if plan.is_global else "temporary"
    return Outcome("CREATE VIEW", f"{kind} view {plan.name}: created", {"view": plan.name})


def _describe_query(ex: StatementExecution, plan: DescribeQuery, ctx: RunContext) -> Outcome:
    run = ex.query
    run.use(ex.session())
    schema = analysed(run).schema
    rows = [(f.name, f.dataType.simpleString(), None) for f in schema.fields]
    return Outcome(
        "DESCRIBE QUERY",
        columns=["col_name", "data_type", "comment"],
        types="col_name string, data_type string, comment string",
        rows=rows,
    )


def _create_table(ex: StatementExecution, plan: CreateTable, ctx: RunContext) -> Outcome:
    from mor.catalog_statements import run_create_table
    from mor.inserts import run_ctas, run_replace_table

    if plan.mode != "create":
        return run_replace_table(plan, ctx)
    if plan.query is not None:
        return run_ctas(plan, ctx)
    return run_create_table(plan, ctx)


def _catalog_runner(name: str) -> Callable[[StatementExecution, Any, RunContext], Outcome]:
    def run(ex: StatementExecution, plan: Any, ctx: RunContext) -> Outcome:
        import mor.catalog_statements as cs

        return getattr(cs, name)(plan, ctx)

    return run


def _insert(ex: StatementExecution, plan: InsertRows, ctx: RunContext) -> Outcome:
    from mor.inserts import run_insert

    return run_insert(plan, ctx)


# each plan class's runner (checks run them with `ctx.pending` set: a runner checks and records
# what it would change instead of changing it)
RUNNERS: dict[type, Callable[[StatementExecution, Any, RunContext], Outcome]] = {
    Query: _query,
    RowLevelWrite: _row_write,
    Explain: _explain,
    SparkStatement: _spark_statement,
    CreateView: _create_view,
    DescribeQuery: _describe_query,
    CreateNamespace: _catalog_runner("run_create_namespace"),
    DropNamespace: _catalog_runner("run_drop_namespace"),
    CreateTable: _create_table,
    DropTable: _catalog_runner("run_drop_table"),
    AlterTable: _catalog_runner("run_alter_table"),
    CallProcedure: _catalog_runner("run_call"),
    InsertRows: _insert,
    ShowNamespaces: _catalog_runner("run_show_namespaces"),
    ShowTables: _catalog_runner("run_show_tables"),
    DescribeTable: _catalog_runner("run_describe"),
    ShowCreateTable: _catalog_runner("run_show_create_table"),
    ShowProperties: _catalog_runner("run_show_properties"),
}
CHECKERS: dict[type, Callable[[StatementExecution, Any, RunContext], Outcome]] = {}
