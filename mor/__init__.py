"""mor: SQL over Apache Iceberg v2 and v3 merge-on-read tables on Apache Spark.

    from mor import mor_sql, explain
    df = mor_sql("SELECT region, count(*) FROM demo.orders GROUP BY region")

mor plans the table reads; Spark plans the query around them. pyspark is imported only when a
query runs or is checked, so planning (`plan_query`, `metrics`, `explain(check=False)`) needs no
JVM.
"""

from typing import TYPE_CHECKING

from mor.planner.errors import (
    AmbiguousNameError,
    ArgumentError,
    ColumnNotFoundError,
    ConfigError,
    ConsumeError,
    DataFileError,
    InternalError,
    MetadataError,
    MorError,
    NotAQueryError,
    QueryError,
    SqlSyntaxError,
    TableNotFoundError,
    UnsupportedError,
)
from mor.planner.settings import Settings, declared_in

# the settings the layers above planner/ declare beside the code they steer (no pyspark),
# imported when a setting is first looked up: `import mor` stays light (mor/launch.py)
declared_in("mor.rules.physical.rule_settings", "mor.physical.spark.spark_settings")

if TYPE_CHECKING:
    from mor.api import (
        cache_figures,
        changes,
        clear_caches,
        default_catalog,
        explain,
        health,
        metrics,
        mor_errors,
        mor_sql,
        plan_query,
        register,
        table,
        write,
    )
    from mor.consume import ChangeBatch, stream_changes

_LAZY = {
    **dict.fromkeys(
        (
            "cache_figures",
            "changes",
            "clear_caches",
            "default_catalog",
            "explain",
            "health",
            "metrics",
            "mor_errors",
            "mor_sql",
            "plan_query",
            "register",
            "table",
            "write",
        ),
        "mor.api",
    ),
    "ChangeBatch": "mor.consume",
    "stream_changes": "mor.consume",
}


def __getattr__(name: str) -> object:
    """The API is imported on first use (PEP 562): the CLI starts Spark's JVM before it
    imports what planning needs (pyiceberg, sqlglot)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mor' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "mor_sql",
    "write",
    "register",
    "table",
    "changes",
    "stream_changes",
    "ChangeBatch",
    "health",
    "explain",
    "metrics",
    "plan_query",
    "default_catalog",
    "mor_errors",
    "clear_caches",
    "cache_figures",
    "MorError",
    "ArgumentError",
    "DataFileError",
    "MetadataError",
    "QueryError",
    "InternalError",
    "ColumnNotFoundError",
    "ConfigError",
    "ConsumeError",
    "NotAQueryError",
    "SqlSyntaxError",
    "TableNotFoundError",
    "AmbiguousNameError",
    "UnsupportedError",
    "Settings",
]
