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
