"""The Spark job of an INSERT, a CREATE TABLE AS SELECT, or a DataFrame written to a table:
the query's rows become the table's new data files on the executors; the driver collects one
record per file written.

1. `store_assigned`: the query's columns assigned to the table's, as Spark's
   `TableOutputResolver` does for a table of its own: by position (or the column list, or by
   name with BY NAME), a PARTITION clause's values in their places, each value of another type
   cast under the session's `spark.sql.storeAssignmentPolicy` (ANSI by default: numeric to
   numeric, anything atomic to string, date to timestamp; a value that does not fit its
   column stops the statement: no silent truncation or overflow, whatever `ansi.enabled`
   says; STRICT: widening only; LEGACY: Spark's CAST), arity and names checked first;
2. `laid_out`: the rows distributed and ordered as Iceberg's writer asks Spark to
   (`write.distribution-mode`: hash clusters them by partition, range orders them by the
   partition and the sort order, none leaves them; then, for a table with a sort order,
   sorted within each task by the partition and the sort order; a table without one is
   written unsorted by a fanout writer, one open file per partition, as Iceberg's
   `SparkWriteUtil.writeOrdering` has it), the partition computed by Spark expressions
   (identity, dates and times, truncate, and bucket of integers, dates and timestamps:
   Iceberg's murmur3 in Spark's arithmetic), by a Python UDF for the other buckets;
3. `run_append_job`: one Spark action whose tasks write the files
   (physical/tasks/append_files.py) and return their records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mor.physical.row_writes import ArrowPlace, collected, record_type
from mor.physical.tasks import by_value
from mor.physical.tasks.append_files import append_stage
from mor.planner.errors import ColumnNotFoundError, UnsupportedError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


@dataclass(frozen=True)
class TableColumn:
    """A column of the table written: its name, Spark type, whether NULL is refused."""

    name: str
    dtype: Any  # pyspark DataType
    required: bool


# --- 1. store assignment ------------------------------------------------------------------


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _lit(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def store_assigned(
    df: DataFrame,
    verb: str,
    columns: list[TableColumn],
    into: list[str] | None,
    static: list[tuple[str, str]],
    by_name: bool,
    policy: str,
) -> DataFrame:
    """The query's rows (`df`) as the table's columns, in its order and types (module
    docstring). `into`: the column list as the statement names the table's columns (None:
    every column but the static ones, in order); `static`: (column, Spark SQL literal) of a
    PARTITION clause; `policy`: ANSI, STRICT or LEGACY."""
    by_lower = {c.name.lower(): c for c in columns}
    static_names = {s.lower() for s, _ in static}
    query_cols = df.columns
    if by_name:
        wanted = []
        for q in query_cols:
            if q.lower() not in by_lower:
                raise ColumnNotFoundError(
                    f"{verb}: the query's column {q} is not a column of the table (BY NAME); "
                    f"its columns are {', '.join(c.name for c in columns)}"
                )
            wanted.append(by_lower[q.lower()].name)
    elif into is not None:
        wanted = list(into)
    else:
        wanted = [c.name for c in columns if c.name.lower() not in static_names]
    if len(wanted) != len(query_cols):
        raise UnsupportedError(
            f"{verb}: the table takes {len(wanted)} columns here ({', '.join(wanted)}), and "
            f"the query gives {len(query_cols)} ({', '.join(query_cols) or 'none'})"
        )
    given = {w.lower(): (f"_mor_q{i}", df.schema.fields[i].dataType) for i, w in enumerate(wanted)}
    renamed = df.toDF(*[f"_mor_q{i}" for i in range(len(query_cols))])
    lits = []
    for k, (col, value) in enumerate(static):
        alias = f"_mor_s{k}"
        lits.append(f"{value} AS {alias}")
        given[col.lower()] = (alias, None)
    if lits:
        renamed = renamed.selectExpr("*", *lits)
        types = {f.name: f.dataType for f in renamed.schema.fields}
        given = {k: (a, t if t is not None else types[a]) for k, (a, t) in given.items()}
    out = []
    for c in columns:
        src = given.get(c.name.lower())
        if src is None:  # as Spark for a table without column defaults (Iceberg's)
            raise UnsupportedError(
                f"{verb}: no value for column {c.name} (an Iceberg table takes a value for "
                f"every column: name it in the column list, with NULL where it has none)"
            )
        alias, got = src
        what = f"{verb}: column {c.name}"
        out.append(f"{assign(_q(alias), got, c.dtype, what, policy)} AS {_q(c.name)}")
    return renamed.selectExpr(*out)


_NUMERIC = ("byte", "short", "integer", "long", "float", "double", "decimal")


def _kind(t: Any) -> str:
    return t.typeName()


def assign(e: str, got: Any, want: Any, what: str, policy: str) -> str:
    """The SQL of value `e` (Spark type `got`) stored into a column of type `want` under
    `policy`; one line when the policy refuses the types."""
    from pyspark.sql import types as T

    if got == want or isinstance(got, T.NullType):
        return e if got == want else f"CAST({e} AS {want.simpleString()})"
    if policy == "LEGACY":
        return f"CAST({e} AS {want.simpleString()})"
    if policy == "LEGACY+ANSI":
        return legacy_cast(e, got, want)
    if isinstance(want, T.ArrayType) and isinstance(got, T.ArrayType):
        inner = assign("x", got.elementType, want.elementType, f"{what} (an element)", policy)
        return e if inner == "x" else f"transform({e}, x -> {inner})"
    if isinstance(want, T.MapType) and isinstance(got, T.MapType):
        k = assign("k", got.keyType, want.keyType, f"{what} (a key)", policy)
        v = assign("v", got.valueType, want.valueType, f"{what} (a value)", policy)
        out = e
        if k != "k":
            out = f"transform_keys({out}, (k, v) -> {k})"
        if v != "v":
            out = f"transform_values({out}, (k, v) -> {v})"
        return out
    if isinstance(want, T.StructType) and isinstance(got, T.StructType):
        if len(got.fields) != len(want.fields):
            raise UnsupportedError(
                f"{what} is {want.simpleString()}, and the value {got.simpleString()} has "
                f"{len(got.fields)} fields, not {len(want.fields)}"
            )
        parts = []
        for a, b in zip(got.fields, want.fields):
            inner = assign(f"{e}.{_q(a.name)}", a.dataType, b.dataType, f"{what}.{b.name}", policy)
            parts.append(f"{_lit(b.name)}, {inner}")
        body = f"named_struct({', '.join(parts)})"
        return f"CASE WHEN {e} IS NULL THEN NULL ELSE {body} END"
    target = want.simpleString()
    if fits_without_loss(got, want):
        return f"CAST({e} AS {target})"
    if policy == "ANSI" and ansi_castable(got, want):
        message = _lit(
            f"mor: {what} is {target}, and a value of the query ({got.simpleString()}) does not "
            "fit it (Spark's ANSI store assignment: no overflow, no silent truncation)"
        )
        return (
            f"CASE WHEN {e} IS NULL THEN NULL WHEN try_cast({e} AS {target}) IS NULL THEN "
            f"CAST(raise_error({message}) AS {target}) ELSE try_cast({e} AS {target}) END"
        )
    rule = {"ANSI": "ANSI", "STRICT": "STRICT"}.get(policy, policy)
    raise UnsupportedError(
        f"{what} is {target}, and the query gives {got.simpleString()}: Spark's {rule} store "
        f"assignment does not cast {got.simpleString()} to {target}; CAST it in the query"
    )


def fits_without_loss(got: Any, want: Any) -> bool:
    """A widening that holds every value: integral to a wider integral, to decimal wide
    enough, float to double, anything atomic to string, date to a timestamp."""
    from pyspark.sql import types as T

    order = {"byte": 1, "short": 2, "integer": 3, "long": 4}
    g, w = _kind(got), _kind(want)
    if g in order and w in order:
        return order[g] <= order[w]
    if g in order and isinstance(want, T.DecimalType):
        digits = {"byte": 3, "short": 5, "integer": 10, "long": 19}[g]
        return want.precision - want.scale >= digits
    if g in order and w == "double":
        return order[g] <= 3
    if g in ("byte", "short") and w == "float":
        return True
    if g == "float" and w == "double":
        return True
    if isinstance(got, T.DecimalType) and isinstance(want, T.DecimalType):
        return want.scale >= got.scale and want.precision - want.scale >= got.precision - got.scale
    if isinstance(want, T.StringType) and not isinstance(
        got, (T.ArrayType, T.MapType, T.StructType, T.BinaryType)
    ):
        return True
    if isinstance(got, T.DateType) and isinstance(want, (T.TimestampType, T.TimestampNTZType)):
        return True
    return False


def ansi_castable(got: Any, want: Any) -> bool:
    """Spark's `Cast.canANSIStoreAssign` for atomic types, where a value may not fit: numeric
    to numeric, timestamp to timestamp without time zone and back."""
    from pyspark.sql import types as T

    numeric = (
        T.ByteType,
        T.ShortType,
        T.IntegerType,
        T.LongType,
        T.FloatType,
        T.DoubleType,
        T.DecimalType,
    )
    if isinstance(got, numeric) and isinstance(want, numeric):
        return True
    stamps = (T.TimestampType, T.TimestampNTZType)
    return isinstance(got, stamps) and isinstance(want, stamps)


_INTEGRAL_BITS = {"byte": 8, "short": 16, "integer": 32, "long": 64}


def legacy_cast(e: str, got: Any, want: Any) -> str:
    """Spark's legacy (non-ANSI) CAST of `e` where the session's ANSI mode is on (LEGACY store
    assignment casts without ANSI whatever the session says; a CAST in SQL would follow the
    session): a bad string and a decimal that does not fit become NULL (try_cast), a narrower
    integral keeps the low bits, a float or double into an integral saturates (NaN: 0) as the
    JVM's conversion does, then keeps the low bits of an int."""
    from pyspark.sql import types as T

    target = want.simpleString()
    if fits_without_loss(got, want):
        return f"CAST({e} AS {target})"
    g, w = _kind(got), _kind(want)
    if g in ("float", "double") and w in _INTEGRAL_BITS:
        size = "long" if w == "long" else "int"
        lo, hi = (-(1 << 63), (1 << 63) - 1) if w == "long" else (-(1 << 31), (1 << 31) - 1)
        saturated = (
            f"CASE WHEN {e} IS NULL THEN NULL WHEN isnan({e}) THEN CAST(0 AS {size}) "
            f"WHEN {e} >= {hi} THEN CAST({hi} AS {size}) "
            f"WHEN {e} <= {lo} THEN CAST({lo} AS {size}) ELSE CAST({e} AS {size}) END"
        )
        if w in ("integer", "long"):
            return saturated
        return legacy_cast(f"({saturated})", T.IntegerType(), want)
    if g in _INTEGRAL_BITS and w in _INTEGRAL_BITS:
        bits = _INTEGRAL_BITS[w]
        mask, sign = (1 << bits) - 1, 1 << (bits - 1)
        return f"CAST(((CAST({e} AS BIGINT) & {mask}) ^ {sign}) - {sign} AS {target})"
    return f"try_cast({e} AS {target})"


def assignment_policy(spark: Any) -> str:
    """The session's `spark.sql.storeAssignmentPolicy` (ANSI, STRICT or LEGACY; LEGACY+ANSI
    for LEGACY in a session whose ANSI mode is on: its casts are still the legacy ones)."""
    try:
        value = str(spark.conf.get("spark.sql.storeAssignmentPolicy") or "ANSI").upper()
    except Exception:  # noqa: BLE001 - a session that cannot say: Spark's default
        value = "ANSI"
    if value == "LEGACY":
        try:
            ansi = str(spark.conf.get("spark.sql.ansi.enabled")).lower() == "true"
        except Exception:  # noqa: BLE001
            ansi = False
        return "LEGACY+ANSI" if ansi else "LEGACY"
    return value


# --- 2. layout ------------------------------------------------------------------------------


def partition_key(df: DataFrame, transform: str, source: str, path: list[str]) -> Column | None:
    """A Spark expression equal for two rows exactly when Iceberg's transform gives them the
    same partition value (None for `void`): the transform itself where Spark SQL has it, a
    Python UDF for bucket."""
    from pyspark.sql import functions as F

    col = F.col(".".join(_q(p) for p in path))
    kind = transform.split("[")[0]
    if kind == "identity":
        return col
    if kind == "void":
        return None
    if kind in ("year", "month", "day", "hour"):
        return _time_key(col, kind, source)
    width = int(transform[transform.index("[") + 1 : -1])
    if kind == "truncate":
        if source in ("int", "long"):
            return col - F.pmod(col, F.lit(width))
        if source in ("string", "binary"):
            return F.substring(col, 1, width)
        m = re.match(r"decimal\((\d+),\s*(\d+)\)", source)
        if m:
            scale = int(m.group(2))
            unit = F.lit(width).cast(f"decimal(38,{scale})") / F.lit(10**scale)
            return col - F.pmod(col, unit.cast(f"decimal(38,{scale})"))
    if kind == "bucket":
        return _bucket_key(col, width, source)
    raise UnsupportedError(f"partition transform {transform} over {source} is not written by mor")


def _time_key(col: Column, kind: str, source: str) -> Column:
    """years/months/days/hours since 1970 (Iceberg's values), in UTC for a timestamp with
    time zone and as written for one without: independent of the session's time zone."""
    from pyspark.sql import functions as F

    if source == "date":
        day = F.unix_date(col)
        date = col
    elif source == "timestamptz":
        micros = F.unix_micros(col)
        day = F.floor(micros / F.lit(86_400_000_000))
        if kind == "hour":
            return F.floor(micros / F.lit(3_600_000_000))
        date = F.date_from_unix_date(day.cast("int"))
    else:  # timestamp without time zone: its date and hour as written
        date = col.cast("date")
        day = F.unix_date(date)
        if kind == "hour":
            return day.cast("long") * F.lit(24) + F.hour(col)
    if kind == "day":
        return day
    if kind == "month":
        return (F.year(date) - F.lit(1970)) * F.lit(12) + F.month(date) - F.lit(1)
    return F.year(date) - F.lit(1970)


def _bucket_key(col: Column, n: int, source: str) -> Column:
    """Iceberg's bucket of the column (murmur3 of its value's bytes), computed by a Python UDF
    over the column alone; dates and timestamps go as their day and microsecond numbers."""
    from pyspark.sql import functions as F

    value, kind, default = col, source, F.lit(0)
    if source == "date":
        value, kind = F.unix_date(col), "int"
    elif source == "timestamptz":
        value, kind = F.unix_micros(col), "long"
    elif source == "timestamp":  # without time zone: its micros as written, in the task
        default = F.lit("1970-01-01 00:00:00").cast("timestamp_ntz")
    elif source in ("string", "uuid"):
        default = F.lit("00000000-0000-0000-0000-000000000000" if source == "uuid" else "")
    elif source == "binary":
        default = F.lit(b"")
    elif source.startswith("decimal"):
        default = F.lit(0).cast(source.replace(" ", ""))
    elif source not in ("int", "long"):
        raise UnsupportedError(f"bucket over a {source} column is not written by mor")
    from mor.physical.udfs import bucket_udf

    bucket = bucket_udf(f"bucket[{n}]", kind)
    # NULL kept out of the UDF (pandas would turn integers with NULLs into doubles)
    return F.when(value.isNull(), F.lit(None)).otherwise(bucket(F.coalesce(value, default)))


def laid_out(
    df: DataFrame,
    partition: list[tuple[str, str, str, list[str]]],
    sort: list[tuple[str, str, list[str], bool, bool]],
    distribution: str,
) -> tuple[DataFrame, bool]:
    """The rows distributed and ordered as Iceberg's writer asks Spark to (module docstring);
    and whether each task's rows come clustered by partition (sorted by it: a file is done
    when the next partition starts)."""
    from pyspark.sql import functions as F

    keys: list[Any] = []
    made: list[str] = []  # columns of the rows' own a key is computed into (dropped after)
    for i, (_, transform, source, path) in enumerate(partition):
        integral = _integral_bucket(transform, source, path)
        if integral is not None:  # Iceberg's bucket in Spark's own expressions, no Python
            df, name = bucket_column(df, integral, int(transform[7:-1]), f"_mor_b{i}_")
            made.append(name)
            keys.append(F.col(name))
            continue
        k = partition_key(df, transform, source, path)
        if k is not None:
            keys.append(k)
    order: list[Any] = []
    for transform, source, path, descending, nulls_first in sort:
        k = (
            partition_key(df, transform, source, path)
            if transform != "identity"
            else F.col(".".join(_q(p) for p in path))
        )
        if k is None:
            continue
        if descending:
            order.append(k.desc_nulls_first() if nulls_first else k.desc_nulls_last())
        else:
            order.append(k.asc_nulls_first() if nulls_first else k.asc_nulls_last())
    named = [k.alias(f"_mor_k{i}") for i, k in enumerate(keys)]
    if named:
        df = df.select("*", *named)
    clustering = [F.col(f"_mor_k{i}") for i in range(len(keys))]
    ordering = [c.asc_nulls_first() for c in clustering] + order
    if distribution == "hash" and clustering:
        df = df.repartition(*clustering)
    elif distribution == "range" and ordering:
        df = df.repartitionByRange(*ordering)
    # Iceberg's write ordering: with its fanout writer (on by default for an INSERT), a table
    # without a sort order asks for none, whatever the distribution; one with a sort order
    # asks for the partition, then the sort order
    sorted_ = bool(order)
    if sorted_:
        df = df.sortWithinPartitions(*ordering)
    if named or made:
        df = df.drop(*[f"_mor_k{i}" for i in range(len(keys))], *made)
    return df, bool(clustering) and sorted_


_M32 = 0xFFFFFFFF


def _integral_bucket(transform: str, source: str, path: list[str]) -> str | None:
    """The SQL of the 64-bit number Iceberg's bucket hashes, for a bucket over a column
    whose value is one (int, long; a date as its day, a timestamp with time zone as its
    microseconds); None for any other transform or source."""
    if not transform.startswith("bucket["):
        return None
    col = ".".join(_q(p) for p in path)
    return {
        "int": col,
        "long": col,
        "date": f"unix_date({col})",
        "timestamptz": f"unix_micros({col})",
    }.get(source)


def _mul32(a: str, c: int) -> str:
    """(a * c) mod 2^32 for `a` in [0, 2^32) and a 32-bit constant, in bigint arithmetic
    that never overflows (ANSI mode raises on an overflow): c's 16-bit halves apart."""
    lo, hi = c & 0xFFFF, c >> 16
    return f"(({a}) * {lo} + ((({a}) * {hi}) & 65535) * 65536) & {_M32}"


def _rotl32(a: str, r: int) -> str:
    return f"(shiftleft({a}, {r}) | shiftrightunsigned({a}, {32 - r})) & {_M32}"


def bucket_column(df: DataFrame, value: str, n: int, prefix: str) -> tuple[DataFrame, str]:
    """`df` with a column holding Iceberg's bucket (`n` buckets) of the 64-bit `value` (SQL):
    murmur3_x86_32 with seed 0 of its 8 little-endian bytes (Guava's `hashLong`), `& MAX_INT`,
    `% n`, in Spark's own expressions (whole-stage code, no Python worker: a pandas UDF took
    4x as long over 20M rows). One column per step of the hash: each reads the one before
    twice, so Spark keeps them apart rather than inlining them into an expression that
    doubles at each step. NULL stays NULL. Returns the DataFrame and the bucket's column."""
    steps = [
        (f"{prefix}v", f"CAST({value} AS BIGINT)"),
        (f"{prefix}lo", f"{prefix}v & {_M32}"),
        (f"{prefix}hi", f"shiftrightunsigned({prefix}v, 32) & {_M32}"),
    ]
    h = None
    for i, k in enumerate((f"{prefix}lo", f"{prefix}hi")):
        mixed = f"{prefix}c{i}" if h is None else f"({h} ^ {prefix}c{i})"
        steps += [
            (f"{prefix}a{i}", _mul32(k, 0xCC9E2D51)),
            (f"{prefix}b{i}", _rotl32(f"{prefix}a{i}", 15)),
            (f"{prefix}c{i}", _mul32(f"{prefix}b{i}", 0x1B873593)),
            (f"{prefix}d{i}", _rotl32(mixed, 13)),
            (f"{prefix}h{i}", f"({prefix}d{i} * 5 + {0xE6546B64}) & {_M32}"),
        ]
        h = f"{prefix}h{i}"
    steps += [  # the length (8 bytes), then murmur3's final mix
        (f"{prefix}f0", f"{h} ^ 8"),
        (f"{prefix}f1", f"{prefix}f0 ^ shiftrightunsigned({prefix}f0, 16)"),
        (f"{prefix}f2", _mul32(f"{prefix}f1", 0x85EBCA6B)),
        (f"{prefix}f3", f"{prefix}f2 ^ shiftrightunsigned({prefix}f2, 13)"),
        (f"{prefix}f4", _mul32(f"{prefix}f3", 0xC2B2AE35)),
        (f"{prefix}f5", f"{prefix}f4 ^ shiftrightunsigned({prefix}f4, 16)"),
        (f"{prefix}out", f"CAST(({prefix}f5 & 2147483647) % {n} AS INT)"),
    ]
    if _lateral_aliases(df):
        # one projection, each step naming the one before (Spark's lateral column aliases,
        # which its analyzer makes a chain of projections): two round trips where a column
        # per step took two each (a first call's 0.65 s of driver -> 0.45 s at 19 steps)
        df = df.selectExpr("*", *[f"{sql} AS {name}" for name, sql in steps])
    else:
        from pyspark.sql import functions as F

        for name, sql in steps:
            df = df.withColumn(name, F.expr(sql))
    return df.drop(*[name for name, _ in steps[:-1]]), steps[-1][0]


def _lateral_aliases(df: DataFrame) -> bool:
    """Whether the session resolves a SELECT's references to its own earlier aliases (Spark
    3.4 and later, unless `spark.sql.lateralColumnAlias.enableImplicitResolution` is off)."""
    try:
        on = df.sparkSession.conf.get(
            "spark.sql.lateralColumnAlias.enableImplicitResolution", "true"
        )
    except Exception:  # noqa: BLE001 - a session that cannot say: the path that always works
        return False
    return str(on).strip().lower() == "true"


def distribution_mode(properties: dict[str, str], partitioned: bool, sorted_: bool) -> str:
    """Iceberg's `write.distribution-mode` for an INSERT (SparkWriteConf): the property, as
    adjusted (hash without partitions, range without partitions or order: none); by default
    range for a sorted table, hash for a partitioned one, else none."""
    mode = (properties.get("write.distribution-mode") or "").strip().lower()
    if mode:
        if mode not in ("none", "hash", "range"):
            raise UnsupportedError(
                f"write.distribution-mode={mode!r}: Iceberg knows none, hash and range"
            )
        if mode == "range" and not partitioned and not sorted_:
            return "none"
        if mode == "hash" and not partitioned:
            return "none"
        return mode
    if sorted_:
        return "range"
    return "hash" if partitioned else "none"


# --- 3. the job -----------------------------------------------------------------------------


@dataclass(frozen=True)
class AppendJob:
    """What the tasks of one append need, all plain values (pickled with them)."""

    table: str
    folder: ArrowPlace
    schema: bytes  # the data files' Arrow schema, field ids in its metadata
    partition: tuple[Any, ...] = ()
    sort: tuple[Any, ...] = ()
    codec: str = "zstd"
    target_bytes: int = 512 << 20
    row_group_bytes: int = 128 << 20
    distribution: str = "none"
    extra: dict[str, Any] = field(default_factory=dict)


def run_append_job(df: DataFrame, job: AppendJob) -> list[dict[str, Any]]:
    """Lay the rows out and have the tasks write them: the records of the files written and
    the counts (one Spark action; a task's failure is one MorError line)."""
    from pyspark import cloudpickle

    import mor.physical.udfs
    from mor.physical.spark.workers import check_python_workers

    check_python_workers(df.sparkSession, f"the write into {job.table}")
    by_value()
    cloudpickle.register_pickle_by_value(mor.physical.udfs)  # bucket's UDF, by value too
    rows, clustered = laid_out(
        df, [list(p) for p in job.partition], [list(s) for s in job.sort], job.distribution
    )
    args = {
        "fs": job.folder.fs,
        "folder": job.folder.path,
        "table": job.table,
        "schema": job.schema,
        "partition": [list(p) for p in job.partition],
        "codec": job.codec,
        "target_bytes": job.target_bytes,
        "row_group_bytes": job.row_group_bytes,
        "clustered": clustered,
    }
    return collected(rows.mapInArrow(append_stage(args), record_type()))
