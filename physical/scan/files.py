"""Files read on the client (the Python process), never through the JVM: delete files for the
bitmap method, and the sizes of files the size check cannot `stat`. Local files are opened
directly; others through the table's own FileIO (pyiceberg's), as its metadata was, and their
requests tallied (planner/requests.py). Remote sizes come from listing the folders that hold
many of the files, else from one request per file."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from pyiceberg.io import FileIO

from mor.planner.errors import InternalError
from mor.planner.requests import count, in_context
from mor.planner.settings import current


def first_line(e: BaseException) -> str:
    """The first line of an error's text (Spark and pyarrow errors run to many lines)."""
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def local_path(path: str) -> str | None:
    """The local file a path names (plain, `file:/x` or `file:///x`), if it exists here."""
    local = _local_name(path)
    return local if local is not None and os.path.isfile(local) else None


def _io(io: FileIO | None, path: str) -> FileIO:
    """The table's FileIO, which came with the plan (IcebergScan.io): the catalog's, so that
    object stores and the credentials a REST catalog vends follow the metadata's path."""
    if io is None:
        raise InternalError(f"{path}: no FileIO came with the plan to read it through")
    return io


# a folder holding at least this many of the remote files to size is listed (one request per
# 1,000 objects in it) rather than each file asked for its size (one request each)
LIST_FROM = 16


def read_bytes(io: FileIO | None, path: str) -> bytes:
    """A file's bytes: directly when local, else through the table's FileIO."""
    local = local_path(path)
    if local is not None:
        with open(local, "rb") as f:
            return f.read()
    with _io(io, path).new_input(path).open() as f:
        return f.read()


def _local_name(path: str) -> str | None:
    """The local path of a plain, `file:/x` or `file:///x` path (whether it exists or not);
    None for another scheme or a `file://host/x`. String tests, not urlparse (6 us a path,
    and it would cut a name at `#` or `?`)."""
    if path.startswith("file:"):
        rest = path[5:]
        if rest.startswith("//"):
            if not rest.startswith("///"):
                return None  # file://host/x
            rest = rest[2:]
        return rest
    scheme = path.find("://")
    if scheme > 0 and path[:scheme].isalnum():
        return None
    return path


def file_sizes(io: FileIO | None, paths: Sequence[str]) -> dict[str, int | None]:
    """Size on storage of each path, None for a missing file (local by `stat`, others through
    the FileIO, a few at a time): the manifests record every file's size, so a difference
    means a replaced or truncated file."""
    out: dict[str, int | None] = {}
    remote = []
    for p in paths:
        local = _local_name(p)
        if local is None:
            remote.append(p)
            continue
        try:  # one stat (isfile and getsize were two); threads only contend for the GIL here
            st = os.stat(local)
            out[p] = st.st_size if stat.S_ISREG(st.st_mode) else None
        except (FileNotFoundError, NotADirectoryError):
            out[p] = None
    if remote:
        fio = _io(io, remote[0])
        listed, rest = _listed_sizes(fio, remote)
        out.update(listed)

        def size(p: str) -> int | None:
            try:
                return len(fio.new_input(p))
            except FileNotFoundError:
                return None

        with ThreadPoolExecutor(current().io_threads) as pool:
            out.update(zip(rest, pool.map(in_context(size), rest)))
    return out


def _listed_sizes(io: FileIO, paths: Sequence[str]) -> tuple[dict[str, int | None], list[str]]:
    """Sizes of the files in folders that hold at least LIST_FROM of `paths`, from one listing
    of each folder (in parallel): on an object store 20,000 data files in a few folders are
    tens of LIST requests, not 20,000 HEADs. Returns them and the paths left to size one by
    one (a FileIO other than pyiceberg's pyarrow one lists nothing)."""
    inner = getattr(io, "inner", io)
    if not hasattr(inner, "fs_by_scheme") or not hasattr(inner, "parse_location"):
        return {}, list(paths)
    folders: dict[str, list[str]] = {}
    for p in paths:
        folders.setdefault(p.rsplit("/", 1)[0], []).append(p)
    big = [d for d, ps in folders.items() if len(ps) >= LIST_FROM]
    rest = [p for d, ps in folders.items() if len(ps) < LIST_FROM for p in ps]
    if not big:
        return {}, rest
    from pyarrow.fs import FileSelector, FileType

    def listing(folder: str) -> dict[str, int]:
        scheme, netloc, path = inner.parse_location(folder + "/", inner.properties)
        fs = inner.fs_by_scheme(scheme, netloc)
        infos = fs.get_file_info(FileSelector(path.rstrip("/"), allow_not_found=True))
        count("LIST", max(1, -(-len(infos) // 1000)))
        return {i.base_name: i.size for i in infos if i.type == FileType.File}

    out: dict[str, int | None] = {}
    with ThreadPoolExecutor(current().io_threads) as pool:
        for folder, sizes in zip(big, pool.map(in_context(listing), big)):
            for p in folders[folder]:
                out[p] = sizes.get(p.rsplit("/", 1)[1])
    return out, rest


def read_range(io: FileIO | None, path: str, offset: int, length: int) -> bytes:
    """`length` bytes of a file from `offset` (a deletion vector's blob in its Puffin file):
    only those bytes are read, locally or through the table's FileIO."""
    local = local_path(path)
    if local is not None:
        with open(local, "rb") as f:
            f.seek(offset)
            return f.read(length)
    with _io(io, path).new_input(path).open() as f:
        f.seek(offset)
        return f.read(length)
