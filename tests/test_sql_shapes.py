"""SQL shapes analysts write, bound by mor, against Spark SQL over the same live rows.

The live rows of demo.orders are read once through mor into a temporary view; each query then
runs through mor_sql (binder, rules, physical plan) and through Spark SQL over that view. The
two must agree as multisets (in order, for queries with a total ORDER BY).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from mor import mor_sql

QUERIES = [
    ("SELECT * FROM {t}", False),
    (
        "SELECT order_id + 1 AS next, upper(customer) AS c FROM {t} "
        "WHERE amount BETWEEN 30 AND 150",
        False,
    ),
    (
        "SELECT region, count(*) AS n, avg(amount) AS a FROM {t} GROUP BY region "
        "HAVING count(*) > 1",
        False,
    ),
    ("SELECT region, count(DISTINCT customer) AS c FROM {t} GROUP BY 1 ORDER BY 1", True),
    (
        "SELECT customer, sum(amount) AS s FROM {t} GROUP BY customer ORDER BY s DESC, customer "
        "LIMIT 3",
        True,
    ),
    ("SELECT order_id FROM {t} ORDER BY amount DESC, order_id LIMIT 4 OFFSET 2", True),
    (
        "WITH big AS (SELECT * FROM {t} WHERE amount > 100) "
        "SELECT a.order_id, b.order_id AS other FROM big a JOIN big b ON a.customer = b.customer "
        "AND a.order_id < b.order_id",
        False,
    ),
    (
        "SELECT x.region, x.n FROM (SELECT region, count(*) AS n FROM {t} GROUP BY region) x "
        "WHERE x.n > 0",
        False,
    ),
    (
        "SELECT customer FROM {t} WHERE region = 'EU' UNION SELECT customer FROM {t} "
        "WHERE region = 'US'",
        False,
    ),
    ("SELECT customer FROM {t} WHERE region = 'EU' UNION ALL SELECT customer FROM {t}", False),
    ("SELECT customer FROM {t} INTERSECT SELECT customer FROM {t} WHERE amount > 150", False),
    ("SELECT customer FROM {t} EXCEPT SELECT customer FROM {t} WHERE amount > 150", False),
    (
        "SELECT order_id, row_number() OVER (PARTITION BY region ORDER BY amount DESC) AS r "
        "FROM {t}",
        False,
    ),
    ("SELECT region, sum(amount) OVER (PARTITION BY region) AS total, order_id FROM {t}", False),
    (
        "SELECT a.order_id, b.customer FROM {t} a LEFT JOIN {t} b ON a.order_id = b.order_id + 10",
        False,
    ),
    (
        "SELECT a.order_id FROM {t} a LEFT SEMI JOIN {t} b ON a.customer = b.customer "
        "AND b.amount > 180",
        False,
    ),
    ("SELECT DISTINCT region FROM {t}", False),
    (
        "SELECT CASE WHEN amount > 100 THEN 'big' ELSE 'small' END AS size, count(*) AS n "
        "FROM {t} GROUP BY CASE WHEN amount > 100 THEN 'big' ELSE 'small' END",
        False,
    ),
    ("SELECT count(*) AS n FROM {t} WHERE customer IS NULL OR customer IN ('c1', 'c2')", False),
    ("SELECT min(order_id), max(order_id), count(customer) FROM {t} WHERE customer <> 'c3'", False),
]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Any:
    from mor.api import default_catalog
    from mor.demo import build_demo_table

    wh = tmp_path_factory.mktemp("shapes") / "wh"
    build_demo_table(str(wh))
    cat = default_catalog(str(wh))
    live = mor_sql("SELECT * FROM demo.orders", catalog=cat, spark=spark)
    live.cache().createOrReplaceTempView("live_orders")
    return cat


@pytest.mark.parametrize("sql,ordered", QUERIES, ids=[q[:50] for q, _ in QUERIES])
def test_matches_spark_sql_over_live_rows(sql: str, ordered: bool, demo: Any, spark: Any) -> None:
    ours = [
        tuple(r) for r in mor_sql(sql.format(t="demo.orders"), catalog=demo, spark=spark).collect()
    ]
    theirs = [tuple(r) for r in spark.sql(sql.format(t="live_orders")).collect()]
    if ordered:
        assert ours == theirs
    else:
        assert Counter(ours) == Counter(theirs)
    assert len(ours) > 0 or "INTERSECT" in sql


def test_unsupported_shapes_are_refused(demo: Any) -> None:
    from planner.errors import UnsupportedError

    for sql in [
        "SELECT * FROM demo.orders WHERE order_id IN (SELECT order_id FROM demo.orders)",
        "SELECT region, count(*) FROM demo.orders GROUP BY ROLLUP (region)",
    ]:
        with pytest.raises(UnsupportedError):
            mor_sql(sql, catalog=demo)
