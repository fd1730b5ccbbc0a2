"""Object-store requests counted per call (planner/requests.py), without a store: what a call
counts is its own, its thread pools' included, whatever else the process does meanwhile."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from mor.planner.requests import REQUESTS, count, counting, in_context

pytestmark = pytest.mark.check


def test_a_call_counts_its_own_requests_and_its_pools() -> None:
    before = REQUESTS.snapshot()
    with counting() as outer:
        count("GET")
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(in_context(lambda _: count("HEAD")), range(6)))
        with counting() as inner:  # a call inside a call: both count it
            count("LIST", 2)
        # another thread of the process, not started for this call: not this call's
        other = threading.Thread(target=lambda: count("GET", 5))
        other.start()
        other.join()
    assert outer.figures() == {"GET": 1, "HEAD": 6, "LIST": 2}
    assert inner.figures() == {"GET": 0, "HEAD": 0, "LIST": 2}
    now = REQUESTS.snapshot()
    assert {k: now[k] - before[k] for k in ("GET", "HEAD", "LIST")} == {
        "GET": 6,
        "HEAD": 6,
        "LIST": 2,
    }


def test_two_calls_at_once_count_apart() -> None:
    barrier = threading.Barrier(2)
    figures = {}

    def call(name: str, n: int) -> None:
        with counting() as mine:
            barrier.wait()
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(in_context(lambda _: count("GET")), range(n)))
            barrier.wait()
        figures[name] = mine.figures()["GET"]

    threads = [threading.Thread(target=call, args=(k, n)) for k, n in (("a", 3), ("b", 7))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert figures == {"a": 3, "b": 7}
