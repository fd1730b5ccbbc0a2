"""The path string Spark reports in `_metadata.file_path` for a file it reads by path.

Only reads by path need it (the fallback of physical/scan/reads.py, when file lists cannot serve):
there rows of files whose sizes collide are told apart by that path. Spark reports a file as
its Hadoop URI (`file:/x` for a local `/x` or `file:///x`, escapes such
as `%20`), which mor needs when rows name their file by path. It is taken from Spark itself,
without the JVM: each read DataFrame's `inputFiles()` (one call per read, made only when a path
is asked for; on a classic session fetched as one string, physical/scan/classic.py), matched to the
paths mor gave it after decoding escapes and normalising slashes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from urllib.parse import unquote

from pyspark.sql import DataFrame

from mor.physical.scan.classic import input_files
from mor.planner.errors import InternalError


def _normal(path: str) -> str:
    """One comparable form of a path: local ones as file:/abs, duplicate slashes collapsed."""
    if path.startswith("file:"):
        path = "file:/" + path[len("file:") :].lstrip("/")
    elif "://" not in path:
        path = "file:" + os.path.abspath(path)
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*:(?://[^/]*)?)(.*)$", path)
    head, rest = (m.group(1), m.group(2)) if m else ("", path)
    return head + re.sub(r"/+", "/", rest).rstrip("/")


class SparkPaths:
    """mor's path -> Spark's form of it, for files of DataFrames registered with `learn`."""

    def __init__(self) -> None:
        self._pending: list[tuple[DataFrame, list[str], list[str]]] = []
        self._known: dict[str, str] = {}

    def learn(self, df: DataFrame, paths: Sequence[str], given: Sequence[str] = ()) -> None:
        """`df` reads exactly `paths` (given to Spark as `given`, the same files under a
        table's store scheme, when not empty); Spark is asked for their form only if one is
        needed."""
        self._pending.append((df, list(paths), list(given) or list(paths)))

    def __call__(self, path: str) -> str:
        hit = self._known.get(path)
        if hit is not None:
            return hit
        while self._pending and path not in self._known:
            df, paths, given = self._pending.pop()
            # inputFiles() writes a local file file:///x where _metadata.file_path says file:/x
            forms = [re.sub(r"^file:///", "file:/", s) for s in input_files(df)]
            listed = {_normal(unquote(s)): s for s in forms}
            for p, g in zip(paths, given, strict=True):
                form = listed.get(_normal(g))
                if form is not None:
                    self._known[p] = form
        if path not in self._known:
            raise InternalError(f"Spark did not list {path} among the files it reads")
        return self._known[path]
