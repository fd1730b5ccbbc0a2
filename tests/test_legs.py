"""The test matrix's own rules (tests/legs.py, the Makefile): which leg a process is, where a
test marked for soak runs, and a Makefile that selects tests by marker only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import legs

pytestmark = [pytest.mark.check]

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "version,mode,want",
    [
        ("3.5.9", "classic", "3.5"),
        ("3.5.9", "local-cluster", "cluster"),
        ("3.5.9", "standalone", "cluster"),
        ("4.1.4", "classic", "4.1"),
        ("4.3.0", "classic", "4.3"),
        ("4.3.0", "connect", "connect"),
    ],
)
def test_each_pyspark_and_mode_is_one_leg(
    version: str, mode: str, want: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyspark

    monkeypatch.setattr(pyspark, "__version__", version)
    monkeypatch.setenv("MOR_TEST_SPARK", mode)
    assert legs.leg() == want


def test_soak_marks_only_the_named_legs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(legs, "leg", lambda: "4.3")

    def here() -> None: ...

    def elsewhere() -> None: ...

    assert [m.name for m in legs.soak_in("4.3", "cluster")(here).pytestmark] == ["soak"]
    assert not hasattr(legs.soak_in("cluster")(elsewhere), "pytestmark")
    assert [m.name for m in legs.soak_marks("4.3")] == ["soak"] and legs.soak_marks("4.1") == []
    with pytest.raises(ValueError, match="no leg \\['4.2'\\]"):
        legs.soak_in("4.2")


def test_the_makefile_selects_tests_by_marker_only() -> None:
    """No `-k` (a list of test names) in any pytest command of the Makefile: where a test runs
    is declared by the test (docs/testing.md)."""
    makefile = (ROOT / "Makefile").read_text()
    commands = [ln for ln in makefile.splitlines() if "pytest" in ln or "PYTEST" in ln]
    assert len(commands) > 10, "no pytest commands found: the check proves nothing"
    offending = [ln.strip() for ln in commands if re.search(r"(^|\s)-k(\s|$)", ln)]
    assert not offending, offending
