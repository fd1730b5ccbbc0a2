"""How a set of files is read: through a file list or by path, and the key its rows name
their file by (a physical rule: decided from planning facts and the session's, no pyspark)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from mor.planner.nodes import DataTask, DeleteTask

# files of shared sizes told apart by their path in the key expression; beyond, rows carry the
# path itself as the key (a string hash per row in every join on it)
SHARED_SIZE_FILES = 64

# A per-file table (one row per file; its values reach the rows through the file key) of at
# most LOOKUP_FILES files is compiled as lookups in map literals of the scan's own projection,
# not joined: Spark broadcasts even a local relation through a job of its own (about 0.1 s of
# a short query or statement: docs/architecture.md). A map lookup is a linear search of its
# keys for every row: over 10M rows, three columns looked up in maps of 16 and 32 long keys cost
# 0.39 and 0.51 s against the broadcast join's 0.61 and 0.70 s, one column of 64 keys as much
# as the join, hence 32. (Keys are always longs here: paths become keys only beyond 64 files
# of shared sizes.) A bitmap table also needs its bitmaps small: every element of a literal
# is rendered and hashed with the plan.
LOOKUP_FILES = 32
LOOKUP_BITMAP_BYTES = 8 << 10


def looked_up(files: int, bitmap_bytes: int = 0) -> bool:
    """Whether a per-file table of `files` rows (`bitmap_bytes`: its bitmaps' estimated size)
    is looked up in map literals rather than broadcast and joined."""
    return 0 < files <= LOOKUP_FILES and bitmap_bytes <= LOOKUP_BITMAP_BYTES


def per_file_text(table: str, key: str, columns: str, files: int) -> str:
    """EXPLAIN PHYSICAL's line for a per-file table of `files` rows."""
    if looked_up(files):
        return f"look up {columns} by {key} in map literals of {files} file(s)"
    return (
        f"join broadcast({table}) on {key} -> {columns} (map lookups instead in a read of at "
        f"most {LOOKUP_FILES} of the files)"
    )


@dataclass(frozen=True, slots=True)
class FileKey:
    """How rows name their file, one decision for the compiler and EXPLAIN PHYSICAL.

    `file_id`: files read through a file list (physical/scan/file_lists.py) carry the id planning
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


def hidden_name(path: str) -> bool:
    """Spark's file indexes skip files named `_x` or `.x` (`_x=y` is a partition folder):
    such a file cannot be read through a list, only by its path."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return (name.startswith("_") and "=" not in name) or name.startswith(".")


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
