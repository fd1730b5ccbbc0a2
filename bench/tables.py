"""Benchmark tables written by the real Iceberg Java writer (through its Spark runtime).

A table `local.bench.<name>`: `rows` rows in `files` data files, columns
(id bigint, k int, grp string, v double, pad string). Deletes:
- position: Spark SQL `DELETE ... WHERE id % m = 0` in merge-on-read mode (position delete
  files on format v2, deletion vectors on v3);
- equality on {id}: RowDelta with the keys `id % m = 1`;
- equality on two id sets: {id} with `id % m = 1` and {grp, k} with a few (grp, k) pairs.
The fraction of each kind is 1/m. Tables are cached in the warehouse by name.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

PROPS = (
    "'format-version'='{version}', 'write.delete.mode'='merge-on-read', "
    "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read', "
    "'write.distribution-mode'='none'"
)


def table_name(
    rows: int, pos: float, eq: float, eq_sets: int, version: int = 2, pos_files: int = 8
) -> str:
    def pct(x: float) -> str:
        return str(x).replace(".", "p")

    v3 = "_v3" if version == 3 else ""
    touched = f"_pf{pos_files}" if pos_files != 8 else ""
    return f"t{rows // 1_000_000}m_pos{pct(pos)}_eq{pct(eq)}_s{eq_sets}{v3}{touched}"


def build(
    spark: Any,
    warehouse: Path,
    rows: int,
    pos: float,
    eq: float,
    eq_sets: int,
    files: int = 8,
    version: int = 2,
    pos_files: int = 8,
) -> str:
    """Create the table unless it exists; returns its full name. `version` 3: the position
    deletes are deletion vectors (what Iceberg's Spark writer makes on v3 tables).
    `pos_files`: how many of the 8 data files (each a range of ids) the position deletes
    touch, as a MERGE or DELETE touches the files of the rows it changes."""
    base = table_name(rows, pos, eq, eq_sets, version, pos_files)
    name = f"local.bench.{base}"
    location = warehouse / "bench" / base
    if (location / "metadata" / "version-hint.text").exists():
        return name
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(
        f"CREATE TABLE {name} (id bigint, k int, grp string, v double, pad string) "
        f"USING iceberg TBLPROPERTIES ({PROPS.format(version=version)})"
    )
    spark.range(0, rows, 1, files).selectExpr(
        "id",
        "CAST(id % 1000 AS INT) AS k",
        "concat('g', CAST(id % 50 AS STRING)) AS grp",
        "CAST(id % 9973 AS DOUBLE) / 7 AS v",
        "repeat('x', 20) AS pad",
    ).writeTo(name).append()
    if pos:
        touched = rows * pos_files // files
        spark.sql(f"DELETE FROM {name} WHERE id % {round(1 / pos)} = 0 AND id < {touched}")
    if eq:
        m = round(1 / eq)
        table = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            spark._jsparkSession, name
        )
        ids = pa.array(range(1, rows, m), pa.int64())
        deletes = [_eq_file(spark, table, location, {"id": (1, ids)}, [1])]
        if eq_sets == 2:
            # a second id set {grp, k}: (grp, k) pairs that remove about the same share again
            pairs = [(f"g{i % 50}", i % 1000) for i in range(2, 1000, m)]
            cols = {
                "grp": (3, pa.array([p[0] for p in pairs])),
                "k": (2, pa.array([p[1] for p in pairs], pa.int32())),
            }
            deletes.append(_eq_file(spark, table, location, cols, [3, 2]))
        delta = table.newRowDelta()
        for d in deletes:
            delta = delta.addDeletes(d)
        delta.commit()
    return name


def _eq_file(
    spark: Any, table: Any, location: Path, cols: dict[str, tuple[int, pa.Array]], ids: list[int]
) -> Any:
    fields = [
        pa.field(n, a.type, metadata={b"PARQUET:field_id": str(i).encode()})
        for n, (i, a) in cols.items()
    ]
    t = pa.table([a for _, a in cols.values()], schema=pa.schema(fields))
    path = str(location / "data" / f"eqdel-{uuid.uuid4()}.parquet")
    pq.write_table(t, path)
    arr = spark.sparkContext._gateway.new_array(spark._jvm.int, len(ids))
    for i, v in enumerate(ids):
        arr[i] = v
    return (
        spark._jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(table.spec())
        .ofEqualityDeletes(arr)
        .withPath(path)
        .withFormat("parquet")
        .withFileSizeInBytes(Path(path).stat().st_size)
        .withRecordCount(t.num_rows)
        .withMetrics(  # column metrics as Iceberg's own writers record them
            spark._jvm.org.apache.iceberg.parquet.ParquetUtil.fileMetrics(
                table.io().newInputFile(path),
                spark._jvm.org.apache.iceberg.MetricsConfig.forTable(table),
            )
        )
        .build()
    )


def data_files(location: Path) -> list[str]:
    """The table's current data files, for the plain-Parquet peer (deletes ignored)."""
    from pyiceberg.table import StaticTable

    meta = sorted(
        (location / "metadata").glob("v*.metadata.json"),
        key=lambda p: int(p.name[1:].split(".")[0]),
    )[-1]
    t = StaticTable.from_metadata(str(meta))
    snap = t.metadata.current_snapshot()
    out = []
    for m in snap.manifests(t.io):
        for e in m.fetch_manifest_entry(t.io):
            if e.data_file.content.value == 0:
                out.append(e.data_file.file_path)
    return out
