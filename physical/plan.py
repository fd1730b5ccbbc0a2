"""The physical plan: what each part of an optimized logical plan becomes in Spark, decided once.

`plan_physical(plan, facts)` walks the logical plan and takes every decision the DataFrames
depend on, each by the function that owns it (no decision is taken anywhere else):

| decision                                  | taken by                                    |
|-------------------------------------------|---------------------------------------------|
| rows counted from metadata, no file read  | strategy.counted_from_metadata              |
| file lists or paths, the file key         | strategy.reading                            |
| position deletes: bitmap or join          | strategy.position_strategy                  |
| equality deletes: resolved or anti-joined | resolution.decide (resolved positions held) |
| delete sides: broadcast, compacted, kept  | strategy.broadcast_allowed, compacted_keys, |
|                                           | reuse.keeps                                 |
| a barrier above a scan of several reads   | strategy.needs_barrier                      |

The result is a tree of frozen nodes. `describe.describe_plan` formats it (EXPLAIN PHYSICAL);
`compile.Compiler` translates it into DataFrames and decides nothing. One node has side
effects and is a step of its own: `ResolveEqDeletes`, the Spark job that resolves equality
deletes to positions and keeps them in the process's caches (planner/state.py). It runs when
the branch above it is first translated; the branch's scan is then planned again over the
positions the job found (`ResolvedBranch.final`), as Spark's adaptive execution replans a
query stage after the stage before it ran. Remembering the files a filtered query joined (to
resolve them next time) is the other effect, carried by `AntiJoinExec.joined`.

This module does not import pyspark.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from mor.physical.resolution import Resolution, chain_of, decide, resolved_scan
from mor.physical.strategy import (
    PositionStrategy,
    Reading,
    SessionFacts,
    broadcast_allowed,
    compacted_keys,
    counted_from_metadata,
    eq_relation_bytes,
    keeps,
    named_as_table,
    needs_barrier,
    position_relation_bytes,
    position_strategy,
    reading,
)
from mor.planner.errors import InternalError
from mor.planner.nodes import (
    RESOLVED,
    AntiJoin,
    CommitChanges,
    EqDeleteScan,
    IcebergScan,
    MetadataTable,
    Plan,
    SparkQuery,
    TableChanges,
    Union,
)
from mor.planner.settings import current


@dataclass(frozen=True, eq=False)
class PhysicalNode:
    """A node of the physical plan. Compared by identity: a subtree two parents share is one
    node, formatted once and translated once."""

    @property
    def children(self) -> tuple[PhysicalNode, ...]:
        return ()

    def walk(self) -> Iterator[PhysicalNode]:
        """Every node once, children before parents."""
        seen: set[int] = set()

        def visit(n: PhysicalNode) -> Iterator[PhysicalNode]:
            if id(n) in seen:
                return
            seen.add(id(n))
            for c in n.children:
                yield from visit(c)
            yield n

        return visit(self)


@dataclass(frozen=True, eq=False)
class CountRows(PhysicalNode):
    """`spark.range(n)`: a scan needing no column and no filter, n from the files' record
    counts less the positions deleted (read on the driver); no data file is read."""

    scan: IcebergScan


@dataclass(frozen=True, eq=False)
class ReadData(PhysicalNode):
    """A scan's data files read by Spark, its filters pushed, its position deletes removed by
    `positions` (None: no file has any), its metadata columns joined."""

    scan: IcebergScan
    reading: Reading
    positions: PositionStrategy | None
    delete_reading: Reading | None  # the join method's position delete files, read by Spark
    estimate: int  # the join method's deleted positions: estimated bytes
    broadcast: bool  # ... broadcast (else shuffled)
    persist: bool  # ... kept in Spark's cache


@dataclass(frozen=True, eq=False)
class ReadEqDeletes(PhysicalNode):
    """The keys of an equality delete scan's files."""

    node: EqDeleteScan
    reading: Reading
    compact: bool  # several files' keys compacted (only when not broadcast)
    estimate: int  # estimated bytes of the side
    persist: bool  # kept in Spark's cache across queries
    broadcast: bool


@dataclass(frozen=True, eq=False)
class AntiJoinExec(PhysicalNode):
    """Rows of `left` that no delete key of `right` matches (the anti-join's guards). `joined`:
    the decision of the chain this joins at its top, when resolution was considered."""

    node: AntiJoin
    left: PhysicalNode
    right: PhysicalNode
    joined: Resolution | None = None
    branch: IcebergScan | None = None  # the chain's scan, when `joined`

    @property
    def children(self) -> tuple[PhysicalNode, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, eq=False)
class ResolveEqDeletes(PhysicalNode):
    """A step with effects: one Spark job finds the positions the equality deletes of `joins`
    remove from the data files the process holds none for (`resolution.missing`), reading
    their key columns semi-joined with each delete side (`sides`, without the query's
    filters); the positions are kept per data file (caches().resolved)."""

    base: IcebergScan
    joins: tuple[AntiJoin, ...]
    resolution: Resolution
    sides: tuple[PhysicalNode, ...]

    @property
    def children(self) -> tuple[PhysicalNode, ...]:
        return self.sides


@dataclass(frozen=True, eq=False)
class ResolvedBranch(PhysicalNode):
    """A branch whose equality deletes are read as positions: a plain scan, with no
    anti-join. `scan` is final when every position is held; after `step` it is a preview
    (each file deleting as many rows as it could lose), and `final` plans it again over the
    positions the step found."""

    node: AntiJoin
    base: IcebergScan
    resolution: Resolution
    needed: frozenset[str] | None
    step: ResolveEqDeletes | None
    scan: PhysicalNode
    facts: SessionFacts = field(repr=False, default=SessionFacts())

    @property
    def children(self) -> tuple[PhysicalNode, ...]:
        return (self.step, self.scan) if self.step is not None else (self.scan,)

    def final(self, found: dict | None) -> PhysicalNode:
        """The branch's scan over the positions `step` found (`found`: by recorded path)."""
        if self.step is None:
            return self.scan
        if found is None:
            raise InternalError("a resolved branch planned before its step ran")
        return _scan(resolved_scan(self.base, self.resolution, self.needed, found), self.facts)


@dataclass(frozen=True, eq=False)
class UnionExec(PhysicalNode):
    """`unionAll` of the inputs, each projected to the union's columns."""

    node: Union
    inputs: tuple[PhysicalNode, ...]

    @property
    def children(self) -> tuple[PhysicalNode, ...]:
        return self.inputs


@dataclass(frozen=True, eq=False)
class MetadataRows(PhysicalNode):
    """A metadata table's rows, read at planning: a DataFrame of them."""

    node: MetadataTable


@dataclass(frozen=True, eq=False)
class CommitExec(PhysicalNode):
    """One commit's changes: its parts (removed, before, after, added) as rows tagged."""

    node: CommitChanges
    parts: tuple[tuple[str, PhysicalNode], ...]

    @property
    def children(self) -> tuple[PhysicalNode, ...]:
        return tuple(p for _, p in self.parts)


@dataclass(frozen=True, eq=False)
class ChangesExec(PhysicalNode):
    """`table_changes`: the commits' rows unioned, identical pairs of one commit cancelled."""

    node: TableChanges
    commits: tuple[CommitExec, ...]

    @property
    def children(self) -> tuple[PhysicalNode, ...]:
        return self.commits

    def part(self, logical: Plan) -> PhysicalNode:
        """The node planned for one logical part of a commit."""
        for c in self.commits:
            for _, p in c.parts:
                if _logical(p) is logical:
                    return p
        raise InternalError("a part of table_changes the physical plan does not hold")


@dataclass(frozen=True, eq=False)
class ViewExec(PhysicalNode):
    """One table read of the query, bound under a name of its own: the table's column names
    (unless `input` has them), behind a barrier when `barrier`."""

    logical: Plan
    input: PhysicalNode
    barrier: bool
    named: bool

    @property
    def children(self) -> tuple[PhysicalNode, ...]:
        return (self.input,)


@dataclass(frozen=True, eq=False)
class QueryExec(PhysicalNode):
    """`spark.sql` of the statement over the views."""

    node: SparkQuery
    views: tuple[ViewExec, ...]

    @property
    def children(self) -> tuple[PhysicalNode, ...]:
        return self.views


def _logical(node: PhysicalNode) -> Plan | None:
    for name in ("scan", "node", "logical"):
        v = getattr(node, name, None)
        if isinstance(v, Plan):
            return v
    return None


def plan_physical(plan: Plan, facts: SessionFacts) -> PhysicalNode:
    """The physical plan of an optimized logical plan, for a session of these facts."""
    return Planner(facts).plan(plan)


def _scan(scan: IcebergScan, facts: SessionFacts) -> PhysicalNode:
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
    strategy = position_strategy(tasks, deletes, how.key) if tasks else None
    delete_reading, est, broadcast, persist = None, 0, False, False
    if strategy is not None:
        est = position_relation_bytes(strategy, how.key.is_long)
        broadcast = broadcast_allowed(strategy.delete_rows, est, facts.broadcast_limit)
    if strategy is not None and strategy.method != "bitmap":
        used = sorted({p for t in tasks for p in t.pos_deletes})
        files = [deletes[p] for p in used if not deletes[p].is_dv and deletes[p].kind != RESOLVED]
        if files:
            delete_reading = reading(files, facts, 1)
        persist = keeps(est, current().delete_cache_bytes)
    return ReadData(scan, how, strategy, delete_reading, est, broadcast, persist)


class Planner:
    def __init__(self, facts: SessionFacts) -> None:
        self.facts = facts
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
                return _scan(node, self.facts)
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
                decided = self._resolution(node)
                if isinstance(decided, PhysicalNode):
                    return decided
                self.inner.add(id(left))
                branch = None
                if decided is not None:
                    chain = chain_of(node)
                    branch = chain[0] if chain is not None else None
                return AntiJoinExec(node, self.plan(left), self.plan(right), decided, branch)
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

    def _resolution(self, node: AntiJoin) -> PhysicalNode | Resolution | None:
        """The branch as a resolved scan (a node), or the decision to join it (None when
        resolution does not apply: an inner anti-join, a chain over no planned files)."""
        chain = chain_of(node)
        if chain is None or id(node) in self.inner:
            return None
        base, joins = chain
        res = decide(base, joins)
        if res.method != "positions":
            return res
        step = None
        if res.missing:
            sides = tuple(self.plan(self._unfiltered(j.right)) for j in joins)
            step = ResolveEqDeletes(base, joins, res, sides)
        needed = self.needed.get(id(node))
        scan = _scan(resolved_scan(base, res, needed, preview=True), self.facts)
        return ResolvedBranch(node, base, res, needed, step, scan, self.facts)

    def _unfiltered(self, side: Plan) -> Plan:
        """A delete side without the query's filters, one per side (the resolving job reads
        every row of the files it resolves)."""
        if id(side) not in self.unfiltered:
            self.unfiltered[id(side)] = replace(side, pushed=())
        return self.unfiltered[id(side)]
