"""The keys of an equality delete scan: what the anti-joins of its id set match data rows with.

The delete files are read by Spark (reads.py: one read per layout through a file list), their
key columns by name with the table's types, float and double keys as text (compared as
Iceberg's Java reader compares them). When a guard of a consumer needs them, each key carries
its file's data sequence number (`$del_seq`) and partition (`$del_partition`) from a broadcast
table on the file key. Several files' keys are compacted (one row per key and scope, with the
newest sequence number) only when the side is too large to broadcast
(rules/physical/broadcast.compacted_keys). The side is kept in Spark's cache across queries
of a session (reuse.cached) and broadcast when small (broadcast.broadcast_allowed).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from mor.physical.scan.columns import column, float_key, read_schema
from mor.physical.scan.guards import check_files, guard
from mor.physical.scan.reads import KEY, Group, ReadContext, read_files, where_all
from mor.physical.scan.tables import FKEY, with_file_columns
from mor.physical.spark.reuse import cached, fingerprint
from mor.physical.spark.store_access import table_access
from mor.planner.nodes import DEL_PART, DEL_SEQ, EqDeleteScan
from mor.planner.settings import current
from mor.rules.physical.nodes import ReadEqDeletes
from mor.rules.physical.reading import Reading


def scan_eq_deletes(ctx: ReadContext, planned: ReadEqDeletes) -> DataFrame:
    """The keys of a planned equality delete scan (rules/physical/), as its node decided:
    compacted, kept in Spark's cache, broadcast or not."""
    node = planned.node
    check_files(node)
    df = cached(
        ctx.spark,
        ("equality deletes", fingerprint(node), planned.compact),
        lambda: _rows(ctx, node, planned.compact, planned.reading),
        planned.estimate,
        current().delete_cache_bytes,
        planned.persist,
    )
    if planned.broadcast:
        return F.broadcast(df)
    return df


def _rows(ctx: ReadContext, node: EqDeleteScan, compact: bool, how: Reading) -> DataFrame:
    """The keys of an equality delete scan's files (with $del_seq and $del_partition when a
    guard needs them), compacted when `compact`."""
    where = f"equality deletes of {node.table}"
    key_names = [k.col.name for k in node.keys]
    groups = []
    for lay_idx in sorted({f.layout for f in node.files}):
        layout = node.layouts[lay_idx]
        files = [f for f in node.files if f.layout == lay_idx]
        cols = [column(k, layout, where) for k in node.keys]
        groups.append(Group(files, read_schema(node.keys, where, layout), cols))
    read = read_files(ctx, groups, where, [(FKEY, KEY)], how, table_access(node))
    df = read.df
    if node.pushed:
        df = where_all(df, node.pushed)
    for k in node.keys:
        if k.compared_as_text:  # before compaction: -0.0 and 0.0 are two delete keys
            df = df.withColumn(k.col.name, float_key(F.col(f"`{k.col.name}`")))
    if not node.meta:
        # no anti-join reading this checks a guard: the keys alone
        df = df.select(*key_names)
        return df.distinct() if compact else df
    rows = [(read.keys[f.file_id], f.data_seq, f.partition_id) for f in node.files]
    df = with_file_columns(ctx.spark, df, read.key, rows, (DEL_SEQ, DEL_PART), (T.LongType(),) * 2)
    df = df.select(*key_names, guard(DEL_SEQ, f"equality deletes of {node.table}"), DEL_PART)
    if compact:
        # one row per key and scope, with the highest sequence number (a key is deleted for
        # a data file iff some delete of it is newer; the newest decides)
        df = (
            df.groupBy(*key_names, DEL_PART)
            .agg(F.max(DEL_SEQ).alias(DEL_SEQ))
            .select(*key_names, DEL_SEQ, DEL_PART)
        )
    return df
