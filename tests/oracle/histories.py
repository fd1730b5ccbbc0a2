"""Random merge-on-read histories written by Apache Iceberg's own Java writer.

Each history is driven by a seeded `random.Random`, so a failing seed replays exactly. It uses:
- format v2, v3, or v2 upgraded to v3 mid-history;
- Spark SQL INSERT, and DELETE / UPDATE / MERGE INTO in merge-on-read mode (position delete
  files on v2, deletion vectors on v3: repeated on the same files, a vector replaces a vector);
- equality deletes committed through the JVM `RowDelta` API, on several id sets (also listed in
  non-schema order), with NULL keys, keys that match nothing, scoped to partitions (with the
  partition of a live data file) or global (unpartitioned spec);
- partition evolution (a field added mid-history; older-spec equality deletes stay global);
- schema evolution: a rename, an added column, an equality column dropped after its delete;
- small row groups (several per file) and position delete files covering several data files.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

_ROW = ("id", "k", "name", "amt", "p", "extra", "d")  # what rows() generates, by original name
ARROW = {"bigint": pa.int64(), "int": pa.int32(), "string": pa.string(), "double": pa.float64()}


@dataclass
class History:
    name: str  # local.db.<name>
    location: str  # the table's folder: a local path, or s3a://bucket/... (tests/oracle/on_s3.py)
    layout: str
    seed: int
    snapshots: list[int] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    columns: dict[str, str] = field(default_factory=dict)  # current name -> SQL type
    coverage: Counter = field(default_factory=Counter)
    key_col: str = "name"  # a string column whose values queries filter on
    version: str = "2"  # format version: "2", "3" or "2->3" (upgraded mid-history)
    v3: bool = False  # the table is at format version 3 now

    @property
    def table(self) -> str:
        return f"local.db.{self.name}"


class Writer:
    def __init__(
        self,
        spark: Any,
        warehouse: Path | str,
        seed: int,
        fs: Any = None,
        version: str | None = None,
    ) -> None:
        """`warehouse`: the Hadoop catalog's folder; on an object store (`s3a://...`) `fs` is
        the pyarrow file system the equality delete files are written with. `version`: the
        format version ("2", "3", "2->3"; by default drawn from the seed)."""
        self.spark = spark
        self.fs = fs
        self.version = version
        self.rng = random.Random(seed)
        self.jvm = spark._jvm
        self.next_id = 0
        layout = self.rng.choice(["unpartitioned", "identity", "bucket"])
        name = f"h{seed}"
        self.h = History(name, f"{str(warehouse).rstrip('/')}/db/{name}", layout, seed)
        self.h.columns = {
            "id": "bigint",
            "k": "int",
            "name": "string",
            "amt": "double",
            "p": "string",
        }

    # ---- helpers -------------------------------------------------------------------------
    def sql(self, text: str) -> None:
        self.h.log.append(text)
        self.spark.sql(text)

    def table(self) -> Any:
        return self.jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, self.h.table
        )

    def snapshot(self) -> None:
        snap = self.table().currentSnapshot()
        if snap is not None and (not self.h.snapshots or self.h.snapshots[-1] != snap.snapshotId()):
            self.h.snapshots.append(snap.snapshotId())

    def rows(self, n: int) -> list[tuple]:
        out = []
        for _ in range(n):
            self.next_id += 1
            i = self.next_id if self.rng.random() > 0.1 else self.rng.randint(1, self.next_id)
            out.append(
                (
                    i,
                    self.rng.choice([None, 1, 2, 3]),
                    self.rng.choice([None, "ann", "bob", "cy", "dee", "eve"]),
                    round(self.rng.uniform(0, 100), 2),
                    self.rng.choice(["x", "y", "z", None]),
                    self.rng.choice(["e1", "e2", None]),
                    self.rng.choice([None, 0, 7, 9]),
                )
            )
        return out

    def _data_cols(self) -> list[str]:
        """Current columns that rows() fills, in table order (after renames and drops)."""
        return [c for c in self.h.columns if self.orig(c) in _ROW]

    def _values(self, rows: list[tuple]) -> str:
        cols = self._data_cols()
        out = []
        for r in rows:
            d = dict(zip(_ROW, r))
            out.append(
                "(" + ", ".join(_lit(d[self.orig(c)], self.h.columns[c]) for c in cols) + ")"
            )
        return ", ".join(out)

    def insert(self, rows: list[tuple]) -> None:
        cols = self._data_cols()
        self.sql(f"INSERT INTO {self.h.table} ({', '.join(cols)}) VALUES {self._values(rows)}")
        self.h.coverage["insert"] += 1

    def orig(self, name: str) -> str:
        return {"label": "name"}.get(name, name)

    # ---- the history ---------------------------------------------------------------------
    def create(self) -> None:
        part = {
            "unpartitioned": "",
            "identity": "PARTITIONED BY (p)",
            "bucket": "PARTITIONED BY (bucket(3, id))",
        }[self.h.layout]
        small_groups = self.rng.random() < 0.5
        # v2 (position delete files), v3 (deletion vectors), or v2 upgraded to v3 mid-history
        self.h.version = self.version or self.rng.choice(["2", "3", "2->3"])
        self.h.coverage[f"format v{self.h.version}"] += 1
        self.h.v3 = self.h.version == "3"
        props = {
            "format-version": "3" if self.h.version == "3" else "2",
            "write.delete.mode": "merge-on-read",
            "write.update.mode": "merge-on-read",
            "write.merge.mode": "merge-on-read",
            "write.distribution-mode": "none",
        }
        if self.rng.random() < 0.5:
            # one position delete file per partition, covering several data files
            props["write.delete.granularity"] = "partition"
            self.h.coverage["pos delete files spanning files"] += 1
        if small_groups:
            props["write.parquet.row-group-size-bytes"] = "256"
            props["write.parquet.page-size-bytes"] = "64"
            self.h.coverage["multi-row-group files"] += 1
        tp = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
        self.sql(
            f"CREATE TABLE {self.h.table} (id bigint, k int, name string, amt double, "
            f"p string) USING iceberg {part} TBLPROPERTIES ({tp})"
        )
        self.h.coverage[f"layout {self.h.layout}"] += 1

    def step(self) -> None:
        if self.h.coverage["drop equality column"]:
            # Iceberg 1.10.2 cannot plan a scan of a table whose equality delete column was
            # dropped (NPE in DeleteFileIndex): its DELETE/UPDATE/MERGE and the generator's own
            # scoping of new deletes fail, so only appends follow the drop
            self.op_insert()
            self.snapshot()
            return
        ops = ["insert", "insert", "delete", "update", "merge", "eq", "eq", "eq"]
        if self.h.version == "2->3" and not self.h.coverage["upgraded to v3"]:
            ops += ["upgrade"] * 2
        if not self.h.coverage["partition evolution"] and self.h.layout != "bucket":
            ops.append("evolve_partition")
        if not self.h.coverage["rename"]:
            ops.append("rename")
        if not self.h.coverage["add column"]:
            ops.append("add_column")
        if self.h.v3 and "d" not in self.h.columns:
            ops.append("add_default_column")
        if (
            self.h.coverage["eq on k"]
            and "k" in self.h.columns
            and (not self.h.coverage["drop equality column"])
            # rarely: Iceberg's reader cannot answer any query after it (only mor is run)
            and self.rng.random() < 0.15
        ):
            ops.append("drop_k")
        if self.rng.random() < 0.4:
            ops += ["compact"] * 2
        op = self.rng.choice(ops)
        getattr(self, f"op_{op}")()
        self.snapshot()

    def op_insert(self) -> None:
        self.insert(self.rows(self.rng.randint(3, 25)))

    def _pred(self) -> str:
        name = "label" if "label" in self.h.columns else "name"
        return self.rng.choice(
            [
                f"id % {self.rng.randint(2, 7)} = {self.rng.randint(0, 1)}",
                f"{name} IS NULL",
                f"{name} = '{self.rng.choice(['ann', 'bob', 'cy'])}'",
                f"amt < {self.rng.randint(5, 60)}",
            ]
            + ([f"k = {self.rng.randint(1, 3)}", "k IS NULL"] if "k" in self.h.columns else [])
        )

    def op_delete(self) -> None:
        self.sql(f"DELETE FROM {self.h.table} WHERE {self._pred()}")
        self.h.coverage["sql DELETE"] += 1

    def op_update(self) -> None:
        self.sql(f"UPDATE {self.h.table} SET amt = amt + 1000 WHERE {self._pred()}")
        self.h.coverage["sql UPDATE"] += 1

    def op_merge(self) -> None:
        by_id = {r[0]: r for r in self.rows(self.rng.randint(2, 8))}  # one source row per id
        cols = self._data_cols()
        src = f"SELECT * FROM VALUES {self._values(list(by_id.values()))} AS s({', '.join(cols)})"
        self.sql(
            f"MERGE INTO {self.h.table} t USING ({src}) s ON t.id = s.id "
            f"WHEN MATCHED AND s.amt < 30 THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET t.amt = s.amt "
            f"WHEN NOT MATCHED THEN INSERT ({', '.join(cols)}) "
            f"VALUES ({', '.join('s.' + c for c in cols)})"
        )
        self.h.coverage["sql MERGE"] += 1

    def op_compact(self) -> None:
        """rewrite_data_files: a `replace` commit that applies the deletes to new data files
        (equality delete files stay behind, older than the rewritten files' sequence number)."""
        self.sql(
            f"CALL local.system.rewrite_data_files(table => 'db.{self.h.name}', "
            "options => map('rewrite-all', 'true'))"
        )
        self.h.coverage["compaction (replace)"] += 1

    def op_upgrade(self) -> None:
        """v2 -> v3: older position delete files stay; the deletion vectors written after
        replace them for the data files they name."""
        self.sql(f"ALTER TABLE {self.h.table} SET TBLPROPERTIES ('format-version'='3')")
        self.h.v3 = True
        self.h.coverage["upgraded to v3"] += 1

    def op_evolve_partition(self) -> None:
        self.sql(f"ALTER TABLE {self.h.table} ADD PARTITION FIELD bucket(2, id)")
        self.h.coverage["partition evolution"] += 1

    def op_rename(self) -> None:
        self.sql(f"ALTER TABLE {self.h.table} RENAME COLUMN name TO label")
        self.h.columns = {("label" if c == "name" else c): t for c, t in self.h.columns.items()}
        self.h.key_col = "label"
        self.h.coverage["rename"] += 1

    def op_add_default_column(self) -> None:
        """A v3 column with an initial default (the Java API: Spark 3.5's DDL cannot): files
        written before read it as the default."""
        iceberg = self.jvm.org.apache.iceberg
        value = self.rng.choice([0, 7, -3])
        self.table().updateSchema().addColumn(
            "d",
            iceberg.types.Types.IntegerType.get(),
            "a default",
            iceberg.expressions.Literal.of(value),
        ).commit()
        self.h.columns["d"] = "int"
        self.h.log.append(f"-- Java: ADD COLUMN d int with initial-default {value}")
        self.h.coverage["column with initial default"] += 1

    def op_add_column(self) -> None:
        self.sql(f"ALTER TABLE {self.h.table} ADD COLUMN extra string")
        self.h.columns["extra"] = "string"
        self.h.coverage["add column"] += 1

    def op_drop_k(self) -> None:
        self.sql(f"ALTER TABLE {self.h.table} DROP COLUMN k")
        del self.h.columns["k"]
        self.h.coverage["drop equality column"] += 1

    def op_eq(self) -> None:
        """Equality delete files through RowDelta, one per chosen partition (or one global)."""
        table = self.table()
        schema = table.schema()
        name = "label" if "label" in self.h.columns else "name"
        choices = [("id",), (name,), ("id", name)]
        if "k" in self.h.columns:
            choices += [("k", name), (name, "k")]
        if "d" in self.h.columns:  # keys of files from before the column: its default
            choices += [("d",), ("id", "d")]
        cols = self.rng.choice(choices)
        ids = [schema.findField(c).fieldId() for c in cols]
        tag = "{" + ",".join(str(i) for i in ids) + "}"
        self.h.coverage[f"eq {tag}"] += 1
        if "k" in cols:
            self.h.coverage["eq on k"] += 1
        live = self._sample(cols)
        keys = [tuple(r) for r in self.rng.sample(live, min(len(live), self.rng.randint(1, 4)))]
        if self.rng.random() < 0.5:
            keys.append(tuple(None for _ in cols))
            self.h.coverage["NULL keys"] += 1
        if self.rng.random() < 0.3:
            keys.append(tuple(_nomatch(self.h.columns[c]) for c in cols))
            self.h.coverage["keys matching nothing"] += 1
        scopes = self._scopes(table)
        if not keys or not scopes:
            return
        delta = table.newRowDelta()
        for spec, partition in scopes:
            path = self._write_keys(cols, ids, keys)
            metrics = self.rng.random() < 0.5
            if metrics:
                self.h.coverage["eq delete with metrics"] += 1
            f = eq_delete_file(self.spark, table, spec, partition, path, ids, len(keys), metrics)
            delta = delta.addDeletes(f)
            self.h.coverage["global eq delete" if partition is None else "partition eq delete"] += 1
        delta.commit()
        self.h.log.append(
            f"-- RowDelta: equality delete on {cols} ids {ids} keys {keys} "
            f"in {len(scopes)} scope(s)"
        )

    def _sample(self, cols: tuple[str, ...]) -> list[Any]:
        """Live key values to delete. Iceberg 1.10.2 cannot read a table whose equality delete
        column was dropped (NPE in DeleteFileIndex.canContainEqDeletesForFile); the keys are
        then sampled through mor, which only chooses what to delete next."""
        sql = f"SELECT {', '.join(cols)} FROM {{t}}"
        try:
            return self.spark.sql(sql.format(t=self.h.table)).collect()
        except Exception:  # noqa: BLE001 - the known Iceberg failure above
            from mor import mor_sql

            self.h.coverage["keys sampled through mor"] += 1
            t = f"iceberg_scan('{self.h.location}')"
            return mor_sql(sql.format(t=t), spark=self.spark).collect()

    def _scopes(self, table: Any) -> list[tuple[Any, Any]]:
        specs = table.specs()
        unpart = [specs.get(s) for s in specs.keySet() if specs.get(s).isUnpartitioned()]
        if table.spec().isUnpartitioned() or (unpart and self.rng.random() < 0.3):
            return [(unpart[0], None)]  # a global delete, also after partition evolution
        seen = {}
        it = table.newScan().planFiles().iterator()
        while it.hasNext():
            task = it.next()
            f = task.file()
            key = (task.spec().specId(), str(f.partition()))
            if key not in seen and not task.spec().isUnpartitioned():
                seen[key] = (task.spec(), f.partition())
        it.close()
        chosen = list(seen.values())
        self.rng.shuffle(chosen)
        if not chosen:
            return [(unpart[0], None)] if unpart else []
        return chosen[: self.rng.randint(1, len(chosen))]

    def _write_keys(self, cols: tuple[str, ...], ids: list[int], keys: list[tuple]) -> str:
        fields = [
            pa.field(c, ARROW[self.h.columns[c]], metadata={b"PARQUET:field_id": str(i).encode()})
            for c, i in zip(cols, ids)
        ]
        # write the columns in an order other than the ids' now and then
        order = list(range(len(cols)))
        if self.rng.random() < 0.5:
            order.reverse()
        table = pa.table(
            {fields[i].name: pa.array([k[i] for k in keys], fields[i].type) for i in order},
            schema=pa.schema([fields[i] for i in order]),
        )
        path = f"{self.h.location}/data/eqdel-{uuid.uuid4()}.parquet"
        if self.fs is None:
            pq.write_table(table, path)
        else:  # s3a://bucket/key -> bucket/key on the store
            pq.write_table(table, path.split("://", 1)[1], filesystem=self.fs)
        return path

    def run(self, steps: int, after_step: Callable[[], None] | None = None) -> History:
        """`after_step`: called after each commit (a consumer reading as the table grows)."""
        self.create()
        self.op_insert()
        self.snapshot()
        for _ in range(steps):
            if after_step is not None:
                after_step()
            self.step()
        self._dv_coverage()
        return self.h

    def _dv_coverage(self) -> None:
        """How many deletion vectors the history left, and how many it replaced."""
        if self.h.version == "2":
            return
        t = self.h.table
        live = self.spark.sql(
            f"SELECT file_format, count(*) n FROM {t}.delete_files "
            "WHERE content = 1 GROUP BY file_format"
        ).collect()
        kinds = {r.file_format: r.n for r in live}
        dvs = kinds.get("PUFFIN", 0)
        self.h.coverage["deletion vectors (live)"] += dvs
        ever = (
            self.spark.sql(
                f"SELECT count(DISTINCT file_path, content_offset) n FROM {t}.all_delete_files "
                "WHERE file_format = 'PUFFIN'"
            )
            .first()
            .n
        )
        self.h.coverage["deletion vectors replaced"] += max(0, ever - dvs)
        if dvs and kinds.get("PARQUET"):
            self.h.coverage["DVs beside v2 position files"] += 1


def eq_delete_file(
    spark: Any,
    table: Any,
    spec: Any,
    partition: Any,
    path: str,
    ids: list[int],
    rows: int,
    metrics: bool,
) -> Any:
    """The JVM DeleteFile of an equality delete Parquet file already written at `path`,
    scoped to `partition` (None: global under `spec`). `metrics`: with the column metrics
    Iceberg's own writers record (null counts let mor use `=` instead of `<=>`; without them
    it must assume NULL keys)."""
    jvm = spark._jvm
    iceberg = jvm.org.apache.iceberg
    arr = spark.sparkContext._gateway.new_array(jvm.int, len(ids))
    for i, v in enumerate(ids):
        arr[i] = v
    b = (
        iceberg.FileMetadata.deleteFileBuilder(spec)
        .ofEqualityDeletes(arr)
        .withPath(path)
        .withFormat("parquet")
        .withFileSizeInBytes(table.io().newInputFile(path).getLength())
        .withRecordCount(rows)
    )
    if partition is not None:
        b = b.withPartition(partition)
    if metrics:
        b = b.withMetrics(
            iceberg.parquet.ParquetUtil.fileMetrics(
                table.io().newInputFile(path), iceberg.MetricsConfig.forTable(table)
            )
        )
    return b.build()


def _lit(v: Any, sql_type: str) -> str:
    if v is None:
        return f"CAST(NULL AS {sql_type})"
    if sql_type == "string":
        return "'" + str(v).replace("'", "''") + "'"
    if sql_type == "double":
        return f"CAST({v!r} AS DOUBLE)"
    if sql_type == "int":
        return f"CAST({v} AS INT)"
    return str(v)


def _nomatch(sql_type: str) -> Any:
    return {"bigint": 10**9, "int": 999, "string": "nobody", "double": -1.5}[sql_type]
