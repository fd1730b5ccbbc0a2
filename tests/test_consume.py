"""Consuming a table's changes (mor/consume.py, planner/batches.py, `mor changes`): every
commit in exactly one committed batch, whatever lands between batches and wherever a consumer
stops; every history that moves under a checkpoint refused by one line naming what happened."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from legs import soak_in
from mor import changes, stream_changes
from mor.api import default_catalog
from mor.cli import main
from mor.consume import read_checkpoint
from mor.planner.errors import ConsumeError
from mor.writer.tables import TableWriter

# the legs beyond pyspark 3.5 classic that run this file (markers: pyproject.toml)
pytestmark = [pytest.mark.connect]

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "v", StringType(), required=False),
)
KEY = ("id", "v", "_change_type", "_commit_snapshot_id")


class Crash(Exception):
    """Stands for a consumer killed at this point."""


def _rows(df: Any) -> Counter:
    return Counter(tuple(r[c] for c in KEY) for r in df.collect())


class History:
    """A table and random commits on it: appends, position and equality deletes."""

    def __init__(self, catalog: Any, name: str, seed: int) -> None:
        self.w = TableWriter(catalog, name, SCHEMA)
        self.rng = random.Random(seed)
        self.files: list[Any] = []
        self.next_id = 0

    def commit(self) -> None:
        op = self.rng.choice(["append", "append", "pos", "eq"]) if self.files else "append"
        if op == "append":
            n = self.rng.randint(1, 4)
            ids = list(range(self.next_id, self.next_id + n))
            self.next_id += n
            vs = [self.rng.choice("abc") for _ in ids]
            self.files += self.w.append(pa.table({"id": pa.array(ids, pa.int64()), "v": vs}))[1]
        elif op == "pos":
            f = self.rng.choice(self.files)
            pos = sorted(self.rng.sample(range(f.record_count), 1))
            self.w.commit(deletes=[self.w.position_delete_file({f.file_path: pos}, f)])
        else:
            victim = self.rng.randrange(self.next_id)
            self.w.commit(deletes=[self.w.equality_delete_file([1], [{1: victim}])])


def test_every_commit_once_across_crashes_and_commits_landing(
    catalog: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commits land between polls; the consumer stops at random points (before writing, after
    writing part of a batch, while moving the checkpoint) and starts again from its checkpoint.
    A sink keyed by batch_id (a re-delivered batch replaces what it held) ends with exactly
    `changes()` over the whole history, each commit in one committed batch, ids 0, 1, 2..."""
    import mor.consume

    h = History(catalog, "cons.t", seed=5)
    rng = random.Random(11)
    cp = str(tmp_path / "cp.json")
    sink: dict[int, Counter] = {}
    ranges: dict[int, tuple] = {}
    crashes: Counter = Counter()
    real_replace = os.replace
    plan = ["none", "none", "before", "written", "checkpoint", "none"]
    rng.shuffle(plan)  # each kind of stop, at batches the history decides
    deliveries = 0

    for _ in range(12):
        for _ in range(rng.randint(0, 2)):
            h.commit()
        try:
            for b in stream_changes(
                "cons.t", cp, catalog=catalog, spark=spark, max_commits=rng.randint(1, 3)
            ):
                if b.redelivered:  # the very batch a stopped run planned
                    assert ranges[b.batch_id] == (b.start_snapshot_id, b.commits)
                ranges[b.batch_id] = (b.start_snapshot_id, b.commits)
                where = plan[deliveries % len(plan)]
                deliveries += 1
                if where == "before":
                    crashes[where] += 1
                    raise Crash
                sink[b.batch_id] = _rows(b.df)
                if where == "written":
                    crashes[where] += 1
                    raise Crash
                if where == "checkpoint":  # the rename of the new checkpoint never happens
                    crashes[where] += 1

                    def fail(*a: Any) -> None:
                        raise Crash

                    monkeypatch.setattr(mor.consume.os, "replace", fail)
                    try:
                        b.commit()
                    finally:
                        monkeypatch.setattr(mor.consume.os, "replace", real_replace)
                b.commit()
        except Crash:
            pass
    for b in stream_changes("cons.t", cp, catalog=catalog, spark=spark):  # drain
        sink[b.batch_id] = _rows(b.df)
        ranges[b.batch_id] = (b.start_snapshot_id, b.commits)
        b.commit()
    assert all(crashes[k] > 0 for k in ("before", "written", "checkpoint")), crashes
    done = read_checkpoint(cp)
    assert done is not None and done.pending is None
    assert sorted(sink) == list(range(done.batch_id + 1))  # ids 0..n-1, none skipped
    delivered = [c for i in sorted(ranges) for c in ranges[i][1]]
    assert len(delivered) == len(set(delivered))  # no commit in two committed batches
    chain = [s.snapshot_id for s in h.w.refresh().snapshots()]
    assert delivered == chain and done.snapshot_id == chain[-1]
    union = sum(sink.values(), Counter())
    assert union == _rows(changes("cons.t", catalog=catalog, spark=spark))
    assert list(stream_changes("cons.t", cp, catalog=catalog, spark=spark)) == []


def test_a_batch_not_committed_is_delivered_again_and_never_skipped(
    catalog: Any, spark: Any, tmp_path: Path
) -> None:
    h = History(catalog, "cons.u", seed=1)
    for _ in range(3):
        h.commit()
    cp = str(tmp_path / "cp.json")
    batches = stream_changes("cons.u", cp, catalog=catalog, spark=spark, max_commits=2)
    first = next(batches)
    assert (first.batch_id, first.start_snapshot_id, first.redelivered) == (0, None, False)
    with pytest.raises(ConsumeError, match="batch 0 of cons.u was not committed"):
        next(batches)
    again = next(stream_changes("cons.u", cp, catalog=catalog, spark=spark, max_commits=1))
    # the pending batch as planned (two commits), though this consumer asks for one a batch
    assert again.redelivered and again.commits == first.commits
    again.commit()
    (rest,) = _consumed(catalog, spark, "cons.u", cp)
    assert (rest.batch_id, rest.start_snapshot_id) == (1, first.commits[-1])
    with pytest.raises(ConsumeError, match="not committed"):
        # a list() takes batches without committing them: it stops at the second, never
        # moving the checkpoint past an unwritten batch
        h.commit()
        h.commit()
        list(stream_changes("cons.u", cp, catalog=catalog, spark=spark, max_commits=1))


def test_nothing_new_writes_nothing(catalog: Any, spark: Any, tmp_path: Path) -> None:
    w = TableWriter(catalog, "cons.empty", SCHEMA)
    cp = tmp_path / "cp.json"
    assert list(stream_changes("cons.empty", str(cp), catalog=catalog, spark=spark)) == []
    assert not cp.exists()  # a table without commits: no checkpoint made
    w.append(pa.table({"id": pa.array([1], pa.int64()), "v": ["a"]}))
    for b in stream_changes("cons.empty", str(cp), catalog=catalog, spark=spark):
        b.commit()
    before = (cp.read_bytes(), cp.stat().st_mtime_ns)
    assert list(stream_changes("cons.empty", str(cp), catalog=catalog, spark=spark)) == []
    assert (cp.read_bytes(), cp.stat().st_mtime_ns) == before


def _consumed(catalog: Any, spark: Any, name: str, cp: str, **kw: Any) -> list[Any]:
    out = []
    for b in stream_changes(name, cp, catalog=catalog, spark=spark, **kw):
        out.append(b)
        b.commit()
    return out


def test_histories_that_move_under_a_checkpoint_are_refused_by_name(
    catalog: Any, spark: Any, tmp_path: Path
) -> None:
    """Expired snapshots, a rollback and a re-created table: one line each, naming what
    happened and the snapshot to start a new checkpoint after; never a skip or a repeat."""
    h = History(catalog, "cons.m", seed=2)
    for _ in range(4):
        h.commit()
    cp = str(tmp_path / "cp.json")
    _consumed(catalog, spark, "cons.m", cp, max_commits=2)
    table = h.w.refresh()
    snaps = [s.snapshot_id for s in table.snapshots()]
    done = read_checkpoint(cp)
    assert done is not None and done.snapshot_id == snaps[-1]
    # a rollback to the second snapshot, then a new commit on that line
    table.manage_snapshots().rollback_to_snapshot(snaps[1]).commit()
    h.commit()
    with pytest.raises(ConsumeError) as e:
        list(stream_changes("cons.m", cp, catalog=catalog, spark=spark))
    text = str(e.value)
    assert f"snapshot {snaps[-1]} is not an ancestor of the current snapshot" in text
    assert f"start snapshot {snaps[1]}" in text and "\n" not in text
    # a new checkpoint after the common ancestor goes on along the current line
    cp2 = str(tmp_path / "cp2.json")
    got = _consumed(catalog, spark, "cons.m", cp2, start_snapshot_id=snaps[1])
    current = h.w.refresh().current_snapshot()
    assert current is not None and got[-1].end_snapshot_id == current.snapshot_id
    # snapshots expired past a checkpoint
    cp3 = str(tmp_path / "cp3.json")
    _consumed(catalog, spark, "cons.m", cp3, max_commits=1)  # one batch: the first commit
    h.commit()
    first = read_checkpoint(cp3)
    assert first is not None
    t = h.w.refresh()
    head = _ancestry(t)[0].snapshot_id
    old = [s.snapshot_id for s in t.snapshots() if s.snapshot_id != head]
    t.maintenance.expire_snapshots().by_ids(old).commit()
    with pytest.raises(ConsumeError) as e:
        list(stream_changes("cons.m", cp3, catalog=catalog, spark=spark))
    assert f"snapshot {first.snapshot_id} has expired" in str(e.value)
    assert f"start snapshot {head}" in str(e.value)  # the oldest one left
    # a new consumer from the first commit: the history before the oldest snapshot is gone
    with pytest.raises(ConsumeError, match=r"history before snapshot \d+ .* has expired"):
        list(stream_changes("cons.m", str(tmp_path / "new.json"), catalog=catalog, spark=spark))
    # the table dropped and created again under its name
    TableWriter(catalog, "cons.m", SCHEMA).append(
        pa.table({"id": pa.array([1], pa.int64()), "v": ["z"]})
    )
    with pytest.raises(ConsumeError, match="dropped and re-created"):
        list(stream_changes("cons.m", cp2, catalog=catalog, spark=spark))


def _ancestry(table: Any) -> list[Any]:
    out, snap = [], table.current_snapshot()
    while snap is not None:
        out.append(snap)
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    return out


def test_a_batch_has_its_end_snapshots_columns(catalog: Any, spark: Any, tmp_path: Path) -> None:
    """A schema change inside a batch: the batch has the end snapshot's columns (rows of
    earlier commits NULL in a column added later); a batch ending before it, the old ones."""
    h = History(catalog, "cons.s", seed=3)
    h.commit()
    h.commit()
    cp = str(tmp_path / "cp.json")
    old = _consumed(catalog, spark, "cons.s", cp, max_commits=1)
    assert old[0].df.columns[:2] == ["id", "v"] and "w" not in old[0].df.columns
    with h.w.refresh().update_schema() as u:
        u.add_column("w", StringType())
    h.w.append(pa.table({"id": pa.array([99], pa.int64()), "v": ["q"], "w": ["new"]}))
    (b,) = _consumed(catalog, spark, "cons.s", cp)
    assert b.df.columns[:3] == ["id", "v", "w"]
    got = {(r.id, r.w) for r in b.df.collect()}
    assert (99, "new") in got and all(w is None for i, w in got if i != 99)


def test_checkpoints_of_another_table_or_damaged_are_refused(
    catalog: Any, spark: Any, tmp_path: Path
) -> None:
    History(catalog, "cons.a", seed=4).commit()
    History(catalog, "cons.b", seed=4).commit()
    cp = tmp_path / "cp.json"
    _consumed(catalog, spark, "cons.a", str(cp))
    with pytest.raises(ConsumeError, match="is for table cons.a, not cons.b"):
        list(stream_changes("cons.b", str(cp), catalog=catalog, spark=spark))
    d = json.loads(cp.read_text())
    del d["table_uuid"]
    cp.write_text(json.dumps(d))
    with pytest.raises(ConsumeError, match=r"cp.json is damaged: missing field 'table_uuid'"):
        list(stream_changes("cons.a", str(cp), catalog=catalog, spark=spark))
    cp.write_text("{")
    with pytest.raises(ConsumeError, match="is damaged"):
        list(stream_changes("cons.a", str(cp), catalog=catalog, spark=spark))
    with pytest.raises(Exception, match="max_commits must be a number of commits"):
        stream_changes("cons.a", str(cp), catalog=catalog, max_commits=0)


def test_cli_writes_each_batch_then_moves_the_checkpoint(
    tmp_path: Path, spark: Any, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mor changes`: a batch file per run; stopped after writing and before the checkpoint
    moved, the next run writes the same batch again (same id, same rows) and moves it; with
    nothing new, exit 0, no file and no Spark; a history it cannot follow, exit 1 in one line."""
    import mor.consume

    wh = str(tmp_path / "wh")
    cat = default_catalog(wh)
    h = History(cat, "cli.t", seed=6)
    for _ in range(4):
        h.commit()
    cp, out = str(tmp_path / "cp.json"), tmp_path / "out"
    args = ["changes", "cli.t", "--warehouse", wh, "--checkpoint", cp, "--output", str(out)]
    assert main([*args, "--format", "json", "--max-commits", "2"]) == 0
    assert "batch 0: 2 commits after the start" in capsys.readouterr().err
    first = (out / "batch-000000.json").read_text()

    def killed(self: Any) -> None:
        raise KeyboardInterrupt

    real = mor.consume.ChangeBatch.commit
    monkeypatch.setattr(mor.consume.ChangeBatch, "commit", killed)
    assert main([*args, "--format", "json", "--max-commits", "1"]) == 130
    written = (out / "batch-000001.json").read_text()
    monkeypatch.setattr(mor.consume.ChangeBatch, "commit", real)
    h.commit()  # lands before the next run: not in the pending batch
    assert main([*args, "--format", "json"]) == 0
    err = capsys.readouterr().err
    assert "batch 1: 1 commit after snapshot" in err and "delivered again" in err
    assert (out / "batch-000001.json").read_text() == written
    assert main([*args, "--format", "json"]) == 0  # the commit that landed
    assert (out / "batch-000000.json").read_text() == first
    lines = [json.loads(x) for f in sorted(out.iterdir()) for x in f.read_text().splitlines()]
    got = Counter(tuple(r[c] for c in KEY) for r in lines)
    whole = changes("cli.t", catalog=cat, spark=spark)
    assert got == _rows(whole)
    capsys.readouterr()
    monkeypatch.setattr("mor.cli.spark_session", lambda a: pytest.fail("Spark started"))
    assert main([*args, "--format", "json"]) == 0  # nothing new: no Spark
    assert "no new commits" in capsys.readouterr().err
    assert (
        main(["changes", "cli.t", "--warehouse", wh, "--checkpoint", cp, "--start-snapshot", "1"])
        == 0
    )  # an existing checkpoint: the start is ignored
    capsys.readouterr()
    assert (
        main(
            [
                "changes",
                "cli.t",
                "--warehouse",
                wh,
                "--checkpoint",
                str(tmp_path / "x.json"),
                "--start-snapshot",
                "1",
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "table cli.t has no snapshot 1" in err and err.count("\n") == 1


# through Spark Connect in `make soak` only (the CLI's own process runs a classic session there
# too, as on 3.5, which runs it in make test)
@soak_in("connect")
def test_cli_killed_at_random_moments_loses_and_repeats_no_commit(
    tmp_path: Path, spark: Any
) -> None:
    """`mor changes` in its own process, killed (SIGKILL) at random moments and run again:
    the batch files of the runs that finished hold each commit once."""
    wh = str(tmp_path / "wh")
    cat = default_catalog(wh)
    h = History(cat, "kill.t", seed=8)
    for _ in range(6):
        h.commit()
    cp, out = str(tmp_path / "cp.json"), tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "mor.cli",
        "changes",
        "kill.t",
        "--warehouse",
        wh,
        "--checkpoint",
        cp,
        "--output",
        str(out),
        "--format",
        "json",
        "--max-commits",
        "2",
    ]
    env = {**os.environ, "MOR_MASTER": "local[1]"}
    rng = random.Random(3)
    kills = 0
    for _ in range(4):
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            proc.wait(timeout=rng.uniform(3.0, 10.0))
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            kills += 1
            time.sleep(0.2)
            continue
        assert proc.returncode == 0, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    rest = [c for c in cmd if c not in ("--max-commits", "2")]
    for _ in range(3):  # the rest, unkilled: a pending batch, then all that is left
        done = subprocess.run(rest, cwd=ROOT, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        if "no new commits" in done.stderr:
            break
    else:
        pytest.fail("three runs did not consume the table")
    assert kills > 0
    lines = [json.loads(x) for f in sorted(out.glob("batch-*")) for x in f.read_text().splitlines()]
    got = Counter(tuple(r[c] for c in KEY) for r in lines)
    from mor import changes as whole_changes

    assert got == _rows(whole_changes("kill.t", catalog=cat, spark=spark))
    assert not [p for p in out.iterdir() if not p.name.startswith("batch-")]  # no temporaries
