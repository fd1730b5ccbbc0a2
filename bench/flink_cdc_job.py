"""The Flink side of bench/flink_cdc.py: runs in the PyFlink environment (.venv/flink).

    .venv/flink/bin/python bench/flink_cdc_job.py SPEC.json

Streams TPC-H tables into Iceberg through Flink's upsert sink, as a CDC pipeline would: each
commit is one bounded job over one key range of the table (Parquet read with pyarrow): `+I` for
the range's rows, `+U` for a slice of the keys an earlier commit wrote (a changed measure), `-D`
for a slice of older keys. In upsert mode every `+I`/`+U` also deletes its key by equality, so
each commit holds data files, equality delete files as large as its key columns and position
deletes for keys written twice inside it, partition-scoped on the partitioned tables.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.oracle.flink_job import open_catalog  # noqa: E402


def _flink_type(t: Any) -> tuple[Any, str]:
    import pyarrow as pa
    from pyflink.common import Types

    if pa.types.is_int32(t):
        return Types.INT(), "INT"
    if pa.types.is_int64(t):
        return Types.LONG(), "BIGINT"
    if pa.types.is_decimal(t):
        return Types.BIG_DEC(), f"DECIMAL({t.precision}, {t.scale})"
    if pa.types.is_date32(t):
        return Types.SQL_DATE(), "DATE"
    if pa.types.is_floating(t):
        return Types.DOUBLE(), "DOUBLE"
    return Types.STRING(), "STRING"


def main(spec_path: str) -> int:
    spec = json.loads(open(spec_path).read())
    opened = open_catalog(spec, checkpoint_ms=600_000)
    if opened is None:
        return 2
    env, tenv, _ = opened
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyflink.common import Row, Types
    from pyflink.common.types import RowKind
    from pyflink.table.expressions import col

    db = f"{spec['catalog_name']}.{spec['database']}"
    counts: dict[str, int] = {}
    for t in spec["tables"]:
        arrow = pq.read_table(t["parquet"])
        kinds = [_flink_type(f.type) for f in arrow.schema]
        names = arrow.schema.names
        cols = ", ".join(f"`{n}` {k[1]}" for n, k in zip(names, kinds, strict=True))
        key = ", ".join(f"`{c}`" for c in t["key"])
        name = f"{db}.{t['name']}"
        tenv.execute_sql(
            f"CREATE TABLE {name} ({cols}, PRIMARY KEY ({key}) NOT ENFORCED) "
            f"PARTITIONED BY (`{t['partition']}`) WITH ('format-version'='2', "
            "'write.upsert.enabled'='true', 'write.parquet.compression-codec'='zstd')"
        )
        info = Types.ROW_NAMED(names, [k[0] for k in kinds])
        casts = [col(n).cast(_sql_type(k[1])).alias(n) for n, k in zip(names, kinds, strict=True)]
        rc, measure = t["range"], t["measure"]
        keys = arrow.column(rc)
        lo, hi = pc.min(keys).as_py(), pc.max(keys).as_py()
        width = (hi - lo) // t["commits"] + 1
        mi = names.index(measure)
        started = time.monotonic()

        def rows_of(a: int, b: int, arrow: Any = arrow, rc: str = rc) -> list[list]:
            k = arrow.column(rc)
            part = arrow.filter(pc.and_(pc.greater_equal(k, a), pc.less(k, b)))
            return [list(r.values()) for r in part.to_pylist()]

        for i in range(t["commits"]):
            events: list[Row] = []

            def emit(kind: Any, values: list, events: list = events) -> None:
                r = Row(*values)
                r.set_row_kind(kind)
                events.append(r)

            for v in rows_of(lo + i * width, lo + (i + 1) * width):
                emit(RowKind.INSERT, v)
            if i:  # upserts of keys an earlier commit wrote: a changed measure
                j = i // 2
                for v in rows_of(lo + j * width, lo + (j + 1) * width):
                    if v[names.index(rc)] % 29 == i % 29:
                        v[mi] = v[mi] + 1
                        emit(RowKind.UPDATE_AFTER, v)
            if i > 1:  # deletes of older keys, with their before-image
                j = i // 3
                for v in rows_of(lo + j * width, lo + (j + 1) * width):
                    if v[names.index(rc)] % 31 == i % 31:
                        emit(RowKind.DELETE, v)
            counts[f"{t['name']} events"] = counts.get(f"{t['name']} events", 0) + len(events)
            ds = env.from_collection(events, type_info=info)
            tenv.from_changelog_stream(ds).select(*casts).execute_insert(name).wait()
        print(
            f"  {t['name']}: {t['commits']} commits in {time.monotonic() - started:.0f}s",
            flush=True,
        )
    print(json.dumps(counts))
    return 0


def _sql_type(text: str) -> Any:
    from pyflink.table import DataTypes

    if text.startswith("DECIMAL"):
        p, s = text[8:-1].split(",")
        return DataTypes.DECIMAL(int(p), int(s))
    return {
        "INT": DataTypes.INT(),
        "BIGINT": DataTypes.BIGINT(),
        "DATE": DataTypes.DATE(),
        "DOUBLE": DataTypes.DOUBLE(),
        "STRING": DataTypes.STRING(),
    }[text]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
