"""Keyword-default builders for small plans and tables used by rule and planning tests, and a
file altered for the length of a block."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

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
