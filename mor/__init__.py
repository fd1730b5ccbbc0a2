"""mor: SQL over Apache Iceberg v2 merge-on-read tables on Apache Spark.

    from mor import mor_sql, explain
    df = mor_sql("SELECT region, count(*) FROM demo.orders GROUP BY region")

pyspark is imported only when a query runs, so `explain` works without a JVM.
"""

from mor.api import default_catalog, explain, metrics, mor_sql, plan_query, table
from planner.errors import MorError

__all__ = [
    "mor_sql",
    "table",
    "explain",
    "metrics",
    "plan_query",
    "default_catalog",
    "MorError",
]
