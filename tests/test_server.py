"""`mor server start|status|stop` (mor/server.py): a Spark Connect server later commands run on.

On pyspark 4.x (the 4.3 classic leg) the whole life of a server, driven as a user drives it:
status, start, a second start refused, commands that run on it (the same rows as a session of
their own), stop, and a server killed behind mor's back. On pyspark 3.5 the refusal, in one
line. Each command is a `mor` process of its own, as a user's are."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from legs import leg

pytestmark = [pytest.mark.spark4]

MOR = [sys.executable, "-m", "mor.cli"]


def _mor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MOR, *args], env=env, capture_output=True, text=True, timeout=600)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _quickstart_server_block() -> list[list[str]]:
    from test_quickstart import _commands

    commands = _commands("sh server")
    assert [c[:3] for c in commands if c[:2] == ["mor", "server"]] == [
        ["mor", "server", "start"], ["mor", "server", "stop"]
    ], commands  # fmt: skip
    return commands


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    from mor.demo import build_demo_table

    build_demo_table(str(tmp_path / "wh"))
    out = {**os.environ, "MOR_SERVER_DIR": str(tmp_path / "server")}
    out["MOR_WAREHOUSE"] = str(tmp_path / "wh")
    for name in ("SPARK_REMOTE", "MOR_SPARK_MASTER"):
        out.pop(name, None)
    return out


def test_a_server_serves_later_commands_until_it_is_stopped(
    env: dict[str, str], spark: object
) -> None:
    status = _mor("server", "status", env=env)
    assert (status.returncode, status.stdout) == (3, "mor server: not running\n")
    port = _free_port()
    if leg() == "3.5":
        start = _mor("server", "start", "--port", str(port), env=env)
        assert start.returncode == 1
        assert start.stderr.startswith("mor: mor server needs pyspark 4.0 or later")
        assert len(start.stderr.splitlines()) == 1
        return
    start = _mor("server", "start", "--port", str(port), env=env)
    assert start.returncode == 0, start.stderr
    assert start.stdout.startswith(f"mor server: running at sc://127.0.0.1:{port} (pid ")
    pid = int(start.stdout.split("(pid ", 1)[1].split(",", 1)[0])
    host = 0
    try:
        again = _mor("server", "start", "--port", str(_free_port()), env=env)
        assert again.returncode == 1
        assert f"a mor server is already running at sc://127.0.0.1:{port} (pid {pid})" in (
            again.stderr
        )
        # a command that names no Spark runs on the server (its app name says so), with the
        # rows this test's own session gives
        sql = "SELECT order_id, region, amount FROM demo.orders ORDER BY order_id"
        on = _mor(
            "run",
            "-e",
            sql.replace(" FROM", ", '${spark.app.name}' AS app FROM"),
            "--format",
            "csv",
            env=env,
        )
        assert on.returncode == 0, on.stderr
        import csv
        import io

        from mor import mor_sql
        from mor.api import default_catalog

        got = list(csv.reader(io.StringIO(on.stdout)))
        assert got[0] == ["order_id", "region", "amount", "app"]
        catalog = default_catalog(env["MOR_WAREHOUSE"])
        own = [[str(v) for v in r] for r in mor_sql(sql, spark=spark, catalog=catalog).collect()]
        assert [r[:3] for r in got[1:]] == own and own
        assert {r[3] for r in got[1:]} == {"mor-server"}
        config = _mor("config", env=env)
        assert f"server       mor server: running at sc://127.0.0.1:{port} (pid {pid}" in (
            config.stdout
        )
        # the quickstart's server block (docs/quickstart.md, "```sh server"): its commands
        # between start and stop, as the page has them, run on this server
        for c in _quickstart_server_block():
            if c[0] == "pip" or c[1] == "server":
                assert c[0] == "pip" or c[2] in ("start", "stop"), c
                continue
            done = _mor(*c[1:], env=env)
            assert done.returncode == 0, (c, done.stderr)
            assert "| EU " in done.stdout and "| US " in done.stdout, done.stdout
        # the `mor` command (mor/launch.py) runs in the server's command host (mor/host.py):
        # the same rows as the command run alone, and the host's log counts it
        assert "; commands run in its command host (pid " in start.stdout
        host = int(start.stdout.split("command host (pid ", 1)[1].split(")", 1)[0])
        log = Path(env["MOR_SERVER_DIR"]) / "host.log"
        before = log.read_text().count("mor host: command ")
        launched = subprocess.run(
            [sys.executable, "-m", "mor.launch", "run", "-e", sql, "--format", "csv"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert (launched.returncode, launched.stderr) == (0, "")
        assert launched.stdout == _mor("run", "-e", sql, "--format", "csv", env=env).stdout
        assert log.read_text().count("mor host: command ") == before + 1
        # killed behind mor's back: not running, and nothing to stop but its command host
        os.killpg(pid, signal.SIGKILL)
        assert _gone(pid)
        assert _mor("server", "status", env=env).returncode == 3
        assert _mor("server", "stop", env=env).stdout == "mor server: not running\n"
        assert _gone(host)
    finally:
        for gone in (pid, host):
            try:
                os.killpg(gone, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_stop_ends_the_server_and_its_process_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mor server stop` on a recorded server (here a stand-in process of its own session,
    as `start` makes it, with a child): SIGTERM to the group, the record removed, exit 0."""
    from mor import server

    monkeypatch.setenv("MOR_SERVER_DIR", str(tmp_path / "server"))
    proc = subprocess.Popen(
        ["sh", "-c", "sleep 600 & wait"], start_new_session=True, stdout=subprocess.DEVNULL
    )
    try:
        server._write_state(
            server.ServerState(
                pid=proc.pid,
                ticks=server.start_ticks(proc.pid),
                port=_free_port(),
                master="local[2]",
                pyspark="4.1.4",
                python=sys.executable,
                log=str(tmp_path / "server.log"),
                started=time.time(),
            )
        )
        env = {**os.environ, "MOR_SERVER_DIR": str(tmp_path / "server")}
        assert _mor("server", "status", env=env).returncode == 0
        stop = _mor("server", "stop", env=env)
        assert (stop.returncode, stop.stdout) == (0, f"mor server: stopped (pid {proc.pid})\n")
        assert proc.wait(30) == -signal.SIGTERM
        assert not (tmp_path / "server" / "server.json").exists()
        assert _mor("server", "status", env=env).returncode == 3
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def _gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.2)
    return False


def test_which_spark_a_command_runs_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--remote (then $SPARK_REMOTE) wins; --master or `server=off` mean a session of the
    command's own; otherwise the server `mor server start` recorded, while its process runs
    (a recorded pid now given to another process is not it) and this Python can be its
    client. No Spark: the choice is made from the options and one small file."""
    import argparse
    import dataclasses

    from mor import options, server

    monkeypatch.setenv("MOR_SERVER_DIR", str(tmp_path / "server"))
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.setattr(options, "connect_client", lambda: True)

    def url(**kw: str | None) -> str | None:
        return options.remote_url(argparse.Namespace(**{"remote": None, "master": None, **kw}))

    assert url() is None  # nothing recorded
    me = server.ServerState(
        pid=os.getpid(),
        ticks=server.start_ticks(os.getpid()),
        port=15999,
        master="local[2]",
        pyspark="4.1.4",
        python=sys.executable,
        log=str(tmp_path / "server.log"),
        started=time.time(),
    )
    server._write_state(me)
    assert (tmp_path / "server" / "server.json").stat().st_mode & 0o077 == 0
    assert url() == "sc://127.0.0.1:15999"
    assert url(master="local[1]") is None
    assert url(remote="sc://elsewhere:15002") == "sc://elsewhere:15002"
    monkeypatch.setenv("SPARK_REMOTE", "sc://env:15002")
    assert url() == "sc://env:15002"
    monkeypatch.delenv("SPARK_REMOTE")
    monkeypatch.setenv("MOR_SERVER", "off")
    assert url() is None
    monkeypatch.delenv("MOR_SERVER")
    monkeypatch.setattr(options, "connect_client", lambda: False)  # pyspark 3.5 here
    assert url() is None
    monkeypatch.setattr(options, "connect_client", lambda: True)
    server._write_state(dataclasses.replace(me, ticks=me.ticks + 1))  # the pid reused since
    assert url() is None and server.running() is None
    with pytest.raises(Exception, match="give either --remote"):
        url(remote="sc://x:1", master="local[1]")
