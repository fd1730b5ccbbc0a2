"""What stops a query rather than let it return wrong rows: files checked against their
recorded sizes before Spark reads them, and checks inside Spark's tasks (`raise_error`, which
physical/spark/spark_errors.py names in the user's terms)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from mor.physical.scan.files import file_sizes
from mor.physical.scan.reads import unlisted
from mor.physical.scan.tables import COUNT, RECORDED
from mor.planner.errors import DataFileError
from mor.planner.nodes import RESOLVED, DataTask, DeleteTask, EqDeleteScan, IcebergScan, Plan

POS = "$pos"


Checked = tuple[Sequence[DataTask | DeleteTask], str, str, str]  # files, source, kind, table


def check_all(groups: Sequence[Checked]) -> None:
    """Every file must exist with the size its manifest entry records, before Spark reads
    any: a file replaced by another (truncated, rewritten) would otherwise be read as if it
    were the committed one (rows lost or added without a word, positions matched to the wrong
    rows; Spark plans a listed file's splits by its recorded size). Local files by one `stat`
    each (2 us: 0.2 s for 100,000 files), others through the table's FileIO, on the client. A
    same-size replacement cannot be seen without checksums (docs/limitations.md).

    The groups (files, source, kind, table) are sized together, one call per table: a folder
    that holds data files and their delete files is listed once for all of them
    (physical/scan/files.py), not once per kind, nor its few delete files asked for one by one."""
    by_source: dict[Any, list[str]] = {}  # by FileIO (None: local files only)
    for files, io, _, _ in groups:
        by_source.setdefault(io, []).extend(t.read_path for t in files)
    sizes = {src: file_sizes(src, list(dict.fromkeys(ps))) for src, ps in by_source.items()}
    for files, io, kind, table in groups:
        for t in files:
            size = sizes[io][t.read_path]
            if size is None:
                raise DataFileError(f"{kind} file {t.read_path} of {table} is missing")
            if size != t.size_bytes:
                raise DataFileError(
                    f"{kind} file {t.read_path} of {table} is {size} bytes, but the table's "
                    f"metadata records {t.size_bytes}: it was replaced or truncated since it "
                    "was committed; refusing to read it"
                )


def check_files(node: Plan) -> None:
    """check_all for every data and delete file the plan below `node` reads, in one call."""
    groups: list[Checked] = []
    for n in node.walk():
        if isinstance(n, IcebergScan):
            groups += _scan_groups(n, data=True)
        elif isinstance(n, EqDeleteScan):
            groups.append((n.files, n.io, "equality delete", n.table))
    check_all(groups)


def check_deletes(scan: IcebergScan) -> None:
    """check_all for the delete files of a scan that reads no data file (a count from
    metadata)."""
    check_all(_scan_groups(scan, data=False))


def _scan_groups(n: IcebergScan, data: bool) -> list[Checked]:
    tasks = n.data_files()
    deletes = n.deletes_by_id()
    used = sorted({p for t in tasks for p in t.pos_deletes})
    # a resolved equality delete is no file: its positions are in memory
    files = [deletes[i] for i in used if deletes[i].kind != RESOLVED]
    # a branch read over resolved positions still answers for its equality delete files
    # (rules/physical/equality.py): they are checked as an anti-join reading them is
    eq = [d for d in n.files.deletes if d.kind == "equality"] if n.files else []
    groups: list[Checked] = [
        (files, n.io, "delete", n.table),
        (eq, n.io, "equality delete", n.table),
    ]
    if data:
        groups.append((tasks, n.io, "data", n.table))
    return groups


def row_count_check(df: DataFrame, table: str) -> DataFrame:
    """Stop the query at a row at or past its file's recorded row count ($count, NULL for a
    file that is not checked). Positions there were never checked against the delete files
    (and would not fit a packed key), so such a row cannot be called live: a file replaced by
    one of the same size but more rows is refused instead of read around."""
    msg = F.concat(
        F.lit("mor: data file "),
        F.col(RECORDED),
        F.lit(f" of {table} has more rows than its metadata records ("),
        F.col(COUNT).cast("string"),
        F.lit(")"),
    )
    return df.where(F.when(F.col(POS) >= F.col(COUNT), F.raise_error(msg)).otherwise(True))


def guard(c: str, what: str) -> Column:
    """The column itself, or a query failure when a row came from a file not in the plan."""
    msg = unlisted(what)
    return F.coalesce(F.col(f"`{c}`"), F.raise_error(F.lit(msg))).alias(c)
