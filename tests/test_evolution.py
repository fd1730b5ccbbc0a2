"""Schema and partition evolution cases of SEMANTICS.md (regressions 7, 8, 9, 10, 14)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, StructType

from mor import mor_sql
from mor.writer.tables import TableWriter

# the legs beyond pyspark 3.5 classic that run this file (markers: pyproject.toml): Spark 4 through
# Spark Connect (the newest pyspark's classic leg runs the suites whose answers depend on its SQL)
pytestmark = [pytest.mark.connect]

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "p", StringType(), required=False),
    NestedField(3, "v", LongType(), required=False),
)


def _t(ids: list, ps: list, vs: list) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": ps, "v": pa.array(vs, pa.int64())})


def _q(cat: Any, spark: Any, sql: str) -> Counter:
    return Counter(tuple(r) for r in mor_sql(sql, catalog=cat, spark=spark).collect())


def test_rename_and_added_column_read_by_field_id(catalog: Any, spark: Any) -> None:
    w = TableWriter(catalog, "e.r", SCHEMA)
    w.append(_t([1, 2], ["a", "b"], [10, 20]))
    with w.refresh().update_schema() as u:
        u.rename_column("v", "value")
        u.add_column("extra", StringType())
    w.append(
        pa.table(
            {
                "id": pa.array([3], pa.int64()),
                "p": ["c"],
                "value": pa.array([30], pa.int64()),
                "extra": ["x"],
            }
        )
    )
    w.commit(deletes=[w.equality_delete_file([3], [{3: 20}])])  # keyed on the renamed column
    got = _q(catalog, spark, "SELECT id, value, extra FROM e.r")
    assert got == Counter({(1, 10, None): 1, (3, 30, "x"): 1})


def test_regression_7_dropped_equality_column_still_applies(catalog: Any, spark: Any) -> None:
    w = TableWriter(catalog, "e.d", SCHEMA)
    w.append(_t([1, 2, 3], ["a", "a", "a"], [10, 20, 10]))
    w.commit(deletes=[w.equality_delete_file([3], [{3: 10}])])
    with w.refresh().update_schema() as u:
        u.delete_column("v")
    w.append(pa.table({"id": pa.array([4], pa.int64()), "p": ["a"]}))
    assert _q(catalog, spark, "SELECT * FROM e.d") == Counter({(2, "a"): 1, (4, "a"): 1})


def test_regression_8_equality_delete_on_nested_field(catalog: Any, spark: Any) -> None:
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(
            2,
            "addr",
            StructType(
                NestedField(3, "city", StringType(), required=False),
                NestedField(4, "zip", StringType(), required=False),
            ),
            required=False,
        ),
    )
    w = TableWriter(catalog, "e.n", schema)
    w.append(
        pa.table(
            {
                "id": pa.array([1, 2, 3], pa.int64()),
                "addr": [
                    {"city": "Oslo", "zip": "1"},
                    {"city": "Rome", "zip": "2"},
                    {"city": None, "zip": "3"},
                ],
            }
        )
    )
    w.commit(deletes=[w.equality_delete_file([3], [{3: "Rome"}, {3: None}])])
    assert _q(catalog, spark, "SELECT id FROM e.n") == Counter({(1,): 1})


def test_regression_9_global_delete_under_unpartitioned_spec_0(catalog: Any, spark: Any) -> None:
    w = TableWriter(catalog, "e.g", SCHEMA, UNPARTITIONED_PARTITION_SPEC)
    w.append(_t([1, 2], ["a", "b"], [0, 0]))
    with w.refresh().update_spec() as u:
        u.add_identity("p")
    w.append(_t([1, 3], ["a", "b"], [1, 1]))
    # written under spec 0 (unpartitioned): global, so it reaches the spec-1 files too
    w.commit(deletes=[w.equality_delete_file([1], [{1: 1}], spec_id=0)])
    assert _q(catalog, spark, "SELECT id, v FROM e.g") == Counter({(2, 0): 1, (3, 1): 1})


def test_regression_10_partition_tuples_of_different_specs(catalog: Any, spark: Any) -> None:
    schema = Schema(*SCHEMA.fields, NestedField(4, "q", StringType(), required=False))
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
    w = TableWriter(catalog, "e.p", schema, spec)
    _, files = w.append(
        pa.table(
            {
                "id": pa.array([1], pa.int64()),
                "p": ["a"],
                "v": pa.array([0], pa.int64()),
                "q": ["z"],
            }
        )
    )
    with w.refresh().update_spec() as u:
        u.remove_field("p")
        u.add_identity("q")
    w.append(
        pa.table(
            {
                "id": pa.array([1], pa.int64()),
                "p": ["z"],
                "v": pa.array([1], pa.int64()),
                "q": ["a"],
            }
        )
    )
    # a delete in spec 0 partition p='a' must not touch the spec-1 file whose tuple is also ('a',)
    w.commit(deletes=[w.equality_delete_file([1], [{1: 1}], files[0].partition, files[0].spec_id)])
    assert _q(catalog, spark, "SELECT id, v FROM e.p") == Counter({(1, 1): 1})


def test_regression_14_many_keys_and_several_files_with_nulls(catalog: Any, spark: Any) -> None:
    n = 60_000
    w = TableWriter(catalog, "e.m", SCHEMA)
    ids = list(range(n)) + [None] * 5
    w.append(_t(ids, ["a"] * len(ids), [i % 3 if i is not None else None for i in ids]))
    half = [{1: i} for i in range(0, n, 2)]
    w.commit(
        deletes=[
            w.equality_delete_file([1], half[: len(half) // 2] + [{1: None}]),
            w.equality_delete_file([1], half[len(half) // 2 :] + [{1: None}]),
        ]
    )
    # a projection without the equality column still applies the deletes
    (cnt,) = mor_sql("SELECT count(v) FROM e.m", catalog=catalog, spark=spark).collect()[0]
    assert cnt == n // 2
    (total,) = mor_sql("SELECT count(*) FROM e.m", catalog=catalog, spark=spark).collect()[0]
    assert total == n // 2


def test_promoted_column_reads_old_files_with_their_type(catalog: Any, spark: Any) -> None:
    from pyiceberg.types import IntegerType

    schema = Schema(
        NestedField(1, "id", IntegerType(), required=False),
        NestedField(2, "p", StringType(), required=False),
    )
    w = TableWriter(catalog, "e.pr", schema)
    # repeated values: pyarrow writes dictionary pages, which Spark 3.5 cannot upcast
    w.append(pa.table({"id": pa.array([1, 1, 2, 2, 3] * 20, pa.int32()), "p": ["a"] * 100}))
    with w.refresh().update_schema() as u:
        u.update_column("id", LongType())
    w.append(pa.table({"id": pa.array([2**40, 2], pa.int64()), "p": ["b", "b"]}))
    w.commit(deletes=[w.equality_delete_file([1], [{1: 2}])])
    got = _q(catalog, spark, "SELECT id, count(*) FROM e.pr GROUP BY id")
    assert got == Counter({(1, 40): 1, (3, 20): 1, (2**40, 1): 1})


def test_files_without_field_ids_use_the_name_mapping(
    catalog: Any, spark: Any, tmp_path: Any
) -> None:
    import pyarrow.parquet as pq

    w = TableWriter(catalog, "e.nm", SCHEMA)
    path = str(tmp_path / "imported.parquet")
    pq.write_table(_t([1, 2, 3], ["a", "a", "a"], [10, 20, 30]), path)  # no field ids
    w.refresh().add_files([path])
    assert "schema.name-mapping.default" in w.refresh().properties
    w.append(_t([4], ["a"], [40]))
    w.commit(deletes=[w.equality_delete_file([3], [{3: 20}, {3: 40}])])
    assert _q(catalog, spark, "SELECT id, v FROM e.nm") == Counter({(1, 10): 1, (3, 30): 1})


def _footers_opened(monkeypatch: Any) -> list[str]:
    """The paths whose Parquet footer planning opens from now on."""
    from mor.planner import attach
    from mor.planner.state import caches

    caches().layouts.clear()
    opened: list[str] = []
    real = attach.layout_of

    def counted(src: Any, path: str, schema: Any) -> Any:
        opened.append(path)
        return real(src, path, schema)

    monkeypatch.setattr(attach, "layout_of", counted)
    return opened


def test_a_name_mapping_that_names_columns_as_the_schema_opens_no_footer(
    catalog: Any, spark: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    """add_files leaves a mapping with each column's own name: such files read by the schema's
    names like files with field ids, without a footer read per file (20,000 of them were 20,000
    requests on an object store before the query started)."""
    import pyarrow.parquet as pq

    w = TableWriter(catalog, "e.nm_plain", SCHEMA)
    paths = []
    for i in range(3):
        paths.append(str(tmp_path / f"imported{i}.parquet"))
        pq.write_table(_t([i], ["a"], [10 * i]), paths[-1])  # no field ids
    w.refresh().add_files(paths)
    w.append(_t([7], ["b"], [70]))
    opened = _footers_opened(monkeypatch)
    got = _q(catalog, spark, "SELECT id, p, v FROM e.nm_plain")
    assert got == Counter({(0, "a", 0): 1, (1, "a", 10): 1, (2, "a", 20): 1, (7, "b", 70): 1})
    assert opened == []


def test_a_name_mapping_with_an_alias_reads_the_footers_of_the_files_read(
    catalog: Any, spark: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    """A mapping that accepts another name for a column (`ident` for `id`): which name a file
    holds is in its footer, read for the files the query reads only (partition pruning first),
    once per process."""
    import json
    import os

    import pyarrow.parquet as pq
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "p", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
    w = TableWriter(catalog, "e.nm_alias", schema, spec)
    mapping = [{"field-id": 1, "names": ["id", "ident"]}, {"field-id": 2, "names": ["p"]}]
    with w.refresh().transaction() as tx:
        tx.set_properties({"schema.name-mapping.default": json.dumps(mapping)})
    old = str(tmp_path / "old.parquet")
    pq.write_table(pa.table({"ident": pa.array([1, 2], pa.int64()), "p": ["a", "a"]}), old)
    # add_files checks the file's names against the schema, not the mapping: commit it as a
    # migration would, with its partition and counts
    imported = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=old,
        file_format=FileFormat.PARQUET,
        partition=Record("a"),
        file_size_in_bytes=os.path.getsize(old),
        record_count=2,
    )
    imported.spec_id = 0
    w.commit(data=[imported])
    w.append(pa.table({"id": pa.array([3], pa.int64()), "p": ["b"]}))
    opened = _footers_opened(monkeypatch)
    assert _q(catalog, spark, "SELECT id FROM e.nm_alias WHERE p = 'a'") == Counter(
        {(1,): 1, (2,): 1}
    )
    assert [p.rsplit("/", 1)[-1] for p in opened] == ["old.parquet"]
    assert _q(catalog, spark, "SELECT id FROM e.nm_alias") == Counter({(1,): 1, (2,): 1, (3,): 1})
    assert len(opened) == 2  # the second query opened only the file the first did not


def test_column_dropped_and_added_again_under_its_name(catalog: Any, spark: Any) -> None:
    """A new column `v` (another field id) must read NULL from files written before it, even
    though those files hold a column named `v`: files are matched by field id, not by name."""
    w = TableWriter(catalog, "e.da", SCHEMA)
    w.append(_t([1, 2], ["a", "a"], [10, 20]))
    with w.refresh().update_schema() as u:
        u.delete_column("v")
    with w.refresh().update_schema() as u:
        u.add_column("v", StringType())
    w.append(pa.table({"id": pa.array([3], pa.int64()), "p": ["a"], "v": ["new"]}))
    got = _q(catalog, spark, "SELECT id, v FROM e.da")
    assert got == Counter({(1, None): 1, (2, None): 1, (3, "new"): 1})
    # and an equality delete on the new column leaves the old rows alone
    w.commit(deletes=[w.equality_delete_file([4], [{4: None}])])
    assert _q(catalog, spark, "SELECT id, v FROM e.da") == Counter({(3, "new"): 1})


def test_renamed_nested_field_reads_old_and_new_files(catalog: Any, spark: Any) -> None:
    """A field renamed inside a struct: old files hold it under its old name. Read whole, by
    itself, and as an equality key, from both kinds of file."""
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(
            2,
            "s",
            StructType(
                NestedField(3, "a", LongType(), required=False),
                NestedField(4, "b", StringType(), required=False),
            ),
            required=False,
        ),
    )
    w = TableWriter(catalog, "e.nr", schema)
    s_type = pa.struct([("a", pa.int64()), ("b", pa.string())])
    w.append(
        pa.table(
            {
                "id": pa.array([1, 2], pa.int64()),
                "s": pa.array([{"a": 10, "b": "x"}, {"a": 20, "b": "y"}], s_type),
            }
        )
    )
    with w.refresh().update_schema() as u:
        u.rename_column("s.a", "renamed")
    s_new = pa.struct([("renamed", pa.int64()), ("b", pa.string())])
    w.append(
        pa.table(
            {
                "id": pa.array([3], pa.int64()),
                "s": pa.array([{"renamed": 30, "b": "z"}], s_new),
            }
        )
    )
    got = _q(catalog, spark, "SELECT id, s.renamed, s.b FROM e.nr")
    assert got == Counter({(1, 10, "x"): 1, (2, 20, "y"): 1, (3, 30, "z"): 1})
    whole = {
        r.id: r.s.asDict()
        for r in mor_sql("SELECT id, s FROM e.nr", catalog=catalog, spark=spark).collect()
    }
    assert whole[1] == {"renamed": 10, "b": "x"} and whole[3] == {"renamed": 30, "b": "z"}
    w.commit(deletes=[w.equality_delete_file([3], [{3: 20}, {3: 30}])])
    assert _q(catalog, spark, "SELECT id, s.renamed FROM e.nr") == Counter({(1, 10): 1})


def test_mor_changes_no_setting_of_the_users_session(
    catalog: Any, spark: Any, tmp_path: Any
) -> None:
    """After mor_sql (reading a renamed column and a nested equality key), the user's own read
    with a schema that carries Parquet field ids still matches columns by name, as their
    session says; no SQL setting was changed."""
    import pyarrow.parquet as pq
    from pyspark.sql import types as T

    path = str(tmp_path / "user.parquet")
    ids = [
        pa.field(n, pa.int64(), metadata={b"PARQUET:field_id": i})
        for n, i in (("a", b"1"), ("b", b"2"))
    ]
    pq.write_table(pa.table([[1, 2], [3, 4]], schema=pa.schema(ids)), path)
    user_schema = T.StructType(
        [
            T.StructField("a", T.LongType(), True, {"parquet.field.id": 2}),
            T.StructField("b", T.LongType(), True, {"parquet.field.id": 1}),
        ]
    )

    def settings() -> dict[str, str]:
        return {r.key: r.value for r in spark.sql("SET").collect()}

    def user_read() -> list[tuple[int, int]]:
        return [tuple(r) for r in spark.read.schema(user_schema).parquet(path).collect()]

    before = settings()
    assert user_read() == [(1, 3), (2, 4)]
    test_renamed_nested_field_reads_old_and_new_files(catalog, spark)
    test_rename_and_added_column_read_by_field_id(catalog, spark)
    assert user_read() == [(1, 3), (2, 4)]
    assert settings() == before


def test_names_writers_sanitize_are_found_in_each_file(catalog: Any, spark: Any) -> None:
    """Iceberg's writers store `my-col` as `my_x2Dcol` and `1st` as `_1st` in Parquet: mor
    finds each column by its field id in the file's footer, never by the schema's name."""
    schema = Schema(
        NestedField(1, "my-col", LongType(), required=False),
        NestedField(2, "1st", StringType(), required=False),
    )
    w = TableWriter(catalog, "e.san", schema)
    w.append(pa.table({"my-col": pa.array([1, 2, 3], pa.int64()), "1st": ["a", "b", "c"]}))
    w.commit(deletes=[w.equality_delete_file([1], [{1: 2}])])
    got = _q(catalog, spark, "SELECT `my-col`, `1st` FROM e.san")
    assert got == Counter({(1, "a"): 1, (3, "c"): 1})
