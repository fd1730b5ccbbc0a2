"""How the CLI and the shell print and write results: rows as a table, CSV or JSON lines, and
files replaced atomically (a failed query leaves nothing half-written)."""

from __future__ import annotations

import json
import os
from typing import Any

from mor.options import UsageError


def format_rows(cols: list[str], rows: list[Any], fmt: str) -> str:
    """`rows` under `cols` as `fmt`: "table" (aligned, NULL shown), "csv" or "json" (a line a
    row; nested rows as objects)."""
    if fmt == "json":
        return "".join(
            json.dumps(dict(zip(cols, [_plain(v) for v in r])), default=str) + "\n" for r in rows
        )
    if fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")  # Unix line ends, as Spark writes CSV
        w.writerow(cols)
        for r in rows:
            w.writerow(["" if v is None else _text(v) for v in r])
        return buf.getvalue()
    cells = [[("NULL" if v is None else _text(v)) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [line, "| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths)) + " |", line]
    out += ["| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |" for r in cells]
    out += [line, f"({len(rows)} row{'s' if len(rows) != 1 else ''})", ""]
    return "\n".join(out)


def _text(v: Any) -> Any:
    """A value as Spark prints it where Python's spelling differs (booleans: true, false)."""
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _plain(v: Any) -> Any:
    return v.asDict(recursive=True) if hasattr(v, "asDict") else v


def write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def replace_atomically(out: str, overwrite: bool, write: Any) -> None:
    """`write(tmp)` writes next to `out` under a temporary name, which then takes `out`'s
    place: a failed query leaves nothing half-written, and what was there stays until then."""
    import shutil
    import uuid

    out = os.path.abspath(out)
    tmp = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.mor-{uuid.uuid4().hex[:8]}")
    try:
        write(tmp)
        old = None
        if os.path.lexists(out):
            if not overwrite and not (os.path.isdir(out) and not os.listdir(out)):
                raise UsageError(f"--output {out} appeared while the query ran: not replaced")
            old = f"{tmp}.old"
            os.rename(out, old)
        os.rename(tmp, out)
        if old is not None:
            shutil.rmtree(old) if os.path.isdir(old) else os.remove(old)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
        elif os.path.exists(tmp):
            os.remove(tmp)
