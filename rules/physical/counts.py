"""Rows counted from metadata: a scan that needs no column and no filter reads no data file
(a physical rule)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mor.planner.nodes import DataTask, DeleteTask
from mor.planner.settings import current


def counted_from_metadata(
    fields: int,
    hidden: int,
    meta: int,
    pushed: int,
    eq_sets: int,
    tasks: Sequence[DataTask],
    deletes: Mapping[int, DeleteTask],
) -> bool:
    """A scan whose rows carry no column (count(*), EXISTS, `SELECT 1`) and meet no filter,
    with no equality deletes, has as many rows as its files record minus their exactly
    deleted positions: it is answered from metadata and the position delete files (read on
    the driver within position_driver_rows), without reading a data file."""
    if fields or hidden or meta or pushed or eq_sets:
        return False
    used = {p for t in tasks for p in t.pos_deletes}
    return sum(deletes[p].record_count for p in used) <= current().position_driver_rows
