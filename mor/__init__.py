"""mor: SQL over Apache Iceberg v2 merge-on-read tables on Apache Spark.

    from mor import mor_sql, explain
    df = mor_sql("SELECT region, count(*) FROM demo.orders GROUP BY region")

mor plans the table reads; Spark plans the query around them. pyspark is imported only when a
query runs or is checked, so planning (`plan_query`, `metrics`, `explain(check=False)`) needs no
JVM.
"""

from mor.api import default_catalog, explain, metrics, mor_sql, plan_query, table
from mor.planner.errors import MorError
from mor.planner.settings import Settings

__all__ = [
    "mor_sql",
    "table",
    "explain",
    "metrics",
    "plan_query",
    "default_catalog",
    "MorError",
    "Settings",
]
