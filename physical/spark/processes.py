"""Whether a process is still the one a file recorded: the launcher logs of session.py and
the server mor/server.py starts. Imports no pyspark (`mor server status` reads it)."""

from __future__ import annotations

import os


def start_ticks(pid: int) -> int:
    """The process's start time (field 22 of /proc/PID/stat, in clock ticks since boot), which
    tells a reused pid from the process recorded; 0 where there is no /proc to read it; -1:
    no such process, or one that has ended (a zombie not yet reaped by its parent)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return -1
        return 0 if alive(pid) else -1  # no /proc (macOS): alive or not, no start time
    except OSError:
        return 0
    # the command name (field 2) is in parentheses and may hold spaces
    fields = text[text.rfind(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return -1
    return int(fields[19])


def alive(pid: int) -> bool:
    """A process of that pid exists (another user's too: a signal it refuses still says so)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
