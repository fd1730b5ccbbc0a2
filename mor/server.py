"""`mor server start|status|stop`: a Spark Connect server on this machine that later commands
use, so that a command pays for its own work and not for a JVM's start.

The server is Spark's own (`org.apache.spark.sql.connect.service.SparkConnectServer`, in the jars
of pyspark 4.x), started with `spark-submit` from this Python's pyspark with the settings a
session `mor run` starts would get (physical/spark/session.start_options: master, driver memory,
shuffle partitions, time zone, the config file's [spark] table, `--conf`, Hadoop's s3a connector
where tables may be on S3). It listens on 127.0.0.1 only: Spark Connect has no authentication,
and anyone who reaches it runs code as this user. Its settings go to `spark-submit` in a
properties file readable by this user alone, removed once the server listens: no value of
them is on a command line other users can list.

What a running server is, is kept in `<tmp>/mor-<uid>/server.json` (a folder of this user's,
mode 0700; `$MOR_SERVER_DIR` names another): its pid with the process's start time (a pid the
system gave to another process since is not taken for the server), port, master and log.
Commands without `--master`,
`--remote` or `$SPARK_REMOTE` use it while it runs (the `server` setting: auto, or off).

Beside it runs the command host (mor/host.py): a Python process of this environment that has
imported mor once, in which each later `mor` command runs in a child process of its own
(host.log in the same folder); `mor server stop` ends both.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

from mor.physical.spark.processes import start_ticks
from mor.planner.errors import ConfigError, MorError
from mor.server_folder import SOCKET, folder_path, users_alone

DEFAULT_PORT = 15002  # Spark Connect's own default
CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


@dataclass(frozen=True)
class ServerState:
    """A server `mor server start` started (server.json)."""

    pid: int
    ticks: int  # the process's start time in clock ticks since boot (/proc/PID/stat), 0: unknown
    port: int
    master: str
    pyspark: str
    python: str
    log: str
    started: float  # time.time() when it listened
    host_pid: int = 0  # the command host (mor/host.py), 0: none started
    host_ticks: int = 0

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def host_running(self) -> bool:
        now = start_ticks(self.host_pid) if self.host_pid else -1
        return now >= 0 and (self.host_ticks == 0 or now == self.host_ticks)

    def line(self) -> str:
        up = _duration(time.time() - self.started)
        host = (
            f"commands run in its command host (pid {self.host_pid})"
            if self.host_running()
            else "no command host (commands import mor each: see host.log)"
        )
        return (
            f"mor server: running at {self.url} (pid {self.pid}, up {up}, pyspark {self.pyspark}, "
            f"master {self.master}); {host}; log: {self.log}"
        )


def folder() -> str:
    """`$MOR_SERVER_DIR`, else `<tmp>/mor-<uid>`, this user's alone: made with mode 0700,
    refused when another user owns it or others may write in it (a shared /tmp)."""
    path = folder_path()
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if not users_alone(st):
        raise ConfigError(
            f"{path} is not this user's alone (owner uid {st.st_uid}, mode "
            f"{oct(st.st_mode & 0o777)}): remove it, or set TMPDIR to a folder of your own"
        )
    return path


def _state_path() -> str:
    return os.path.join(folder(), "server.json")


def _is(state: ServerState) -> bool:
    """The recorded process is still the server (not gone, not a reused pid)."""
    now = start_ticks(state.pid)
    return now >= 0 and (state.ticks == 0 or now == state.ticks)


def recorded() -> ServerState | None:
    """What server.json records (None: nothing, or a file this version cannot read)."""
    try:
        with open(_state_path(), encoding="utf-8") as f:
            return ServerState(**json.load(f))
    except (OSError, ValueError, TypeError):
        return None


def running() -> ServerState | None:
    """The server `mor server start` started, while its process runs. Reads one small file:
    commands ask this before they choose their session."""
    try:
        state = recorded()
    except ConfigError:  # a folder that is not this user's: no server of this user's
        return None
    return state if state is not None and _is(state) else None


@contextmanager
def _locked() -> Iterator[None]:
    """One `mor server start` or `stop` of this user's at a time."""
    import fcntl

    fd = os.open(os.path.join(folder(), "server.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise ConfigError(
            "mor server needs Java 17 or newer (for Spark): none found in JAVA_HOME or on the "
            "PATH; install a JDK, e.g. 'apt-get install openjdk-17-jre-headless'"
        )
    return java


def _pyspark_home() -> tuple[str, str]:
    """(pyspark's folder, its version); the Connect server is in the jars of 4.x only."""
    try:
        import pyspark
    except ImportError as e:
        raise ConfigError(
            "mor server needs pyspark 4.x in this Python (pip install 'mor[spark]')"
        ) from e
    version = pyspark.__version__
    if int(version.split(".")[0]) < 4:
        raise ConfigError(
            f"mor server needs pyspark 4.0 or later in this Python (installed: pyspark "
            f"{version}: its jars hold no Spark Connect server, and mor's Connect client needs "
            "4.x); commands here start a classic session each. For a server: pip install "
            "'pyspark[connect]>=4' in an environment of its own (in mor's checkout: make server)"
        )
    home = os.path.dirname(os.path.abspath(pyspark.__file__))
    if not os.path.exists(os.path.join(home, "bin", "spark-submit")):
        raise ConfigError(f"pyspark at {home} has no bin/spark-submit to start a server with")
    return home, version


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _properties(options: Mapping[str, str], path: str) -> None:
    """`options` as a Java properties file (UTF-8, as spark-submit reads it) only this user
    may read."""

    def esc(text: str, key: bool) -> str:
        out = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
        if key:
            for c in "=: #!":
                out = out.replace(c, "\\" + c)
        elif out.startswith((" ", "\t")):
            out = "\\" + out
        return out

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        for k, v in options.items():
            f.write(f"{esc(k, True)}={esc(str(v), False)}\n")


def start(
    port: int = DEFAULT_PORT,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    s3a: bool = False,
    timeout: float = 300.0,
    warm: bool = True,
    plans: Callable[[Any, str, int], None] | None = None,
) -> ServerState:
    """Start the server and wait until it listens (its first start may download packages:
    `timeout`), then warm it (`warm`: one small query through Connect, so a first command does
    not pay for the server's own first query). An interrupt meanwhile stops what started."""
    from mor.physical.spark.session import start_options

    with _locked():
        held = running()
        if held is not None:
            raise ConfigError(
                f"a mor server is already running at {held.url} (pid {held.pid}): "
                "`mor server stop` first"
            )
        home, version = _pyspark_home()
        _java()
        _end_host(recorded())
        if not _port_free(port):
            raise ConfigError(f"port {port} on 127.0.0.1 is in use: give another with --port")
        options, _ = start_options(master, conf, s3a)
        options = {
            **options,
            "spark.app.name": "mor-server",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port),
        }
        base = folder()
        log = os.path.join(base, "server.log")
        props = os.path.join(base, f"server-{os.getpid()}.properties")
        _properties(options, props)
        env = {**os.environ, "SPARK_HOME": home}
        for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "PYSPARK_GATEWAY_PORT"):
            env.pop(name, None)
        if "spark.pyspark.python" not in options:
            # the server's Python tasks (row-level writes, compaction) run this environment
            env["PYSPARK_PYTHON"] = sys.executable
        cmd = [
            os.path.join(home, "bin", "spark-submit"),
            "--properties-file",
            props,
            "--class",
            CLASS,
            "spark-internal",
        ]
        proc = None
        state: ServerState | None = None
        try:
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=base,
                    start_new_session=True,  # Ctrl-C in this terminal does not reach it
                )
            _wait_listening(proc, port, log, timeout)
            state = ServerState(
                pid=proc.pid,
                ticks=max(start_ticks(proc.pid), 0),
                port=port,
                master=options["spark.master"],
                pyspark=version,
                python=sys.executable,
                log=log,
                started=time.time(),
            )
            _write_state(state)
            if warm:
                _warm(state, plans)
            host = _start_host(base)
            if host is not None:
                state = replace(state, host_pid=host, host_ticks=max(start_ticks(host), 0))
                _write_state(state)
            return state
        except BaseException:
            if state is not None and state.host_pid:
                _end(state.host_pid)
            if proc is not None:
                _end(proc.pid)
                _forget()
            raise
        finally:
            try:
                os.remove(props)
            except OSError:
                pass


def _end_host(state: ServerState | None) -> None:
    try:
        if state is not None and state.host_running():
            _end(state.host_pid)
    except ConfigError:
        pass


def _start_host(base: str, timeout: float = 60.0) -> int | None:
    """The command host (mor/host.py) in this Python, once it listens: its pid; None when it
    could not start (commands then import mor each, as without it: host.log says why)."""
    path = os.path.join(base, SOCKET)
    try:
        os.remove(path)  # a host's that ended without removing it
    except OSError:
        pass
    with open(os.path.join(base, "host.log"), "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mor.host", base],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=base,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None
        if os.path.exists(path):
            return proc.pid
        time.sleep(0.05)
    _end(proc.pid)
    return None


def _wait_listening(proc: subprocess.Popen[bytes], port: int, log: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise MorError(
                f"the Spark Connect server exited at start ({_last_words(log)}); log: {log}"
            )
        if _listening(port):
            return
        time.sleep(0.2)
    raise MorError(f"the Spark Connect server did not listen within {timeout:.0f} s; log: {log}")


def _last_words(log: str) -> str:
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip() and not ln.startswith(("\t", " "))]
    except OSError:
        return "no log"
    errors = [ln for ln in lines if "Exception" in ln or "Error" in ln or "error" in ln]
    return (errors or lines or ["no output"])[-1][:300]


def _write_state(state: ServerState) -> None:
    path = _state_path()
    tmp = f"{path}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(asdict(state), f)
    os.replace(tmp, path)


def _forget() -> None:
    try:
        os.remove(_state_path())
    except OSError:
        pass


def _warm(
    state: ServerState, plans: Callable[[Any, str, int], None] | None, rounds: int = 4
) -> None:
    """Queries through Connect that touch what a first mor query does, so that the server's
    own first-query costs (class loading, code generation, the JIT) are paid here and not by
    the first commands: a Parquet read with row positions, a join, a union, an aggregate,
    then `plans(spark, warehouse, rounds)`: mor's own plan of a small merge-on-read table
    (the CLI gives mor.demo's `warm_plans`: position deletes, two equality delete id sets,
    three branches) `rounds` times: the first commands after a start
    took 3.2, 2.0, 1.9, 1.7 and 1.5 s without it, 1.0-1.2 s with four rounds (2 rounds: about
    2 s; the start itself 19 -> 29 s on 2 cores, pyspark 4.3.0)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mor.physical.spark.session import remote_session

    path = os.path.join(folder(), "warm.parquet")
    warehouse = os.path.join(folder(), "warm-warehouse")
    pq.write_table(pa.table({"id": pa.array(range(1000), pa.int64())}), path)
    from pyspark.sql import functions as F

    spark = remote_session(state.url)
    try:
        data = spark.read.parquet(path).select("id", "_metadata.row_index", "_metadata.file_path")
        gone = spark.range(0, 1000, 7).withColumnRenamed("id", "gone")
        live = data.join(gone, F.col("id").eqNullSafe(F.col("gone")), "left_anti")
        both = live.unionByName(data.where("id < 10"))
        both.groupBy((F.col("id") % 3).alias("b")).count().collect()
        if plans is not None:
            plans(spark, warehouse, rounds)
    except Exception as e:  # noqa: BLE001 - a server that runs no query is not left running
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise MorError(
            f"the Spark Connect server started but could not run a query ({first[:300]}); "
            f"log: {state.log}"
        ) from e
    finally:
        spark.stop()
        shutil.rmtree(warehouse, ignore_errors=True)
        try:
            os.remove(path)
        except OSError:
            pass


def stop(timeout: float = 30.0) -> ServerState | None:
    """Stop the running server (SIGTERM to its process group, SIGKILL after `timeout`);
    None: none was running."""
    with _locked():
        state = running()
        if state is None:
            _end_host(recorded())  # a host whose server ended on its own
            _forget()
            return None
        if state.host_running():
            _end(state.host_pid, timeout)
        _end(state.pid, timeout)
        _forget()
        return state


def _end(pid: int, timeout: float = 30.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)  # a child of this process (start)
                if done:
                    return
            except ChildProcessError:
                if start_ticks(pid) < 0:
                    return
            time.sleep(0.1)


def status_fields(state: ServerState | None) -> dict[str, object]:
    """`mor server status --format json`."""
    if state is None:
        return {"running": False}
    return {"running": True, "url": state.url, "uptime_s": round(time.time() - state.started)} | {
        k: v for k, v in asdict(state).items() if k not in ("ticks", "host_ticks")
    } | {"host_running": state.host_running()}


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    return f"{s // 3600}h {s % 3600 // 60}m"
