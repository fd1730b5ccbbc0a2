"""Progress on stderr for long work (planning, Spark stages); silent when stderr is no terminal."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def enabled() -> bool:
    return sys.stderr.isatty()


def note(text: str) -> None:
    if enabled():
        sys.stderr.write(f"\r\033[K{text}")
        sys.stderr.flush()


def clear() -> None:
    if enabled():
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()


@contextmanager
def spark_stages(spark: Any, label: str) -> Iterator[None]:
    """Poll Spark's status tracker and show the running stages' task counts."""
    if not enabled():
        yield
        return
    stop = threading.Event()
    tracker = spark.sparkContext.statusTracker()
    start = time.monotonic()

    def run() -> None:
        while not stop.wait(0.5):
            parts = []
            for sid in tracker.getActiveStageIds():
                info = tracker.getStageInfo(sid)
                if info is not None:
                    parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks")
            note(f"{label} {time.monotonic() - start:.0f}s " + ("; ".join(parts) or "..."))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        clear()
