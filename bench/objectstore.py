"""Tables on an object store with request latency: mor against Iceberg's reader, cold and warm.

    .venv/bin/python bench/objectstore.py                       # 2,000 files, 20 and 50 ms
    .venv/bin/python bench/objectstore.py --latency 0 20 50 --reps 3

SeaweedFS on 127.0.0.1 (tests/objectstore.py) behind a small proxy that holds every request
`--latency` ms before passing it on (what a request to S3 costs from a cluster: 10-50 ms) and
counts the requests by method. Both readers go through it: Spark's s3a (data files, and
Iceberg's reader for everything) and mor's driver (pyiceberg's FileIO: metadata, manifests,
sizes, position delete files).

The table: `--files` data files written by Iceberg's Java writer in `--commits` commits (one
data manifest each), then a merge-on-read DELETE that writes one position delete file per data
file it touches (`write.delete.granularity=file`), about `--pos-files` of them. Queries:
`count(*)`, a grouped aggregate, an id range. Per latency and query: the first run of each
reader after mor's caches are cleared ("cold": planning, sizes and delete files fetched again)
and the median of `--reps` more, alternating who goes first ("warm"); requests are the proxy's
count for one run; mor's planning alone, cold, is timed apart. Results must agree before any
time is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository


from tests.objectstore import KEY, SECRET, SeaweedFS  # noqa: E402
from tests.oracle.runtime import iceberg_session  # noqa: E402

_METHODS = (b"GET ", b"HEAD", b"PUT ", b"POST", b"DELE")


class DelayProxy:
    """TCP proxy on 127.0.0.1: each HTTP request is held `latency` seconds, then forwarded."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.latency = 0.0
        self.requests: Counter[str] = Counter()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0, limit=1 << 20)
        )
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return

        async def upstream() -> None:
            try:
                while data := await reader.read(1 << 16):
                    if data[:4] in _METHODS:
                        self.requests[data[:4].decode().strip()] += 1
                        if self.latency:
                            await asyncio.sleep(self.latency)
                    up_w.write(data)
                    await up_w.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                up_w.close()

        async def downstream() -> None:
            try:
                while data := await up_r.read(1 << 16):
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        await asyncio.gather(upstream(), downstream())

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def build(spark: Any, files: int, commits: int, pos_files: int) -> dict[str, int]:
    t = "local.db.t"
    spark.sql(
        f"CREATE TABLE {t} (id bigint, grp int, v double) USING iceberg TBLPROPERTIES ("
        "'format-version'='2', 'write.delete.mode'='merge-on-read', "
        "'write.delete.granularity'='file', 'write.distribution-mode'='none')"
    )
    per_commit = files // commits
    rows = per_commit * 500
    for c in range(commits):
        spark.range(c * rows, (c + 1) * rows).selectExpr(
            "id", "CAST(id % 10 AS INT) AS grp", "id / 3.0 AS v"
        ).repartition(per_commit).writeTo(t).append()
    # one position delete file per touched data file: the files of the first commits
    touched_rows = rows * pos_files // per_commit
    spark.sql(f"DELETE FROM {t} WHERE id % 97 = 0 AND id < {touched_rows}")
    got = spark.sql(
        f"SELECT content, count(*) n FROM {t}.files GROUP BY content ORDER BY content"
    ).collect()
    manifests = spark.sql(f"SELECT count(*) FROM {t}.manifests").first()[0]
    return {
        "data files": dict((r.content, r.n) for r in got).get(0, 0),
        "position delete files": dict((r.content, r.n) for r in got).get(1, 0),
        "manifests": manifests,
    }


QUERIES = {
    "count": "SELECT count(*) FROM {t}",
    "group_agg": "SELECT grp, count(*), sum(v) FROM {t} GROUP BY grp",
    "range": "SELECT count(*), sum(v) FROM {t} WHERE id BETWEEN 100000 AND 104999",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--commits", type=int, default=50)
    ap.add_argument("--pos-files", type=int, default=500)
    ap.add_argument("--latency", type=float, nargs="*", default=[20, 50], help="ms a request")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--queries", nargs="*", default=list(QUERIES))
    args = ap.parse_args(argv)

    import os

    with SeaweedFS(buckets=("whs",)) as store:
        proxy = DelayProxy(store.ports["s3.port"])
        conf = {
            **store.spark_conf(),
            "spark.hadoop.fs.s3a.endpoint": proxy.endpoint,
            "spark.hadoop.fs.s3a.connection.maximum": "64",
        }
        os.environ.update(
            AWS_ENDPOINT_URL=proxy.endpoint, AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET
        )
        spark = iceberg_session("s3a://whs/wh", False, conf)
        started = time.monotonic()
        facts = build(spark, args.files, args.commits, args.pos_files)
        print(f"table written in {time.monotonic() - started:.0f}s: {facts}")

        from mor import mor_sql, plan_query
        from mor.planner.requests import REQUESTS, since
        from mor.planner.scan_planning import clear_manifest_cache
        from mor.planner.state import caches

        path = "iceberg_scan('s3a://whs/wh/db/t')"

        def ours(q: str) -> tuple[list, int]:
            before = REQUESTS.snapshot()
            rows = mor_sql(QUERIES[q].format(t=path), spark=spark).collect()
            return rows, sum(since(before).values())

        def native(q: str) -> tuple[list, int]:
            return spark.sql(QUERIES[q].format(t="local.db.t")).collect(), 0

        def timed(fn: Any, q: str) -> tuple[float, list, int, int]:
            proxy.requests.clear()
            t0 = time.perf_counter()
            rows, driver = fn(q)
            return time.perf_counter() - t0, rows, sum(proxy.requests.values()), driver

        def bag(rows: list) -> Counter:
            return Counter(
                tuple(float(f"{x:.9g}") if isinstance(x, float) else x for x in r) for r in rows
            )

        print(
            f"{'latency':>7} {'query':<10} {'':>5} {'ours':>8} {'native':>8} {'ours/nat':>8}"
            f" {'requests ours (driver) / native':>32}"
        )
        for latency in args.latency:
            proxy.latency = latency / 1000
            for q in args.queries:
                # planning alone, cold: what the driver waits for before Spark starts
                clear_manifest_cache(caches())
                proxy.requests.clear()
                t0 = time.perf_counter()
                plan_query(QUERIES[q].format(t=path))
                plan_s, plan_n = time.perf_counter() - t0, sum(proxy.requests.values())
                clear_manifest_cache(caches())
                a = timed(ours, q)
                b = timed(native, q)
                if bag(a[1]) != bag(b[1]):
                    print(f"{q}: results differ: ours {a[1][:3]} native {b[1][:3]}")
                    return 1
                warm: dict[str, list[float]] = {"ours": [], "native": []}
                for r in range(args.reps):
                    order = [("ours", ours), ("native", native)]
                    for name, fn in order if r % 2 == 0 else order[::-1]:
                        warm[name].append(timed(fn, q)[0])
                wa, wb = statistics.median(warm["ours"]), statistics.median(warm["native"])
                print(
                    f"{latency:>5.0f}ms {q:<10} {'cold':>5} {a[0]:>7.2f}s {b[0]:>7.2f}s "
                    f"{a[0] / b[0]:>8.2f} {a[2]:>14} ({a[3]}) / {b[2]}"
                )
                print(
                    f"{'':>7} {'':<10} {'warm':>5} {wa:>7.2f}s {wb:>7.2f}s {wa / wb:>8.2f}"
                    f"   (mor planning cold: {plan_s:.2f}s, {plan_n} requests)",
                    flush=True,
                )
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
