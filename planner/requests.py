"""Requests mor makes to object stores from the driver (the Python process): every remote
file opened (GET), sized (HEAD) or folder listed (LIST, one per page of 1,000), whatever
reads it: table metadata, manifest lists and manifests at planning; sizes, position delete
files and deletion vectors when the DataFrame is built. Local files are not counted.

Counted twice: in the process's total (`REQUESTS`), and in the tally of each call counting
them (`counting()`: EXPLAIN ANALYZE, `metrics()`), held by a context variable, so that two
calls running at once in one process (threads of a server) each count their own. The thread
pools that read for a call run in its context (`in_context`). Spark's own reads (data files,
on the executors) are Spark's to count.
"""

from __future__ import annotations

import contextvars
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

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

    def figures(self) -> dict[str, int]:
        with self._lock:
            return {k: self._n[k] for k in KINDS}


REQUESTS = Tally()  # the process's total
_CALLS: contextvars.ContextVar[tuple[Tally, ...]] = contextvars.ContextVar(
    "mor_request_tallies", default=()
)
T = TypeVar("T")


def since(before: Counter[str]) -> dict[str, int]:
    """The process's requests since `before` (a `REQUESTS.snapshot()`): every call's."""
    now = REQUESTS.snapshot()
    return {k: now[k] - before[k] for k in KINDS}


def count(kind: str, n: int = 1) -> None:
    """One request (or `n`) of `kind`: to the process's total and each call counting."""
    REQUESTS.add(kind, n)
    for tally in _CALLS.get():
        tally.add(kind, n)


@contextmanager
def counting() -> Iterator[Tally]:
    """The requests made inside (in this context, and the pools run `in_context` of it)."""
    tally = Tally()
    token = _CALLS.set((*_CALLS.get(), tally))
    try:
        yield tally
    finally:
        _CALLS.reset(token)


def in_context(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` run in a copy of the caller's context, for a thread pool: its requests are counted
    for the calls counting in the caller (and the settings made current there apply)."""
    ctx = contextvars.copy_context()
    return lambda *args: ctx.copy().run(fn, *args)


def is_remote(path: str) -> bool:
    scheme = path.find("://")
    return scheme > 0 and not path.startswith("file:")


class _CountedInput(InputFile):
    def __init__(self, inner: InputFile) -> None:
        super().__init__(inner.location)
        self._inner = inner

    def __len__(self) -> int:
        count("HEAD")
        return len(self._inner)

    def exists(self) -> bool:
        count("HEAD")
        return self._inner.exists()

    def open(self, seekable: bool = True) -> Any:
        count("GET")
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
