"""v3 columns: defaults (`initial-default`, planner/defaults.py) and types without a Spark type.

Each type's default literal, evaluated by Spark in the session's own time zone, gives the value
pyiceberg decoded from the metadata; nested defaults and types without a literal are refused by
name, and so are the v3 types Spark cannot hold. Reading defaults from files written before the
column was added is checked against Iceberg's reader by the oracle histories."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import pytest
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from mor.planner.defaults import check_nested, default_sql, defaulted_ids
from mor.planner.errors import UnsupportedError

UTC = dt.timezone.utc
CASES: list[tuple[Any, Any, Any]] = [
    (BooleanType(), False, False),
    (IntegerType(), -7, -7),
    (LongType(), 1 << 40, 1 << 40),
    (FloatType(), 1.5, 1.5),
    (DoubleType(), -0.1, -0.1),
    (DecimalType(9, 2), decimal.Decimal("-12.30"), decimal.Decimal("-12.30")),
    (StringType(), "it's \\ 'quoted' ü", "it's \\ 'quoted' ü"),
    (BinaryType(), b"\x00\xff'", bytearray(b"\x00\xff'")),
    (DateType(), dt.date(1969, 12, 31), dt.date(1969, 12, 31)),
    (
        TimestampType(),
        dt.datetime(2021, 3, 28, 2, 30, 0, 123456),  # a wall time absent in Europe/Paris
        dt.datetime(2021, 3, 28, 2, 30, 0, 123456),
    ),
    (
        TimestamptzType(),
        dt.datetime(2020, 1, 1, 23, 59, 59, 1, tzinfo=UTC),
        dt.datetime(2020, 1, 1, 23, 59, 59, 1, tzinfo=UTC),
    ),
]


@pytest.mark.parametrize("ftype,value,want", CASES, ids=[str(c[0]) for c in CASES])
@pytest.mark.parametrize("zone", ["UTC", "America/Los_Angeles"])
def test_each_type_reads_its_default(spark: Any, ftype: Any, value: Any, want: Any, zone: str):
    f = NestedField(5, "c", ftype, required=False, initial_default=value)
    sql = default_sql(f, "db.t")
    assert sql is not None
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        got = spark.sql(f"SELECT {sql} AS v").collect()[0].v
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        if isinstance(ftype, TimestamptzType):  # compare the instant
            got = spark.sql(f"SELECT unix_micros({sql}) AS v").collect()[0].v
            want = (want - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)
    assert got == want


def test_no_default_is_no_literal_and_unreadable_ones_are_refused() -> None:
    assert default_sql(NestedField(1, "c", IntegerType(), required=False), "db.t") is None
    with pytest.raises(UnsupportedError, match="column t_col has an initial default of type time"):
        default_sql(NestedField(1, "t_col", TimeType(), required=False, initial_default=1), "db.t")


def test_a_default_inside_a_struct_is_refused_by_name() -> None:
    inner = NestedField(3, "x", IntegerType(), required=False, initial_default=4)
    outer = NestedField(2, "s", StructType(inner), required=False)
    with pytest.raises(UnsupportedError, match=r"field s\.x has an initial default"):
        check_nested(outer, "db.t")
    check_nested(NestedField(2, "s", StructType(), required=False), "db.t")


def test_defaulted_ids_are_found_at_any_depth() -> None:
    from pyiceberg.schema import Schema

    inner = NestedField(3, "x", IntegerType(), required=False, initial_default=4)
    s = Schema(
        NestedField(1, "a", IntegerType(), required=False, initial_default=1),
        NestedField(2, "s", StructType(inner), required=False),
        NestedField(4, "b", IntegerType(), required=False),
    )
    assert defaulted_ids([s]) == {1, 3}


@pytest.mark.parametrize(
    "type_json,why",
    [
        ('"timestamp_ns"', "Spark has no nanosecond timestamp"),
        ('"timestamptz_ns"', "Spark has no nanosecond timestamp"),
        (
            '{"type": "list", "element-id": 3, "element": "unknown", "element-required": false}',
            "unknown type inside a struct, list or map",
        ),
        ('"geometry"', "no geometry type"),
        ('"geography"', "no geography type"),
        (
            '{"type": "list", "element-id": 3, "element": "timestamp_ns", '
            '"element-required": false}',
            "nanosecond",
        ),
    ],
)
def test_v3_types_without_a_spark_type_are_refused_by_name(type_json: str, why: str) -> None:
    from mor.physical.scan.types import spark_type

    with pytest.raises(UnsupportedError, match=why) as e:
        spark_type(type_json, "table db.t, column c")
    assert str(e.value).startswith("table db.t, column c: Iceberg type ")


def test_types_spark_reads_through_another() -> None:
    """uuid: read as binary, presented as a string; unknown: void; variant: Spark 4's VARIANT
    (refused by name where pyspark has none)."""
    import pyspark
    from pyspark.sql import types as T

    from mor.physical.scan.types import spark_type
    from mor.planner.sources import VARIANT

    assert spark_type('"uuid"', "c") == T.StringType()
    assert spark_type('"uuid"', "c", stored=True) == T.BinaryType()
    nested = '{"type": "list", "element-id": 3, "element": "uuid", "element-required": false}'
    assert spark_type(nested, "c", stored=True) == T.ArrayType(T.BinaryType(), True)
    assert spark_type('"unknown"', "c") == T.NullType()
    variant = json.dumps(VARIANT)
    if hasattr(T, "VariantType"):
        assert spark_type(variant, "c") == T.VariantType()
    else:
        with pytest.raises(
            UnsupportedError, match=f"variant is not supported on pyspark {pyspark.__version__}"
        ):
            spark_type(variant, "c")


def test_a_time_column_is_refused_naming_table_and_column(spark: Any, catalog: Any) -> None:
    import pyarrow as pa
    from pyiceberg.schema import Schema

    from mor import MorError, mor_sql
    from mor.writer.tables import TableWriter

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "at", TimeType(), required=False),
    )
    w = TableWriter(catalog, "db.timed", schema)
    w.append(pa.table({"id": pa.array([1], pa.int64()), "at": pa.array([None], pa.time64("us"))}))
    with pytest.raises(MorError, match=r"column at: Iceberg type time is not supported \(Spark"):
        mor_sql("SELECT * FROM db.timed", catalog=catalog, spark=spark).collect()
    # a query that does not read the column runs
    assert mor_sql("SELECT id FROM db.timed", catalog=catalog, spark=spark).collect()[0].id == 1
