"""Position delete files and deletion vectors read on the driver: the deleted positions of each
data file they name, by one reader that scans (the bitmap method, counts from metadata) and
`mor health` share.

The delete files are read with pyarrow, deletion vectors decoded by dv.py (local files
directly, others through the table's own FileIO: physical/scan/files.py), never through the JVM;
what each file holds is kept across queries of the process (`positions` of the caches the
caller passes: planner/state.py). This module does not import pyspark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO

from mor.physical.deletes.dv import decode
from mor.physical.scan.files import first_line, read_bytes, read_range
from mor.planner.errors import DataFileError
from mor.planner.nodes import RESOLVED, DataTask, DeleteTask
from mor.planner.requests import in_context
from mor.planner.settings import current
from mor.planner.state import Kept, ProcessCaches

# Position delete files are immutable: what each holds, grouped by the data file path it
# names, is kept across queries of one process (ProcessCaches.positions), keyed by the path read
# and its size (guards.check_files holds every file to the size its manifest records).


def _delete_file(
    io: FileIO | None, d: DeleteTask, table: str, kept: Kept[dict], limit: int
) -> dict[str, pa.Array]:
    """One position delete file or deletion vector as {data file path as recorded: positions
    (int64)}; for a resolved equality delete, the positions it carries."""
    if d.kind == RESOLVED:
        path, positions = d.positions
        return {path: positions}
    key = (d.read_path, d.size_bytes, d.dv.offset if d.dv else -1)
    hit = kept.get(key)
    if hit is not None:
        return hit
    if d.dv is not None:
        where = f"deletion vector {d.read_path} at offset {d.dv.offset} of {table}"
        try:
            blob = read_range(io, d.read_path, d.dv.offset, d.dv.length)
        except Exception as e:  # noqa: BLE001 - a missing or unreadable file
            raise DataFileError(f"cannot read {where}: {first_line(e)}") from e
        if len(blob) != d.dv.length:
            raise DataFileError(
                f"{where}: the file ends {d.dv.length - len(blob)} bytes before the blob does"
            )
        dv = {d.dv.referenced_data_file: decode(blob, where, d.record_count)}
        kept.put(key, dv, d.record_count, limit)
        return dv
    try:
        tab = pq.read_table(
            pa.BufferReader(read_bytes(io, d.read_path)), columns=["file_path", "pos"]
        )
    except Exception as e:  # noqa: BLE001 - a missing, unreadable or malformed file
        raise DataFileError(
            f"cannot read position delete file {d.read_path} of {table}: {first_line(e)}"
        ) from e
    paths = pc.dictionary_encode(tab.column("file_path").cast(pa.string())).combine_chunks()
    pos = tab.column("pos").cast(pa.int64()).combine_chunks()
    names = paths.dictionary.to_pylist()
    grouped = pa.table({"i": paths.indices, "p": pos}).group_by("i").aggregate([("p", "list")])
    lists = grouped.column("p_list").combine_chunks()
    out = {
        names[i]: lists[k].values
        for k, i in enumerate(grouped.column("i").to_pylist())
        if i is not None  # a NULL path names no data file
    }
    kept.put(key, out, len(pos), limit)
    return out


def read_positions(
    tasks: Sequence[DataTask],
    deletes: Mapping[int, DeleteTask],
    table: str,
    io: FileIO | None,
    cache: ProcessCaches,
) -> dict[int, pa.Array]:
    """Deleted positions of each data file named by its deletes (by file id): unique, in
    [0, record count), int64; empty when all its positions were out of that range. The delete
    files are read in parallel (setting io_threads) and kept in `cache.positions` (bounded by
    position_cache_rows)."""
    pairs: dict[int, dict[str, int]] = {}  # delete file id -> recorded data path -> data file id
    for t in tasks:
        for d in t.pos_deletes:
            pairs.setdefault(d, {})[t.path] = t.file_id
    settings = current()  # in this thread: the pool's threads see no context
    limit, kept = settings.position_cache_rows, cache.positions
    order = sorted(pairs)
    workers = max(1, min(len(order), settings.io_threads))
    with ThreadPoolExecutor(workers) as pool:
        contents = list(
            pool.map(in_context(lambda d: _delete_file(io, deletes[d], table, kept, limit)), order)
        )
    found: dict[int, list[pa.Array]] = {}
    for d, content in zip(order, contents):
        for recorded, fid in pairs[d].items():
            hit = content.get(recorded)
            if hit is not None:
                found.setdefault(fid, []).append(hit)
    counts = {t.file_id: t.record_count for t in tasks}
    out: dict[int, pa.Array] = {}
    for fid, parts in found.items():
        p = pc.unique(pa.concat_arrays(parts).drop_null())
        # a position the file does not have deletes nothing; the file is kept even when none
        # is left, so that bitmap_keep checks its rows against the recorded count
        out[fid] = p.filter(pc.and_(pc.greater_equal(p, 0), pc.less(p, counts[fid])))
    return out
