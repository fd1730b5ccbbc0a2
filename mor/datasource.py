"""Spark's own writer forms for tables of mor's catalog, on pyspark 4.x: a Python data source
named "mor" (`mor.register(spark)`).

    df.write.format("mor").mode("append").save("ns.t")
    df.write.format("mor").mode("overwrite").option("catalog", "lake").save("ns.t")

As any Python data source's writer: `writer()` runs on Spark's driver and reads the table (its
schema, spec, the head of main), each task writes its rows as data files and returns their
records (`write`: physical/tasks/append_files.py, no row leaves the task), and `commit` commits
them once, as one append (or, with mode "overwrite", one overwrite of every row), through the
snapshot producer; `abort` deletes what the tasks wrote. The columns are matched by name, with
Spark's ANSI store-assignment rule; the rows are written as the DataFrame is partitioned (a
Python data source cannot ask Spark for a distribution: `mor.write` lays them out as Iceberg's
writer does). On Spark Connect the source runs on the server: mor must be installed there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSource, WriterCommitMessage

try:  # pyspark 4.1 and later: the tasks get Arrow batches
    from pyspark.sql.datasource import DataSourceArrowWriter as _Writer

    ARROW = True
except ImportError:  # pragma: no cover - pyspark 4.0: rows
    from pyspark.sql.datasource import DataSourceWriter as _Writer

    ARROW = False

from mor.physical.tasks.append_files import write_batches


@dataclass
class FilesWritten(WriterCommitMessage):
    """What one task wrote: one record per data file (physical/tasks/row_files.RECORD)."""

    records: list[dict[str, Any]] = field(default_factory=list)


class MorDataSource(DataSource):
    """`format("mor")`: the table named by `save("ns.t")` (or option `table`), of mor's
    catalog (option `catalog`, else the configured one)."""

    @classmethod
    def name(cls) -> str:
        return "mor"

    def writer(self, schema: Any, overwrite: bool) -> MorWriter:
        return MorWriter(dict(self.options), schema, overwrite)


class MorWriter(_Writer):  # type: ignore[misc, valid-type]
    """The writer of one save(): made on Spark's driver, pickled to the tasks."""

    def __init__(self, options: dict[str, Any], schema: Any, overwrite: bool) -> None:
        from mor.datasource_commit import prepare

        self.overwrite = overwrite
        self.job = prepare(options, schema, overwrite)
        self.args = self.job.pop("task_args")

    def write(self, iterator: Any) -> FilesWritten:
        if ARROW:
            batches = iterator
        else:  # pragma: no cover - pyspark 4.0: rows into Arrow batches
            import pyarrow as pa

            rows = [r.asDict(recursive=True) for r in iterator]
            batches = iter([pa.RecordBatch.from_pylist(rows)] if rows else [])
        return FilesWritten(write_batches(self.args, batches))

    def commit(self, messages: list[Any]) -> None:
        from mor.datasource_commit import commit

        commit(self.job, [r for m in messages if m is not None for r in m.records])

    def abort(self, messages: list[Any]) -> None:
        from mor.datasource_commit import abort

        abort(self.job, [r for m in messages if m is not None for r in m.records])


def register_data_source(spark: Any = None) -> None:
    """`spark.dataSource.register(MorDataSource)` on the given (or the active) session, with
    the task modules shipped by value (the executors need pyarrow, not mor). mor.register
    checks the session first (pyspark 3.5 has no Python data sources: this module does not
    import there)."""
    from pyspark import cloudpickle

    from mor.physical.spark.session import active_session
    from mor.physical.spark.workers import NEEDED, check_python_workers
    from mor.physical.tasks import by_value

    session = spark if spark is not None else active_session()
    # the writer is made in a Python worker on Spark's driver (it imports mor); its tasks
    # need pyarrow
    check_python_workers(session, "format('mor')", (*NEEDED, "mor"))
    by_value()
    import sys

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    session.dataSource.register(MorDataSource)
