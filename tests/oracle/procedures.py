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

Then expire_snapshots (files deleted, snapshots kept), remove_orphan_files, cherrypick_snapshot,
clean_expired_metadata and rewrite_manifests (`_rewrite_manifests`), each on its own twins.

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


def _read_alike(
    spark: Any, cat: Any, same: Any, label: str, t: str, twin: str, at: str = ""
) -> None:
    """The twin read (`at`: a time-travel clause) by Iceberg's reader and by mor gives the rows
    Iceberg's reader gives of the table."""
    from mor import mor_sql

    def bag(rows: Any) -> Counter:
        return Counter(tuple(r) for r in rows)

    rows = bag(spark.sql(f"SELECT * FROM {CATALOG}.{t}{at}").collect())
    same(
        f"{label} by Iceberg's reader",
        bag(spark.sql(f"SELECT * FROM {CATALOG}.{twin}{at}").collect()),
        rows,
    )
    same(
        f"{label} by mor",
        bag(mor_sql(f"SELECT * FROM {twin}{at}", catalog=cat, spark=spark).collect()),
        rows,
    )


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
            _read_alike(spark, cat, same, f"{label}: rows", t, twin)
            print(f"  {label}: {theirs!r}")
    for version in (2, 3):
        _expiry(spark, cat, version, same, seen)
    for version in (2, 3):
        _orphans(spark, cat, version, same, seen)
    for version in (2, 3):
        _cherrypick(spark, cat, version, same, seen)
    for version in (2, 3):
        _clean_metadata(spark, cat, version, same, seen)
    for version in (2, 3):
        _rewrite_manifests(spark, cat, version, same, seen)
    for d in diffs:
        print(f"DIFFERENCE {d}")
    print(f"procedures: {dict(seen)}")
    print(f"procedures: {n} comparisons, {len(diffs)} differences")
    return 1 if diffs else 0


def _on_disk(location: str) -> set[str]:
    import os

    root = location.removeprefix("file:").lstrip("/")
    root = "/" + root
    # Hadoop's local file system keeps a `.<name>.crc` beside each file it writes (and deletes
    # it with the file): not a file of the table
    return {
        os.path.join(d, f)
        for d, _, fs in os.walk(root)
        for f in fs
        if not (f.startswith(".") and f.endswith(".crc"))
    }


def _expiry(spark: Any, cat: Any, version: int, same: Any, seen: Counter) -> None:
    """expire_snapshots: mor's dry run on the twin names the files Iceberg's procedure then
    deletes from the table (they share them); mor's own run on the twin then keeps the same
    snapshots and refs, and every snapshot kept reads the same."""
    from mor.statements import StatementExecution

    t, twin = f"proc.e{version}", f"proc.e{version}_twin"
    full = f"{CATALOG}.{t}"
    spark.sql(
        f"CREATE TABLE {full} (id BIGINT, p STRING) USING iceberg PARTITIONED BY (p) "
        f"TBLPROPERTIES ('format-version' = '{version}', 'write.delete.mode' = "
        "'merge-on-read', 'write.update.mode' = 'merge-on-read', "
        "'write.merge.mode' = 'merge-on-read')"
    )
    for k in range(4):
        spark.sql(f"INSERT INTO {full} VALUES ({k * 10 + 1}, 'a'), ({k * 10 + 2}, 'b')")
        time.sleep(0.05)
    spark.sql(f"DELETE FROM {full} WHERE id = 11")
    time.sleep(0.05)
    spark.sql(f"UPDATE {full} SET p = 'c' WHERE id = 22")
    time.sleep(0.05)
    spark.sql(
        f"CALL {CATALOG}.system.rewrite_data_files(table => '{t}', options => "
        "map('min-input-files', '1', 'delete-file-threshold', '1'))"
    )
    time.sleep(0.05)
    snaps = spark.sql(
        f"SELECT snapshot_id, date_format(committed_at + INTERVAL 1 MILLISECOND, "
        f"'yyyy-MM-dd HH:mm:ss.SSS') FROM {full}.snapshots ORDER BY committed_at"
    ).collect()
    spark.sql(f"ALTER TABLE {full} CREATE TAG v2 AS OF VERSION {snaps[1][0]}")
    spark.sql(f"ALTER TABLE {full} CREATE BRANCH b AS OF VERSION {snaps[3][0]}")
    spark.sql(f"INSERT INTO {full}.branch_b VALUES (99, 'z')")
    spark.sql(f"INSERT INTO {full} VALUES (77, 'a')")
    location = cat.load_table(t).metadata_location
    spark.sql(f"CALL {CATALOG}.system.register_table('{twin}', '{location}')")
    last = spark.sql(
        f"SELECT date_format(max(committed_at) + INTERVAL 1 MILLISECOND, "
        f"'yyyy-MM-dd HH:mm:ss.SSS') FROM {full}.snapshots"
    ).first()[0]
    rounds = [
        ((), f"older_than => TIMESTAMP '{snaps[5][1]}', retain_last => 2"),
        ((), f"older_than => TIMESTAMP '{snaps[-1][1]}', retain_last => 1"),
        # the branch and the tag gone: the files before the compaction, and the delete files
        (("DROP BRANCH b", "DROP TAG v2"), f"older_than => TIMESTAMP '{last}'"),
    ]
    for prep, args in rounds:
        for change in prep:
            for name in (t, twin):
                spark.sql(f"ALTER TABLE {CATALOG}.{name} {change}")
        label = f"v{version} expire_snapshots({args})"
        table_loc = cat.load_table(t).location()
        a_before = {s.snapshot_id for s in cat.load_table(t).metadata.snapshots}
        files_before = _on_disk(table_loc)
        dry = StatementExecution(
            f"CALL {CATALOG}.system.expire_snapshots(table => '{twin}', {args})",
            catalog=cat,
            dry_run=True,
        ).run()
        predicted = {
            p.removeprefix("file:").replace("///", "/")
            for paths in dry.report["files"].values()
            for p in paths
        }
        theirs = spark.sql(
            f"CALL {CATALOG}.system.expire_snapshots(table => '{t}', {args})"
        ).collect()[0]
        deleted = files_before - _on_disk(table_loc)
        same(
            f"{label}: files deleted (mor's dry run / Iceberg's)",
            sorted(predicted),
            sorted(deleted),
        )
        a_after = {s.snapshot_id for s in cat.load_table(t).metadata.snapshots}
        same(
            f"{label}: snapshots removed",
            sorted(dry.report["removed_snapshots"]),
            sorted(a_before - a_after),
        )
        out = StatementExecution(
            f"CALL {CATALOG}.system.expire_snapshots(table => '{twin}', {args})", catalog=cat
        ).run()
        from mor.planner.expiry import KINDS

        counts = tuple(len(dry.report["files"][k]) for k in KINDS)
        same(f"{label}: output row (mor's dry run)", counts, tuple(theirs))
        a, b = cat.load_table(t).metadata, cat.load_table(twin).metadata
        same(
            f"{label}: snapshots kept",
            sorted(s.snapshot_id for s in b.snapshots),
            sorted(s.snapshot_id for s in a.snapshots),
        )
        same(f"{label}: refs", _refs(b), _refs(a))
        for snap in a.snapshots:
            at = f" VERSION AS OF {snap.snapshot_id}"
            _read_alike(spark, cat, same, f"{label}: snapshot {snap.snapshot_id}", t, twin, at)
        seen["expiries"] += 1
        print(f"  {label}: Iceberg {tuple(theirs)}, mor's dry run {counts}: {out.line}")


def _plant(root: str, rels: list[str]) -> set[str]:
    import os

    made = set()
    for rel in rels:
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(b"orphan")
        made.add(p)
    return made


def _backdate(root: str, days: float = 10.0) -> None:
    import os

    then = time.time() - days * 86400
    for d, _, fs in os.walk(root):
        for f in fs:
            os.utime(os.path.join(d, f), (then, then))


def _orphans(spark: Any, cat: Any, version: int, same: Any, seen: Counter) -> None:
    """remove_orphan_files on one table (a twin would share its folder, so the other's files
    would be orphans to it): a history by Iceberg's writer (appends, DELETE, UPDATE, MERGE,
    a compaction, a tag, a branch), snapshots expired in the metadata only (their files left on
    the store: real orphans of every kind), stray files planted (hidden folders, a young file,
    a version hint among them), every file made ten days old. mor's dry run names the files
    Iceberg's dry run names and its procedure deletes; then, on a second planting, mor's run
    deletes what Iceberg's dry run names; every snapshot kept reads the same before and after,
    by Iceberg's reader and by mor."""
    from mor import mor_sql
    from mor.statements import StatementExecution

    t = f"proc.o{version}"
    full = f"{CATALOG}.{t}"
    spark.sql(
        f"CREATE TABLE {full} (id BIGINT, p STRING) USING iceberg PARTITIONED BY (p) "
        f"TBLPROPERTIES ('format-version' = '{version}', 'write.delete.mode' = "
        "'merge-on-read', 'write.update.mode' = 'merge-on-read', "
        "'write.merge.mode' = 'merge-on-read')"
    )
    for k in range(4):
        spark.sql(f"INSERT INTO {full} VALUES ({k * 10 + 1}, 'a'), ({k * 10 + 2}, 'b')")
    spark.sql(f"DELETE FROM {full} WHERE id = 11")
    spark.sql(f"UPDATE {full} SET p = 'c' WHERE id = 22")
    spark.sql(
        f"MERGE INTO {full} t USING (SELECT 31 AS id, 'd' AS p UNION ALL SELECT 5, 'e') s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET t.p = s.p WHEN NOT MATCHED THEN INSERT *"
    )
    spark.sql(
        f"CALL {CATALOG}.system.rewrite_data_files(table => '{t}', options => "
        "map('min-input-files', '1', 'delete-file-threshold', '1'))"
    )
    snaps = [
        r[0]
        for r in spark.sql(
            f"SELECT snapshot_id FROM {full}.snapshots ORDER BY committed_at"
        ).collect()
    ]
    spark.sql(f"ALTER TABLE {full} CREATE TAG v3 AS OF VERSION {snaps[3]}")
    spark.sql(f"ALTER TABLE {full} CREATE BRANCH b AS OF VERSION {snaps[4]}")
    spark.sql(f"INSERT INTO {full}.branch_b VALUES (99, 'z')")
    # the expiry's commit alone (mor's, without its deletions: pyiceberg does not write v3
    # metadata): what these snapshots alone reached stays on the store
    from mor.writer.expiry import expire

    expire(cat, t, snapshot_ids=snaps[:3] + snaps[5:7])
    root = cat.load_table(t).location().removeprefix("file:")
    root = "/" + root.lstrip("/")

    def reads() -> dict[int, Counter]:
        out = {}
        for snap in cat.load_table(t).metadata.snapshots:
            at = f" VERSION AS OF {snap.snapshot_id}"
            rows = Counter(tuple(r) for r in spark.sql(f"SELECT * FROM {full}{at}").collect())
            mine = mor_sql(f"SELECT * FROM {t}{at}", catalog=cat, spark=spark).collect()
            same(
                f"v{version} orphans: snapshot {snap.snapshot_id} by mor",
                Counter(tuple(r) for r in mine),
                rows,
            )
            out[snap.snapshot_id] = rows
        return out

    before = reads()
    for round_, planted in enumerate(
        (
            [
                "data/stray.parquet",
                "data/p=a/stray-1.parquet",
                "metadata/stray-m0.avro",
                "metadata/version-hint.text",  # referenced by definition (Hadoop tables)
                "data/_temporary/0/part-0.parquet",  # hidden: never listed
                "data/.hidden.parquet",
                "outside/data-and-metadata.parquet",  # under the table, not in its folders
            ],
            ["data/p=b/stray-2.parquet", "metadata/snap-1-1-stray.avro"],
        )
    ):
        _plant(root, planted)
        _backdate(root)
        young = _plant(root, [f"data/young-{round_}.parquet"])  # written now: never an orphan
        label = f"v{version} remove_orphan_files round {round_ + 1}"

        def norm(p: str) -> str:
            return "/" + p.removeprefix("file:").lstrip("/")

        dry = StatementExecution(
            f"CALL {CATALOG}.system.remove_orphan_files(table => '{t}', dry_run => true)",
            catalog=cat,
        ).run()
        ours = sorted(norm(r[0]) for r in dry.rows)
        theirs_dry = sorted(
            norm(r[0])
            for r in spark.sql(
                f"CALL {CATALOG}.system.remove_orphan_files(table => '{t}', dry_run => true)"
            ).collect()
        )
        same(f"{label}: orphans named (dry runs)", ours, theirs_dry)
        on_disk = _on_disk(root)
        if round_ == 0:
            theirs = spark.sql(f"CALL {CATALOG}.system.remove_orphan_files(table => '{t}')")
            deleted = sorted(norm(r[0]) for r in theirs.collect())
            same(f"{label}: Iceberg's deleted = mor's dry run", ours, deleted)
        else:
            out = StatementExecution(
                f"CALL {CATALOG}.system.remove_orphan_files('{t}')", catalog=cat
            ).run()
            same(f"{label}: mor's rows = its dry run", sorted(norm(r[0]) for r in out.rows), ours)
        gone = sorted(on_disk - _on_disk(root))
        same(f"{label}: files gone from the store", gone, ours)
        same(f"{label}: young file kept", young <= _on_disk(root), True)
        same(f"{label}: snapshots read alike after", reads(), before)
        seen["orphan rounds"] += 1
        print(f"  {label}: {len(ours)} orphans (Iceberg's dry run {len(theirs_dry)})")


_SUMMARY_KEYS = (
    "source-snapshot-id",
    "published-wap-id",
    "replace-partitions",
    "added-data-files",
    "deleted-data-files",
    "added-records",
    "deleted-records",
    "total-data-files",
    "total-records",
    "changed-partition-count",
)


def _cherrypick(spark: Any, cat: Any, version: int, same: Any, seen: Counter) -> None:
    """cherrypick_snapshot on twins: snapshots staged by Iceberg's write-audit-publish
    (`spark.wap.id`: an append while main moved on, a dynamic INSERT OVERWRITE, an append
    whose parent is main's head), picked by Iceberg on the table and by mor on the twin, in
    order, a second pick of each refused by both: the same refusals, the same new snapshot
    (operation, source and published WAP id, counts), main read alike by Iceberg's reader
    and mor."""
    from mor.planner.errors import MorError
    from mor.statements import StatementExecution

    t, twin = f"proc.c{version}", f"proc.c{version}_twin"
    full = f"{CATALOG}.{t}"
    spark.sql(
        f"CREATE TABLE {full} (id BIGINT, p STRING) USING iceberg PARTITIONED BY (p) "
        f"TBLPROPERTIES ('format-version' = '{version}', 'write.wap.enabled' = 'true', "
        "'write.delete.mode' = 'merge-on-read')"
    )
    spark.sql(f"INSERT INTO {full} VALUES (1, 'a'), (2, 'b'), (3, 'c')")

    def staged(wap: str, sql: str, table: str = full) -> int:
        spark.conf.set("spark.wap.id", wap)
        try:
            spark.sql(sql)
        finally:
            spark.conf.unset("spark.wap.id")
        rows = spark.sql(
            f"SELECT snapshot_id FROM {table}.snapshots WHERE summary['wap.id'] = '{wap}'"
        ).collect()
        return rows[0][0]

    s1 = staged("w1", f"INSERT INTO {full} VALUES (10, 'a'), (11, 'd')")
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        s2 = staged("w2", f"INSERT OVERWRITE {full} VALUES (20, 'b')")
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    spark.sql(f"DELETE FROM {full} WHERE id = 1")  # main moves on: s1, s2 are not fast-forwards
    location = cat.load_table(t).metadata_location
    spark.sql(f"CALL {CATALOG}.system.register_table('{twin}', '{location}')")
    picks = [(s1, s1), (s2, s2), (s1, s1), (0, 0)]
    for sid_t, sid_twin in picks:
        if sid_t == 0:  # the fast-forward: staged on each table's own head, now
            sid_t, sid_twin = (
                staged(
                    f"w3{n[-4:]}", f"INSERT INTO {CATALOG}.{n} VALUES (30, 'e')", f"{CATALOG}.{n}"
                )
                for n in (t, twin)
            )
        label = f"v{version} cherrypick_snapshot({'fast-forward' if sid_t != sid_twin else sid_t})"
        try:
            theirs: Any = [
                tuple(r)
                for r in spark.sql(
                    f"CALL {CATALOG}.system.cherrypick_snapshot('{t}', {sid_t})"
                ).collect()
            ]
        except Exception as e:  # noqa: BLE001 - Iceberg's refusal, compared as one
            theirs = ("refused", str(e).splitlines()[0][:120])
        try:
            out = StatementExecution(
                f"CALL {CATALOG}.system.cherrypick_snapshot('{twin}', {sid_twin})", catalog=cat
            ).run()
            ours: Any = [tuple(r) for r in out.rows or []]
        except MorError as e:
            ours = ("refused", str(e))
        same(f"{label}: refused", isinstance(ours, tuple), isinstance(theirs, tuple))
        a, b = cat.load_table(t).metadata, cat.load_table(twin).metadata
        if not isinstance(theirs, tuple) and not isinstance(ours, tuple):
            same(f"{label}: source", ours[0][0], sid_twin)
            same(f"{label}: fast-forward", ours[0][1] == sid_twin, theirs[0][1] == sid_t)
            sa, sb = a.current_snapshot(), b.current_snapshot()
            same(f"{label}: operation", sb.summary.operation, sa.summary.operation)
            pa_, pb = sa.summary.additional_properties, sb.summary.additional_properties
            for key in _SUMMARY_KEYS:
                if key == "source-snapshot-id" and sid_t != sid_twin:
                    continue
                if key == "published-wap-id" and sid_t != sid_twin:
                    continue
                same(f"{label}: summary {key}", pb.get(key), pa_.get(key))
            seen["picked alike"] += 1
            seen["fast-forwards"] += ours[0][1] == sid_twin and theirs[0][1] == sid_t
        else:
            seen["refused by both"] += isinstance(ours, tuple) and isinstance(theirs, tuple)
        _read_alike(spark, cat, same, f"{label}: main", t, twin)
        print(f"  {label}: Iceberg {theirs!r}, mor {ours!r}")


def _clean_metadata(spark: Any, cat: Any, version: int, same: Any, seen: Counter) -> None:
    """expire_snapshots with clean_expired_metadata on twins whose schema and partition spec
    evolved (a column added, the partitioning changed twice, the data of the first spec
    rewritten away): Iceberg's procedure on the table, mor's on the twin, the same snapshots,
    specs and schemas kept, the same rows."""
    from mor.statements import StatementExecution

    t, twin = f"proc.m{version}", f"proc.m{version}_twin"
    full = f"{CATALOG}.{t}"
    spark.sql(
        f"CREATE TABLE {full} (id BIGINT, p STRING) USING iceberg PARTITIONED BY (p) "
        f"TBLPROPERTIES ('format-version' = '{version}')"
    )
    spark.sql(f"INSERT INTO {full} VALUES (1, 'a'), (2, 'b')")
    spark.sql(f"ALTER TABLE {full} ADD COLUMN s STRING")
    spark.sql(f"ALTER TABLE {full} ADD PARTITION FIELD bucket(2, id)")
    spark.sql(f"INSERT INTO {full} VALUES (3, 'a', 'x')")
    spark.sql(f"ALTER TABLE {full} DROP PARTITION FIELD p")
    spark.sql(f"INSERT INTO {full} VALUES (4, 'c', 'y')")
    # the first spec's files rewritten into the current one: no retained manifest is of it
    spark.sql(
        f"CALL {CATALOG}.system.rewrite_data_files(table => '{t}', options => "
        "map('min-input-files', '1', 'rewrite-all', 'true'))"
    )
    spark.sql(f"INSERT INTO {full} VALUES (5, 'd', 'z')")  # its list drops emptied manifests
    location = cat.load_table(t).metadata_location
    spark.sql(f"CALL {CATALOG}.system.register_table('{twin}', '{location}')")
    last = spark.sql(
        f"SELECT date_format(max(committed_at) + INTERVAL 1 MILLISECOND, "
        f"'yyyy-MM-dd HH:mm:ss.SSS') FROM {full}.snapshots"
    ).first()[0]
    args = f"older_than => TIMESTAMP '{last}', retain_last => 1, clean_expired_metadata => true"
    label = f"v{version} expire_snapshots(clean_expired_metadata)"
    spark.sql(f"CALL {CATALOG}.system.expire_snapshots(table => '{t}', {args})").collect()
    out = StatementExecution(
        f"CALL {CATALOG}.system.expire_snapshots(table => '{twin}', {args})", catalog=cat
    ).run()
    a, b = cat.load_table(t).metadata, cat.load_table(twin).metadata
    same(
        f"{label}: specs",
        [x.spec_id for x in b.partition_specs],
        [x.spec_id for x in a.partition_specs],
    )
    same(f"{label}: schemas", [x.schema_id for x in b.schemas], [x.schema_id for x in a.schemas])
    same(
        f"{label}: snapshots",
        [x.snapshot_id for x in b.snapshots],
        [x.snapshot_id for x in a.snapshots],
    )
    _read_alike(spark, cat, same, f"{label}: rows", t, twin)
    seen["metadata cleaned"] += bool(out.report["removed_specs"] or out.report["removed_schemas"])
    print(
        f"  {label}: specs {[x.spec_id for x in a.partition_specs]}, schemas "
        f"{[x.schema_id for x in a.schemas]}; mor removed specs {out.report['removed_specs']}, "
        f"schemas {out.report['removed_schemas']}"
    )


def _rewrite_manifests(spark: Any, cat: Any, version: int, same: Any, seen: Counter) -> None:
    """rewrite_manifests on twins: a history by Iceberg's writer (appends to three partitions,
    a DELETE and an UPDATE writing position deletes or deletion vectors, a MERGE, the
    partitioning changed, appends after), its manifests made small
    (`commit.manifest.target-size-bytes`) so that several are written. Iceberg's procedure
    on the table, mor's on the twin, four rounds (the current spec; `spec_id => 0`; the
    current spec with the default target; again, with nothing left to do): the same output
    row; the same live entries (status, file, snapshot id, data and file sequence numbers)
    and the same manifests (content, spec, file counts, partition summaries) read through
    Iceberg's metadata tables of both; the same summary counts and next row id; every row
    read alike, with `_row_id` and `_last_updated_sequence_number` on v3, by Iceberg's
    reader of both tables."""
    from mor.statements import StatementExecution

    t, twin = f"proc.r{version}", f"proc.r{version}_twin"
    full = f"{CATALOG}.{t}"
    spark.sql(
        f"CREATE TABLE {full} (id BIGINT, p STRING, d DATE) USING iceberg PARTITIONED BY (p) "
        f"TBLPROPERTIES ('format-version' = '{version}', 'write.delete.mode' = "
        "'merge-on-read', 'write.update.mode' = 'merge-on-read', "
        "'write.merge.mode' = 'merge-on-read')"
    )
    for k in range(6):
        spark.sql(
            f"INSERT INTO {full} VALUES ({k * 10 + 1}, 'a', DATE '2024-01-0{k + 1}'), "
            f"({k * 10 + 2}, 'b', NULL), ({k * 10 + 3}, 'c', DATE '2023-12-3{k % 2}'), "
            f"({k * 10 + 4}, NULL, NULL)"
        )
    spark.sql(f"DELETE FROM {full} WHERE id IN (1, 22)")
    spark.sql(f"UPDATE {full} SET d = DATE '2025-05-05' WHERE id = 33")
    spark.sql(
        f"MERGE INTO {full} t USING (SELECT 41 AS id UNION ALL SELECT 99) s ON t.id = s.id "
        "WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT (id, p, d) VALUES (s.id, 'b', NULL)"
    )
    spark.sql(f"ALTER TABLE {full} ADD PARTITION FIELD bucket(4, id)")
    for k in range(3):
        spark.sql(f"INSERT INTO {full} VALUES ({100 + k}, 'a', NULL), ({200 + k}, 'd', NULL)")
    sizes = spark.sql(f"SELECT sum(length) FROM {full}.manifests").first()[0]
    spark.sql(
        f"ALTER TABLE {full} SET TBLPROPERTIES ('commit.manifest.target-size-bytes' = "
        f"'{sizes // 3}')"
    )
    location = cat.load_table(t).metadata_location
    spark.sql(f"CALL {CATALOG}.system.register_table('{twin}', '{location}')")
    keys = ("manifests-created", "manifests-kept", "manifests-replaced", "total-records")
    cols = "id, p, d" + (", _row_id, _last_updated_sequence_number" if version == 3 else "")
    rounds = [
        ((), "'{t}'"),
        ((), "table => '{t}', spec_id => 0"),
        # each table's manifests are now its own writer's (their bytes differ): the default
        # target takes them both into one
        (("UNSET TBLPROPERTIES ('commit.manifest.target-size-bytes')",), "'{t}'"),
        ((), "'{t}'"),  # nothing left to do
    ]
    for prep, args in rounds:
        for change in prep:
            for name in (t, twin):
                spark.sql(f"ALTER TABLE {CATALOG}.{name} {change}")
        label = f"v{version} rewrite_manifests({args.format(t='t')})"
        label += " with the default target" if prep else ""
        theirs = [
            tuple(r)
            for r in spark.sql(
                f"CALL {CATALOG}.system.rewrite_manifests({args.format(t=t)})"
            ).collect()
        ]
        out = StatementExecution(
            f"CALL {CATALOG}.system.rewrite_manifests({args.format(t=twin)})", catalog=cat
        ).run()
        ours = [tuple(r) for r in out.rows or []]
        same(f"{label}: output", ours, theirs)

        def entries(name: str) -> list[Any]:
            return sorted(
                tuple(r)
                for r in spark.sql(
                    "SELECT status, data_file.file_path, data_file.content, snapshot_id, "
                    f"sequence_number, file_sequence_number FROM {CATALOG}.{name}.entries"
                ).collect()
            )

        def manifests(name: str) -> list[Any]:
            return sorted(
                (
                    r[0],
                    r[1],
                    r[2],
                    r[3],
                    r[4],
                    tuple(tuple(x) for x in r[5]),
                )
                for r in spark.sql(
                    "SELECT content, partition_spec_id, added_data_files_count + "
                    "added_delete_files_count, existing_data_files_count + "
                    "existing_delete_files_count, deleted_data_files_count + "
                    f"deleted_delete_files_count, partition_summaries FROM {CATALOG}.{name}"
                    ".manifests"
                ).collect()
            )

        same(f"{label}: entries", entries(twin), entries(t))
        same(f"{label}: manifests", manifests(twin), manifests(t))
        a, b = cat.load_table(t).metadata, cat.load_table(twin).metadata
        sa, sb = a.current_snapshot(), b.current_snapshot()
        same(
            f"{label}: summary",
            (sb.summary.operation.value, {k: sb.summary.get(k) for k in keys}),
            (sa.summary.operation.value, {k: sa.summary.get(k) for k in keys}),
        )
        same(f"{label}: snapshots", len(b.snapshots), len(a.snapshots))
        if version == 3:
            same(f"{label}: next row id", b.next_row_id, a.next_row_id)
        rows = Counter(tuple(r) for r in spark.sql(f"SELECT {cols} FROM {full}").collect())
        same(
            f"{label}: rows by Iceberg's reader",
            Counter(tuple(r) for r in spark.sql(f"SELECT {cols} FROM {CATALOG}.{twin}").collect()),
            rows,
        )
        _read_alike(spark, cat, same, f"{label}: rows", t, twin)
        seen["manifests rewritten alike"] += ours == theirs
        print(f"  {label}: Iceberg {theirs}, mor {out.rows}: {out.line}")


if __name__ == "__main__":
    sys.exit(main())
