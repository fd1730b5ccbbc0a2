"""Small Arrow tables (metadata tables) as Spark DataFrames, without pandas or py4j.

Spark 3.5's `createDataFrame` takes Python rows and a schema; this maps Arrow types to Spark
types and Arrow values to what Spark expects (a map is a dict, a struct a tuple in field order).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from mor.planner.errors import UnsupportedError


def spark_type(t: pa.DataType) -> T.DataType:
    if pa.types.is_dictionary(t):
        return spark_type(t.value_type)
    if pa.types.is_boolean(t):
        return T.BooleanType()
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return T.IntegerType()
    if pa.types.is_integer(t):
        return T.LongType()
    if pa.types.is_float32(t):
        return T.FloatType()
    if pa.types.is_floating(t):
        return T.DoubleType()
    if pa.types.is_decimal(t):
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return T.StringType()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return T.BinaryType()
    if pa.types.is_date(t):
        return T.DateType()
    if pa.types.is_timestamp(t):
        return T.TimestampType() if t.tz is not None else T.TimestampNTZType()
    if pa.types.is_map(t):
        return T.MapType(spark_type(t.key_type), spark_type(t.item_type), True)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return T.ArrayType(spark_type(t.value_type), True)
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(f.name, spark_type(f.type), True) for f in t])
    if pa.types.is_null(t):
        return T.StringType()
    raise UnsupportedError(f"metadata table column type {t} has no Spark type")


def spark_schema(schema: pa.Schema) -> T.StructType:
    return T.StructType([T.StructField(f.name, spark_type(f.type), True) for f in schema])


def _value(v: Any, t: pa.DataType) -> Any:
    if v is None:
        return None
    if pa.types.is_dictionary(t):
        return _value(v, t.value_type)
    if pa.types.is_map(t):
        return {_value(k, t.key_type): _value(x, t.item_type) for k, x in v}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_value(x, t.value_type) for x in v]
    if pa.types.is_struct(t):
        return tuple(_value(v.get(f.name), f.type) for f in t)
    return v


def to_dataframe(spark: SparkSession, table: pa.Table) -> DataFrame:
    types = [f.type for f in table.schema]
    rows = [
        tuple(_value(r[f.name], t) for f, t in zip(table.schema, types)) for r in table.to_pylist()
    ]
    return spark.createDataFrame(rows, spark_schema(table.schema))
