"""DELETE, UPDATE and MERGE by mor against the same statements by Iceberg's own Spark writer.

    .venv/bin/python -m tests.oracle.row_writes --seeds 1,2,3 --version 2,3,2->3 --statements 6

Iceberg's Java writer makes random histories (tests/oracle/histories.py: equality deletes
through RowDelta, Spark's DELETE/UPDATE/MERGE, compactions, schema and partition changes,
partition-scoped position delete files, v2, v3 and v2 upgraded to v3). Each history's head is
registered twice in a JDBC catalog on PostgreSQL (tests/pgcatalog.py) that Iceberg's Spark
catalog and pyiceberg's SqlCatalog share: `<h>_mor` and `<h>_ice`, one table's files and
metadata, two branches of its life from there. Then random DELETE, UPDATE and MERGE statements
(the histories' own conditions, NULLs included, keys scattered over the files; UPDATEs of a
column and UPDATEs moving rows to other partitions, identity and bucket; MERGEs upserting the
table's own rows with shifted keys, from a query over the table, some deleting by a condition,
some rows no source row matches, NULL keys matching nothing) run on both: through mor
(`mor.row_writes.run_row_write`, pyiceberg's catalog, no Iceberg class involved) on `_mor`, through
Iceberg's Spark SQL statement (merge-on-read mode) on `_ice`. After each:

- Iceberg's reader reads both tables the same (on v3 with each row's `_row_id` and
  `_last_updated_sequence_number`, the latter as "after the registration" for rows written
  since: Iceberg's writer commits a DELETE that matches nothing, mor does not, so the two
  tables' later sequence numbers differ); mor reads `_mor` the same; pyiceberg too where it can
  (v2, no equality delete);
- mor's count of deleted rows is what left Iceberg's copy (a MERGE's: deleted less inserted);
- on v3, each updated row keeps its `_row_id` as Iceberg's writer keeps it (ids assigned
  since the registration, to inserted rows, depend on each writer's file layout: "new");
- Iceberg's metadata tables parse mor's snapshot (`snapshots`: its operation, `entries`,
  `position_deletes`: Iceberg reads mor's delete files and vectors);
- a Java commit lands between mor's read and its commit, on `_mor`, for every UPDATE of a
  range of keys (an INSERT of a row beyond it: rebased over, as its metrics show no row can
  match), every other MERGE (such an INSERT: stopped under serializable isolation, as its
  conflict filter is the whole table, as Iceberg's is) and every other DELETE (a DELETE of the
  statement's own rows: stopped, its files having new deletes); the copy gets the Java
  commit, then Iceberg's statement only when mor's committed;
- every third statement, Iceberg's writer commits the next DELETE on top of mor's snapshot
  (on both tables), and both read the same again.

Prints "row writes: N comparisons, M differences"; exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from typing import Any

from tests.helpers import landing
from tests.oracle.pipelines import _bag, _diff
from tests.pgcatalog import CATALOG


def main(argv: list[str] | None = None) -> int:
    args, seeds, versions = parse(argv)

    from tests.oracle import on_jdbc_catalog

    return on_jdbc_catalog(
        "row-writes",
        lambda spark, pg, warehouse, java_wh: _run(
            spark, pg, warehouse, java_wh, seeds, versions, args
        ),
    )


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[int], list[str | None]]:
    """The harness's arguments, its seeds and each seed's format version (None: by seed);
    tests/oracle/writes.py runs it in its own JVM with `--row-writes`."""
    ap = argparse.ArgumentParser(
        prog="tests.oracle.row_writes", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--steps", type=int, default=8, help="Java steps of each history")
    ap.add_argument(
        "--types",
        default="2,3",
        help="format versions of the column-types table (UPDATEs of struct fields, lists, "
        "maps, uuid and fixed columns); '' for none",
    )
    ap.add_argument(
        "--statements",
        type=int,
        default=6,
        help="statements per history (DELETE, UPDATE, UPDATE moving rows, MERGE in turn)",
    )
    ap.add_argument(
        "--version",
        default="any",
        help="format version of the histories: 2, 3, 2->3 or 'any' (by seed); or one per seed",
    )
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    versions = args.version.split(",")
    if len(versions) == 1:
        versions *= len(seeds)
    if len(versions) != len(seeds):
        ap.error(f"--version: {len(versions)} versions for {len(seeds)} seeds")
    return args, seeds, [None if v == "any" else v for v in versions]


def _run(
    spark: Any,
    pg: Any,
    warehouse: str,
    java_wh: str,
    seeds: list[int],
    versions: list[str | None],
    args: argparse.Namespace,
) -> int:
    from pyiceberg.catalog import load_catalog

    from mor import mor_sql
    from mor.row_writes import run_row_write
    from mor.writer.conflicts import ConflictError
    from tests.oracle.histories import Writer

    cat = load_catalog(CATALOG, **pg.pyiceberg_properties(warehouse))
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.rw")
    n, diffs, lines = 0, [], []
    counts: Counter = Counter()
    started = time.monotonic()

    def same(what: str, got: Counter, want: Counter) -> None:
        nonlocal n
        n += 1
        if got != want:
            diffs.append(f"{what}: {_diff(got, want)}")

    for seed, version in zip(seeds, versions):
        w = Writer(spark, java_wh, seed, version=version)
        h = w.run(args.steps)
        if h.coverage["drop equality column"]:
            # Iceberg's writer cannot plan a DELETE after it (tests/oracle/histories.py)
            counts["histories skipped: an equality column dropped"] += 1
            continue
        meta = w.table().operations().current().metadataFileLocation()
        ours, theirs = f"rw.{h.name}_mor", f"rw.{h.name}_ice"
        for name in (ours, theirs):
            call = f"table => '{name}', metadata_file => '{meta}'"
            spark.sql(f"CALL {CATALOG}.system.register_table({call})")
        j_ours, j_theirs = f"{CATALOG}.{ours}", f"{CATALOG}.{theirs}"
        registered = cat.load_table(ours).metadata
        v3 = registered.format_version == 3
        # a row's lineage: its id, and the sequence number it was last updated at when that is
        # before the registration (the two tables' later sequence numbers differ with their
        # commits: Iceberg commits a DELETE that matches nothing, mor does not)
        # a row id assigned since (a MERGE's inserted rows: by their places in the two
        # writers' files) as "new"
        lineage = (
            f", CASE WHEN _row_id >= {registered.next_row_id or 0} THEN -1 ELSE _row_id END, "
            f"CASE WHEN _last_updated_sequence_number > {registered.last_sequence_number} "
            "THEN -1 ELSE _last_updated_sequence_number END"
            if v3
            else ""
        )
        fields = spark.table(j_ours).schema.fields
        # a v3 column with a default (`d`): an INSERT that does not name it writes its
        # write-default, as the spec asks, mor on every Spark and Iceberg's writer on 4.x; on
        # Spark 3.5 Iceberg's writer writes NULL (Spark 3.5 does not see Iceberg's defaults),
        # so there the MERGE names it with NULL
        pinned = spark.version.startswith("3.") and any(f.name == "d" for f in fields)
        named, nulled = (", d", ", CAST(NULL AS INT)") if pinned else ("", "")
        key = next((f.name for f in fields if f.dataType.simpleString() == "bigint"), "id")

        def iceberg(table: str) -> Counter:
            spark.sql(f"REFRESH TABLE {table}")
            return _bag(spark.sql(f"SELECT *{lineage} FROM {table}").collect())

        def count(table: str) -> int:
            spark.sql(f"REFRESH TABLE {table}")
            return spark.sql(f"SELECT count(*) FROM {table}").first()[0]

        same(f"seed {seed}: the two registrations", iceberg(j_ours), iceberg(j_theirs))
        deleted = 0
        for i in range(args.statements):
            if i % 4 == 3:  # a MERGE: its source a query over the table itself
                pred = f"{key} % 3 = {i % 3}"
            elif i % 8 == 0:  # keys of many files: a Java DELETE of them first stops it
                pred = f"{key} % 2 = 0"
            elif i % 4 == 1:  # a range of keys: a Java INSERT of a key beyond it is rebased over
                pred = f"{key} < {w.rng.randint(5, 40)}"
            elif i % 6 == 2:  # keys scattered over the files
                pred = f"{key} % {w.rng.randint(2, 4)} = {w.rng.randint(0, 1)}"
            else:  # the histories' own conditions (NULLs, strings, doubles, renamed columns)
                pred = w._pred()
            java_pred = pred.replace(f"FROM {ours} ", f"FROM {j_theirs} ")
            # DELETE, UPDATE of a column, UPDATE moving rows to other partitions (identity
            # on p, bucket on id) and keys, MERGE (an upsert of the table's own rows, their
            # keys shifted: some matched, some not, NULL keys never; every other one deleting
            # rows no source row matches)
            kind = ("delete", "update", "move", "merge")[i % 4]
            shift = w.rng.choice([0, 0, 3, 1000])
            by_source = (
                " WHEN NOT MATCHED BY SOURCE AND t.amt > 40 THEN DELETE" if i % 8 == 7 else ""
            )
            template = {
                "delete": "DELETE FROM <t> WHERE <p>",
                "update": "UPDATE <t> SET amt = amt + 1000 WHERE <p>",
                "move": f"UPDATE <t> SET p = concat(p, 'x'), {key} = {key} + 100000 WHERE <p>",
                "merge": (
                    f"MERGE INTO <t> t USING (SELECT {key} + {shift} AS {key}, max(amt) AS amt, "
                    f"max(p) AS p FROM {ours} WHERE <p> GROUP BY {key}) s "
                    f"ON t.{key} = s.{key} "
                    f"WHEN MATCHED AND t.{key} % 4 = 1 THEN DELETE "
                    "WHEN MATCHED THEN UPDATE SET amt = s.amt + 1, p = s.p "
                    f"WHEN NOT MATCHED THEN INSERT ({key}, amt, p{named}) "
                    f"VALUES (s.{key}, s.amt, s.p{nulled})"
                    f"{by_source}"
                ),
            }[kind]
            mine = template.replace("<t>", ours).replace("<p>", pred)
            theirs_sql = (
                template.replace("<t>", j_theirs)
                .replace(f"FROM {ours} ", f"FROM {j_theirs} ")
                .replace("<p>", java_pred)
            )
            landed: list[str] = []

            def land(attempt: int, i: int = i) -> None:
                if attempt != 1 or i % 8 not in (0, 1, 5, 7):  # every other MERGE runs alone
                    return
                if i % 4 in (1, 3):  # a row beyond the condition's range (NULLs but its key)
                    # (a MERGE's: outside its source, which reads the table at mor's read,
                    # and Iceberg's copy after the landed commit; no key shifted reaches it;
                    # its conflict filter is the whole table, as Iceberg's: stopped under
                    # serializable isolation)
                    far = 10**6 + i if i % 4 == 1 else 3 * 10**6 + (i % 3 + 1) % 3
                    values = ", ".join(
                        f"{far}" if f.name == key else f"CAST(NULL AS {f.dataType.simpleString()})"
                        for f in fields
                    )
                    landed.append(f"INSERT INTO <t> VALUES ({values})")
                else:  # the statement's own rows deleted first: its files get new deletes
                    landed.append(f"DELETE FROM <t> WHERE {pred}")
                spark.sql(_on(landed[-1], ours, j_ours))

            before = count(j_theirs)
            stopped = False
            try:
                with landing(land):
                    report = run_row_write(mine, catalog=cat, spark=spark)
            except ConflictError as e:
                stopped = True
                counts["stopped by a Java commit landing meanwhile"] += 1
                lines.append(f"  seed {seed} statement {i}: stopped: {str(e)[:120]}")
            for statement in landed:
                spark.sql(_on(statement, ours, j_theirs))
                counts[f"a Java {statement.split()[0]} landed meanwhile"] += 1
            if not stopped:
                mid = count(j_theirs)
                spark.sql(theirs_sql)
                gone = mid - count(j_theirs)
                n += 1
                if kind == "delete" and report.rows != gone:
                    diffs.append(
                        f"seed {seed} `{pred}`: mor deleted {report.rows} rows, Iceberg {gone}"
                    )
                if kind == "merge" and report.deleted - report.inserted != gone:
                    diffs.append(
                        f"seed {seed} `{mine}`: mor deleted {report.deleted} rows and inserted "
                        f"{report.inserted}, Iceberg's count fell by {gone}"
                    )
                if kind in ("update", "move") and gone:
                    diffs.append(f"seed {seed} `{mine}`: Iceberg's UPDATE changed the count")
                deleted += report.rows
                counts[f"{kind} statements"] += 1
                if kind == "merge":
                    counts["MERGE rows updated"] += report.updated
                    counts["MERGE rows deleted"] += report.deleted
                    counts["MERGE rows inserted"] += report.inserted
                counts[
                    "statements committed" if report.snapshot else "statements matching nothing"
                ] += 1
                if landed and report.snapshot:
                    counts["rebased over a Java commit"] += 1
                if report.snapshot is not None:
                    ops = spark.sql(
                        f"SELECT operation FROM {j_ours}.snapshots ORDER BY committed_at"
                    ).collect()
                    n += 1
                    # as Iceberg's RowDelta names it: deletes and new rows, or one of them
                    deletes = report.data_files > 0
                    adds = kind in ("update", "move") or report.updated or report.inserted
                    want_op = "overwrite" if deletes and adds else "delete" if deletes else "append"
                    if ops[-1][0] != want_op:
                        diffs.append(f"seed {seed}: Iceberg reads mor's {want_op} as {ops[-1][0]}")
                    spark.sql(f"SELECT * FROM {j_ours}.entries").collect()
                    spark.sql(f"SELECT * FROM {j_ours}.position_deletes").collect()
            del before
            want = iceberg(j_theirs)
            same(
                f"seed {seed} `{pred}`: Iceberg's reader, mor's table vs Iceberg's",
                iceberg(j_ours),
                want,
            )
            got = _bag(mor_sql(f"SELECT * FROM {ours}", catalog=cat, spark=spark).collect())
            plain = _bag(spark.sql(f"SELECT * FROM {j_theirs}").collect())
            same(f"seed {seed} `{pred}`: mor's read of its table", got, plain)
            table = cat.load_table(ours)
            eq = spark.sql(f"SELECT count(*) FROM {j_ours}.delete_files WHERE content = 2").first()[
                0
            ]
            if not v3 and eq == 0:
                py = _bag(tuple(r.values()) for r in table.scan().to_arrow().to_pylist())
                same(f"seed {seed} `{pred}`: pyiceberg's read of mor's table", py, plain)
                counts["read by pyiceberg"] += 1
            if i % 3 == 2:  # Iceberg's writer on top of mor's snapshot, on both
                on_top = w._pred()
                for t in (j_ours, j_theirs):
                    spark.sql(f"DELETE FROM {t} WHERE {on_top}")
                same(
                    f"seed {seed}: a Java DELETE `{on_top}` on top of mor's",
                    iceberg(j_ours),
                    iceberg(j_theirs),
                )
                counts["Java DELETEs on top of mor's snapshots"] += 1
        counts[f"histories v{'3' if v3 else '2'}"] += 1
        lines.append(
            f"  seed {seed}: {h.layout}, v{3 if v3 else 2}, {len(h.snapshots)} Java snapshots, "
            f"{deleted} rows deleted or updated by mor"
        )

    for version in [int(v) for v in args.types.split(",") if v]:
        n += _types(spark, cat, version, diffs, counts)
    print(f"row-writes harness, {len(seeds)} Java histories, {time.monotonic() - started:.0f}s:")
    for line in lines:
        print(line)
    for k, v in sorted(counts.items()):
        print(f"  {k}: {v}")
    for d in diffs[:20]:
        print(f"DIFFERENCE {d}")
    print(f"row writes: {n} comparisons, {len(diffs)} differences")
    return 1 if diffs else 0


# the column-types table: a struct with a nested struct, a list, a map, a uuid, a fixed
TYPES_ROWS = 40
TYPES_UPDATES = [
    "UPDATE <t> SET s.a = s.a + 100 WHERE id % 3 = 0",
    "UPDATE <t> SET s.n.x = id * 10, s.b = concat(s.b, '!') WHERE id % 4 = 1",
    "UPDATE <t> SET l = array(id, id + 1), m = map('k', CAST(id AS DOUBLE)) WHERE id % 5 = 2",
    "UPDATE <t> SET u = '6f1c2b3a-0d4e-4f50-8a9b-0c1d2e3f4a5b', f = X'0A0B0C0D' WHERE id < 6",
    "UPDATE <t> SET s = named_struct('a', 7, 'b', 'z', 'n', named_struct('x', 1L)), l = NULL "
    "WHERE id % 7 = 3",
    "UPDATE <t> SET m = map_concat(m, map('z', 0.25)), u = NULL WHERE id > 30",
    # a MERGE writing every type: matched rows replaced by the source's, others inserted
    "MERGE INTO <t> t USING (SELECT id + 1 AS id, s, l, m, u, f FROM <t> WHERE id % 6 = 4) s "
    "ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
]


def _types(spark: Any, cat: Any, version: int, diffs: list[str], counts: Counter) -> int:
    """UPDATEs of struct fields (nested too), whole structs, lists, maps, uuid and fixed
    columns by mor and by Iceberg's Spark writer on two registrations of one table Iceberg's
    writer made (a v2 or v3 table with position deletes): Iceberg's reader reads both the
    same after each (as JSON: maps and binaries compared by value), and on v3 with each
    row's `_row_id`. Returns the comparisons made; differences go to `diffs`."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        DoubleType,
        FixedType,
        IntegerType,
        ListType,
        LongType,
        MapType,
        NestedField,
        StringType,
        StructType,
        UUIDType,
    )

    from mor.row_writes import run_row_write

    src = f"rw.types_v{version}"
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "s", StructType(
            NestedField(3, "a", IntegerType()), NestedField(4, "b", StringType()),
            NestedField(5, "n", StructType(NestedField(6, "x", LongType()))),
        )),
        NestedField(7, "l", ListType(8, LongType())),
        NestedField(9, "m", MapType(10, StringType(), 11, DoubleType())),
        NestedField(12, "u", UUIDType()),
        NestedField(13, "f", FixedType(4)),
    )  # fmt: skip
    modes = {f"write.{k}.mode": "merge-on-read" for k in ("delete", "update", "merge")}
    cat.create_table(src, schema, properties={"format-version": "2", **modes})
    if version >= 3:  # pyiceberg writes no v3 metadata: Iceberg's writer upgrades it
        spark.sql(f"ALTER TABLE {CATALOG}.{src} SET TBLPROPERTIES ('format-version'='3')")
    values = ", ".join(
        f"({i}, named_struct('a', {i}, 'b', 'b{i}', 'n', named_struct('x', {i}L)), "
        f"array({i}L, {i * 2}L), map('k{i}', {i / 4}), "
        f"'{i:08x}-0000-4000-8000-{i:012x}', X'{i:02x}{i:02x}0000')"
        for i in range(TYPES_ROWS)
    )
    spark.sql(f"INSERT INTO {CATALOG}.{src} VALUES {values}")
    spark.sql(f"DELETE FROM {CATALOG}.{src} WHERE id % 9 = 8")  # position deletes first
    meta = cat.load_table(src).metadata_location
    ours, theirs = f"{src}_mor", f"{src}_ice"
    for name in (ours, theirs):
        spark.sql(
            f"CALL {CATALOG}.system.register_table(table => '{name}', metadata_file => '{meta}')"
        )
    # on v3 each row's id; one assigned since the registration (an inserted row's: by its
    # place in each writer's files) as "new"
    first_new = getattr(cat.load_table(ours).metadata, "next_row_id", None) or 0
    lineage = f", CASE WHEN _row_id >= {first_new} THEN -1 ELSE _row_id END" if version >= 3 else ""

    def rows(table: str) -> Counter:
        spark.sql(f"REFRESH TABLE {CATALOG}.{table}")
        got = spark.sql(f"SELECT to_json(struct(*)){lineage} FROM {CATALOG}.{table}").collect()
        return Counter(tuple(r) for r in got)

    n = 0
    for sql in TYPES_UPDATES:
        report = run_row_write(sql.replace("<t>", ours), catalog=cat, spark=spark)
        spark.sql(sql.replace("<t>", f"{CATALOG}.{theirs}"))
        got, want = rows(ours), rows(theirs)
        n += 1
        if got != want:
            diffs.append(f"types v{version} `{sql}`: {_diff(got, want)}")
        counts[f"column-type statements (v{version})"] += 1
        counts["column-type rows updated"] += report.rows
    return n


def _on(statement: str, ours: str, table: str) -> str:
    """A landed statement on `table`: `<t>` and the subqueries over mor's table name it."""
    return statement.replace("<t>", table).replace(f"FROM {ours} ", f"FROM {table} ")


if __name__ == "__main__":
    sys.exit(main())
