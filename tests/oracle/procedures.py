"""mor's CALL of Iceberg's procedures that move a branch against Iceberg 1.12's own, on twins.

    python -m tests.oracle.procedures

In a JDBC catalog on PostgreSQL that Iceberg's Spark catalog shares (tests/pgcatalog.py), a v2
and a v3 merge-on-read table get a history from Iceberg's Java writer (appends, a DELETE and
an UPDATE writing position deletes or deletion vectors, a tag, a branch with retention settings
and a commit of its own). Each table's twin is the same metadata registered under another
name (`register_table`): the same snapshots and ids. Then the same CALLs, in order, run through
Iceberg's procedures on the table and through mor on its twin: rollback_to_snapshot (an
ancestor; then a snapshot no longer an ancestor), set_current_snapshot (by id, by a tag),
rollback_to_timestamp, fast_forward (refused, then done), by position and by name. After each:
both refuse or both answer the same row; the two tables' refs (snapshot, type, retention),
current snapshot and the snapshot log's order agree; both read the same rows through Iceberg's
reader, and the twin the same through mor.

Prints "procedures: N comparisons, M differences"; exits 1 on any difference.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any

from tests.pgcatalog import CATALOG


def main() -> int:
    from tests.oracle import on_jdbc_catalog

    return on_jdbc_catalog("procedures", _run)


def _refs(md: Any) -> dict[str, tuple[Any, ...]]:
    return {
        k: (
            r.snapshot_id,
            r.snapshot_ref_type.value,
            r.max_ref_age_ms,
            r.max_snapshot_age_ms,
            r.min_snapshots_to_keep,
        )
        for k, r in md.refs.items()
    }


def _run(spark: Any, pg: Any, warehouse: str, java_wh: str) -> int:
    from pyiceberg.catalog import load_catalog

    from mor import mor_sql
    from mor.planner.errors import MorError
    from mor.statements import StatementExecution

    cat = load_catalog(CATALOG, **pg.pyiceberg_properties(warehouse))
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.proc")
    n, diffs = 0, []
    seen: Counter = Counter()

    def same(what: str, ours: Any, theirs: Any) -> None:
        nonlocal n
        n += 1
        if ours != theirs:
            diffs.append(f"{what}: mor {ours!r} != Iceberg {theirs!r}")

    for version in (2, 3):
        t, twin = f"proc.t{version}", f"proc.t{version}_twin"
        full = f"{CATALOG}.{t}"
        spark.sql(
            f"CREATE TABLE {full} (id BIGINT, p STRING) USING iceberg PARTITIONED BY (p) "
            f"TBLPROPERTIES ('format-version' = '{version}', 'write.delete.mode' = "
            "'merge-on-read', 'write.update.mode' = 'merge-on-read')"
        )
        for k in range(3):
            spark.sql(f"INSERT INTO {full} VALUES ({k * 10 + 1}, 'a'), ({k * 10 + 2}, 'b')")
            time.sleep(0.02)
        spark.sql(f"DELETE FROM {full} WHERE id = 11")
        time.sleep(0.02)
        spark.sql(f"UPDATE {full} SET p = 'c' WHERE id = 22")
        snaps = [
            r[0]
            for r in spark.sql(
                f"SELECT snapshot_id FROM {full}.snapshots ORDER BY committed_at"
            ).collect()
        ]
        stamps = {
            r[0]: r[1]
            for r in spark.sql(
                f"SELECT snapshot_id, date_format(committed_at, 'yyyy-MM-dd HH:mm:ss.SSS') "
                f"FROM {full}.snapshots"
            ).collect()
        }
        spark.sql(f"ALTER TABLE {full} CREATE TAG v1 AS OF VERSION {snaps[0]}")
        spark.sql(
            f"ALTER TABLE {full} CREATE BRANCH b RETAIN 7 DAYS WITH SNAPSHOT RETENTION 3 SNAPSHOTS"
        )
        spark.sql(f"INSERT INTO {full}.branch_b VALUES (99, 'z')")
        location = cat.load_table(t).metadata_location
        spark.sql(f"CALL {CATALOG}.system.register_table('{twin}', '{location}')")
        head = snaps[-1]
        cases = [
            ("rollback_to_snapshot", "'{t}', " + str(snaps[2])),
            ("rollback_to_snapshot", "table => '{t}', snapshot_id => " + str(snaps[4])),
            ("set_current_snapshot", "table => '{t}', snapshot_id => " + str(snaps[4])),
            ("rollback_to_timestamp", "'{t}', TIMESTAMP '" + stamps[snaps[3]] + "'"),
            ("set_current_snapshot", "table => '{t}', ref => 'v1'"),
            ("fast_forward", "'{t}', 'b', 'main'"),
            ("set_current_snapshot", "'{t}', " + str(head)),
            ("fast_forward", "table => '{t}', branch => 'main', to => 'b'"),
            ("fast_forward", "'{t}', 'main', 'b'"),
            ("rollback_to_snapshot", "'{t}', 12345"),
        ]
        for proc, args in cases:
            label = f"v{version} {proc}({args.format(t='t')})"
            try:
                theirs: Any = [
                    tuple(r)
                    for r in spark.sql(
                        f"CALL {CATALOG}.system.{proc}({args.format(t=t)})"
                    ).collect()
                ]
            except Exception as e:  # noqa: BLE001 - Iceberg's refusal, compared as one
                theirs = ("refused", type(e).__name__)
            try:
                out = StatementExecution(
                    f"CALL {CATALOG}.system.{proc}({args.format(t=twin)})", catalog=cat
                ).run()
                ours: Any = [tuple(r) for r in out.rows or []]
            except MorError as e:
                ours = ("refused", type(e).__name__)
                print(f"  {label}: mor refused: {e}")
            if isinstance(theirs, tuple):
                same(f"{label}: refused", isinstance(ours, tuple), True)
                seen["refused by both"] += isinstance(ours, tuple)
            else:
                same(f"{label}: output", ours, theirs)
                seen["answered alike"] += ours == theirs
            a, b = cat.load_table(t).metadata, cat.load_table(twin).metadata
            same(f"{label}: refs", _refs(b), _refs(a))
            same(f"{label}: current", b.current_snapshot_id, a.current_snapshot_id)
            same(
                f"{label}: snapshot log",
                [e.snapshot_id for e in b.snapshot_log],
                [e.snapshot_id for e in a.snapshot_log],
            )
            rows = Counter(tuple(r) for r in spark.sql(f"SELECT * FROM {full}").collect())
            same(
                f"{label}: rows by Iceberg's reader",
                Counter(tuple(r) for r in spark.sql(f"SELECT * FROM {CATALOG}.{twin}").collect()),
                rows,
            )
            mine = mor_sql(f"SELECT * FROM {twin}", catalog=cat, spark=spark).collect()
            same(f"{label}: rows by mor", Counter(tuple(r) for r in mine), rows)
            print(f"  {label}: {theirs!r}")
    for d in diffs:
        print(f"DIFFERENCE {d}")
    print(f"procedures: {dict(seen)}")
    print(f"procedures: {n} comparisons, {len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
