"""How a scan applies its position deletes, decided from planning facts alone (no pyspark).

Two methods, chosen by the number of deletes (a physical rule: the plan holds the choice,
which compile.py builds and describe.py prints):

- `bitmap`: the delete files are read on the driver, and each data file's deleted positions
  become a bitmap (one bit per row), an array column of a broadcast table of one row per data
  file, joined on the file key, or for a few small bitmaps (reading.looked_up) a map literal
  looked up by the file key. The scan keeps a row iff its bit is clear: no Spark job reads
  the delete files (the table's broadcast is one small job over its rows; a lookup none).
  Chosen when the bitmaps are small (they travel with the broadcast) and the delete files are
  few enough, and hold few enough rows, to read on the driver: at 10^4 delete files on an
  object store, reading each on the driver is seconds before the first task.
- `join`: the delete files are read by Spark and the scan anti-joins the deleted positions,
  broadcast. The key is one 64-bit value, `file key << shift | row_index`, when the file keys
  are longs (FileKey) and both parts fit (a long hash join, the fast path of Spark's broadcast
  joins); else the pair (file key, row_index).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mor.planner.nodes import DataTask, DeleteTask
from mor.planner.settings import current
from mor.rules.physical.reading import SHARED_SIZE_FILES, FileKey, looked_up


def bitmap_limits() -> tuple[int, int, int]:
    """(max bitmap bytes in a plan, max delete rows and delete files read on the driver) from
    the settings in effect (docs/configuration.md)."""
    s = current()
    return s.position_bitmap_bytes, s.position_driver_rows, s.position_driver_files


@dataclass(frozen=True, slots=True)
class PositionStrategy:
    method: str  # "bitmap" or "join"
    data_files: int  # data files with position deletes
    delete_files: int
    delete_rows: int  # rows of the delete files (an upper bound of the positions removed)
    bitmap_bytes: int  # estimated size of all bitmaps (one bit per row of each data file)
    shift: int | None  # join: bits of row_index in the packed key; None = (file key, row_index)

    @property
    def looked_up(self) -> bool:
        """Bitmaps few and small enough to be map literals of the scan's projection, not a
        broadcast table (reading.looked_up)."""
        return self.method == "bitmap" and looked_up(self.data_files, self.bitmap_bytes)

    def describe(self, key: str, broadcast: str = "broadcast(deleted positions)") -> str:
        if self.method == "bitmap":
            where = (
                f"looked up by {key} in a map literal"
                if self.looked_up
                else f"in broadcast(bitmap file table) joined on {key}"
            )
            return (
                f"filter by bitmaps of deleted positions ({self.data_files} data file(s), "
                f"~{kib(self.bitmap_bytes)}): one array per file {where}, tested at "
                "_metadata.row_index"
            )
        on = (
            f"{key} << {self.shift} | _metadata.row_index (one 64-bit key)"
            if self.shift is not None
            else f"({key}, _metadata.row_index)"
        )
        return f"left_anti join with {broadcast} on {on}"


def kib(n: int) -> str:
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
    max_bytes, max_rows, max_files = bitmap_limits()
    # the position delete files the driver would read; deletion vectors and resolved
    # equality deletes are decoded or held on the driver whichever method is chosen
    files = sum(1 for p in used if deletes[p].kind == "position" and not deletes[p].is_dv)
    if est <= max_bytes and rows <= max_rows and files <= max_files:
        return PositionStrategy("bitmap", len(with_pos), len(used), rows, est, None)
    # every row of the scan gets the packed key, not only rows of files with deletes: the key
    # and the position of every file must fit, or a file's key wraps onto another's
    shift = packed_shift(tasks, fk)
    return PositionStrategy("join", len(with_pos), len(used), rows, est, shift)
