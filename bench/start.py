"""What a command pays before its query runs, and what it pays whole against a running server.

    .venv/bin/python bench/start.py                  # mor's own start, --reps 7
    .venv/spark41/bin/python bench/start.py --server # also `mor run` whole: server, own session

Every `mor` command is a new process. Measured in new processes, in turns, `--reps` times:

- **python**: `python -c pass`, the interpreter alone (the floor);
- **mor start**: a process that does what `mor run` does before it needs Spark: imports the CLI
  and what running a statement imports, reads the config, loads the embedded catalog and the
  demo table and plans the demo query (no Spark). The target: under 1 s whole;
- with `--server` (pyspark 4.x): `mor run` of the demo query (examples/01_live_rows.sql) as a
  user types it, timed from launch to exit, against the server `mor server start` starts here
  (**mor run, server**), and with a session of its own (**mor run, own session**: `--set
  server=off`, a JVM started by the command); `mor run -e` of a grouped aggregate against the
  server (**mor run -e agg, server**) beside **bare Connect client**: a process that imports
  pyspark's Connect client alone, connects to the same server and runs the same aggregate over
  the table's data files read as plain Parquet (no deletes applied: the floor a Connect
  command pays). The targets: under 2 s against the server, at most 1.3x the bare client.

The demo table is built (mor/demo.py) in `--warehouse` (default `$TMPDIR/mor-bench-start`).
The inside of a mor start process is printed too: its imports, catalog, table and planning.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository

from bench.harness import ROOT, write_json  # noqa: E402

DEMO = ROOT / "examples" / "01_live_rows.sql"
MOR = Path(sys.executable).parent / "mor"


def worker(warehouse: str) -> None:
    """One mor start: the phases `mor run` goes through before Spark, each timed."""
    t0 = time.perf_counter()
    import mor.cli  # noqa: F401 - what the command imports first
    from mor.statements import StatementExecution  # noqa: F401 - what running one imports

    t1 = time.perf_counter()
    from mor.api import resolve_catalog
    from mor.planner.settings import user_config

    user_config()
    catalog = resolve_catalog(None, warehouse)
    t2 = time.perf_counter()
    catalog.load_table("demo.orders")
    t3 = time.perf_counter()
    from mor.api import explain

    sql = DEMO.read_text().split("\n", 1)[1]
    explain(sql, catalog=catalog, check=False)
    t4 = time.perf_counter()
    print(json.dumps({"imports": t1 - t0, "catalog": t2 - t1, "table": t3 - t2, "plan": t4 - t3}))
    sys.stdout.flush()
    os._exit(0)  # as `mor` ends (mor/cli.py _leave): no teardown of every module


AGG = "SELECT region, count(*) AS n, sum(amount) AS total FROM demo.orders GROUP BY region"


def bare(url: str, paths: list[str]) -> None:
    """A bare Spark Connect client: the aggregate over the data files as plain Parquet."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = SparkSession.builder.remote(url).getOrCreate()
    df = spark.read.parquet(*paths).groupBy("region")
    for r in df.agg(F.count("*").alias("n"), F.sum("amount").alias("total")).collect():
        print(*r)
    sys.stdout.flush()
    os._exit(0)


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - t
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    return took, out.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--warehouse", default=os.path.join(tempfile.gettempdir(), "mor-bench-start"))
    p.add_argument("--server", action="store_true", help="also `mor run` whole (pyspark 4.x)")
    p.add_argument("--json", help="write the figures here (under bench/out/)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--bare", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.warehouse)
        return
    if args.bare:
        bare(args.bare[0], args.bare[1:])
        return
    env = {**os.environ, "MOR_WAREHOUSE": args.warehouse}
    env.pop("SPARK_REMOTE", None)
    if not os.path.exists(os.path.join(args.warehouse, "catalog.db")):
        from mor.demo import build_demo_table

        build_demo_table(args.warehouse)
    peers: dict[str, list[str]] = {
        "python": [sys.executable, "-c", "pass"],
        "mor start": [sys.executable, __file__, "--worker", "--warehouse", args.warehouse],
    }
    if args.server:
        peers["mor run, server"] = [str(MOR), "run", str(DEMO)]
        peers["mor run, own session"] = [str(MOR), "run", "--set", "server=off", str(DEMO)]
        from mor import server

        if server.running() is not None:
            raise SystemExit("a mor server runs already: `mor server stop` first")
        from mor.demo import warm_plans

        started = server.start(plans=warm_plans)  # as `mor server start` starts it
        print(f"# {started.line()}")
        from mor.api import resolve_catalog

        files = resolve_catalog(None, args.warehouse).load_table("demo.orders").inspect.files()
        paths = [f["file_path"] for f in files.to_pylist() if f["content"] == 0]  # data files
        peers["mor run -e agg, server"] = [str(MOR), "run", "-e", AGG]
        peers["bare Connect client"] = [
            sys.executable,
            __file__,
            "--bare",
            started.url,
            *paths,
        ]
    times: dict[str, list[float]] = {k: [] for k in peers}
    inside: list[dict[str, float]] = []
    answers: dict[str, str] = {}
    try:
        for _ in range(args.reps):
            for name, cmd in peers.items():
                took, out = timed(cmd, env)
                times[name].append(took)
                if name == "mor start":
                    inside.append(json.loads(out))
                elif name in ("mor run, server", "mor run, own session"):
                    answers.setdefault(name, out)
    finally:
        if args.server:
            server.stop()
    if len(set(answers.values())) > 1:
        shown = "\n".join(f"--- {k}:\n{v[-800:]}" for k, v in answers.items())
        raise SystemExit(
            f"`mor run` printed different rows against the server and on its own:\n{shown}"
        )
    med = {k: statistics.median(v) for k, v in times.items()}
    floor = med["python"]
    print(f"{'process':<22} {'median s':>9} {'x python':>9}")
    for name, m in med.items():
        print(f"{name:<22} {m:>9.3f} {m / floor:>9.1f}")
    print(
        "inside mor start (median s): "
        + ", ".join(f"{k} {statistics.median(d[k] for d in inside):.3f}" for k in inside[0])
    )
    print(f"target: mor start under 1 s: {med['mor start']:.2f} s")
    if args.server:
        print(
            f"target: mor run against the server under 2 s: {med['mor run, server']:.2f} s "
            f"({med['mor run, server'] / med['mor run, own session']:.2f}x its own session's)"
        )
        agg, floor_c = med["mor run -e agg, server"], med["bare Connect client"]
        print(
            f"target: mor run -e agg at most 1.3x a bare Connect client: {agg:.2f} s / "
            f"{floor_c:.2f} s = {agg / floor_c:.2f}x"
        )
    if args.json:
        write_json(args.json, {"medians": med, "runs": times, "inside": inside})


if __name__ == "__main__":
    main()
