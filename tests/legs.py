"""The legs of the test matrix and the tiers that run them (docs/testing.md, "Where each
guarantee is held").

A leg is one pyspark and one kind of session: `3.5` (pyspark 3.5, classic, `local[2]`),
`cluster` (pyspark 3.5 on local-cluster or a standalone master and worker), `4.1` (pyspark 4.1
with Iceberg's reader as the oracle), `4.3` (the newest pyspark, classic) and `connect` (the
newest pyspark through Spark Connect). A test file names the legs beyond `3.5` that run it with
the markers `cluster`, `spark41`, `spark4` and `connect` (pyproject.toml).

Tiers: `make check` runs the tests marked `check` (the inner loop, on 3.5 only), `make test`
every leg's tests but those marked `soak`, and `make soak` the tests marked `soak` (beside its
long harness runs). `soak_in(...)` (a test) and `soak_marks(...)` (a module) mark `soak` on the
legs they name only, so that a check can leave CI on one leg while another leg still holds it
there: the Makefile selects by marker, never by test name.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

LEGS = ("3.5", "cluster", "4.1", "4.3", "connect")


def leg() -> str:
    """The leg this process runs: from the installed pyspark and `MOR_TEST_SPARK`."""
    import pyspark

    mode = os.environ.get("MOR_TEST_SPARK", "classic")
    if pyspark.__version__.startswith("3."):
        return "cluster" if mode in ("local-cluster", "standalone") else "3.5"
    if pyspark.__version__.startswith("4.1."):
        return "4.1"
    return "connect" if mode == "connect" else "4.3"


def soak_marks(*legs: str) -> list[pytest.MarkDecorator]:
    """For a module's `pytestmark`: `[pytest.mark.soak]` where this run's leg is one of
    `legs` (the tests run in `make soak` there, and in `make test` on their other legs), else
    no mark."""
    unknown = set(legs) - set(LEGS)
    if unknown:
        raise ValueError(f"soak_in: no leg {sorted(unknown)}; the legs are {', '.join(LEGS)}")
    return [pytest.mark.soak] if leg() in legs else []


def soak_in(*legs: str) -> Callable[[Any], Any]:
    """`soak_marks(*legs)` applied to one test; elsewhere the test is left as it is."""
    marks = soak_marks(*legs)

    def apply(test: Any) -> Any:
        for mark in marks:
            test = mark(test)
        return test

    return apply
