"""A v3 table written by Iceberg's Java writer, read by mor and by Iceberg's reader, exported
with Iceberg's answers for the other legs of the test matrix, then damaged: each fault must stop
the query with one line naming the Puffin file, never rows read around the vector.

    python -m tests.oracle.v3_faults [--export DIR]   (tests/test_oracle.py runs it with the
                                                      export to .venv/mor-matrix/v3; exit 0
                                                      when all hold)

The table: file A holds ids 1-4, file B ids 5-8; DELETE id = 1, then id = 2 (the second vector
replaces the first), then DELETE id = 6 (a vector of B); then a column `d` added with an initial
default of 7 and a row (9, 'i', NULL) written with it; an UPDATE of id 3 (a copied row keeps its
row id). Live ids: 3, 4, 5, 7, 8, 9.

A second table holds row lineage inherited across a compaction: a v2 table compacted with
`rewrite_data_files` (the new file keeps the data sequence number the compaction started from; its
file sequence number is the commit's), then upgraded to v3. Its lineage is held to the spec
computed from Iceberg's `entries` table (`_row_id` = first_row_id + `_pos`,
`_last_updated_sequence_number` = the data sequence number), not to Iceberg's reader: 1.10.2's gives
the file sequence number there (apache/iceberg#17039); 1.12.0's agrees with the spec (the run
prints how many rows it differs on).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.oracle.runtime import ICEBERG, RuntimeUnavailable, iceberg_session  # noqa: E402

LIVE = [3, 4, 5, 7, 8, 9]
# queries whose answers (Iceberg's) are exported for the other legs of the matrix
QUERIES = [
    ("SELECT * FROM {t}", None),
    ("SELECT id, v, d, _row_id, _last_updated_sequence_number FROM {t}", None),
    ("SELECT id, _pos, _row_id FROM {t}", {"position_bitmap_bytes": 0}),
    ("SELECT count(*) FROM {t}", None),
    ("SELECT d, count(*) FROM {t} GROUP BY d", None),
]


def build(spark: Any) -> None:
    spark.sql(
        "CREATE TABLE local.db.v3 (id bigint, v string) USING iceberg TBLPROPERTIES "
        "('format-version'='3', 'write.delete.mode'='merge-on-read', "
        "'write.update.mode'='merge-on-read', 'write.distribution-mode'='none')"
    )
    spark.sql("INSERT INTO local.db.v3 VALUES (1,'a'),(2,'b'),(3,'c'),(4,'d')")
    spark.sql("INSERT INTO local.db.v3 VALUES (5,'e'),(6,'f'),(7,'g'),(8,'h')")
    for i in (1, 2, 6):
        spark.sql(f"DELETE FROM local.db.v3 WHERE id = {i}")
    iceberg = spark._jvm.org.apache.iceberg
    table = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, "local.db.v3"
    )
    table.updateSchema().addColumn(
        "d", iceberg.types.Types.IntegerType.get(), "a default", iceberg.expressions.Literal.of(7)
    ).commit()
    spark.sql("INSERT INTO local.db.v3 VALUES (9, 'i', NULL)")
    spark.sql("UPDATE local.db.v3 SET v = 'C' WHERE id = 3")


def build_lineage(spark: Any) -> None:
    """v2: two appends and a position delete, compaction, one more append, upgrade to v3, then
    an append and a deletion vector."""
    spark.sql(
        "CREATE TABLE local.db.lineage (id bigint, v string) USING iceberg TBLPROPERTIES "
        "('format-version'='2', 'write.delete.mode'='merge-on-read', "
        "'write.update.mode'='merge-on-read', 'write.distribution-mode'='none')"
    )
    spark.sql("INSERT INTO local.db.lineage VALUES (1,'a'),(2,'b'),(3,'c')")
    spark.sql("INSERT INTO local.db.lineage VALUES (4,'d'),(5,'e')")
    spark.sql("DELETE FROM local.db.lineage WHERE id = 2")
    spark.sql(
        "CALL local.system.rewrite_data_files(table => 'db.lineage', "
        "options => map('rewrite-all', 'true'))"
    )
    spark.sql("INSERT INTO local.db.lineage VALUES (6,'f')")
    spark.sql("ALTER TABLE local.db.lineage SET TBLPROPERTIES ('format-version'='3')")
    spark.sql("INSERT INTO local.db.lineage VALUES (7,'g'),(8,'h')")
    spark.sql("DELETE FROM local.db.lineage WHERE id = 7")


def spec_lineage(spark: Any, table: str) -> tuple[list[tuple], int]:
    """The spec's lineage of every live row, from Iceberg's live rows (`_file`, `_pos`) and its
    `entries` table (no file of this table stores lineage), and how many rows have a data
    sequence number other than their file's (the compacted file's)."""
    files = {
        r.path: (r.seq, r.fseq, r.first_row_id)
        for r in spark.sql(
            f"SELECT data_file.file_path path, sequence_number seq, file_sequence_number fseq, "
            f"data_file.first_row_id FROM {table}.entries "
            f"WHERE status <> 2 AND data_file.content = 0"
        ).collect()
    }
    rows, moved = [], 0
    for r in spark.sql(f"SELECT id, _file, _pos FROM {table}").collect():
        seq, fseq, first = files[r._file]
        rows.append((r.id, first + r._pos, seq))
        moved += seq != fseq
    return rows, moved


def main() -> int:
    import argparse
    import pickle

    from mor import MorError, explain, metrics, mor_sql
    from tests.oracle.run import _bag

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--export", help="write the table and Iceberg's answers here")
    args = ap.parse_args()
    export = Path(args.export) if args.export else None
    if export is not None:
        shutil.rmtree(export, ignore_errors=True)
        export.mkdir(parents=True)
    warehouse = export / "warehouse" if export else Path(tempfile.mkdtemp(prefix="mor-v3-"))
    try:
        spark = iceberg_session(warehouse, small_data=True)
    except RuntimeUnavailable as e:
        print(f"v3 faults: the Iceberg runtime cannot be set up here: {e}")
        return 2
    failures: list[str] = []
    try:
        build(spark)
        table = warehouse / "db" / "v3"
        at = f"iceberg_scan('{table}')"
        dvs = spark.sql(
            "SELECT file_path, content_offset, content_size_in_bytes, record_count "
            "FROM local.db.v3.delete_files"
        ).collect()
        n_dv, dv_rows = len(dvs), sum(r.record_count for r in dvs)
        if n_dv < 2 or not all(r.file_path.endswith(".puffin") for r in dvs):
            failures.append(f"expected live deletion vectors only, the table has {dvs}")

        def ids(settings: dict | None = None) -> list[int]:
            rows = mor_sql(f"SELECT id FROM {at}", spark=spark, settings=settings).collect()
            return sorted(r.id for r in rows)

        for settings in (None, {"position_bitmap_bytes": 0}):
            if ids(settings) != LIVE:
                failures.append(f"rows with {settings}: {ids(settings)} != {LIVE}")
        iceberg = sorted(r.id for r in spark.sql("SELECT id FROM local.db.v3").collect())
        if iceberg != LIVE:
            failures.append(f"Iceberg's reader gives {iceberg}")
        (n,) = mor_sql(f"SELECT count(*) FROM {at}", spark=spark).first()
        if n != len(LIVE):
            failures.append(f"count(*) {n}")
        answers = []
        for q, settings in QUERIES:
            theirs = _bag(spark.sql(q.format(t="local.db.v3")).collect())
            ours = _bag(mor_sql(q.format(t=at), spark=spark, settings=settings).collect())
            if ours != theirs:
                failures.append(f"{q} with {settings}: mor {ours} != Iceberg {theirs}")
            answers.append((q.format(t=at), settings, theirs))

        text = explain(f"SELECT id FROM {at}", verbose=True, physical=True, spark=spark)
        for want in (
            f"deletion-vector {n_dv}",
            f"deletion vectors {n_dv} -> {n_dv}",
            f"read on the driver: {n_dv} deletion vector(s)",
        ):
            if want not in text:
                failures.append(f"EXPLAIN VERBOSE PHYSICAL lacks {want!r}:\n{text}")
        analyzed = explain(f"SELECT id FROM {at}", analyze=True, spark=spark)
        want = f"rows removed  by position deletes and deletion vectors {dv_rows}"
        if want not in analyzed or f"deletion vec  {n_dv} vectors" not in analyzed:
            failures.append(f"EXPLAIN ANALYZE lacks {want!r}:\n{analyzed}")
        m = metrics(f"SELECT id FROM {at}")
        if (m.deletion_vectors, m.dv_rows, m.pos_delete_files) != (n_dv, dv_rows, 0):
            failures.append(f"metrics: {m.deletion_vectors} vectors, {m.dv_rows} rows")

        # the faults, each on the Puffin file of file A's vector
        a = max(dvs, key=lambda r: r.record_count)
        puffin = Path(a.file_path.removeprefix("file:"))
        good = puffin.read_bytes()
        off = a.content_offset
        cases = {
            "a flipped bit in the vector": (
                good[: off + 12] + bytes([good[off + 12] ^ 1]) + good[off + 13 :],
                "CRC-32 mismatch",
            ),
            "a wrong magic": (
                good[: off + 4] + b"\x00" + good[off + 5 :],
                "is not a deletion vector's",
            ),
            "a truncated file": (good[: off + 6], "was replaced or truncated"),
            "a missing file": (None, "is missing"),
        }
        for name, (content, message) in cases.items():
            from mor.physical.deletes.bitmaps import clear_position_cache
            from mor.planner.state import caches

            clear_position_cache(caches())
            if content is None:
                puffin.unlink()
            else:
                puffin.write_bytes(content)
            try:
                got = ids()
                failures.append(f"{name}: rows {got} instead of an error")
            except MorError as e:
                line = str(e)
                if message not in line or puffin.name not in line or "\n" in line:
                    failures.append(f"{name}: error {line!r} (wanted {message!r} and the file)")
            finally:
                puffin.write_bytes(good)
        clear_position_cache(caches())
        if ids() != LIVE:
            failures.append("rows after the file was restored")
        # row lineage inherited across a compaction, held to the spec (see the module's text)
        build_lineage(spark)
        lin = f"iceberg_scan('{warehouse / 'db' / 'lineage'}')"
        want, moved = spec_lineage(spark, "local.db.lineage")
        if moved == 0:
            failures.append("the lineage table has no file whose data and file sequence differ")
        q = "SELECT id, _row_id, _last_updated_sequence_number FROM {t}"
        for settings in (None, {"position_bitmap_bytes": 0}):
            ours = _bag(mor_sql(q.format(t=lin), spark=spark, settings=settings).collect())
            if ours != _bag(want):
                failures.append(f"lineage with {settings}: mor {ours} != the spec {_bag(want)}")
        answers.append((q.format(t=lin), None, _bag(want)))
        theirs = _bag(spark.sql(q.format(t="local.db.lineage")).collect())
        print(
            f"lineage: {len(want)} live rows, {moved} in a compacted file; Iceberg {ICEBERG}'s "
            f"reader differs from the spec on {sum((theirs - _bag(want)).values())} "
            "(apache/iceberg#17039: 1.10.2's on every row of a compacted file)"
        )
        if export is not None and not failures:
            with open(export / "results.pickle", "wb") as f:
                pickle.dump({"queries": answers}, f)
    finally:
        spark.stop()
        if export is None:
            shutil.rmtree(warehouse, ignore_errors=True)
    for f in failures:
        print("FAILED " + f)
    print(f"v3 faults: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
