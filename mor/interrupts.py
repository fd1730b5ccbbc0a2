"""Ctrl-C (SIGINT) and SIGTERM for the CLI: one handler for the whole run.

The first signal marks the run interrupted and cancels the Spark jobs of the sessions it
started (classic: `cancelAllJobs`; Spark Connect: `interruptAll`), on a thread of its own: the
main thread may be inside a py4j call, whose connection must not be reused from a signal
handler (pyspark's own handler does that and fails with "reentrant call"). Then:

- inside a Spark action (`spark_action()`), the handler returns: the cancelled job makes the
  action fail, and the action raises `Interrupted` (the py4j connection stays usable, which
  keeps the shell's session);
- anywhere else (planning, the session starting), it raises KeyboardInterrupt at once;
- inside `held()` (a commit asked of the catalog), nothing happens until the catalog has
  answered: what the commit made is then known, and the block raises `Interrupted` saying
  which.

A write that has not committed checks `raise_if_interrupted()` before it asks: nothing
commits after the signal. The CLI prints one line (`line`) and exits 130. Later signals of
the same run are ignored while it winds down (its clean-up is bounded).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The run was interrupted; `detail` says what it left (a write's files, a commit's
    outcome)."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail)
        self.detail = detail


class _State:
    def __init__(self) -> None:
        self.installed = False
        self.fired: int | None = None  # the signal that interrupted the run
        self.held = 0  # depth of held() blocks
        self.pending: int | None = None  # a signal that arrived while held
        self.in_action = 0  # depth of spark_action() blocks
        self.sessions: list[Any] = []
        self.cancelled = threading.Event()  # the cancel thread is done


_S = _State()


def install() -> dict[int, Any]:
    """Take SIGINT and SIGTERM for this run, its state fresh; the handlers it replaced, for
    `uninstall` (main thread only: elsewhere Python delivers no signal and the caller's
    handlers stay)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    before: dict[Any, Any] = {s: signal.signal(s, _handler) for s in SIGNALS}
    if not _S.installed:
        reset()
    _S.installed = True
    if sys.unraisablehook is not _unraisable:
        before["unraisable"] = _PREVIOUS[0] = sys.unraisablehook
        sys.unraisablehook = _unraisable
    return before


_PREVIOUS: list[Any] = [sys.__unraisablehook__]  # the hook `_unraisable` passes others to


def _unraisable(unraisable: Any) -> None:
    """The interrupt raised where Python cannot raise it (a fork callback while Spark's JVM
    is launched, a finalizer) is not printed as "Exception ignored": the run stops at its next
    step instead (no session is watched and no Spark action starts once a signal fired), with
    its one line."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _S.fired is not None:
        return
    _PREVIOUS[0](unraisable)


def uninstall(before: dict[int, Any]) -> None:
    """The run is over (a CLI command called in-process): its handlers are put back."""
    for s, h in before.items():
        if s == "unraisable":
            sys.unraisablehook = h
        else:
            signal.signal(s, h)
    _S.installed = False
    _S.sessions.clear()
    reset()


def watch(spark: Any) -> Any:
    """`spark`'s jobs are cancelled by an interrupt; the handler is taken back from pyspark,
    which installs its own when a context starts on the main thread."""
    if not _S.installed:
        return spark
    if _S.fired is not None:  # the signal came while the session started: no query after it
        raise Interrupted()
    if all(s is not spark for s in _S.sessions):
        _S.sessions.append(spark)
    if threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, _handler)
    return spark


def interrupted() -> bool:
    return _S.fired is not None


def terminating() -> bool:
    """The run was asked to end (SIGTERM): the shell leaves rather than prompting again."""
    return _S.fired == signal.SIGTERM


def reset() -> None:
    """Ready for the next statement (the shell keeps running after an interrupt)."""
    _S.fired = None
    _S.pending = None
    _S.cancelled = threading.Event()


def _handler(signum: int, frame: Any) -> None:
    if _S.held:
        _S.pending = signum
        return
    if _S.fired is not None:
        return  # winding down already
    _S.fired = signum
    _cancel_jobs()
    if not _S.in_action:
        raise KeyboardInterrupt


def _cancel_jobs() -> None:
    sessions = list(_S.sessions)
    done = _S.cancelled

    def cancel() -> None:
        for spark in sessions:
            try:
                if _is_connect(spark):
                    spark.interruptAll()
                else:
                    spark.sparkContext.cancelAllJobs()
            except Exception:  # noqa: BLE001,S112 - a session already gone has no jobs
                continue

    def run() -> None:
        # again while the main thread is still in its action: a job submitted just after a
        # cancel (the action was still being planned) is cancelled by the next one
        deadline = time.monotonic() + 120
        try:
            cancel()
            while _S.in_action and time.monotonic() < deadline:
                time.sleep(0.5)
                cancel()
        finally:
            done.set()

    if not sessions:
        done.set()
        return
    threading.Thread(target=run, name="mor-cancel", daemon=True).start()


def _is_connect(spark: Any) -> bool:
    from mor.physical.spark.session import is_connect  # a session exists: pyspark is loaded

    return is_connect(spark)


def settle(timeout: float = 15.0) -> bool:
    """Wait until the cancelled jobs have stopped (their tasks may still write for a moment
    after a job is cancelled: Spark kills a Python task's worker `spark.python.task.killTimeout`
    after it, 2 s by default). True when they are known to have stopped."""
    if _S.fired is None:  # not an interrupt of this run's (mor_sql: Python's own handler)
        return False
    deadline = time.monotonic() + timeout
    if not _S.cancelled.wait(timeout):
        return False
    stopped = True
    for spark in list(_S.sessions):
        if _is_connect(spark):
            continue  # the server stops the operation's tasks itself
        tracker = spark.sparkContext.statusTracker()
        while True:
            try:
                active = tracker.getActiveStageIds()
            except Exception:  # noqa: BLE001 - the session is gone: nothing runs
                break
            if not active:
                break
            if time.monotonic() > deadline:
                stopped = False
                break
            time.sleep(0.2)
    time.sleep(min(3.0, max(0.0, deadline - time.monotonic())))  # a killed worker's last write
    return stopped


@contextmanager
def spark_action() -> Iterator[None]:
    """A Spark action on the main thread: an interrupt cancels its job and the action raises
    `Interrupted` whether the job failed or finished meanwhile."""
    if _S.fired is not None:  # interrupted before it (an interrupt something swallowed)
        raise Interrupted()
    _S.in_action += 1
    try:
        yield
    except BaseException as e:
        if _S.fired is not None and not isinstance(e, Interrupted):
            raise Interrupted() from e
        raise
    finally:
        _S.in_action -= 1
    if _S.fired is not None:
        raise Interrupted()


def raise_if_interrupted() -> None:
    if _S.fired is not None:
        raise Interrupted()


def raise_if_asked() -> None:
    """`raise_if_interrupted`, and inside a `held` block a signal held so far too: a long
    block (a procedure writing many files before its commit) stops before what it holds
    against is made."""
    if _S.fired is not None or _S.pending is not None:
        raise Interrupted()


@contextmanager
def held(outcome: Any = None) -> Iterator[None]:
    """A signal during the block is held until it ends, then raised as `Interrupted` whose
    detail is `outcome()` (what the block made: a commit's snapshot); the block is not
    entered once the run is interrupted. Outside the CLI (`mor_sql` in a user's program),
    SIGINT is held the same way for the block's duration, on the main thread."""
    raise_if_interrupted()
    borrowed = None
    if not _S.installed and threading.current_thread() is threading.main_thread():
        borrowed = signal.signal(signal.SIGINT, _handler)
    _S.held += 1
    try:
        yield
    except BaseException:
        if _S.held == 1 and _S.pending is not None:  # the block failed: nothing was made
            _S.fired = _S.pending if _S.installed else None
            _S.pending = None
        raise
    finally:
        _S.held -= 1
        if borrowed is not None:
            signal.signal(signal.SIGINT, borrowed)
    if _S.pending is not None and not _S.held:
        pending, _S.pending = _S.pending, None
        if _S.installed:
            _S.fired = pending
            _cancel_jobs()
        raise Interrupted(outcome() if outcome is not None else "")


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc; where there is none, from pgrep)."""
    import os
    import subprocess

    if not os.path.isdir("/proc"):  # macOS
        try:
            out = subprocess.run(
                ["pgrep", "-P", str(pid)], capture_output=True, text=True, timeout=5
            ).stdout
            return [int(p) for p in out.split()]
        except (OSError, subprocess.SubprocessError, ValueError):
            return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:  # ended meanwhile
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:  # the field after the state
            pids.append(int(entry))
    return pids


def stop_children() -> None:
    """SIGTERM to this process's child processes: the JVM of a local Spark session. Its
    stdin closing ends it when this process exits, except when the interrupt came while
    it started: pyspark then removes the file the JVM was to write its port to, and the
    JVM, its start failed, lives on (its gateway thread waits for a connection)."""
    import os

    for pid in child_pids(os.getpid()):
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            continue


def not_committed(what: str, table: str, clear: Any) -> Interrupted:
    """The interrupt of a write that did not commit, once its cancelled tasks have stopped
    and `clear()` (the number of its files left; -1: the store refused to list them) has
    removed what it wrote: the line says whether anything may remain, and where to look."""
    stopped = settle()
    left = clear()
    if left or not stopped:
        return Interrupted(
            f"{what} did not commit; files it wrote may remain: `mor orphans {table}` lists them"
        )
    return Interrupted(f"{what} did not commit; the files it wrote were removed")


def detail_of(e: BaseException | None) -> str:
    """The detail of the `Interrupted` in `e`'s chain, if any."""
    seen = 0
    while e is not None and seen < 20:
        if isinstance(e, Interrupted) and e.detail:
            return e.detail
        e = e.__cause__ or e.__context__
        seen += 1
    return ""


def quiet_after(record: Any) -> bool:
    """A logging filter: nothing is logged once the run is interrupted (py4j logs the call
    an interrupt broke, with its traceback)."""
    return _S.fired is None


def line(e: BaseException | None) -> str:
    """The one line an interrupted run ends with."""
    d = detail_of(e)
    return "mor: interrupted" + (f": {d}" if d else "")
