"""Position deletes as bitmaps carried in the plan (the `bitmap` method of
rules/physical/positions.py).

The positions come from delete_files.py (read on the driver, never through the JVM). Only
the (delete file, data file) pairs that scan planning kept are used: a row of a delete file
naming another data file, or a data file the delete does not apply to (sequence number,
partition), is ignored, exactly as in the join method. Each data file gets one bitmap, bit p of
word p >> 6 set iff position p is deleted. The bitmaps are data, not expressions: one row per
data file, its words an array<bigint> column of a small inline table (built from a query
parameter, so no SQL text holds them), broadcast and joined on the file key; the scan tests
`bit_get(get(words, row_index >> 6), row_index & 63)`. As a literal in the filter, one array
of 78k words (5M rows) made a grouped aggregate 2x slower: Spark renders, serializes and
hashes a literal's every element with the plan, on the driver and in each task.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column
from pyspark.sql import functions as F

from mor.physical.spark import reuse
from mor.planner.nodes import DataTask, DeleteTask
from mor.planner.settings import current
from mor.planner.state import Kept, ProcessCaches


def clear_position_cache(cache: ProcessCaches) -> None:
    """Forget what was read of delete files, and the DataFrames built from it
    (physical/spark/reuse.py): the next query reads them again, as a new process would."""
    cache.positions.clear()
    cache.bitmaps.clear()
    reuse.clear()


def bitmap_words(positions: pa.Array) -> bytes:
    """The bitmap of these (unique, non-negative) positions as little-endian 64-bit words."""
    if not len(positions):
        return b""
    words = pc.shift_right(positions, 6)
    bits = pc.shift_left(
        pa.scalar(1, pa.uint64()), pc.bit_wise_and(positions, 63).cast(pa.uint64())
    )
    # the positions are unique, so the bits of one word are distinct and their sum is their OR
    grouped = pa.table({"w": words, "b": bits}).group_by("w").aggregate([("b", "sum")])
    n = pc.max(words).as_py() + 1
    every = pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), n)), 1)
    at = pc.index_in(every, value_set=grouped.column("w").combine_chunks())
    dense = pc.fill_null(pc.take(grouped.column("b_sum"), at), 0).combine_chunks()
    data = dense.cast(pa.uint64()).buffers()[1].to_pybytes()[: 8 * n]
    if sys.byteorder != "little":
        data = b"".join(data[i : i + 8][::-1] for i in range(0, len(data), 8))
    return data


# A data file's bitmap as the text of its words, kept across queries of one process
# (ProcessCaches.bitmaps, a word weighing three positions): keyed by the data file's path and row
# count and the identities of the deletes that apply to it, which is all the bitmap depends on.


def bitmap_key(task: DataTask, deletes: Mapping[int, DeleteTask]) -> tuple:
    return (
        task.path,
        task.record_count,
        tuple(sorted(deletes[d].identity for d in task.pos_deletes)),
    )


def bitmap_text(
    positions: pa.Array, key: tuple | None = None, kept: Kept[str] | None = None
) -> str:
    """The bitmap of these positions as its words in decimal, comma-separated: Spark makes
    it an array<bigint> with `CAST(split(text, ',') AS array<bigint>)`. Empty when no
    position is left. With a `key`, kept in `kept` (and taken from it)."""
    if key is not None and kept is not None:
        hit = kept.get(key)
        if hit is not None:
            return hit
    if len(positions) <= FEW:
        signed = _few_words(positions.to_pylist())
        text, n_words = ",".join(map(str, signed)), len(signed)
    else:
        words = bitmap_words(positions)
        values = memoryview(words).cast("q") if sys.byteorder == "little" else None
        text = (
            ",".join(map(str, values))
            if values is not None
            else ",".join(
                str(int.from_bytes(words[i : i + 8], "little", signed=True))
                for i in range(0, len(words), 8)
            )
        )
        n_words = len(words) // 8
    if key is not None and kept is not None:
        # a word's text takes ~20 bytes, a cached position 8: a word weighs three positions
        kept.put(key, text, 3 * n_words + 1, current().position_cache_rows)
    return text


# up to this many positions a file's words are made in Python: pyarrow's kernels cost ~0.3 ms a
# call whatever the size (10,000 files of two deleted positions: 3.2 s against 0.03 s)
FEW = 1024


def _few_words(positions: list[int]) -> list[int]:
    """bitmap_words of a few positions, as signed 64-bit integers."""
    if not positions:
        return []
    words = [0] * (max(positions) // 64 + 1)
    for p in positions:
        words[p >> 6] |= 1 << (p & 63)
    return [w - (1 << 64) if w >> 63 else w for w in words]


def bitmap_files(
    positions: Mapping[int, pa.Array],
    tasks: Mapping[int, DataTask],
    keys: Mapping[int, Any],
    deletes: Mapping[int, DeleteTask],
    cache: ProcessCaches,
) -> list[tuple[Any, str, int, str]]:
    """Per data file with deletes: (file key, its bitmap's text, recorded row count, path as
    recorded)."""
    return [
        (
            keys[fid],
            bitmap_text(positions[fid], bitmap_key(tasks[fid], deletes), cache.bitmaps),
            tasks[fid].record_count,
            tasks[fid].path,
        )
        for fid in sorted(positions)
    ]


def bitmap_keep(
    row_index: str,
    bitmap: str,
    count: str,
    recorded: str,
    table: str,
    text: Callable[[str], str],
) -> Column:
    """True for a row whose position is not deleted, from its file's row of the bitmap table
    (joined on the file key; NULL for a file without deletes: kept). A row at or past its
    file's recorded row count stops the query: positions there were dropped as impossible, so
    it cannot be told apart. One SQL expression (`text` makes a string literal): one round
    trip on a classic session, where building it Column by Column took some seventy."""
    pos, words, n = f"`{row_index}`", f"`{bitmap}`", f"`{count}`"
    msg = (
        f"concat({text('mor: data file ')}, `{recorded}`, "
        f"{text(f' of {table} has more rows than its metadata records (')}, "
        f"CAST({n} AS STRING), {text(')')})"
    )
    return F.expr(
        f"CASE WHEN {n} IS NULL THEN true "
        f"WHEN {pos} >= {n} THEN CAST(raise_error({msg}) AS BOOLEAN) "
        f"WHEN {pos} >= size({words}) * 64 THEN true "
        f"ELSE bit_get(get({words}, CAST(shiftright({pos}, 6) AS INT)), "
        f"CAST({pos} & 63 AS INT)) = 0 END"
    )
