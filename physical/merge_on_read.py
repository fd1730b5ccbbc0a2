"""A merge-on-read scan of an Iceberg table's data files as DataFrame operations.

In order (each step in a module of its own):
1. every data file and position delete file is checked against its recorded size (guards.py);
2. the files are read by Spark's Parquet reader, one read per layout through a file list
   whatever their number (reads.py, file_lists.py), columns by name with the table's names and
   types (columns.py), each row carrying its file's key and `_metadata.row_index` when a later
   step needs them;
3. the query's pushed filters;
4. position deletes and deletion vectors removed (position_deletes.py);
5. the metadata columns the query names (metadata_columns.py);
6. for the equality anti-joins above the scan, each row's file's data sequence number and
   partition (`$data_seq`, `$partition`) from a broadcast table on the file key; a row from a
   file the plan does not list stops the query instead of disappearing.

A scan that needs no column and no filter (`count(*)`, `EXISTS`) over files without equality
deletes is `spark.range(n)`: n is the files' record counts less the positions their deletes
remove, and no data file is read.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from mor.physical.deletes.delete_files import read_positions
from mor.physical.deletes.position_deletes import remove_deleted
from mor.physical.scan.columns import column, merged_fields, read_schema
from mor.physical.scan.guards import POS, check_deletes, check_files, guard
from mor.physical.scan.metadata_columns import STORED, hidden_type, with_hidden
from mor.physical.scan.reads import KEY, ROW_INDEX, Group, ReadContext, read_files, where_all
from mor.physical.scan.tables import FKEY, with_file_columns
from mor.physical.scan.types import spark_type
from mor.physical.spark.store_access import table_access
from mor.planner.nodes import DATA_SEQ, LINEAGE_COLUMNS, PART, Layout
from mor.rules.physical.nodes import CountRows, ReadData


def scan_data(ctx: ReadContext, node: ReadData | CountRows) -> DataFrame:
    """The DataFrame of a planned scan (rules/physical/), as its node decided."""
    spark = ctx.spark
    scan = node.scan
    tasks = scan.data_files()
    out_cols = [f.col.name for f in scan.fields]
    if not tasks:
        empty = T.StructType(
            [T.StructField(f.col.name, spark_type(f.type_str, scan.table)) for f in scan.fields]
            + [T.StructField(h, hidden_type(scan, h)) for h in scan.hidden]
            + [T.StructField(m, T.LongType()) for m in scan.meta]
        )
        return spark.createDataFrame([], empty)
    deletes = scan.deletes_by_id()
    used = sorted({p for t in tasks for p in t.pos_deletes})
    if isinstance(node, CountRows):
        # no column and no filter: the rows are the files' record counts less the exactly
        # deleted positions (unique, within each file's count); no data file is read, so only
        # the delete files read on the driver are checked
        check_deletes(scan)
        found = read_positions(tasks, deletes, scan.table, scan.io, ctx.cache) if used else {}
        live = sum(t.record_count for t in tasks) - sum(len(p) for p in found.values())
        return spark.range(live).select()
    check_files(scan)
    lineage = [h for h in scan.hidden if h in LINEAGE_COLUMNS]
    layouts = scan.files.layouts if scan.files else (Layout(),)
    where = f"table {scan.table}"
    merged = merged_fields(scan.fields)
    groups = []
    for lay_idx in sorted({t.layout for t in tasks}):
        layout = layouts[lay_idx]
        cols = [column(f, layout, where, f.field_id in merged) for f in scan.fields]
        schema = read_schema(scan.fields, where, layout)
        for h in lineage:
            # the value a v3 writer stored (rows it copied keep their lineage); NULL when the
            # file has no such column
            schema = schema.add(T.StructField(h, T.LongType(), True))
            cols.append(F.col(f"`{h}`").alias(STORED + h))
        groups.append(Group([t for t in tasks if t.layout == lay_idx], schema, cols))
    need_key = bool(used) or bool(scan.hidden) or bool(scan.meta)
    meta = [(FKEY, KEY), (POS, ROW_INDEX)] if need_key else []
    read = read_files(
        ctx, groups, f"data files of {scan.table}", meta, node.reading, table_access(scan)
    )
    df = read.df
    if scan.pushed:
        df = where_all(df, scan.pushed)
    if node.positions is not None:
        df = remove_deleted(ctx, df, read, tasks, deletes, node)
    hidden = []
    if scan.hidden:
        df = with_hidden(spark, scan, df, read)
        # _file is never NULL: a row from a file the plan does not list stops the query
        hidden = [guard(h, scan.table) if h == "_file" else F.col(h) for h in scan.hidden]
    if scan.meta:
        rows = [(read.keys[t.file_id], t.data_seq, t.partition_id) for t in tasks]
        df = with_file_columns(spark, df, read.key, rows, (DATA_SEQ, PART), (T.LongType(),) * 2)
        # guard the columns the anti-joins read, so Spark cannot prune the check away
        return df.select(*out_cols, *hidden, *[guard(m, scan.table) for m in scan.meta])
    return df.select(*out_cols, *hidden)
