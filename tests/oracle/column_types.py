"""Column types through Iceberg's Java writer and pyiceberg, read by Iceberg's Spark reader,
pyiceberg and mor.

uuid (what users' CDC keys are, and every UUID column Trino creates):
- `uu` (v2, unpartitioned), `up` (v3, partitioned by bucket(4, k) and identity(u)): created
  with the Java API (Spark SQL cannot declare a uuid column), written by Spark SQL INSERT,
  DELETE, UPDATE (position deletes on v2, deletion vectors on v3) and equality deletes on the
  uuid key `k` and on `u` (NULL keys among them) committed through `RowDelta`; keys on both
  sides of 0x80 in the first byte, so a signed comparison of bounds would prune wrongly;
  a uuid inside a struct and a list;
- `upy`: created and appended to by pyiceberg (pyarrow's uuid extension type).
Every snapshot is read by mor and Iceberg's reader: all columns, filters on uuid columns
(=, <, >=, IN, IS NULL, a non-canonical spelling), a self-join and a grouping on them, `_file`,
`_pos`, `_partition`, and `table_changes` over the whole history; the `partitions` and `files`
metadata tables; pyiceberg's reader where it can (no equality deletes). A filter on the key
must prune data files by their bounds (unsigned bytes), checked by the files mor plans.

time, timestamp_ns, timestamptz_ns, unknown, variant: a table each (v3 where the spec needs it;
the data file written with pyarrow and appended with the Java API). mor must read each exactly
as Iceberg's reader on this Spark does, or refuse it by name where that reader refuses too.

`--export DIR`: the tables and Iceberg's answers, for the other legs of the matrix
(tests/test_matrix.py). Prints one line per type and Spark (the closing table of issue 40) and
`column types: N queries, K differences`; exit 1 on any difference, 2 when the Iceberg runtime
cannot be set up.
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import shutil
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.oracle.histories import History, eq_delete_file  # noqa: E402
from tests.oracle.run import _bag as run_bag  # noqa: E402
from tests.oracle.run import first_cause  # noqa: E402
from tests.oracle.runtime import RuntimeUnavailable, iceberg_session  # noqa: E402

# keys on both sides of 0x80 in the first byte: bounds compared as signed bytes would put
# 0x80.. below 0x7f.. and prune the wrong files
LOW = [uuid.UUID(f"{b:02x}" + "1" * 30) for b in (0x00, 0x10, 0x3C, 0x7F)]
HIGH = [uuid.UUID(f"{b:02x}" + "2" * 30) for b in (0x80, 0x9A, 0xC4, 0xFF)]
POOL = [LOW[1], HIGH[2], uuid.UUID("123e4567-e89b-12d3-a456-426614174000")]


def _keys(rng: random.Random, n: int, high: bool) -> list[uuid.UUID]:
    first = range(0x80, 0x100) if high else range(0, 0x80)
    return [uuid.UUID(bytes=bytes([rng.choice(first)]) + rng.randbytes(15)) for _ in range(n)]


class Tables:
    """The Java API's catalog of the Spark session (`local`, a Hadoop catalog)."""

    def __init__(self, spark: Any, warehouse: Path) -> None:
        self.spark, self.warehouse = spark, warehouse
        self.jvm = spark._jvm
        self.ice = self.jvm.org.apache.iceberg
        self.T = self.ice.types.Types
        self.catalog = self.ice.hadoop.HadoopCatalog(
            spark._jsc.hadoopConfiguration(), str(warehouse)
        )

    def field(self, fid: int, name: str, t: Any, required: bool = False) -> Any:
        nf = self.T.NestedField
        return nf.required(fid, name, t) if required else nf.optional(fid, name, t)

    def jlist(self, items: list[Any]) -> Any:
        out = self.jvm.java.util.ArrayList()
        for i in items:
            out.add(i)
        return out

    def create(self, name: str, fields: list[Any], version: int, spec: Any = None) -> Any:
        schema = self.ice.Schema(self.jlist(fields))
        props = self.jvm.java.util.HashMap()
        props.put("format-version", str(version))
        props.put("write.delete.mode", "merge-on-read")
        props.put("write.update.mode", "merge-on-read")
        props.put("write.merge.mode", "merge-on-read")
        spec = spec(schema) if spec else self.ice.PartitionSpec.unpartitioned()
        return self.catalog.createTable(
            self.ice.catalog.TableIdentifier.parse(f"db.{name}"), schema, spec, props
        )

    def load(self, name: str) -> Any:
        return self.catalog.loadTable(self.ice.catalog.TableIdentifier.parse(f"db.{name}"))

    def append_parquet(self, name: str, arrow: pa.Table) -> None:
        table = self.load(name)
        path = f"{self.warehouse}/db/{name}/data/pa-{uuid.uuid4().hex[:8]}.parquet"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pq.write_table(arrow, path)
        ice = self.ice
        metrics = ice.parquet.ParquetUtil.fileMetrics(
            table.io().newInputFile(path), ice.MetricsConfig.forTable(table)
        )
        f = (
            ice.DataFiles.builder(table.spec())
            .withPath(path)
            .withFormat("parquet")
            .withFileSizeInBytes(os.path.getsize(path))
            .withRecordCount(arrow.num_rows)
            .withMetrics(metrics)
            .build()
        )
        table.newAppend().appendFile(f).commit()


def _fid(name: str, t: pa.DataType, fid: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, t, nullable, metadata={b"PARQUET:field_id": str(fid).encode()})


def _lit(u: uuid.UUID | None) -> str:
    return "CAST(NULL AS STRING)" if u is None else f"'{u}'"


class UuidWriter:
    """A uuid table's history: Spark SQL for rows and position deletes, RowDelta for equality
    deletes; every snapshot recorded."""

    def __init__(self, tables: Tables, name: str, version: int, partitioned: bool, seed: int):
        self.t, self.name, self.rng = tables, name, random.Random(seed)
        self.h = History(name, f"{tables.warehouse}/db/{name}", "uuid", seed)
        self.h.version, self.h.v3 = str(version), version >= 3
        self.h.columns = {"id": "bigint", "k": "uuid", "u": "uuid", "name": "string"}
        self.h.key_col = "k"
        T = tables.T

        def spec(schema: Any) -> Any:
            b = tables.ice.PartitionSpec.builderFor(schema)
            return b.bucket("k", 4).identity("u").build()

        self.partitioned = partitioned
        self.rows: dict[int, dict[str, Any]] = {}  # the model: live rows by id
        self.states: list[list[tuple]] = []  # the model's rows at each snapshot
        tables.create(
            name,
            [
                tables.field(1, "id", T.LongType.get(), required=True),
                tables.field(2, "k", T.UUIDType.get()),
                tables.field(3, "u", T.UUIDType.get()),
                tables.field(4, "name", T.StringType.get()),
                tables.field(5, "st", T.StructType.of(self._kids(tables))),
                tables.field(7, "tags", T.ListType.ofOptional(8, T.UUIDType.get())),
            ],
            version,
            spec if partitioned else None,
        )
        self.next_id = 0

    @staticmethod
    def _kids(tables: Tables) -> Any:
        return tables.jlist([tables.field(6, "x", tables.T.UUIDType.get())])

    @property
    def table(self) -> str:
        return f"local.db.{self.name}"

    def sql(self, text: str) -> None:
        self.h.log.append(text)
        self.t.spark.sql(text)
        self.snapshot()

    def snapshot(self) -> None:
        sid = self.t.spark.sql(
            f"SELECT snapshot_id FROM {self.table}.snapshots ORDER BY committed_at DESC LIMIT 1"
        ).first()[0]
        if not self.h.snapshots or self.h.snapshots[-1] != sid:
            self.h.snapshots.append(sid)
            self.states.append([tuple(r[c] for c in COLUMNS) for r in self.rows.values()])

    def _part(self, row: dict[str, Any]) -> tuple[Any, Any]:
        """The row's partition (bucket(4, k), u), as pyiceberg computes Iceberg's bucket."""
        from pyiceberg.transforms import BucketTransform
        from pyiceberg.types import UUIDType

        k = None if row["k"] is None else uuid.UUID(row["k"])
        return BucketTransform(4).transform(UUIDType())(k), row["u"]

    def insert(self, keys: list[uuid.UUID]) -> None:
        rows = []
        for k in keys:
            i = self.next_id
            self.next_id += 1
            u = None if i % 5 == 4 else POOL[i % len(POOL)]
            x = None if i % 3 == 0 else k
            tags = f"array({_lit(k)}, {_lit(u)})" if i % 4 else "array()"
            self.rows[i] = {
                "id": i,
                "k": _s(k),
                "u": _s(u),
                "name": f"n{i % 6}",
                "st": (_s(x),),
                "tags": (_s(k), _s(u)) if i % 4 else (),
            }
            rows.append(
                f"({i}, {_lit(k)}, {_lit(u)}, 'n{i % 6}', named_struct('x', {_lit(x)}), "
                f"CAST({tags} AS ARRAY<STRING>))"
            )
        self.sql(f"INSERT INTO {self.table} VALUES {', '.join(rows)}")

    def equality_delete(self, fid: int, col: str, values: list[uuid.UUID | None]) -> None:
        """An equality delete file on uuid column `col` (field `fid`): global on an
        unpartitioned table, else in the partition of a live data file holding values[0]."""
        t = self.t
        table = t.load(self.name)
        partition = None
        if not table.spec().isUnpartitioned():
            first = values[0]
            where = f"{col} IS NULL" if first is None else f"{col} = '{first}'"
            row = t.spark.sql(f"SELECT _file, id FROM {self.table} WHERE {where} LIMIT 1").first()
            files = table.newScan().planFiles().iterator()
            while files.hasNext():
                f = files.next().file()
                if row is not None and str(f.location()) == row[0]:
                    partition = f.partition()
                    break
            # the partition's rows only: the rest of the keys would be out of its scope
            part_rows = t.spark.sql(
                f"SELECT DISTINCT {col} FROM {self.table} WHERE _file = '{row[0]}'"
            ).collect()
            inside = {r[0] for r in part_rows}
            values = [v for v in values if (None if v is None else str(v)) in inside] or [first]
        path = f"{t.warehouse}/db/{self.name}/data/eq-{uuid.uuid4().hex[:8]}.parquet"
        arrow = pa.table(
            [pa.array([None if v is None else v.bytes for v in values], pa.uuid())],
            schema=pa.schema([_fid(col, pa.uuid(), fid)]),
        )
        pq.write_table(arrow, path)
        gone = {_s(v) for v in values}  # NULL deletes NULL (null-safe equality)
        scope = self._part(self.rows[row[1]]) if partition is not None else None
        for i, r in list(self.rows.items()):
            if r[col] in gone and (not self.partitioned or self._part(r) == scope):
                del self.rows[i]
        d = eq_delete_file(
            t.spark, table, table.spec(), partition, path, [fid], len(values), metrics=True
        )
        table.newRowDelta().addDeletes(d).commit()
        self.h.log.append(f"equality delete on {col}: {values}")
        self.snapshot()

    def run(self) -> History:
        rng = self.rng
        low, high = LOW + _keys(rng, 20, False), HIGH + _keys(rng, 20, True)
        self.insert(low)  # one commit below 0x80, one above: their files' bounds do not overlap
        self.insert(high)
        # the statements name rows by id: Iceberg 1.12's writer, like its reader, compares uuids
        # as signed (apache/iceberg#14216) and prunes files a uuid predicate matches in (a
        # DELETE ... WHERE u = '1011...' deleted nothing here)
        ids = [r["id"] for r in self.rows.values() if r["u"] == str(POOL[0]) and r["id"] % 2 == 0]
        self._drop(lambda r: r["id"] in ids)
        self.sql(f"DELETE FROM {self.table} WHERE id IN ({', '.join(map(str, ids))})")
        for r in self.rows.values():
            if r["id"] % 7 == 0:
                r.update(u=str(POOL[1]), name="moved")
        self.sql(f"UPDATE {self.table} SET u = '{POOL[1]}', name = 'moved' WHERE id % 7 = 0")
        # before the equality deletes: an UPDATE after them reads the table through Iceberg's
        # reader, which misses deletes whose uuid bounds cross 0x80 (signed comparison) and
        # so wrote a deleted row back (seen with low[7])
        self.equality_delete(2, "k", [low[5], high[6], uuid.uuid4(), None, low[7]])
        self.equality_delete(3, "u", [None, POOL[2]])
        self.insert([low[5], high[6]] + _keys(rng, 6, True))  # deleted keys inserted again
        (gone,) = [r["id"] for r in self.rows.values() if r["k"] == str(high[3])]
        self._drop(lambda r: r["id"] == gone)
        self.sql(
            f"MERGE INTO {self.table} t USING (SELECT {gone} AS id) s ON t.id = s.id "
            "WHEN MATCHED THEN DELETE"
        )
        return self.h

    def _drop(self, test: Any) -> None:
        for i, r in list(self.rows.items()):
            if test(r):
                del self.rows[i]


def _s(u: uuid.UUID | None) -> str | None:
    return None if u is None else str(u)


COLUMNS = ("id", "k", "u", "name", "st", "tags")
MODEL_SCHEMA = (
    "id BIGINT, k STRING, u STRING, name STRING, st STRUCT<x: STRING>, tags ARRAY<STRING>"
)


def write_pyiceberg(warehouse: Path) -> tuple[str, list[int]]:
    """`upy`: created and appended to (twice) by pyiceberg; returns its metadata file and
    snapshots."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType, UUIDType

    cat = SqlCatalog("py", uri=f"sqlite:///{warehouse}/py.db", warehouse=f"file://{warehouse}/py")
    cat.create_namespace("db")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "k", UUIDType()),
        NestedField(3, "u", UUIDType()),
        NestedField(4, "name", StringType()),
    )
    # unpartitioned: pyiceberg 0.12 cannot write a table partitioned on a uuid column
    # (pyarrow cannot group by its uuid extension type)
    tbl = cat.create_table("db.upy", schema)
    arrow_schema = pa.schema(
        [
            pa.field("id", pa.int64(), False),
            pa.field("k", pa.uuid()),
            pa.field("u", pa.uuid()),
            pa.field("name", pa.string()),
        ]
    )
    rng = random.Random(7)
    for batch, keys in enumerate((LOW + _keys(rng, 8, False), HIGH + _keys(rng, 8, True))):
        ids = [batch * 100 + i for i in range(len(keys))]
        us = [None if i % 4 == 3 else POOL[i % 2].bytes for i in ids]
        tbl.append(
            pa.table(
                [
                    pa.array(ids, pa.int64()),
                    pa.array([k.bytes for k in keys], pa.uuid()),
                    pa.array(us, pa.uuid()),
                    pa.array([f"p{i % 3}" for i in ids]),
                ],
                schema=arrow_schema,
            )
        )
    tbl = cat.load_table("db.upy")
    return tbl.metadata_location, [s.snapshot_id for s in tbl.snapshots()]


UUID_QUERIES = [
    "SELECT * FROM {t}",
    "SELECT count(*) FROM {t}",
    "SELECT id, k FROM {t} WHERE k = '" + str(LOW[2]) + "'",
    "SELECT id, k FROM {t} WHERE k >= '80000000-0000-0000-0000-000000000000'",
    "SELECT id, k FROM {t} WHERE k < '" + str(HIGH[1]) + "'",
    "SELECT id FROM {t} WHERE k IN ('" + str(LOW[0]) + "', '" + str(HIGH[3]) + "')",
    "SELECT id FROM {t} WHERE u IS NULL",
    "SELECT id FROM {t} WHERE u = '" + str(POOL[1]).upper() + "'",  # not canonical: no match
    "SELECT u, count(*), min(id), max(k) FROM {t} GROUP BY u",
    "SELECT a.id, b.id FROM {t} a JOIN {t} b ON a.u = b.u AND a.id < b.id",
    "SELECT id, length(k), substr(k, 9, 1) FROM {t}",
]
NESTED_QUERIES = ["SELECT id, st, tags, st.x FROM {t}", "SELECT id FROM {t} WHERE st.x IS NULL"]
META_QUERIES = ["SELECT id, _file, _pos FROM {t}", "SELECT id, _partition FROM {t}"]


def _bag(rows: list[Any]) -> Counter:
    return run_bag([tuple(_plain(v) for v in r) for r in rows])


def _plain(v: Any) -> Any:
    """Rows of structs and lists as tuples (hashable, and the same from both readers)."""
    if isinstance(v, (list, tuple)):
        return tuple(_plain(x) for x in v)
    if isinstance(v, uuid.UUID):
        return str(v)
    if type(v).__name__ == "VariantVal":  # Spark 4's VARIANT value: compared as its JSON
        return v.toJson()
    if isinstance(v, dict):
        return tuple(sorted((k, _plain(x)) for k, x in v.items()))
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    return v


class Check:
    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.queries = 0
        self.diffs: list[str] = []
        self.answers: list[tuple[str, Counter]] = []
        self.iceberg_wrong: list[str] = []  # where Iceberg's reader is not the spec
        self.refusals: list[tuple[str, str]] = []  # (query, what mor's error says)

    def same(
        self,
        what: str,
        ours_sql: str,
        theirs: list[Any],
        catalog: Any = None,
        export: bool = True,
    ) -> None:
        """mor's rows of `ours_sql` must be `theirs`: cold (anti-joined), and again resolving
        the equality deletes to positions (rules/physical/equality.py: the second read), as
        tests/oracle/run.compare does."""
        from mor import mor_sql
        from mor.physical.spark import reuse
        from mor.planner.state import caches
        from mor.rules.physical import equality as resolution

        self.queries += 1
        b = _bag(theirs)
        resolution.clear_resolved(caches())
        for how in ("", " (resolved)"):
            try:
                ours = mor_sql(ours_sql, spark=self.spark, catalog=catalog).collect()
            except Exception as e:  # noqa: BLE001 - an error from mor is a difference
                self.diffs.append(f"{what}{how}: {ours_sql}\n  mor failed: {_first_line(e)}")
                return
            a = _bag(ours)
            if a != b:
                self.diffs.append(
                    f"{what}{how}: {ours_sql}\n  mor {sum(a.values())} rows, expected "
                    f"{sum(b.values())}; missing from mor {list((b - a).elements())[:3]}, "
                    f"extra {list((a - b).elements())[:3]}"
                )
                return
            if not (resolution.held(caches())[0] or resolution.seen(caches())):
                break
            reuse.clear()
        if catalog is None and export:
            self.answers.append((ours_sql, b))

    def uuid_history(self, w: UuidWriter) -> None:
        """Every snapshot: mor against the model's rows (a plain DataFrame of them, so the query
        has Spark's semantics over the strings Iceberg's reader presents); Iceberg's reader
        against the same, each disagreement recorded as a finding about it; the metadata
        columns against Iceberg's reader where its rows are the model's."""
        h = w.h
        at = f"iceberg_scan('{h.location}')"
        for i, (sid, state) in enumerate(zip(h.snapshots, w.states)):
            view = f"model_{h.name}_{i}"
            self.spark.createDataFrame(state, MODEL_SCHEMA).createOrReplaceTempView(view)
            full = i in (5, len(h.snapshots) - 1)  # after the equality deletes, and the last
            qs = UUID_QUERIES + NESTED_QUERIES if full else UUID_QUERIES[:2]
            export = i == len(h.snapshots) - 1
            iceberg_right = True
            for q in qs:
                truth = self.spark.sql(q.format(t=view)).collect()
                ice = q.format(t=f"local.db.{h.name} VERSION AS OF {sid}")
                theirs = _bag(self.spark.sql(ice).collect())
                if theirs != _bag(truth):
                    iceberg_right = iceberg_right and "WHERE" in q
                    a, b = theirs, _bag(truth)
                    self.iceberg_wrong.append(
                        f"{h.name} @ snapshot {i + 1}: {q.format(t='t')}: Iceberg's reader "
                        f"{sum(a.values())} rows, the model {sum(b.values())} (missing "
                        f"{list((b - a).elements())[:2]}, extra {list((a - b).elements())[:2]})"
                    )
                ours = f"{at} VERSION AS OF {sid}"
                self.same(f"{h.name} @ {sid}", q.format(t=ours), truth, export=export)
            if not full:
                continue
            for q in META_QUERIES:
                if not iceberg_right:
                    self.iceberg_wrong.append(
                        f"{h.name} @ snapshot {i + 1}: {q.format(t='t')} not compared"
                    )
                    continue
                theirs = self.spark.sql(
                    q.format(t=f"local.db.{h.name} VERSION AS OF {sid}")
                ).collect()
                ours = f"{at} VERSION AS OF {sid}"
                self.same(f"{h.name} @ {sid}", q.format(t=ours), theirs, export=export)

    def changes(self, w: UuidWriter) -> None:
        """table_changes over the whole history: each commit's DELETE rows were live before
        it, and the model before it less them plus its INSERT rows is the model after it."""
        from mor import changes

        self.queries += 1
        rows = changes(w.h.location, spark=self.spark).collect()
        by_ord: dict[int, list[Any]] = {}
        for r in rows:
            by_ord.setdefault(r["_change_ordinal"], []).append(r)
        before: Counter = Counter()
        for i, state in enumerate(w.states):
            got = by_ord.get(i, [])
            gone = _bag([tuple(r[c] for c in COLUMNS) for r in got if r._change_type == "DELETE"])
            new = _bag([tuple(r[c] for c in COLUMNS) for r in got if r._change_type == "INSERT"])
            after = _bag(state)
            if gone - before or before - gone + new != after:
                self.diffs.append(
                    f"{w.h.name}: table_changes of commit {i} ({len(got)} rows) does not turn "
                    f"the model's {sum(before.values())} rows into its "
                    f"{sum(after.values())}"
                )
            before = after

    def pyiceberg(self, name: str, location: str, snapshots: list[int]) -> None:
        """pyiceberg's reader of the same snapshots (a table without equality deletes)."""
        from pyiceberg.table import StaticTable

        from mor import mor_sql

        meta = _metadata_file(location)
        table = StaticTable.from_metadata(meta)
        for sid in snapshots:
            self.queries += 1
            got = table.scan(snapshot_id=sid, selected_fields=("id", "k", "u", "name"))
            theirs = [tuple(_plain(v) for v in r.values()) for r in got.to_arrow().to_pylist()]
            ours = mor_sql(
                f"SELECT id, k, u, name FROM iceberg_scan('{location}') VERSION AS OF {sid}",
                spark=self.spark,
            ).collect()
            if _bag(ours) != _bag(theirs):
                self.diffs.append(f"{name} @ {sid}: mor and pyiceberg's reader differ")

    def pruned(self, h: History) -> None:
        """`k = <a key>` and `k >= 0x80...` plan fewer data files than the table has."""
        from mor import metrics

        at = f"iceberg_scan('{h.location}')"
        whole = metrics(f"SELECT id FROM {at}").data_files
        for q in (UUID_QUERIES[2], UUID_QUERIES[3]):
            self.queries += 1
            got = metrics(q.format(t=at)).data_files
            if not 0 < got < whole:
                self.diffs.append(f"{h.name}: {q} planned {got} of {whole} data files")


def _metadata_file(location: str) -> str:
    folder = Path(location.removeprefix("file://")) / "metadata"
    return str(max(folder.glob("*.metadata.json"), key=lambda p: p.stat().st_mtime))


META_TABLES = [
    ("partitions", "SELECT partition, record_count, file_count FROM {t}.partitions"),
    (
        "files",
        "SELECT file_path, content, record_count, lower_bounds, upper_bounds, "
        "null_value_counts, readable_metrics.k.lower_bound, readable_metrics.k.upper_bound "
        "FROM {t}.files",
    ),
]


def metadata_tables(check: Check, warehouse: Path, names: list[str]) -> list[str]:
    """The partitions and files metadata tables of each table, through a catalog mor reads
    (the Java-written tables registered in a pyiceberg SQL catalog) and Iceberg's. Where
    Iceberg's reader fails on a uuid (1.12.0: a uuid partition value or readable_metrics
    bound is cast to a string and fails), mor's table is held to the snapshot summary (rows
    and data files) and to the stored bounds (a readable bound is the uuid of its 16 bytes).
    Returns what Iceberg's reader said, for the closing table."""
    from pyiceberg.catalog.sql import SqlCatalog

    from mor import mor_sql

    cat = SqlCatalog("meta", uri=f"sqlite:///{warehouse}/meta.db", warehouse=str(warehouse))
    cat.create_namespace("db")
    said = []
    for name in names:
        cat.register_table(f"db.{name}", _metadata_file(f"{warehouse}/db/{name}"))
        total = check.spark.sql(
            f"SELECT summary['total-records'], summary['total-data-files'] "
            f"FROM local.db.{name}.snapshots ORDER BY committed_at DESC LIMIT 1"
        ).first()
        for kind, q in META_TABLES:
            if kind == "partitions" and name == "uu":  # unpartitioned: no partition column
                q = q.replace("partition, ", "")
            try:
                theirs = check.spark.sql(q.format(t=f"local.db.{name}")).collect()
            except Exception as e:  # noqa: BLE001 - Iceberg's reader fails on some uuids
                said.append(f"{name}.{kind}: Iceberg's reader fails: {_first_line(e)}")
                theirs = None
            if theirs is not None:
                check.same(f"{name} metadata", q.format(t=f"db.{name}"), theirs, catalog=cat)
                continue
            check.queries += 1
            ours = mor_sql(q.format(t=f"db.{name}"), catalog=cat, spark=check.spark).collect()
            if kind == "partitions":
                rows = sum(r.record_count for r in ours)
                files = sum(r.file_count for r in ours)
                parts = [r.partition.u for r in ours if r.partition.u is not None]
                if (rows, files) != (int(total[0]), int(total[1])) or not all(
                    str(uuid.UUID(p)) == p for p in parts
                ):
                    check.diffs.append(f"{name}.partitions: {ours} (summary {total})")
            else:
                for r in ours:
                    lo = r.lower_bounds.get(2) if r.lower_bounds else None
                    want = None if lo is None else str(uuid.UUID(bytes=bytes(lo)))
                    if r.lower_bound != want:
                        check.diffs.append(f"{name}.files: {r.file_path} {r.lower_bound}")
    return said


# (Iceberg type, pyarrow type of the stored values, the values, format version)
OTHER = {
    "time": ("TimeType", pa.time64("us"), [3723456789, None], 2),
    "timestamp_ns": ("TimestampNanoType.withoutZone", pa.timestamp("ns"), [1, None], 3),
    "timestamptz_ns": ("TimestampNanoType.withZone", pa.timestamp("ns", "UTC"), [2, None], 3),
    "unknown": ("UnknownType", None, None, 3),
    "variant": ("VariantType", None, None, 3),
}


def other_types(check: Check, tables: Tables) -> list[str]:
    """A table per type, read by Iceberg's reader, pyiceberg and mor; mor must give Iceberg's
    rows, or refuse by naming the type where Iceberg's reader refuses too. Returns the lines of
    the closing table."""
    import pyspark
    import pyspark.sql.types
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import StaticTable

    from mor import MorError, mor_sql
    from mor.planner.sources import variants_understood

    lines = []
    spark = check.spark
    for name, (factory, atype, values, version) in OTHER.items():
        T = tables.T
        it = getattr(T, factory.split(".")[0])
        it = getattr(it, factory.split(".")[1])() if "." in factory else it.get()
        tables.create(
            f"t_{name}",
            [tables.field(1, "id", T.LongType.get(), required=True), tables.field(2, "c", it)],
            version,
        )
        cols = [pa.array([1, 2], pa.int64())]
        fields = [_fid("id", pa.int64(), 1, False)]
        if atype is not None:  # unknown and variant: no value written (all NULL)
            cols.append(pa.array(values, atype))
            fields.append(_fid("c", atype, 2))
        tables.append_parquet(f"t_{name}", pa.table(cols, schema=pa.schema(fields)))
        if name == "variant" and hasattr(pyspark.sql.types, "VariantType"):
            # values Iceberg's Spark 4 writer stores (a Parquet VARIANT group)
            spark.sql(
                "INSERT INTO local.db.t_variant VALUES "
                """(3, parse_json('{"a": 1, "b": [true, null, "x"]}')), (4, NULL), """
                "(5, parse_json('12.5'))"
            )
        location = f"{tables.warehouse}/db/t_{name}"
        what = {}
        try:
            got = spark.sql(f"SELECT * FROM local.db.t_{name}")
            theirs = got.collect()
            what["iceberg"] = f"{got.schema['c'].dataType.simpleString()} {_shown(theirs)}"
        except Exception as e:  # noqa: BLE001 - a refusal, compared with mor's below
            theirs = None
            what["iceberg"] = "refuses: " + _first_line(e)
        try:
            arrow = StaticTable.from_metadata(_metadata_file(location)).scan().to_arrow()
            shown = arrow.column("c").cast(pa.string()).to_pylist()  # no pandas needed for ns
            what["pyiceberg"] = f"{arrow.schema.field('c').type} {shown}"
        except Exception as e:  # noqa: BLE001 - what pyiceberg says, for the table
            what["pyiceberg"] = "refuses: " + _first_line(e)
        check.queries += 1
        try:
            df = mor_sql(f"SELECT * FROM iceberg_scan('{location}')", spark=spark)
            ours = df.collect()
            what["mor"] = f"{df.schema['c'].dataType.simpleString()} {_shown(ours)}"
            if theirs is None:
                check.diffs.append(f"{name}: Iceberg's reader refuses, mor reads {ours}")
            elif _bag(ours) != _bag(theirs) or _types(df) != _types(got):
                check.diffs.append(f"{name}: mor {df.schema} {ours} != Iceberg {theirs}")
            else:
                q = f"SELECT * FROM iceberg_scan('{location}')"
                check.answers.append((q, _bag(theirs)))
        except MorError as e:
            what["mor"] = "refuses: " + _first_line(e)
            check.refusals.append(
                (f"SELECT * FROM iceberg_scan('{location}')", f"Iceberg type {name} is not")
            )
            if theirs is not None:
                check.diffs.append(f"{name}: Iceberg's reader reads it, mor refuses: {e}")
            elif name not in str(e) or "\n" in str(e):
                check.diffs.append(f"{name}: mor's refusal does not name the type: {e}")
        if name == "variant":  # the same table through a catalog that reads metadata files
            check.queries += 1
            cat = SqlCatalog(
                "v", uri=f"sqlite:///{tables.warehouse}/variant.db", warehouse=str(location)
            )
            cat.create_namespace("db")
            with variants_understood():  # pyiceberg's register_table parses the metadata
                cat.register_table("db.t_variant", _metadata_file(location))
            try:
                q = "SELECT * FROM db.t_variant"
                by_name = _bag(mor_sql(q, catalog=cat, spark=spark).collect())
            except MorError as e:
                by_name = Counter({str(e): 1})
            if theirs is not None and by_name != _bag(theirs):
                check.diffs.append(f"variant through a SQL catalog: {by_name}")
            if theirs is None and "Iceberg type variant is not" not in str(by_name):
                check.diffs.append(f"variant through a SQL catalog on Spark 3.5: {by_name}")
        lines.append(
            f"  {name:15} pyspark {pyspark.__version__}: Iceberg {what['iceberg']} | "
            f"pyiceberg {what['pyiceberg']} | mor {what['mor']}"
        )
    return lines


def _types(df: Any) -> list[Any]:
    return [f.dataType for f in df.schema.fields]


def _shown(rows: list[Any]) -> str:
    return str(sorted((r[0], r[1]) for r in rows))


def _first_line(e: Exception) -> str:
    return first_cause(e)[:140]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--export", help="write the tables and Iceberg's answers here")
    args = ap.parse_args(argv)
    export = Path(args.export) if args.export else None
    if export is not None:
        shutil.rmtree(export, ignore_errors=True)
        export.mkdir(parents=True)
    warehouse = export / "warehouse" if export else Path(tempfile.mkdtemp(prefix="mor-types-"))
    warehouse.mkdir(parents=True, exist_ok=True)
    try:
        spark = iceberg_session(warehouse, small_data=True)
    except RuntimeUnavailable as e:
        print(f"column types: the Iceberg runtime cannot be set up here: {e}")
        return 2
    check = Check(spark)
    try:
        tables = Tables(spark, warehouse)
        writers = [
            UuidWriter(tables, "uu", 2, partitioned=False, seed=1),
            UuidWriter(tables, "up", 3, partitioned=True, seed=2),
        ]
        histories = [w.run() for w in writers]
        for w in writers:
            check.uuid_history(w)
            check.changes(w)
        check.pruned(histories[0])
        said = metadata_tables(check, warehouse, [h.name for h in histories])
        meta, snaps = write_pyiceberg(warehouse)
        location = str(Path(meta.removeprefix("file://")).parent.parent)
        py = History("upy", location, "uuid", 0)
        for sid in snaps:
            theirs = spark.read.format("iceberg").option("versionAsOf", sid).load(meta).collect()
            check.same(
                f"upy @ {sid}",
                f"SELECT * FROM iceberg_scan('{location}') VERSION AS OF {sid}",
                theirs,
            )
        check.pyiceberg("upy", py.location, snaps)
        check.pyiceberg("uu", histories[0].location, histories[0].snapshots[:3])
        lines = other_types(check, tables)
        if export is not None and not check.diffs:
            with open(export / "results.pickle", "wb") as f:
                pickle.dump({"queries": check.answers, "refusals": check.refusals}, f)
    finally:
        spark.stop()
        if export is None:
            shutil.rmtree(warehouse, ignore_errors=True)
    print("\n".join(lines + said))
    for d in check.iceberg_wrong:
        print("ICEBERG'S READER " + d)
    for d in check.diffs:
        print("DIFFERENCE " + d)
    print(f"column types: {check.queries} queries, {len(check.diffs)} differences")
    return 1 if check.diffs else 0


if __name__ == "__main__":
    sys.exit(main())
