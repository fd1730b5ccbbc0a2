"""A least-recently-used cache bounded by the total weight of what it holds (thread-safe).

Used for what is immutable once written and read again by later queries of one process; each
cache of the process is one of these, owned by planner/state.py (which says what each holds
and what its weight counts). The bound is passed with each `put`, from the settings in effect."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")

# A folder that processes share as a cache bounded on disk (the manifest cache, the file
# lists) is listed to trim it, a stat per entry; a marker file in it records when a process
# last did, so that the others skip the listing for TRIM_EVERY seconds.
TRIMMED = ".trimmed"
TRIM_EVERY = 600.0


def trimmed_lately(folder: str | os.PathLike[str]) -> bool:
    """Whether a process listed `folder` to trim it in the last TRIM_EVERY seconds."""
    try:
        return time.time() - os.stat(os.path.join(folder, TRIMMED)).st_mtime < TRIM_EVERY
    except OSError:  # never trimmed (or the marker removed)
        return False


def mark_trimmed(folder: str | os.PathLike[str]) -> None:
    """Record that this process lists `folder` to trim it now (before it does, so that
    processes writing meanwhile skip their listing); best effort."""
    marker = os.path.join(folder, TRIMMED)
    try:
        with open(marker, "a"):
            pass
        os.utime(marker)
    except OSError:
        pass


class BoundedCache(Generic[V]):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._held = 0

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            hit = self._data.get(key)
            if hit is None:
                return None
            self._data.move_to_end(key)
            return hit[0]

    def put(self, key: Hashable, value: V, weight: int, limit: int) -> None:
        """Keep `value` unless it alone weighs more than `limit`; the least recently used
        values go until the total is within `limit`."""
        with self._lock:
            if key in self._data or weight > limit:
                return
            self._data[key] = (value, weight)
            self._held += weight
            self._trim(limit)

    def count(self: BoundedCache[int], key: Hashable, limit: int) -> int:
        """Add one to the count kept for `key` (each key weighs 1, at most `limit` keys, the
        least recently counted out first) and return it: reads counted before work that pays
        only from a later read (settings resolve_at_read, keep_at_read)."""
        with self._lock:
            held = self._data.pop(key, None)
            n = (held[0] if held is not None else 0) + 1
            self._data[key] = (n, 1)
            self._held += 0 if held is not None else 1
            self._trim(limit)
            return n

    def _trim(self, limit: int) -> None:
        while self._held > limit and self._data:
            _, (_, w) = self._data.popitem(last=False)
            self._held -= w

    @property
    def held(self) -> int:
        return self._held

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._held = 0
