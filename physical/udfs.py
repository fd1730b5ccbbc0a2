"""The pandas UDFs mor's Spark jobs use (type hints as pandas_udf reads them, so no
`from __future__ import annotations` here). Shipped to the executors by value with the task
modules (physical/tasks): an executor needs pandas and pyarrow, not mor."""

from typing import Any

import pandas as pd

from mor.physical.tasks.buckets import bucket_series


def bucket_udf(transform: str, kind: str) -> Any:
    """A scalar pandas UDF: Iceberg's `transform` (`bucket[N]`) of a column of Iceberg type
    `kind`, never NULL (physical/appends.py keeps NULL out)."""
    from pyspark.sql.functions import pandas_udf

    def bucket(values: pd.Series) -> pd.Series:
        return bucket_series(values, transform, kind)

    return pandas_udf(bucket, "int")
