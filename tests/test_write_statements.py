"""DELETE, UPDATE and MERGE as the planner reads them, without Spark: their targets and
branches, the refusals Spark SQL makes, the rows query each runs, the rule a written value's
type meets, the cardinality rule, and which data files a DELETE removes whole."""

from __future__ import annotations

from typing import Any

import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    DoubleType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    UUIDType,
)

from mor.planner.errors import ColumnNotFoundError, MorError, NotAQueryError, UnsupportedError
from mor.planner.row_writes import parse_row_write, rows_query
from mor.planner.sql import one_statement
from mor.planner.write_statements import (
    ValueCheck,
    check_values,
    isolation_level,
    value_fits,
)

pytestmark = [pytest.mark.check]

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "p", StringType()),
    NestedField(
        3, "s", StructType(NestedField(4, "a", LongType()), NestedField(5, "b", StringType()))
    ),
    NestedField(6, "tags", ListType(7, StringType())),
    NestedField(8, "u", UUIDType()),
    NestedField(9, "x", DoubleType()),
)  # fmt: skip


def _parse(sql: str, branch: str = "main", tables: tuple[str, ...] = ("db.t",)) -> Any:
    return parse_row_write(one_statement(sql), branch, lambda name: name in tables)


def test_the_target_and_its_branch() -> None:
    rw = _parse("DELETE FROM db.t AS x WHERE id = 1")
    assert (rw.kind, rw.name, rw.alias, rw.branch) == ("DELETE", "db.t", "x", "main")
    assert rw.statement.text[rw.where_at :].startswith("WHERE")
    # Spark's name of a branch, when no table has it
    rw = _parse("UPDATE db.t.branch_audit SET p = 'a'")
    assert (rw.name, rw.branch, rw.where_at) == ("db.t", "audit", None)
    assert _parse("DELETE FROM db.t.branch_x", tables=("db.t", "db.t.branch_x")).name == (
        "db.t.branch_x"
    )
    with pytest.raises(MorError, match="branch 'audit' in the name, 'b' given as --branch"):
        _parse("DELETE FROM db.t.branch_audit WHERE id = 1", branch="b")
    assert _parse("MERGE INTO db.t.branch_b t USING db.s s ON t.id = s.id "
                  "WHEN MATCHED THEN DELETE").branch == "b"  # fmt: skip


@pytest.mark.parametrize(
    "sql, error, why",
    [
        ("INSERT INTO db.t VALUES (1)", NotAQueryError, "INSERT statements are not supported"),
        ("DELETE FROM db.t WHERE id = 1 LIMIT 1", UnsupportedError, "has no LIMIT"),
        ("DELETE FROM db.t VERSION AS OF 1 WHERE id = 1", UnsupportedError, "cannot be changed"),
        ("UPDATE db.t SET p = 'a' ORDER BY id", UnsupportedError, "has no ORDER BY"),
    ],
)
def test_what_spark_sql_refuses(sql: str, error: type, why: str) -> None:
    with pytest.raises(error, match=why):
        _parse(sql)


def test_delete_rows_query_pins_the_snapshot_and_keeps_the_users_where() -> None:
    rw = _parse("DELETE FROM db.t AS x\n  WHERE id IN (SELECT id FROM db.o) AND p = 'a'")
    q = rows_query(rw, SCHEMA, 2, 42)
    assert q.text.startswith("SELECT _file, _pos FROM db.t VERSION AS OF 42 AS x WHERE id IN")
    # a position in the generated text is the user's line and column
    col = q.text.index("p = 'a'") + 1
    assert q.moved is not None and q.moved(1, col) == (
        2,
        rw.statement.text.split("\n")[1].index("p") + 1,
    )


def test_update_sets_columns_and_fields_of_structs() -> None:
    """Every column in order, a set column as its new value cast to its type; a struct with
    a field set is rebuilt around the new value, its other fields as they were (Spark's
    UPDATE of a field); each value beside what it replaces, for the type rule."""
    rw = _parse("UPDATE db.t SET s.a = s.a + 1, tags = array('x'), t.x = 1.5 WHERE id = 3")
    q = rows_query(rw, SCHEMA, 3, 9)
    select = q.text.split(" FROM ")[0]
    assert (
        "CAST((named_struct('a', CAST((s.a + 1) AS bigint), 'b', CAST((`t`.`s`.`b`) AS string)))"
        in select
    )
    assert "CAST((ARRAY('x')) AS array<string>) AS `tags`" in select
    assert "CAST((1.5) AS double) AS `x`" in select and select.endswith("_file, _pos, _row_id")
    assert [c.what for c in q.checks] == [
        "UPDATE ... SET s.a = s.a + 1",
        "UPDATE ... SET tags = ARRAY('x')",
        "UPDATE ... SET x = 1.5",
    ]
    assert set(q.drop) == {c.value for c in q.checks} | {c.column for c in q.checks}
    with pytest.raises(ColumnNotFoundError, match=r"no such field of s; its fields are a, b"):
        rows_query(_parse("UPDATE db.t SET s.z = 1"), SCHEMA, 2, 1)
    with pytest.raises(UnsupportedError, match="SET s.a and s both"):
        rows_query(
            _parse("UPDATE db.t SET s = named_struct('a', 1, 'b', 'c'), s.a = 2"), SCHEMA, 2, 1
        )


def test_the_type_rule_of_written_values() -> None:
    """The column's own type, NULL, a widening without loss (int -> bigint, float ->
    double), recursively inside arrays, maps and structs; anything else asks for a CAST."""
    assert value_fits("integer", "long") and value_fits("void", "string")
    assert value_fits("integer", "decimal(10,2)") and not value_fits("double", "float")
    arr = {"type": "array", "elementType": "integer", "containsNull": True}
    assert value_fits(arr, {**arr, "elementType": "long"})
    assert not value_fits({**arr, "elementType": "string"}, {**arr, "elementType": "long"})
    struct = {"type": "struct", "fields": [{"name": "a", "type": "integer"}]}
    assert value_fits(struct, {"type": "struct", "fields": [{"name": "A", "type": "long"}]})
    assert not value_fits(struct, {"type": "struct", "fields": [{"name": "b", "type": "long"}]})
    with pytest.raises(
        UnsupportedError,
        match=r"the value is array<string>, the column array<bigint>; "
        r"write CAST\(\.\.\. AS array<bigint>\)",
    ):
        check_values(
            (ValueCheck("UPDATE ... SET l = x", "v", "c"),),
            {"v": {**arr, "elementType": "string"}, "c": {**arr, "elementType": "long"}},
        )


def test_merge_clauses_and_the_cardinality_rule() -> None:
    def merge(whens: str) -> Any:
        rw = _parse(f"MERGE INTO db.t t USING db.s s ON t.id = s.id {whens}")
        return rows_query(rw, SCHEMA, 2, 7)

    q = merge("WHEN MATCHED AND s.x > 0 THEN UPDATE SET p = s.p WHEN NOT MATCHED THEN INSERT *")
    assert " RIGHT OUTER JOIN " in q.text and q.check_cardinality and q.where == "_mor_clause >= 0"
    assert any(c.startswith("CAST(CASE _mor_clause WHEN 1 THEN 1 WHEN 2 THEN 3") for c in q.select)
    # the only WHEN MATCHED clause an unconditional DELETE: no rule, only acted-on rows
    q = merge("WHEN MATCHED THEN DELETE")
    assert not q.check_cardinality and q.where == "_mor_clause > 0" and " INNER JOIN " in q.text
    assert (
        " FULL OUTER JOIN "
        in merge("WHEN NOT MATCHED THEN INSERT * WHEN NOT MATCHED BY SOURCE THEN DELETE").text
    )
    with pytest.raises(UnsupportedError, match="only the last WHEN MATCHED clause"):
        merge("WHEN MATCHED THEN DELETE WHEN MATCHED AND s.x = 1 THEN DELETE")
    with pytest.raises(UnsupportedError, match="t.id is a column of t"):
        merge("WHEN NOT MATCHED THEN INSERT (id) VALUES (t.id)")
    with pytest.raises(UnsupportedError, match="NOT NULL and given no value"):
        merge("WHEN NOT MATCHED THEN INSERT (p) VALUES (s.p)")


def test_isolation_levels() -> None:
    assert isolation_level({}, "MERGE", "db.t") == "serializable"
    props = {"write.update.isolation-level": "Snapshot"}
    assert isolation_level(props, "UPDATE", "db.t") == "snapshot"
    with pytest.raises(MorError, match="write.delete.isolation-level='none'"):
        isolation_level({"write.delete.isolation-level": "none"}, "DELETE", "db.t")


class _File:
    """A data file as planning gives it (an EntryFile's attributes)."""

    def __init__(self, part: str | None, lo: int, hi: int, nulls: int = 0) -> None:
        import struct

        self.spec_id = 0
        self.partition = (part,)
        self.record_count = 10
        self.value_counts = {1: 10, 2: 10}
        self.null_value_counts = {1: nulls, 2: 0 if part is not None else 10}
        self.nan_value_counts: dict[int, int] = {}
        self.lower_bounds = {1: struct.pack("<q", lo)}
        self.upper_bounds = {1: struct.pack("<q", hi)}
        self.file_path = f"f-{part}-{lo}-{hi}"


def test_a_delete_removes_whole_only_files_every_row_of_which_it_selects() -> None:
    """By partition values (a strict projection) or column metrics (strict: a NULL, which
    SQL's comparison does not select, keeps the file): `id >= 5` removes a file of ids 5-9,
    not one of 4-9 nor one of 5-9 with a NULL id; `p = 'a'` removes partition a's files; `!=`
    (true for NULL in Iceberg's expressions) proves nothing."""
    from mor.planner.nodes import Col, Expr, IcebergScan, Pred, ReadField
    from mor.planner.scan_planning import must_hold

    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))

    class _Src:
        class metadata:
            @staticmethod
            def specs() -> dict[int, PartitionSpec]:
                return {0: spec}

    def scan(*preds: Pred) -> IcebergScan:
        from sqlglot import exp

        fields = tuple(
            ReadField(col=Col(name=n, label=n), field_id=i, type_str=t)
            for n, i, t in (("id", 1, "long"), ("p", 2, "string"))
        )
        pushed = tuple(Expr(tree=exp.true(), text="", refs=frozenset(), pred=p) for p in preds)
        return IcebergScan(table="db.t", source_key="k", snapshot_id=1, schema_id=0,
                           fields=fields, pushed=pushed)  # fmt: skip

    must = must_hold(_Src, SCHEMA, scan(Pred(column="id", op=">=", values=(5,))))
    assert must is not None
    assert must(_File("b", 5, 9)) and not must(_File("b", 4, 9))
    assert not must(_File("b", 5, 9, nulls=1))
    must = must_hold(_Src, SCHEMA, scan(Pred(column="p", op="=", values=("a",))))
    assert must is not None and must(_File("a", 0, 9)) and not must(_File("b", 0, 9))
    assert not must(_File(None, 0, 9))
    assert must_hold(_Src, SCHEMA, scan(Pred(column="id", op="!=", values=(5,)))) is None
