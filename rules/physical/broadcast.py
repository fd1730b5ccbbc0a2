"""Delete sides: broadcast or shuffled, compacted, kept in Spark's cache; what a broadcast
weighs (physical rules, from estimates of Spark's hash relations)."""

from __future__ import annotations

from mor.planner.nodes import EqDeleteScan, IcebergScan, Plan
from mor.planner.settings import current
from mor.rules.physical.positions import PositionStrategy, kib, position_strategy
from mor.rules.physical.reading import FileKey

# the types whose values Spark stores in a row's variable-length part, and the width assumed
# for each value of them (delete keys are ids and codes, rarely long text)
_VARIABLE = ('"string"', '"binary"', '"uuid"')


VARIABLE_WIDTH = 32


def relation_bytes(rows: int, fixed: int, variable: int = 0) -> int:
    """An estimate of the memory a broadcast of `rows` rows of `fixed` fixed-width and
    `variable` variable-width columns takes on the driver and on each executor: Spark keeps
    each row (an UnsafeRow: a null word, 8 bytes a column, the variable part) twice while it
    builds the hash relation (the collected rows and the relation's pages), plus the hash
    table's slots (16 bytes at load factor 0.5)."""
    row = 8 + 8 * (fixed + variable) + VARIABLE_WIDTH * variable
    return rows * (2 * row + 32)


def position_relation_bytes(strategy: PositionStrategy, long_keys: bool) -> int:
    """The estimate for the deleted positions a join strategy broadcasts."""
    if strategy.shift is not None:
        return relation_bytes(strategy.delete_rows, 1)
    return relation_bytes(strategy.delete_rows, 2 if long_keys else 1, 0 if long_keys else 1)


def eq_relation_bytes(deletes: EqDeleteScan) -> int:
    """The estimate for an equality delete scan's broadcast (its rows before compaction)."""
    guards = 2 if deletes.meta else 0
    variable = sum(1 for k in deletes.keys if k.type_str in _VARIABLE or k.compared_as_text)
    return relation_bytes(deletes.rows(), len(deletes.keys) - variable + guards, variable)


def broadcast_allowed(rows: int, est_bytes: int, limit_bytes: int) -> bool:
    """A delete side is broadcast when its rows and its estimated bytes are within the limits
    (`broadcast_rows`, and `broadcast_bytes` or its default from the driver's memory);
    else Spark joins it by a shuffle, slower but bounded in memory."""
    return rows <= current().broadcast_rows and est_bytes <= limit_bytes


def memory_bytes(text: str) -> int | None:
    """A JVM memory size ('4g', '512m', '1024k', '2t' or bytes) in bytes; None if unreadable."""
    t = text.strip().lower().removesuffix("b")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except ValueError:
        return None


def default_broadcast_bytes(driver_memory: str | None, max_result_size: str | None) -> int:
    """An eighth of the driver's memory (Spark's default 1g when unset), and at most half of
    spark.driver.maxResultSize (the collected rows of a broadcast count against it; 0 is no
    limit)."""
    memory = memory_bytes(driver_memory or "1g") or (1 << 30)
    limit = memory // 8
    result = memory_bytes(max_result_size or "1g")
    if result:
        limit = min(limit, result // 2)
    return limit


def compacted_keys(deletes: EqDeleteScan, limit_bytes: int) -> bool:
    """Whether the keys of several equality delete files are compacted (one row per key and
    scope, with the highest sequence number) before the anti-join: only when they are not
    broadcast. A broadcast's size is bounded by the rows before compaction anyway, and its hash
    relation keeps repeated keys, each tested against the guards (an anti-join drops a row if
    any delete of its key is newer): compacting there was a shuffle of every key (TPC-H sf 1
    lineitem, 584k keys in 237 files: ~0.6 s of a 4.4 s scan). A shuffled join sorts both
    sides, and fewer rows of repeated keys are worth a partial aggregation there."""
    return len(deletes.files) > 1 and not broadcast_allowed(
        deletes.rows(), eq_relation_bytes(deletes), limit_bytes
    )


def keeps(weight: int, limit: int) -> bool:
    """Whether a delete side of `weight` estimated bytes is kept in Spark's cache under `limit`
    (setting delete_cache_bytes; 0: nothing is kept): reuse.cached keeps what this allows."""
    return 0 < limit and weight <= limit


def side_text(what: str, broadcast: bool, rows: int, est: int, limit: int) -> str:
    """How EXPLAIN PHYSICAL names a delete side: broadcast, or shuffled and why."""
    if broadcast:
        return f"broadcast({what}, ~{kib(est)} est.)"
    return (
        f"{what} (shuffled, not broadcast: {rows} rows, ~{kib(est)} est., limits "
        f"{current().broadcast_rows} rows, {kib(limit)})"
    )


def bitmap_weight(node: Plan) -> int:
    """Bytes of position bitmaps a compiled plan below `node` may hold on the driver (the
    estimate of each scan that takes the bitmap method): what physical/spark/reuse.py weighs."""
    total = 0
    for n in node.walk():
        if isinstance(n, IcebergScan):
            s = position_strategy(n.data_files(), n.deletes_by_id(), FileKey("file_id"))
            if s is not None and s.method == "bitmap":
                total += s.bitmap_bytes
    return total
