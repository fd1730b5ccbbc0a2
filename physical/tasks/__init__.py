"""Code that runs inside Spark's tasks: the executors of a row-level write run it where
neither mor nor pyiceberg nor pyroaring need be installed.

Each module here imports the standard library and pyarrow only (`tests/test_tasks.py` holds
that), and is pickled by value with the functions Spark ships (`by_value`): a task needs
pyarrow, which Spark's Arrow-based Python tasks need anyway.

- `roaring`: deletion vectors: Roaring bitmaps in their portable format, the
  `deletion-vector-v1` blob, the Puffin file;
- `transforms`: Iceberg's partition transforms (and murmur3 for `bucket`) over Arrow arrays;
- `row_files`: the two stages of a row-level write: the rows' positions gathered by data
  file and the new rows written as data files (stage 1, in the rows query's own tasks), then
  each data file's positions written as a position delete file or a deletion vector merged
  with the ones it had (stage 2).
"""

from __future__ import annotations

import importlib

MODULES = ("roaring", "transforms", "row_files", "append_files", "buckets")


def by_value() -> None:
    """Have Spark's pickler ship this package's functions by value, so that an executor's
    Python needs pyarrow only (registering twice is harmless)."""
    from pyspark import cloudpickle

    for name in MODULES:
        cloudpickle.register_pickle_by_value(importlib.import_module(f"{__name__}.{name}"))
