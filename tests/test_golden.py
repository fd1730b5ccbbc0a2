"""EXPLAIN golden files: tests/golden/<case>.sql beside <case>.explain.txt.

Regenerate after a deliberate plan change with `make golden` and review the diff.
Cases whose name contains `verbose` or `physical` add the rule trace or the DataFrame operations.
Queries read tests/realdata through relative paths, so the text is the same on any machine.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

# the fast tier too (`make check`: tests/legs.py)
pytestmark = [pytest.mark.check]

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
REALDATA = HERE / "realdata"
CASES = sorted(p.stem for p in GOLDEN.glob("*.sql"))


def render(case: str) -> str:
    sys.path.insert(0, str(HERE.parent))
    from mor import clear_caches, explain

    clear_caches()  # as a new process: a resolved position held from an earlier test shows

    tables = json.loads((REALDATA / "tables.json").read_text())
    path_map = {t["prefix_in_files"]: t["maps_to"] for t in tables.values()}
    sql = (GOLDEN / f"{case}.sql").read_text()
    cwd = os.getcwd()
    os.chdir(REALDATA)
    try:
        return explain(
            sql, path_map=path_map, verbose="verbose" in case, physical="physical" in case
        )
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str, realdata: dict) -> None:
    want = (GOLDEN / f"{case}.explain.txt").read_text()
    assert render(case) == want, f"EXPLAIN of {case} changed: run `make golden` and review the diff"


if __name__ == "__main__":  # `make golden`
    for c in CASES:
        (GOLDEN / f"{c}.explain.txt").write_text(render(c))
        print(f"wrote tests/golden/{c}.explain.txt")
