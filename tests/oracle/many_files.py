"""Iceberg tables of thousands to a million data files, and mor held to Iceberg's reader on them.

    python -m tests.oracle.many_files [--files 2000]   (tests/test_oracle.py runs it; exit 0 when
                                                       every query agrees, with and without a
                                                       name mapping, by each read method)

bench/scale.py builds its tables with `build` too.

How they are made (writing a million real data files through Spark would take hours):
- Iceberg's own Spark writer creates the table (`CREATE TABLE ... PARTITIONED BY (p)`), so its
  first metadata file, schema, spec and properties are genuine; it also writes one row into a
  small template table once, whose manifest and manifest list give the Avro schemas and file
  metadata Iceberg's Java writer uses.
- The data files are hard links to a few hundred real Parquet files written with pyarrow, one per
  partition and `variant` (each with its own id range, `rows` rows, the partition's value in
  column `p`), with Parquet field ids, or without them and with a `schema.name-mapping.default`
  (as `add_files` and Hive/Delta migrations leave tables). Every data file has a path of its
  own, so deletes name files exactly as in a real table.
- Position delete files (pyarrow, one per partition) delete two rows of a fraction of the data
  files; on format 3 they are deletion vectors instead (one Puffin file per partition, a blob
  per data file). Equality delete files (one per partition, on `id`) delete keys of variant 0,
  so a quarter of the files (with the default 4 variants) meet an equality delete.
- Manifests (deflate-compressed Avro, as Iceberg writes them) and manifest lists are written
  with fastavro in those schemas, with the column metrics Iceberg records (value, null and NaN
  counts, lower and upper bounds), clustered by partition as `rewrite_manifests` leaves them.
  Two snapshots: the data (sequence number 1), then the deletes (2). The metadata JSON that
  adds them is the created table's own with the snapshots, refs and logs added.

Tables are cached in the warehouse under a name that says what they hold.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

TEMPLATE = "local.scale.template"
COLUMNS = "id bigint, p int, k int, v double, s string"
PROPS = (
    "'format-version'='{version}', 'write.delete.mode'='merge-on-read', "
    "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read'"
)
FIELD_IDS = {"id": 1, "p": 2, "k": 3, "v": 4, "s": 5}


@dataclass(frozen=True)
class ScaleSpec:
    files: int
    partitions: int = 100
    variants: int = 4
    rows: int = 100  # rows per data file
    per_manifest: int = 5000  # data file entries per manifest
    mapping: bool = False  # files without field ids, read through a name mapping
    pos_frac: float = 0.1  # fraction of data files with position deletes (two rows each)
    eq_keys: int = 0  # equality delete keys per partition (0: no equality deletes)
    version: int = 2  # 3: position deletes as deletion vectors

    @property
    def name(self) -> str:
        def n(x: int) -> str:
            return f"{x // 1000}k" if x < 1_000_000 else f"{x // 1_000_000}m"

        pos = str(self.pos_frac).replace(".", "p")
        return (
            f"f{n(self.files)}_p{self.partitions}_r{self.rows}"
            f"{'_nm' if self.mapping else ''}_pos{pos}_eq{self.eq_keys}_v{self.version}"
        )

    def partition_of(self, i: int) -> int:
        """Files are numbered partition by partition (clustered manifests)."""
        return i * self.partitions // self.files

    def variant_of(self, i: int) -> int:
        return i % self.variants

    def has_pos(self, i: int) -> bool:
        step = round(1 / self.pos_frac) if self.pos_frac else 0
        return bool(step) and i % step == 1 % step  # step 1: every file

    def first_id(self, p: int, variant: int) -> int:
        return (p * self.variants + variant) * self.rows


def _schema(mapping: bool) -> pa.Schema:
    def field(name: str, t: pa.DataType) -> pa.Field:
        md = None if mapping else {b"PARQUET:field_id": str(FIELD_IDS[name]).encode()}
        return pa.field(name, t, nullable=True, metadata=md)

    return pa.schema(
        [
            field("id", pa.int64()),
            field("p", pa.int32()),
            field("k", pa.int32()),
            field("v", pa.float64()),
            field("s", pa.string()),
        ]
    )


def _base_rows(spec: ScaleSpec, p: int, variant: int) -> dict[str, list[Any]]:
    ids = list(range(spec.first_id(p, variant), spec.first_id(p, variant) + spec.rows))
    return {
        "id": ids,
        "p": [p] * len(ids),
        "k": [i % 1000 for i in ids],
        "v": [i * 0.5 for i in ids],
        "s": [f"s{i % 97}" for i in ids],
    }


def _le(fmt: str, v: Any) -> bytes:
    return struct.pack(fmt, v)


def _metrics(rows: dict[str, list[Any]]) -> dict[str, Any]:
    """Column metrics as Iceberg records them (single-value serialization of the bounds)."""
    n = len(rows["id"])
    fmt = {"id": "<q", "p": "<i", "k": "<i", "v": "<d"}
    lower = [{"key": FIELD_IDS[c], "value": _le(f, min(rows[c]))} for c, f in fmt.items()]
    upper = [{"key": FIELD_IDS[c], "value": _le(f, max(rows[c]))} for c, f in fmt.items()]
    lower.append({"key": 5, "value": min(rows["s"]).encode()})
    upper.append({"key": 5, "value": max(rows["s"]).encode()})
    return {
        "value_counts": [{"key": i, "value": n} for i in range(1, 6)],
        "null_value_counts": [{"key": i, "value": 0} for i in range(1, 6)],
        "nan_value_counts": [{"key": 4, "value": 0}],
        "lower_bounds": lower,
        "upper_bounds": upper,
    }


def _template(spark: Any, warehouse: Path) -> dict[str, Any]:
    """Avro schemas and metadata of a manifest and manifest list Iceberg's Java writer made."""
    cached = warehouse / "scale" / "template.json"
    if cached.exists():
        return json.loads(cached.read_text())
    spark.sql(f"DROP TABLE IF EXISTS {TEMPLATE}")
    spark.sql(
        f"CREATE TABLE {TEMPLATE} ({COLUMNS}) USING iceberg PARTITIONED BY (p) "
        f"TBLPROPERTIES ({PROPS.format(version=2)})"
    )
    spark.sql(f"INSERT INTO {TEMPLATE} VALUES (1, 0, 1, 0.5, 'a')")
    meta = warehouse / "scale" / "template" / "metadata"
    out: dict[str, Any] = {}
    for f in sorted(meta.glob("*.avro")):
        with open(f, "rb") as fh:
            r = fastavro.reader(fh)
            kind = "list" if f.name.startswith("snap-") else "manifest"
            out[kind] = {
                "schema": r.writer_schema,
                "metadata": {k: v for k, v in r.metadata.items() if not k.startswith("avro.")},
            }
    cached.write_text(json.dumps(out))
    return out


def _write_avro(path: Path, schema: Any, metadata: dict[str, str], records: Any) -> int:
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), records, codec="deflate", metadata=metadata)
    data = buf.getvalue()
    path.write_bytes(data)
    return len(data)


def _file_name(location: Path, p: int, i: int, suffix: str = "parquet") -> str:
    h = hashlib.blake2b(str(i).encode(), digest_size=16).hexdigest()
    u = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
    return f"{location}/data/p={p}/{i % 1000:05d}-{i // 1000}-{u}-00001.{suffix}"


def build(spark: Any, warehouse: Path, spec: ScaleSpec) -> tuple[str, Path]:
    """The table of `spec` (made unless cached): its name for Iceberg's reader, its location."""
    name = f"local.scale.{spec.name}"
    location = warehouse / "scale" / spec.name
    hint = location / "metadata" / "version-hint.text"
    if hint.exists() and hint.read_text().strip() == "2":
        return name, location
    if spec.version != 2:
        raise SystemExit(
            "tests/oracle/many_files.py writes format version 2 tables only "
            "(its v3 metadata lacks row lineage)"
        )
    t0 = time.time()
    template = _template(spark, warehouse)
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(
        f"CREATE TABLE {name} ({COLUMNS}) USING iceberg PARTITIONED BY (p) "
        f"TBLPROPERTIES ({PROPS.format(version=spec.version)})"
    )
    meta_dir = location / "metadata"
    created = json.loads((meta_dir / "v1.metadata.json").read_text())
    _write_table(spec, location, created, template)
    print(f"built {name} in {time.time() - t0:.0f} s", flush=True)
    return name, location


def _write_table(
    spec: ScaleSpec, location: Path, created: dict[str, Any], template: dict[str, Any]
) -> None:
    base_dir = location / "base"
    base_dir.mkdir(parents=True, exist_ok=True)
    schema = _schema(spec.mapping)
    bases: dict[tuple[int, int], tuple[Path, int, dict[str, Any]]] = {}
    for p in range(spec.partitions):
        for v in range(spec.variants):
            rows = _base_rows(spec, p, v)
            path = base_dir / f"p{p}_v{v}.parquet"
            pq.write_table(pa.table(rows, schema=schema), path)
            bases[(p, v)] = (path, path.stat().st_size, _metrics(rows))
    snap1, snap2 = _snapshot_id(spec, 1), _snapshot_id(spec, 2)
    meta_dir = location / "metadata"
    m_schema, m_meta = template["manifest"]["schema"], dict(template["manifest"]["metadata"])
    m_meta["schema"] = json.dumps(created["schemas"][0])
    data_lists: list[dict[str, Any]] = []
    by_part: dict[int, list[int]] = {}
    made_dirs: set[int] = set()
    entries: list[dict[str, Any]] = []
    for i in range(spec.files):
        p, v = spec.partition_of(i), spec.variant_of(i)
        path = _file_name(location, p, i)
        if p not in made_dirs:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            made_dirs.add(p)
        if not os.path.exists(path):
            os.link(bases[(p, v)][0], path)
        by_part.setdefault(p, []).append(i)
        entries.append(_entry(snap1, path, p, spec.rows, bases[(p, v)][1], bases[(p, v)][2]))
        if len(entries) == spec.per_manifest or i == spec.files - 1:
            data_lists.append(_manifest(meta_dir, m_schema, m_meta, "data", entries, snap1, seq=1))
            entries = []
    delete_lists = _deletes(spec, location, meta_dir, m_schema, m_meta, by_part, bases, snap2)
    l_schema, l_meta = template["list"]["schema"], template["list"]["metadata"]
    list1 = _manifest_list(meta_dir, l_schema, l_meta, snap1, None, 1, data_lists)
    list2 = _manifest_list(meta_dir, l_schema, l_meta, snap2, snap1, 2, data_lists + delete_lists)
    now = int(time.time() * 1000)
    total_rows = spec.files * spec.rows
    n_pos = sum(1 for i in range(spec.files) if spec.has_pos(i))
    meta = dict(created)
    meta["last-sequence-number"] = 2
    meta["last-updated-ms"] = now
    meta["snapshots"] = [
        {
            "sequence-number": 1,
            "snapshot-id": snap1,
            "timestamp-ms": now - 1000,
            "summary": {
                "operation": "append",
                "total-records": str(total_rows),
                "total-data-files": str(spec.files),
                "total-delete-files": "0",
                "total-position-deletes": "0",
                "total-equality-deletes": "0",
            },
            "manifest-list": str(list1),
            "schema-id": 0,
        },
        {
            "sequence-number": 2,
            "snapshot-id": snap2,
            "parent-snapshot-id": snap1,
            "timestamp-ms": now,
            "summary": {
                "operation": "overwrite",
                "total-records": str(total_rows),
                "total-data-files": str(spec.files),
                "total-delete-files": str(sum(1 for m in delete_lists for _ in [m])),
                "total-position-deletes": str(2 * n_pos),
                "total-equality-deletes": str(spec.eq_keys * spec.partitions),
            },
            "manifest-list": str(list2),
            "schema-id": 0,
        },
    ]
    meta["current-snapshot-id"] = snap2
    meta["refs"] = {"main": {"snapshot-id": snap2, "type": "branch"}}
    meta["snapshot-log"] = [
        {"timestamp-ms": now - 1000, "snapshot-id": snap1},
        {"timestamp-ms": now, "snapshot-id": snap2},
    ]
    meta["metadata-log"] = [
        {
            "timestamp-ms": created["last-updated-ms"],
            "metadata-file": str(meta_dir / "v1.metadata.json"),
        }
    ]
    if spec.mapping:
        mapping = [{"field-id": fid, "names": [n]} for n, fid in FIELD_IDS.items()]
        meta["properties"] = {
            **meta.get("properties", {}),
            "schema.name-mapping.default": json.dumps(mapping),
        }
    (meta_dir / "v2.metadata.json").write_text(json.dumps(meta))
    (meta_dir / "version-hint.text").write_text("2")


def _snapshot_id(spec: ScaleSpec, n: int) -> int:
    return int.from_bytes(
        hashlib.blake2b(f"{spec.name}/{n}".encode(), digest_size=7).digest(), "big"
    )


def _entry(
    snap: int,
    path: str,
    p: int,
    rows: int,
    size: int,
    metrics: dict[str, Any],
    content: int = 0,
    equality_ids: list[int] | None = None,
    dv: tuple[int, int, str] | None = None,
    fmt: str = "PARQUET",
) -> dict[str, Any]:
    return {
        "status": 1,
        "snapshot_id": snap,
        "sequence_number": None,
        "file_sequence_number": None,
        "data_file": {
            "content": content,
            "file_path": path,
            "file_format": fmt,
            "partition": {"p": p},
            "record_count": rows,
            "file_size_in_bytes": size,
            "column_sizes": None,
            **metrics,
            "key_metadata": None,
            "split_offsets": None if dv else [4],
            "equality_ids": equality_ids,
            "sort_order_id": 0 if content != 1 else None,
            "referenced_data_file": dv[2] if dv else None,
            **({"content_offset": dv[0], "content_size_in_bytes": dv[1]} if dv else {}),
        },
    }


def _manifest(
    meta_dir: Path,
    schema: Any,
    metadata: dict[str, str],
    content: str,
    entries: list[dict[str, Any]],
    snap: int,
    seq: int,
) -> dict[str, Any]:
    path = meta_dir / f"{uuid.uuid4()}-m0.avro"
    length = _write_avro(path, schema, {**metadata, "content": content}, entries)
    parts = [e["data_file"]["partition"]["p"] for e in entries]
    rows = sum(e["data_file"]["record_count"] for e in entries)
    return {
        "manifest_path": str(path),
        "manifest_length": length,
        "partition_spec_id": 0,
        "content": 0 if content == "data" else 1,
        "sequence_number": seq,
        "min_sequence_number": seq,
        "added_snapshot_id": snap,
        "added_files_count": len(entries),
        "existing_files_count": 0,
        "deleted_files_count": 0,
        "added_rows_count": rows,
        "existing_rows_count": 0,
        "deleted_rows_count": 0,
        "partitions": [
            {
                "contains_null": False,
                "contains_nan": False,
                "lower_bound": _le("<i", min(parts)),
                "upper_bound": _le("<i", max(parts)),
            }
        ],
        "key_metadata": None,
    }


def _manifest_list(
    meta_dir: Path,
    schema: Any,
    metadata: dict[str, str],
    snap: int,
    parent: int | None,
    seq: int,
    manifests: list[dict[str, Any]],
) -> Path:
    path = meta_dir / f"snap-{snap}-1-{uuid.uuid4()}.avro"
    md = {
        **metadata,
        "snapshot-id": str(snap),
        "parent-snapshot-id": str(parent) if parent else "null",
        "sequence-number": str(seq),
    }
    _write_avro(path, schema, md, manifests)
    return path


POS_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": b"2147483546"}),
        pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": b"2147483545"}),
    ]
)
EQ_SCHEMA = pa.schema([pa.field("id", pa.int64(), True, {b"PARQUET:field_id": b"1"})])


def _deletes(
    spec: ScaleSpec,
    location: Path,
    meta_dir: Path,
    schema: Any,
    metadata: dict[str, str],
    by_part: dict[int, list[int]],
    bases: dict[tuple[int, int], tuple[Path, int, dict[str, Any]]],
    snap: int,
) -> list[dict[str, Any]]:
    """Delete files, one of each kind per partition, and their manifests (sequence number 2)."""
    from mor.physical.deletes.dv import encode

    deleted = [0, spec.rows // 2]
    entries = []
    for p, files in sorted(by_part.items()):
        with_pos = [(i, _file_name(location, p, i)) for i in files if spec.has_pos(i)]
        if with_pos and spec.version >= 3:
            puffin = Path(_file_name(location, p, 10**9 + p, "puffin"))
            blob, offset = io.BytesIO(), 4
            blob.write(b"PFA1")
            dvs = []
            for _, path in with_pos:
                data = encode(deleted)
                dvs.append((offset, len(data), path))
                blob.write(data)
                offset += len(data)
            _puffin_footer(blob, dvs)
            puffin.write_bytes(blob.getvalue())
            for off, length, path in dvs:
                entries.append(
                    _entry(
                        snap,
                        str(puffin),
                        p,
                        len(deleted),
                        puffin.stat().st_size,
                        _no_metrics(),
                        content=1,
                        dv=(off, length, path),
                        fmt="PUFFIN",
                    )
                )
        elif with_pos:
            paths = sorted(path for _, path in with_pos)
            rows = {"file_path": [x for x in paths for _ in deleted], "pos": deleted * len(paths)}
            out = Path(_file_name(location, p, 10**9 + p))
            pq.write_table(pa.table(rows, schema=POS_SCHEMA), out)
            bounds = {
                "value_counts": None,
                "null_value_counts": None,
                "nan_value_counts": None,
                "lower_bounds": [{"key": 2147483546, "value": paths[0].encode()}],
                "upper_bounds": [{"key": 2147483546, "value": paths[-1].encode()}],
            }
            entries.append(
                _entry(snap, str(out), p, len(rows["pos"]), out.stat().st_size, bounds, content=1)
            )
        if spec.eq_keys:
            first = spec.first_id(p, 0)
            # keys of variant 0 (every `rows // eq_keys`-th row), then keys past every file's ids
            step = max(spec.rows // spec.eq_keys, 1)
            keys = [first + j * step for j in range(min(spec.eq_keys, spec.rows))]
            keys += [first + spec.rows * 10**6 + j for j in range(spec.eq_keys - len(keys))]
            out = Path(_file_name(location, p, 2 * 10**9 + p))
            pq.write_table(pa.table({"id": keys}, schema=EQ_SCHEMA), out)
            bounds = {
                "value_counts": [{"key": 1, "value": len(keys)}],
                "null_value_counts": [{"key": 1, "value": 0}],
                "nan_value_counts": None,
                "lower_bounds": [{"key": 1, "value": _le("<q", min(keys))}],
                "upper_bounds": [{"key": 1, "value": _le("<q", max(keys))}],
            }
            entries.append(
                _entry(
                    snap,
                    str(out),
                    p,
                    len(keys),
                    out.stat().st_size,
                    bounds,
                    content=2,
                    equality_ids=[1],
                )
            )
    out_lists = []
    for i in range(0, len(entries), spec.per_manifest):
        out_lists.append(
            _manifest(
                meta_dir,
                schema,
                metadata,
                "deletes",
                entries[i : i + spec.per_manifest],
                snap,
                seq=2,
            )
        )
    return out_lists


def _no_metrics() -> dict[str, Any]:
    return {
        "value_counts": None,
        "null_value_counts": None,
        "nan_value_counts": None,
        "lower_bounds": None,
        "upper_bounds": None,
    }


def _puffin_footer(out: io.BytesIO, blobs: list[tuple[int, int, str]]) -> None:
    """A Puffin footer listing the deletion-vector blobs (the spec's layout, uncompressed)."""
    payload = json.dumps(
        {
            "blobs": [
                {
                    "type": "deletion-vector-v1",
                    "fields": [2147483645],
                    "snapshot-id": -1,
                    "sequence-number": -1,
                    "offset": off,
                    "length": length,
                    "properties": {"referenced-data-file": path, "cardinality": "2"},
                }
                for off, length, path in blobs
            ]
        }
    ).encode()
    out.write(b"PFA1" + payload + struct.pack("<i", len(payload)) + b"\x00\x00\x00\x00" + b"PFA1")


# what the differential run asks of both readers; {lo} {hi}: an id range of a few files
QUERIES = (
    "SELECT count(*) FROM {t}",
    "SELECT count(*), sum(v) FROM {t} WHERE k >= 10",
    "SELECT p, count(*) AS n, sum(k) FROM {t} GROUP BY p",
    "SELECT * FROM {t} WHERE id BETWEEN {lo} AND {hi}",
    "SELECT id, s FROM {t} WHERE p = 7",
    "SELECT _file, _pos, id FROM {t} WHERE p = 3",
    "SELECT * FROM {t}",
)
# the read methods: defaults (file lists, position bitmaps), the anti-join for positions, and
# files read by path (the fallback when Spark cannot read a file list)
METHODS = ({}, {"position_bitmap_bytes": 0}, {"file_lists": False})


def main(argv: list[str] | None = None) -> int:
    import argparse
    import shutil
    import tempfile

    from mor import mor_sql
    from tests.oracle.run import _bag
    from tests.oracle.runtime import RuntimeUnavailable, iceberg_session

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--keep", help="a warehouse to keep (and reuse) instead of a temporary one")
    args = ap.parse_args(argv)
    warehouse = Path(args.keep or tempfile.mkdtemp(prefix="mor-many-files-"))
    try:
        spark = iceberg_session(warehouse, small_data=True)
    except RuntimeUnavailable as e:
        print(f"many files: the Iceberg runtime is unavailable: {e}")
        return 2
    started = time.monotonic()
    failures, n = [], 0
    try:
        for mapping in (False, True):
            spec = ScaleSpec(
                files=args.files,
                partitions=20,
                rows=20,
                per_manifest=args.files // 8,
                mapping=mapping,
                pos_frac=0.1,
                eq_keys=3,
            )
            name, location = build(spark, warehouse, spec)
            lo = spec.first_id(5, 2)
            for sql in QUERIES:
                text = sql.replace("{lo}", str(lo)).replace("{hi}", str(lo + 2 * spec.rows))
                theirs = _bag(spark.sql(text.format(t=name)).collect())
                for settings in METHODS:
                    n += 1
                    at = f"iceberg_scan('{location}')"
                    ours = _bag(
                        mor_sql(text.format(t=at), spark=spark, settings=settings).collect()
                    )
                    if ours != theirs:
                        failures.append(
                            f"{spec.name} {settings}: {text}\n  mor rows {sum(ours.values())}, "
                            f"iceberg rows {sum(theirs.values())}; missing from mor: "
                            f"{list((theirs - ours).elements())[:3]}, extra in mor: "
                            f"{list((ours - theirs).elements())[:3]}"
                        )
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(warehouse, ignore_errors=True)
    for f in failures:
        print(f)
    print(
        f"many files: {args.files} data files a table, {n} queries, {len(failures)} differences, "
        f"{time.monotonic() - started:.0f}s"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
