"""The physical plan's nodes: frozen, compared by identity, each holding the decisions the
physical rules took for it (rules/physical/__init__.py makes them; physical/describe.py formats
them; physical/compile.py translates them). No pyspark."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

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
)
from mor.rules.physical.equality import Resolution
from mor.rules.physical.positions import PositionStrategy
from mor.rules.physical.reading import Reading, SessionFacts


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


@dataclass(frozen=True, slots=True)
class JoinCondition:
    """What a left row matching a delete row means, as the anti-join's guards say: the keys
    equal (null-safe unless the manifests rule NULL out; float keys compared as text, as the
    delete scan gives them), the delete newer than the row's file (`seq_guard`), and in its
    partition unless global (`scope`: "" none; "partition": no delete of the side is global,
    so the scope is a join key, one hash entry per key and partition probed; "partition or
    global": each delete's partition, or any when it is global)."""

    keys: tuple[tuple[str, str, bool], ...]  # (data column, delete column, compared as text)
    null_safe: bool
    seq_guard: bool
    scope: str

    @classmethod
    def of(cls, aj: AntiJoin) -> JoinCondition:
        from mor.rules.physical.equality import scoped_only

        right = aj.right
        texts = right.text_keys() if isinstance(right, EqDeleteScan) else frozenset()
        scope = ""
        if aj.part_guard:
            scope = "partition" if scoped_only(right) else "partition or global"
        return cls(
            tuple((lk, rk, rk in texts) for lk, rk in aj.keys), aj.null_safe, aj.seq_guard, scope
        )


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
    # the position delete files Spark reads (the join method's Parquet files; deletion
    # vectors and resolved positions are held on the driver: DeleteTask.held), and how
    spark_deletes: tuple[DeleteTask, ...]
    delete_reading: Reading | None
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
    condition: JoinCondition
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
    filters); the positions are kept per data file (ProcessCaches.resolved)."""

    base: IcebergScan
    joins: tuple[AntiJoin, ...]
    resolution: Resolution
    sides: tuple[PhysicalNode, ...]
    conditions: tuple[JoinCondition, ...]  # of each join, with its side
    # what the job reads: the key columns of the missing files (every row: no filter of the
    # query, no position delete applied), with `_file` and `_pos`
    keys: IcebergScan

    @property
    def children(self) -> tuple[PhysicalNode, ...]:
        return self.sides


@dataclass(frozen=True, eq=False)
class ResolvedBranch(PhysicalNode):
    """A branch whose equality deletes are read as positions: a plain scan, with no
    anti-join. `scan` is final when every position is held; after `step` it is a preview
    (each file deleting as many rows as it could lose), planned again over the positions the
    step found by rules/physical's `replan_resolved`."""

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
            for kind, p in c.parts:
                if getattr(c.node, kind) is logical:
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
