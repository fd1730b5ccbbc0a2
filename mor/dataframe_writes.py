"""`mor.write(df, "ns.t", mode=...)`: a DataFrame's rows into a table, on any Spark (3.5,
4.x, classic or Spark Connect), as `df.writeTo("ns.t")` does with Iceberg's runtime: by column
name, laid out and written by Spark's tasks, one commit (mor/inserts.py).

    mor.write(df, "db.events")                                   # append()
    mor.write(df, "db.events", mode="overwrite")                 # overwrite(lit(True))
    mor.write(df, "db.events", mode="overwrite", partition={"day": "2026-12-06"})
    mor.write(df, "db.events", mode="overwrite_partitions")      # overwritePartitions()
    mor.write(df, "db.events", mode="create", partitioned_by=["days(ts)"])   # create()

The statement it runs is an INSERT (or CREATE TABLE AS SELECT) over the DataFrame handed in by
name, through the one statement execution: the same checks, layout, commit and errors.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mor.planner.errors import ArgumentError
from mor.planner.statement_plans import CreateTable, InsertRows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

MODES = ("append", "overwrite", "overwrite_partitions", "create", "create_or_replace", "replace")
_VIEW = "mor_write_rows"


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _literal(value: Any) -> str:
    """A Python value as a Spark SQL literal (for a static partition's value)."""
    import datetime as dt
    import decimal

    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, decimal.Decimal)):
        return repr(value) if not isinstance(value, decimal.Decimal) else f"{value}BD"
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def write_statement(
    df: DataFrame,
    table: str,
    mode: str = "append",
    *,
    partition: dict[str, Any] | None = None,
    partitioned_by: list[str] | None = None,
    properties: dict[str, str] | None = None,
    branch: str = "main",
    isolation: str | None = None,
    **options: Any,
) -> Any:
    """The StatementExecution that writes `df` into `table` (mor.write runs it)."""
    from mor.statements import StatementExecution

    if mode not in MODES:
        raise ArgumentError(f"write(): mode must be one of {', '.join(MODES)}, not {mode!r}")
    if isolation not in (None, "serializable", "snapshot"):
        raise ArgumentError(
            f"write(): isolation must be 'serializable', 'snapshot' or None, not {isolation!r}"
        )
    if partition and mode != "overwrite":
        raise ArgumentError("write(): partition= selects what mode='overwrite' replaces")
    if (partitioned_by or properties) and mode not in ("create", "create_or_replace", "replace"):
        raise ArgumentError("write(): partitioned_by= and properties= are for creating a table")
    if mode in ("create", "create_or_replace", "replace"):
        verb = {"create": "CREATE TABLE", "create_or_replace": "CREATE OR REPLACE TABLE"}.get(
            mode, "REPLACE TABLE"
        )
        clauses = ""
        if partitioned_by:
            clauses += f" PARTITIONED BY ({', '.join(partitioned_by)})"
        if properties:
            kv = ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in properties.items())
            clauses += f" TBLPROPERTIES ({kv})"
        sql = f"{verb} {table} USING iceberg{clauses} AS SELECT * FROM {_VIEW}"
        ex = StatementExecution(sql, views={_VIEW: df}, spark=df.sparkSession, **options)
        if not isinstance(ex.plan, CreateTable):
            raise ArgumentError(f"write(): {table} is not a table of mor's catalog")
        return ex
    verb = "INSERT INTO" if mode == "append" else "INSERT OVERWRITE"
    ex = StatementExecution(
        f"{verb} {table} SELECT * FROM {_VIEW}",
        views={_VIEW: df},
        spark=df.sparkSession,
        branch=branch,
        **options,
    )
    plan = ex.plan
    if not isinstance(plan, InsertRows):
        raise ArgumentError(f"write(): {table} is not a table of mor's catalog")
    static = tuple((c, _literal(v)) for c, v in (partition or {}).items())
    ex.__dict__["plan"] = replace(
        plan,
        by_name=True,
        static=static,
        overwrite_mode=(
            "dynamic"
            if mode == "overwrite_partitions"
            else "static"
            if mode == "overwrite"
            else None
        ),
        isolation=isolation,
    )
    if static:  # the static columns come from partition=, not from the DataFrame
        ex.__dict__["plan"] = replace(ex.plan, static=static)
    return ex
