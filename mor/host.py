"""The command host: a `mor` command runs in a process that has already imported mor.

Every `mor` command is a new process, and before it sends its first request to a running
`mor server` it imports what running a statement needs (pyiceberg, pyarrow, sqlglot, pandas,
pyspark's Connect client): 1.2-1.5 s of a command whose query takes a fraction of that
(bench/start.py). `mor server start` therefore starts, beside Spark's Connect server, a
Python process of the same environment that imports all of that once (`serve`) and then
waits on a Unix socket in the server's folder (mode 0600 in a folder of this user's alone:
server.py `folder`).

A `mor` command (mor/launch.py) first asks it (`forward`, the standard library only): it
sends its arguments, working folder and environment, and its standard input, output and
error themselves (SCM_RIGHTS). The host forks; the child takes those descriptors, folder and
environment and runs the command exactly as the `mor` process would have (`mor.cli.main`,
the same code, the same output on the same terminal or pipe, the same exit code), while the
command waits for its exit code. Each command is its own process still: nothing it does is
left in the host (no catalog, session, cache or setting: the host imports modules and
nothing else, and never connects to anything), so two commands share no state beyond the
modules' code, and a command is never slowed by another one running.

Ctrl-C in the command's terminal (and SIGTERM, SIGHUP to it) is passed to the child, which
handles it as the command would (one line, exit 130, nothing commits after it); a command
that goes away mid-way (its process killed) is interrupted the same way.

The host declines a command (which then runs in its own process, as without a host) when it
cannot run it as that process would: another Python environment or interpreter, other
`PYTHON*` variables or locale (read when an interpreter starts), mor's code changed since
the host imported it (the host then starts again on the new code), a folder that is gone.
`MOR_HOST=off` runs a command in its own process whatever is running.
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import struct
import sys
import time

from mor.server_folder import SOCKET, folder_path, users_alone

_VERSION = 1
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


# --- the command's side: the standard library only (the `mor` command's first step) -------


def _folder() -> str | None:
    """The server's folder (server.folder) when it is this user's alone; None otherwise."""
    path = folder_path()
    try:
        st = os.stat(path)
    except OSError:
        return None
    return path if users_alone(st) else None


def _send(sock: socket.socket, message: dict[str, object], fds: list[int] | None = None) -> None:
    body = json.dumps(message).encode()
    data = struct.pack("!I", len(body)) + body
    if fds:
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        sent = sock.sendmsg([data], ancillary)
        data = data[sent:]
    if data:
        sock.sendall(data)


def _receive(sock: socket.socket, fds: int = 0) -> tuple[dict[str, object] | None, list[int]]:
    """One message (None: the other side closed) and the descriptors that came with it."""
    got: list[int] = []
    head = b""
    while len(head) < 4:
        if fds and not got and not head:
            size = socket.CMSG_LEN(fds * array.array("i").itemsize)
            chunk, ancillary, _, _ = sock.recvmsg(4, size)
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    a = array.array("i")
                    a.frombytes(data[: len(data) - len(data) % a.itemsize])
                    got.extend(a)
        else:
            chunk = sock.recv(4 - len(head))
        if not chunk:
            return None, got
        head += chunk
    (n,) = struct.unpack("!I", head)
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            return None, got
        body += chunk
    return json.loads(body), got


def forward(argv: list[str]) -> int | None:
    """Run the command `argv` in the host and return its exit code; None: no host runs, or
    it declined (the caller runs the command itself)."""
    if os.environ.get("MOR_HOST", "").strip().lower() in ("off", "0", "false", "no"):
        return None
    if argv[:1] == ["server"]:  # starts and stops the host itself
        return None
    folder = _folder()
    if folder is None:
        return None
    try:
        cwd = os.getcwd()
    except OSError:
        return None
    path = os.path.join(folder, SOCKET)
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o077:  # made by the host: 0600
        return None
    # a signal from here on is the command's: held until its process is known, then passed
    pending: list[int] = []
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    def held(signum: int, frame: object) -> None:
        pending.append(signum)

    before = {s: signal.signal(s, held) for s in _FORWARDED}
    try:
        sock.connect(path)
        request = {
            "version": _VERSION,
            "argv": [sys.argv[0] if sys.argv else "mor", *argv],
            "cwd": cwd,
            "env": dict(os.environ),
            "python": sys.executable,
            "prefix": sys.prefix,
        }
        _send(sock, request, [0, 1, 2])
        reply, _ = _receive(sock)
    except OSError:
        reply = None
    if reply is None or "pid" not in reply:
        sock.close()
        for s, h in before.items():
            signal.signal(s, h)
        if reply is not None and os.environ.get("MOR_HOST", "").strip().lower() == "debug":
            print(f"mor: the command host declined: {reply.get('declined')}", file=sys.stderr)
        if pending:  # interrupted before anything ran
            print("mor: interrupted", file=sys.stderr)
            return 130
        return None
    return _wait(sock, pending)


def _wait(sock: socket.socket, pending: list[int]) -> int:
    """The command runs in the host's child: signals to this process go to it; its exit
    code is this process's."""

    def passed(signum: int, frame: object) -> None:
        try:
            sock.sendall(bytes([signum]))
        except OSError:
            pass

    for s in _FORWARDED:
        signal.signal(s, passed)
    for signum in pending:
        passed(signum, None)
    try:
        reply, _ = _receive(sock)
    except OSError:
        reply = None
    finally:
        for s in _FORWARDED:
            signal.signal(s, signal.SIG_IGN)
        sock.close()
    if reply is None or "exit" not in reply:
        print(
            "mor: the command host ended before the command did (its log: host.log in the "
            "folder `mor server status` names)",
            file=sys.stderr,
        )
        return 1
    return int(reply["exit"])  # type: ignore[arg-type]


# --- the host's side ---------------------------------------------------------------------

# what a command imports before its first request (bench/start.py's `mor start`, a query's
# and a write's path through Connect), imported once by the host; a module missing in this
# environment is passed over
WARM = (
    "mor.cli",
    "mor.statements",
    "mor.execution",
    "mor.api",
    "mor.planning",
    "mor.planner.sql",
    "mor.catalogs",
    "mor.physical.spark.session",
    "mor.physical.spark.names",
    "mor.physical.compile",
    "mor.physical.scan.reads",
    "mor.physical.row_writes",
    "mor.row_writes",
    "mor.inserts",
    "mor.commits",
    "mor.rules.physical.rule_settings",
    "mor.physical.spark.spark_settings",
    "pyiceberg.catalog.sql",
    "pyiceberg.catalog.rest",
    "pyiceberg.io.pyarrow",
    "pyiceberg.io.fsspec",
    "pyarrow.dataset",
    "pyarrow.compute",
    "pyarrow.parquet",
    "sqlglot.dialects.spark",
    "sqlalchemy.dialects.sqlite",
    "pandas",
    "pyspark.sql.connect.session",
    "pyspark.sql.connect.dataframe",
    "pyspark.sql.connect.functions",
    "pyspark.sql.connect.client.core",
    "pyspark.sql.connect.plan",
    "pyspark.sql.connect.catalog",
    "grpc._channel",
    "pyarrow.acero",
    "sqlite3",
    "mor.server",
)

# what an interpreter reads when it starts (a child of the host started long before): a
# command whose differ runs in its own process
_AT_START = ("LANG", "LC_ALL", "LC_CTYPE")


def _code_mark() -> tuple[int, int]:
    """(newest mtime, count) of mor's source files: the code the host imported, changed?"""
    import mor

    newest = count = 0
    todo = [os.path.realpath(p) for p in mor.__path__]
    seen: set[str] = set()
    while todo:
        d = todo.pop()
        if d in seen:
            continue
        seen.add(d)
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.name.endswith(".py"):
                count += 1
                newest = max(newest, e.stat().st_mtime_ns)
            elif e.is_dir() and not e.name.startswith((".", "__")):
                todo.append(os.path.realpath(e.path))
    return newest, count


def _declined(request: dict[str, object], mark: tuple[int, int]) -> str | None:
    """Why the host cannot run `request` as its own process would; None: it can."""
    if request.get("version") != _VERSION:
        return "another version of mor's host protocol"
    python = request.get("python")
    if (
        not isinstance(python, str)
        or os.path.realpath(python) != os.path.realpath(sys.executable)
        or request.get("prefix") != sys.prefix
    ):
        return f"another Python ({python} in {request.get('prefix')}; the host's: {sys.prefix})"
    env = request.get("env")
    if not isinstance(env, dict):
        return "no environment"
    for k in set(env) | set(os.environ):
        if (k.startswith("PYTHON") or k in _AT_START) and env.get(k) != os.environ.get(k):
            return f"{k} differs from the host's (read when Python starts)"
    cwd = request.get("cwd")
    if not isinstance(cwd, str) or not os.path.isdir(cwd):
        return "its working folder is gone"
    argv = request.get("argv")
    if not isinstance(argv, list) or not argv:
        return "no arguments"
    if _code_mark() != mark:
        return "mor's code changed since the host started (it starts again)"
    return None


def _child(request: dict[str, object], fds: list[int]) -> None:
    """In the forked child: become the command's process and run it (never returns)."""
    code = 1
    try:
        for s in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.set_wakeup_fd(-1)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(str(request["cwd"]))
        os.environ.clear()
        os.environ.update(request["env"])  # type: ignore[arg-type]
        import tempfile

        time.tzset()
        tempfile.tempdir = None
        _read_at_import()
        _stdio()
        sys.argv = [str(a) for a in request["argv"]]  # type: ignore[union-attr]
        from mor.cli import main

        main()  # ends the process (mor/cli.py _leave)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported on the command's stderr
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os._exit(code)


def _read_at_import() -> None:
    """What the host's imports read from the environment when imported, read again from the
    command's: pyiceberg's catalogs (PYICEBERG_*, ~/.pyiceberg.yaml) and fsspec's
    configuration (FSSPEC_*). The other modules read it when called."""
    modules = sys.modules
    if "pyiceberg.catalog" in modules:
        from pyiceberg.utils.config import Config

        modules["pyiceberg.catalog"]._ENV_CONFIG = Config()  # type: ignore[attr-defined]
    config = modules.get("fsspec.config")
    if config is not None:
        config.default_conf_dir = os.path.join(os.path.expanduser("~"), ".config/fsspec")
        config.conf_dir = os.environ.get("FSSPEC_CONFIG_DIR", config.default_conf_dir)
        config.conf.clear()
        config.set_conf_files(config.conf_dir, config.conf)
        config.set_conf_env(config.conf)


def _stdio() -> None:
    """Python's standard streams on descriptors 0, 1 and 2, as an interpreter starting there
    makes them (the same encoding and errors: the host's locale is the command's; stdout
    line-buffered on a terminal, stderr always)."""
    import io

    def text(fd: int, like: io.TextIOWrapper, write: bool, lines: bool) -> io.TextIOWrapper:
        raw = io.open(fd, "wb" if write else "rb", closefd=False)
        return io.TextIOWrapper(
            raw,  # type: ignore[arg-type]
            encoding=like.encoding,
            errors=like.errors,
            line_buffering=lines,
            write_through=write and lines,
        )

    sys.stdin = sys.__stdin__ = text(0, sys.__stdin__, False, False)  # type: ignore[misc]
    sys.stdout = sys.__stdout__ = text(1, sys.__stdout__, True, os.isatty(1))  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = text(2, sys.__stderr__, True, True)  # type: ignore[misc]


def _warm() -> None:
    import importlib

    for name in WARM:
        try:
            importlib.import_module(name)
        except ImportError:
            continue


def serve(folder: str) -> None:
    """Import what commands need, then run each command that asks in a child of its own,
    until SIGTERM (`mor server stop`). Single-threaded: a process with threads is not forked
    safely."""
    import gc
    import select
    import threading
    import warnings

    warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
    if sys.path and sys.path[0] in ("", os.getcwd()):
        # as for the `mor` script: its folder first, never the folder a command runs in
        sys.path[0] = os.path.dirname(sys.executable)
    _warm()
    if threading.active_count() != 1:
        raise SystemExit(f"mor host: {threading.active_count()} threads after its imports")
    gc.collect()
    gc.freeze()  # what the imports made is not touched by the children's collections
    mark = _code_mark()
    path = os.path.join(folder, SOCKET)
    tmp = f"{path}.{os.getpid()}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(tmp)
    finally:
        os.umask(old)
    listener.listen(16)
    os.replace(tmp, path)  # commands find the host only once it listens
    inode = os.stat(path).st_ino
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    stopping: list[int] = []
    signal.signal(signal.SIGCHLD, lambda s, f: None)
    signal.signal(signal.SIGTERM, lambda s, f: stopping.append(s))
    signal.signal(signal.SIGINT, lambda s, f: stopping.append(s))
    running: dict[int, socket.socket] = {}  # child pid -> its command's connection
    by_conn: dict[socket.socket, int] = {}
    print(f"mor host: pid {os.getpid()} ready at {path}", flush=True)
    restart = False
    interrupted_at = 0.0
    try:
        # a stale host (mor's code changed) takes no new command and ends once its children
        # are done: then it starts again on the new code. A stopped one (SIGTERM) interrupts
        # its children (nothing commits after it) and ends once they did, each command told
        # its exit code as usual, or after 20 s
        while running or not (stopping or restart):
            if stopping and not interrupted_at:
                interrupted_at = time.monotonic()
                _unlisten(listener, path, inode)
                for pid in running:
                    _signal(pid, signal.SIGINT)
            if interrupted_at and time.monotonic() - interrupted_at > 20:
                break
            try:
                listening = [] if (restart or stopping) else [listener]
                ready, _, _ = select.select(
                    [*listening, wake_r, *by_conn], [], [], 1.0 if stopping else None
                )
            except InterruptedError:
                continue
            if wake_r in ready:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                _reap(running, by_conn)
            for conn in [c for c in ready if c in by_conn]:
                _from_command(conn, running, by_conn)
            if listener in ready and _accept(listener, mark, running, by_conn):
                restart = True
                _unlisten(listener, path, inode)
    finally:
        _unlisten(listener, path, inode)
        for pid in running:  # whatever still runs is interrupted: nothing commits after it
            _signal(pid, signal.SIGINT)
    if restart and not stopping:
        print("mor host: mor's code changed: starting again", flush=True)
        os.execv(sys.executable, [sys.executable, "-m", "mor.host", folder])


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass


def _unlisten(listener: socket.socket, path: str, inode: int) -> None:
    """No new command finds this host (its socket file removed if it is still this one's)."""
    if listener.fileno() < 0:
        return
    try:
        if os.stat(path).st_ino == inode:
            os.remove(path)
    except OSError:
        pass
    listener.close()


def _accept(
    listener: socket.socket,
    mark: tuple[int, int],
    running: dict[int, socket.socket],
    by_conn: dict[socket.socket, int],
) -> bool:
    """Take one command: run it in a child, or decline it. True: the host's code is stale
    (it starts again once its children are done)."""
    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        if uid != os.getuid():
            conn.close()
            return False
        conn.settimeout(10)
        request, fds = _receive(conn, fds=3)
        conn.settimeout(None)
        if request is None or len(fds) != 3:
            raise OSError("an incomplete request")
        why = _declined(request, mark)
        if why is not None:
            _send(conn, {"declined": why})
            conn.close()
            return "code changed" in why
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            listener.close()
            for c in [conn, *by_conn]:
                c.close()
            _child(request, fds)
        running[pid] = conn
        by_conn[conn] = pid
        _STARTED[pid] = time.monotonic()
        _send(conn, {"pid": pid})
    except (OSError, ValueError) as e:
        print(f"mor host: a request failed: {e}", flush=True)
        try:
            conn.close()
        except OSError:
            pass
    finally:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
    return False


def _from_command(
    conn: socket.socket, running: dict[int, socket.socket], by_conn: dict[socket.socket, int]
) -> None:
    """A signal the command's process passes on, or its end: an interrupt to its child."""
    pid = by_conn[conn]
    try:
        data = conn.recv(64)
    except OSError:
        data = b""
    signums = list(data) if data else [signal.SIGINT]  # gone: its command is interrupted
    for signum in signums:
        if signum in _FORWARDED:
            _signal(pid, signum)
    if not data:
        del by_conn[conn]
        running[pid] = None  # type: ignore[assignment] - reaped later, nobody to tell
        conn.close()


_STARTED: dict[int, float] = {}
_COUNT = [0]


def _reap(running: dict[int, socket.socket], by_conn: dict[socket.socket, int]) -> None:
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = running.pop(pid, None)
        code = os.waitstatus_to_exitcode(status)
        code = code if code >= 0 else 128 - code
        took = time.monotonic() - _STARTED.pop(pid, time.monotonic())
        _COUNT[0] += 1
        # what ran is not logged (a statement's text may hold a secret): its pid, exit, time
        print(f"mor host: command {_COUNT[0]} (pid {pid}): exit {code} in {took:.2f} s", flush=True)
        if conn is None:  # its process went away
            continue
        by_conn.pop(conn, None)
        try:
            _send(conn, {"exit": code})
        except OSError:
            pass
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
