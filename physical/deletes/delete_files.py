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


# Deletion vectors of one Puffin file (a writer puts those of one commit, or of one task, in
# one file) are read together: blobs whose gap is at most DV_GAP bytes are one ranged read of
# at most DV_SPAN bytes, so a scan makes one request per Puffin file where it made one per
# data file (each 10-50 ms on an object store). What a read spans beyond its blobs is at most
# one gap per blob, and a single blob larger than DV_SPAN is still one read of its own.
DV_GAP = 1 << 20
DV_SPAN = 32 << 20


def _key(d: DeleteTask) -> tuple[str, int, int]:
    return (d.read_path, d.size_bytes, d.dv.offset if d.dv else -1)


def _dv_spans(dvs: Sequence[DeleteTask]) -> list[list[DeleteTask]]:
    """Deletion vectors grouped into ranged reads: by Puffin file, in offset order, a blob
    joining the read before it when the gap and the read's whole length allow."""
    spans: list[list[DeleteTask]] = []
    for d in sorted(dvs, key=lambda d: (d.read_path, d.dv.offset)):
        last = spans[-1] if spans else None
        if last is not None and last[0].read_path == d.read_path:
            start = last[0].dv.offset
            end = max(x.dv.offset + x.dv.length for x in last)
            if d.dv.offset - end <= DV_GAP and d.dv.offset + d.dv.length - start <= DV_SPAN:
                last.append(d)
                continue
        spans.append([d])
    return spans


def _read_dvs(
    io: FileIO | None, span: Sequence[DeleteTask], table: str, kept: Kept[dict], limit: int
) -> list[dict[str, pa.Array]]:
    """The deletion vectors of one span (`_dv_spans`), read in one ranged read, each as
    {data file path as recorded: positions (int64)}."""
    first = span[0]
    start = first.dv.offset
    end = max(d.dv.offset + d.dv.length for d in span)
    try:
        data = read_range(io, first.read_path, start, end - start)
    except Exception as e:  # noqa: BLE001 - a missing or unreadable file
        where = f"deletion vector {first.read_path} at offset {start} of {table}"
        raise DataFileError(f"cannot read {where}: {first_line(e)}") from e
    out = []
    for d in span:
        where = f"deletion vector {d.read_path} at offset {d.dv.offset} of {table}"
        lo = d.dv.offset - start
        blob = data[lo : lo + d.dv.length]
        if len(blob) != d.dv.length:
            raise DataFileError(
                f"{where}: the file ends {d.dv.length - len(blob)} bytes before the blob does"
            )
        dv = {d.dv.referenced_data_file: decode(blob, where, d.record_count)}
        kept.put(_key(d), dv, d.record_count, limit)
        out.append(dv)
    return out


def _delete_file(
    io: FileIO | None, d: DeleteTask, table: str, kept: Kept[dict], limit: int
) -> dict[str, pa.Array]:
    """One position delete file as {data file path as recorded: positions (int64)}; for a
    resolved equality delete, the positions it carries."""
    if d.kind == RESOLVED:
        path, positions = d.positions
        return {path: positions}
    key = _key(d)
    hit = kept.get(key)
    if hit is not None:
        return hit
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
    # units of work: a position delete file, or the deletion vectors one ranged read returns;
    # a deletion vector this process holds is no work
    units: list[list[int]] = []
    dvs: list[DeleteTask] = []
    contents: dict[int, dict[str, pa.Array]] = {}  # delete file id -> data path -> positions
    for d in sorted(pairs):
        task = deletes[d]
        if task.dv is None or task.kind == RESOLVED:
            units.append([d])
        elif (hit := kept.get(_key(task))) is not None:
            contents[d] = hit
        else:
            dvs.append(task)
    units += [[d.file_id for d in span] for span in _dv_spans(dvs)]

    def run(unit: list[int]) -> list[dict[str, pa.Array]]:
        first = deletes[unit[0]]
        if first.dv is None or first.kind == RESOLVED:
            return [_delete_file(io, first, table, kept, limit)]
        return _read_dvs(io, [deletes[d] for d in unit], table, kept, limit)

    if units:
        with ThreadPoolExecutor(min(len(units), max(1, settings.io_threads))) as pool:
            for unit, result in zip(units, pool.map(in_context(run), units)):
                contents.update(zip(unit, result, strict=True))
    found: dict[int, list[pa.Array]] = {}
    for d in sorted(contents):
        for recorded, fid in pairs[d].items():
            hit = contents[d].get(recorded)
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
