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
    """Show the running stages' task counts: polled from Spark's status tracker on a classic
    session, reported by the server on Spark Connect."""
    if not enabled():
        yield
        return
    from mor.physical.spark.session import is_connect

    stop = threading.Event()
    start = time.monotonic()
    stages: dict[int, tuple[int, int]] = {}  # stage id -> (completed tasks, tasks), running ones
    poll: Any = None
    handler: Any = None
    if not is_connect(spark):
        tracker = spark.sparkContext.statusTracker()

        def poll() -> None:
            stages.clear()
            for sid in tracker.getActiveStageIds():
                info = tracker.getStageInfo(sid)
                if info is not None:
                    stages[sid] = (info.numCompletedTasks, info.numTasks)

    elif hasattr(spark, "registerProgressHandler"):

        def handler(reported: Any, inflight: int, operation: Any, done: bool) -> None:
            stages.clear()
            for st in reported or ():
                if not st.done:
                    stages[st.stage_id] = (st.num_completed_tasks, st.num_tasks)

        spark.registerProgressHandler(handler)

    def run() -> None:
        while not stop.wait(0.5):
            if poll is not None:
                poll()
            parts = [f"stage {sid}: {d}/{n} tasks" for sid, (d, n) in sorted(stages.items())]
            note(f"{label} {time.monotonic() - start:.0f}s " + ("; ".join(parts) or "..."))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        if handler is not None:
            spark.removeProgressHandler(handler)
        clear()
