"""How a scan applies its position deletes, decided from planning facts alone (no pyspark).

Two methods, chosen by the number of deletes (compile.py builds the one chosen here, and
describe.py prints it, so EXPLAIN PHYSICAL cannot disagree with what runs):

- `bitmap`: the delete files are read on the driver, and each data file's deleted positions
  become a bitmap (one bit per row), all of them one array literal in the plan. The scan keeps
  a row iff its bit is clear: no extra Spark job. Chosen when the bitmaps are small (they
  travel with every task) and the delete files hold few enough rows to read on the driver.
  The row's bitmap is picked by a CASE on the file key for a few files (cheapest per row), by
  a broadcast join of one row per file beyond `position_bitmap_case_files`.
- `join`: the delete files are read by Spark and the scan anti-joins the deleted positions,
  broadcast. The key is one 64-bit value, `file_size << shift | row_index`, when the file sizes
  are the file keys and both parts fit (a long hash join, the fast path of Spark's broadcast
  joins); else the pair (file key, row_index).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mor.planner.nodes import DataTask, DeleteTask
from mor.planner.settings import current


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
    by_case: bool = False  # bitmap: each row's bitmap picked by a CASE (else a broadcast join)

    def describe(self, key: str) -> str:
        if self.method == "bitmap":
            pick = (
                f"picked by CASE {key}"
                if self.by_case
                else f"each file's offset from broadcast(bitmap file table) joined on {key}"
            )
            return (
                f"filter by bitmaps of deleted positions ({self.data_files} data file(s), "
                f"~{_kib(self.bitmap_bytes)} in the plan as one array), {pick}, tested at "
                "_metadata.row_index"
            )
        on = (
            f"{key} << {self.shift} | _metadata.row_index (one 64-bit key)"
            if self.shift is not None
            else f"({key}, _metadata.row_index)"
        )
        return f"left_anti join with broadcast(deleted positions) on {on}"


def _kib(n: int) -> str:
    if n < 1 << 10:
        return f"{n} B"
    return f"{n / 1024:.0f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def bitmap_bytes(record_count: int) -> int:
    return ((max(record_count, 1) + 63) // 64) * 8


def packed_shift(files: Sequence[DataTask]) -> int | None:
    """Bits left for row_index after the largest file size, if every file's rows fit in them."""
    if not files:
        return None
    shift = 63 - max(f.size_bytes for f in files).bit_length()
    if shift <= 0 or max(f.record_count for f in files) >= 1 << shift:
        return None
    return shift


def position_strategy(
    tasks: Sequence[DataTask], deletes: Mapping[int, DeleteTask], sizes_are_keys: bool
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
        by_case = len(with_pos) <= current().position_bitmap_case_files
        return PositionStrategy("bitmap", len(with_pos), len(used), rows, est, None, by_case)
    shift = packed_shift(with_pos) if sizes_are_keys else None
    return PositionStrategy("join", len(with_pos), len(used), rows, est, shift)


def file_key_kind(files: Sequence[DataTask | DeleteTask]) -> str:
    """How rows name their file, one decision for the compiler and EXPLAIN PHYSICAL:
    `_metadata.file_size` when the sizes are unique (a long per file, cheap to join on; Iceberg
    records exact sizes and check_sizes holds files to them), else the path Spark reports (a
    string hash per row)."""
    sizes = [f.size_bytes for f in files]
    return "file_size" if len(set(sizes)) == len(sizes) else "file_path"


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
