"""Tables as real pipelines write them (tests/oracle/pipelines.py): Flink's upsert sink and
Trino's DELETE / UPDATE / MERGE through a JDBC catalog on PostgreSQL, read by mor at every
snapshot against the changelog folded in Python, Flink's and Trino's reads and Iceberg's
Spark reader; Trino also reads the Java writer's histories. Needs the PyFlink environment and
Trino that `make dev` installs, PostgreSQL from Debian and a Java 25 JDK: when one is missing
the run exits 2 and this test fails with the reason (never a skip)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# the CI size, for the suite's time: seeds 1 and 2 are an unpartitioned v2 pipeline (position
# delete files) and a partitioned v3 one (deletion vectors), each of two checkpoints (the second
# upserts and deletes keys of the first) with a column added between them, and a partitioned
# Trino history (DELETE, UPDATE, MERGE). `make soak` runs 40 pipelines of 4-7 checkpoints, 10
# Trino histories, and Trino reading 10 Java-written histories (until 2026-11-29 this test ran
# three checkpoints and one Java history read by Trino: docs/testing.md)
ARGS = [
    *("--pipelines", "2", "--checkpoints", "2"),
    *("--trino", "1", "--statements", "6", "--java", "0", "--seed", "1"),
]


def test_flink_and_trino_pipelines_match_every_reader(postgres: object) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.oracle.pipelines", *ARGS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    summary = "\n".join(
        ln for ln in proc.stdout.splitlines() if not ln.startswith(("\t", ":: ", "Ivy", "The jars"))
    )
    assert proc.returncode == 0, summary + proc.stderr[-3000:]
    assert " 0 differences (" in summary
    print(summary)
