"""The command host (mor/host.py, mor/launch.py): a `mor` command runs in a child of a process
that imported mor once, and is the same command as when it runs alone: its output, errors,
exit code, working folder, environment and interrupts are its own.

The host runs here as `mor server start` starts it (`python -m mor.host FOLDER`), without a
Spark Connect server: the commands are those that need no Spark (catalog, metadata, planning,
their errors). tests/test_server.py runs queries through the host a real server starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = [pytest.mark.check]

LAUNCH = [sys.executable, "-m", "mor.launch"]


class Host:
    def __init__(self, folder: Path, env: dict[str, str], proc: subprocess.Popen[bytes]) -> None:
        self.folder, self.env, self.proc = folder, env, proc

    def log(self) -> str:
        return (self.folder / "host.log").read_text()

    def commands(self) -> int:
        return self.log().count("mor host: command ")

    def children(self) -> list[int]:
        from mor.interrupts import child_pids

        return child_pids(self.proc.pid)


def _mor(*args: str, env: dict[str, str], cwd: Path | None = None) -> tuple[int, str, str]:
    done = subprocess.run(
        [*LAUNCH, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    return done.returncode, done.stdout, done.stderr


def _started(folder: Path, env: dict[str, str]) -> Host:
    """A host as `mor server start` starts one, once it listens."""
    with open(folder / "host.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mor.host", str(folder)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=folder,
            start_new_session=True,
        )
    deadline = time.monotonic() + 120
    while not (folder / "host.sock").exists():
        assert proc.poll() is None, (folder / "host.log").read_text()
        assert time.monotonic() < deadline, "the host did not listen within 120 s"
        time.sleep(0.05)
    assert (folder / "host.sock").stat().st_mode & 0o777 == 0o600
    return Host(folder, env, proc)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mor.demo import build_demo_table

    base = tmp_path_factory.mktemp("host")
    build_demo_table(str(base / "wh"))
    return base


def _env(base: Path, folder: Path) -> dict[str, str]:
    folder.mkdir(mode=0o700)
    env = {**os.environ, "MOR_SERVER_DIR": str(folder), "MOR_WAREHOUSE": str(base / "wh")}
    for name in ("SPARK_REMOTE", "MOR_HOST"):
        env.pop(name, None)
    return env


@pytest.fixture(scope="module")
def host(base: Path) -> Iterator[Host]:
    folder = base / "server"
    started = _started(folder, _env(base, folder))
    proc = started.proc
    yield started
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert not (folder / "host.sock").exists()


def test_a_command_in_the_host_is_the_command_run_alone(host: Host) -> None:
    """Output, errors and exit codes are the same as the same command's in a process of its
    own (MOR_HOST=off), and each ran in the host (its log counts them)."""
    alone = {**host.env, "MOR_HOST": "off"}
    commands = [
        ["tables"],
        ["describe", "demo.orders"],
        ["explain", "--no-check", "-e", "SELECT region, count(*) FROM demo.orders GROUP BY 1"],
        ["describe", "demo.nope"],
        ["run", "-e", "SELEC 1"],
        ["run", "--limit", "-1", "-e", "SELECT 1"],
        ["nonsense"],
    ]
    for args in commands:
        before = host.commands()
        there = _mor(*args, env=host.env)
        assert host.commands() == before + 1, (args, host.log())
        assert there == _mor(*args, env=alone), args
    codes = [_mor(*a, env=host.env)[0] for a in commands]
    assert codes == [0, 0, 0, 1, 1, 2, 2]


def test_the_commands_folder_and_environment_are_its_own(host: Host, tmp_path: Path) -> None:
    """A relative file is read from the command's folder, and its environment (here the
    warehouse) is the command's, not the host's."""
    (tmp_path / "q.sql").write_text("SELECT order_id FROM demo.orders WHERE region = 'EU'")
    before = host.commands()
    code, out, err = _mor("explain", "--no-check", "q.sql", env=host.env, cwd=tmp_path)
    assert code == 0, err
    assert "WHERE region = 'EU'" in out
    elsewhere = {**host.env, "MOR_WAREHOUSE": str(tmp_path / "none")}
    code, out, err = _mor("tables", env=elsewhere)
    assert code == 1
    assert err.startswith(f"mor: no embedded catalog at {tmp_path / 'none' / 'catalog.db'} ")
    assert host.commands() == before + 2


def test_a_command_the_host_cannot_run_as_itself_runs_alone(host: Host) -> None:
    """Another PYTHONHASHSEED (read when Python starts) or MOR_HOST=off: the command runs in
    its own process, with the same output."""
    want = _mor("describe", "demo.orders", env=host.env)
    before = host.commands()
    for change in ({"PYTHONHASHSEED": "7"}, {"MOR_HOST": "off"}):
        assert _mor("describe", "demo.orders", env={**host.env, **change}) == want
    assert host.commands() == before
    declined = _mor("tables", env={**host.env, "PYTHONHASHSEED": "7", "MOR_HOST": "debug"})
    assert declined[2].startswith("mor: the command host declined: PYTHONHASHSEED differs")
    assert declined[:2] == (0, "demo.orders\n")


def _wait_for(what: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s"
        time.sleep(0.05)


@contextmanager
def _silent_catalog(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """`env` with a REST catalog `silent` that accepts connections and never answers (a
    command naming it waits until it is interrupted)."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        yield {
            **env,
            "PYICEBERG_CATALOG__SILENT__TYPE": "rest",
            "PYICEBERG_CATALOG__SILENT__URI": f"http://127.0.0.1:{silent.getsockname()[1]}",
        }


def test_an_interrupt_is_the_commands_and_a_command_gone_is_interrupted(host: Host) -> None:
    """Ctrl-C to the command's process reaches its child in the host: one line, exit 130;
    a command process killed mid-way leaves no child behind (the child is interrupted)."""
    with _silent_catalog(host.env) as env:  # the command waits on it
        assert host.children() == []
        command = [*LAUNCH, "tables", "--catalog", "silent"]
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _wait_for(lambda: len(host.children()) == 1)
        time.sleep(1.0)  # well into its request
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert (proc.returncode, out, err) == (130, b"", b"mor: interrupted\n")
        _wait_for(lambda: host.children() == [])
        assert "): exit 130 in " in host.log().rstrip().splitlines()[-1]

        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _wait_for(lambda: len(host.children()) == 1)
        child = host.children()[0]
        # mid-way, as above: a command whose process is gone before it has read its request
        # ends at once (exit 1, nothing run), which is not what this holds
        time.sleep(1.0)
        assert proc.poll() is None
        proc.kill()
        proc.wait(timeout=60)
        _wait_for(lambda: host.children() == [])
        assert f"(pid {child}): exit 130 in " in host.log()


def test_a_host_stopped_interrupts_its_commands_and_tells_them(base: Path) -> None:
    """`mor server stop` (SIGTERM to the host) while a command runs: the command is
    interrupted (one line, exit 130: nothing commits after it) and told so before the host
    ends; later commands run in their own processes."""
    folder = base / "stopped"
    host = _started(folder, _env(base, folder))
    with _silent_catalog(host.env) as env:
        proc = subprocess.Popen(
            [*LAUNCH, "tables", "--catalog", "silent"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _wait_for(lambda: len(host.children()) == 1)
        time.sleep(1.0)
        host.proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert (proc.returncode, out, err) == (130, b"", b"mor: interrupted\n")
    assert host.proc.wait(timeout=30) == 0
    assert not (folder / "host.sock").exists()
    before = host.commands()
    assert _mor("tables", env=host.env) == (0, "demo.orders\n", "")
    assert host.commands() == before


def test_no_host_no_forwarding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a host's socket (or in a folder others may write in) a command runs itself."""
    from mor import host

    monkeypatch.setenv("MOR_SERVER_DIR", str(tmp_path))
    monkeypatch.delenv("MOR_HOST", raising=False)
    tmp_path.chmod(0o700)
    assert host.forward(["tables"]) is None
    (tmp_path / host.SOCKET).write_text("")  # not a socket a host listens on
    (tmp_path / host.SOCKET).chmod(0o600)
    assert host.forward(["tables"]) is None
    tmp_path.chmod(0o777)
    assert host._folder() is None
    from mor import server
    from mor.planner.errors import ConfigError

    assert host.folder_path() == str(tmp_path)  # the folder `mor server` keeps
    with pytest.raises(ConfigError, match="not this user's alone"):
        server.folder()
