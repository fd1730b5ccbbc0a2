"""The file lists mor writes for Spark's reader (physical/scan/file_lists.py): content-addressed
and reused, the least recently used beyond `file_list_bytes` removed (never one used in the
last hour), the folder read for that at most once every TRIM_EVERY seconds (planner/cache.py),
by any process."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from mor.physical.scan import file_lists
from mor.planner import cache
from mor.planner.settings import applied

pytestmark = [pytest.mark.check]


def _entries(i: int, n: int = 3) -> list[tuple[str, int, int]]:
    return [(f"/data/t/f-{i}-{j}.parquet", 1000 + j, 7) for j in range(n)]


def _lists(base: Path) -> set[str]:
    return {p.name for p in base.iterdir() if not p.name.startswith(".")}


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_lists_are_reused_and_trimmed_at_most_once_per_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "lists"
    scans = []
    real_scandir = os.scandir

    def counting_scandir(path: object) -> object:
        if path == base:  # the trim's read (rmtree scans what it removes)
            scans.append(path)
        return real_scandir(path)

    monkeypatch.setattr(file_lists.os, "scandir", counting_scandir)
    with applied({"file_list_dir": str(base), "file_list_bytes": 1}):
        first = file_lists.write(_entries(0))
        assert file_lists.write(_entries(0)) == first  # the same files: the same list
        assert len(scans) == 1  # the first list ever written read the folder (to trim it)
        old = [file_lists.write(_entries(i)) for i in range(1, 6)]
        assert len(scans) == 1, "a new list read the folder again within TRIM_EVERY"
        assert len(_lists(base)) == 6  # over the 1-byte bound: kept until the next trim
        for name in _lists(base):  # all unused for more than MIN_AGE but two
            _age(base / name, file_lists.MIN_AGE + 60)
        young = Path(old[-1].removeprefix("file://"))
        _age(young, 10)
        _age(base / cache.TRIMMED, cache.TRIM_EVERY - 30)
        sixth = file_lists.write(_entries(6))
        assert len(scans) == 1 and len(_lists(base)) == 7  # the last trim is recent still
        _age(base / cache.TRIMMED, cache.TRIM_EVERY + 1)
        newest = file_lists.write(_entries(7))
        assert len(scans) == 2
        # the lists unused for an hour are removed (oldest first, beyond the bound); the one
        # written now, and those used in the last hour (the sixth, `young`) are kept
        assert _lists(base) == {Path(u.removeprefix("file://")).name for u in (newest, sixth)} | {
            young.name
        }
        # a list removed is written again when its files are asked for
        again = file_lists.write(_entries(0))
        assert (Path(again.removeprefix("file://")) / file_lists.LOG / "0").is_file()


def test_a_large_bound_keeps_every_list(tmp_path: Path) -> None:
    base = tmp_path / "lists"
    with applied({"file_list_dir": str(base)}):  # the default bound: 2 GiB
        for i in range(4):
            file_lists.write(_entries(i))
        for name in _lists(base):
            _age(base / name, file_lists.MIN_AGE + 60)
        _age(base / cache.TRIMMED, cache.TRIM_EVERY + 1)
        file_lists.write(_entries(9))
    assert len(_lists(base)) == 5
