"""The real tables of tests/realdata read by Iceberg's own Spark reader and by mor.

The tables record the paths their writers used (`prefix_in_files` in tables.json): absolute
`/tmp/iceberg-test-tables/v2/<table>` for the Dremio ones, relative `data/persistent/...` for
the DuckDB ones. Iceberg's reader cannot map paths, so the files are put where those paths
point: a symbolic link at each absolute prefix (made here, removed after; one left by a run
from another clone is replaced, anything else at that path is an error), and the relative ones
under a temporary folder that is the JVM's working directory. Iceberg reads each table by its
metadata file (a static table), every snapshot by id; mor reads it through its path map. Each
readable snapshot must give the same rows (all columns, as multisets) from both, and the
expected row count; a snapshot whose manifest list is missing must be refused by both. Two
hand-written tables carry a snapshot id beyond a long (9876543210123456789; the spec's type is
long), which Iceberg's reader refuses to parse: there mor is held to the expected rows alone,
and Iceberg's refusal is checked and printed.

Prints `real tables: N snapshots, M queries, K differences`; exit 1 on any difference, 2 when
the Iceberg runtime cannot be set up (the reason printed).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.oracle.runtime import RuntimeUnavailable, iceberg_session  # noqa: E402

REALDATA = ROOT / "tests" / "realdata"
LONG = 2**63 - 1


def _bag(rows: list[Any]) -> Counter:
    return Counter(tuple(str(v) for v in r) for r in rows)


def _left_by_a_run(target: Path, maps_to: str) -> bool:
    """A link this script made in another checkout (or a run killed before its clean-up):
    it points at `.../tests/realdata/<maps_to>` (of any clone), or at nothing any more."""
    dest = Path(os.readlink(target))
    return not target.exists() or dest.parts[-len(Path(maps_to).parts) - 2 :] == (
        "tests",
        "realdata",
        *Path(maps_to).parts,
    )


def place(tables: dict[str, dict], work: Path) -> list[tuple[Path, Path]]:
    """Make every recorded prefix reach the table's files; returns the links to remove.

    A link left at an absolute prefix by a run of this script from another clone (or by a run
    killed before its clean-up) is replaced: the files it reaches are the same table. Anything
    else at that path (a directory, a link elsewhere) is never touched: that is an error."""
    made = []
    for t in tables.values():
        prefix, source = t["prefix_in_files"], REALDATA / t["maps_to"]
        target = Path(prefix) if os.path.isabs(prefix) else work / prefix
        if target.is_symlink() and target.resolve() == source.resolve():
            continue
        if target.is_symlink() and _left_by_a_run(target, t["maps_to"]):
            fresh = target.with_name(f".{target.name}.{os.getpid()}")
            fresh.symlink_to(source, target_is_directory=True)
            os.replace(fresh, target)  # atomic: a concurrent reader sees one link or the other
        elif target.exists() or target.is_symlink():
            raise RuntimeError(f"{target} exists and is not a link to {source}: remove it")
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source, target_is_directory=True)
        if os.path.isabs(prefix):
            made.append((target, source))
    return made


def compare(spark: Any) -> tuple[int, int, list[str]]:
    from mor import mor_sql
    from mor.planner.errors import MetadataError

    tables = json.loads((REALDATA / "tables.json").read_text())
    expected = json.loads((REALDATA / "expected_results.json").read_text())
    diffs: list[str] = []
    snapshots = queries = 0
    for name, t in tables.items():
        meta = str(REALDATA / t["metadata"])
        pm = {t["prefix_in_files"]: str(REALDATA / t["maps_to"])}
        beyond = [s["snapshot_id"] for s in expected[name]["snapshots"] if s["snapshot_id"] > LONG]
        for snap in expected[name]["snapshots"]:
            sid = snap["snapshot_id"]
            snapshots += 1
            where = f"{name} @ {sid}"
            try:
                theirs = (
                    spark.read.format("iceberg").option("versionAsOf", sid).load(meta).collect()
                )
            except Exception as e:  # noqa: BLE001 - a refusal is compared with mor's below
                theirs = None
                refusal = str(e).strip().splitlines()[0][:200]
            try:
                ours = mor_sql(
                    f"SELECT * FROM iceberg_scan('{meta}') VERSION AS OF {sid}",
                    path_map=pm,
                    spark=spark,
                ).collect()
            except MetadataError as e:
                ours = None
                mine = str(e)
            queries += 2
            if "unreadable" in snap:
                if theirs is not None or ours is not None:
                    diffs.append(
                        f"{where}: a snapshot whose manifest list is missing was read "
                        f"(Iceberg: {theirs is not None}, mor: {ours is not None})"
                    )
                continue
            if beyond:  # Iceberg's reader cannot parse the table: the expected rows are the truth
                if theirs is not None:
                    diffs.append(f"{where}: Iceberg read a table with snapshot id {beyond[0]}")
                if ours is None:
                    diffs.append(f"{where}: mor failed: {mine}")
                elif _bag(ours) != Counter(tuple(r) for r in snap["rows_by_field_id"]):
                    diffs.append(f"{where}: mor's {len(ours)} rows are not the expected ones")
                print(f"  {where}: Iceberg's reader refuses ({refusal[:90]}); mor as expected")
                continue
            if theirs is None:
                diffs.append(f"{where}: Iceberg's reader failed: {refusal}")
                continue
            if ours is None:
                diffs.append(f"{where}: mor failed: {mine}")
                continue
            if _bag(ours) != _bag(theirs):
                a, b = _bag(ours), _bag(theirs)
                diffs.append(
                    f"{where}: mor {len(ours)} rows, Iceberg {len(theirs)}; missing from mor "
                    f"{list((b - a).elements())[:3]}, extra {list((a - b).elements())[:3]}"
                )
            if len(theirs) != snap["row_count"]:
                diffs.append(f"{where}: Iceberg {len(theirs)} rows, expected {snap['row_count']}")
    return snapshots, queries, diffs


def main() -> int:
    started = time.monotonic()
    tables = json.loads((REALDATA / "tables.json").read_text())
    work = Path(tempfile.mkdtemp(prefix="mor-realdata-"))
    links: list[tuple[Path, Path]] = []
    here = os.getcwd()
    try:
        links = place(tables, work)
        os.chdir(work)  # the JVM starts here: relative recorded paths resolve under it
        try:
            spark = iceberg_session(work / "wh", small_data=True)
        except RuntimeUnavailable as e:
            print(f"real tables: the Iceberg runtime cannot be set up here: {e}")
            return 2
        finally:
            os.chdir(here)
        import pyspark

        snapshots, queries, diffs = compare(spark)
        spark.stop()
    finally:
        for link, source in links:  # only links still ours: another run may have replaced one
            if link.is_symlink() and Path(os.readlink(link)) == source:
                link.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"real tables: {len(tables)} tables, {snapshots} snapshots, {queries} queries "
        f"(Iceberg's reader on pyspark {pyspark.__version__} and mor), {len(diffs)} differences, "
        f"{time.monotonic() - started:.0f}s"
    )
    for d in diffs:
        print("DIFFERENCE " + d)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
