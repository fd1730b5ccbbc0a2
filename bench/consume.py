"""A consumer's one-commit batch on a table of a long history, against a one-commit table_changes.

    .venv/bin/python bench/consume.py                    # 1,000 commits, 5 reps
    .venv/bin/python bench/consume.py --commits 200 --reps 3

The table (built once, cached in `--warehouse` by commit count) is written with pyiceberg
(mor.writer.tables): `--commits` commits, each appending one small data file, every 10th also a
position delete of a row of an earlier file, every 7th an equality delete of one id. Measured,
each `--reps` times after an untimed warm-up, alternating:

- **batch**: `stream_changes(table, checkpoint, start_snapshot_id=<the last commit's parent>)`
  with a fresh checkpoint: checkpoint read, table metadata read, the batch planned and written
  as pending, its rows collected, the checkpoint committed;
- **table_changes**: `changes(table, start_snapshot_id=<parent>, end_snapshot_id=<last>)` and
  its rows collected.

Both are checked to give the same rows. Prints medians and the ratio, and how many data files
the batch's plan reads (EXPLAIN's scans: only the files the commit touched).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository

from bench.harness import write_json  # noqa: E402


def build(warehouse: Path, commits: int) -> Any:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from mor.api import default_catalog
    from mor.writer.tables import TableWriter

    cat = default_catalog(str(warehouse / f"c{commits}"))
    name = "bench.history"
    if cat.table_exists(name) and (warehouse / f"c{commits}" / "BUILT").exists():
        return cat
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "v", StringType(), required=False),
    )
    w = TableWriter(cat, name, schema)
    files = []
    t0 = time.perf_counter()
    for i in range(commits):
        ids = pa.array(range(i * 10, i * 10 + 10), pa.int64())
        new = w.data_files(pa.table({"id": ids, "v": [f"v{i}"] * 10}))
        deletes = []
        if i % 10 == 9:
            f = files[i // 2]
            deletes.append(w.position_delete_file({f.file_path: [i % 10]}, f))
        if i % 7 == 6:
            deletes.append(w.equality_delete_file([1], [{1: i * 5}]))
        w.commit(data=new, deletes=deletes)
        files += new
    (warehouse / f"c{commits}" / "BUILT").write_text("")
    print(f"table of {commits} commits written in {time.perf_counter() - t0:.0f}s", flush=True)
    return cat


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warehouse", default=str(Path(tempfile.gettempdir()) / "mor-bench-consume"))
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    from mor import changes, explain, stream_changes
    from mor.physical import local_session

    warehouse = Path(args.warehouse)
    cat = build(warehouse, args.commits)
    spark = local_session("local[2]", {"spark.ui.enabled": "false"})
    table = cat.load_table("bench.history")
    last = table.current_snapshot()
    parent = last.parent_snapshot_id
    tmp = Path(tempfile.mkdtemp(prefix="mor-consume-"))
    n = 0

    def batch() -> list:
        """A one-commit batch of a new checkpoint: planned, collected, committed."""
        nonlocal n
        n += 1
        cp = str(tmp / f"cp{n}.json")
        batches = stream_changes(
            "bench.history", cp, catalog=cat, spark=spark, start_snapshot_id=parent
        )
        b = next(batches)
        rows = b.df.collect()
        b.commit()
        return rows

    def whole() -> list:
        return changes(
            "bench.history",
            catalog=cat,
            spark=spark,
            start_snapshot_id=parent,
            end_snapshot_id=last.snapshot_id,
        ).collect()

    if sorted(map(tuple, batch())) != sorted(map(tuple, whole())):
        raise SystemExit("RESULTS DIFFER: no time reported")
    times: dict[str, list[float]] = {"batch": [], "table_changes": []}
    for _ in range(args.reps):
        for label, fn in (("batch", batch), ("table_changes", whole)):
            t0 = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    shown = explain(
        f"SELECT * FROM table_changes('bench.history', {parent}, {last.snapshot_id})",
        catalog=cat,
        check=False,
    )
    read = [int(x) for x in re.findall(r"files\s+data (\d+)", shown)]
    total = sum(len(m.fetch_manifest_entry(table.io)) for m in last.manifests(table.io))
    ratio = med["batch"] / med["table_changes"]
    print(
        f"{args.commits} commits: one-commit batch {med['batch']:.3f}s, table_changes "
        f"{med['table_changes']:.3f}s, batch/table_changes {ratio:.2f}; "
        f"the batch's scans list {sum(read)} data file(s) (of {total} manifest entries "
        "in the snapshot)"
    )
    write_json(args.json, {"commits": args.commits, **med, "files_read": read})
    return 0


if __name__ == "__main__":
    sys.exit(main())
