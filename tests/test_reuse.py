"""DataFrames reused across queries of a classic session (physical/spark/reuse.py): kept within
their bounds, told apart by everything they are made of, and never a way around the checks a new
query makes (files of the recorded size) or around a newer snapshot's deletes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from helpers import altered
from mor import explain, mor_sql
from mor.physical.spark import reuse
from mor.physical.spark.reuse import cached, fingerprint, reused
from mor.planner.errors import DataFileError
from mor.rules.physical.broadcast import keeps
from mor.writer.tables import TableWriter

# the legs beyond pyspark 3.5 classic that run this file (markers: pyproject.toml): Spark 4 through
# Spark Connect (the newest pyspark's classic leg runs the suites whose answers depend on its SQL)
pytestmark = [pytest.mark.connect]

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "s", StringType(), required=False),
)


class Session:
    """Stands for a classic session: reuse keys what it keeps by the session object."""


def test_kept_frames_are_bounded_by_count_and_by_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    hits: list[str] = []

    def make(v: str) -> Any:
        made.append(v)
        return v

    s = Session()
    assert reused(s, "a", lambda: make("A"), lambda: hits.append("a")) == "A"
    assert reused(s, "a", lambda: make("A2"), lambda: hits.append("a")) == "A"
    assert (made, hits) == (["A"], ["a"])  # made once; the check of a reuse ran
    # heavier than the bound alone: made every time, never kept
    for _ in range(2):
        reused(s, "w", lambda: make("W"), weight=lambda: 10, limit=lambda: 5)
    assert made.count("W") == 2
    # within the bound, the least recently used goes first
    limit = 10
    reused(s, "x", lambda: make("X"), weight=lambda: 6, limit=lambda: limit)
    reused(s, "y", lambda: make("Y"), weight=lambda: 6, limit=lambda: limit)
    reused(s, "x", lambda: make("X2"), weight=lambda: 6, limit=lambda: limit)
    assert "X2" in made  # x went when y came
    monkeypatch.setattr(reuse, "FRAMES", 2)
    for k in "pqr":
        reused(s, k, lambda k=k: make(k))
    assert len(reuse._by_session[s].frames) == 2
    other = Session()  # each session keeps its own
    assert reused(other, "a", lambda: make("A3")) == "A3"


def _table(catalog: Any) -> tuple[TableWriter, Any]:
    w = TableWriter(catalog, "r.t", SCHEMA)
    _, files = w.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": ["a", "b", "c"]}))
    return w, files[0]


def test_fingerprints_tell_apart_what_a_scan_is_made_of(catalog: Any) -> None:
    from mor.api import plan_query
    from mor.planner.nodes import IcebergScan

    w, f = _table(catalog)

    def scan(sql: str = "SELECT id FROM r.t") -> IcebergScan:
        planned = plan_query(sql, catalog=catalog)
        return next(n for n in planned.optimized.walk() if isinstance(n, IcebergScan))

    first = scan()
    assert fingerprint(scan()) == fingerprint(first)  # planned again: the same
    assert fingerprint(scan("SELECT id, s FROM r.t")) != fingerprint(first)  # columns
    assert fingerprint(scan("SELECT id FROM r.t WHERE id > 1")) != fingerprint(first)  # filter
    task = first.files.data[0]
    for changed in (
        replace(task, size_bytes=task.size_bytes + 1),
        replace(task, data_seq=task.data_seq + 1),
        replace(task, read_path=task.read_path + ".moved"),
    ):
        files = replace(first.files, data=(changed,))
        assert fingerprint(replace(first, files=files)) != fingerprint(first)
    w.commit(deletes=[w.position_delete_file({f.file_path: [1]}, f)])
    assert fingerprint(scan()) != fingerprint(first)  # a new snapshot's delete


def test_a_reused_scan_sees_new_deletes_and_is_checked_again(catalog: Any, spark: Any) -> None:
    from mor.physical.spark.session import is_connect

    w, f = _table(catalog)
    reuse.clear()

    def ids() -> list[int]:
        return sorted(
            r.id for r in mor_sql("SELECT id FROM r.t", catalog=catalog, spark=spark).collect()
        )

    assert ids() == [1, 2, 3]
    kept = reuse._by_session.get(spark)
    n = len(kept.frames) if kept is not None else 0
    assert ids() == [1, 2, 3]
    assert (len(reuse._by_session[spark].frames) if n else 0) == n  # the repeat built nothing
    assert (n > 0) == (not is_connect(spark))  # classic sessions keep what they built
    w.commit(deletes=[w.position_delete_file({f.file_path: [1]}, f)])
    assert ids() == [1, 3]  # a new snapshot: another fingerprint, the delete applied
    assert ids() == [1, 3]
    with altered(f.file_path, lambda b: b[: len(b) // 2]):
        with pytest.raises(DataFileError, match="was replaced or truncated"):
            ids()  # the same query: its scan is reused only after its files are checked
    assert ids() == [1, 3]


class Frame:
    """Stands for a DataFrame: records persist and unpersist."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def persist(self) -> Frame:
        self.log.append(f"persist {self.name}")
        return self

    def unpersist(self, blocking: bool = False) -> Frame:
        self.log.append(f"unpersist {self.name}")
        return self


def test_cached_frames_are_persisted_once_and_unpersisted_beyond_their_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MOR_KEEP_AT_READ", "1")  # kept from the first read: see the next test
    log: list[str] = []
    s = Session()

    def get(k: str, weight: int = 4, limit: int = 10) -> Frame:
        # what the physical plan decides (rules/physical/broadcast.keeps) for this weight and limit
        return cached(s, k, lambda: Frame(k, log), weight, limit, keeps(weight, limit))

    a = get("a")
    assert get("a") is a and log == ["persist a"]  # made and persisted once
    get("b")
    get("a")  # a is now the most recently used
    get("c")  # 12 > 10: b, the least recently used, goes
    assert log == ["persist a", "persist b", "persist c", "unpersist b"]
    log.clear()
    heavy = get("h", weight=11)  # heavier than the bound alone: made, never persisted
    assert get("h", weight=11) is not heavy and log == []
    get("a", limit=0)  # the cache turned off: what it kept is dropped at once
    assert sorted(log) == ["unpersist a", "unpersist c"]
    assert not reuse._cached[s].frames
    log.clear()
    get("a")
    reuse.uncache_all()  # as clear_position_cache() does
    assert log == ["persist a", "unpersist a"] and s not in reuse._cached


def test_a_frame_is_persisted_from_its_second_read_by_default() -> None:
    """keep_at_read = 2: a first call pays nothing to cache rows only a later query reads;
    the second read persists, the third reads the cache."""
    log: list[str] = []
    s = Session()

    def get(k: str) -> Frame:
        return cached(s, k, lambda: Frame(k, log), 4, 10, keeps(4, 10))

    first = get("a")
    assert log == [] and not reuse._cached[s].frames
    second = get("a")
    assert second is not first and log == ["persist a"]
    assert get("a") is second and log == ["persist a"]
    get("b")
    assert log == ["persist a"]  # b's first read
    reuse.uncache_all()


def test_cached_equality_deletes_are_read_once_and_never_outlive_their_files(
    catalog: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keys of equality delete files stay in Spark's cache across queries (one read of
    the files); a newer snapshot's delete files are another entry, and a cached file that
    changed size is refused as an uncached one is."""
    monkeypatch.setenv("MOR_KEEP_AT_READ", "1")
    w, _ = _table(catalog)
    w.commit(deletes=[w.equality_delete_file([1], [{1: 2}])])
    reuse.clear()

    def ids(sql: str = "SELECT id FROM r.t", **settings: Any) -> list[int]:
        # the anti-join's delete side (resolved positions need it once: tests/test_resolution)
        joined = {"resolve_equality_deletes": False, **settings}
        df = mor_sql(sql, catalog=catalog, spark=spark, settings=joined)
        return sorted(r.id for r in df.collect())

    assert ids() == [1, 3]
    kept = reuse._cached[spark].frames
    assert len(kept) == 1
    ((df, _),) = kept.values()
    assert df.storageLevel.useMemory  # persisted
    assert ids("SELECT id FROM r.t WHERE s <> 'x'") == [1, 3]  # another query, same deletes
    assert len(kept) == 1 and next(iter(kept.values()))[0] is df
    second = w.equality_delete_file([1], [{1: 3}])
    w.commit(deletes=[second])
    assert ids() == [1]  # the new snapshot's second delete file applies
    assert len(kept) == 2
    with altered(second.file_path, lambda b: b + b"\0"):
        with pytest.raises(DataFileError, match="was replaced or truncated"):
            ids()
    assert ids() == [1]
    assert ids(delete_cache_bytes=0) == [1]  # read from the files again; the cache dropped
    assert not kept


def test_cached_deleted_positions_follow_the_snapshot(
    catalog: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleted positions read by Spark (the anti-join method) are cached like equality keys:
    read once for repeated queries, another entry when a newer delete file applies."""
    monkeypatch.setenv("MOR_KEEP_AT_READ", "1")
    w, f = _table(catalog)
    w.commit(deletes=[w.position_delete_file({f.file_path: [0]}, f)])
    reuse.clear()
    antijoin = {"position_bitmap_bytes": 0}

    def ids() -> list[int]:
        df = mor_sql("SELECT id FROM r.t", catalog=catalog, spark=spark, settings=antijoin)
        return sorted(r.id for r in df.collect())

    assert ids() == [2, 3]
    assert ids() == [2, 3]
    kept = reuse._cached[spark].frames
    assert [k[0] for k in kept] == ["positions"]
    w.commit(deletes=[w.position_delete_file({f.file_path: [2]}, f)])
    assert ids() == [2]  # both files apply now: another entry
    assert [k[0] for k in kept] == ["positions", "positions"]
    plan = explain("SELECT id FROM r.t", catalog=catalog, physical=True, settings=antijoin)
    assert "persist from its first read in this session: kept in Spark's cache" in plan
    plan = explain(
        "SELECT id FROM r.t",
        catalog=catalog,
        physical=True,
        settings={**antijoin, "delete_cache_bytes": 0},
    )
    assert "persist" not in plan


def test_every_cache_is_listed_filled_and_cleared_together(catalog: Any, spark: Any) -> None:
    """What a process keeps between queries is one object (planner/state.py): each cache a
    query fills is listed by `mor.cache_figures()` with its entries, and `mor.clear_caches()`
    empties every one, after which the same query gives the same rows, read afresh."""
    import mor

    w, f = _table(catalog)
    w.commit(deletes=[w.position_delete_file({f.file_path: [0]}, f)])
    w.commit(deletes=[w.equality_delete_file([1], [{1: 3}])])
    mor.clear_caches()
    names = [c.name for c in mor.cache_figures()]
    assert len(names) == len(set(names)) == 13
    assert all(c.entries == 0 and c.held == 0 for c in mor.cache_figures())

    def ids() -> list[int]:
        return sorted(
            r.id for r in mor_sql("SELECT id FROM r.t", catalog=catalog, spark=spark).collect()
        )

    assert ids() == [2]
    assert ids() == [2]  # the second query resolves the equality delete to positions
    filled = {c.name for c in mor.cache_figures() if c.entries}
    # (file layouts are read only for files written under another schema: test_evolution)
    assert filled >= {
        "manifest lists",
        "manifests",
        "planned scans",
        "position deletes",
        "bitmaps",
        "resolved positions",
        "manifest schemas",
        "session probes",
    }, filled
    from mor.physical.spark.session import is_connect

    # DataFrames are kept for later queries on a classic session only (Connect builds them on
    # the client without round trips)
    assert ("built DataFrames" in filled) != is_connect(spark), filled
    mor.clear_caches()
    assert all(c.entries == 0 and c.held == 0 for c in mor.cache_figures())
    assert ids() == [2]
