"""DataFrames reused by later queries of one classic session.

Building a DataFrame on a classic session costs round trips to the JVM and an analysis per
operation; a Parquet read also has Spark check and list its paths (about 15 ms for a few
files). What a scan builds from immutable files alone (the read of a group of data or delete
files with their `_metadata` columns, the table of a scan's bitmaps) is the same in every
query that reads those files, so it is kept per session and reused, as Spark would reuse a
DataFrame a program holds: the files are checked against their recorded sizes before every
query (guards.check_files), as for a new read. Keyed by what the DataFrame is made of (schema,
paths, expressions), least recently used first out beyond `FRAMES` per session. Spark Connect
builds DataFrames on the client without round trips: nothing is kept there.

`cached` goes further for what is costly to read rather than to build (equality delete keys,
deleted positions read by Spark): the DataFrame is persisted in Spark's cache, on classic and
Connect sessions alike, so later queries read its rows from there instead of the files.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from mor.physical.spark.session import is_connect
from mor.planner.cache import BoundedCache
from mor.planner.nodes import Expr, Plan
from mor.planner.settings import current
from mor.planner.state import caches

FRAMES = 256


class _Kept:
    """One session's DataFrames, least recently used first, with the bytes each weighs (for
    `reused`, bitmap data held on the driver, 0 for a read; for `cached`, the estimated rows
    kept in Spark's cache)."""

    def __init__(self) -> None:
        self.frames: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.held = 0
        self.reads: BoundedCache[int] = BoundedCache()  # `cached`: reads of each key

    def put(self, key: Hashable, df: Any, weight: int, limit: int) -> list[Any]:
        """Keeps `df` unless it is kept already or heavier than `limit`; returns the frames
        that went to make room."""
        if key in self.frames or weight > limit:
            return []
        self.frames[key] = (df, weight)
        self.held += weight
        return self.trim(limit)

    def trim(self, limit: int) -> list[Any]:
        """Takes out the least recently used frames beyond `FRAMES` and `limit` bytes; returns
        them."""
        gone = []
        while self.frames and (len(self.frames) > FRAMES or self.held > limit):
            _, (old, w) = self.frames.popitem(last=False)
            self.held -= w
            gone.append(old)
        return gone


_lock = threading.Lock()
_by_session: weakref.WeakKeyDictionary[Any, _Kept] = weakref.WeakKeyDictionary()


def reused(
    spark: Any,
    key: Hashable,
    make: Callable[[], Any],
    on_hit: Callable[[], None] | None = None,
    weight: Callable[[], int] = lambda: 0,
    limit: Callable[[], int] = lambda: 1 << 62,
) -> Any:
    """The DataFrame `make()` builds, made once per classic session for each `key`; `on_hit`
    runs before a kept one is returned (the checks `make` would have made). `weight()`: bytes
    of bitmap data it holds on the driver; what a session keeps weighs at most `limit()`
    (both asked only when something is made), and one heavier is made every time."""
    if is_connect(spark):
        return make()
    with _lock:
        kept = _by_session.get(spark)
        hit = kept.frames.get(key) if kept is not None else None
        if hit is not None:
            kept.frames.move_to_end(key)
    if hit is not None:
        if on_hit is not None:
            on_hit()
        return hit[0]
    df = make()  # outside the lock: a slow read must not hold up other threads
    w, bound = weight(), limit()
    with _lock:
        _by_session.setdefault(spark, _Kept()).put(key, df, w, bound)
    return df


_cached: weakref.WeakKeyDictionary[Any, _Kept] = weakref.WeakKeyDictionary()


def cached(
    spark: Any, key: Hashable, make: Callable[[], Any], weight: int, limit: int, keep: bool
) -> Any:
    """`make()`, when `keep` (the physical plan's decision: rules/physical/broadcast.keeps),
    kept in Spark's cache (`persist`: memory, spilling to local disk) from the read of it the
    setting keep_at_read names (the second, by default: a first call pays nothing for later
    ones) for later queries of this session, classic or Connect, that read the same files the
    same way:
    Spark then reads the cached rows instead of the files. What a session keeps weighs at
    most `limit` estimated bytes; the least recently used is unpersisted first, and a frame
    heavier than `limit` alone is made every time, uncached. The files are immutable and
    checked against their recorded sizes before every query (guards.check_files), so the rows
    cached are the rows the files hold."""
    bound = limit if limit > 0 else -1  # 0 turns the cache off: nothing weighs below -1
    with _lock:
        kept = _cached.get(spark)
        hit = kept.frames.get(key) if kept is not None else None
        if hit is not None and keep:
            kept.frames.move_to_end(key)
            return hit[0]
        # a lowered limit drops what it no longer allows, at once
        gone = kept.trim(bound) if kept is not None else []
    for old in gone:
        _unpersist(old)
    if not keep:
        return make()
    with _lock:
        kept = _cached.setdefault(spark, _Kept())
    if kept.reads.count(key, FRAMES * 16) < current().keep_at_read:
        return make()
    df = make().persist()
    with _lock:
        kept = _cached.setdefault(spark, _Kept())
        if key in kept.frames:  # another thread made it meanwhile: keep theirs
            gone = [df]
            df = kept.frames[key][0]
        else:
            gone = kept.put(key, df, weight, bound)
    for old in gone:
        _unpersist(old)
    return df


def _unpersist(df: Any) -> None:
    """Drop a cached frame's blocks without waiting; a query running over it reads its files
    again where blocks are gone (Spark recomputes them)."""
    try:
        df.unpersist(blocking=False)
    except Exception:  # noqa: BLE001 - a stopped session holds nothing to drop
        pass


def uncache_all() -> None:
    """Unpersist and forget every frame `cached` keeps, in every session."""
    with _lock:
        frames = [df for kept in _cached.values() for df, _ in kept.frames.values()]
        _cached.clear()
    for df in frames:
        _unpersist(df)


class Fingerprint:
    """What a plan node is made of, hashed once: a scan of 10^5 files holds 10^5 frozen file
    values, and a key is looked up several times a query."""

    __slots__ = ("value", "_hash")

    def __init__(self, value: Hashable) -> None:
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fingerprint) and (
            self.value is other.value or (self._hash == other._hash and self.value == other.value)
        )


def fingerprint(node: Plan) -> Fingerprint:
    """What a plan node is made of, as a hashable value: two nodes with one fingerprint compile
    to the same DataFrame (nodes are frozen dataclasses; a bound filter counts by its SQL)."""
    return Fingerprint(_value(node))


def _value(v: Any) -> Hashable:
    if isinstance(v, Expr):
        return ("expr", v.sql)
    if isinstance(v, Plan):
        return (type(v).__name__,) + tuple(
            _value(getattr(v, f.name)) for f in dataclasses.fields(v) if f.compare
        )
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        # the values plan nodes hold (ScanFiles, DataTask, DeleteTask, Layout, ReadField, ...)
        # are frozen dataclasses of plain values, hashable and compared field by field as they
        # are; taking them apart took seconds a query at 10^5 files
        hash(v)
        return v
    if isinstance(v, (tuple, list)):
        return tuple(_value(x) for x in v)
    if isinstance(v, frozenset):
        return frozenset(_value(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _value(x)) for k, x in v.items()))
    hash(v)  # anything else must be a plain value (a TypeError here is a bug in a node type)
    return v


def clear() -> None:
    with _lock:
        _by_session.clear()
    uncache_all()


def _sizes(kept: weakref.WeakKeyDictionary[Any, _Kept]) -> Callable[[], tuple[int, int]]:
    def size() -> tuple[int, int]:
        with _lock:
            sessions = list(kept.values())
        return sum(len(k.frames) for k in sessions), sum(k.held for k in sessions)

    return size


def _clear_built() -> None:
    with _lock:
        _by_session.clear()


caches().register(
    "built DataFrames",
    "reads and bitmap tables an earlier query built, per classic Spark session (reused)",
    "bitmap bytes",
    f"{FRAMES} frames a session, their bitmaps within the broadcast limit",
    _sizes(_by_session),
    _clear_built,
)
caches().register(
    "Spark-cached deletes",
    "equality delete keys and deleted positions persisted in Spark's cache, per session",
    "bytes (estimated)",
    "delete_cache_bytes",
    _sizes(_cached),
    uncache_all,
)
