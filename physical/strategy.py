"""How a scan applies its position deletes, decided from planning facts alone (no pyspark).

Two methods, chosen by the number of deletes (compile.py builds the one chosen here, and
describe.py prints it, so EXPLAIN PHYSICAL cannot disagree with what runs):

- `bitmap`: the delete files are read on the driver, and each data file's deleted positions
  become a bitmap (one bit per row), an array column of a broadcast table of one row per data
  file, joined on the file key. The scan keeps a row iff its bit is clear: no Spark job reads
  the delete files (the table's broadcast is one small job over its rows).
  Chosen when the bitmaps are small (they travel with the broadcast) and the delete files hold
  few enough rows to read on the driver.
- `join`: the delete files are read by Spark and the scan anti-joins the deleted positions,
  broadcast. The key is one 64-bit value, `file key << shift | row_index`, when the file keys
  are longs (FileKey) and both parts fit (a long hash join, the fast path of Spark's broadcast
  joins); else the pair (file key, row_index).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mor.physical.file_lists import hidden_name
from mor.planner.nodes import GLOBAL_PART, DataTask, DeleteTask, EqDeleteScan, IcebergScan, Plan
from mor.planner.settings import current

# files of shared sizes told apart by their path in the key expression; beyond, rows carry the
# path itself as the key (a string hash per row in every join on it)
SHARED_SIZE_FILES = 64


def bitmap_limits() -> tuple[int, int]:
    """(max bitmap bytes in a plan, max delete rows read on the driver) from the settings in
    effect (docs/configuration.md)."""
    s = current()
    return s.position_bitmap_bytes, s.position_driver_rows


@dataclass(frozen=True, slots=True)
class PositionStrategy:
    method: str  # "bitmap" or "join"
    data_files: int  # data files with position deletes
    delete_files: int
    delete_rows: int  # rows of the delete files (an upper bound of the positions removed)
    bitmap_bytes: int  # estimated size of all bitmaps (one bit per row of each data file)
    shift: int | None  # join: bits of row_index in the packed key; None = (file key, row_index)

    def describe(self, key: str, broadcast: str = "broadcast(deleted positions)") -> str:
        if self.method == "bitmap":
            return (
                f"filter by bitmaps of deleted positions ({self.data_files} data file(s), "
                f"~{_kib(self.bitmap_bytes)}): one array per file in broadcast(bitmap file "
                f"table) joined on {key}, tested at _metadata.row_index"
            )
        on = (
            f"{key} << {self.shift} | _metadata.row_index (one 64-bit key)"
            if self.shift is not None
            else f"({key}, _metadata.row_index)"
        )
        return f"left_anti join with {broadcast} on {on}"


def _kib(n: int) -> str:
    if n < 1 << 10:
        return f"{n} B"
    return f"{n / 1024:.0f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def bitmap_bytes(record_count: int) -> int:
    return ((max(record_count, 1) + 63) // 64) * 8


def packed_shift(files: Sequence[DataTask], fk: FileKey) -> int | None:
    """Bits left for row_index after the largest file key, if every file's rows fit in them
    (keys are file ids, or sizes and -1 ... -SHARED_SIZE_FILES for files of shared sizes).
    `files`: every file whose rows get the key (all of a scan's), not only files with deletes:
    a larger key shifted past 63 bits would wrap onto another file's."""
    if not files or not fk.is_long:
        return None
    if fk.kind == "file_id":
        largest = max(f.file_id for f in files)
    else:
        largest = max(max(f.size_bytes for f in files), SHARED_SIZE_FILES)
    shift = min(62, 63 - largest.bit_length())  # 1 << shift must be a long too
    if shift <= 0 or max(f.record_count for f in files) >= 1 << shift:
        return None
    return shift


def position_strategy(
    tasks: Sequence[DataTask], deletes: Mapping[int, DeleteTask], fk: FileKey
) -> PositionStrategy | None:
    """None when no task has position deletes."""
    with_pos = [t for t in tasks if t.pos_deletes]
    if not with_pos:
        return None
    used = {p for t in with_pos for p in t.pos_deletes}
    rows = sum(deletes[p].record_count for p in used)
    est = sum(bitmap_bytes(t.record_count) for t in with_pos)
    max_bytes, max_rows = bitmap_limits()
    if est <= max_bytes and rows <= max_rows:
        return PositionStrategy("bitmap", len(with_pos), len(used), rows, est, None)
    # every row of the scan gets the packed key, not only rows of files with deletes: the key
    # and the position of every file must fit, or a file's key wraps onto another's
    shift = packed_shift(tasks, fk)
    return PositionStrategy("join", len(with_pos), len(used), rows, est, shift)


@dataclass(frozen=True, slots=True)
class FileKey:
    """How rows name their file, one decision for the compiler and EXPLAIN PHYSICAL.

    `file_id`: files read through a file list (physical/file_lists.py) carry the id planning
    gave them as their modification time in the list: `unix_millis(_metadata.file_modification
    _time)`, a small long, unique whatever the number of files. The other kinds are those of
    files read by path (the fallback):
    `file_size`: `_metadata.file_size` when the sizes are unique (a long per file, cheap to
    join on; Iceberg records exact sizes and guards.check_files holds files to them).
    `file_size+path`: still a long, the size, except for the few files whose size another file
    of the scan shares: those are told apart by `_metadata.file_path` and numbered -1, -2, ...
    (with hundreds of files, some sizes are almost always shared).
    `file_path`: the path Spark reports (a string hash per row), when more than
    SHARED_SIZE_FILES files share sizes."""

    kind: str
    shared: frozenset[int] = frozenset()  # sizes held by more than one file

    @property
    def is_long(self) -> bool:
        return self.kind != "file_path"

    def describe(self) -> str:
        if self.kind == "file_id":
            return "the file id (its modification time in the list)"
        if self.kind == "file_size+path":
            return (
                f"_metadata.file_size (files of {len(self.shared)} shared size(s) told apart "
                "by _metadata.file_path)"
            )
        return f"_metadata.{self.kind}"


def file_key(files: Sequence[DataTask | DeleteTask], listed: bool = False) -> FileKey:
    """The key of files read through a file list (`listed`) or by path."""
    if listed:
        return FileKey("file_id")
    counts = Counter(f.size_bytes for f in files)
    shared = frozenset(s for s, n in counts.items() if n > 1)
    if not shared:
        return FileKey("file_size")
    if sum(counts[s] for s in shared) <= SHARED_SIZE_FILES:
        return FileKey("file_size+path", shared)
    return FileKey("file_path")


def counted_from_metadata(
    fields: int,
    hidden: int,
    meta: int,
    pushed: int,
    eq_sets: int,
    tasks: Sequence[DataTask],
    deletes: Mapping[int, DeleteTask],
) -> bool:
    """A scan whose rows carry no column (count(*), EXISTS, `SELECT 1`) and meet no filter,
    with no equality deletes, has as many rows as its files record minus their exactly
    deleted positions: it is answered from metadata and the position delete files (read on
    the driver within position_driver_rows), without reading a data file."""
    if fields or hidden or meta or pushed or eq_sets:
        return False
    used = {p for t in tasks for p in t.pos_deletes}
    return sum(deletes[p].record_count for p in used) <= current().position_driver_rows


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """What of the Spark session decides how scans compile, read once per query (reads.py
    `session_facts`). EXPLAIN PHYSICAL without a session assumes a session of mor's own."""

    listing: int = 32  # spark.sql.sources.parallelPartitionDiscovery.threshold
    broadcast_limit: int = 128 << 20  # reads.broadcast_limit
    lists: str | None = None  # why file lists cannot be used here; None: they can
    split_bytes: int = 128 << 20  # spark.sql.files.maxPartitionBytes
    open_cost: int = 4 << 20  # spark.sql.files.openCostInBytes
    min_partitions: int = 2  # spark.sql.files.minPartitionNum, else the default parallelism


@dataclass(frozen=True, slots=True)
class Reading:
    """How one set of files (data files of a scan, or delete files) is read: one decision, that
    the compiler builds and EXPLAIN PHYSICAL prints."""

    listed: bool  # through file lists: one Parquet read per layout, whatever the file count
    key: FileKey
    reads: int  # Parquet reads: one per layout if listed, else per group of `listing` paths
    why: str | None = None  # why not listed


def reading(
    files: Sequence[DataTask | DeleteTask], facts: SessionFacts, layouts: int | None = None
) -> Reading:
    """How `files` are read in a session of `facts` (`layouts`: how many layouts they span,
    counted here when not given)."""
    why = facts.lists
    if why is None:
        hidden = next((f.read_path for f in files if hidden_name(f.read_path)), None)
        if hidden is not None:
            why = f"Spark skips files named like {hidden.rsplit('/', 1)[-1]} in a file list"
    per_layout = Counter(f.layout for f in files)
    if why is None:
        reads = len(per_layout) if layouts is None else layouts
        return Reading(True, file_key(files, True), reads)
    reads = sum(-(-n // facts.listing) for n in per_layout.values())
    return Reading(False, file_key(files), reads, why)


def spark_tasks(sizes: Sequence[int], facts: SessionFacts) -> int:
    """How many tasks Spark's file scan packs files of these sizes into (FilePartition's rules,
    which Iceberg's split planning shares: a split target and an open cost per file; a file
    larger than the target is split, Parquet at row groups)."""
    if not sizes:
        return 0
    total = sum(sizes) + facts.open_cost * len(sizes)
    split = min(facts.split_bytes, max(facts.open_cost, total // max(facts.min_partitions, 1)))
    pieces = sorted(
        (min(split, size - off) for size in sizes for off in range(0, max(size, 1), split)),
        reverse=True,
    )
    tasks, current = 0, 0
    for length in pieces:
        if current and current + length > split:
            tasks, current = tasks + 1, 0
        current += length + facts.open_cost
    return tasks + (1 if current else 0)


def needs_barrier(scan: Plan, facts: SessionFacts = SessionFacts()) -> bool:
    """Whether this scan compiles into more than one Parquet read of data files (one per
    layout through file lists, else groups of at most the listing threshold's paths; one set
    per branch), with the setting on.

    Spark pushes a semi or anti join (`IN`/`EXISTS` subqueries, INTERSECT, EXCEPT) through a
    Union into every child, and down through the scan's own joins to each read: a sort-merge
    join (with a shuffle of its own) per group of 32 files. TPC-H q18 at scale factor 1 over
    240-file tables ran ~600 stages for it (39.5 s; 16.8 s with the barrier, 16.0 s for
    Iceberg's reader). A data source scan is a leaf Spark cannot push joins into; the barrier
    makes mor's scan one too."""
    if not current().scan_barrier:
        return False
    reads = 0
    for node in scan.walk():
        if isinstance(node, IcebergScan) and node.data_files():
            reads += reading(node.data_files(), facts).reads
    return reads > 1


def scoped_only(deletes: Plan) -> bool:
    """Every delete file of this equality delete scan is partition-scoped (none global): the
    anti-join's scope check is then `$partition = $del_partition`, a join key."""
    return isinstance(deletes, EqDeleteScan) and all(
        f.partition_id != GLOBAL_PART for f in deletes.files
    )


# the types whose values Spark stores in a row's variable-length part, and the width assumed
# for each value of them (delete keys are ids and codes, rarely long text)
_VARIABLE = ('"string"', '"binary"', '"uuid"')
VARIABLE_WIDTH = 32


def relation_bytes(rows: int, fixed: int, variable: int = 0) -> int:
    """An estimate of the memory a broadcast of `rows` rows of `fixed` fixed-width and
    `variable` variable-width columns takes on the driver and on each executor: Spark keeps
    each row (an UnsafeRow: a null word, 8 bytes a column, the variable part) twice while it
    builds the hash relation (the collected rows and the relation's pages), plus the hash
    table's slots (16 bytes at load factor 0.5)."""
    row = 8 + 8 * (fixed + variable) + VARIABLE_WIDTH * variable
    return rows * (2 * row + 32)


def position_relation_bytes(strategy: PositionStrategy, long_keys: bool) -> int:
    """The estimate for the deleted positions a join strategy broadcasts."""
    if strategy.shift is not None:
        return relation_bytes(strategy.delete_rows, 1)
    return relation_bytes(strategy.delete_rows, 2 if long_keys else 1, 0 if long_keys else 1)


def eq_relation_bytes(deletes: EqDeleteScan) -> int:
    """The estimate for an equality delete scan's broadcast (its rows before compaction)."""
    guards = 2 if deletes.meta else 0
    variable = sum(1 for k in deletes.keys if k.type_str in _VARIABLE or k.compared_as_text)
    return relation_bytes(deletes.rows(), len(deletes.keys) - variable + guards, variable)


def broadcast_allowed(rows: int, est_bytes: int, limit_bytes: int) -> bool:
    """A delete side is broadcast when its rows and its estimated bytes are within the limits
    (`broadcast_rows`, and `broadcast_bytes` or its default from the driver's memory);
    else Spark joins it by a shuffle, slower but bounded in memory."""
    return rows <= current().broadcast_rows and est_bytes <= limit_bytes


def memory_bytes(text: str) -> int | None:
    """A JVM memory size ('4g', '512m', '1024k', '2t' or bytes) in bytes; None if unreadable."""
    t = text.strip().lower().removesuffix("b")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except ValueError:
        return None


def default_broadcast_bytes(driver_memory: str | None, max_result_size: str | None) -> int:
    """An eighth of the driver's memory (Spark's default 1g when unset), and at most half of
    spark.driver.maxResultSize (the collected rows of a broadcast count against it; 0 is no
    limit)."""
    memory = memory_bytes(driver_memory or "1g") or (1 << 30)
    limit = memory // 8
    result = memory_bytes(max_result_size or "1g")
    if result:
        limit = min(limit, result // 2)
    return limit


def compacted_keys(deletes: EqDeleteScan, limit_bytes: int) -> bool:
    """Whether the keys of several equality delete files are compacted (one row per key and
    scope, with the highest sequence number) before the anti-join: only when they are not
    broadcast. A broadcast's size is bounded by the rows before compaction anyway, and its hash
    relation keeps repeated keys, each tested against the guards (an anti-join drops a row if
    any delete of its key is newer): compacting there was a shuffle of every key (TPC-H sf 1
    lineitem, 584k keys in 237 files: ~0.6 s of a 4.4 s scan). A shuffled join sorts both
    sides, and fewer rows of repeated keys are worth a partial aggregation there."""
    return len(deletes.files) > 1 and not broadcast_allowed(
        deletes.rows(), eq_relation_bytes(deletes), limit_bytes
    )


def keeps(weight: int, limit: int) -> bool:
    """Whether a delete side of `weight` estimated bytes is kept in Spark's cache under `limit`
    (setting delete_cache_bytes; 0: nothing is kept): reuse.cached keeps what this allows."""
    return 0 < limit and weight <= limit


def side_text(what: str, broadcast: bool, rows: int, est: int, limit: int) -> str:
    """How EXPLAIN PHYSICAL names a delete side: broadcast, or shuffled and why."""
    if broadcast:
        return f"broadcast({what}, ~{_kib(est)} est.)"
    return (
        f"{what} (shuffled, not broadcast: {rows} rows, ~{_kib(est)} est., limits "
        f"{current().broadcast_rows} rows, {_kib(limit)})"
    )


def named_as_table(scan: Plan) -> bool:
    """A scan whose DataFrame already has the table's column names (an IcebergScan selects
    its output by name): no projection to the user's names is needed above it."""
    return isinstance(scan, IcebergScan) and all(c.name == c.label for c in scan.output)


def bitmap_weight(node: Plan) -> int:
    """Bytes of position bitmaps a compiled plan below `node` may hold on the driver (the
    estimate of each scan that takes the bitmap method): what physical/reuse.py weighs."""
    total = 0
    for n in node.walk():
        if isinstance(n, IcebergScan):
            s = position_strategy(n.data_files(), n.deletes_by_id(), FileKey("file_id"))
            if s is not None and s.method == "bitmap":
                total += s.bitmap_bytes
    return total
