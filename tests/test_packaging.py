"""mor as a user installs it: its wheel into an environment that holds its declared
dependencies and a pyspark the user already has, nothing else (no extra, no test package).
Every write command runs there: a DELETE, an UPDATE and a MERGE, through `mor_sql` and
`mor run`."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType
from mor import mor_sql
from mor.api import default_catalog
from mor.writer.tables import TableWriter

cat = default_catalog({wh!r})
schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "p", StringType()),
                NestedField(3, "v", LongType()))
spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
w = TableWriter(cat, "m.t", schema, spec)
for p, lo in (("a", 0), ("b", 10)):
    w.append(pa.table({{"id": pa.array(range(lo, lo + 5), pa.int64()), "p": [p] * 5,
                        "v": pa.array(range(5), pa.int64())}}))
for sql in ("DELETE FROM m.t WHERE v = 0",
            "UPDATE m.t SET v = v * 100, p = 'c' WHERE id IN (1, 11)",
            "MERGE INTO m.t t USING (SELECT id + 2 AS id, p, v FROM m.t WHERE id % 5 IN (2, 3)) s "
            "ON t.id = s.id WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT *"):
    print(sql.split()[0], mor_sql(sql, catalog=cat).collect()[0][0])
print(sorted(tuple(r) for r in mor_sql("SELECT id, p, v FROM m.t", catalog=cat).collect()))
"""


def _site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def test_a_minimal_environment_runs_every_write_command(tmp_path: Path) -> None:
    """The wheel, installed by pip with its declared dependencies only, next to the pyspark
    of this environment (linked in, as a user's own install, without what its extras
    bring): DELETE, UPDATE and MERGE commit, a query reads what they left, and `mor run`
    runs a DELETE; `pip check` finds every requirement met."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(tmp_path / "dist"), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("mor-*.whl")
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    python = env / "bin" / "python"
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = _site_packages(python)
    for name in ("pyspark", "py4j"):  # the user's pyspark, its one requirement with it
        (theirs / name).symlink_to(ours / name)
        for meta in ours.glob(f"{name}-*.dist-info"):
            (theirs / meta.name).symlink_to(meta)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    wh = tmp_path / "wh"
    got = subprocess.run(
        [str(python), "-c", SCRIPT.format(wh=str(wh))],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=900,
    )
    assert got.returncode == 0, got.stderr[-3000:]
    lines = got.stdout.strip().splitlines()
    assert lines[:3] == ["DELETE 2", "UPDATE 2", "MERGE 4"], got.stdout
    # v = id % 10: v = 0 deleted (ids 0, 10); 1 and 11 updated into partition c; the MERGE's
    # source ids 2, 3, 12, 13 shifted by 2: 4 and 14 matched and deleted, 5, 15 inserted
    want = [
        (1, "c", 100), (2, "a", 2), (3, "a", 3), (5, "a", 3),
        (11, "c", 100), (12, "b", 2), (13, "b", 3), (15, "b", 3),
    ]  # fmt: skip
    assert lines[3] == str(want), got.stdout
    run = subprocess.run(
        [str(env / "bin" / "mor"), "run", "--warehouse", str(wh), "-e",
         "DELETE FROM m.t WHERE p = 'c'; SELECT count(*) AS n FROM m.t"],
        capture_output=True, text=True, cwd=tmp_path, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "m.t: deleted 2 rows" in run.stdout and "| 6 |" in run.stdout, run.stdout
