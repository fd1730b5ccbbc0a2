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

