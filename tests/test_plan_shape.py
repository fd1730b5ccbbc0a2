"""The plan mor builds does not grow with the number of files a table holds.

Two tables alike but for their size, N = 40 and 10N = 400 data files (more than Spark's listing
threshold of 32 either way): files without field ids, read through the table's name mapping,
position deletes on three files, an equality delete whose key bounds reach two. Building a
query's DataFrame (`mor_sql`) must cost the same for both (STYLE.md, "Cost that follows the
query, not the table"): as many Parquet reads, as many py4j round trips (a classic session) or
bytes of plan (Spark Connect), and no footer read. The rows are checked against a count made
by hand.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from mor import mor_sql
from mor.writer.tables import TableWriter

# the legs beyond pyspark 3.5 classic that run this file (markers: pyproject.toml)
pytestmark = [pytest.mark.spark4, pytest.mark.connect]

N = 40
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "s", StringType(), required=False),
    NestedField(3, "k", LongType(), required=False),
)
QUERIES = (
    "SELECT count(*) FROM {t} WHERE k >= 0",
    "SELECT k, count(*), min(s) FROM {t} GROUP BY k",
    "SELECT id, s FROM {t} WHERE k = 3",
)


def _table(catalog: Any, name: str, n: int, folder: Path) -> None:
    """`n` files of five rows (ids 10i .. 10i+4, no field ids), committed at once; then the
    position deletes of the first row of files 0, 1, 2 and an equality delete of ids 31 and 42
    (files 3 and 4 by their bounds)."""
    w = TableWriter(catalog, name, SCHEMA)
    mapping = [{"field-id": i, "names": [n_]} for i, n_ in ((1, "id"), (2, "s"), (3, "k"))]
    with w.refresh().transaction() as tx:
        tx.set_properties({"schema.name-mapping.default": json.dumps(mapping)})
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(n):
        ids = [10 * i + j for j in range(5)]
        path = str(folder / f"f{i:04d}.parquet")
        rows = {"id": ids, "s": [f"s{x % 3}" for x in ids], "k": [x % 7 for x in ids]}
        pq.write_table(
            pa.table(
                rows, schema=pa.schema([("id", pa.int64()), ("s", pa.string()), ("k", pa.int64())])
            ),
            path,
        )
        f = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=Record(),
            file_size_in_bytes=os.path.getsize(path),
            record_count=5,
            lower_bounds={1: struct.pack("<q", ids[0])},
            upper_bounds={1: struct.pack("<q", ids[-1])},
            null_value_counts={1: 0},
            value_counts={1: 5},
        )
        f.spec_id = 0
        files.append(f)
    w.commit(data=files)
    location = w.table.location()
    os.makedirs(f"{location.removeprefix('file://')}/data", exist_ok=True)  # for the deletes
    pos = [w.position_delete_file({files[i].file_path: [0]}, files[i]) for i in range(3)]
    w.commit(deletes=[*pos, w.equality_delete_file([1], [{1: 31}, {1: 42}])])


def _expected(n: int, sql: str) -> Any:
    rows = [
        (10 * i + j, f"s{(10 * i + j) % 3}", (10 * i + j) % 7)
        for i in range(n)
        for j in range(5)
        if not (i < 3 and j == 0) and 10 * i + j not in (31, 42)
    ]
    if sql.startswith("SELECT count"):
        return [(len(rows),)]
    if sql.startswith("SELECT k"):
        by_k: dict[int, list[str]] = {}
        for _, s, k in rows:
            by_k.setdefault(k, []).append(s)
        return sorted((k, len(v), min(v)) for k, v in by_k.items())
    return sorted((i, s) for i, s, k in rows if k == 3)


@contextmanager
def _counting() -> Iterator[dict[str, int]]:
    """Counts while building: Parquet reads made, py4j round trips (classic sessions)."""
    import pyspark.sql.readwriter as rw

    from mor.physical.scan import reads

    counts = {"reads": 0, "py4j": 0}
    patches: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, name: str, key: str) -> None:
        real = getattr(owner, name)

        def counted(*a: Any, **k: Any) -> Any:
            # py4j's memory commands ("m": a proxy freed by Python's collector) come whenever
            # it collects, not from what is being built
            if key != "py4j" or not str(a[1] if len(a) > 1 else "").startswith("m\n"):
                counts[key] += 1
            return real(*a, **k)

        patches.append((owner, name, real))
        setattr(owner, name, counted)

    wrap(rw.DataFrameReader, "parquet", "reads")
    wrap(reads, "read_parquet", "reads")
    try:
        from pyspark.sql.connect import readwriter as crw

        wrap(crw.DataFrameReader, "parquet", "reads")
    except ImportError:  # pyspark 3.5's Connect client lacks grpc here: classic only
        pass
    try:
        import py4j.clientserver as cs
        import py4j.java_gateway as jg

        wrap(cs.ClientServerConnection, "send_command", "py4j")
        wrap(jg.GatewayConnection, "send_command", "py4j")
    except ImportError:  # pyspark-client (Spark Connect only): no py4j
        pass
    try:
        yield counts
    finally:
        for owner, name, real in reversed(patches):
            setattr(owner, name, real)


def _built(spark: Any, catalog: Any, sql: str) -> tuple[Any, dict[str, int]]:
    import mor

    mor.clear_caches()  # nothing reused from an earlier query: a first build each time
    with _counting() as counts:
        df = mor_sql(sql, catalog=catalog, spark=spark)
    counts = dict(counts)
    if hasattr(df, "_plan"):  # Spark Connect: the plan the client sends
        counts["plan bytes"] = len(df._plan.to_proto(spark.client).SerializeToString())
    return df, counts


@pytest.fixture(scope="module")
def tables(tmp_path_factory: Any) -> tuple[Any, dict[int, str]]:
    from mor.api import default_catalog

    root = tmp_path_factory.mktemp("shape")
    cat = default_catalog(str(root / "wh"))
    names = {}
    for n in (N, 10 * N):
        names[n] = f"shape.t{n}"
        _table(cat, names[n], n, root / f"files{n}")
    return cat, names


@pytest.mark.parametrize("sql", QUERIES)
def test_building_a_query_costs_the_same_for_ten_times_the_files(
    tables: tuple[Any, dict[int, str]], spark: Any, sql: str, monkeypatch: Any
) -> None:
    from mor.planner import attach

    footers: list[str] = []
    real: Callable[..., Any] = attach.layout_of
    monkeypatch.setattr(attach, "layout_of", lambda *a: footers.append(a[1]) or real(*a))
    cat, names = tables
    for name in names.values():  # once untimed: what a process looks up on its first query
        _built(spark, cat, sql.format(t=name))
    costs = {}
    for n, name in names.items():
        df, costs[n] = _built(spark, cat, sql.format(t=name))
        got = sorted(tuple(r) for r in df.collect())
        assert got == _expected(n, sql), name
    small, large = costs[N], costs[10 * N]
    # data, position and equality deletes (and, where an unfiltered query resolves its
    # equality deletes, resolve_at_read = 1, the data's key columns once more)
    assert large["reads"] == small["reads"] <= 4, costs
    assert large.get("py4j") == small.get("py4j"), costs
    if "plan bytes" in small:
        # a longer table name and file ids of more digits, nothing per file (the paths of 360
        # more files alone would take some 20 KB)
        assert large["plan bytes"] <= 1.02 * small["plan bytes"], costs
    assert footers == []
