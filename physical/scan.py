"""Reading Iceberg data and delete files with Spark's vectorized Parquet reader.

Columns are read by Parquet field id (`spark.sql.parquet.fieldId.read.enabled`), so renamed,
reordered and later-added columns read correctly. Position deletes are applied inside the scan:
the rows at deleted positions (`_metadata.row_index`) are removed before anything else sees them.

Rows name their file by a key: `_metadata.file_size` when the sizes of the files read are unique
(a long), else the path Spark reports. Per-file values ($data_seq, $partition) come from a small
broadcast table on that key; a row whose key is not in it stops the query rather than vanishing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Hashable, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from mor.physical.classic import read_parquet
from mor.physical.files import file_sizes
from mor.physical.paths import SparkPaths
from mor.physical.positions import (
    bitmap_files,
    bitmap_keep,
    first_line,
    read_positions,
)
from mor.physical.reuse import cached, fingerprint, reused
from mor.physical.strategy import (
    FileKey,
    broadcast_allowed,
    compacted_keys,
    counted_from_metadata,
    default_broadcast_bytes,
    eq_relation_bytes,
    file_key,
    position_relation_bytes,
    position_strategy,
)
from mor.physical.types import FIELD_ID_KEY, spark_type
from mor.planner.errors import DataFileError, UnsupportedError
from mor.planner.nodes import (
    DATA_SEQ,
    DEL_PART,
    DEL_SEQ,
    LINEAGE_COLUMNS,
    PART,
    DataTask,
    DeleteTask,
    EqDeleteScan,
    Expr,
    IcebergScan,
    Layout,
    Plan,
    ReadField,
)
from mor.planner.settings import current

POS = "$pos"
PKEY = "$pkey"  # file_size << shift | row_index
FILE_ID = "$file_id"
STORED = "$stored"  # + a row lineage column: the value in the data file


def _file_name(layout: Layout, field_id: int | None, name: str, top: bool) -> str:
    """The name field `field_id` (named `name` in the table's schema) has in files of this
    layout. Spark reads every column by name: no Parquet field ids (reading by id needs a
    session setting that would change the user's own reads too)."""
    if field_id is not None and layout.by_name and (top or layout.nested):
        o = layout.override(field_id)
        return o[0] if o and o[0] else f"__mor_absent_{field_id}"  # absent: reads as NULL
    return name


def _plain(t: T.DataType) -> T.DataType:
    """`t` without field-id metadata (the table's names and types, as Spark compares them)."""
    if isinstance(t, T.StructType):
        return T.StructType([T.StructField(f.name, _plain(f.dataType), True) for f in t.fields])
    if isinstance(t, T.ArrayType):
        return T.ArrayType(_plain(t.elementType), t.containsNull)
    if isinstance(t, T.MapType):
        return T.MapType(_plain(t.keyType), _plain(t.valueType), t.valueContainsNull)
    return t


def _fid(f: T.StructField) -> int | None:
    v = f.metadata.get(FIELD_ID_KEY)
    return int(v) if v is not None else None


def _promoted(layout: Layout, field_id: int | None, where: str) -> T.DataType | None:
    o = layout.override(field_id) if field_id is not None else None
    return spark_type(f'"{o[1]}"', where) if o and o[1] else None


def _in_file(t: T.DataType, layout: Layout, where: str) -> T.DataType:
    """A declared (schema) type as files of this layout hold it: struct fields under their
    names in the file, promoted primitives with the file's type."""
    if isinstance(t, T.StructType):
        return T.StructType(
            [
                T.StructField(
                    _file_name(layout, _fid(f), f.name, top=False),
                    _promoted(layout, _fid(f), where) or _in_file(f.dataType, layout, where),
                    True,
                )
                for f in t.fields
            ]
        )
    if isinstance(t, T.ArrayType):
        return T.ArrayType(_in_file(t.elementType, layout, where), t.containsNull)
    if isinstance(t, T.MapType):
        return T.MapType(
            _in_file(t.keyType, layout, where),
            _in_file(t.valueType, layout, where),
            t.valueContainsNull,
        )
    return t


def _read_type(layout: Layout, rf: ReadField, where: str) -> T.DataType:
    return _promoted(layout, rf.field_id, where) or _in_file(
        spark_type(rf.type_str, f"{where}, column {rf.col.label}"), layout, where
    )


def _read_schema(fields: Sequence[ReadField], where: str, layout: Layout) -> T.StructType:
    """Top-level columns under their names in the file; nested reads merge into their struct
    (a whole struct field read too covers them)."""
    top: dict[int, T.StructField] = {}
    order: list[int] = []
    for rf in fields:
        node = T.StructField(_leaf_name(layout, rf), _read_type(layout, rf, where), True)
        for i in range(len(rf.path) - 1, -1, -1):
            name, fid = rf.path[i]
            outer = _file_name(layout, fid, name, top=i == 0)
            node = T.StructField(outer, T.StructType([node]), True)
        tid = rf.path[0][1] if rf.path else rf.field_id
        if tid in top:
            node = _merge(top[tid], node)
        else:
            order.append(tid)
        top[tid] = node
    return T.StructType([top[i] for i in order])


def _leaf_name(layout: Layout, rf: ReadField) -> str:
    return _file_name(layout, rf.field_id, rf.col.label, top=not rf.path)


def _merge(a: T.StructField, b: T.StructField) -> T.StructField:
    if not (isinstance(a.dataType, T.StructType) and isinstance(b.dataType, T.StructType)):
        return a  # a whole field already covers the nested one
    kids = {f.name: f for f in a.dataType.fields}
    for f in b.dataType.fields:
        kids[f.name] = _merge(kids[f.name], f) if f.name in kids else f
    return T.StructField(a.name, T.StructType(list(kids.values())), True)


def _column(rf: ReadField, layout: Layout, where: str, merged: bool = False) -> Column:
    """The column a read field becomes, with the table's names and types. `merged`: a nested
    key was read into this (whole) struct field too, so it is shaped back to its own type."""
    if rf.default is not None and not rf.path and rf.field_id in layout.absent:
        # a file written before the column was added: it reads the column's initial default
        return F.expr(rf.default).alias(rf.col.name)
    if not rf.path:
        c = F.col(f"`{_file_name(layout, rf.field_id, rf.col.label, top=True)}`")
    else:
        name, fid = rf.path[0]
        c = F.col(f"`{_file_name(layout, fid, name, top=True)}`")
        for name, fid in rf.path[1:]:
            c = c.getField(_file_name(layout, fid, name, top=False))
        c = c.getField(_leaf_name(layout, rf))
    declared = spark_type(rf.type_str, f"{where}, column {rf.col.label}")
    read = _read_type(layout, rf, where)
    if merged or read != _plain(declared):  # rebuilt and NaN-shielded in one pass
        return _as_declared(c, layout, declared, where, rf.field_id).alias(rf.col.name)
    return _nan_shielded(c, _plain(declared)).alias(rf.col.name)


def _has_floats(t: T.DataType) -> bool:
    if isinstance(t, (T.FloatType, T.DoubleType)):
        return True
    return isinstance(t, T.StructType) and any(_has_floats(f.dataType) for f in t.fields)


def _nan_shielded(c: Column, t: T.DataType) -> Column:
    """A float or double column (also inside structs) Spark cannot turn into a Parquet filter.

    Spark prunes Parquet row groups by their min/max statistics, and writers such as pyarrow
    (pyiceberg's) leave NaN out of them: `d > 5` then skips a row group whose numbers are all
    below 5 but which holds NaN, and Spark orders NaN above every number, so rows are lost
    (even in plain spark.read.parquet). `nanvl(x, x)` is x itself (NaN, -0.0 and NULL kept)
    but is no column reference, so no filter on it reaches the Parquet reader."""
    if isinstance(t, (T.FloatType, T.DoubleType)):
        return F.nanvl(c, c)
    if isinstance(t, T.StructType) and _has_floats(t):
        kids = [_nan_shielded(c.getField(f.name), f.dataType).alias(f.name) for f in t.fields]
        return F.when(c.isNull(), F.lit(None)).otherwise(F.struct(*kids))
    return c


def _as_declared(
    c: Column,
    layout: Layout,
    declared: T.DataType,
    where: str,
    field_id: int | None = None,
    shield: bool = True,
) -> Column:
    """A column read as files of `layout` hold it, rebuilt with exactly the declared children,
    names and types (a NULL struct stays NULL); identity where nothing differs. `shield`: float
    and double leaves outside arrays and maps are NaN-shielded in the same pass."""
    if _promoted(layout, field_id, where) is not None:  # promoted since the file was written
        cast = c.cast(_plain(declared))
        return _nan_shielded(cast, _plain(declared)) if shield else cast
    if isinstance(declared, T.StructType):
        kids = [
            _as_declared(
                c.getField(_file_name(layout, _fid(f), f.name, top=False)),
                layout,
                f.dataType,
                where,
                _fid(f),
                shield,
            ).alias(f.name)
            for f in declared.fields
        ]
        return F.when(c.isNull(), F.lit(None)).otherwise(F.struct(*kids))
    in_file = _in_file(declared, layout, where)
    if isinstance(declared, T.ArrayType) and in_file != _plain(declared):
        return F.transform(
            c, lambda x: _as_declared(x, layout, declared.elementType, where, shield=False)
        )
    if isinstance(declared, T.MapType) and in_file != _plain(declared):
        return F.map_from_arrays(
            F.transform(
                F.map_keys(c),
                lambda k: _as_declared(k, layout, declared.keyType, where, shield=False),
            ),
            F.transform(
                F.map_values(c),
                lambda v: _as_declared(v, layout, declared.valueType, where, shield=False),
            ),
        )
    if in_file != _plain(declared):
        c = c.cast(_plain(declared))
    return _nan_shielded(c, _plain(declared)) if shield else c


def _merged(fields: Sequence[ReadField]) -> set[int]:
    """Field ids of whole top-level fields that a nested read of the same scan merges into."""
    under = {f.path[0][1] for f in fields if f.path}
    return {f.field_id for f in fields if not f.path and f.field_id in under}


LISTING = "spark.sql.sources.parallelPartitionDiscovery.threshold"


def listing_threshold(spark: SparkSession) -> int:
    """The session's listing threshold: reads of more paths start a Spark listing job."""
    try:
        return max(int(spark.conf.get(LISTING, "32") or 32), 1)
    except (TypeError, ValueError):
        return 32


def _read(
    spark: SparkSession,
    schema: T.StructType,
    read_paths: list[str],
    what: str,
    paths: SparkPaths,
    columns: Sequence[Column],
    meta: Sequence[tuple[str, str | _KeyColumn]] = (),
) -> DataFrame:
    """`columns` of the files, then `meta`: (alias, `_metadata` field, or the file key's
    expression) pairs; `paths` learns Spark's form of the files' paths from the reads.

    Spark lists the paths it is given when the DataFrame is made, and more paths than the
    session's listing threshold (32 by default) start a Spark job to list them (0.7-4.5 s for
    83 files, against 0.13 s below it). mor knows every file already, so it reads them in
    groups of at most that many paths, unioned: the listing stays on the driver, and the
    user's setting is read, never changed. `_metadata` does not resolve above a union, so each
    group selects its `_metadata` fields; `columns` are applied once, above the union (on a
    classic session every Column passed to a select is a py4j round trip). Each group's read
    is reused by later queries of the session (physical/reuse.py)."""
    limit = listing_threshold(spark)
    frames = []
    fields = schema.json()
    for i in range(0, len(read_paths), limit):
        chunk = read_paths[i : i + limit]

        def make(chunk: list[str] = chunk) -> DataFrame:
            try:
                df = read_parquet(spark.read.schema(schema), spark, chunk)
            except Exception as e:  # noqa: BLE001 - AnalysisException for a missing path, etc.
                raise DataFileError(f"cannot read {what}: {first_line(e)}") from e
            paths.learn(df, chunk)
            if meta:
                exprs = [f"_metadata.{m}" if isinstance(m, str) else m(chunk) for _, m in meta]
                df = df.select("*", *[F.expr(e).alias(a) for (a, _), e in zip(meta, exprs)])
            return df

        made = tuple((a, m if isinstance(m, str) else m.identity(chunk)) for a, m in meta)
        df = reused(spark, ("read", fields, tuple(chunk), made), make)
        paths.learn(df, chunk)
        frames.append(df)
    df = frames[0]
    for other in frames[1:]:
        df = df.union(other)
    return df.select(*columns, *[a for a, _ in meta])


FKEY = "$fkey"


def _file_keys(
    files: Sequence[DataTask | DeleteTask], fk: FileKey, paths: SparkPaths
) -> dict[int, Any]:
    """Each file's key value: file id -> its size, -n for the n-th file (in path order) of a
    size another file shares, or Spark's path (asked of `paths` only for that kind, after the
    reads)."""
    if fk.kind == "file_path":
        return {f.file_id: paths(f.read_path) for f in files}
    keys: dict[int, Any] = {}
    n = 0
    for f in sorted(files, key=lambda f: f.read_path):
        if f.size_bytes in fk.shared:
            n += 1
            keys[f.file_id] = -n
        else:
            keys[f.file_id] = f.size_bytes
    return keys


class _KeyColumn:
    """The file key of a row as SQL text over `_metadata`, for a group of files read together
    (`_read`'s meta): `_metadata.file_size`, or with files of shared sizes told apart by the
    path Spark reports. `identity` says what the text depends on without asking Spark for
    paths (the text needs the group read first)."""

    def __init__(
        self,
        fk: FileKey,
        files: Sequence[DataTask | DeleteTask],
        keys: dict[int, Any],
        paths: SparkPaths,
        what: str,
    ) -> None:
        self.fk, self.keys, self.paths, self.what = fk, keys, paths, what
        self.by_path = {f.read_path: f for f in files}

    def _shared(self, chunk: list[str]) -> list[DataTask | DeleteTask]:
        if self.fk.kind != "file_size+path":
            return []
        return [self.by_path[p] for p in chunk if self.by_path[p].size_bytes in self.fk.shared]

    def identity(self, chunk: list[str]) -> Hashable:
        return (
            self.fk.kind,
            tuple((f.read_path, self.keys[f.file_id]) for f in self._shared(chunk)),
        )

    def __call__(self, chunk: list[str]) -> str:
        if self.fk.kind != "file_size+path":
            return f"_metadata.{self.fk.kind}"
        shared = self._shared(chunk)
        if not shared:
            return "_metadata.file_size"
        sizes = ", ".join(str(s) for s in sorted({f.size_bytes for f in shared}))
        text = T.StringType()
        whens = " ".join(
            f"WHEN {_sql_literal(self.paths(f.read_path), text)} THEN {int(self.keys[f.file_id])}"
            for f in shared
        )
        msg = _sql_literal(_unlisted(self.what), text)
        return (
            f"CASE WHEN _metadata.file_size IN ({sizes}) THEN CASE _metadata.file_path {whens} "
            f"ELSE raise_error({msg}) END ELSE _metadata.file_size END"
        )


def check_sizes(
    files: Sequence[DataTask | DeleteTask], source_key: str, kind: str, table: str
) -> None:
    """Every file must exist with the size its manifest entry records, before Spark reads
    any: a file replaced by another (truncated, rewritten) would otherwise be read as if it
    were the committed one (rows lost or added without a word, positions matched to the wrong
    rows). Local files by `stat`, others through the table's FileIO, on the client. A
    same-size replacement cannot be seen without checksums (docs/limitations.md)."""
    sizes = file_sizes(source_key, [t.read_path for t in files])
    for t in files:
        size = sizes[t.read_path]
        if size is None:
            raise DataFileError(f"{kind} file {t.read_path} of {table} is missing")
        if size != t.size_bytes:
            raise DataFileError(
                f"{kind} file {t.read_path} of {table} is {size} bytes, but the table's "
                f"metadata records {t.size_bytes}: it was replaced or truncated since it was "
                "committed; refusing to read it"
            )


def check_files(node: Plan) -> None:
    """check_sizes for every data and delete file the plan below `node` reads."""
    for n in node.walk():
        if isinstance(n, IcebergScan):
            tasks = n.data_files()
            deletes = n.deletes_by_id()
            used = sorted({p for t in tasks for p in t.pos_deletes})
            check_sizes(tasks, n.source_key, "data", n.table)
            check_sizes([deletes[i] for i in used], n.source_key, "delete", n.table)
        elif isinstance(n, EqDeleteScan):
            check_sizes(n.files, n.source_key, "equality delete", n.table)


def _key_type(fk: FileKey) -> T.DataType:
    return T.LongType() if fk.is_long else T.StringType()


def _sql_literal(v: Any, dtype: T.DataType) -> str:
    if isinstance(dtype, T.StringType):
        return f"CAST(X'{str(v).encode('utf-8').hex()}' AS STRING)"  # any character, unescaped
    return f"CAST({int(v)} AS {'INT' if isinstance(dtype, T.IntegerType) else 'BIGINT'})"


def _local_table(
    spark: SparkSession, fields: list[tuple[str, T.DataType]], rows: list[tuple[Any, ...]]
) -> DataFrame:
    """A small table as an inline VALUES relation: Spark keeps it on the driver (a
    LocalRelation). Broadcasting it still runs one small Spark job per query over those rows
    (~0.05 s, measured), far less than a table from createDataFrame of Python rows."""
    if not rows:
        return spark.createDataFrame([], T.StructType([T.StructField(n, t) for n, t in fields]))
    literals = [[_sql_literal(v, t) for v, (_, t) in zip(r, fields)] for r in rows]
    return _values(spark, [n for n, _ in fields], literals)


def _values(spark: SparkSession, names: list[str], rows: list[list[str]]) -> DataFrame:
    """`SELECT * FROM VALUES ...`: rows of SQL literals (foldable expressions), at least one."""
    values = ", ".join("(" + ", ".join(r) + ")" for r in rows)
    cols = ", ".join(f"`{n}`" for n in names)
    return spark.sql(f"SELECT * FROM VALUES {values} AS t({cols})")


def _file_table(
    spark: SparkSession,
    fk: FileKey,
    rows: list[tuple[Any, ...]],
    names: tuple[str, ...],
    types: tuple[T.DataType, ...] | None = None,
) -> DataFrame:
    """($fkey, *names) per file, broadcast; the first name is an INT, the rest BIGINT unless
    `types` says otherwise."""
    types = types or (T.IntegerType(),) + (T.LongType(),) * (len(names) - 1)
    fields = [(FKEY, _key_type(fk)), *zip(names, types)]
    return F.broadcast(_local_table(spark, fields, rows))


COUNT = "$count"
BITMAP = "$bitmap"
RECORDED = "$recorded_path"


def _bitmap_table(
    spark: SparkSession, fk: FileKey, rows: list[tuple[Any, str, int, str]]
) -> DataFrame:
    """($fkey, $bitmap array<bigint>, $count, $recorded_path) per data file, an inline VALUES
    relation (a LocalRelation: its broadcast is one small job over these rows, no file read).
    Each bitmap's text is a query parameter, so Spark parses no SQL holding it; it becomes the
    array once, on the driver."""
    values = []
    args = {}
    for i, (key, text, count, path) in enumerate(rows):
        if text:
            args[f"b{i}"] = text
            words = f"CAST(split(:b{i}, ',') AS array<bigint>)"
        else:
            words = "CAST(array() AS array<bigint>)"
        values.append(
            f"({_sql_literal(key, _key_type(fk))}, {words}, {_sql_literal(count, T.LongType())}, "
            f"{_sql_literal(path, T.StringType())})"
        )
    cols = ", ".join(f"`{n}`" for n in (FKEY, BITMAP, COUNT, RECORDED))
    return spark.sql(f"SELECT * FROM VALUES {', '.join(values)} AS t({cols})", args=args or None)


def _row_count_check(df: DataFrame, table: str) -> DataFrame:
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


def _unlisted(what: str) -> str:
    """The failure of a row whose file is not in the plan (physical/errors.py recognises it)."""
    return f"mor: a row of {what} came from a file the plan does not list"


def _guard(c: str, what: str) -> Column:
    """The column itself, or a query failure when a row came from a file not in the plan."""
    msg = _unlisted(what)
    return F.coalesce(F.col(f"`{c}`"), F.raise_error(F.lit(msg))).alias(c)


def broadcast_limit(spark: SparkSession) -> int:
    """The most bytes a broadcast delete side may take (strategy.broadcast_allowed): the
    setting, else an eighth of the driver's memory within half its maxResultSize."""
    limit = current().broadcast_bytes
    if limit > 0:
        return limit
    try:
        memory = spark.conf.get("spark.driver.memory", None)
        result = spark.conf.get("spark.driver.maxResultSize", None)
    except Exception:  # noqa: BLE001 - a session that hides them: Spark's defaults
        memory = result = None
    return default_broadcast_bytes(memory, result)


def _broadcast_if_small(spark: SparkSession, df: DataFrame, rows: int, est: int) -> DataFrame:
    """Broadcast a delete side whose rows and estimated bytes planning knows to be small
    enough; else Spark shuffles both sides (slower, bounded in memory)."""
    return F.broadcast(df) if broadcast_allowed(rows, est, broadcast_limit(spark)) else df


def where_all(df: DataFrame, conditions: Sequence[Expr]) -> DataFrame:
    """Rows meeting every condition (bound SQL text), as one Spark filter."""
    return df.where(F.expr(" AND ".join(f"({e.sql})" for e in conditions)))


def _packed(file_size: Column, pos: Column, shift: int) -> Column:
    return F.shiftleft(file_size, shift).bitwiseOR(pos)


def scan_data(spark: SparkSession, scan: IcebergScan, paths: SparkPaths) -> DataFrame:
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
    need_pos = any(t.pos_deletes for t in tasks) or bool(scan.hidden)
    lineage = [h for h in scan.hidden if h in LINEAGE_COLUMNS]
    used = sorted({p for t in tasks for p in t.pos_deletes})
    check_files(scan)
    if counted_from_metadata(
        len(scan.fields),
        len(scan.hidden),
        len(scan.meta),
        len(scan.pushed),
        len(scan.eq_sets),
        tasks,
        deletes,
    ):
        # no column and no filter: the rows are the files' record counts less the exactly
        # deleted positions (unique, within each file's count), and no data file is read
        found = read_positions(tasks, deletes, scan.table, scan.source_key) if used else {}
        live = sum(t.record_count for t in tasks) - sum(len(p) for p in found.values())
        return spark.range(live).select()
    fk = file_key(tasks)
    # long keys are known before the reads; paths only once Spark has listed them
    keys = _file_keys(tasks, fk, paths) if fk.is_long else {}
    layouts = scan.files.layouts if scan.files else (Layout(),)
    where = f"table {scan.table}"
    key_col = _KeyColumn(fk, tasks, keys, paths, where)
    frames = []
    merged = _merged(scan.fields)
    for lay_idx in sorted({t.layout for t in tasks}):
        layout = layouts[lay_idx]
        group = [t for t in tasks if t.layout == lay_idx]
        cols = [_column(f, layout, where, f.field_id in merged) for f in scan.fields]
        meta = [(FKEY, key_col), (POS, "row_index")] if need_pos or scan.meta else []
        schema = _read_schema(scan.fields, where, layout)
        for h in lineage:
            # the value a v3 writer stored (rows it copied keep their lineage); NULL when the
            # file has no such column
            schema = schema.add(T.StructField(h, T.LongType(), True))
            cols.append(F.col(f"`{h}`").alias(STORED + h))
        frames.append(
            _read(
                spark,
                schema,
                [t.read_path for t in group],
                f"data files of {scan.table}",
                paths,
                cols,
                meta,
            )
        )
    if not fk.is_long:
        keys = _file_keys(tasks, fk, paths)
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    if scan.pushed:
        df = where_all(df, scan.pushed)
    strategy = position_strategy(tasks, deletes, fk.is_long)
    if strategy is not None and strategy.method == "bitmap":
        found = read_positions(tasks, deletes, scan.table, scan.source_key)
        if found:
            # one broadcast row per data file with deletes, its bitmap an array column, joined
            # on the file key: the plan grows by a row per file, and no literal holds a bitmap
            by_id = {t.file_id: t for t in tasks}
            rows = bitmap_files(found, by_id, keys, deletes)
            table = reused(
                spark,
                ("bitmaps", fk.is_long, tuple(rows)),
                lambda: _bitmap_table(spark, fk, rows),
                weight=lambda: strategy.bitmap_bytes,
                limit=lambda: broadcast_limit(spark),
            )
            df = df.join(F.broadcast(table), FKEY, "left")
            text = T.StringType()
            keep = bitmap_keep(
                POS, BITMAP, COUNT, RECORDED, scan.table, lambda v: _sql_literal(v, text)
            )
            df = df.where(keep)
    elif strategy is not None:
        shift = strategy.shift

        def deleted() -> DataFrame:
            found = _positions(spark, tasks, deletes, paths, fk, keys, scan.table, scan.source_key)
            if shift is None:
                return found
            return found.where((F.col(POS) >= 0) & (F.col(POS) < F.lit(1 << shift))).select(
                _packed(F.col(FKEY), F.col(POS), shift).alias(PKEY)
            )

        est = position_relation_bytes(strategy, fk.is_long)
        identity = _positions_identity(tasks, deletes, keys)
        positions = cached(
            spark, ("positions", identity, shift), deleted, est, current().delete_cache_bytes
        )
        on: list[str] = [FKEY, POS]
        if shift is not None:
            df = df.withColumn(PKEY, _packed(F.col(FKEY), F.col(POS), shift))
            on = [PKEY]
        # as bitmap_keep does for bitmaps: a row past its file's recorded count stops
        counted = [(keys[t.file_id], t.record_count, t.path) for t in tasks if t.pos_deletes]
        types = (T.LongType(), T.StringType())
        df = df.join(_file_table(spark, fk, counted, (COUNT, RECORDED), types), FKEY, "left")
        df = _row_count_check(df, scan.table)
        positions = _broadcast_if_small(spark, positions, strategy.delete_rows, est)
        df = df.join(positions, on, "left_anti")
    hidden = []
    if scan.hidden:
        df = _with_hidden(spark, scan, df, fk, keys)
        # _file is never NULL: a row from a file the plan does not list stops the query
        hidden = [_guard(h, scan.table) if h == "_file" else F.col(h) for h in scan.hidden]
    if scan.meta:
        rows = [(keys[t.file_id], t.file_id, t.data_seq, t.partition_id) for t in tasks]
        df = df.join(_file_table(spark, fk, rows, (FILE_ID, DATA_SEQ, PART)), FKEY, "left")
        # guard the columns the anti-joins read, so Spark cannot prune the check away
        return df.select(*out_cols, *hidden, *[_guard(m, scan.table) for m in scan.meta])
    return df.select(*out_cols, *hidden)


def hidden_type(scan: IcebergScan, name: str) -> T.DataType:
    """The Spark type of a metadata column, as Iceberg's Spark reader types it."""
    if name == "_file":
        return T.StringType()
    if name == "_pos":
        return T.LongType()
    if name == "_spec_id":
        return T.IntegerType()
    if name in LINEAGE_COLUMNS:
        return T.LongType()
    fields = scan.files.partition_fields if scan.files else ()
    return T.StructType(
        [T.StructField(f.name, spark_type(f.type_str, f"{scan.table} _partition")) for f in fields]
    )


def _with_hidden(
    spark: SparkSession, scan: IcebergScan, df: DataFrame, fk: FileKey, keys: dict[int, Any]
) -> DataFrame:
    """Adds the metadata columns: _pos from the row index, the others per file (a broadcast
    inline table on the file key: path as recorded, spec id, partition struct)."""
    if "_pos" in scan.hidden:
        df = df.withColumn("_pos", F.col(POS))
    lineage = [h for h in scan.hidden if h in LINEAGE_COLUMNS]
    if lineage:
        df = _with_lineage(spark, scan, df, fk, keys, lineage)
    ptype = hidden_type(scan, "_partition")
    fields = scan.files.partition_fields if scan.files else ()
    if "_partition" in scan.hidden and not fields:
        # an unpartitioned table: NULL of an empty struct, as Iceberg's reader gives (Spark
        # cannot build an empty struct value)
        df = df.withColumn("_partition", F.lit(None).cast(ptype))
    per_file = [
        h
        for h in scan.hidden
        if h not in ("_pos", *LINEAGE_COLUMNS) and (h != "_partition" or fields)
    ]
    if not per_file:
        return df
    rows = []
    for t in scan.data_files():
        vals = [_sql_literal(keys[t.file_id], _key_type(fk))]
        for h in per_file:
            if h == "_file":
                vals.append(_sql_literal(t.path, T.StringType()))
            elif h == "_spec_id":
                vals.append(f"CAST({int(t.spec_id)} AS INT)")
            else:
                values = dict(t.partition)
                parts = []
                for f, sf in zip(fields, ptype.fields):
                    lit = _partition_literal(values.get(f.field_id), sf.dataType, scan.table)
                    parts.append(f"{_sql_literal(f.name, T.StringType())}, {lit}")
                vals.append(f"named_struct({', '.join(parts)})")
        rows.append(vals)
    table = _values(spark, [FKEY, *per_file], rows)
    return df.join(F.broadcast(table), FKEY, "left")


def _with_lineage(
    spark: SparkSession,
    scan: IcebergScan,
    df: DataFrame,
    fk: FileKey,
    keys: dict[int, Any],
    lineage: list[str],
) -> DataFrame:
    """`_row_id`: the stored value, else the file's first_row_id + _pos;
    `_last_updated_sequence_number`: the stored value, else the file's data sequence number, as
    the spec says (Iceberg 1.10.2's reader gives the file sequence number: apache/iceberg#17039).
    A file without a first_row_id (written before the table was upgraded to v3) has no
    lineage: both are NULL, as Iceberg's reader gives them. The per-file values come from a
    broadcast table on the file key, as the other metadata columns do."""
    null = "CAST(NULL AS BIGINT)"
    rows = [
        [
            _sql_literal(keys[t.file_id], _key_type(fk)),
            null if t.first_row_id is None else f"{int(t.first_row_id)}L",
            null if t.first_row_id is None else f"{int(t.data_seq)}L",
        ]
        for t in scan.data_files()
    ]
    table = _values(spark, [FKEY, "$first_row_id", "$lineage_seq"], rows)
    df = df.join(F.broadcast(table), FKEY, "left")
    if "_row_id" in lineage:
        inherited = F.col("`$first_row_id`") + F.col(POS)
        df = df.withColumn("_row_id", F.coalesce(F.col(f"`{STORED}_row_id`"), inherited))
    if "_last_updated_sequence_number" in lineage:
        stored = F.col(f"`{STORED}_last_updated_sequence_number`")
        df = df.withColumn(
            "_last_updated_sequence_number", F.coalesce(stored, F.col("`$lineage_seq`"))
        )
    return df


def _partition_literal(v: Any, dtype: T.DataType, table: str) -> str:
    """A partition value as a Spark SQL literal of its result type."""
    if v is None:
        return f"CAST(NULL AS {dtype.simpleString()})"
    if isinstance(dtype, (T.IntegerType, T.LongType, T.StringType)):
        return _sql_literal(v, dtype)
    if isinstance(dtype, T.BooleanType):
        return "true" if v else "false"
    if isinstance(dtype, T.DateType):
        days = v if isinstance(v, int) else (v - dt.date(1970, 1, 1)).days
        return f"date_add(DATE '1970-01-01', {int(days)})"
    if isinstance(dtype, (T.DoubleType, T.FloatType)):
        return f"CAST('{float(v)!r}' AS {dtype.simpleString()})"
    if isinstance(dtype, T.DecimalType):
        return f"CAST('{v}' AS {dtype.simpleString()})"
    raise UnsupportedError(
        f"table {table}: _partition with a {dtype.simpleString()} partition value is not "
        "supported yet"
    )


def _positions(
    spark: SparkSession,
    tasks: Sequence[DataTask],
    deletes: dict[int, DeleteTask],
    paths: SparkPaths,
    fk: FileKey,
    keys: dict[int, Any],
    table: str,
    source_key: str,
) -> DataFrame:
    """($fkey, position) of every deleted row of these data files."""
    # a data file with a vector has no other position delete (delete_index.py)
    dv_tasks = [t for t in tasks if any(deletes[p].is_dv for p in t.pos_deletes)]
    with_dv = {t.file_id for t in dv_tasks}
    files = [t for t in tasks if t.pos_deletes and t.file_id not in with_dv]
    parts = []
    if dv_tasks:
        parts.append(_dv_positions(spark, dv_tasks, deletes, fk, keys, table, source_key))
    if files:
        parts.append(_file_positions(spark, files, deletes, paths, fk, keys, table))
    out = parts[0]
    for other in parts[1:]:
        out = out.unionByName(other)
    return out


def _positions_identity(
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
    spark: SparkSession,
    tasks: Sequence[DataTask],
    deletes: dict[int, DeleteTask],
    fk: FileKey,
    keys: dict[int, Any],
    table: str,
    source_key: str,
) -> DataFrame:
    """($fkey, position) from deletion vectors, decoded on the driver (Spark cannot read a
    Puffin blob): one row per data file holding its positions as an array, exploded."""
    found = read_positions(tasks, deletes, table, source_key)
    schema = T.StructType(
        [
            T.StructField(FKEY, _key_type(fk), False),
            T.StructField("$positions", T.ArrayType(T.LongType(), False), False),
        ]
    )
    rows = [(keys[fid], p.to_pylist()) for fid, p in sorted(found.items()) if len(p)]
    df = spark.createDataFrame(rows, schema)
    return df.select(F.col(FKEY), F.explode(F.col("`$positions`")).alias(POS))


def _file_positions(
    spark: SparkSession,
    tasks: Sequence[DataTask],
    deletes: dict[int, DeleteTask],
    paths: SparkPaths,
    fk: FileKey,
    keys: dict[int, Any],
    table: str,
) -> DataFrame:
    """($fkey, position) from position delete files, read by Spark."""
    used = sorted({p for t in tasks for p in t.pos_deletes})
    schema = T.StructType(
        [T.StructField("file_path", T.StringType()), T.StructField("pos", T.LongType())]
    )  # no field ids: the spec fixes these names
    read_paths = [deletes[i].read_path for i in used]
    cols = [F.col("file_path"), F.col("pos")]
    pdf = _read(
        spark,
        schema,
        read_paths,
        f"position deletes of {table}",
        paths,
        cols,
        [("$dpath", "file_path")],
    )
    pairs = [
        (paths(deletes[p].read_path), t.path, keys[t.file_id]) for t in tasks for p in t.pos_deletes
    ]
    fields = [("$dpath", T.StringType()), ("$recorded", T.StringType()), (FKEY, _key_type(fk))]
    ptab = F.broadcast(_local_table(spark, fields, pairs))
    # match on the data file path exactly as recorded, never a mapped one; the delete side is
    # small next to the data, so its string joins cost little
    cond = (pdf["$dpath"] == ptab["$dpath"]) & (pdf["file_path"] == ptab["$recorded"])
    return pdf.join(ptab, cond, "inner").select(F.col(FKEY), F.col("pos").alias(POS))


def float_key(c: Column) -> Column:
    """A key compared as text (ReadField.compared_as_text): one string per float value, so
    -0.0 and 0.0 differ and NaN equals NaN; NULL stays NULL."""
    return c.cast("string")


def scan_eq_deletes(spark: SparkSession, node: EqDeleteScan, paths: SparkPaths) -> DataFrame:
    check_files(node)
    # several files' keys are compacted only for a shuffled join (strategy.compacted_keys)
    compact = compacted_keys(node, broadcast_limit(spark))
    est = eq_relation_bytes(node)
    df = cached(
        spark,
        ("equality deletes", fingerprint(node), compact),
        lambda: _eq_delete_rows(spark, node, paths, compact),
        est,
        current().delete_cache_bytes,
    )
    return _broadcast_if_small(spark, df, node.rows(), est)


def _eq_delete_rows(
    spark: SparkSession, node: EqDeleteScan, paths: SparkPaths, compact: bool
) -> DataFrame:
    """The keys of an equality delete scan's files (with $del_seq and $del_partition when a
    guard needs them), compacted when `compact`."""
    where = f"equality deletes of {node.table}"
    key_names = [k.col.name for k in node.keys]
    fk = file_key(node.files)
    keys = _file_keys(node.files, fk, paths) if fk.is_long else {}
    key_col = _KeyColumn(fk, node.files, keys, paths, where)
    frames = []
    for lay_idx in sorted({f.layout for f in node.files}):
        layout = node.layouts[lay_idx]
        group = [f for f in node.files if f.layout == lay_idx]
        read_paths = [f.read_path for f in group]
        cols = [_column(k, layout, where) for k in node.keys]
        schema = _read_schema(node.keys, where, layout)
        frames.append(_read(spark, schema, read_paths, where, paths, cols, [(FKEY, key_col)]))
    if not fk.is_long:
        keys = _file_keys(node.files, fk, paths)
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    if node.pushed:
        df = where_all(df, node.pushed)
    for k in node.keys:
        if k.compared_as_text:  # before compaction: -0.0 and 0.0 are two delete keys
            df = df.withColumn(k.col.name, float_key(F.col(f"`{k.col.name}`")))
    if not node.meta:
        # no anti-join reading this checks a guard: the keys alone
        df = df.select(*key_names)
        return df.distinct() if compact else df
    rows = [(keys[f.file_id], f.file_id, f.data_seq, f.partition_id) for f in node.files]
    df = df.join(_file_table(spark, fk, rows, ("$del_file", DEL_SEQ, DEL_PART)), FKEY, "left")
    df = df.select(*key_names, _guard(DEL_SEQ, f"equality deletes of {node.table}"), DEL_PART)
    if compact:
        # one row per key and scope, with the highest sequence number (a key is deleted for
        # a data file iff some delete of it is newer; the newest decides)
        df = (
            df.groupBy(*key_names, DEL_PART)
            .agg(F.max(DEL_SEQ).alias(DEL_SEQ))
            .select(*key_names, DEL_SEQ, DEL_PART)
        )
    return df
