"""The Python Spark's tasks run mor's code in (the executors' Python workers): checked once
per session, before the first job whose tasks run Python (a write's files, compaction's,
Iceberg's bucket transform), so that a session whose workers lack what those tasks import
gets one line naming the interpreter and what it lacks, not Spark's stack trace of a
failed task.

- A classic session in local mode runs its workers on this machine with `pythonExec`
  (PYSPARK_PYTHON when the context started, else `python3` on the PATH): this process's
  own interpreter needs no check; any other is asked directly (a subprocess, no Spark task).
- A cluster's executors, and a Spark Connect server's, are asked by one task of one row that
  imports what mor's tasks import and returns what failed (nothing raised in the task).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

from mor.planner.errors import UnsupportedError

# what the tasks of physical/tasks and physical/udfs import on an executor (mor itself is
# shipped by value, physical/tasks/__init__.by_value)
NEEDED = ("pyarrow", "pyarrow.parquet", "pyarrow.compute", "pandas")

_CHECKED: set[Any] = set()  # the sessions (their contexts or Connect session ids) found ready

_PROBE = (
    "import importlib, sys\n"
    "bad = []\n"
    "for m in {needed!r}:\n"
    "    try:\n"
    "        importlib.import_module(m)\n"
    "    except Exception:\n"
    "        bad.append(m)\n"
    "print('%d.%d' % sys.version_info[:2], ','.join(bad))\n"
)


def check_python_workers(spark: Any, what: str, needed: tuple[str, ...] = NEEDED) -> None:
    """Raise one line (UnsupportedError) when the Python `spark`'s tasks run in cannot run
    mor's tasks (`what`: the job, as the line names it), which import `needed`; once per
    session."""
    from mor.physical.spark.session import is_connect

    connect = is_connect(spark)
    key = (spark.session_id if connect else spark.sparkContext.applicationId, needed)
    if key in _CHECKED:
        return
    if connect:
        where = "the Spark Connect server's Python workers"
        problem = _asked_by_a_task(spark, where, needed)
    else:
        sc = spark.sparkContext
        exe = getattr(sc, "pythonExec", None) or "python3"
        if sc.master.startswith("local"):
            problem = _asked_directly(exe, needed)
        else:
            problem = _asked_by_a_task(spark, f"the executors' Python ({exe})", needed)
    if problem:
        raise UnsupportedError(f"{what}: {problem}")
    _CHECKED.add(key)


def _asked_directly(exe: str, needed: tuple[str, ...]) -> str | None:
    """A local worker's interpreter `exe`: None when it can run mor's tasks, else what it
    lacks, in words."""
    found = exe if os.path.isabs(exe) else shutil.which(exe)
    if found is not None and os.path.abspath(found) == os.path.abspath(sys.executable):
        return None  # this process's own interpreter
    fix = (
        f"set PYSPARK_PYTHON={sys.executable} before the session starts (this process's "
        "interpreter), or install what it lacks there"
    )
    if found is None:
        return f"Spark's Python workers run {exe!r}, which is not on the PATH: {fix}"
    try:
        done = subprocess.run(
            [found, "-c", _PROBE.format(needed=needed)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"Spark's Python workers run {found}, which did not start ({e}): {fix}"
    if done.returncode != 0 or not done.stdout.strip():
        return f"Spark's Python workers run {found}, which did not start: {fix}"
    version, _, missing = done.stdout.strip().partition(" ")
    return _verdict(found, version, missing, fix)


def _verdict(where: str, version: str, missing: str, fix: str) -> str | None:
    mine = "%d.%d" % sys.version_info[:2]
    if version != mine:
        return (
            f"Spark's Python workers run {where}, Python {version}, and this process runs "
            f"Python {mine} (pyspark needs the same): {fix}"
        )
    if missing:
        return (
            f"Spark's Python workers run {where}, which lacks {missing.replace(',', ', ')} "
            f"(mor's tasks import them): {fix}"
        )
    return None


def _asked_by_a_task(spark: Any, where: str, needed: tuple[str, ...]) -> str | None:
    """One task of one row reports its interpreter's version and what it cannot import."""
    import pyspark.sql.functions as F

    probe = _task_probe(needed)
    fix = (
        f"install {', '.join(sorted({m.split('.')[0] for m in needed}))} in the executors' "
        "Python (or point spark.pyspark.python at an environment that has them) and start "
        "the session again"
    )
    try:
        row = spark.range(1, numPartitions=1).select(probe(F.col("id")).alias("r")).first()
    except Exception as e:  # noqa: BLE001 - the worker did not run the probe at all
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"{where} could not run a Python task ({first[:300]}): {fix}"
    version, _, missing = (row["r"] or "").partition(" ")
    return _verdict(where, version, missing, fix)


def _task_probe(needed: tuple[str, ...]) -> Any:
    """A plain Python UDF (no pyarrow needed to run it) that imports `needed` and returns
    "<major.minor> <what failed, comma-separated>"."""
    from pyspark.sql.functions import udf

    def probe(_: Any) -> str:
        import importlib
        import sys as _sys

        bad = []
        for m in needed:
            try:
                importlib.import_module(m)
            except Exception:  # noqa: BLE001 - any failure to import is a lack
                bad.append(m)
        return "%d.%d %s" % (_sys.version_info[0], _sys.version_info[1], ",".join(bad))

    # no type hints for Spark to read: from `Any` pyspark 4's Connect client cannot infer an
    # evaluation type and warns on the user's stderr (a plain Python UDF is what is meant)
    probe.__annotations__ = {}
    return udf(probe, "string")
