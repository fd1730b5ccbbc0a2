"""What many tests share: keyword-default builders for small plans (rule and planning tests),
small tables written through the catalog (tests that need metadata, nested shapes), and a file
altered for the length of a block."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from mor.planner.nodes import (
    GLOBAL_PART,
    Col,
    DataTask,
    DeleteTask,
    EqField,
    IcebergScan,
    ReadField,
    ScanFiles,
)
from mor.writer.tables import TableWriter

_FIELDS = {1: ("id", '"long"'), 2: ("region", '"string"'), 3: ("amount", '"long"')}


def read_field(fid: int) -> ReadField:
    name, t = _FIELDS[fid]
    return ReadField(col=Col(name=f"c_{name}", label=name, field_id=fid), field_id=fid, type_str=t)


def data_file(
    fid: int,
    *,
    seq: int = 1,
    part: int = 0,
    pos: tuple[int, ...] = (),
    eq: tuple[frozenset[int], ...] = (),
) -> DataTask:
    return DataTask(
        file_id=fid,
        path=f"/t/d{fid}.parquet",
        read_path=f"/t/d{fid}.parquet",
        data_seq=seq,
        spec_id=0,
        partition_id=part,
        record_count=100,
        size_bytes=1,
        pos_deletes=pos,
        eq_sets=eq,
    )


def eq_delete(
    fid: int, *, ids: set[int], seq: int = 5, part: int = 0, global_: bool = False
) -> DeleteTask:
    return DeleteTask(
        file_id=fid,
        kind="equality",
        path=f"/t/e{fid}.parquet",
        read_path=f"/t/e{fid}.parquet",
        data_seq=seq,
        spec_id=0,
        partition_id=GLOBAL_PART if global_ else part,
        record_count=10,
        size_bytes=1,
        eq_ids=frozenset(ids),
    )


def scan(
    data: tuple[DataTask, ...] = (),
    deletes: tuple[DeleteTask, ...] = (),
    fields: tuple[int, ...] = (2, 3),
    planned: bool = True,
) -> IcebergScan:
    files = ScanFiles(
        snapshot_id=7,
        sequence_number=9,
        data=data,
        deletes=deletes,
        partitions=("spec 0: p=1",),
        eq_fields=tuple(
            EqField(field_id=i, name=_FIELDS[i][0], type_str=_FIELDS[i][1]) for i in _FIELDS
        ),
    )
    return IcebergScan(
        table="lake.orders",
        source_key="k",
        snapshot_id=7,
        schema_id=0,
        fields=tuple(read_field(i) for i in fields),
        files=files if planned else None,
    )


@contextmanager
def altered(path: str, change: Callable[[bytes], bytes]) -> Iterator[None]:
    """The local file `path` (as a manifest records it: `file:` URIs too) rewritten by `change`
    inside the block, its bytes put back after (with a new modification time, as a rewrite of
    a committed file would leave it)."""
    local = path.removeprefix("file:")
    saved = open(local, "rb").read()
    try:
        with open(local, "wb") as out:
            out.write(change(saved))
        yield
    finally:
        with open(local, "wb") as out:
            out.write(saved)
        os.utime(local)


def small_table(catalog: Any) -> TableWriter:
    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "p", StringType()),
        NestedField(3, "v", LongType()),
    )
    w = TableWriter(catalog, "s.t", schema)
    w.append(
        pa.table({"id": pa.array([1], pa.int64()), "p": ["a"], "v": pa.array([1], pa.int64())})
    )
    return w


def nested_table(catalog: Any, name: str = "shapes.nested") -> list[dict[str, Any]]:
    """A table with struct, array, map and date columns, two data files, a position delete, an
    equality delete on `id` {1} and one on the nested `s.a` {5}. Returns its live rows, worked
    out here from what was written (a naive reading of the spec rules)."""
    import datetime as dt

    from pyiceberg.types import (
        DateType,
        DoubleType,
        ListType,
        MapType,
        StructType,
    )

    # ids in the breadth-first order pyiceberg assigns when it creates the table
    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "grp", StringType()),
        NestedField(3, "d", DateType()),
        NestedField(
            4,
            "s",
            StructType(NestedField(8, "a", LongType()), NestedField(9, "b", StringType())),
        ),
        NestedField(5, "tags", ListType(10, StringType(), element_required=False)),
        NestedField(6, "attrs", MapType(11, StringType(), 12, LongType(), value_required=False)),
        NestedField(7, "amount", DoubleType()),
    )
    colors = ["red", "green", "blue", "amber"]
    rows = []
    for i in range(24):
        rows.append(
            {
                "id": i,
                "grp": ["x", "y", "z"][i % 3] if i != 7 else None,
                "d": dt.date(2024, 1, 1) + dt.timedelta(days=i % 5),
                "s": None if i == 5 else {"a": i * 10, "b": f"b{i % 4}"},
                "tags": None if i == 6 else [colors[(i + k) % 4] for k in range(i % 3)],
                "attrs": None if i == 8 else {"k1": i, f"k{i % 2 + 2}": i * 2},
                "amount": float(i) * 1.5,
            }
        )
    w = TableWriter(catalog, name, schema)
    assert w.table.schema() == schema, "pyiceberg assigned other field ids"
    arrow = schema_to_arrow(schema)
    _, first = w.append(pa.Table.from_pylist(rows[:12], schema=arrow))
    _, second = w.append(pa.Table.from_pylist(rows[12:], schema=arrow))
    # position 2 of the first file (id 2); equality deletes: id 4 and 15, and s.a = 130 (id 13)
    w.commit(deletes=[w.position_delete_file({first[0].file_path: [2]}, first[0])])
    w.commit(deletes=[w.equality_delete_file([1], [{1: 4}, {1: 15}])])
    w.commit(deletes=[w.equality_delete_file([8], [{8: 130}])])
    gone = {2, 4, 15, 13}
    return [r for r in rows if r["id"] not in gone]


def schema_to_arrow(schema: Schema) -> pa.Schema:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    return schema_to_pyarrow(schema)


@contextmanager
def landing(hook: Callable[[int], None]) -> Iterator[None]:
    """`hook(attempt)` called right before each commit attempt of mor's snapshot producer
    asks the catalog, where a test lands a concurrent commit (a commit the hook makes through
    the producer itself is not hooked again)."""
    from mor.writer.producer import SnapshotProducer

    before = SnapshotProducer._attempting
    busy: list[int] = []

    def attempting(self: SnapshotProducer, attempt: int) -> None:
        if busy:
            return
        busy.append(attempt)
        try:
            hook(attempt)
        finally:
            busy.pop()

    SnapshotProducer._attempting = attempting  # type: ignore[method-assign]
    try:
        yield
    finally:
        SnapshotProducer._attempting = before  # type: ignore[method-assign]
