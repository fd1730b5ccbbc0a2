"""What the tests' servers (SeaweedFS, PostgreSQL, Trino: tests/objectstore.py,
tests/pgcatalog.py, tests/trino.py) share: free ports on 127.0.0.1, the tail of a server's
log, and stopping a server process with its log and folder."""

from __future__ import annotations

import shutil
import socket
import subprocess
from typing import IO


def free_ports(n: int) -> list[int]:
    """`n` distinct ports of 127.0.0.1 free now (held together while chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def log_tail(path: str, size: int = 600) -> str:
    try:
        with open(path, "rb") as f:
            return f.read()[-size:].decode(errors="replace")
    except OSError:
        return ""


def stop(
    proc: subprocess.Popen | None,
    log: IO[bytes] | None,
    folder: str,
    timeout: float = 20,
    remove: bool = True,
) -> None:
    """Terminate `proc` (killed after `timeout` seconds), close its log, remove `folder`."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    if log is not None:
        log.close()
    if folder and remove:
        shutil.rmtree(folder, ignore_errors=True)
