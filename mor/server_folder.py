"""Where `mor server` keeps its state and the command host its socket (the standard library
alone: the `mor` command's first step reads it, mor/host.py `forward`)."""

from __future__ import annotations

import os
import tempfile

SOCKET = "host.sock"  # the command host's socket in that folder


def folder_path() -> str:
    """`$MOR_SERVER_DIR`, else `<tmp>/mor-<uid>` (server.folder makes it and checks that it is
    this user's alone)."""
    return os.environ.get("MOR_SERVER_DIR") or os.path.join(
        tempfile.gettempdir(), f"mor-{os.getuid()}"
    )


def users_alone(st: os.stat_result) -> bool:
    """Whether a folder (its stat) is this user's alone: owned by this user, and neither its
    group nor others may write in it (a shared /tmp is not)."""
    return st.st_uid == os.getuid() and not st.st_mode & 0o022
