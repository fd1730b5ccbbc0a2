"""expire_snapshots at scale: mor's against Iceberg's procedure on the same Spark, on a history
of `--files` data files (default 100,000).

    .venv/bin/python -m bench.expiry                 # 100,000 files, one round
    .venv/bin/python -m bench.expiry --files 20000 --rounds 2
    .venv/bin/python -m bench.expiry --procedure remove_orphan_files
    .venv/bin/python -m bench.expiry --procedure rewrite_manifests

The table is tests/oracle/many_files.py's (`--files` data files of 100 rows in 100 identity
partitions, position deletes in a tenth of them, manifests of 5,000 entries: snapshot 1 the
data, 2 the deletes), registered in a JDBC catalog on PostgreSQL that Iceberg's Spark catalog
and pyiceberg share (tests/pgcatalog.py); then Iceberg's writer deletes half its partitions
(`DELETE ... WHERE p < 50`: whole files, a metadata delete, snapshot 3). Expiring every
snapshot but the head (`older_than` now, `retain_last` 1) then deletes half the data files,
their position delete files, the manifests snapshot 3 replaced and two manifest lists.

Each peer expires a table of its own, built afresh (the build is not timed): Iceberg through
`CALL lake.system.expire_snapshots(...)` in this Spark session (its JVM warm), mor through
the same CALL in mor's statement execution in this process (`mor.statements`, the road of `mor
run`): reading the metadata, the commit, the deletions. Which goes first alternates by round.
Before any time is printed each peer's table is checked: the same snapshots kept, the same
number of files left under its location, the same rows read by Iceberg's reader. Printed: the
seconds of each, mor / Iceberg, the files each deleted, and the growth of this process's
resident memory while mor ran (the paths mor holds in Python).

With `--procedure remove_orphan_files` the expiry is committed without deleting anything (the
files only expired snapshots reached stay, as pyiceberg's expiry leaves them), every file is
made four days old, and each peer's `remove_orphan_files` (its defaults: files older than three
days) lists the table's location and deletes those orphans.

With `--procedure rewrite_manifests` each peer's `rewrite_manifests` (its defaults: the current
spec, 8 MiB manifests) regroups the head's manifests (after the DELETE: the data manifests
snapshot 3 rewrote, the position delete manifest); the same output row is checked too.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository

from tests.oracle.many_files import ScaleSpec, build  # noqa: E402
from tests.pgcatalog import CATALOG  # noqa: E402


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _files_under(location: Path) -> int:
    return sum(
        1
        for _, _, fs in os.walk(location)
        for f in fs
        if not (f.startswith(".") and f.endswith(".crc"))
    )


def _one(
    spark: Any,
    cat: Any,
    local_wh: Path,
    spec: ScaleSpec,
    peer: str,
    n: int,
    profile: bool,
    procedure: str,
) -> dict:
    from mor.statements import StatementExecution

    location = local_wh / "scale" / spec.name
    shutil.rmtree(location, ignore_errors=True)  # built afresh: the last round expired it
    _, location = build(spark, local_wh, spec)
    meta = sorted((location / "metadata").glob("v*.metadata.json"))[-1]
    name = f"bench.x{n}_{peer}"
    spark.sql(f"CALL {CATALOG}.system.register_table('{name}', 'file://{meta}')")
    spark.sql(f"DELETE FROM {CATALOG}.{name} WHERE p < 50")
    time.sleep(0.01)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() + 1))
    time.sleep(1.1)
    if procedure == "remove_orphan_files":
        from mor.writer.expiry import expire

        # the expiry's commit alone (as pyiceberg's expiry leaves a table): the files only the
        # expired snapshots reached stay, orphans; every file made four days old
        expire(cat, name, older_than=int(time.time() * 1000), retain_last=1)
        then = time.time() - 4 * 86400
        for d, _, fs in os.walk(location):
            for f in fs:
                os.utime(os.path.join(d, f), (then, then))
        sql = f"CALL {CATALOG}.system.remove_orphan_files(table => '{name}')"
    elif procedure == "rewrite_manifests":
        sql = f"CALL {CATALOG}.system.rewrite_manifests(table => '{name}')"
    else:
        sql = (
            f"CALL {CATALOG}.system.expire_snapshots(table => '{name}', "
            f"older_than => TIMESTAMP '{stamp}', retain_last => 1)"
        )
    before = _files_under(location)
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    if peer == "iceberg":
        row = tuple(spark.sql(sql).collect()[-1])
    elif profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        row = tuple(prof.runcall(lambda: StatementExecution(sql, catalog=cat).run()).rows[-1])
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    else:
        row = tuple(StatementExecution(sql, catalog=cat).run().rows[-1])
    seconds = time.perf_counter() - t0
    grew = _rss_mb() - rss0
    kept = [s.snapshot_id for s in cat.load_table(name).metadata.snapshots]
    count, total = spark.sql(f"SELECT count(*), sum(id) FROM {CATALOG}.{name}").first()
    return {
        "seconds": seconds,
        "row": row,
        "deleted": before - _files_under(location),
        "left": _files_under(location) - 1,  # less the metadata file the commit wrote
        "kept": len(kept),
        "rows": (count, total),
        "rss_growth_mb": grew,
    }


def run(args: argparse.Namespace) -> int:
    from tests.oracle import on_jdbc_catalog

    def body(spark: Any, pg: Any, warehouse: str, java_wh: str) -> int:
        from pyiceberg.catalog import load_catalog

        cat = load_catalog(CATALOG, **pg.pyiceberg_properties(warehouse))
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.bench")
        local_wh = Path(java_wh.removeprefix("file://"))
        spec = ScaleSpec(files=args.files)
        spark.sql("SELECT 1").collect()  # the JVM's first job, untimed
        bad = 0
        for r in range(args.rounds):
            order = ["iceberg", "mor"] if r % 2 == 0 else ["mor", "iceberg"]
            order = [p for p in order if p in args.peers]
            got = {
                peer: _one(spark, cat, local_wh, spec, peer, r, args.profile, args.procedure)
                for peer in order
            }
            if len(got) < 2:
                for peer, g in got.items():
                    print(f"round {r + 1}: {peer} alone {g['seconds']:.2f} s, {g['deleted']} files")
                continue
            i, m = got["iceberg"], got["mor"]
            for key in ("deleted", "left", "kept", "rows"):
                if i[key] != m[key]:
                    print(f"DIFFERENCE round {r + 1} {key}: mor {m[key]} != Iceberg {i[key]}")
                    bad += 1
            if i["row"] != m["row"] and args.procedure == "rewrite_manifests":
                print(f"DIFFERENCE round {r + 1} row: mor {m['row']} != Iceberg {i['row']}")
                bad += 1
            if i["row"] != m["row"] and args.procedure == "expire_snapshots":
                print(f"note round {r + 1}: output rows mor {m['row']}, Iceberg {i['row']}")
            print(
                f"round {r + 1} {args.procedure} ({' first, '.join(order)} second): "
                f"{args.files} data files, "
                f"{m['deleted']} files deleted by each, output {m['row']}; "
                f"Iceberg {i['seconds']:.2f} s, "
                f"mor {m['seconds']:.2f} s = {m['seconds'] / i['seconds']:.2f}x; mor's "
                f"process grew {m['rss_growth_mb']:.0f} MB (peak RSS so far "
                f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)",
                flush=True,
            )
        return 1 if bad else 0

    return on_jdbc_catalog("expiry bench", body)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--peers", nargs="+", default=["iceberg", "mor"], choices=["iceberg", "mor"])
    ap.add_argument("--profile", action="store_true", help="mor's run under cProfile")
    ap.add_argument(
        "--procedure",
        choices=["expire_snapshots", "remove_orphan_files", "rewrite_manifests"],
        default="expire_snapshots",
        help="remove_orphan_files: the expired snapshots' files left as orphans, then removed; "
        "rewrite_manifests: the head's manifests regrouped",
    )
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
