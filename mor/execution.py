"""One statement's execution: the pipeline from SQL text to Spark's DataFrame, wired once.

As Catalyst's `QueryExecution`, each stage is derived from the one before it, lazily, once:

    sql ──plan_query──> planned (logical, optimized, trace: JVM-free)
                          │
         session <────────┤   the user's session, one given later (the CLI's, started
                          │   after every statement of a file is planned), or mor's own
                          │   local one (with Hadoop's s3a connector when the plan reads s3a://)
                          ▼
                    physical_plan (rules/physical, with the session's facts)
                          │
                          ├──> dataframe (physical/compile)
                          └──> explain() (planner/explain + physical/describe)

`mor_sql`, `explain`, `mor run` and the shell all build one; nothing else assembles these
stages. The settings in effect when it was made (with the call's overrides) are the ones every
stage runs under, whenever it runs. The DataFrame carries its execution, so that
`mor_errors(df)` finds the plan behind a failure without a table of DataFrames on the side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from mor.planner.errors import MorError
from mor.planner.settings import Settings, applied, current
from mor.planner.state import ProcessCaches, caches

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame, SparkSession

    from mor.planner.nodes import Plan
    from mor.planner.sql import Statement
    from mor.planning import Names, Planned
    from mor.rules.physical.nodes import PhysicalNode

_ATTRIBUTE = "_mor_execution"  # on the DataFrames `dataframe` returns


class QueryExecution:
    """One statement over Iceberg tables, planned by mor and run by Spark."""

    def __init__(
        self,
        sql: str | Statement,
        *,
        catalog: Catalog | str | None = None,
        path_map: dict[str, str] | None = None,
        io_properties: dict[str, str] | None = None,
        warehouse: str | None = None,
        settings: Any = None,
        spark: SparkSession | None = None,
        cache: ProcessCaches | None = None,
        views: dict[str, DataFrame] | None = None,
        names: Names | None = None,
    ) -> None:
        """`views`: DataFrames the statement may name (`views={"staging": df}`), bound where
        it names them; `names`: what else its names may be (planner/names.py; default: the
        session's, asked when planning needs them)."""
        self.sql = sql
        self.views = dict(views or {})
        self._names = names
        self.catalog = catalog
        self.path_map = path_map
        self.io_properties = io_properties
        self.warehouse = warehouse
        self.settings: Settings = current().overridden(settings, "settings")
        self.cache = cache if cache is not None else caches()
        self._spark = spark

    # --- the stages ----------------------------------------------------------------------

    @cached_property
    def planned(self) -> Planned:
        """The statement bound, its scans planned and the merge-on-read rules applied."""
        from mor.planning import plan_query

        with applied(self.settings):
            return plan_query(
                self.sql,
                catalog=self.catalog,
                path_map=self.path_map,
                io_properties=self.io_properties,
                warehouse=self.warehouse,
                cache=self.cache,
                names=self.names,
            )

    @property
    def names(self) -> Names:
        """What the statement's names may be besides mor's tables: the given session's names
        (or the session mor runs on otherwise), and the views handed in."""
        from mor.planning import Names

        base = self._names if self._names is not None else Names()
        spark = base.spark
        if spark is None:
            from mor.physical.spark.names import own_session_names, spark_names

            spark = spark_names(self._spark) if self._spark is not None else own_session_names()
        given = tuple(dict.fromkeys((*base.given, *self.views)))
        return Names(spark=spark, given=given, pending=base.pending)

    @property
    def plan(self) -> Plan:
        return self.planned.optimized

    @property
    def reads_s3a(self) -> bool:
        """Whether Spark reads s3a:// paths for this plan (its session needs Hadoop's s3a)."""
        from mor.physical.spark.s3a import reads_s3a

        return reads_s3a(self.plan)

    def narrow(self, cut: Callable[[Plan], Plan]) -> None:
        """Apply `cut` to the planned plan, before any physical planning (a row-level write's
        rows query cut to the data files its tasks read)."""
        if "physical_plan" in self.__dict__ or "dataframe" in self.__dict__:
            raise ValueError("this execution's physical plan is made already")
        planned = self.planned
        self.__dict__["planned"] = replace(planned, optimized=cut(planned.optimized))

    def use(self, spark: SparkSession) -> QueryExecution:
        """Run on `spark` (a session made after planning, as the CLI makes one for every
        statement of a file); refused once a session was used."""
        if "session" in self.__dict__ and self.__dict__["session"] is not spark:
            raise ValueError("this execution already runs on another session")
        self._spark = spark
        return self

    @cached_property
    def session(self) -> SparkSession:
        """The session given, as it is, or mor's own local one."""
        from mor.physical import local_session, prepare_session

        if self._spark is not None:
            return prepare_session(self._spark)
        with applied(self.settings):
            return local_session(s3a=self.reads_s3a)

    @cached_property
    def physical_plan(self) -> PhysicalNode:
        """The physical plan the compiler translates (and EXPLAIN PHYSICAL prints), with the
        facts of the session it runs on (a JVM-free guess of them while no session is in use:
        `explain(check=False)`)."""
        from mor.rules.physical import plan_physical

        with applied(self.settings):
            return plan_physical(self.plan, self.facts, self.cache)

    @cached_property
    def facts(self) -> Any:
        """The facts the physical plan is made for, asked once: the session's when one is in
        use, else a JVM-free guess of them."""
        if "session" not in self.__dict__:
            from mor.physical.describe import own_session_facts

            return own_session_facts()
        from mor.physical.scan.reads import session_facts

        return session_facts(self.session, packing=True)

    @cached_property
    def dataframe(self) -> DataFrame:
        """The lazy DataFrame of the statement's rows. The session's facts are asked (and its
        Parquet reader warmed) while the statement is planned, when the session is known
        before planning."""
        return self._build(analyse=True)

    def rows(self, limit: int | None = None) -> tuple[list[str], list[Any]]:
        """The statement's columns and rows (at most `limit`), run now: what the CLI prints.
        On Spark Connect the query is analysed once, by its execution, not first on its own as
        `dataframe` does it for a caller that holds the DataFrame (physical/compile.run_query);
        its errors are the same lines."""
        from mor.physical import collect_rows

        if "dataframe" in self.__dict__:
            return collect_rows(self.dataframe, limit)
        return collect_rows(self._build(analyse=False), limit)

    def _build(self, analyse: bool) -> DataFrame:
        from mor.physical import to_dataframe
        from mor.physical.scan.reads import early_facts
        from mor.physical.spark.session import active_session

        with applied(self.settings):
            known = None
            if "planned" not in self.__dict__:
                known = self._spark if self._spark is not None else active_session()
            facts = early_facts(known) if known is not None else None
            self.planned  # noqa: B018 - planned while the facts are asked
            session = self.session
            df = to_dataframe(
                self.plan,
                session,
                self.cache,
                facts=facts if session is known else None,
                relations=self.views,
                analyse=analyse,
            )
        df.__dict__[_ATTRIBUTE] = self
        return df

    def output_columns(self) -> str:
        """The statement's output columns as Spark analyses them over empty views (no data
        file read): an unknown function or column fails here, with its line and column."""
        from mor.physical import to_dataframe

        with applied(self.settings):
            schema = to_dataframe(
                self.plan, self.session, None, analyse_only=True, relations=self.views
            ).schema
        return ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields)

    # --- EXPLAIN -------------------------------------------------------------------------

    def explain(
        self,
        *,
        verbose: bool = False,
        physical: bool = False,
        analyze: bool = False,
        check: bool = True,
    ) -> str:
        """The plan as text (docs/explain.md): the logical plan with its scans, the output
        columns (`check`: Spark analyses the query), the planning trace and the physical rules
        (`verbose`), the physical plan (`physical`), the metrics and the rows each kind of
        delete removed, counted on Spark (`analyze`)."""
        from mor.planner.explain import explain_text
        from mor.planner.requests import counting

        with applied(self.settings), counting() as requests:
            planned = self.planned
            output = self.output_columns() if check or analyze else None
            trace = [(t.rule, t.changed, t.plan) for t in planned.trace] if verbose else None
            text = explain_text(planned.optimized, trace, output)
            if physical or verbose:
                text += self._physical_sections(verbose, physical)
            if self.reads_s3a:
                text += "\n" + self._s3a_section(check or analyze)
            if analyze:
                text += self._analyze_section(requests)
        return text

    def _physical_sections(self, verbose: bool, physical: bool) -> str:
        from mor.physical.describe import describe_plan
        from mor.rules.physical import trace as physical_trace

        text = ""
        if verbose:
            text += "\n== Physical rules ==\n" + "".join(
                f"{line}\n" for line in physical_trace(self.physical_plan)
            )
        if physical:
            text += "\n" + describe_plan(self.physical_plan, self.facts)[0]
        return text

    def _s3a_section(self, started: bool) -> str:
        """How Spark gets Hadoop's s3a connector for this plan's s3a:// paths."""
        if not started:
            from mor.physical.spark.s3a import s3a_for, what_starts_get

            line = what_starts_get(s3a_for())
        else:
            from mor.physical.spark.session import s3a_status

            line = s3a_status(self.session)
        return f"== Object storage ==\ns3a       {line}\n" + "".join(
            f"access    {line}\n" for line in self._access_lines()
        )

    def _access_lines(self) -> list[str]:
        """Per table read through s3a: the store settings Spark reads it with."""
        from mor.physical.spark.store_access import table_access
        from mor.planner.nodes import EqDeleteScan, IcebergScan, TableChanges

        lines: dict[str, str] = {}
        with applied(self.settings):
            for node in self.plan.walk():
                if not isinstance(node, (IcebergScan, EqDeleteScan, TableChanges)):
                    continue
                if node.table in lines:
                    continue
                access = table_access(node)
                lines[node.table] = (
                    f"{node.table}: {access.describe()}"
                    if access is not None
                    else f"{node.table}: the session's own s3a settings (the table's FileIO "
                    "has no store settings, or table_store_access is off)"
                )
        return list(lines.values())

    def _analyze_section(self, requests: Any) -> str:
        from mor.physical.analyze import count_removed
        from mor.planner.query_metrics import render as render_metrics

        m = count_removed(self.planned.metrics(), self.plan, self.session, self.cache)
        m.store_requests = requests.figures()  # planning, and building what the counts ran
        return (
            "\n"
            + render_metrics(m)
            + "\n== Process caches (after the counts) ==\n"
            + "".join(f"{f.line()}\n" for f in self.cache.figures() if f.entries)
        )


def execution_of(df: Any) -> QueryExecution | None:
    """The execution behind a DataFrame `QueryExecution.dataframe` returned (None for any
    other DataFrame, or one derived from it)."""
    if df is None:
        return None
    return vars(df).get(_ATTRIBUTE)


@contextmanager
def mor_errors(df: DataFrame | None = None) -> Iterator[None]:
    """Spark actions inside raise mor's errors where mor can tell what failed:

        with mor_errors(df):
            rows = df.collect()

    A failure of one of mor's guards inside Spark's tasks (a data file with more rows than its
    metadata records), a data or delete file missing, truncated, not Parquet or failing its
    checksum, becomes the MorError subclass naming it (DataFileError, InternalError, ...),
    raised from Spark's exception. With `df` (a DataFrame `mor_sql` or `table` returned), a
    failure that names no file is checked against that query's files for a column stored with
    another type. Any other exception passes unchanged."""
    try:
        yield
    except MorError:
        raise
    except Exception as e:
        from mor.physical.spark.spark_errors import recognised

        run = execution_of(df)
        found = recognised(e, run.plan if run is not None else None)
        if found is None:
            raise
        raise found from e
