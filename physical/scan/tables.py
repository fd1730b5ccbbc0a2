"""Small tables of one row per file (or per partition), joined to a scan's rows on the file
key: per-file sequence numbers and partitions for the equality anti-joins, bitmaps and
recorded row counts for position deletes, metadata and lineage columns.

For a few files (rules/physical/reading.looked_up: at most 32, bitmaps of at most 8 KiB) each
column is a lookup in a map literal of the scan's own projection (`with_file_columns`,
`bitmap_lookups`): Spark broadcasts even a local relation through a job of its own (measured
on 3.5 and 4.1, about 0.1 s of a short statement), a map of a few keys costs a row no more
than the join's probe. Beyond, the table is broadcast and joined, and how it reaches Spark
depends on its size (measured on classic 3.5 and Connect 4.3): an inline `VALUES` relation,
the cheapest for a classic session up to about a thousand rows, but Spark parses it as SQL
text, which runs the driver out of memory at 100,000 rows; `createDataFrame` of Python rows
costs ~0.2 s at 100,000 rows and ~1.7 s at 1,000,000 on classic, and on Spark Connect is an
Arrow local relation, the cheapest at every size. So: `VALUES` for small tables of a classic
session, `createDataFrame` for the rest. A bitmap table's rows are expressions (each file's
words split and cast from one query parameter), and Spark's analysis of them grows faster
than their number (classic 3.5, 40 words a file: 0.16 s at 300 rows, 0.93 s at 1,000, where
`createDataFrame` and its broadcast's job took 0.20 and 0.25 s): it is inline up to
BITMAP_SMALL rows. Either way the plan holds data, never a filter or a branch per file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from mor.physical.spark.session import is_connect
from mor.rules.physical.reading import FileKey, looked_up

SMALL = 1000  # rows up to which a classic session gets an inline VALUES relation
BITMAP_SMALL = 300  # ... for a bitmap table, whose rows are expressions (above)
FKEY = "$fkey"


def key_type(fk: FileKey) -> T.DataType:
    return T.LongType() if fk.is_long else T.StringType()


def sql_literal(v: Any, dtype: T.DataType) -> str:
    """A Python value as a Spark SQL literal of `dtype` (string, int or bigint; NULL for None)."""
    if v is None:
        return f"CAST(NULL AS {dtype.simpleString()})"
    if isinstance(dtype, T.StringType):
        return f"CAST(X'{str(v).encode('utf-8').hex()}' AS STRING)"  # any character, unescaped
    return f"CAST({int(v)} AS {'INT' if isinstance(dtype, T.IntegerType) else 'BIGINT'})"


def values(
    spark: SparkSession, names: Sequence[str], rows: Sequence[Sequence[str]], args: Any = None
) -> DataFrame:
    """`SELECT * FROM VALUES ...`: rows of SQL literals (foldable expressions), at least one;
    `args`: named query parameters the literals use."""
    text = ", ".join("(" + ", ".join(r) + ")" for r in rows)
    cols = ", ".join(f"`{n}`" for n in names)
    return spark.sql(f"SELECT * FROM VALUES {text} AS t({cols})", args=args or None)


def _inline(spark: SparkSession, rows: int, most: int = SMALL) -> bool:
    return 0 < rows <= most and not is_connect(spark)


def local_table(
    spark: SparkSession,
    fields: Sequence[tuple[str, T.DataType]],
    rows: Sequence[tuple[Any, ...]],
    most: int = SMALL,
) -> DataFrame:
    """A table of these rows (Python values of string, int and bigint columns), inline up to
    `most` rows."""
    if _inline(spark, len(rows), most):
        literals = [[sql_literal(v, t) for v, (_, t) in zip(r, fields)] for r in rows]
        return values(spark, [n for n, _ in fields], literals)
    schema = T.StructType([T.StructField(n, t, True) for n, t in fields])
    return spark.createDataFrame(list(rows), schema)


def file_table(
    spark: SparkSession,
    fk: FileKey,
    rows: Sequence[tuple[Any, ...]],
    names: tuple[str, ...],
    types: tuple[T.DataType, ...],
) -> DataFrame:
    """($fkey, *names) per file, of `types`, broadcast (`with_file_columns` beyond a few
    files)."""
    fields = [(FKEY, key_type(fk)), *zip(names, types)]
    return F.broadcast(local_table(spark, fields, rows))


# characters of literals the lookups of one table may hold at most (rules/physical/reading.py
# bounds the files and the bitmaps' bytes; this is the compiler's own bound on the plan's text)
LOOKUP_TEXT = 1 << 16


def with_file_columns(
    spark: SparkSession,
    df: DataFrame,
    fk: FileKey,
    rows: Sequence[tuple[Any, ...]],
    names: tuple[str, ...],
    types: tuple[T.DataType, ...] | None = None,
) -> DataFrame:
    """`df` with the columns `names` of each row's file (`rows`: the file key and the values,
    one row per file), NULL for a file `rows` lacks: what a left join with `file_table` on
    the file key gives. For few files (rules/physical/reading.looked_up) each column is a
    lookup in a map literal of the plan (no broadcast, no job); for more, or literals longer
    than LOOKUP_TEXT, the broadcast join. The first name is an INT, the rest BIGINT unless
    `types` says otherwise."""
    types = types or (T.IntegerType(),) + (T.LongType(),) * (len(names) - 1)
    if not rows:
        return df.select("*", *[F.lit(None).cast(t).alias(n) for n, t in zip(names, types)])
    if looked_up(len(rows)):
        kt = key_type(fk)
        keys = [sql_literal(r[0], kt) for r in rows]
        per = [[sql_literal(r[i], t) for r in rows] for i, t in enumerate(types, start=1)]
        cols = lookups(names, keys, per)
        if cols is not None:
            return df.selectExpr("*", *cols)
    return df.join(file_table(spark, fk, rows, names, types), FKEY, "left")


def lookups(
    names: Sequence[str], keys: Sequence[str], values: Sequence[Sequence[str]]
) -> list[str] | None:
    """SQL expressions `map(key, value, ...)[$fkey] AS name`, one per name (`values`: the
    SQL literals of each name, in the order of `keys`); None when their literals are longer
    than LOOKUP_TEXT (the broadcast join then)."""
    if sum(len(k) for k in keys) * len(names) + sum(len(v) for vs in values for v in vs) > (
        LOOKUP_TEXT
    ):
        return None
    return [
        f"map({', '.join(f'{k}, {v}' for k, v in zip(keys, vs))})[`{FKEY}`] AS `{n}`"
        for n, vs in zip(names, values)
    ]


COUNT = "$count"
BITMAP = "$bitmap"
RECORDED = "$recorded_path"


def bitmap_lookups(fk: FileKey, rows: Sequence[tuple[Any, str, int, str]]) -> list[str] | None:
    """The columns of `bitmap_table` as lookups in map literals (`with_file_columns`), for a
    scan whose strategy says so (PositionStrategy.looked_up), when the words fit LOOKUP_TEXT;
    else None. Each file's words are one string literal, split and cast once as Spark folds
    constants, never per row of the scan."""
    if not rows:
        return None
    kt = key_type(fk)
    keys = [sql_literal(key, kt) for key, _, _, _ in rows]
    words = [
        f"CAST(split('{text}', ',') AS array<bigint>)" if text else "CAST(array() AS array<bigint>)"
        for _, text, _, _ in rows  # the text is digits, '-' and ',' alone
    ]
    counts = [sql_literal(count, T.LongType()) for _, _, count, _ in rows]
    paths = [sql_literal(path, T.StringType()) for _, _, _, path in rows]
    return lookups((BITMAP, COUNT, RECORDED), keys, [words, counts, paths])


def bitmap_table(
    spark: SparkSession, fk: FileKey, rows: Sequence[tuple[Any, str, int, str]]
) -> DataFrame:
    """($fkey, $bitmap array<bigint>, $count, $recorded_path) per data file with deletes, from
    (key, bitmap words as decimal text, recorded row count, recorded path). Inline, the texts
    are one query parameter, each row its substring, so Spark parses no SQL holding them and
    the driver makes one py4j call for them, not several per file; beyond BITMAP_SMALL rows a
    text column. Either way it becomes the array once per table row (on the driver, as Spark
    evaluates the inline table or broadcasts it), never per row of the scan."""
    if _inline(spark, len(rows), BITMAP_SMALL):
        literals, parts, start = [], [], 1  # SQL's substring counts from 1
        for key, text, count, path in rows:
            if text:
                parts.append(text)
                # the text is ASCII (digits, '-' and ','): its characters are its bytes
                words = f"CAST(split(substring(:b, {start}, {len(text)}), ',') AS array<bigint>)"
                start += len(text)
            else:
                words = "CAST(array() AS array<bigint>)"
            literals.append(
                [
                    sql_literal(key, key_type(fk)),
                    words,
                    sql_literal(count, T.LongType()),
                    sql_literal(path, T.StringType()),
                ]
            )
        args = {"b": "".join(parts)} if parts else None
        return values(spark, (FKEY, BITMAP, COUNT, RECORDED), literals, args)
    fields = [
        (FKEY, key_type(fk)),
        ("$words", T.StringType()),
        (COUNT, T.LongType()),
        (RECORDED, T.StringType()),
    ]
    df = local_table(spark, fields, rows, most=0)  # not as SQL text holding the words
    words = F.expr(
        "CASE WHEN `$words` = '' THEN CAST(array() AS array<bigint>) "
        "ELSE CAST(split(`$words`, ',') AS array<bigint>) END"
    )
    return df.select(FKEY, words.alias(BITMAP), COUNT, RECORDED)
