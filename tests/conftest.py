"""Shared fixtures: one local SparkSession per test session, the real tables in tests/realdata."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
REALDATA = ROOT / "tests" / "realdata"
# the user's own config file (~/.config/mor/config.toml) must not change what the tests read
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="mor-test-config-")
os.environ.pop("MOR_CONFIG", None)
os.environ.pop("MOR_WAREHOUSE", None)
# decoded manifests kept on disk (planner/manifest_store.py, on by default) go to a folder of
# this run's, so that the tests read through that cache as users do, never the user's own one
os.environ["MOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="mor-test-cache-")
os.environ.pop("MOR_MANIFEST_DISK_CACHE_MB", None)
# a `mor server` the user left running is never what a test's commands run on
os.environ["MOR_SERVER_DIR"] = tempfile.mkdtemp(prefix="mor-test-server-")
for _dir in ("XDG_CONFIG_HOME", "MOR_CACHE_DIR", "MOR_SERVER_DIR"):  # gone with the run
    atexit.register(shutil.rmtree, os.environ[_dir], ignore_errors=True)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One Spark session per test run, of the mode MOR_TEST_SPARK names (tests/spark_modes.py)."""
    from spark_modes import start

    session, server = start()
    yield session
    session.stop()
    if server is not None:
        server.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[object]:
    """One PostgreSQL server for the run's harnesses (tests/pgcatalog.py), started once: each
    harness process that opens `Postgres()` gets a database of its own on it, through
    `MOR_TEST_POSTGRES`. A server that cannot start fails the tests that need it."""
    from tests.pgcatalog import SHARED, Postgres

    with Postgres(share=False) as pg:
        os.environ[SHARED] = str(pg.port)
        try:
            yield pg
        finally:
            os.environ.pop(SHARED, None)


@pytest.fixture(scope="session")
def realdata() -> dict[str, dict]:
    if not (REALDATA / "tables.json").exists():  # part of the repository: never skipped
        pytest.fail(f"the real tables are missing from the repository: {REALDATA}")
    tables = json.loads((REALDATA / "tables.json").read_text())
    expected = json.loads((REALDATA / "expected_results.json").read_text())
    return {name: {**t, "expected": expected[name]} for name, t in tables.items()}


@pytest.fixture()
def catalog(tmp_path: Path) -> object:
    from mor.api import default_catalog

    return default_catalog(str(tmp_path / "wh"))


POSITION_METHODS = ("bitmap", "join-packed", "join-pairs")


@pytest.fixture(params=POSITION_METHODS)
def position_method(request: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each way of applying position deletes (rules/physical/), forced."""
    if request.param != "bitmap":
        monkeypatch.setenv("MOR_POSITION_BITMAP_BYTES", "0")  # always the join
    if request.param == "join-pairs":
        import importlib

        import mor.rules.physical.positions

        monkeypatch.setattr(mor.rules.physical.positions, "packed_shift", lambda *_: None)
        # and every per-file table broadcast and joined, as beyond a few files, not looked up
        # in map literals (rules/physical/reading.looked_up; the package's `reading` is a
        # function of that name, hence the module by its path)
        reading = importlib.import_module("mor.rules.physical.reading")
        monkeypatch.setattr(reading, "LOOKUP_FILES", 0)
    return request.param
