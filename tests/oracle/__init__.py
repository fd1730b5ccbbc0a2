"""The differential harnesses: each runs as `python -m tests.oracle.<module>` in a process of
its own (Iceberg's runtime jar must be on the JVM's class path from start-up, and mor's own
tests run in a session without it)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_harness(module: str, *args: str, timeout: float) -> str:
    """`python -m tests.oracle.<module> <args>` from the project's root; fails the calling test
    with the harness's output (and the end of its stderr) unless it exits 0. Returns its
    stdout, the summary the test then checks and prints."""
    proc = subprocess.run(
        [sys.executable, "-m", f"tests.oracle.{module}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return proc.stdout


def on_jdbc_catalog(
    what: str,
    run: Callable[[Any, Any, str, str], int],
    session: Callable[[dict[str, str], str], tuple[Any, Callable[[], None] | None]] | None = None,
) -> int:
    """A harness's surroundings: a temporary folder (kept with MOR_HARNESS_KEEP, to look at
    the tables after a difference), a JDBC catalog on PostgreSQL (tests/pgcatalog.py) with its
    warehouse there, and a Spark session with Iceberg's runtime and a Hadoop catalog of its
    own beside it (`session(conf, java_wh)` instead: a session and what stops it). Returns
    `run(spark, pg, warehouse, java_wh)`, or 2 when Iceberg's runtime or PostgreSQL cannot
    run here (`what` names the harness in that line)."""
    import os
    import shutil
    import tempfile

    from tests.oracle.runtime import RuntimeUnavailable, iceberg_session
    from tests.pgcatalog import Postgres, PostgresUnavailable

    tmp = tempfile.mkdtemp(prefix=f"mor-{what.replace(' ', '-')}-")
    warehouse, java_wh = f"file://{tmp}/wh", f"file://{tmp}/java"
    try:
        with Postgres() as pg:
            os.environ.update(pg.environment(warehouse))
            stop = None
            try:
                if session is not None:
                    spark, stop = session(pg.spark_conf(warehouse), java_wh)
                else:
                    spark = iceberg_session(java_wh, small_data=True, conf=pg.spark_conf(warehouse))
            except RuntimeUnavailable as e:
                print(f"cannot run the oracle here: {e}")
                return 2
            try:
                return run(spark, pg, warehouse, java_wh)
            finally:
                if stop is not None:
                    stop()
    except PostgresUnavailable as e:
        print(f"cannot run the {what} harness here: {e}")
        return 2
    finally:
        if os.environ.get("MOR_HARNESS_KEEP"):
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
