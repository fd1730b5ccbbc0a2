"""Physical layer: the physical plan (rules/physical/) -> PySpark DataFrames; with mor/, the
only layer that imports pyspark. Its groups build on each other one way: spark/ (sessions,
s3a, reuse across queries, Spark's errors, settings) <- scan/ (reading a table's files) <-
deletes/ (applying deletes) <- the modules here (the compiler, EXPLAIN PHYSICAL and ANALYZE,
a merge-on-read scan put together, table_changes, the maintenance commands' Spark jobs).

Names are loaded on first use, so `physical.describe` (EXPLAIN PHYSICAL) needs no pyspark.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "Compiler": "mor.physical.compile",
    "to_dataframe": "mor.physical.compile",
    "collect_rows": "mor.physical.compile",
    "local_session": "mor.physical.spark.session",
    "prepare_session": "mor.physical.spark.session",
    "remote_session": "mor.physical.spark.session",
    "session_of": "mor.physical.spark.session",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        try:
            module = importlib.import_module(_EXPORTS[name])
        except ModuleNotFoundError as e:
            if e.name and e.name.split(".")[0] in ("pyspark", "py4j", "grpc", "pandas"):
                from mor.planner.errors import MorError

                raise MorError(
                    f"running a query needs Spark in this environment ({e.name} is missing): "
                    "pip install 'mor[spark]' (pyspark 3.5 or 4.x) or 'mor[connect]' (Spark "
                    "Connect only)"
                ) from e
            raise
        return getattr(module, name)
    raise AttributeError(name)


__all__ = list(_EXPORTS)
