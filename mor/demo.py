"""`mor demo`: build demo.orders in the embedded catalog, run examples/, show one EXPLAIN."""

from __future__ import annotations

import glob
import os
import sys

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from mor.api import default_catalog, explain, mor_sql, warehouse_dir
from mor.writer.tables import TableWriter


def _examples_dir() -> str:
    """The example queries: `mor/examples` in an installed wheel, `examples/` in a source tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (
        os.path.join(here, "examples"),
        os.path.join(os.path.dirname(here), "examples"),
    ):
        if glob.glob(os.path.join(candidate, "*.sql")):
            return candidate
    raise FileNotFoundError(f"mor's example queries are missing (looked in {here}/examples)")


EXAMPLES = _examples_dir()
SCHEMA = Schema(
    NestedField(1, "order_id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "customer", StringType(), required=False),
    NestedField(4, "amount", LongType(), required=False),
)
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))


def _rows(ids: list[int | None], region: str) -> pa.Table:
    return pa.table(
        {
            "order_id": pa.array(ids, pa.int64()),
            "region": [region] * len(ids),
            "customer": [f"c{(i or 0) % 7}" if i != 13 else None for i in ids],
            "amount": pa.array([(i or 0) * 10 for i in ids], pa.int64()),
        }
    )


def build_demo_table(warehouse: str | None = None) -> int:
    """demo.orders: 3 snapshots of data, position deletes, equality deletes on {1} (with a
    NULL key) and on {1, 3}, and one data file reached by both id sets. Returns snapshot 1."""
    w = TableWriter(default_catalog(warehouse), "demo.orders", SCHEMA, SPEC)
    first, files = w.append(
        pa.concat_tables(
            [
                _rows(list(range(1, 11)) + [None], "EU"),
                _rows(list(range(11, 21)), "US"),
            ]
        )
    )
    eu = next(f for f in files if f.partition[0] == "EU")
    us = next(f for f in files if f.partition[0] == "US")
    # snapshot 2: a position delete (order 2 sits at position 1 of the EU file)
    w.commit(deletes=[w.position_delete_file({eu.file_path: [1]}, eu)])
    # snapshot 3: equality deletes by order_id in EU, one with a NULL key (removes that row)
    w.commit(deletes=[w.equality_delete_file([1], [{1: 3}, {1: None}], eu.partition, eu.spec_id)])
    # snapshot 4: equality deletes by (order_id, customer) in EU and US; the EU file now has both
    # id sets; the US key 12/'c5' matches nothing (order 12 belongs to customer c5? no: c5 is 12)
    w.commit(
        deletes=[
            w.equality_delete_file(
                [1, 3], [{1: 4, 3: "c4"}, {1: 5, 3: "nobody"}], eu.partition, eu.spec_id
            ),
            w.equality_delete_file(
                [3, 1], [{1: 12, 3: "c5"}, {1: 13, 3: None}], us.partition, us.spec_id
            ),
        ]
    )
    # snapshot 5: order 3 comes back in EU: appended after its delete, so it is live
    w.append(_rows([3], "EU"))
    # a tag on the first snapshot, so that time travel reads it by name (examples/)
    w.refresh().manage_snapshots().create_tag(first, "first_load").commit()
    return first


def run_demo(warehouse: str | None = None) -> int:
    wh = warehouse_dir(warehouse)
    print(f"Building demo.orders in the embedded catalog at {wh}/catalog.db ...", file=sys.stderr)
    build_demo_table(warehouse)
    cat = default_catalog(warehouse)
    from mor.output import format_rows

    for path in sorted(glob.glob(os.path.join(EXAMPLES, "*.sql"))):
        with open(path, encoding="utf-8") as f:
            sql = f.read()  # run as written: `mor run examples/<file>` gives the same
        print(f"-- {os.path.basename(path)}")
        print("\n".join(ln for ln in sql.splitlines() if ln.startswith("--")))
        df = mor_sql(sql.strip().rstrip(";"), catalog=cat)
        print(format_rows(df.columns, df.collect(), "table"))
    q = "SELECT region, count(*) AS orders, sum(amount) AS revenue FROM demo.orders GROUP BY region"
    print(f"-- EXPLAIN {q}")
    print(explain(q, catalog=cat))
    return 0


def warm_plans(spark: object, warehouse: str, rounds: int) -> None:
    """What `mor server start` warms a server with (mor/server.py): demo.orders built in
    `warehouse`, and mor's plan of a grouped aggregate and of its rows run through `spark`,
    `rounds` times (class loading, code generation and the JIT paid there, not by the first
    commands)."""
    import shutil

    shutil.rmtree(warehouse, ignore_errors=True)
    build_demo_table(warehouse)
    catalog = default_catalog(warehouse)
    for _ in range(rounds):
        for sql in (
            "SELECT region, count(*) AS n, sum(amount) AS total FROM demo.orders GROUP BY region",
            "SELECT * FROM demo.orders ORDER BY order_id",
        ):
            mor_sql(sql, spark=spark, catalog=catalog).collect()
