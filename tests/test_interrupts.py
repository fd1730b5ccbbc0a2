"""Ctrl-C (SIGINT) and SIGTERM at each phase of a real `mor` process: before Spark runs, while
the session starts, during a query's Spark job, while a DELETE's tasks write its files, and
while the catalog is asked to commit; and in the shell, which keeps running.

Each case ends with the one line `mor: interrupted` (saying what a write left), exit 130,
nothing on stdout, no process of the run left (its JVM included), and the table as the
interrupt found it: a write that had not committed never commits, and what it wrote is
removed. Classic sessions on pyspark 3.5; Spark Connect (`--remote`) on the newest pyspark.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from legs import soak_in
from mor.api import default_catalog
from mor.cli import main
from mor.interrupts import child_pids

pytestmark = [pytest.mark.connect]

SLOW = "SELECT count(*) FROM t.small s CROSS JOIN range(80000000000) r WHERE r.id % 7 = s.id"
DELETE = "DELETE FROM t.big WHERE id % 3 = 1"
BIG_FILES = 8  # two tasks at a time on local[2]: a write's first files come long before its end


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory, spark: object) -> Path:
    """An embedded catalog with t.small (16 rows) and t.big (8 data files of 400,000 rows);
    `spark`: the leg's session (on the Connect leg, the server `--remote` names)."""
    wh = tmp_path_factory.mktemp("interrupts")
    cat = default_catalog(str(wh))
    cat.create_namespace("t")
    props = {"format-version": "2", "write.delete.mode": "merge-on-read"}
    small = pa.table({"id": pa.array(range(16), pa.int64())})
    cat.create_table("t.small", schema=small.schema, properties=props).append(small)
    n = 400_000
    big = cat.create_table("t.big", schema=_rows(0, n).schema, properties=props)
    for i in range(BIG_FILES):
        big.append(_rows(i * n, n))
    return wh


def _rows(start: int, n: int) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "v": pc.multiply(ids, 3), "s": pc.cast(ids, pa.string())})


def _remote() -> list[str]:
    """`--remote URL` on the Connect leg: the run's own server (tests/spark_modes.py)."""
    url = os.environ.get("MOR_TEST_CONNECT_URL")
    return ["--remote", url] if url else []


def _connect() -> bool:
    return bool(os.environ.get("MOR_TEST_CONNECT_URL"))


class Run:
    """`mor` as its own process group, signalled once `when(process)` holds."""

    def __init__(
        self,
        wh: Path,
        argv: list[str],
        when: Callable[[subprocess.Popen[str]], bool],
        sig: int = signal.SIGINT,
    ) -> None:
        env = {**os.environ, "MOR_WAREHOUSE": str(wh), "PYTHONFAULTHANDLER": "1"}
        env.pop("SPARK_REMOTE", None)
        p = subprocess.Popen(
            [sys.executable, "-m", "mor.cli", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + 180
        while not when(p):
            assert p.poll() is None, f"mor ended before the phase was reached: {p.stderr.read()}"
            assert time.monotonic() < deadline, "the phase was not reached in 180 s"
            time.sleep(0.05)
        p.send_signal(sig)
        signalled = time.monotonic()
        try:
            self.out, self.err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGABRT)  # PYTHONFAULTHANDLER: its threads' stacks on stderr
            time.sleep(2)
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            raise AssertionError(f"mor did not end 120 s after the signal: {err[-3000:]}") from None
        self.code = p.returncode
        self.seconds = time.monotonic() - signalled
        self.left = _group_left(p.pid)


def _group_left(pgid: int) -> bool:
    """Whether a process of the run's group (its JVM) is still alive 15 s after it ended."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.2)
    os.killpg(pgid, signal.SIGKILL)
    return True


def _interrupted(run: Run, line: str = "mor: interrupted") -> None:
    assert run.code == 130, run.err
    assert run.out == ""
    assert run.err == line + "\n"
    assert run.seconds < 60
    assert not run.left, "a process of the interrupted run (its JVM) was left running"


def _after(seconds: float) -> Callable[[subprocess.Popen[str]], bool]:
    start = time.monotonic()
    return lambda p: time.monotonic() - start >= seconds


def _jvm_for(seconds: float) -> Callable[[subprocess.Popen[str]], bool]:
    """The run's local JVM has been up `seconds` (on Connect: the run `seconds` old)."""
    if _connect():
        return _after(seconds + 2)
    seen: list[float] = []

    def when(p: subprocess.Popen[str]) -> bool:
        if not seen and child_pids(p.pid):
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] >= seconds

    return when


def _state(wh: Path) -> tuple[int, set[str]]:
    """t.big's snapshot and the files under its statements' folders."""
    tbl = default_catalog(str(wh)).load_table("t.big")
    data = Path(tbl.metadata.location.removeprefix("file:").removeprefix("//")) / "data"
    made = {str(f) for d in data.glob("mor-*") for f in d.rglob("*") if f.is_file()}
    return tbl.metadata.current_snapshot_id, made


def test_before_spark_runs(wh: Path) -> None:
    _interrupted(Run(wh, ["run", *_remote(), "-e", SLOW], _after(1.0)))


def test_while_the_session_starts(wh: Path) -> None:
    """Classic: the JVM is up but the session not yet made (pyspark would leave that JVM
    running: it is stopped). On Connect: while the client connects."""
    when = _after(1.5) if _connect() else (lambda p: bool(child_pids(p.pid)))
    _interrupted(Run(wh, ["run", *_remote(), "-e", SLOW], when))


def test_during_a_query_job_sigint_and_sigterm(wh: Path) -> None:
    _interrupted(Run(wh, ["run", *_remote(), "-e", SLOW], _jvm_for(8)))
    _interrupted(Run(wh, ["run", *_remote(), "-e", SLOW], _jvm_for(8), signal.SIGTERM))


def test_while_a_delete_writes_its_files(wh: Path) -> None:
    """The signal comes once the DELETE's tasks have written files: the statement does not
    commit, and its files are removed."""
    before = _state(wh)
    run = Run(wh, ["run", *_remote(), "-e", DELETE], lambda p: _state(wh)[1] > before[1])
    want = "mor: interrupted: DELETE on t.big did not commit; the files it wrote were removed"
    _interrupted(run, want)
    assert _state(wh) == before


# through Connect in `make soak` (since 2026-12-06, CI's time): the DELETE's files above are
# cleared by the same path, and the Connect leg keeps the query job and the DELETE
@soak_in("connect")
def test_while_compact_writes_its_files(wh: Path) -> None:
    """A maintenance command: compaction's tasks have written files when the signal comes."""
    before = _state(wh)
    argv = ["compact", "t.big", *_remote(), "--target-file-size", "100000000"]
    run = Run(wh, argv, lambda p: _state(wh)[1] > before[1])
    _interrupted(
        run, "mor: interrupted: compact of t.big did not commit; the files it wrote were removed"
    )
    assert _state(wh) == before


def test_during_the_commit_the_catalogs_answer_is_awaited(
    wh: Path, spark: object, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process (the signal is sent from inside the catalog's commit): the commit lands,
    the line names its snapshot, and the statements after it do not run."""
    from mor.writer.producer import SnapshotProducer

    asked = SnapshotProducer.commit

    def commit(self: SnapshotProducer, *a: object, **k: object) -> object:
        os.kill(os.getpid(), signal.SIGINT)
        return asked(self, *a, **k)

    monkeypatch.setattr(SnapshotProducer, "commit", commit)
    monkeypatch.setenv("MOR_WAREHOUSE", str(wh))
    before, _ = _state(wh)
    sql = "DELETE FROM t.big WHERE id = 5; DELETE FROM t.big WHERE id = 6"
    code = main(["run", *_remote(), "-e", sql])
    out, err = capsys.readouterr()
    after, _ = _state(wh)
    assert code == 130 and out == "", err
    assert after != before
    assert err == (
        f"mor: interrupted: DELETE on t.big committed as snapshot {after} before it took effect\n"
    )
    table = default_catalog(str(wh)).load_table("t.big")
    assert table.metadata.snapshot_by_id(after).parent_snapshot_id == before  # one DELETE only


def test_before_the_commit_is_asked_nothing_commits(
    wh: Path, spark: object, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signal after the tasks wrote, before the catalog is asked: no commit, no file."""
    import mor.row_writes as row_writes

    made = row_writes._operation

    def operation(*a: object, **k: object) -> object:
        op = made(*a, **k)
        os.kill(os.getpid(), signal.SIGINT)
        return op

    monkeypatch.setattr(row_writes, "_operation", operation)
    monkeypatch.setenv("MOR_WAREHOUSE", str(wh))
    before = _state(wh)
    code = main(["run", *_remote(), "-e", "DELETE FROM t.big WHERE id = 7"])
    out, err = capsys.readouterr()
    assert code == 130 and out == "", err
    assert (
        err == "mor: interrupted: DELETE on t.big did not commit; the files it wrote were removed\n"
    )
    assert _state(wh) == before


@soak_in("connect")  # since 2026-12-06, CI's time; classic sessions hold it in CI
def test_the_shell_cancels_the_statement_and_keeps_running(wh: Path) -> None:
    env = {**os.environ, "MOR_WAREHOUSE": str(wh)}
    env.pop("SPARK_REMOTE", None)
    p = subprocess.Popen(
        [sys.executable, "-m", "mor.cli", "shell", *_remote()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    assert p.stdin is not None
    p.stdin.write(SLOW + ";\n")
    p.stdin.flush()
    when = _jvm_for(8)
    deadline = time.monotonic() + 180
    while not when(p):
        assert p.poll() is None
        if time.monotonic() > deadline:  # the statement never reached Spark: say why
            p.kill()
            raise AssertionError(f"no Spark job within 180 s: {p.communicate()[1][-2000:]}")
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    time.sleep(1)
    p.stdin.write("SELECT count(*) AS n FROM t.small;\n")
    p.stdin.flush()
    out, err = p.communicate("", timeout=120)
    assert p.returncode == 0, err
    assert err == "mor: interrupted\n"
    assert "| 16 |" in out
    assert not _group_left(p.pid)
