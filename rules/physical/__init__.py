"""Physical rules: what each part of an optimized logical plan becomes in Spark, decided once.

`plan_physical(plan, facts, cache)` walks the logical plan and takes every decision the DataFrames
depend on, each by the function that owns it; the nodes hold them, so that the formatter and
the compiler read them off (tests/test_rules.py checks each node kind has both):

| decision                                  | rule (rules/physical/...)                   |
|-------------------------------------------|---------------------------------------------|
| rows counted from metadata, no file read  | counts.counted_from_metadata                |
| file lists or paths, the file key         | reading.reading                             |
| position deletes: bitmap or join          | positions.position_strategy                 |
| equality deletes: resolved or anti-joined | equality.decide (resolved positions held)   |
| delete sides: broadcast, compacted, kept  | broadcast.broadcast_allowed, compacted_keys,|
|                                           | keeps                                       |
| a barrier above a scan of several reads   | views.needs_barrier                         |
| position deletes held on the driver or    | DeleteTask.held (planner/nodes.py), the     |
| read by Spark                             | files on ReadData.spark_deletes             |
| an anti-join's condition and scope        | nodes.JoinCondition.of                      |
| what the resolving job reads              | equality.resolving_scan                     |

The result is a tree of frozen nodes (nodes.py). physical/describe.py formats it (EXPLAIN
PHYSICAL); physical/compile.py translates it into DataFrames. One node has side effects and is
a step of its own: `ResolveEqDeletes`, the Spark job that resolves equality deletes to
positions and keeps them in the process's caches (planner/state.py). It runs when the branch
above it is first translated; the branch's scan is then planned again here over the positions
the job found (`replan_resolved`), as Spark's adaptive execution replans a query stage after
the stage before it ran. Remembering the files a filtered query joined (to
resolve them next time) is the other effect, carried by `AntiJoinExec.joined`.

No module here imports pyspark. `trace()` lists the decisions of a plan, one line each
(EXPLAIN VERBOSE prints them after the logical rules' trace).
"""

from __future__ import annotations

from dataclasses import replace

from mor.planner.errors import InternalError
from mor.planner.nodes import (
    AntiJoin,
    CommitChanges,
    DeleteTask,
    EqDeleteScan,
    IcebergScan,
    MetadataTable,
    Plan,
    SparkQuery,
    TableChanges,
    Union,
    show_ids,
)
from mor.planner.settings import current
from mor.planner.state import ProcessCaches
from mor.rules.physical.broadcast import (
    broadcast_allowed,
    compacted_keys,
    eq_relation_bytes,
    keeps,
    position_relation_bytes,
)
from mor.rules.physical.counts import counted_from_metadata
from mor.rules.physical.equality import (
    Resolution,
    chain_of,
    decide,
    resolved_scan,
    resolving_scan,
)
from mor.rules.physical.nodes import (
    AntiJoinExec,
    ChangesExec,
    CommitExec,
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
from mor.rules.physical.positions import position_strategy
from mor.rules.physical.reading import SessionFacts, reading
from mor.rules.physical.views import named_as_table, needs_barrier


def plan_physical(plan: Plan, facts: SessionFacts, cache: ProcessCaches) -> PhysicalNode:
    """The physical plan of an optimized logical plan, for a session of these facts and a
    process that keeps what `cache` holds (resolved positions)."""
    return Planner(facts, cache).plan(plan)


def plan_scan(scan: IcebergScan, facts: SessionFacts) -> PhysicalNode:
    """The node of one scan: its rows counted from metadata, or its files read (how, and
    how their position deletes are removed)."""
    tasks = scan.data_files()
    deletes = scan.deletes_by_id()
    if tasks and counted_from_metadata(
        len(scan.fields),
        len(scan.hidden),
        len(scan.meta),
        len(scan.pushed),
        len(scan.eq_sets),
        tasks,
        deletes,
    ):
        return CountRows(scan)
    how = reading(tasks, facts)
    strategy = position_strategy(tasks, deletes, how.key)
    delete_reading, est, broadcast, persist = None, 0, False, False
    files: tuple[DeleteTask, ...] = ()
    if strategy is not None:
        est = position_relation_bytes(strategy, how.key.is_long)
        broadcast = broadcast_allowed(strategy.delete_rows, est, facts.broadcast_limit)
    if strategy is not None and strategy.method != "bitmap":
        used = sorted({p for t in tasks for p in t.pos_deletes})
        files = tuple(deletes[p] for p in used if not deletes[p].held)
        if files:
            delete_reading = reading(files, facts, 1)
        persist = keeps(est, current().delete_cache_bytes)
    return ReadData(scan, how, strategy, files, delete_reading, est, broadcast, persist)


def replan_resolved(branch: ResolvedBranch, found: dict | None) -> PhysicalNode:
    """The scan of a resolved branch over the positions its step found (`found`: by
    recorded path), or its scan as planned when every position was held."""
    if branch.step is None:
        return branch.scan
    if found is None:
        raise InternalError("a resolved branch planned before its step ran")
    return plan_scan(
        resolved_scan(branch.base, branch.resolution, branch.needed, found), branch.facts
    )


class Planner:
    """Plans the nodes of one query (a node planned twice is one physical node)."""

    def __init__(self, facts: SessionFacts, cache: ProcessCaches, every: bool = False) -> None:
        self.facts = facts
        self.cache = cache  # read only: the resolved positions held, the files joined before
        self.every = every  # every branch's equality deletes resolved (equality.decide)
        self.done: dict[int, tuple[Plan, PhysicalNode]] = {}
        self.needed: dict[int, frozenset[str]] = {}  # a union's columns, by input
        self.inner: set[int] = set()  # anti-joins under another one: joined with their chain
        self.unfiltered: dict[int, Plan] = {}  # delete sides for resolution, by side

    def plan(self, node: Plan) -> PhysicalNode:
        hit = self.done.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        out = self._plan(node)
        self.done[id(node)] = (node, out)
        return out

    def _plan(self, node: Plan) -> PhysicalNode:
        match node:
            case IcebergScan():
                return plan_scan(node, self.facts)
            case EqDeleteScan():
                limit = self.facts.broadcast_limit
                est = eq_relation_bytes(node)
                return ReadEqDeletes(
                    node,
                    reading(node.files, self.facts),
                    compacted_keys(node, limit),
                    est,
                    keeps(est, current().delete_cache_bytes),
                    broadcast_allowed(node.rows(), est, limit),
                )
            case AntiJoin(left=left, right=right):
                # a chain is resolved or joined whole: its inner anti-joins decide nothing
                chain = None if id(node) in self.inner else chain_of(node)
                res = decide(*chain, self.cache, self.every) if chain is not None else None
                if chain is not None and res is not None and res.method == "positions":
                    return self._resolved(node, chain[0], chain[1], res)
                self.inner.add(id(left))
                base = chain[0] if chain is not None else None
                return AntiJoinExec(
                    node, self.plan(left), self.plan(right), JoinCondition.of(node), res, base
                )
            case Union(inputs=inputs, columns=cols):
                needed = frozenset(c.name for c in cols)
                for i in inputs:
                    self.needed[id(i)] = needed
                return UnionExec(node, tuple(self.plan(i) for i in inputs))
            case MetadataTable():
                if node.data is None:
                    raise InternalError(f"metadata table {node.table}.{node.kind} was not read")
                return MetadataRows(node)
            case CommitChanges():
                return CommitExec(node, tuple((k, self.plan(p)) for k, p in node.parts()))
            case TableChanges(commits=commits):
                return ChangesExec(node, tuple(self.plan(c) for c in commits or ()))  # type: ignore[misc]
            case SparkQuery(scans=scans):
                views = tuple(
                    ViewExec(s, self.plan(s), needs_barrier(s, self.facts), named_as_table(s))
                    for s in scans
                )
                return QueryExec(node, views)
        raise InternalError(f"no physical operator for {type(node).__name__}")

    def _resolved(
        self, node: AntiJoin, base: IcebergScan, joins: tuple[AntiJoin, ...], res: Resolution
    ) -> ResolvedBranch:
        """The branch as a plain scan over resolved positions, after a step resolving the files
        no earlier query did."""
        step = None
        if res.missing:
            sides = tuple(self.plan(self._unfiltered(j.right)) for j in joins)
            conditions = tuple(JoinCondition.of(j) for j in joins)
            step = ResolveEqDeletes(
                base, joins, res, sides, conditions, resolving_scan(base, joins, res)
            )
        needed = self.needed.get(id(node))
        scan = plan_scan(resolved_scan(base, res, needed, preview=True), self.facts)
        return ResolvedBranch(node, base, res, needed, step, scan, self.facts)

    def _unfiltered(self, side: Plan) -> Plan:
        """A delete side without the query's filters, one per side (the resolving job reads
        every row of the files it resolves)."""
        if id(side) not in self.unfiltered:
            self.unfiltered[id(side)] = replace(side, pushed=())
        return self.unfiltered[id(side)]


def trace(plan: PhysicalNode) -> list[str]:
    """The decisions of a physical plan, one line each, named by the rule that took them (as
    the logical rules' trace names each rule): what EXPLAIN VERBOSE prints."""
    out = []
    for n in plan.walk():
        match n:
            case CountRows(scan=scan):
                out.append(f"counts: {scan.table}: rows from metadata, no data file read")
            case ReadData(scan=scan, reading=how, positions=pos):
                files = len(scan.data_files())
                out.append(
                    f"reading: {scan.table}: {files} data file(s) "
                    + (
                        f"through file lists, {how.reads} read(s)"
                        if how.listed
                        else f"by path ({how.why})"
                    )
                    + f", keyed by {how.key.kind}"
                )
                if pos is not None:
                    out.append(
                        f"positions: {scan.table}: {pos.method} for {pos.data_files} data "
                        f"file(s), {pos.delete_rows} delete row(s)"
                        + (
                            ""
                            if pos.method == "bitmap"
                            else ", " + ("broadcast" if n.broadcast else "shuffled")
                        )
                    )
            case ReadEqDeletes(node=eq):
                out.append(
                    f"broadcast: equality deletes {show_ids(eq.eq_set)} of {eq.table}: "
                    + ("broadcast" if n.broadcast else "shuffled")
                    + (", compacted" if n.compact else "")
                    + (", kept in Spark's cache" if n.persist else "")
                )
            case AntiJoinExec(joined=res) if res is not None:
                out.append(f"equality: {show_ids(n.node.eq_set)}: anti-joined ({res.why})")
            case ResolvedBranch(resolution=res, base=base):
                held, missing = len(res.held), len(res.missing)
                out.append(
                    f"equality: branch of {len(base.data_files())} data file(s) of {base.table}: "
                    f"resolved positions ({held} held, {missing} resolved by this query)"
                )
            case ViewExec(logical=logical, barrier=barrier) if barrier:
                out.append(f"views: {type(logical).__name__} behind a barrier (several reads)")
    return out
