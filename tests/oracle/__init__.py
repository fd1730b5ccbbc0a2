"""The differential harnesses: each runs as `python -m tests.oracle.<module>` in a process of
its own (Iceberg's runtime jar must be on the JVM's class path from start-up, and mor's own
tests run in a session without it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


# Harnesses a test session starts before its first test, when a test it selects needs them (a
# fixture of that name: tests/conftest.py), so that their process runs beside the suite's own
# tests (which leave about a fifth of the two cores idle: docs/testing.md) instead of after
# them; the fixture then takes its output (`early_output`). name -> (module, arguments).
EARLY: dict[str, tuple[str, ...]] = {
    # Iceberg's writer against mor's (tests/test_oracle.py `writers`): the twin tables of
    # oracle/writes.py, then oracle/row_writes.py in the same JVM
    "writers": (
        "writes", "--cases", "ident:3,bucket:2,sorted:3", "--rows", "600",
        "--row-writes", "--seeds 2,12 --version 2,3 --statements 4",
    ),
}  # fmt: skip
_started: dict[str, tuple[subprocess.Popen, object, object]] = {}


def start_early(name: str) -> None:
    """Start EARLY[name] in the background (its output into temporary files)."""
    import atexit
    import tempfile

    module, *args = EARLY[name]
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", f"tests.oracle.{module}", *args],
        cwd=ROOT,
        stdout=out,
        stderr=err,
        text=True,
    )
    atexit.register(lambda: proc.poll() is None and proc.kill())
    _started[name] = (proc, out, err)


def early_output(name: str, timeout: float) -> str:
    """EARLY[name]'s stdout: of the process started with the session, waited for, or of a run
    started now; fails the calling test unless it exits 0, as `run_harness` does."""
    if name not in _started:
        module, *args = EARLY[name]
        return run_harness(module, *args, timeout=timeout)
    proc, out, err = _started.pop(name)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    out.seek(0), err.seek(0)
    stdout, stderr = out.read(), err.read()
    assert proc.returncode == 0, stdout + stderr[-3000:]
    return stdout
