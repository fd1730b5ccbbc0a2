"""The `mor` command's first step: a command runs in the command host when `mor server`
started one (mor/host.py: mor's imports paid once, not by every command), else here. This
module and `import mor` import the standard library alone, so asking the host costs a few
milliseconds."""

from __future__ import annotations

import os
import sys


def main() -> None:
    from mor.host import forward

    code = forward(sys.argv[1:])
    if code is None:
        from mor.cli import main as run_here

        run_here()  # ends the process (mor/cli.py _leave)
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    main()
