"""Requests mor makes to object stores from the driver (the Python process): every remote
file opened (GET), sized (HEAD) or folder listed (LIST, one per page of 1,000), whatever
reads it: table metadata, manifest lists and manifests at planning; sizes, position delete
files and deletion vectors when the DataFrame is built. Local files are not counted.

A process-wide tally (`REQUESTS`); EXPLAIN ANALYZE and `metrics()` report the difference
over the call. Spark's own reads (data files, on the executors) are Spark's to count.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from pyiceberg.io import FileIO, InputFile, OutputFile

KINDS = ("GET", "HEAD", "LIST")


class Tally:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._n: Counter[str] = Counter()

    def add(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self._n[kind] += n

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self._n)


REQUESTS = Tally()


def since(before: Counter[str]) -> dict[str, int]:
    now = REQUESTS.snapshot()
    return {k: now[k] - before[k] for k in KINDS}


def is_remote(path: str) -> bool:
    scheme = path.find("://")
    return scheme > 0 and not path.startswith("file:")


class _CountedInput(InputFile):
    def __init__(self, inner: InputFile) -> None:
        super().__init__(inner.location)
        self._inner = inner

    def __len__(self) -> int:
        REQUESTS.add("HEAD")
        return len(self._inner)

    def exists(self) -> bool:
        REQUESTS.add("HEAD")
        return self._inner.exists()

    def open(self, seekable: bool = True) -> Any:
        REQUESTS.add("GET")
        return self._inner.open(seekable=seekable)


class CountingFileIO(FileIO):
    """A FileIO that tallies the requests its remote files cost (one per open and size)."""

    def __init__(self, inner: FileIO) -> None:
        super().__init__(properties=inner.properties)
        self.inner = inner

    def new_input(self, location: str) -> InputFile:
        f = self.inner.new_input(location)
        return _CountedInput(f) if is_remote(location) else f

    def new_output(self, location: str) -> OutputFile:
        return self.inner.new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        self.inner.delete(location)
