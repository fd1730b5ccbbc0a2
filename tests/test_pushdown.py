"""Which filters reach which table reference, and which columns each reads (planner/pushdown.py).

No Spark: the analysis is pure. A filter may reach a table only where it cannot remove a row that
reaches the output; each trap the SQL issue lists has a case here (outer joins, LIMIT, windows,
aggregates, samples, non-deterministic projections, a CTE read twice). That the filters found
here prune files, and that results equal Spark SQL's, is checked in test_sql_shapes.py.
"""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from mor.planner.pushdown import analyze, needed_columns, starred, to_pred
from mor.planner.sql import iceberg_tables

# the fast tier too (`make check`: tests/legs.py)
pytestmark = [pytest.mark.check]

SCHEMA = {"id": "bigint", "v": "bigint", "p": "string", "d": "date"}


def filters(sql: str) -> list[list[str]]:
    """Per table reference, in the order of the text: the conjuncts that reach it."""
    tree = sqlglot.parse_one(sql, read="spark")
    tables = sorted(iceberg_tables(tree), key=lambda t: t.parts[0].meta["start"])
    result = analyze(tree, tables, [SCHEMA] * len(tables))
    assert result.note == "", result.note
    return [[c.sql("spark") for c in f] for f in result.filters]


@pytest.mark.parametrize(
    "sql,want",
    [
        ("SELECT * FROM a.t WHERE id = 5 AND v > 1", [["id = 5", "v > 1"]]),
        ("SELECT * FROM a.t WHERE id BETWEEN 1 AND 3", [["id >= 1", "id <= 3"]]),
        # through a CTE, a derived table (renamed column) and into a subquery's own WHERE
        ("WITH c AS (SELECT * FROM a.t) SELECT * FROM c WHERE id = 5", [["id = 5"]]),
        ("SELECT * FROM (SELECT id AS k, v FROM a.t) x WHERE x.k = 5", [["id = 5"]]),
        (
            "WITH c AS (SELECT * FROM a.t), d AS (SELECT id FROM c) SELECT * FROM d WHERE id = 2",
            [["id = 2"]],
        ),
        (
            "SELECT * FROM a.u WHERE v IN (SELECT v FROM a.t WHERE id = 3)",
            [[], ["id = 3"]],
        ),
        (
            "SELECT * FROM a.u u WHERE EXISTS (SELECT 1 FROM a.t t WHERE t.id = u.id AND t.v = 1)",
            [[], ["v = 1"]],
        ),
        # each branch of a set operation keeps its own WHERE
        (
            "SELECT id FROM a.t WHERE id = 1 UNION ALL SELECT id FROM a.u WHERE id = 2",
            [["id = 1"], ["id = 2"]],
        ),
        # inner join: WHERE and ON conjuncts of one side go to that side
        (
            "SELECT * FROM a.t l JOIN a.u r ON l.id = r.id AND r.v > 3 WHERE l.p = 'x'",
            [["p = 'x'"], ["v > 3"]],
        ),
        # a WHERE on the null-supplying side of an outer join never prunes it
        (
            "SELECT * FROM a.t l LEFT JOIN a.u r ON l.id = r.id WHERE r.v IS NULL",
            [[], []],
        ),
        ("SELECT * FROM a.t l LEFT JOIN a.u r ON l.id = r.id WHERE l.id = 1", [["id = 1"], []]),
        # ON of a left join: the right (non-preserved) side only
        (
            "SELECT * FROM a.t l LEFT JOIN a.u r ON l.id = r.id AND r.v > 3 AND l.v > 3",
            [[], ["v > 3"]],
        ),
        (
            "SELECT * FROM a.t l RIGHT JOIN a.u r ON l.id = r.id AND l.v > 3 WHERE l.id = 1",
            [["v > 3"], []],
        ),
        ("SELECT * FROM a.t l RIGHT JOIN a.u r ON l.id = r.id WHERE r.id = 1", [[], ["id = 1"]]),
        (
            "SELECT * FROM a.t l FULL JOIN a.u r ON l.id = r.id AND r.v = 1 WHERE l.id = 1",
            [[], []],
        ),
        ("SELECT * FROM a.t l LEFT ANTI JOIN a.u r ON l.id = r.id AND r.v = 2", [[], ["v = 2"]]),
        # an inner join after a left join must not push into the NULL-extended source
        (
            "SELECT * FROM a.t l LEFT JOIN a.u r ON l.id = r.id "
            "JOIN a.w w ON w.id = l.id AND r.v IS NULL",
            [[], [], []],
        ),
        # nothing crosses LIMIT, a window, an aggregate, a generator or rand()
        ("SELECT * FROM (SELECT * FROM a.t LIMIT 10) x WHERE id = 5", [[]]),
        (
            "SELECT * FROM (SELECT id, row_number() OVER (ORDER BY v) AS rn FROM a.t) x "
            "WHERE id = 5",
            [[]],
        ),
        ("SELECT * FROM (SELECT id, count(*) AS c FROM a.t GROUP BY id) x WHERE id = 5", [[]]),
        ("SELECT * FROM (SELECT id, rand() AS r FROM a.t) x WHERE id = 5", [[]]),
        # but the SELECT's own WHERE runs before its window and LIMIT
        ("SELECT id, row_number() OVER (ORDER BY v) FROM a.t WHERE id = 5 LIMIT 3", [["id = 5"]]),
        # a sample or a pivot sees every row
        ("SELECT * FROM a.t TABLESAMPLE (10 ROWS) WHERE id = 5", [[]]),
        # ... nor a sampled or pivoted derived table
        ("SELECT * FROM (SELECT p, v FROM a.t) TABLESAMPLE (2 ROWS) WHERE v > 100", [[]]),
        (
            "SELECT * FROM (SELECT p, id % 2 AS k, v FROM a.t) "
            "PIVOT (sum(v) FOR k IN (0 AS v, 1 AS w)) WHERE v > 100",
            [[]],
        ),
        # a CTE read twice: only what both readers filter
        (
            "WITH c AS (SELECT * FROM a.t) SELECT * FROM c x JOIN c y ON x.id = y.id "
            "WHERE x.id = 5",
            [[]],
        ),
        (
            "WITH c AS (SELECT * FROM a.t) SELECT * FROM c x JOIN c y ON x.id = y.id "
            "WHERE x.id = 5 AND y.id = 5 AND y.v = 1",
            [["id = 5"]],
        ),
        # a conjunct over two tables, or with a subquery, stays Spark's
        ("SELECT * FROM a.t l, a.u r WHERE l.id = r.v OR l.id = 1", [[], []]),
    ],
)
def test_filters_reach_only_where_they_cannot_drop_output_rows(
    sql: str, want: list[list[str]]
) -> None:
    assert filters(sql) == want


def test_columns_are_every_identifier_or_all() -> None:
    tree = sqlglot.parse_one("SELECT count(*) FROM a.t", read="spark")
    assert needed_columns(tree) == {"a", "t"}  # count(*) needs no column
    assert starred(tree, list(tree.find_all(exp.Table))) == [False]
    for sql in [
        "SELECT * FROM a.t NATURAL JOIN a.u",
        "SELECT * FROM a.t PIVOT (sum(v) FOR p IN ('x', 'y'))",
    ]:
        assert needed_columns(sqlglot.parse_one(sql, read="spark")) is None, sql


@pytest.mark.parametrize(
    "sql,want",
    [
        ("SELECT * FROM a.t", [True]),
        ("SELECT t.* FROM a.t", [True]),
        ("SELECT to_json(struct(*)) FROM a.t", [True]),
        ("SELECT count(*) FROM a.t", [False]),
        # a star expands the sources of its own SELECT only
        ("SELECT x.a, y.* FROM a.t x JOIN a.u y ON x.k = y.k", [False, True]),
        ("SELECT * FROM a.t x JOIN a.u y ON x.k = y.k", [True, True]),
        ("SELECT x.a FROM a.t x JOIN (SELECT * FROM a.u) y ON x.k = y.k", [False, True]),
        # a derived table passes on what it lists; with a star, what that star expands
        ("SELECT * FROM (SELECT k, v FROM a.t) s", [False]),
        ("SELECT * FROM (SELECT * FROM a.t) s JOIN a.u ON s.k = u.k", [True, True]),
        ("WITH c AS (SELECT k FROM a.t) SELECT * FROM c JOIN a.u ON c.k = u.k", [False, True]),
        ("SELECT k FROM a.t WHERE EXISTS (SELECT * FROM a.u)", [False, True]),
        # a parenthesised join: every table in it
        ("SELECT * FROM (a.t JOIN a.u ON t.k = u.k)", [True, True]),
    ],
)
def test_a_star_needs_every_column_of_the_tables_it_expands(sql: str, want: list[bool]) -> None:
    tree = sqlglot.parse_one(sql, read="spark")
    tables = [t for t in tree.find_all(exp.Table) if t.db == "a"]
    tables.sort(key=lambda t: t.name)
    assert starred(tree, tables) == want
    tree = sqlglot.parse_one("SELECT s.a, exists(tags, x -> x > 1) FROM a.t", read="spark")
    assert {"s", "tags"} <= needed_columns(tree)  # type: ignore[operator]


@pytest.mark.parametrize(
    "cond,want",
    [
        ("d >= DATE '1994-01-01'", (">=", "1994-01-01")),
        ("d < CAST('1995-01-01' AS DATE)", ("<", "1995-01-01")),
        ("d = '1994-01-01'", ("=", "1994-01-01")),
        ("5 < id", (">", 5)),
        ("id = -3", ("=", -3)),
        ("p IN ('a', 'b')", ("in", "a")),
        ("p IS NULL", ("isnull", None)),
        ("p IS NOT NULL", ("notnull", None)),
        # Spark would cast these: not the same comparison as Iceberg's bounds, never used
        ("id = '5'", None),
        ("p = 5", None),
        ("d = '1994-1-1'", None),
        ("d > '2024-13-01'", None),  # not a date: Spark's cast gives NULL; no ValueError here
        # NaN sorts above every number in Spark but is outside Iceberg's bounds
        ("x > 5", None),
        ("x >= 5", None),
        ("x <> 5", None),
        ("x < 5", ("<", 5.0)),
        ("x = 5", ("=", 5.0)),
        # a float column: Iceberg rounds the literal to float, Spark widens the column
        ("f < 0.7", None),
        ("f = 0.5", None),
        ("lower(p) = 'a'", None),
        ("id = v", None),
        # a uuid column is its canonical string: only a canonical literal compares as the
        # uuid's bytes do (upper case or without dashes compares as other text in Spark)
        (
            "u = '123e4567-e89b-12d3-a456-426614174000'",
            ("=", "123e4567-e89b-12d3-a456-426614174000"),
        ),
        (
            "u >= '80000000-0000-0000-0000-000000000000'",
            (">=", "80000000-0000-0000-0000-000000000000"),
        ),
        ("u = '123E4567-E89B-12D3-A456-426614174000'", None),
        ("u < '123e4567e89b12d3a456426614174000'", None),
        ("u = 'not a uuid'", None),
        ("u IN ('123e4567-e89b-12d3-a456-426614174000', 'x')", None),
    ],
)
def test_simple_predicates_only_where_spark_and_iceberg_agree(cond: str, want: object) -> None:
    types = {
        "id": "long",
        "v": "long",
        "p": "string",
        "d": "date",
        "x": "double",
        "f": "float",
        "u": "uuid",
    }
    pred = to_pred(sqlglot.parse_one(cond, read="spark"), types)
    if want is None:
        assert pred is None
    else:
        op, first = want  # type: ignore[misc]
        assert pred is not None and pred.op == op
        assert (pred.values[0] if pred.values else None) == first or first in pred.values


def test_metadata_columns_only_where_a_column_names_them() -> None:
    def hidden(sql: str) -> list[tuple[str, ...]]:
        tree = sqlglot.parse_one(sql, read="spark")
        return analyze(tree, iceberg_tables(tree), [SCHEMA]).hidden

    assert hidden("SELECT id, _file, _pos FROM a.t WHERE _spec_id = 0") == [
        ("_file", "_pos", "_spec_id")
    ]
    assert hidden("SELECT x._partition.p FROM a.t x") == [("_partition",)]
    assert hidden("SELECT id AS _pos FROM a.t") == [()]  # an alias, not the metadata column


def test_an_identity_partition_on_a_uuid_prunes_by_its_bytes() -> None:
    """pyiceberg 0.12's evaluator compares a decoded uuid.UUID partition value with the
    literal's bytes: never equal, so every file of the partition would be pruned; mor's
    partition test compares bytes (scan_planning._partition_evaluator)."""
    import uuid

    from pyiceberg.expressions import EqualTo, LessThan
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform, IdentityTransform
    from pyiceberg.types import LongType, NestedField, UUIDType

    from mor.planner.scan_planning import _partition_evaluator

    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "u", UUIDType()))
    low, high = uuid.UUID("10" + "0" * 30), uuid.UUID("f0" + "0" * 30)

    class File:
        def __init__(self, *values: object) -> None:
            self.partition = values

    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "u"))
    for expr, keeps in [
        (EqualTo("u", str(low)), (True, False)),
        (LessThan("u", "80000000-0000-0000-0000-000000000000"), (True, False)),  # unsigned
    ]:
        test = _partition_evaluator(spec, schema, _projected(schema, spec, expr))
        assert (test(File(low)), test(File(high))) == keeps, expr
    bucket = PartitionSpec(PartitionField(2, 1000, BucketTransform(8), "b"))
    test = _partition_evaluator(bucket, schema, _projected(schema, bucket, EqualTo("u", str(low))))
    mine = BucketTransform(8).transform(UUIDType())(low)
    assert test(File(mine)) and not test(File((mine + 1) % 8))


def _projected(schema: object, spec: object, expr: object) -> object:
    from pyiceberg.expressions.visitors import inclusive_projection

    return inclusive_projection(schema, spec, True)(expr)  # type: ignore[arg-type]


def limits(sql: str) -> list[int | None]:
    tree = sqlglot.parse_one(sql, read="spark")
    tables = sorted(iceberg_tables(tree), key=lambda t: t.parts[0].meta["start"])
    return analyze(tree, tables, [SCHEMA] * len(tables)).limits


@pytest.mark.parametrize(
    "sql,want",
    [
        ("SELECT * FROM a.t LIMIT 100", [100]),
        # OFFSET skips rows that must still be read; a projection row by row keeps the count
        ("SELECT id, v + 1 AS w, CAST(v AS STRING), d FROM a.t LIMIT 5 OFFSET 10", [15]),
        ("SELECT /*+ REPARTITION(2) */ id FROM a.t LIMIT 9", [9]),
        ("SELECT * FROM a.t LIMIT 0", [0]),
        # the LIMIT of a derived table or CTE, whatever reads it afterwards
        ("SELECT * FROM (SELECT * FROM a.t LIMIT 7) x WHERE id = 5", [7]),
        ("WITH c AS (SELECT id FROM a.t LIMIT 4) SELECT * FROM c JOIN c d ON c.id = d.id", [4]),
        ("SELECT * FROM a.u WHERE id IN (SELECT id FROM a.t LIMIT 3)", [None, 3]),
        # a WHERE wholly on the table: planning decides whether partition values settle it
        ("SELECT * FROM a.t WHERE p = 'x' AND v > 1 LIMIT 3", [3]),
        # anything that may drop, merge or reorder rows before the LIMIT needs them all
        ("SELECT * FROM a.t WHERE rand() < 0.5 LIMIT 3", [None]),
        ("SELECT * FROM a.t WHERE id IN (SELECT id FROM a.u) LIMIT 3", [None, None]),
        ("SELECT count(*) FROM a.t LIMIT 1", [None]),
        ("SELECT p, count(*) FROM a.t GROUP BY p LIMIT 1", [None]),
        ("SELECT DISTINCT id FROM a.t LIMIT 2", [None]),
        ("SELECT id FROM a.t ORDER BY id LIMIT 3", [None]),
        ("SELECT id FROM a.t SORT BY id LIMIT 3", [None]),
        ("SELECT id, row_number() OVER (ORDER BY v) FROM a.t LIMIT 3", [None]),
        ("SELECT explode(array(id)) FROM a.t LIMIT 3", [None]),
        ("SELECT id FROM a.t LATERAL VIEW explode(array(v)) e AS x LIMIT 3", [None]),
        ("SELECT * FROM a.t TABLESAMPLE (10 PERCENT) LIMIT 3", [None]),
        ("SELECT * FROM a.t, a.u LIMIT 1", [None, None]),
        ("SELECT * FROM a.t l JOIN a.u r ON l.id = r.id LIMIT 1", [None, None]),
        ("SELECT id FROM a.t UNION ALL SELECT id FROM a.u LIMIT 3", [None, None]),
        # a function could be an aggregate or a generator sqlglot does not know (a UDF)
        ("SELECT upper(p) FROM a.t LIMIT 2", [None]),
        ("SELECT my_udaf(v) FROM a.t LIMIT 2", [None]),
        ("SELECT (SELECT max(id) FROM a.u) FROM a.t LIMIT 3", [None, None]),
        ("SELECT id FROM a.t LIMIT 1 + 1", [None]),
    ],
)
def test_a_limit_reaches_a_table_only_over_it_alone_row_by_row(sql: str, want: object) -> None:
    assert limits(sql) == want


@pytest.mark.parametrize(
    "sql,want",
    [
        ("SELECT _file FROM a.t", [("_file",)]),
        # qualified: the table of that name or alias only
        ("SELECT x._pos FROM a.t x JOIN a.u ON x.k = u.k", [("_pos",), ()]),
        # not a table of the same name inside a subquery (a MERGE's source over `c.t`)
        ("SELECT t._file FROM a.u t JOIN (SELECT * FROM a.t) s ON t.k = s.k", [(), ("_file",)]),
        # a correlated reference from inside reaches the outer table
        ("SELECT k FROM a.t WHERE EXISTS (SELECT 1 FROM a.u WHERE u.k = t._pos)", [("_pos",), ()]),
    ],
)
def test_a_metadata_column_belongs_to_the_table_its_qualifier_names(
    sql: str, want: list[tuple[str, ...]]
) -> None:
    tree = sqlglot.parse_one(sql, read="spark")
    tables = sorted((t for t in tree.find_all(exp.Table) if t.db == "a"), key=lambda t: t.name)
    got = analyze(tree, tables, [{"k": "int"} for _ in tables]).hidden
    assert got == want
