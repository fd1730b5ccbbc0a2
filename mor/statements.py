"""One execution for every kind of statement mor runs, with one set of options: what
`mor_sql`, `explain`, `mor run`, `mor explain` and `mor shell` all build, so that each runs
everything the others run the same way.

- a query (SELECT ...): its `QueryExecution` (mor/execution.py): planned by mor, run by Spark;
- a row-level write (DELETE, UPDATE, MERGE): run at once as one merge-on-read commit
  (mor/row_writes.py) on `branch`, or counted only with `dry_run`;
- `EXPLAIN [VERBOSE|PHYSICAL|ANALYZE] <statement>`: the plan of the statement (of a write:
  the plan of the rows it changes, under a line saying what it does with them).

The options are those of every entry point: the catalog (or the warehouse of the embedded
one), the path map and FileIO properties the tables' files are read (and written) through,
the settings, the Spark session (or a function making one, called only when Spark has
something to do), the branch a write commits to and whether it only counts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from mor.catalogs import load_target, resolve_catalog
from mor.execution import QueryExecution
from mor.planner.row_writes import RowWrite, is_row_write, parse_row_write, rows_query
from mor.planner.settings import Settings, applied, current
from mor.planner.sql import Statement, check_is_query, one_statement, split_statements

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame

    from mor.row_writes import RowWriteReport

_EXPLAIN = re.compile(r"\s*EXPLAIN(?:\s+(VERBOSE|PHYSICAL|ANALYZE))?\s+", re.IGNORECASE)
MODES = ("VERBOSE", "PHYSICAL", "ANALYZE")


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
    ) -> None:
        stmt = one_statement(sql) if isinstance(sql, str) else sql
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
        if self.mode is None and not self.is_write:
            check_is_query(self.statement.tree)

    @property
    def is_write(self) -> bool:
        """A DELETE, UPDATE or MERGE (not one under EXPLAIN)."""
        return self.mode is None and is_row_write(self.statement.tree)

    @property
    def is_explain(self) -> bool:
        return self.mode is not None

    # --- queries ---------------------------------------------------------------------------

    @cached_property
    def query(self) -> QueryExecution:
        """The query's execution (a query's, or the rows query of a write under EXPLAIN)."""
        return self._query_execution()

    def check(self) -> None:
        """What running the statement would refuse, found without running it: the SQL, its
        tables, columns and types as Spark's analysis resolves them, a write's target,
        branch, SET values and MERGE clauses. No Spark job runs and nothing is kept: the run
        plans again when its turn comes (after the writes before it committed), as a script
        checked whole before its first statement runs needs (`mor run FILE`)."""
        if self.is_write:
            self._row_write(check_only=True)
            return
        run = self._query_execution()
        if self.spark is not None:
            run.use(self.session())
        run.dataframe  # noqa: B018 - built: Spark has analysed it

    def _query_execution(self) -> QueryExecution:
        sql: str | Statement = self.statement
        if is_row_write(self.statement.tree):
            sql = self._rows_query()[0]
        return QueryExecution(
            sql,
            catalog=self.catalog,
            path_map=self.path_map,
            io_properties=self.io_properties,
            warehouse=self.warehouse,
            settings=self.settings,
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

    # --- writes ----------------------------------------------------------------------------

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
        `check` (or `analyze`) has Spark analyse the query, on the statement's session."""
        mode = self.mode or ""
        verbose, physical, analyze = (
            verbose or mode == "VERBOSE",
            physical or mode == "PHYSICAL",
            analyze or mode == "ANALYZE",
        )
        head = self._rows_query()[1] if is_row_write(self.statement.tree) else ""
        run = self.query
        if (check or analyze) and self.spark is not None:
            run.use(self.session())  # else mor's own (with s3a when the plan reads s3a://)
        return head + run.explain(verbose=verbose, physical=physical, analyze=analyze, check=check)

    # --- what mor_sql returns --------------------------------------------------------------

    def dataframe(self) -> DataFrame:
        """`mor_sql`'s answer: a query's lazy DataFrame; a write's one row (run now:
        `num_affected_rows`, a MERGE's counts by kind, the `snapshot_id` committed); an
        EXPLAIN's one row (`plan`, as Spark's EXPLAIN answers)."""
        if self.is_write:
            return self._report_row(self.write())
        if self.is_explain:
            text = self.explain()
            session = self.session() if self.spark is not None else self.query.session
            return session.createDataFrame([(text,)], "plan string")
        run = self.query
        if self.spark is not None:
            run.use(self.session())
        return run.dataframe

    def _report_row(self, report: RowWriteReport) -> DataFrame:
        session = self.session()
        if report.statement == "MERGE":  # the counts Spark 4's and Delta's MERGE return
            return session.createDataFrame(
                [(report.rows, report.updated, report.deleted, report.inserted, report.snapshot)],
                "num_affected_rows bigint, num_updated_rows bigint, num_deleted_rows bigint, "
                "num_inserted_rows bigint, snapshot_id bigint",
            )
        return session.createDataFrame(
            [(report.rows, report.snapshot)], "num_affected_rows bigint, snapshot_id bigint"
        )
