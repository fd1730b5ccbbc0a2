"""What compaction rewrites: a pure function of the data files' sizes and deletes.

As Iceberg's `rewrite_data_files` (bin-packing, `SizeBasedFileRewritePlanner` and
`BinPackRewriteFilePlanner`, with its defaults): a data file qualifies when
`delete_file_threshold` or more delete files apply to it, when the rows its file-scoped
position deletes remove are `delete_ratio_threshold` of its rows or more, or when it is under
75% or over 180% of the target file size. A partition's qualifying files are rewritten when
one qualifies by its deletes, when there are `min_input_files` of them, when together they
make more than one target file, or when they are over 180% of it. A group's live bytes (its
files' sizes less the share their known deletes remove) make its number of output files.

No I/O and no Spark: tests/test_policy.py holds it to these rules.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

TARGET_FILE_SIZE = 512 * 1024 * 1024  # write.target-file-size-bytes
MIN_INPUT_FILES = 5
DELETE_RATIO = 0.3


@dataclass(frozen=True)
class Candidate:
    """A live data file, as the policy sees it."""

    path: str
    partition: Hashable  # its spec and partition: files are grouped by it
    size: int  # bytes
    rows: int  # as recorded, deleted ones included
    delete_files: int = 0  # delete files that apply to it (positions, vectors, equality)
    known_deleted: int = 0  # rows its file-scoped position deletes (or vector) remove


@dataclass(frozen=True)
class Thresholds:
    target: int = TARGET_FILE_SIZE
    delete_ratio: float = DELETE_RATIO
    delete_files: int | None = None
    min_input_files: int = MIN_INPUT_FILES

    def __post_init__(self) -> None:
        if self.target <= 0:
            raise ValueError("--target-file-size must be a positive number of bytes")
        if not 0 < self.delete_ratio <= 1:
            raise ValueError("--delete-ratio-threshold must be in (0, 1]")
        if self.delete_files is not None and self.delete_files < 1:
            raise ValueError("--delete-file-threshold must be 1 or more")
        if self.min_input_files < 1:
            raise ValueError("--min-input-files must be 1 or more")


@dataclass(frozen=True)
class RewriteGroup:
    """Data files of one partition whose live rows go to `files` new files."""

    paths: tuple[str, ...]  # sorted
    files: int


def choose_rewrites(candidates: Iterable[Candidate], t: Thresholds) -> list[RewriteGroup]:
    """The groups to rewrite, in the order their partitions are first met."""
    small, large = 0.75 * t.target, 1.8 * t.target
    groups: dict[Hashable, list[tuple[Candidate, bool, float]]] = {}
    for c in candidates:
        ratio = min(c.known_deleted, c.rows) / c.rows if c.rows else 1.0
        heavy = c.delete_files > 0 and (
            ratio >= t.delete_ratio
            or (t.delete_files is not None and c.delete_files >= t.delete_files)
        )
        if not heavy and small <= c.size <= large:
            continue
        live_share = 1.0 - ratio if c.delete_files else 1.0
        groups.setdefault(c.partition, []).append((c, heavy, live_share))
    out = []
    for files in groups.values():
        size = sum(c.size for c, _, _ in files)
        if (
            any(heavy for _, heavy, _ in files)
            or len(files) >= t.min_input_files
            or (len(files) > 1 and size > t.target)
            or size > large
        ):
            live = sum(c.size * share for c, _, share in files)
            paths = tuple(sorted(c.path for c, _, _ in files))
            out.append(RewriteGroup(paths, output_files(live, t.target)))
    return out


def output_files(size: float, target: int) -> int:
    """How many files of about `target` bytes `size` bytes make: a remainder above the
    smallest size worth a file (75% of the target) is a file of its own."""
    n = int(size // target)
    if n == 0 or size - n * target > 0.75 * target:
        n += 1
    return n
