"""Logical plan nodes: small, frozen, keyword-only values.

The root is a SparkQuery: the user's statement, which Spark plans, over one merge-on-read scan
per table reference. Below it, every node exposes `output` (the columns it produces, by internal
name) and `children`. Internal column names are unique within one scan's subtree (a table
column is named as in the table); the physical layer refers to columns only by these names.
Columns the planner adds itself start with `$`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from sqlglot import exp

from mor.planner.errors import InternalError

# Columns added by the planner for merge-on-read.
DATA_SEQ = "$data_seq"  # data sequence number of the data file a row came from
PART = "$partition"  # small integer id of the (spec id, partition tuple) of that file
DEL_SEQ = "$del_seq"  # data sequence number of the equality delete file a key came from
DEL_PART = "$del_partition"  # partition id of that delete file, GLOBAL_PART when global
GLOBAL_PART = -1
# DeleteTask.kind of an equality delete's positions in one data file, resolved by an earlier
# read (rules/physical/equality.py): no file, the positions carried in memory
RESOLVED = "resolved"
# metadata columns of every scan, read only when the query names them
HIDDEN_COLUMNS = (
    "_file",
    "_pos",
    "_spec_id",
    "_partition",
    "_row_id",
    "_last_updated_sequence_number",
)
# row lineage (v3 tables only): the value stored in the data file, else inherited from the file's
# first_row_id + _pos, and its data sequence number
LINEAGE_COLUMNS = {"_row_id": 2147483540, "_last_updated_sequence_number": 2147483539}


def show_ids(ids: frozenset[int]) -> str:
    """An equality field-id set as EXPLAIN and metrics print it: {1,3}."""
    return "{" + ",".join(str(i) for i in sorted(ids)) + "}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Col:
    """One output column: `name` is the unique internal name, `label` what the user wrote."""

    name: str
    label: str
    field_id: int | None = None

    def show(self) -> str:
        return f"{self.label}({self.field_id})" if self.field_id is not None else self.label


@dataclass(frozen=True, slots=True, kw_only=True)
class Pred:
    """A simple predicate on one table column, usable for metadata pruning.

    op is one of = != < <= > >= in isnull notnull; `values` holds Python literals.
    """

    column: str  # internal column name
    op: str
    values: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Expr:
    """A bound predicate over a scan's columns: a sqlglot tree nobody mutates (`.copy()` before a
    transform). Columns are named by the scan's internal column names; `text` is how EXPLAIN
    prints it, with the names the user wrote."""

    tree: exp.Expression
    text: str
    refs: frozenset[str]
    pred: Pred | None = None

    @property
    def sql(self) -> str:
        """Spark SQL text, every identifier quoted (internal names may hold any character)."""
        return self.tree.sql(dialect="spark", identify=True)

    def renamed(self, names: dict[str, str]) -> Expr:
        """The same predicate over other column names (`names`: old -> new)."""

        def rename(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Column) and node.name in names:
                return exp.column(exp.to_identifier(names[node.name], quoted=True))
            return node

        pred = self.pred
        if pred is not None and pred.column in names:
            pred = replace(pred, column=names[pred.column])
        return replace(
            self,
            tree=self.tree.copy().transform(rename),
            refs=frozenset(names.get(r, r) for r in self.refs),
            pred=pred,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadField:
    """A column an Iceberg scan reads, bound to its field id and Iceberg type (as a string)."""

    col: Col
    field_id: int
    type_str: str  # Iceberg type, e.g. "long", "decimal(10, 2)", "struct<...>" (JSON for nested)
    path: tuple[tuple[str, int], ...] = ()  # for a nested field: (name, id) of the structs above
    # v3 `initial-default` as a Spark SQL literal: what files without the column read
    default: str | None = None

    @property
    def compared_as_text(self) -> bool:
        """A float or double equality key: compared as Iceberg's Java reader does
        (Double.equals: -0.0 is not 0.0, NaN is NaN), which Spark's `=`, `<=>`, joins and
        grouping do not; the physical layer compares such keys by their text."""
        return self.type_str in ('"float"', '"double"')


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """How a group of files is read (see planner.layouts). Columns are always read by name
    (never by Parquet field id, which would need a session setting that changes the user's own
    reads): the names come from the table's schema or from the file.

    The default layout (index 0 of ScanFiles.layouts, `by_name=False`) reads every field by
    its name in the table's schema, with the table's types: exact when no name in the table's
    history was ever used by another field id (planning reads footers otherwise).
    `by_name=True`: the file's own names, in `fields` as (field id, name in the file, physical
    type or None); a field id not listed is absent from the file and reads as NULL. With
    `nested=False` (files without field ids, matched by the table's name mapping) only
    top-level fields are listed and nested fields keep the schema's names.
    """

    by_name: bool = False
    nested: bool = False
    fields: tuple[tuple[int, str | None, str | None], ...] = ()
    # field ids with an initial default (v3) that these files do not have: they read the default
    absent: frozenset[int] = frozenset()

    def override(self, field_id: int) -> tuple[str | None, str | None] | None:
        for fid, name, phys in self.fields:
            if fid == field_id:
                return name, phys
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class DataTask:
    """One data file of a scan, with what the planner decided about its deletes."""

    file_id: int
    path: str  # as recorded in the manifest (used for matching position deletes)
    read_path: str  # after the path map: what is opened
    data_seq: int
    spec_id: int
    partition_id: int
    record_count: int
    size_bytes: int
    pos_deletes: tuple[int, ...] = ()  # file ids of position delete files that apply
    eq_sets: tuple[frozenset[int], ...] = ()  # equality id sets with a delete that applies
    layout: int = 0  # index into ScanFiles.layouts
    partition: tuple[tuple[int, Any], ...] = ()  # (partition field id, value) of its spec
    # row lineage (v3): the first row's id, recorded or inherited; None before v3
    first_row_id: int | None = None
    eq_deletes: tuple[int, ...] = ()  # file ids of the equality delete files that apply


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTask:
    """One delete file (`kind` "position" or "equality"), or the positions equality deletes
    remove from one data file, resolved (RESOLVED). `partition_id` is GLOBAL_PART for a global
    equality delete."""

    file_id: int
    kind: str  # "position", "equality" or RESOLVED
    path: str
    read_path: str
    data_seq: int
    spec_id: int
    partition_id: int
    record_count: int
    size_bytes: int
    eq_ids: frozenset[int] = frozenset()
    layout: int = 0  # index into ScanFiles.layouts
    # equality field ids whose manifest entry records a null count of 0 (no NULL key)
    null_free: frozenset[int] = frozenset()
    # a deletion vector (Iceberg v3): its blob's place in the Puffin file `path` and the one
    # data file it names; None for a Parquet delete file
    dv: DvBlob | None = None
    # a position delete file (or vector) naming one data file alone: its path as recorded
    # (what a writer adding a deletion vector for that file replaces); None otherwise
    names_one: str | None = None
    # a resolved equality delete (kind RESOLVED): (data file path as recorded, its deleted
    # positions); its path names the key the positions were resolved under, so equality and
    # hashing (which leave this out) still tell two apart
    positions: Any = field(default=None, compare=False, hash=False, repr=False)

    @property
    def is_dv(self) -> bool:
        return self.dv is not None

    @property
    def held(self) -> bool:
        """Positions the driver holds (a deletion vector, read there; resolved positions),
        as opposed to a Parquet position delete file, which Spark reads under the join
        method (the one place this split is decided)."""
        return self.dv is not None or self.kind == RESOLVED

    @property
    def identity(self) -> tuple[str, int]:
        """The delete's identity across snapshots: its path, and for a deletion vector its
        blob's offset (the vectors of many data files share one Puffin file)."""
        return (self.path, self.dv.offset if self.dv is not None else -1)


@dataclass(frozen=True, slots=True)
class DvBlob:
    """Where a deletion vector's blob lies in its Puffin file, and the data file it applies to."""

    offset: int
    length: int
    referenced_data_file: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Pruning:
    """What scan planning kept of what, for EXPLAIN."""

    manifests_data: tuple[int, int] = (0, 0)  # kept, total
    manifests_delete: tuple[int, int] = (0, 0)
    data_files: tuple[int, int, int] = (0, 0, 0)  # total, after partition, after column bounds
    pos_deletes: tuple[int, int] = (0, 0)  # total live, kept (Parquet files)
    dvs: tuple[int, int] = (0, 0)  # deletion vectors: total live, kept
    eq_deletes: tuple[tuple[frozenset[int], int, int], ...] = ()  # id set, total, kept
    # a row limit (IcebergScan.limit): (rows, data files kept, data manifests read); the
    # figures above then count the manifests read
    limit: tuple[int, int, int] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EqField:
    """A field named by some equality delete's `equality_ids`, found in the schema history."""

    field_id: int
    name: str
    type_str: str
    path: tuple[tuple[str, int], ...] = ()
    default: str | None = None  # as ReadField.default


@dataclass(frozen=True, slots=True, kw_only=True)
class PartField:
    """A partition field of any of the table's specs: `_partition` has one child per field."""

    field_id: int
    name: str
    type_str: str  # the transform's result type, as pyiceberg's JSON


@dataclass(frozen=True, slots=True, kw_only=True)
class ScanFiles:
    """The outcome of scan planning for one Iceberg scan."""

    snapshot_id: int | None
    sequence_number: int
    data: tuple[DataTask, ...]
    deletes: tuple[DeleteTask, ...]
    partitions: tuple[str, ...]  # partition id -> printable "spec 0: category='widget'"
    pruning: Pruning = field(default_factory=Pruning)
    eq_fields: tuple[EqField, ...] = ()
    layouts: tuple[Layout, ...] = (Layout(),)
    partition_fields: tuple[PartField, ...] = ()


class Plan:
    """Base class of logical plan nodes. `_kids` names the fields that hold child plans."""

    _kids: ClassVar[tuple[str, ...]] = ()

    @property
    def children(self) -> tuple[Plan, ...]:
        return tuple(getattr(self, k) for k in self._kids)

    def with_children(self, new: tuple[Plan, ...]) -> Plan:
        if all(a is b for a, b in zip(self.children, new)):
            return self
        return replace(self, **dict(zip(self._kids, new)))  # type: ignore[type-var]

    @property
    def output(self) -> tuple[Col, ...]:
        raise NotImplementedError

    def transform_up(self, fn: Callable[[Plan], Plan]) -> Plan:
        """Apply `fn` bottom-up; returns the same object when nothing changed."""
        kids = self.children
        node = self.with_children(tuple(k.transform_up(fn) for k in kids)) if kids else self
        return fn(node)

    def walk(self) -> Iterator[Plan]:
        yield self
        for c in self.children:
            yield from c.walk()


def _names(cols: tuple[Col, ...]) -> set[str]:
    return {c.name for c in cols}


@dataclass(frozen=True, slots=True, kw_only=True)
class IcebergScan(Plan):
    """Rows of one Iceberg table at one snapshot, position deletes already applied.

    Before scan planning `files` is None. After the equality rule splits it, a scan carries
    only the data files of its branch (`branch` = (index, count)) and the equality id sets
    they need (`eq_sets`); `meta` lists the `$` columns the branch's anti-joins need.
    """

    table: str  # printable table name
    source_key: str  # identifies the table source (metadata location) for the physical layer
    # the table's FileIO (the catalog's, counting its requests): what its delete files and
    # sizes are read through on the driver; not part of what the node is (compare=False)
    io: Any = field(default=None, compare=False, hash=False, repr=False)
    snapshot_id: int | None
    schema_id: int
    fields: tuple[ReadField, ...]
    pushed: tuple[Expr, ...] = ()
    files: ScanFiles | None = None
    branch: tuple[int, int] | None = None
    eq_sets: tuple[frozenset[int], ...] = ()
    meta: tuple[str, ...] = ()
    # metadata columns the query reads, as Iceberg's Spark reader names them (HIDDEN_COLUMNS)
    hidden: tuple[str, ...] = ()
    # the live rows the query needs at most (a LIMIT over this scan alone: planner.pushdown);
    # scan planning then keeps only files sure to hold that many
    limit: int | None = None

    def __post_init__(self) -> None:
        for h in self.hidden:
            if h not in HIDDEN_COLUMNS:
                raise InternalError(f"unknown metadata column {h}")

    @property
    def output(self) -> tuple[Col, ...]:
        return (
            tuple(f.col for f in self.fields)
            + tuple(Col(name=h, label=h) for h in self.hidden)
            + tuple(Col(name=m, label=m) for m in self.meta)
        )

    def data_files(self) -> tuple[DataTask, ...]:
        return self.files.data if self.files else ()

    def deletes_by_id(self) -> dict[int, DeleteTask]:
        """The scan's delete files by file id (what a data file's `pos_deletes` name)."""
        return {d.file_id: d for d in self.files.deletes} if self.files else {}

    def rows_estimate(self) -> int:
        return sum(d.record_count for d in self.data_files())


@dataclass(frozen=True, slots=True, kw_only=True)
class EqDeleteScan(Plan):
    """The keys of the equality delete files of one id set, with `$del_seq` and `$del_partition`."""

    table: str
    source_key: str
    io: Any = field(default=None, compare=False, hash=False, repr=False)  # as IcebergScan's
    eq_set: frozenset[int]
    keys: tuple[ReadField, ...]  # one per field id of eq_set, in field-id order
    files: tuple[DeleteTask, ...]
    partitions: tuple[str, ...] = ()
    layouts: tuple[Layout, ...] = (Layout(),)
    meta: bool = True  # carry $del_seq/$del_partition (False when no consumer has a guard)
    # the data scan's filters on key columns, over the delete side's names: a delete row that
    # fails them has key values no surviving data row has, so it can never match
    pushed: tuple[Expr, ...] = ()

    @property
    def output(self) -> tuple[Col, ...]:
        keys = tuple(k.col for k in self.keys)
        if not self.meta:
            return keys
        return keys + (Col(name=DEL_SEQ, label=DEL_SEQ), Col(name=DEL_PART, label=DEL_PART))

    def rows(self) -> int:
        return sum(f.record_count for f in self.files)

    def text_keys(self) -> frozenset[str]:
        """Names of the key columns compared as text (ReadField.compared_as_text)."""
        return frozenset(k.col.name for k in self.keys if k.compared_as_text)


@dataclass(frozen=True, slots=True, kw_only=True)
class AntiJoin(Plan):
    """Rows of `left` with no null-safe match in `right` on `keys`; a match counts only
    when left.$data_seq < right.$del_seq and the partitions agree (or the delete is global)."""

    _kids: ClassVar[tuple[str, ...]] = ("left", "right")

    left: Plan
    right: Plan
    eq_set: frozenset[int]
    keys: tuple[tuple[str, str], ...]  # (left column, right column), in field-id order
    # the guards stay unless planning proved them true for every pair of files they could see
    seq_guard: bool = True  # left.$data_seq < right.$del_seq
    part_guard: bool = True  # right is global, or left.$partition = right.$del_partition
    # `<=>` on the keys; `=` (the same result, and a faster join) when the manifests record
    # that no delete key is NULL: a NULL data key then matches nothing either way
    null_safe: bool = True

    def __post_init__(self) -> None:
        lnames, rnames = _names(self.left.output), _names(self.right.output)
        for lk, rk in self.keys:
            if lk not in lnames or rk not in rnames:
                raise InternalError(f"anti-join key {lk}/{rk} is not produced by its input")
        if self.seq_guard and DATA_SEQ not in lnames:
            raise InternalError("a sequence-guarded anti-join needs $data_seq on its left")
        if self.part_guard and PART not in lnames:
            raise InternalError("a partition-guarded anti-join needs $partition on its left")

    @property
    def output(self) -> tuple[Col, ...]:
        return self.left.output


@dataclass(frozen=True, slots=True, kw_only=True)
class Union(Plan):
    """UNION ALL of `inputs`, each projected to `columns` by internal name."""

    inputs: tuple[Plan, ...]
    columns: tuple[Col, ...]

    @property
    def children(self) -> tuple[Plan, ...]:
        return self.inputs

    def with_children(self, new: tuple[Plan, ...]) -> Plan:
        if all(a is b for a, b in zip(self.inputs, new)):
            return self
        return replace(self, inputs=tuple(new))

    def __post_init__(self) -> None:
        want = _names(self.columns)
        for p in self.inputs:
            if not want <= _names(p.output):
                raise InternalError("a union branch lacks some of the union's columns")

    @property
    def output(self) -> tuple[Col, ...]:
        return self.columns


METADATA_TABLES = (
    "snapshots",
    "history",
    "refs",
    "files",
    "data_files",
    "delete_files",
    "manifests",
    "partitions",
    "entries",
    "metadata_log_entries",
    "all_files",
    "all_data_files",
    "all_delete_files",
    "all_manifests",
)
# the metadata tables that describe one snapshot (time travel picks it)
SNAPSHOT_METADATA_TABLES = ("files", "data_files", "delete_files", "partitions", "entries")


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataTable(Plan):
    """An Iceberg metadata table (`ns.t.snapshots`, `ns.t.files`, ...), as Iceberg's Spark
    reader names them. Planning fills `data` (an Arrow table, from pyiceberg's inspect)."""

    table: str
    source_key: str
    kind: str  # one of METADATA_TABLES
    snapshot_id: int | None = None
    data: Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in METADATA_TABLES:
            raise InternalError(f"unknown metadata table {self.kind}")

    @property
    def output(self) -> tuple[Col, ...]:
        if self.data is None:
            return ()
        return tuple(Col(name=n, label=n) for n in self.data.column_names)

    def rows(self) -> int | None:
        return None if self.data is None else self.data.num_rows


CHANGE_TYPE = "_change_type"
CHANGE_ORDINAL = "_change_ordinal"
COMMIT_SNAPSHOT_ID = "_commit_snapshot_id"
CHANGE_COLUMNS = (CHANGE_TYPE, CHANGE_ORDINAL, COMMIT_SNAPSHOT_ID)
# the parts of one commit's changes (CommitChanges), in the order EXPLAIN shows them
CHANGE_PARTS = ("removed", "before", "after", "added")


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitChanges(Plan):
    """The row changes of one commit (snapshot `snapshot_id` over its parent `parent_id`).

    Each part is a scan (after the rules, a plan) of some data files, with `_file` and `_pos`:
    - `removed`: rows live at the parent in the data files the commit removed (DELETE);
    - `added`: rows live at the commit in the data files it added (INSERT);
    - `before` / `after`: rows live at the parent / at the commit in the data files both hold
      whose deletes the commit changed: rows of `before` missing from `after` by (_file, _pos)
      are DELETE, rows of `after` missing from `before` INSERT.
    A part the commit does not need is None. A `replace` commit (compaction) reads nothing.
    """

    snapshot_id: int
    parent_id: int | None
    ordinal: int
    operation: str
    timestamp_ms: int
    removed: Plan | None = None
    before: Plan | None = None
    after: Plan | None = None
    added: Plan | None = None
    # every kept file's deletes at the commit include those at the parent (the commit only
    # added deletes to them): `before` minus `after` is all they yield, DELETE rows
    deletes_only: bool = False

    def parts(self) -> tuple[tuple[str, Plan], ...]:
        return tuple((k, getattr(self, k)) for k in CHANGE_PARTS if getattr(self, k) is not None)

    @property
    def children(self) -> tuple[Plan, ...]:
        return tuple(p for _, p in self.parts())

    def with_children(self, new: tuple[Plan, ...]) -> Plan:
        if all(a is b for a, b in zip(self.children, new)):
            return self
        return replace(self, **{k: n for (k, _), n in zip(self.parts(), new)})

    @property
    def mixed(self) -> bool:
        """Both DELETE and INSERT rows may come out: identical pairs are cancelled."""
        deletes = self.removed is not None or self.before is not None
        inserts = self.added is not None or (self.after is not None and not self.deletes_only)
        return deletes and inserts

    @property
    def output(self) -> tuple[Col, ...]:
        kids = self.children
        return kids[0].output if kids else ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TableChanges(Plan):
    """`table_changes(table, start, end)`: the rows inserted and deleted by each commit after
    snapshot `start_id` (exclusive; None: from the table's first commit) up to `end_id`
    (inclusive), with every delete applied, as the columns of the end snapshot's schema plus
    CHANGE_COLUMNS. Planning fills `commits` (oldest first)."""

    table: str
    source_key: str
    io: Any = field(default=None, compare=False, hash=False, repr=False)  # as IcebergScan's
    start_id: int | None
    end_id: int | None
    schema_id: int
    fields: tuple[ReadField, ...]
    # top-level columns of the table's identifier fields: a key deleted and inserted by one
    # commit is UPDATE_BEFORE / UPDATE_AFTER
    identifier: tuple[str, ...] = ()
    commits: tuple[CommitChanges, ...] | None = None

    @property
    def children(self) -> tuple[Plan, ...]:
        return self.commits or ()

    def with_children(self, new: tuple[Plan, ...]) -> Plan:
        if all(a is b for a, b in zip(self.children, new)):
            return self
        return replace(self, commits=tuple(new))  # type: ignore[arg-type]

    @property
    def output(self) -> tuple[Col, ...]:
        return tuple(f.col for f in self.fields) + tuple(
            Col(name=c, label=c) for c in CHANGE_COLUMNS
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TextEdit:
    """One change to the statement's text: [start, end) replaced by the view name of scan
    `scan`, by the name a DataFrame handed in is bound under (`relation`: its index in
    `SparkQuery.relations`), or by `text` when both are None (an alias Spark would otherwise
    not know)."""

    start: int
    end: int
    scan: int | None = None
    text: str = ""
    relation: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SparkQuery(Plan):
    """The user's statement as Spark SQL runs it: its own text, with each Iceberg table
    reference replaced by a view of one merge-on-read scan (`scans`, in the order of the text).
    Everything around the scans is Spark's to analyze and optimize; mor changes nothing else.
    """

    statement: str  # the statement as the user wrote it
    offset: int  # where it starts in the user's input (errors give line and column there)
    source: str  # the user's whole input
    edits: tuple[TextEdit, ...]
    scans: tuple[Plan, ...]
    refs: tuple[str, ...]  # each scan's table reference as written, for errors and EXPLAIN
    note: str = ""  # why no filter reached the scans, when the query could not be analysed
    columns: tuple[tuple[str, ...], ...] = ()  # every column of each scan's table, for errors
    # the DataFrames the call hands in by name (`views=`) that the statement reads, bound
    # under names of their own after the scans' (planner/names.py)
    relations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.refs) != len(self.scans):
            raise InternalError("a SparkQuery needs one reference text per scan")
        last = 0
        for e in self.edits:
            if e.start < last or e.end < e.start:
                raise InternalError("SparkQuery edits overlap or are out of order")
            last = e.end

    @property
    def children(self) -> tuple[Plan, ...]:
        return self.scans

    def with_children(self, new: tuple[Plan, ...]) -> Plan:
        if all(a is b for a, b in zip(self.scans, new)):
            return self
        return replace(self, scans=tuple(new))

    @property
    def output(self) -> tuple[Col, ...]:
        return ()  # Spark's analyzer decides the query's columns

    def text_with(self, names: tuple[str, ...]) -> tuple[str, list[tuple[int, int, bool]]]:
        """The statement with scan i read from view names[i] (and relation j, a DataFrame
        handed in, from names[len(scans) + j]), and where each piece of it came from: (offset
        in the new text, offset in the statement, whether it is an edit)."""
        out: list[str] = []
        marks: list[tuple[int, int, bool]] = []
        pos = new = 0
        for e in self.edits:
            if e.scan is not None:
                bound = names[e.scan]
            elif e.relation is not None:
                bound = names[len(self.scans) + e.relation]
            else:
                bound = e.text
            for piece, old, edited in (
                (self.statement[pos : e.start], pos, False),
                (bound, e.start, True),
            ):
                marks.append((new, old, edited))
                out.append(piece)
                new += len(piece)
            pos = e.end
        marks.append((new, pos, False))
        out.append(self.statement[pos:])
        return "".join(out), marks

    def position(self, names: tuple[str, ...], line: int, col: int) -> tuple[int, int]:
        """(line, column), both 1-based, in the user's input, of a 1-based line and 0-based
        column of the text handed to Spark (as Spark's errors give them)."""
        text, marks = self.text_with(names)
        lines = text.split("\n")
        at = sum(len(x) + 1 for x in lines[: max(line - 1, 0)]) + col
        new, old, edited = [m for m in marks if m[0] <= at][-1]
        # a place inside a replaced name is the start of what the user wrote there
        where = old if edited else old + (at - new)
        return line_col(self.source, self.offset + min(where, len(self.statement)))


def line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def only_files(plan: Plan, paths: set[str]) -> Plan:
    """`plan` with every scan's data files cut to those recorded as `paths`."""

    def cut(node: Plan) -> Plan:
        if isinstance(node, IcebergScan) and node.files is not None:
            data = tuple(t for t in node.files.data if t.path in paths)
            return replace(node, files=replace(node.files, data=data))
        return node

    return plan.transform_up(cut)
