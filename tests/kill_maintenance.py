"""SIGKILL at random points of `mor expire-snapshots`, `mor remove-orphan-files` and `mor
rewrite-manifests` while a writer commits, and every retained snapshot checked whole.

    python -m tests.kill_maintenance [--rounds 8] [--seed 1] [--writer pyiceberg|mor]

One table of the embedded catalog (SQLite) per run: a history of appends and copy-on-write
deletes (pyiceberg's: replaced data files, so that expiry has data files to delete), every
file made four days old and stray files planted (orphans). A model records the ids each
snapshot holds, as each commit lands. Each round:

1. a writer in this process (pyiceberg's appends, or mor's INSERT through its statement
   execution) commits every few milliseconds, each commit recorded in the model;
2. `mor expire-snapshots TABLE --older-than <an hour ahead> --retain-last R`, `mor
   remove-orphan-files TABLE` or `mor rewrite-manifests TABLE` (in turn; a rewrite's snapshot
   holds its parent's ids) starts in a process of its own and is SIGKILLed at
   a random moment between its start and the time the same command took to finish on a dry
   run (half the rounds are not killed: they complete);
3. the writer stops; then every snapshot the table holds must reach only files that exist,
   and read (pyiceberg's scan) exactly the ids the model recorded for it.

Prints "kill maintenance: N rounds (K killed), M snapshots checked, F failures"; exit 1 on any
failure. tests/test_procedures.py runs two rounds in CI, `make soak` more.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa


def _local(path: str) -> str:
    if path.startswith("file://"):
        return path.removeprefix("file://")
    return path.removeprefix("file:")


class Model:
    """The ids of each snapshot, as commits land (a snapshot's are its parent's plus what it
    appended, less what it deleted)."""

    def __init__(self) -> None:
        self.ids: dict[int, frozenset[int]] = {}
        self.lock = threading.Lock()

    def record(self, table: Any, added: set[int], removed: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        md = table.metadata
        snap = md.current_snapshot()
        at = snap.parent_snapshot_id
        while at is not None and at not in self.ids:  # a rewrite's snapshot: its parent's rows
            s = md.snapshot_by_id(at)
            if s is None or s.summary is None or s.summary.operation.value != "replace":
                break
            at = s.parent_snapshot_id
        parent = self.ids.get(at, frozenset()) if at is not None else frozenset()
        with self.lock:
            self.ids[snap.snapshot_id] = frozenset((parent | added) - removed)


def _history(catalog: Any, model: Model, name: str, rng: random.Random) -> None:
    from pyiceberg.expressions import EqualTo

    next_id = 0
    for _ in range(12):
        t = catalog.load_table(name)
        if next_id > 6 and rng.random() < 0.3:
            victim = rng.choice(sorted(model.ids[t.metadata.current_snapshot_id]))
            t.delete(EqualTo("id", victim))  # copy-on-write: the file replaced
            model.record(catalog.load_table(name), set(), {victim})
            continue
        ids = list(range(next_id, next_id + 3))
        next_id += 3
        t.append(pa.table({"id": pa.array(ids, pa.int64())}))
        model.record(catalog.load_table(name), set(ids))


def _age_all(root: str, hours: float) -> None:
    then = time.time() - hours * 3600
    for d, _, fs in os.walk(root):
        for f in fs:
            os.utime(os.path.join(d, f), (then, then))


class Writer(threading.Thread):
    """Commits appends until stopped; each landing commit recorded in the model. A commit
    that loses a race is retried by loading the table again."""

    def __init__(self, catalog: Any, name: str, model: Model, kind: str, first: int) -> None:
        super().__init__(daemon=True)
        self.catalog, self.name, self.model, self.kind = catalog, name, model, kind
        self.next = first
        self.stop = threading.Event()
        self.commits = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                ids = {self.next, self.next + 1}
                self.next += 2
                self._commit(ids)
                self.commits += 1
                time.sleep(0.005)
        except BaseException as e:  # noqa: BLE001 - reported by the harness
            self.error = e

    def _commit(self, ids: set[int]) -> None:
        from pyiceberg.exceptions import CommitFailedException

        for _ in range(50):
            try:
                if self.kind == "mor":
                    from mor.statements import StatementExecution

                    values = ", ".join(f"({i})" for i in sorted(ids))
                    StatementExecution(
                        f"INSERT INTO {self.name} VALUES {values}", catalog=self.catalog
                    ).run()
                else:
                    t = self.catalog.load_table(self.name)
                    t.append(pa.table({"id": pa.array(sorted(ids), pa.int64())}))
            except CommitFailedException:
                continue
            self.model.record(self.catalog.load_table(self.name), ids)
            return
        raise RuntimeError("the writer lost 50 races in a row")


def check(catalog: Any, name: str, model: Model) -> tuple[int, list[str]]:
    """Every snapshot of the table: its files exist, its rows are the model's."""
    from mor.planner.expiry import reachable

    t = catalog.load_table(name)
    failures = []
    for snap in t.metadata.snapshots:
        sid = snap.snapshot_id
        try:
            files = reachable(t.io, t.metadata, [sid])
        except FileNotFoundError as e:
            failures.append(f"snapshot {sid}: a manifest list or manifest gone: {e}")
            continue
        for kind, paths in files.paths.items():
            missing = [p for p in paths if not os.path.exists(_local(p))]
            if missing:
                failures.append(f"snapshot {sid}: {len(missing)} {kind} gone: {missing[0]}")
        if any(f.startswith(f"snapshot {sid}:") for f in failures):
            continue
        got = set(t.scan(snapshot_id=sid).to_arrow()["id"].to_pylist())
        want = model.ids.get(sid)
        at = snap
        while want is None and at is not None and at.summary.operation.value == "replace":
            at = t.metadata.snapshot_by_id(at.parent_snapshot_id)  # rewrite_manifests': no
            want = None if at is None else model.ids.get(at.snapshot_id)  # row changed
        if want is None:
            failures.append(f"snapshot {sid}: not in the model (committed by whom?)")
        elif got != set(want):
            failures.append(
                f"snapshot {sid}: ids {sorted(got - want)[:5]} extra, "
                f"{sorted(want - got)[:5]} missing"
            )
    return len(t.metadata.snapshots), failures


def run(rounds: int, seed: int, writer: str, work: Path) -> tuple[int, int, int, list[str]]:
    from mor.api import default_catalog
    from mor.statements import StatementExecution

    rng = random.Random(seed)
    wh = str(work / "wh")
    catalog = default_catalog(wh)
    StatementExecution("CREATE NAMESPACE db", catalog=catalog).run()
    name = "db.k"
    StatementExecution(f"CREATE TABLE {name} (id BIGINT)", catalog=catalog).run()
    model = Model()
    _history(catalog, model, name, rng)
    root = _local(catalog.load_table(name).location())
    base = [sys.executable, "-m", "mor.cli"]
    killed = checked = 0
    failures: list[str] = []
    first = 1_000_000
    for r in range(rounds):
        _age_all(root, 96)  # every file four days old: only references protect them
        for k in range(3):
            stray = Path(root) / "data" / f"stray-{r}-{k}.parquet"
            stray.write_bytes(b"stray")
            os.utime(stray, (time.time() - 96 * 3600,) * 2)
        if r % 3 == 0:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() + 3600))
            cmd = [*base, "expire-snapshots", "--warehouse", wh, name, "--older-than", stamp]
            cmd += ["--retain-last", str(rng.randint(1, 4))]
        elif r % 3 == 1:
            cmd = [*base, "remove-orphan-files", "--warehouse", wh, name]
        else:
            cmd = [*base, "rewrite-manifests", "--warehouse", wh, name]
        t0 = time.monotonic()
        dry = subprocess.run([*cmd, "--dry-run"], capture_output=True, text=True)
        if dry.returncode != 0:
            failures.append(f"round {r + 1}: the dry run failed: {dry.stderr.strip()[-300:]}")
            continue
        span = time.monotonic() - t0
        w = Writer(catalog, name, model, writer, first)
        w.start()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        kill = r % 2 == 0  # rounds 1, 3, 5 killed (expiry, rewrite, orphans), 2, 4, 6 complete
        if kill:
            time.sleep(rng.uniform(0.3 * span, 1.2 * span))
            proc.send_signal(signal.SIGKILL)
            killed += proc.wait() == -signal.SIGKILL
        else:
            _, err = proc.communicate()
            raced = "changing under it" in err or "another commit landed first" in err
            if proc.returncode != 0 and not raced:
                failures.append(f"round {r + 1}: {cmd[3]} failed: {err.strip()[-300:]}")
        time.sleep(0.05)
        w.stop.set()
        w.join()
        first = w.next
        if w.error is not None:
            failures.append(f"round {r + 1}: the writer failed: {w.error!r}")
        n, bad = check(catalog, name, model)
        checked += n
        failures += [f"round {r + 1} ({cmd[3]}, writer {w.commits} commits): {b}" for b in bad]
    return rounds, killed, checked, failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--writer", choices=["pyiceberg", "mor"], default="pyiceberg")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mor-kill-maintenance-") as tmp:
        rounds, killed, checked, failures = run(args.rounds, args.seed, args.writer, Path(tmp))
    for f in failures:
        print(f"FAILURE {f}")
    print(
        f"kill maintenance: {rounds} rounds ({killed} killed), {checked} snapshots checked, "
        f"{len(failures)} failures"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
