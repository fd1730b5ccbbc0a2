"""mor's DELETE, UPDATE and MERGE against Iceberg's own merge-on-read ones: time and the
driver's memory, each statement in a new process, first call and repeated.

    .venv/bin/python -m bench.row_writes       # v2 and v3, 2M and 20M rows: four tables
    .venv/spark41/bin/python -m bench.row_writes --rows 20000000 --version 3
    .venv/bin/python -m bench.row_writes --rows 2000000 --statements update_1 update_30
    .venv/bin/python -m bench.row_writes --rows 2000000 --version 3 --peers mor --profile
    .venv/bin/python -m bench.row_writes --rows 2000000 --warm     # as issue 78 measures

Each (format version, size) pair is a table of its own, built once, and one printed table of
figures (the defaults: about 25 minutes on 2 cores, most of it at 20M rows).

bench/tables.py's table (Iceberg's Java writer: 8 data files, 1% position deletes through
Spark's DELETE, `--eq` equality deletes through RowDelta) is registered in a JDBC catalog on
PostgreSQL that Iceberg's Spark catalog and pyiceberg's SqlCatalog share
(tests/pgcatalog.py). For each statement and peer a new process starts Spark
(`spark.driver.memory=1g`, local[2], Iceberg's runtime in both so that the JVMs are alike),
registers the table's snapshot under a fresh name and runs the statement on it ("first": the
first statement of the process; with `--warm`, the first after the same statement on a
20,000-row twin of the table, untimed), then on a second registration ("again"). Each run is timed,
and the driver's memory sampled every 20 ms while it runs: the Python process's and the
Spark driver JVM's resident size, as growth over the run's start and as the JVM's peak.

- Iceberg: `spark.sql(<statement>)` (merge-on-read: position delete files on v2, deletion
  vectors on v3, the updated rows as new data files);
- mor: `mor.row_writes.run_row_write` (mor.dml's on a checkout from before 2026-12-04).

Before any figure is printed, Iceberg's reader reads the same rows (count and two sums of a
64-bit hash of every column) from each peer's table after each run. Prints, per statement,
the seconds and ratio mor / Iceberg (below 1.0: mor is faster) and the memory beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

STATEMENTS = {
    # 1% and 30% of the rows, keys scattered over every data file
    "delete_1": "DELETE FROM <t> WHERE id % 100 = 7",
    "delete_30": "DELETE FROM <t> WHERE id % 10 IN (1, 4, 7)",
    "update_1": "UPDATE <t> SET v = v + 1, grp = concat(grp, '!') WHERE id % 100 = 7",
    "update_30": "UPDATE <t> SET v = v + 1, grp = concat(grp, '!') WHERE id % 10 IN (1, 4, 7)",
    # a source of 10% of the rows, half of them matched (updated), half not (inserted)
    "merge_10": (
        "MERGE INTO <t> t USING (SELECT id + CASE WHEN id % 20 = 3 THEN 0 ELSE 1000000000 END "
        "AS id, k, grp, v + 1 AS v, pad FROM <t> WHERE id % 10 = 3) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    ),
    # 1% of the ids, one contiguous range (one data file touched)
    "range": "DELETE FROM <t> WHERE id >= <lo> AND id < <hi>",
    "update_range": "UPDATE <t> SET v = v + 1 WHERE id >= <lo> AND id < <hi>",
    # no row matches: what a statement costs with nothing to write
    "none": "DELETE FROM <t> WHERE id < 0",
}
DEFAULT = ["delete_1", "delete_30", "update_1", "update_30", "merge_10", "range", "none"]

# decimal sums: a sum of 64-bit hashes overflows a bigint, an error under Spark 4's ANSI mode
FINGERPRINT = (
    "SELECT count(*), sum(CAST(xxhash64(id, k, grp, v, pad) AS DECIMAL(38, 0))), "
    "sum(pmod(xxhash64(id, k, grp, v, pad), 1000003)) FROM {t}"
)
MiB = 1 << 20
SMALL = 20_000  # rows of the table `--warm` warms each process on


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[2_000_000, 20_000_000])
    ap.add_argument("--eq", type=float, default=0.0, help="equality deletes in the table")
    ap.add_argument("--version", type=int, nargs="+", choices=(2, 3), default=[2, 3])
    ap.add_argument("--statements", nargs="*", default=DEFAULT, choices=list(STATEMENTS))
    ap.add_argument("--peers", nargs="*", default=["iceberg", "mor"], choices=["iceberg", "mor"])
    ap.add_argument("--work", default=None, help="folder for the tables (default: a temp dir)")
    ap.add_argument(
        "--mor",
        default=None,
        help="a folder holding the `mor` package the mor processes import (another revision's)",
    )
    ap.add_argument(
        "--master",
        default="local[2]",
        help="Spark's master (local-cluster[2,1,1024]: executors in JVMs of their own, so that "
        "the driver JVM's memory is the driver's alone)",
    )
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="print where each mor run's time went: its phases and Spark's jobs",
    )
    ap.add_argument(
        "--warm",
        action="store_true",
        help="each process first runs its statement on a 20,000-row twin of the table, untimed "
        "(issue 78's measure: a fresh process warmed on a small table)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each statement's processes this many times (peers alternating); print medians",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--statement", help=argparse.SUPPRESS)
    ap.add_argument("--pg", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args)

    from tests.pgcatalog import Postgres

    work = Path(args.work or tempfile.mkdtemp(prefix="mor-writes-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {}
    with Postgres(keep=str(work / "pg")) as pg:
        pgarg = f"{pg.port}/{pg.database}"
        for version in args.version:
            for rows in args.rows:
                size = argparse.Namespace(**{**vars(args), "rows": [rows], "version": [version]})
                got = _one_size(size, work, pgarg)
                if got is None:
                    return 1
                figures[f"v{version} {rows}"] = got
                print()
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


def _one_size(args: argparse.Namespace, work: Path, pgarg: str) -> dict[str, Any] | None:
    """One format version and size (`args.version[0]`, `args.rows[0]`): its table built, each
    statement run by each peer, the figures printed; None when the peers' rows differ."""
    rows, version = args.rows[0], args.version[0]
    base = _run_worker(args, work, pgarg, "build", "")
    print(
        f"DELETE, UPDATE and MERGE on {rows:,} rows, 8 files, pos 1%, eq {args.eq:.0%}, "
        f"v{version}; {_spark_version()} {args.master}; a new process per statement and "
        f"peer{', warmed on a 20,000-row twin' if args.warm else ''}, spark.driver.memory=1g"
        + (f"; medians of {args.repeat} runs" if args.repeat > 1 else "")
    )
    print(
        f"  {'statement':<12} {'rows':>10} {'Iceberg':>8} {'again':>7} {'mor':>7} {'again':>7}"
        f" {'mor/Ice':>8} {'again':>6}   {'Python MiB (Ice/mor)':>22}   "
        f"{'JVM growth MiB (Ice/mor)':>26}   {'JVM peak MiB':>14}"
    )
    return each_statement(
        args.statements,
        args.peers,
        lambda peer, name: _run_worker(args, work, pgarg, peer, name, base),
        _print,
        "the rows after it differ",
        args.repeat,
    )


def each_statement(
    statements: list[str],
    peers: list[str],
    run: Callable[[str, str], Any],
    show: Callable[[str, dict[str, Any]], None],
    differ: str,
    repeat: int = 1,
) -> dict[str, Any] | None:
    """Each statement run by each peer (`run(peer, statement)`: its figures, in a process of
    its own; the peers' order alternating), `repeat` times, the two peers' rows after each
    compared (`differ`: what the line says when they are not the same), its figures shown
    (each run's median over the repetitions): the figures by statement, or None at the first
    statement whose rows differ."""
    figures = {}
    for i, name in enumerate(statements):
        runs: dict[str, list[Any]] = {p: [] for p in peers}
        for r in range(repeat):
            order = peers if (i + r) % 2 == 0 else list(reversed(peers))
            got = {p: run(p, name) for p in order}
            if set(got) == {"iceberg", "mor"} and not any("error" in g for g in got.values()):
                for when in ("first", "again"):
                    a, b = got["iceberg"][when]["fingerprint"], got["mor"][when]["fingerprint"]
                    if not _same(a, b):
                        print(f"{name} ({when}): {differ}: mor {b}, Iceberg {a}")
                        return None
            for p, g in got.items():
                runs[p].append(g)
        figures[name] = {p: _median_runs(gs) for p, gs in runs.items()}
        show(name, figures[name])
    return figures


def _median_runs(got: list[Any]) -> Any:
    """One peer's figures over repetitions: per run (first, again), the repetition of median
    seconds, with every repetition's seconds beside it; a failure if any failed."""
    failed = [g for g in got if "error" in g]
    if failed or len(got) == 1:
        return failed[0] if failed else got[0]
    out: dict[str, Any] = {}
    for when in got[0]:
        ranked = sorted((g[when] for g in got), key=lambda w: w["seconds"])
        out[when] = {**ranked[len(ranked) // 2], "all_seconds": [w["seconds"] for w in ranked]}
    return out


def _spark_version() -> str:
    from importlib.metadata import version

    return f"pyspark {version('pyspark')}"


class Cells:
    """One statement's figures of both peers (`got`: peer -> its figures, or its error), as
    the benchmarks' tables print them; a failed peer's line printed first."""

    def __init__(self, name: str, got: dict[str, Any], width: int) -> None:
        for peer, g in got.items():
            if "error" in g:
                print(f"  {name:<{width}} {peer} failed: {g['error']}")
        self.ice, self.mor = (
            g if g and "error" not in g else None for g in (got.get("iceberg"), got.get("mor"))
        )

    def any(self) -> bool:
        return self.ice is not None or self.mor is not None

    def t(self, peer: Any, run: str) -> str:
        return f"{peer[run]['seconds']:.2f}" if peer else "-"

    def ratio(self, run: str) -> str:
        ice, mor = self.ice, self.mor
        return f"{mor[run]['seconds'] / ice[run]['seconds']:.2f}" if ice and mor else "-"

    def mem(self, key: str, run: str = "first") -> str:
        return "/".join(f"{p[run][key] / MiB:.0f}" if p else "-" for p in (self.ice, self.mor))

    def growth(self, key: str) -> str:
        """A growth of the first run, then of the second in parentheses."""
        return f"{self.mem(key)} ({self.mem(key, 'again')})"


def _print(name: str, got: dict[str, Any]) -> None:
    c = Cells(name, got, 12)
    if not c.any():
        return
    ice, mor = c.ice, c.mor
    rows = (mor or ice)["first"]["rows"]
    print(
        f"  {name:<12} {rows:>10,} {c.t(ice, 'first'):>8} {c.t(ice, 'again'):>7} "
        f"{c.t(mor, 'first'):>7} {c.t(mor, 'again'):>7} {c.ratio('first'):>8} "
        f"{c.ratio('again'):>6}   {c.growth('py_growth'):>22}   {c.growth('jvm_growth'):>26}   "
        f"{c.mem('jvm_peak'):>14}"
    )


def _run_worker(
    args: argparse.Namespace, work: Path, pg: str, peer: str, statement: str, base: Any = None
) -> Any:
    """One process: the table built (peer `build`: its metadata file), or one statement run
    twice by one peer (its figures)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    root = str(Path(__file__).resolve().parent.parent)
    # the mor processes import mor from `--mor` when given (a checkout of another revision)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in ((args.mor if peer == "mor" else None), root, env.get("PYTHONPATH")) if p
    )
    cmd = [
        sys.executable, "-m", "bench.row_writes", "--worker", peer, "--statement", statement,
        "--pg", pg, "--work", str(work), "--rows", str(args.rows[0]), "--eq", str(args.eq),
        "--version", str(args.version[0]), "--master", args.master,
    ]  # fmt: skip
    cmd += ["--profile"] * args.profile + ["--warm"] * args.warm
    if base is not None:
        env["MOR_BENCH_BASE"] = json.dumps(base)
    # run from the work folder: a checkout in the current folder would shadow `--mor`'s
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=7200, cwd=str(work))
    if args.profile:
        for ln in done.stderr.splitlines():
            if ln.startswith("@@ "):
                print(f"  {statement} ({peer}) {ln[3:]}" if "profile of" in ln else ln[3:])
    return worker_output(done, None if statement else "the process building the table failed")


def worker_output(done: subprocess.CompletedProcess, fatal: str | None) -> Any:
    """A worker process's figures (its last JSON line). When it failed: with `fatal` (a
    process the run cannot go on without), its stderr's end and exit; else `{"error": ...}`,
    a peer that fails a statement (out of memory, say) reported as such."""
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        if fatal is not None:
            sys.stderr.write(done.stderr[-4000:])
            raise SystemExit(fatal)
        why = [ln for ln in done.stderr.splitlines() if "Error" in ln or "error" in ln]
        return {"error": (why[-1] if why else f"exit {done.returncode}")[:160]}
    return json.loads(lines[-1])


def _worker(args: argparse.Namespace) -> int:
    from tests.oracle.runtime import iceberg_session
    from tests.pgcatalog import CATALOG, Postgres

    port, database = args.pg.split("/")
    pg = Postgres.running(int(port), database)
    work = Path(args.work)
    warehouse = f"file://{work}/lake"
    conf = {**pg.spark_conf(warehouse), "spark.driver.memory": "1g", "spark.master": args.master}
    spark = iceberg_session(work / "java", conf=conf)
    if args.worker == "build":
        print(json.dumps(_build(spark, work, args, CATALOG)))
        return 0
    base = json.loads(os.environ["MOR_BENCH_BASE"])

    def sql_for(rows: int) -> str:
        """The statement for a table of `rows` rows (a range statement's 1% of its ids)."""
        lo = rows // 2
        text = STATEMENTS[args.statement].replace("<lo>", str(lo))
        return text.replace("<hi>", str(lo + rows // 100))

    out: dict[str, Any] = {}
    if args.worker == "mor":
        from pyiceberg.catalog import load_catalog

        cat = load_catalog(CATALOG, **pg.pyiceberg_properties(warehouse))
    runs = ["warm", "first", "again"] if args.warm else ["first", "again"]
    for run in runs:
        name = f"b.{args.worker}_{args.statement}_{run}_{uuid.uuid4().hex[:8]}"
        metadata = base["small" if run == "warm" else "metadata"]
        sql = sql_for(SMALL if run == "warm" else args.rows[0])
        call = f"table => '{name}', metadata_file => '{metadata}'"
        spark.sql(f"CALL {CATALOG}.system.register_table({call})")
        if args.worker == "iceberg":
            statement = sql.replace("<t>", f"{CATALOG}.{name}")

            def go(statement: str = statement) -> int:
                spark.sql(statement).collect()
                return -1
        else:
            run_row_write = _mor_runner()
            statement = sql.replace("<t>", name)

            def go(statement: str = statement) -> int:
                note = (lambda text: steps.append((time.time(), text))) if args.profile else None
                return int(run_row_write(statement, catalog=cat, spark=spark, progress=note).rows)

        steps: list[tuple[float, str]] = []
        with _Sampler(_jvm_pid()) as mem:
            wall0, t0 = time.time(), time.perf_counter()
            rows = go()
            seconds = time.perf_counter() - t0
        if args.profile:
            _profile(spark, run, wall0, seconds, steps)
        if run == "warm":
            continue
        spark.sql(f"REFRESH TABLE {CATALOG}.{name}")
        fp = spark.sql(FINGERPRINT.format(t=f"{CATALOG}.{name}")).first()
        out[run] = {
            "seconds": seconds,
            "rows": rows if rows >= 0 else base["rows"] - int(fp[0]),
            "fingerprint": [str(x) for x in fp],
            **mem.figures(),
        }
    print(json.dumps(out))
    return 0


def _profile(
    spark: Any, run: str, wall0: float, seconds: float, steps: list[tuple[float, str]]
) -> None:
    """Where a run's time went (stderr): a mor run's phases, and each Spark job submitted
    meanwhile with its start, length and tasks (from Spark's status store, which needs no
    UI), as seconds from the run's start."""
    store = spark.sparkContext._jsc.sc().statusStore()  # the UI's store: no UI needed
    lines = [f"profile of the {run} run: {seconds:.2f} s"]
    events = [(t - wall0, f"mor: {text}") for t, text in steps]
    jobs = store.jobsList(None)
    for i in range(jobs.size()):
        job = jobs.apply(i)
        if job.submissionTime().isEmpty():
            continue
        start = job.submissionTime().get().getTime() / 1000
        if start < wall0 - 0.01:
            continue
        done = job.completionTime()
        end = done.get().getTime() / 1000 if not done.isEmpty() else start
        what = job.name()  # the action and where (its Python line)
        took = f"{end - start:.2f} s, {job.numTasks()} tasks{_stages(store, job)}"
        events.append((start - wall0, f"job {job.jobId()} {what}: {took}"))
    for offset, text in sorted(events):
        lines.append(f"  {offset:6.2f}  {text}")
    sys.stderr.write("".join(f"@@ {ln}\n" for ln in lines))


def _stages(store: Any, job: Any) -> str:
    """A job's stages' task time (the tasks' run, its CPU, the JVM's GC), summed over tasks."""
    run = cpu = gc = 0.0
    ids = job.stageIds()
    for i in range(ids.size()):
        stages = store.stageData(int(ids.apply(i)), False, None, False, None)
        for j in range(stages.size()):
            st = stages.apply(j)
            run += st.executorRunTime() / 1e3
            cpu += st.executorCpuTime() / 1e9
            gc += st.jvmGcTime() / 1e3
    return f" (tasks {run:.2f} s, CPU {cpu:.2f} s, GC {gc:.2f} s)"


def _mor_runner() -> Any:
    """The write entry point of the mor checkout this process imports."""
    try:
        from mor.row_writes import run_row_write
    except ImportError:  # a checkout from before 2026-12-04
        from mor.dml import run_row_write  # type: ignore[no-redef]
    return run_row_write


def _build(spark: Any, work: Path, args: argparse.Namespace, catalog: str) -> dict[str, Any]:
    from bench.tables import build

    eq_sets = 2 if args.eq else 1
    rows, version = args.rows[0], args.version[0]

    def metadata(local: str) -> str:
        load = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable
        return load(spark._jsparkSession, local).operations().current().metadataFileLocation()

    local = build(spark, work / "java", rows, 0.01, args.eq, eq_sets, version=version)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.b")
    rows = spark.sql(f"SELECT count(*) FROM {local}").first()[0]
    out = {"metadata": metadata(local), "rows": rows}
    if args.warm:  # the twin each statement runs on first: the same shape, 20,000 rows
        small = build(spark, work / "java", SMALL, 0.01, args.eq, eq_sets, version=version)
        out["small"] = metadata(small)
    return out


def _jvm_pid() -> int | None:
    """The Spark driver JVM this process started (a descendant of it running java)."""
    me = os.getpid()
    todo, seen = [me], set()
    while todo:
        pid = todo.pop()
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            kids = []
        for k in kids:
            try:
                with open(f"/proc/{k}/comm") as f:
                    if f.read().strip() == "java":
                        return k
            except OSError:
                continue
            todo.append(k)
    return None


def _rss(pid: int | str) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Sampler:
    """The resident size of this process and of the JVM, every 20 ms while a run lasts."""

    def __init__(self, jvm: int | None) -> None:
        self.jvm = jvm
        self.py0 = self.py = _rss("self")
        self.jvm0 = self.jvm_max = _rss(jvm) if jvm else 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.02):
            self.py = max(self.py, _rss("self"))
            if self.jvm:
                self.jvm_max = max(self.jvm_max, _rss(self.jvm))

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.py = max(self.py, _rss("self"))

    def figures(self) -> dict[str, int]:
        return {
            "py_growth": self.py - self.py0,
            "jvm_growth": self.jvm_max - self.jvm0,
            "jvm_peak": self.jvm_max,
        }


def _same(a: Any, b: Any) -> bool:
    """The same rows; sums of doubles may differ in their last bits with the order they are
    added in."""

    def num(x: str) -> float:
        return float(x)

    return all(
        x == y or abs(num(x) - num(y)) <= 1e-9 * max(abs(num(x)), abs(num(y))) for x, y in zip(a, b)
    )


if __name__ == "__main__":
    sys.exit(main())
