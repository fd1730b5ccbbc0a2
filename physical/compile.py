"""Compile an optimized plan into PySpark: its physical plan (rules/physical/, where every
decision is taken) translated into DataFrame operations, and the query around the scans into
`spark.sql` over uniquely named views of them."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable
from functools import reduce
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from mor.physical.deletes.eq_deletes import scan_eq_deletes
from mor.physical.merge_on_read import scan_data
from mor.physical.scan.columns import float_key
from mor.physical.scan.guards import check_files
from mor.physical.scan.metadata_columns import hidden_type
from mor.physical.scan.reads import ReadContext, session_facts
from mor.physical.scan.types import spark_type
from mor.physical.spark import arrow
from mor.physical.spark.reuse import fingerprint, reused
from mor.physical.spark.session import is_connect
from mor.physical.spark.spark_errors import query_error, recognised, spark_failure
from mor.physical.table_changes import changes_schema, compile_changes
from mor.planner.errors import InternalError, MorError, UnsupportedError
from mor.planner.nodes import (
    DATA_SEQ,
    DEL_PART,
    DEL_SEQ,
    GLOBAL_PART,
    PART,
    AntiJoin,
    EqDeleteScan,
    IcebergScan,
    MetadataTable,
    Plan,
    SparkQuery,
    TableChanges,
    Union,
)
from mor.planner.settings import current
from mor.planner.state import ProcessCaches
from mor.rules.physical import Planner, replan_resolved
from mor.rules.physical.broadcast import bitmap_weight
from mor.rules.physical.equality import joined, store
from mor.rules.physical.nodes import (
    AntiJoinExec,
    ChangesExec,
    CountRows,
    JoinCondition,
    MetadataRows,
    PhysicalNode,
    QueryExec,
    ReadData,
    ReadEqDeletes,
    ResolvedBranch,
    ResolveEqDeletes,
    UnionExec,
    ViewExec,
)
from mor.rules.physical.reading import SessionFacts

# nodes whose DataFrame depends on nothing but the node (MetadataTable holds rows read now;
# TableChanges compiles its scans through the compiler, which reuses them)
REUSABLE = (IcebergScan, EqDeleteScan, AntiJoin, Union)


def _c(name: str) -> Column:
    return F.col(f"`{name}`")


def join_condition(cond: JoinCondition) -> Column:
    """The anti-join's condition (rules/physical's JoinCondition) as a Spark column; float
    keys arrive as text from the delete scan (columns.float_key): the data side's are made
    text alike."""
    pairs = []
    for lk, rk, text in cond.keys:
        lc = float_key(_c(lk)) if text else _c(lk)
        pairs.append(lc.eqNullSafe(_c(rk)) if cond.null_safe else lc == _c(rk))
    out = reduce(lambda a, b: a & b, pairs)
    if cond.seq_guard:
        out = out & (_c(DATA_SEQ) < _c(DEL_SEQ))
    if cond.scope == "partition":
        out = out & (_c(PART) == _c(DEL_PART))
    elif cond.scope:
        out = out & ((_c(DEL_PART) == F.lit(GLOBAL_PART)) | (_c(PART) == _c(DEL_PART)))
    return out


class Compiler:
    """Translates a physical plan (rules/physical/) into DataFrames, each decision read off
    its node: each node once (a subtree two parents share is one DataFrame), and on a classic
    session a node made of the same files, columns and filters as one an earlier query
    translated reuses its DataFrame (physical/spark/reuse.py), its files checked again. The plan's
    one step with effects, resolving equality deletes to positions, runs here when its branch
    is first needed (`execute`); the branch is then planned again by rules/physical
    (`replan_resolved`) over the positions found."""

    def __init__(
        self,
        spark: SparkSession,
        cache: ProcessCaches,
        facts: Callable[[], SessionFacts] | None = None,
        resolve_every: bool = False,
        relations: dict[str, DataFrame] | None = None,
        analyse: bool = True,
    ) -> None:
        self.spark = spark
        self.analyse = analyse  # Spark Connect: the query analysed when built (run_query)
        self.relations = relations or {}  # the DataFrames the call hands in by name
        self.cache = cache  # the process's caches (planner/state.py), passed down
        self.resolve_every = resolve_every  # every equality delete resolved (conversion)
        self._facts = facts or (lambda: session_facts(spark))  # asked once, when first needed
        self._memo: dict[int, tuple[PhysicalNode, DataFrame]] = {}
        self._fingerprints: dict[int, tuple[Plan, Hashable]] = {}
        self._reads: ReadContext | None = None
        self._planner: Planner | None = None
        self._found: dict[int, tuple[ResolveEqDeletes, dict[str, pa.Array]]] = {}
        self.translated: list[PhysicalNode] = []  # every node translated, in order
        self.executed: list[ResolveEqDeletes] = []  # every step run

    @property
    def reads(self) -> ReadContext:
        """What the reads of this query share: the session and its facts (read once)."""
        if self._reads is None:
            self._reads = ReadContext(self.spark, self._facts(), self.cache)
        return self._reads

    def context(self) -> tuple:
        """What besides the plan decides what a node compiles to: the settings in effect and
        the session's facts (listing threshold, broadcast limit, whether file lists serve)."""
        return (current(), self.reads.facts)

    def plan(self, node: Plan) -> PhysicalNode:
        """The physical plan of a logical node, for this session (one planner per query: a
        node planned twice is one physical node)."""
        if self._planner is None:
            self._planner = Planner(self.reads.facts, self.cache, self.resolve_every)
        return self._planner.plan(node)

    def count_reads(self, query: PhysicalNode) -> None:
        """The query's one effect besides resolving: each branch it anti-joins counts as a
        read of its files (setting resolve_at_read), whether its DataFrame is built now or
        reused from an earlier query. EXPLAIN counts nothing."""
        for n in query.walk():
            if isinstance(n, AntiJoinExec) and n.joined is not None:
                joined(n.joined, self.cache)

    def compile(self, node: Plan) -> DataFrame:
        """A logical node's DataFrame: planned, then translated."""
        return self.run(self.plan(node))

    def run(self, node: PhysicalNode) -> DataFrame:
        """The DataFrame of a physical node."""
        hit = self._memo.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        kind, logical = _reuse_key(node)
        if logical is not None:
            df = self.reused(kind, logical, lambda: self._translate(node), _decisions(node))
        else:
            df = self._translate(node)
        self._memo[id(node)] = (node, df)
        return df

    def reused(
        self, kind: str, node: Plan, make: Callable[[], DataFrame], decisions: tuple = ()
    ) -> DataFrame:
        """`make()`, or on a classic session the DataFrame an earlier query made of a node
        with the same fingerprint (`kind` tells apart what is made of it) and the same
        equality-delete decisions below it (`decisions`: a branch joined earlier is built
        again once it is resolved), its files checked again; weighed by the bitmaps below
        it."""
        if not isinstance(node, REUSABLE) or is_connect(self.spark):
            return make()
        hit = self._fingerprints.get(id(node))
        if hit is None or hit[0] is not node:
            hit = self._fingerprints[id(node)] = (node, fingerprint(node))
        return reused(
            self.spark,
            (kind, hit[1], self.context(), decisions),
            make,
            lambda: check_files(node),
            lambda: bitmap_weight(node),
            lambda: self.reads.facts.broadcast_limit,
        )

    def execute(self, step: ResolveEqDeletes) -> dict[str, pa.Array]:
        """Run the step: the positions the equality deletes of `step.joins` remove from each
        file it resolves, by recorded path, kept in the process's caches. One Spark job reads
        their key columns (every row: no filter of the query, no position delete applied),
        semi-joined with each delete side (unfiltered) on the anti-joins' own conditions;
        (_file, _pos) of the matches are collected per file."""
        hit = self._found.get(id(step))
        if hit is not None and hit[0] is step:
            return hit[1]
        joins, res = step.joins, step.resolution
        ldf = self.compile(step.keys)
        matched = [
            ldf.join(self.run(side), join_condition(cond), "left_semi")
            for cond, side in zip(step.conditions, step.sides)
        ]
        rows = reduce(lambda a, b: a.unionAll(b), [m.select("_file", "_pos") for m in matched])
        per_file = rows.groupBy("_file").agg(F.collect_list("_pos").alias("p"))
        try:
            got = per_file.collect()
        except Exception as e:  # noqa: BLE001 - a Spark failure, as the query's would be
            # named as mor_errors names a query's: a column of another type by the chain's files
            raise spark_failure(e, joins[-1]) from e
        found = {}
        for r in got:
            found[r["_file"]] = pa.array(sorted(set(r["p"])), pa.int64())
        store(res, found, self.cache)
        self._found[id(step)] = (step, found)
        self.executed.append(step)
        return found

    def _translate(self, node: PhysicalNode) -> DataFrame:
        self.translated.append(node)
        name = TRANSLATIONS.get(type(node))
        if name is None:
            raise InternalError(f"no translation for {type(node).__name__}")
        return getattr(self, name)(node)

    def _read(self, node: ReadData | CountRows) -> DataFrame:
        return scan_data(self.reads, node)

    def _eq_deletes(self, node: ReadEqDeletes) -> DataFrame:
        return scan_eq_deletes(self.reads, node)

    def _metadata_rows(self, node: MetadataRows) -> DataFrame:
        return arrow.to_dataframe(self.spark, node.node.data)

    def _changes(self, node: ChangesExec) -> DataFrame:
        return compile_changes(self.spark, node.node, lambda p: self.run(node.part(p)))

    def _anti_join(self, node: AntiJoinExec) -> DataFrame:
        left, right = self.run(node.left), self.run(node.right)
        return left.join(right, join_condition(node.condition), "left_anti")

    def _resolved_branch(self, node: ResolvedBranch) -> DataFrame:
        found = self.execute(node.step) if node.step is not None else None
        return self.run(replan_resolved(node, found))

    def _union(self, node: UnionExec) -> DataFrame:
        names = [_c(c.name) for c in node.node.columns]
        parts = [self.run(p).select(*names) for p in node.inputs]
        return reduce(lambda a, b: a.unionAll(b), parts)

    def _query(self, node: QueryExec) -> DataFrame:
        frames = [self.run(v) for v in node.views]
        frames += given(node.node, self.relations)
        return run_query(self.spark, node.node, frames, analyse=self.analyse)

    def _view(self, node: ViewExec) -> DataFrame:
        df = self.run(node.input)
        if not node.named:
            df = df.select(*[_c(c.name).alias(c.label) for c in node.logical.output])
        return barrier(df) if node.barrier else df


# each node kind's translation (a method of Compiler); the steps with effects (STEPS) run
# through `execute`; CommitExec is translated by its ChangesExec (compile_changes)
TRANSLATIONS: dict[type, str] = {
    ReadData: "_read",
    CountRows: "_read",
    ReadEqDeletes: "_eq_deletes",
    MetadataRows: "_metadata_rows",
    ChangesExec: "_changes",
    AntiJoinExec: "_anti_join",
    ResolvedBranch: "_resolved_branch",
    UnionExec: "_union",
    QueryExec: "_query",
    ViewExec: "_view",
}


def _decisions(node: PhysicalNode) -> tuple[str, ...]:
    """What the physical rules decided for the equality deletes under a node, in order: a
    DataFrame kept for later queries serves only a plan that decided the same."""
    return tuple(
        "resolved" if isinstance(n, ResolvedBranch) else "joined"
        for n in node.walk()
        if isinstance(n, ResolvedBranch) or (isinstance(n, AntiJoinExec) and n.branch is not None)
    )


def _reuse_key(node: PhysicalNode) -> tuple[str, Plan | None]:
    """Under what a node's DataFrame is kept for later queries: "scan" for a table read of
    the query, "plan" for the nodes made of files alone; nothing for the others (a resolved
    branch is kept as its final scan)."""
    if isinstance(node, ViewExec):
        return "scan", node.logical
    if isinstance(node, (ReadData, CountRows)):
        return "plan", node.scan
    if isinstance(node, (ReadEqDeletes, AntiJoinExec, UnionExec)):
        return "plan", node.node
    return "", None


def barrier(df: DataFrame) -> DataFrame:
    """`df` behind a filter Spark can neither simplify nor push anything through (it is not
    deterministic), always true: `spark_partition_id() >= 0`."""
    return df.where(F.spark_partition_id() >= 0)


def _empty(spark: SparkSession, scan: Plan) -> DataFrame:
    """No rows, the scan's columns and types: enough for Spark to analyse the query."""
    if isinstance(scan, MetadataTable):
        return spark.createDataFrame([], arrow.spark_schema(scan.data.schema))
    types = {}
    for node in scan.walk():
        if isinstance(node, IcebergScan):
            types.update({f.col.name: spark_type(f.type_str, node.table) for f in node.fields})
            types.update({h: hidden_type(node, h) for h in node.hidden})
        if isinstance(node, TableChanges):
            types.update({f.name: f.dataType for f in changes_schema(node).fields})
    fields = [T.StructField(c.label, types[c.name]) for c in scan.output]
    return spark.createDataFrame([], T.StructType(fields))


def to_dataframe(
    plan: Plan,
    spark: SparkSession,
    cache: ProcessCaches | None,
    *,
    analyse_only: bool = False,
    facts: Callable[[], SessionFacts] | None = None,
    relations: dict[str, DataFrame] | None = None,
    analyse: bool = True,
) -> DataFrame:
    """The query's result, built with the process's caches (`cache`). `analyse_only`: over
    empty scans, to have Spark check the query (and name its columns) without reading any
    file (no cache needed). `facts`: the session's facts when the caller started asking for
    them before planning (physical/scan/reads.early_facts), else asked here. `relations`:
    the DataFrames the call hands in by name (`views=`), bound where the statement names
    them. `analyse=False`: for a caller that runs the query at once through `collect_rows`
    (run_query)."""
    if not isinstance(plan, SparkQuery):
        raise InternalError("a plan to run must be a SparkQuery")
    if cache is None and not analyse_only:
        raise InternalError("a plan to run needs the process's caches")
    compiler, query = None, None
    try:
        if analyse_only:
            frames = [_empty(spark, s) for s in plan.scans] + given(plan, relations or {})
        else:
            assert cache is not None
            compiler = Compiler(spark, cache, facts, relations=relations, analyse=analyse)
            query = compiler.plan(plan)
            assert isinstance(query, QueryExec)
            compiler.count_reads(query)
            frames = [compiler.run(v) for v in query.views]
    except MorError:
        raise
    except Exception as e:  # noqa: BLE001 - Spark refusing what mor built: one line, not py4j's
        found = recognised(e, plan)  # a file or an object store Spark could not reach
        if found is not None:
            raise found from e
        text = str(e).strip().splitlines()
        detail = next((ln for ln in text if "Exception" in ln or "Error" in ln), "")
        raise InternalError(
            f"Spark refused the scan mor built ({text[0] if text else type(e).__name__}"
            f"{'; ' + detail.strip()[:200] if detail and detail != text[0] else ''})"
        ) from e
    if compiler is not None and query is not None:
        return compiler.run(query)  # the views' frames are built: spark.sql over them
    return run_query(spark, plan, frames)


def given(plan: SparkQuery, relations: dict[str, DataFrame]) -> list[DataFrame]:
    """The DataFrames handed in by name that the statement reads, in `plan.relations`'s
    order."""
    by_lower = {k.lower(): v for k, v in relations.items()}
    missing = [r for r in plan.relations if r not in by_lower]
    if missing:
        raise InternalError(f"the statement reads views {missing} the call did not hand in")
    return [by_lower[r] for r in plan.relations]


def run_query(
    spark: SparkSession, plan: SparkQuery, frames: list[DataFrame], analyse: bool = True
) -> DataFrame:
    """`spark.sql` of the statement, each scan bound under a name of its own; the user's
    session keeps no trace of the names.

    Classic: temporary views, dropped as soon as `spark.sql` returns (it analyses the statement
    then, and its plan holds the views' plans). Spark Connect analyses a plan again each time it
    runs, so the scans travel inside the SQL relation itself (`WithRelations`), and the query is
    analysed once here so that its errors come now, as for classic. With `analyse=False` that
    round trip is left to the caller that runs the query at once (`collect_rows`: the CLI's
    one query, 0.2 s of a command against a server, bench/start.py): the server analyses it
    in its execution, and its errors are named as here."""
    tag = uuid.uuid4().hex[:12]
    names = tuple(f"mor_scan_{i + 1}_{tag}" for i in range(len(plan.scans))) + tuple(
        f"mor_view_{i + 1}_{tag}" for i in range(len(plan.relations))
    )
    if len(names) != len(frames):
        raise InternalError("a frame per scan and per view handed in is needed")
    text, _ = plan.text_with(names)
    if is_connect(spark):
        try:
            df = _connect_sql(spark, text, names, frames)
            if analyse:
                df.schema  # noqa: B018 - analyse now: errors at the call, as on classic sessions
            else:
                df.__dict__[_DEFERRED] = (plan, names)
            return df
        except Exception as e:  # noqa: BLE001 - Spark's parse and analysis errors, as one line
            raise query_error(e, plan, names) from e
    try:
        for n, f in zip(names, frames):
            f.createOrReplaceTempView(n)
        return spark.sql(text)
    except Exception as e:  # noqa: BLE001 - Spark's parse and analysis errors, as one line
        raise query_error(e, plan, names) from e
    finally:
        for n in names:
            spark.catalog.dropTempView(n)


_DEFERRED = "_mor_unanalysed"  # on a Connect DataFrame run_query built with analyse=False


def collect_rows(df: DataFrame, limit: int | None = None) -> tuple[list[str], list[Any]]:
    """The columns and rows of a query's DataFrame (`limit`: at most that many rows). One built
    unanalysed (run_query) is analysed by this execution alone, and an analysis error is named
    as run_query names one; the columns come with the rows (asked apart only when there are
    none)."""
    run = df.limit(limit) if limit is not None else df
    try:
        rows = run.collect()
    except Exception as e:  # noqa: BLE001 - only Spark's analysis errors are named here
        from pyspark.errors import AnalysisException

        deferred = vars(df).get(_DEFERRED)
        if deferred is not None and isinstance(e, AnalysisException):
            raise query_error(e, *deferred) from e
        raise
    return (list(rows[0].__fields__) if rows else run.columns), rows


def _connect_sql(
    spark: SparkSession, text: str, names: tuple[str, ...], frames: list[DataFrame]
) -> DataFrame:
    """The SQL relation with each scan as a named relation of its own (what `spark.sql(text,
    **dataframes)` sends), under mor's names so that errors can be mapped back."""
    import inspect

    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame
    from pyspark.sql.connect.plan import SQL, SubqueryAlias

    if "views" not in inspect.signature(SQL.__init__).parameters:
        raise UnsupportedError(
            "this pyspark's Spark Connect client cannot send a query with DataFrame relations "
            "(pyspark 4.0 or later is needed for Spark Connect)"
        )
    views = [SubqueryAlias(f._plan, n) for n, f in zip(names, frames)]
    return ConnectDataFrame(SQL(text, None, None, views), spark)
