"""Position deletes removed inside a scan, by the method the physical plan chose
(rules/physical/positions.position_strategy):

- **bitmap**: the delete files and deletion vectors are read on the driver (delete_files.py) and
  each data file with deletes gets one row of a broadcast table (file key, bitmap words,
  recorded row count, recorded path), joined on the file key; a row is kept iff the bit of its
  `_metadata.row_index` is clear.
- **join**: Spark reads the position delete files (deletion vectors are decoded on the driver
  and sent as rows), keeps the rows of the (delete file, data file) pairs planning matched
  (on the delete file's key and the data file's path as recorded), and the scan anti-joins
  these positions, broadcast when small (rules/physical/broadcast.broadcast_allowed) and kept
  in Spark's cache across queries (reuse.cached): on one 64-bit key
  `file key << shift | row_index` when it fits, else on (file key, row_index). A row at or
  past its file's recorded row count stops the query here too (a broadcast table of the
  counts).

Either way the plan grows by table rows (one per data file with deletes), never by a branch or
a filter per file.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

from pyiceberg.io import FileIO
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from mor.physical.deletes.bitmaps import bitmap_files, bitmap_keep
from mor.physical.deletes.delete_files import read_positions
from mor.physical.scan.guards import POS, row_count_check
from mor.physical.scan.reads import KEY, Group, Read, ReadContext, read_files
from mor.physical.scan.tables import (
    BITMAP,
    COUNT,
    FKEY,
    RECORDED,
    bitmap_lookups,
    bitmap_table,
    key_type,
    local_table,
    sql_literal,
    with_file_columns,
)
from mor.physical.spark.reuse import cached, reused
from mor.physical.spark.store_access import StoreAccess
from mor.planner.nodes import RESOLVED, DataTask, DeleteTask
from mor.planner.settings import current
from mor.rules.physical.nodes import ReadData
from mor.rules.physical.positions import PositionStrategy
from mor.rules.physical.reading import FileKey, Reading

PKEY = "$pkey"  # file key << shift | row_index


def remove_deleted(
    ctx: ReadContext,
    df: DataFrame,
    read: Read,
    tasks: Sequence[DataTask],
    deletes: dict[int, DeleteTask],
    node: ReadData,
) -> DataFrame:
    """`df` (the scan's rows with $fkey and $pos) without the rows its deletes remove, by the
    method the physical plan chose (`node.positions`)."""
    strategy = node.positions
    assert strategy is not None
    table, io = node.scan.table, node.scan.io
    if strategy.method == "bitmap":
        return _by_bitmaps(ctx, df, read, tasks, deletes, strategy, table, io)
    return _by_join(ctx, df, read, tasks, deletes, node)


def _by_bitmaps(
    ctx: ReadContext,
    df: DataFrame,
    read: Read,
    tasks: Sequence[DataTask],
    deletes: dict[int, DeleteTask],
    strategy: PositionStrategy,
    table: str,
    io: FileIO | None,
) -> DataFrame:
    found = read_positions(tasks, deletes, table, io, ctx.cache)
    if not found:
        return df
    spark, fk = ctx.spark, read.key
    by_id = {t.file_id: t for t in tasks}
    rows = bitmap_files(found, by_id, read.keys, deletes, ctx.cache)
    text = T.StringType()
    keep = bitmap_keep(POS, BITMAP, COUNT, RECORDED, table, lambda v: sql_literal(v, text))
    inline = bitmap_lookups(fk, rows) if strategy.looked_up else None
    if inline is not None:  # a few files: looked up in the scan's projection, no broadcast
        return df.selectExpr("*", *inline).where(keep)
    bitmaps = reused(
        spark,
        ("bitmaps", fk.is_long, tuple(rows)),
        lambda: bitmap_table(spark, fk, rows),
        weight=lambda: strategy.bitmap_bytes,
        limit=lambda: ctx.facts.broadcast_limit,
    )
    return df.join(F.broadcast(bitmaps), FKEY, "left").where(keep)


def _by_join(
    ctx: ReadContext,
    df: DataFrame,
    read: Read,
    tasks: Sequence[DataTask],
    deletes: dict[int, DeleteTask],
    node: ReadData,
) -> DataFrame:
    spark, fk, keys = ctx.spark, read.key, read.keys
    strategy, table, io = node.positions, node.scan.table, node.scan.io
    assert strategy is not None
    shift = strategy.shift

    def deleted() -> DataFrame:
        found = _positions(
            ctx, tasks, deletes, fk, keys, table, io, node.delete_reading, read.access
        )
        if shift is None:
            return found
        return found.where((F.col(POS) >= 0) & (F.col(POS) < F.lit(1 << shift))).select(
            packed(F.col(FKEY), F.col(POS), shift).alias(PKEY)
        )

    identity = _identity(tasks, deletes, keys)
    limit = current().delete_cache_bytes
    positions = cached(
        spark, ("positions", identity, shift), deleted, node.estimate, limit, node.persist
    )
    on: list[str] = [FKEY, POS]
    if shift is not None:
        df = df.withColumn(PKEY, packed(F.col(FKEY), F.col(POS), shift))
        on = [PKEY]
    # as bitmap_keep does for bitmaps: a row past its file's recorded count stops
    counted = [(keys[t.file_id], t.record_count, t.path) for t in tasks if t.pos_deletes]
    types = (T.LongType(), T.StringType())
    df = with_file_columns(spark, df, fk, counted, (COUNT, RECORDED), types)
    df = row_count_check(df, table)
    if node.broadcast:
        positions = F.broadcast(positions)
    return df.join(positions, on, "left_anti")


def packed(file_key: Column, pos: Column, shift: int) -> Column:
    return F.shiftleft(file_key, shift).bitwiseOR(pos)


def _positions(
    ctx: ReadContext,
    tasks: Sequence[DataTask],
    deletes: dict[int, DeleteTask],
    fk: FileKey,
    keys: dict[int, Any],
    table: str,
    io: FileIO | None,
    how: Reading | None,
    access: StoreAccess | None,
) -> DataFrame:
    """($fkey, position) of every deleted row of these data files (`how`: how the position
    delete files are read, as planned; `access`: the table's store settings for Spark)."""
    # deletion vectors and resolved equality deletes are positions the driver holds; position
    # delete files are read by Spark (a data file may have both kinds: their union is deleted)
    dv_tasks, files = [], []
    for t in tasks:
        held = tuple(p for p in t.pos_deletes if deletes[p].is_dv or deletes[p].kind == RESOLVED)
        if held:
            dv_tasks.append(replace(t, pos_deletes=held))
        rest = tuple(p for p in t.pos_deletes if p not in held)
        if rest:
            files.append(replace(t, pos_deletes=rest))
    parts = []
    if dv_tasks:
        parts.append(_dv_positions(ctx, dv_tasks, deletes, fk, keys, table, io))
    if files:
        parts.append(_file_positions(ctx, files, deletes, fk, keys, table, how, access))
    out = parts[0]
    for other in parts[1:]:
        out = out.unionByName(other)
    return out


def _identity(
    tasks: Sequence[DataTask], deletes: dict[int, DeleteTask], keys: dict[int, Any]
) -> Hashable:
    """What `_positions` reads and makes: each data file with deletes (path read, path
    recorded, size, its key) with the delete files or vectors that apply to it."""
    return tuple(
        (
            t.read_path,
            t.path,
            t.size_bytes,
            t.record_count,
            keys[t.file_id],
            tuple(
                sorted(
                    (d.read_path, d.size_bytes, d.dv.offset if d.dv else -1)
                    for d in (deletes[p] for p in t.pos_deletes)
                )
            ),
        )
        for t in sorted(tasks, key=lambda t: t.read_path)
        if t.pos_deletes
    )


def _dv_positions(
    ctx: ReadContext,
    tasks: Sequence[DataTask],
    deletes: dict[int, DeleteTask],
    fk: FileKey,
    keys: dict[int, Any],
    table: str,
    io: FileIO | None,
) -> DataFrame:
    """($fkey, position) from deletion vectors, decoded on the driver (Spark cannot read a
    Puffin blob): one row per data file holding its positions as an array, exploded."""
    found = read_positions(tasks, deletes, table, io, ctx.cache)
    spark = ctx.spark
    schema = T.StructType(
        [
            T.StructField(FKEY, key_type(fk), False),
            T.StructField("$positions", T.ArrayType(T.LongType(), False), False),
        ]
    )
    rows = [(keys[fid], p.to_pylist()) for fid, p in sorted(found.items()) if len(p)]
    df = spark.createDataFrame(rows, schema)
    return df.select(F.col(FKEY), F.explode(F.col("`$positions`")).alias(POS))


DKEY = "$dkey"


def _file_positions(
    ctx: ReadContext,
    tasks: Sequence[DataTask],
    deletes: dict[int, DeleteTask],
    fk: FileKey,
    keys: dict[int, Any],
    table: str,
    how: Reading | None,
    access: StoreAccess | None,
) -> DataFrame:
    """($fkey, position) from position delete files, read by Spark (one read through a file
    list, whatever their number): each row kept only for a (delete file, data file) pair
    planning matched, on the delete file's key and the data file's path as recorded."""
    used = [deletes[i] for i in sorted({p for t in tasks for p in t.pos_deletes})]
    schema = T.StructType(
        [T.StructField("file_path", T.StringType()), T.StructField("pos", T.LongType())]
    )  # no field ids: the spec fixes these names
    group = Group(used, schema, [F.col("file_path"), F.col("pos")])
    read = read_files(ctx, [group], f"position deletes of {table}", [(DKEY, KEY)], how, access)
    pairs = [(read.keys[p], t.path, keys[t.file_id]) for t in tasks for p in t.pos_deletes]
    fields = [(DKEY, key_type(read.key)), ("$recorded", T.StringType()), (FKEY, key_type(fk))]
    ptab = F.broadcast(local_table(ctx.spark, fields, pairs))
    pdf = read.df
    # match on the data file path exactly as recorded, never a mapped one; the delete side is
    # small next to the data, so its string joins cost little
    cond = (pdf[DKEY] == ptab[DKEY]) & (pdf["file_path"] == ptab["$recorded"])
    return pdf.join(ptab, cond, "inner").select(F.col(FKEY), F.col("pos").alias(POS))
